"""Argument checks shared by the public API: every error names the argument and what was expected."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import _core

_THREAD_LIMIT: int = int(_core.build_info()["thread_limit"])


def as_float_array(x: Any, name: str, ndim: int | None = None, finite: bool = True) -> NDArray[np.float64]:
    """``x`` as a C-contiguous float64 array, checked for dimension and finiteness."""
    try:
        arr = np.ascontiguousarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}: expected an array of real numbers ({exc})") from None
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array, got shape {arr.shape}")
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: entries must be finite (got NaN or inf)")
    return arr


def n_threads_arg(n_threads: Any) -> int:
    """None -> 0 (the OpenMP default, so OMP_NUM_THREADS applies); otherwise a positive integer, capped at the
    core's thread limit (4 threads per processor: more only costs)."""
    if n_threads is None:
        return 0
    if isinstance(n_threads, (bool, np.bool_)) or not isinstance(n_threads, (int, np.integer)) or n_threads < 1:
        raise ValueError(f"n_threads: expected None or a positive integer, got {n_threads!r}")
    return min(int(n_threads), _THREAD_LIMIT)


def positive(x: Any, name: str, allow_zero: bool = False) -> float:
    """``x`` as a finite float > 0 (or >= 0)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a real number, got {x!r}") from None
    if not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name}: expected a finite number {'>=' if allow_zero else '>'} 0, got {x!r}")
    return v
