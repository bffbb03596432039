"""The default output grid shared by the ODE and SGD engines, so that their results align point by point.

Convention: with ``n`` output times up to ``t_max`` the grid is ``t_k = k * t_max / (n - 1)``, k = 0 .. n - 1,
each time the correctly rounded double of that exact rational number (computed with :class:`fractions.Fraction`,
not by ``np.linspace``, whose ``k * step`` products can be off by an ulp). SGD records at whole steps, t = steps / d
(a correctly rounded division), at step ``round(t_k * d)``: whenever ``t_max * d / (n - 1)`` is a whole number of
steps the two engines produce bitwise identical times, so that ``ode.to_xarray() - sgd.to_xarray()`` keeps every
point under xarray's default (inner) alignment.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import INT32_MAX, as_float_array, integer, positive

__all__ = ["output_times", "record_steps"]


def output_times(t_max: float, n_points: int) -> NDArray[np.float64]:
    """The shared default grid: ``n_points`` >= 2 equally spaced times from 0 to ``t_max`` (both included),
    each correctly rounded (see the module docstring)."""
    return _exact_grid(float(t_max), int(n_points)).copy()


@functools.lru_cache(maxsize=64)
def _exact_grid(t_max: float, n_points: int) -> NDArray[np.float64]:
    """:func:`output_times`, computed once per (t_max, n_points): a scan asks for the same grid once per group.

    Vectorised: with t_max = num / 2^j, every product t_max * k is an exact double when the odd part of num
    times n_points - 1 stays below 2^53 (t_max = 1, 300, 0.5, 1e4, ...), and then one IEEE division by
    n_points - 1 is the correctly rounded value; otherwise exact integer division (correctly rounded in Python),
    element by element in NumPy's object loop."""
    last = n_points - 1
    num, den = Fraction(t_max).as_integer_ratio()
    odd = num >> ((num & -num).bit_length() - 1) if num else 0
    k = np.arange(n_points, dtype=np.float64)
    if odd * last < 2**53 and math.isfinite(t_max * last):
        return (t_max * k) / last
    exact = (np.arange(n_points, dtype=object) * num) / (den * last)
    return exact.astype(np.float64)


def record_steps(d: int, t_max: float | None, times: ArrayLike | None, n_records: int) -> NDArray[np.int64]:
    """The steps SGD records at in dimension ``d``: ``n_records`` times from 0 to ``t_max`` (t = steps / d, each rounded
    to the nearest step, repeats dropped), or the requested ``times`` (strictly increasing, on distinct steps)."""
    if times is None:
        if t_max is None:
            raise ValueError("t_max: give t_max (or times)")
        tm = positive(t_max, "t_max")
        n_records = integer(n_records, "n_records", 2, INT32_MAX)
        steps = np.unique(np.round(np.linspace(0.0, tm, n_records) * d).astype(np.int64))
        return steps
    tt = as_float_array(times, "times", ndim=1)
    if tt.size == 0 or np.any(tt < 0) or np.any(np.diff(tt) <= 0):
        raise ValueError("times: expected a non-empty, strictly increasing array of times >= 0")
    if t_max is not None and tt[-1] > positive(t_max, "t_max") + 0.5 / d:
        raise ValueError(f"times: the last time {tt[-1]} exceeds t_max={t_max}")
    steps = np.round(tt * d).astype(np.int64)
    if np.any(np.diff(steps) <= 0):
        raise ValueError(f"times: two requested times fall on the same step (spacing below 1/d = {1 / d:g})")
    return steps
