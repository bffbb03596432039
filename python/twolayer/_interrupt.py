"""Ctrl-C in the core: every long computation stops within a fraction of a second and keeps what it computed.

Convention (the same for every entry point): the call raises :class:`Interrupted`, a ``KeyboardInterrupt``, so
that scripts and notebooks stop as usual; its attribute ``partial`` holds the public result object the call would
have returned, built from what was finished (runs, batch members, records), with status ``"interrupted"`` where
something was cut short; ``partial`` is None for calls that have nothing partial to give (kernels, risk, gradient)
and when the signal came before anything was finished. The same holds when the signal lands in a call's Python
code rather than in the core (refining and classifying search end points, copying a scan's groups, between two
core calls): :func:`keep_partial` turns the bare ``KeyboardInterrupt`` into :class:`Interrupted` with what was
finished, so that an expensive run that had ended is never lost to the timing of the signal.
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


@contextmanager
def keep_partial(finished: Callable[[], Any]) -> Iterator[None]:
    """Inside the block, a Ctrl-C that lands in Python code (a bare ``KeyboardInterrupt``, e.g. while results are
    classified or assembled after the core's runs ended), or in a core call with nothing partial of its own,
    raises :class:`Interrupted` with ``partial = finished()``: what was finished so far (None if nothing). An
    :class:`Interrupted` with a partial result passes unchanged."""
    try:
        yield
    except Interrupted as exc:
        if exc.partial is None:
            exc.partial = finished()
        raise
    except KeyboardInterrupt as exc:
        err = Interrupted("interrupted (Ctrl-C); what was computed so far is in .partial")
        err.partial = finished()
        raise err.with_traceback(exc.__traceback__) from None
