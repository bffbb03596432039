"""Progress bars for long core calls: the core counts what it finished and the binding's polling loop (the one
that watches for Ctrl-C) hands the count to a callback every few milliseconds; tqdm.auto draws it, so that
notebooks get a widget. Off by default in the API, on in the CLI."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_bar(enabled: bool, total: int, unit: str, desc: str,
                 unit_scale: bool = False) -> Iterator[Callable[[int], None] | None]:
    """A callback ``update(done)`` that moves a tqdm bar to ``done`` of ``total`` (None when not ``enabled``);
    ``unit_scale`` prints large counts as 1.2M."""
    if not enabled:
        yield None
        return
    from tqdm.auto import tqdm

    with tqdm(total=total, unit=unit, unit_scale=unit_scale, desc=desc) as bar:

        def update(done: int) -> None:
            bar.update(done - bar.n)

        yield update
