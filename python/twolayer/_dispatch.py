"""Run-time dispatch between the instruction levels of the compiled core.

The C++ core is compiled once per instruction level into its own extension module ``twolayer._core_<level>`` (the
same sources, different compiler flags; see CMakeLists.txt). On x86-64 the levels are ``baseline`` (SSE2),
``v2`` (SSE4.2), ``v3`` (AVX2 + FMA) and ``v4`` (AVX-512); elsewhere there is one, ``baseline``, and a local
``TWOLAYER_NATIVE`` build has one, ``native``. At import, :mod:`twolayer._core` (python/twolayer/_core.py)
picks the highest compiled level the CPU supports (CPUID, :mod:`twolayer._cpu`), or the one named by the
environment variable ``TWOLAYER_SIMD`` (``baseline|v2|v3|v4|native``; ``auto`` or unset: the best), and replaces
itself in ``sys.modules`` by it, so ``from twolayer import _core`` gives the chosen extension. Its
``build_info()`` names the level in use.

Why separately compiled modules rather than function multi-versioning (``target_clones``): every loop of the
core, including the OpenMP-outlined regions and inlined header code, is compiled for the level, with no
annotation to remember in new code; each level is its own shared object with hidden symbols, so no inline
function or template instance compiled for a higher level can leak into a lower one; and the loader is plain
Python. The price is build time and wheel size (one core per level).

Levels differ only in the instructions the compiler may use: results agree to rounding (FMA contraction from
``v3`` on), bitwise where the instructions are the same (tests/test_dispatch.py documents the tolerances).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

from . import _cpu

ENV = "TWOLAYER_SIMD"
_ORDER = ("baseline", "v2", "v3", "v4", "native")


def compiled() -> tuple[str, ...]:
    """The instruction levels compiled into this installation, lowest first."""
    return tuple(sorted(_cpu.compiled.split(","), key=_ORDER.index))


def supported() -> tuple[str, ...]:
    """The instruction levels this CPU can run (a native build runs on the machine that built it)."""
    return (*_cpu.supported(), "native")


def select(requested: str | None = None) -> str:
    """The level to load: ``requested`` (default: the environment variable TWOLAYER_SIMD) if it is compiled in and
    supported, else the highest compiled level the CPU supports. Raises ImportError for a level that is unknown,
    not compiled in or not supported by this CPU."""
    if requested is None:
        requested = os.environ.get(ENV, "")
    requested = requested.strip().lower()
    built, cpu = compiled(), supported()
    if requested in ("", "auto"):
        usable = [lvl for lvl in built if lvl in cpu]
        if not usable:
            raise ImportError(f"twolayer: none of the compiled instruction levels {', '.join(built)} runs on this "
                              f"CPU (it supports {', '.join(cpu[:-1])}); rebuild from source")
        return usable[-1]
    if requested not in _ORDER:
        raise ImportError(f"{ENV} must be one of auto, {', '.join(_ORDER)}; got {requested!r}")
    if requested not in built:
        raise ImportError(f"{ENV}={requested}: this build has the instruction levels {', '.join(built)}")
    if requested not in cpu:
        raise ImportError(f"{ENV}={requested}: this CPU supports only {', '.join(cpu[:-1])}")
    return requested


def load() -> ModuleType:
    """Imports the extension module of the level :func:`select` chooses."""
    return importlib.import_module(f"{__package__}._core_{select()}")
