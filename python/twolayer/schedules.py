"""Learning-rate schedules: one multiplier s(t) >= 0 of the learning rates, shared by every engine.

An engine given ``schedule=s`` uses ``lr(t) = lr s(t)`` and ``lr_readout(t) = lr_readout s(t)``, with t its
own time: iterations for :func:`twolayer.population.descend` (and
:func:`twolayer.landscape.step_gradient_flow`), t = steps / d for :func:`twolayer.sgd.simulate` (step n uses
s(n / d)) and :func:`twolayer.ode.integrate` (continuous t, evaluated inside the C++ right-hand side, so the
ODE and SGD runs of one schedule describe the same process). Per-run / per-member base rates (SGD grids, ODE
batches) share the schedule. With u = max(t - start, 0):

* :func:`constant`: s = value (1: the engines' unscheduled path, bitwise today's results);
* :func:`step_decay`: s = gamma^floor(u / every) (piecewise constant);
* :func:`geometric`: s = gamma^(u / every) (continuous exponential decay);
* :func:`inverse_time`: s = 1 / (1 + u / t0) — Saad & Solla's annealing, lr(t) ~ lr t0 / t at late times
  (their optimal schedule is lr(t) = c / t with a problem-dependent c: choose ``lr * t0 = c``);
* :func:`per_step`: an array, one value per engine step (iteration, SGD step; not for the ODE, which has
  no steps: use :func:`table` with dt = 1 / d there);
* :func:`table`: values on t_j = j dt, ``"previous"`` (s = values[floor(t / dt)]) or ``"linear"``
  interpolation, the end values held outside the table;
* :func:`from_function`: a Python callable evaluated **once** on a grid into a :func:`table` (no Python call
  per step). Engines also accept a callable directly (evaluated on their own grid, see :func:`as_schedule`)
  and an array (= :func:`per_step`).

The C++ core receives one representation (kind and parameters, or the table), ``cpp/include/twolayer/
schedule.hpp``; :meth:`Schedule.__call__` is the same formula in NumPy. The adaptive ODE integrator ends its
steps at the jumps of piecewise-constant schedules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._deprecation import renamed
from ._validation import allocating, as_float_array, choice, describe, integer, positive

Kind = Literal["constant", "step", "geometric", "inverse_time", "table"]
_KIND_ID = {"constant": 0, "step": 1, "geometric": 2, "inverse_time": 3, "table": 4}

__all__ = ["Schedule", "as_schedule", "constant", "from_function", "geometric", "inverse_time", "per_step",
           "step_decay", "table"]


@dataclass(frozen=True, eq=False)
class Schedule:
    """A learning-rate multiplier s(t) (see the module docstring for the kinds and the time of each engine).

    Build one with the module's functions rather than directly. ``schedule(t)`` evaluates it (NumPy, the
    core's formula); for a per-step table t counts steps.

    Attributes
    ----------
    kind : {"constant", "step", "geometric", "inverse_time", "table"}
        The formula (module docstring).
    value : float
        The overall factor (the constant's value; 1 for the decays).
    gamma : float
        Decay factor per ``every`` time units (``"step"``, ``"geometric"``).
    every : float
        Decay period (``"step"``, ``"geometric"``), or t0 (``"inverse_time"``).
    start : float
        Time before which the decays are flat.
    values : ndarray
        The table's values (``"table"``).
    dt : float or None
        The table's spacing (None: one value per engine step).
    interpolation : {"previous", "linear"}
        Between the table's points.

    Examples
    --------
    >>> s = tl.schedules.step_decay(0.5, every=10, start=5)
    >>> s
    Schedule(step, value=1, gamma=0.5, every=10, start=5)
    >>> s([0.0, 5.0, 15.0, 26.0]).tolist()
    [1.0, 1.0, 0.5, 0.25]
    >>> s.per_step, s.identity
    (False, False)
    """

    kind: Kind
    value: float = 1.0
    gamma: float = 1.0
    every: float = 1.0
    start: float = 0.0
    values: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    dt: float | None = None
    interpolation: Literal["previous", "linear"] = "previous"

    def __post_init__(self) -> None:
        """Checks a directly built Schedule as the module's functions do (they are the documented way)."""
        choice(self.kind, "kind", tuple(_KIND_ID))
        checked: dict[str, Any] = {"value": positive(self.value, "value", allow_zero=True),
                                   "gamma": _fraction(self.gamma, "gamma"), "every": positive(self.every, "every"),
                                   "start": positive(self.start, "start", allow_zero=True),
                                   "interpolation": choice(self.interpolation, "interpolation",
                                                           ("previous", "linear")),
                                   "dt": None if self.dt is None else positive(self.dt, "dt")}
        if self.kind == "table":
            checked["values"] = _values(self.values, "values")
        for name, v in checked.items():
            object.__setattr__(self, name, v)

    @property
    def per_step(self) -> bool:
        """A table indexed by the engine's step counter (no time spacing)."""
        return self.kind == "table" and self.dt is None

    @property
    def identity(self) -> bool:
        """s = 1 everywhere (what no schedule means)."""
        return self.kind == "constant" and self.value == 1.0

    def __call__(self, t: ArrayLike) -> NDArray[np.float64]:
        t = np.asarray(t, dtype=np.float64)
        u = np.maximum(t - self.start, 0.0)
        if self.kind == "constant":
            return np.full(t.shape, self.value)
        if self.kind == "step":
            return self.value * self.gamma ** np.floor(u / self.every)
        if self.kind == "geometric":
            return self.value * self.gamma ** (u / self.every)
        if self.kind == "inverse_time":
            return self.value / (1.0 + u / self.every)
        n = self.values.size
        x = np.maximum(t, 0.0) / (1.0 if self.dt is None else self.dt)
        if self.dt is None or self.interpolation == "previous":
            return self.values[np.minimum(np.floor(x), n - 1).astype(np.int64)]
        return np.interp(x, np.arange(n, dtype=np.float64), self.values)

    def _core(self) -> tuple[int, float, float, float, float, float, bool, bool, NDArray[np.float64]]:
        """The tuple the core's ``schedule`` arguments take (cpp/bindings/schedule_arg.hpp)."""
        return (_KIND_ID[self.kind], float(self.value), float(self.gamma), float(self.every), float(self.start),
                1.0 if self.dt is None else float(self.dt), self.interpolation == "linear", self.per_step,
                np.ascontiguousarray(self.values, dtype=np.float64))

    def __repr__(self) -> str:
        if self.kind == "table":
            spacing = "per step" if self.dt is None else f"dt={self.dt:g}, {self.interpolation}"
            return f"Schedule(table of {self.values.size} values, {spacing})"
        extra = {"constant": "", "step": f", gamma={self.gamma:g}, every={self.every:g}",
                 "geometric": f", gamma={self.gamma:g}, every={self.every:g}",
                 "inverse_time": f", t0={self.every:g}"}[self.kind]
        start = f", start={self.start:g}" if self.start else ""
        return f"Schedule({self.kind}, value={self.value:g}{extra}{start})"


def _fraction(x: Any, name: str) -> float:
    g = positive(x, name, allow_zero=True)
    if g > 1.0:
        raise ValueError(f"{name}: expected a decay factor in [0, 1], got {describe(x)}")
    return g


def constant(value: float = 1.0) -> Schedule:
    """s(t) = value.

    Parameters
    ----------
    value : float, default 1.0
        The multiplier (>= 0); 1 is no schedule (the engines' unscheduled path).

    Returns
    -------
    Schedule

    Examples
    --------
    >>> tl.schedules.constant(0.5)([0.0, 3.0]).tolist()
    [0.5, 0.5]
    >>> tl.schedules.constant().identity
    True
    """
    return Schedule("constant", value=positive(value, "value", allow_zero=True))


def step_decay(gamma: float, every: float, start: float = 0.0) -> Schedule:
    """s(t) = gamma^floor(max(t - start, 0) / every): the rate drops by ``gamma`` every ``every`` time units
    after ``start``.

    Parameters
    ----------
    gamma : float
        Decay factor in [0, 1].
    every : float
        Time between two drops (> 0), in the engine's time.
    start : float, default 0.0
        Time of the first period's start (s = 1 before it).

    Returns
    -------
    Schedule

    Examples
    --------
    >>> tl.schedules.step_decay(0.5, every=10)([0.0, 9.9, 10.0, 25.0]).tolist()
    [1.0, 1.0, 0.5, 0.25]
    """
    return Schedule("step", gamma=_fraction(gamma, "gamma"), every=positive(every, "every"),
                    start=positive(start, "start", allow_zero=True))


def geometric(gamma: float, every: float = 1.0, start: float = 0.0) -> Schedule:
    """s(t) = gamma^(max(t - start, 0) / every): continuous exponential decay, a factor ``gamma`` per ``every``
    time units after ``start`` (per iteration for population descent with every = 1).

    Parameters
    ----------
    gamma : float
        Decay factor in [0, 1] per ``every`` time units.
    every : float, default 1.0
        Time over which the rate drops by ``gamma`` (> 0).
    start : float, default 0.0
        Time at which the decay starts (s = 1 before it).

    Returns
    -------
    Schedule

    Examples
    --------
    >>> s = tl.schedules.geometric(0.5, every=2)
    >>> print(f"{float(s(1.0)):.6f} {float(s(4.0)):.6f}")
    0.707107 0.250000
    """
    return Schedule("geometric", gamma=_fraction(gamma, "gamma"), every=positive(every, "every"),
                    start=positive(start, "start", allow_zero=True))


def inverse_time(t0: float, start: float = 0.0) -> Schedule:
    """s(t) = 1 / (1 + max(t - start, 0) / t0): Saad & Solla's 1/t annealing, lr(t) = lr t0 / (t0 + t - start)
    (asymptotically lr t0 / t).

    Parameters
    ----------
    t0 : float
        Time scale (> 0): the rate is halved at t = start + t0.
    start : float, default 0.0
        Time at which the annealing starts (s = 1 before it).

    Returns
    -------
    Schedule

    Examples
    --------
    >>> tl.schedules.inverse_time(10.0)([0.0, 10.0, 30.0]).tolist()
    [1.0, 0.5, 0.25]
    """
    return Schedule("inverse_time", every=positive(t0, "t0"), start=positive(start, "start", allow_zero=True))


def _values(values: ArrayLike, name: str) -> NDArray[np.float64]:
    """A table's values: finite, >= 0, at least one; a read-only array (copied unless it is one already)."""
    v = as_float_array(values, name, ndim=1)
    if v.size == 0:
        raise ValueError(f"{name}: expected at least one value")
    if np.any(v < 0):
        raise ValueError(f"{name}: expected values >= 0 (learning-rate multipliers), got min {v.min():g}")
    if v.flags.writeable:
        with allocating(name, v.size):
            v = v.copy()
        v.flags.writeable = False
    return v


def per_step(values: ArrayLike) -> Schedule:
    """s at step n = values[n] (the last value held after the end): one multiplier per iteration / SGD step.

    Parameters
    ----------
    values : array_like, shape (n,)
        Multipliers >= 0, one per step (at least one).

    Returns
    -------
    Schedule
        A table with ``per_step`` True (not for the ODE, which has no steps).

    Examples
    --------
    >>> s = tl.schedules.per_step([1.0, 0.5, 0.25])
    >>> s, s([0, 1, 2, 5]).tolist()
    (Schedule(table of 3 values, per step), [1.0, 0.5, 0.25, 0.25])
    """
    return Schedule("table", values=_values(values, "values"))


def table(values: ArrayLike, dt: float, interpolation: Literal["previous", "linear"] = "linear") -> Schedule:
    """s(t) from ``values`` at t_j = j dt: ``"linear"`` interpolation or ``"previous"`` (piecewise constant,
    s = values[floor(t / dt)]); the end values are held outside [0, (n - 1) dt].

    Parameters
    ----------
    values : array_like, shape (n,)
        Multipliers >= 0 at t_j = j dt.
    dt : float
        Spacing of the table (> 0), in the engine's time.
    interpolation : {"linear", "previous"}, default "linear"
        Between two points.

    Returns
    -------
    Schedule

    Examples
    --------
    >>> tl.schedules.table([1.0, 0.0], dt=2.0)([0.0, 1.0, 2.0, 5.0]).tolist()
    [1.0, 0.5, 0.0, 0.0]
    >>> tl.schedules.table([1.0, 0.0], dt=2.0, interpolation="previous")([1.0, 2.0]).tolist()
    [1.0, 0.0]
    """
    return Schedule("table", values=_values(values, "values"), dt=positive(dt, "dt"),
                    interpolation=choice(interpolation, "interpolation", ("previous", "linear")))  # type: ignore[arg-type]


def _evaluate(f: Callable[..., Any], t: NDArray[np.float64], name: str) -> NDArray[np.float64]:
    """f on the grid t: one vectorised call when f maps the array to an array of its shape, else one call per
    point (still all before the run)."""
    try:
        out = np.asarray(f(t), dtype=np.float64)
    except Exception:
        out = None
    if out is None or out.shape != t.shape:
        try:
            out = np.array([float(f(float(x))) for x in t])
        except Exception as exc:
            raise ValueError(f"{name}: calling it on the schedule's times failed: {exc}") from exc
    if not np.all(np.isfinite(out)) or np.any(out < 0):
        raise ValueError(f"{name}: expected finite values >= 0 on [0, {t[-1]:g}]")
    return out


def from_function(f: Callable[..., Any], t_max: float, dt: float | None = None, n: int = 4097,
                  interpolation: Literal["previous", "linear"] = "linear") -> Schedule:
    """The callable ``f(t) -> s`` evaluated once on t_j = j dt over [0, t_max] (``dt`` default t_max / (n - 1))
    into a :func:`table`.

    Parameters
    ----------
    f : callable
        ``f(t) -> s``, vectorised (array in, array of its shape out) or scalar (called once per point); its values
        must be finite and >= 0.
    t_max : float
        End of the grid (> 0).
    dt : float, optional
        Grid spacing (default t_max / (n - 1)).
    n : int, default 4097
        Grid points when ``dt`` is not given.
    interpolation : {"linear", "previous"}, default "linear"
        Between two grid points.

    Returns
    -------
    Schedule
        A table; no Python call happens during the run.

    Examples
    --------
    >>> s = tl.schedules.from_function(lambda t: 1.0 / (1.0 + t), t_max=4.0, n=5)
    >>> s
    Schedule(table of 5 values, dt=1, linear)
    >>> print(f"{float(s(2.0)):.6f}")
    0.333333
    """
    if not callable(f):
        raise TypeError(f"f: expected a callable, got {describe(f)}")
    T = positive(t_max, "t_max")
    n_ = integer(n, "n", 2)  # checked even where dt sets the grid
    step = T / (n_ - 1) if dt is None else positive(dt, "dt")
    if T / step > 2.0**53:
        raise ValueError(f"{'t_max, dt' if dt is not None else 'n'}: the grid [0, t_max] with spacing {step:g} has "
                         f"{T / step:.3g} points, more than a table can hold (2**53)")
    n_points = int(np.floor(T / step + 1e-9)) + 1
    with allocating("t_max, dt" if dt is not None else "n", n_points):
        t = np.arange(n_points, dtype=np.float64) * step
    return table(_evaluate(f, t, "f"), step, interpolation)


@renamed(steps="n_steps")
def as_schedule(schedule: Any, n_steps: int | None = None, step_time: float = 1.0,
                t_max: float | None = None) -> Schedule | None:
    """An engine's ``schedule`` argument as a Schedule (None when there is none, or it is the constant 1).

    A Schedule as it is; an array: :func:`per_step`; a callable: evaluated once, per step (``f(n step_time)``,
    n < ``n_steps``) for an engine with steps, else on 4097 points of [0, ``t_max``] with linear interpolation.

    Parameters
    ----------
    schedule : Schedule, array_like, callable or None
        What the engine was given.
    n_steps : int, optional
        The engine's number of steps (engines with steps: a callable is evaluated per step).
    step_time : float, default 1.0
        The time of one step (1 / d for SGD).
    t_max : float, optional
        The run's duration (engines without steps, e.g. the ODE: a callable is tabulated on [0, t_max]).

    Returns
    -------
    Schedule or None
        None when there is no schedule or it is the constant 1.

    Examples
    --------
    >>> S = tl.schedules
    >>> S.as_schedule(None) is None, S.as_schedule(S.constant()) is None
    (True, True)
    >>> S.as_schedule([1.0, 0.5])
    Schedule(table of 2 values, per step)
    >>> S.as_schedule(lambda t: 0.5 ** t, n_steps=3)([0, 1, 2]).tolist()
    [1.0, 0.5, 0.25]
    """
    n_steps = None if n_steps is None else integer(n_steps, "n_steps", 0)
    dt = positive(step_time, "step_time")
    duration = None if t_max is None else positive(t_max, "t_max", allow_zero=True)
    if schedule is None:
        return None
    if isinstance(schedule, Schedule):
        s = schedule
    elif callable(schedule):
        if n_steps is not None:
            with allocating("n_steps", max(n_steps, 1)):
                grid = np.arange(max(n_steps, 1), dtype=np.float64) * dt
            s = per_step(_evaluate(schedule, grid, "schedule"))
        else:
            if duration is None:
                raise ValueError("schedule: a callable needs the run's duration (t_max or times)")
            s = from_function(schedule, duration)
    elif isinstance(schedule, (list, tuple, np.ndarray)):
        s = per_step(schedule)
    else:
        raise TypeError(f"schedule: expected a twolayer.schedules.Schedule, an array of per-step multipliers or a "
                        f"callable s(t), got {describe(schedule)}")
    return None if s.identity else s


def core_arg(schedule: Schedule | None) -> tuple[Any, ...] | None:
    """What the core's ``schedule`` keyword takes (None: no schedule)."""
    return None if schedule is None else schedule._core()
