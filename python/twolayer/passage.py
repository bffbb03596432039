"""First-passage times of the excess risk: when a run first reaches a level, and the statistics of many runs.

The passage of a run is the first time t with R(t) <= level * R(0) (``relative=True``; Arnaboldi et al.'s escape is
``level = 1 - T``) or R(t) <= level (``relative=False``), R the recorded excess risk. Between two records it is
located by linear interpolation of R in t (exact on the records; for the ODE's early stop ``risk_rtol`` /
``risk_tol`` at the same level the last record *is* the crossing, located on the dense output, so the passage is
exact there). A run that never reaches the level is **censored**: its time is NaN. Censoring is reported, never
imputed: :class:`FirstPassage` gives the statistics of the runs that crossed together with the censored count,
and its quantiles count censored runs as later than every crossing (exact when runs are censored only by the end
of the run, t_max, after all observed crossings; otherwise a statement about the crossed runs only).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import as_float_array, boolean, real

__all__ = ["FirstPassage", "first_passage", "first_passage_time", "run_passage"]


def _level(level: Any, relative: Any) -> tuple[float, bool]:
    rel = boolean(relative, "relative")
    lv = real(level, "level")
    if rel and not lv > 0:
        raise ValueError(f"level: expected a fraction > 0 of the initial risk, got {lv}")
    return lv, rel


def first_passage_time(t: ArrayLike, risk: ArrayLike, level: float, relative: bool = True) -> float:
    """The first time the recorded ``risk`` reaches the level (see the module docstring), linearly interpolated
    between records; NaN if it never does (censored) or nothing was recorded.

    Parameters
    ----------
    t : array_like, shape (T,)
        Recorded times.
    risk : array_like, shape (T,)
        Recorded excess risk.
    level : float
        The level: a fraction of R(0) (``relative``, > 0) or an absolute risk.
    relative : bool, default True
        Whether ``level`` is relative to R(0).

    Returns
    -------
    float

    Examples
    --------
    >>> fpt = tl.passage.first_passage_time
    >>> fpt([0, 1, 2, 3], [1.0, 0.8, 0.4, 0.2], level=0.5)   # R = 0.5 between t = 1 and 2
    1.75
    >>> fpt([0, 1, 2, 3], [1.0, 0.8, 0.4, 0.2], level=0.3, relative=False)
    2.5
    >>> fpt([0, 1, 2], [1.0, 0.9, 0.8], level=0.5)            # censored
    nan
    """
    lv, rel = _level(level, relative)
    ts = as_float_array(t, "t", ndim=1, scalar_ok=False)
    rs = as_float_array(risk, "risk", ndim=1, scalar_ok=False)
    if ts.shape != rs.shape:
        raise ValueError(f"risk: expected the shape of t {ts.shape}, got {rs.shape}")
    if np.any(np.diff(ts) < 0):
        raise ValueError("t: expected non-decreasing record times")
    if ts.size == 0:
        return math.nan
    thr = lv * rs[0] if rel else lv
    below = np.flatnonzero(rs <= thr)
    if below.size == 0:
        return math.nan
    k = int(below[0])
    if k == 0 or rs[k] == thr:
        return float(ts[k])
    r0, r1 = rs[k - 1], rs[k]
    return float(ts[k - 1] + (ts[k] - ts[k - 1]) * (r0 - thr) / (r0 - r1))


@dataclass(frozen=True)
class FirstPassage:
    """First-passage times of R runs: ``times`` (R,) with NaN where censored, ``censored`` (R,) bool.

    ``mean()``, ``std()``, ``sem()`` are over the runs that crossed (``n_crossed`` of them; NaN if none): read
    them together with ``fraction_censored``. ``quantile(q)`` counts censored runs as +inf (later than every
    crossing): it is finite while q <= the crossed fraction, +inf beyond.

    Attributes
    ----------
    times : ndarray, shape (R,)
        First-passage times, NaN where censored.
    censored : ndarray of bool, shape (R,)
        Runs that never reached the level.
    level : float
        The level.
    relative : bool
        Whether the level is a fraction of R(0).

    Examples
    --------
    >>> fp = tl.passage.FirstPassage(times=np.array([1.0, 2.0, np.nan, 4.0]),
    ...                              censored=np.array([False, False, True, False]), level=0.5, relative=True)
    >>> fp
    FirstPassage(n=4, censored=1, mean=2.33333, sem=0.882)
    >>> fp.n_crossed, fp.fraction_censored, fp.crossed.tolist()
    (3, 0.25, [1.0, 2.0, 4.0])
    >>> fp.quantile([0.0, 0.5, 1.0]).tolist()
    [1.0, 3.0, inf]
    """

    times: NDArray[np.float64]
    censored: NDArray[np.bool_]
    level: float
    relative: bool

    @property
    def n(self) -> int:
        """Number of runs."""
        return int(self.times.shape[0])

    @property
    def n_censored(self) -> int:
        """Runs that never reached the level."""
        return int(np.count_nonzero(self.censored))

    @property
    def n_crossed(self) -> int:
        """Runs that reached the level."""
        return self.n - self.n_censored

    @property
    def fraction_censored(self) -> float:
        """n_censored / n (NaN without runs)."""
        return self.n_censored / self.n if self.n else math.nan

    @property
    def crossed(self) -> NDArray[np.float64]:
        """The times of the runs that crossed."""
        return self.times[~self.censored]

    def mean(self) -> float:
        """Mean over the crossed runs (NaN if none)."""
        c = self.crossed
        return float(np.mean(c)) if c.size else math.nan

    def std(self) -> float:
        """Sample standard deviation (ddof = 1) over the crossed runs."""
        c = self.crossed
        return float(np.std(c, ddof=1)) if c.size > 1 else math.nan

    def sem(self) -> float:
        """Standard error of :meth:`mean`: std / sqrt(n_crossed)."""
        c = self.crossed
        return self.std() / math.sqrt(c.size) if c.size > 1 else math.nan

    def quantile(self, q: ArrayLike) -> NDArray[np.float64] | float:
        """Empirical quantile(s) (linear interpolation) with censored runs at +inf."""
        qs = np.asarray(q, dtype=np.float64)
        if np.any(~(qs >= 0) | ~(qs <= 1)):
            raise ValueError(f"q: expected quantiles in [0, 1], got {q!r}")
        if self.n == 0:
            return math.nan if qs.ndim == 0 else np.full(qs.shape, math.nan)
        x = np.sort(np.where(self.censored, np.inf, self.times))
        pos = qs * (self.n - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, self.n - 1)
        frac = pos - lo
        with np.errstate(invalid="ignore"):
            out = np.where(frac == 0, x[lo], x[lo] + frac * (x[hi] - x[lo]))
        out = np.where(np.isnan(out), np.inf, out)
        return float(out) if qs.ndim == 0 else out

    def __repr__(self) -> str:
        return (f"FirstPassage(n={self.n}, censored={self.n_censored}, mean={self.mean():.6g}, "
                f"sem={self.sem():.3g})")


def _own_stop(run: Any, level: float, relative: bool) -> float:
    """The run's own located crossing (``stop_time`` of a "converged" run) when its early-stop threshold
    max(risk_tol, risk_rtol R(0)) is this level; NaN otherwise."""
    if getattr(run, "status", None) != "converged" or not len(run.risk):
        return math.nan
    meta = getattr(run, "meta", {})
    tol, rtol = meta.get("risk_tol", math.nan), meta.get("risk_rtol", math.nan)
    r0 = float(run.risk[0])
    own = max(tol if tol == tol and tol > 0 else -math.inf, rtol * r0 if rtol == rtol and rtol > 0 else -math.inf)
    thr = level * r0 if relative else level
    return float(run.stop_time) if math.isfinite(own) and abs(own - thr) <= 1e-12 * abs(thr) else math.nan


def run_passage(run: Any, level: float, relative: bool = True) -> float:
    """First passage of one trajectory: its own located crossing when it stopped early at this level (the ODE's
    root on the dense output, the SDE's interpolation between steps), else :func:`first_passage_time`.

    Parameters
    ----------
    run : Trajectory
        Anything with ``t`` and ``risk`` arrays (``status``, ``stop_time`` and ``meta`` are used when present).
    level : float
        The level.
    relative : bool, default True
        Whether ``level`` is a fraction of R(0).

    Returns
    -------
    float
        NaN when censored.

    Examples
    --------
    >>> ov = tl.ode.plateau_overlaps(K=2, M=2)
    >>> run = tl.ode.integrate(ov, "erf", lr=1.0, t_max=300, risk_rtol=0.01)
    >>> run.status, tl.passage.run_passage(run, 0.01) == run.stop_time
    (<Status.converged: 'converged'>, True)
    """
    own = _own_stop(run, level, relative)
    return own if own == own else first_passage_time(run.t, run.risk, level, relative)


def first_passage(runs: Iterable[Any], level: float, relative: bool = True) -> FirstPassage:
    """:class:`FirstPassage` of trajectories (anything with ``t`` and ``risk`` arrays).

    Parameters
    ----------
    runs : iterable of Trajectory
        E.g. an SGD or SDE :class:`twolayer.sgd.Ensemble`, or ODE trajectories.
    level : float
        The level.
    relative : bool, default True
        Whether ``level`` is a fraction of R(0).

    Returns
    -------
    FirstPassage

    Examples
    --------
    >>> student, teacher = tl.networks.teacher_student(K=2, M=2, d=100, activation="erf", seed=0)
    >>> ens = tl.sgd.simulate(student, teacher, lr=0.5, t_max=20, n_records=21, seeds=6)
    >>> fp = tl.passage.first_passage(ens, 0.5)
    >>> fp.n, fp.n_censored
    (6, 0)
    >>> print(f"{fp.mean():.6f} +- {fp.sem():.6f}")
    1.551512 +- 0.080708
    """
    lv, rel = _level(level, relative)
    times = np.array([run_passage(r, lv, rel) for r in runs], dtype=np.float64)
    return FirstPassage(times=times, censored=np.isnan(times), level=lv, relative=rel)
