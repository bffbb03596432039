"""Ctrl-C in the core: every long computation stops within a fraction of a second and keeps what it computed.

Convention (the same for every entry point): the call raises :class:`Interrupted`, a ``KeyboardInterrupt``, so
that scripts and notebooks stop as usual; its attribute ``partial`` holds the public result object the call would
have returned, built from what was finished (runs, batch members, records), with status ``"interrupted"`` where
something was cut short; ``partial`` is None for calls that have nothing partial to give (kernels, risk, gradient).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import _core

Interrupted = _core.Interrupted


@contextmanager
def partial_result(build: Callable[[Any], Any]) -> Iterator[None]:
    """Inside the block, an :class:`Interrupted` from the core gets ``partial = build(raw partial)``."""
    try:
        yield
    except Interrupted as exc:
        if exc.partial is not None:
            exc.partial = build(exc.partial)
        raise
