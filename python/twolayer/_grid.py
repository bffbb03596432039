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
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

__all__ = ["output_times"]


def output_times(t_max: float, n_points: int) -> NDArray[np.float64]:
    """The shared default grid: ``n_points`` >= 2 equally spaced times from 0 to ``t_max`` (both included),
    each correctly rounded (see the module docstring)."""
    return _exact_grid(float(t_max), int(n_points)).copy()


@functools.lru_cache(maxsize=64)
def _exact_grid(t_max: float, n_points: int) -> NDArray[np.float64]:
    """:func:`output_times`, computed once per (t_max, n_points): a scan asks for the same grid once per group."""
    T = Fraction(t_max)
    last = n_points - 1
    return np.array([float(T * k / last) for k in range(n_points)], dtype=np.float64)
