"""Result objects: :class:`Trajectory`, the common output of every dynamics (ODE, SGD, population descent), and
:class:`BatchTrajectory`, the stacked output of a batch of ODE systems.

xarray convention (``to_xarray`` / ``from_xarray``): dimensions ``t`` (the output times; its ``units`` attribute
names the clock, e.g. "t = steps / d"), ``student``, ``student2`` (the second student index of Q), ``teacher``,
``teacher2`` (the second teacher index of P) and, for batches, ``member``. Every variable carries ``long_name`` and
``units`` attributes (order parameters and risks are dimensionless: ``units = "1"``). Scalar metadata go to the
Dataset's attributes (booleans as 0/1, None left out, so that the Dataset can be written to NetCDF). A saved
Dataset round-trips: ``Trajectory.from_xarray(xr.open_dataset(path))`` rebuilds the arrays bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .overlaps import BatchOverlaps, Overlaps
from .passage import FirstPassage, first_passage, run_passage

__all__ = ["BatchTrajectory", "Trajectory"]

_STATUSES = ("completed", "converged", "diverged", "max_steps", "interrupted")

# long_name and units of every variable and coordinate of the result datasets (to_xarray of Trajectory,
# BatchTrajectory and sgd.Ensemble); units "" marks a time, which takes the clock's unit.
_LABELS: dict[str, tuple[str, str]] = {
    "t": ("time", ""),
    "Q": ("student-student overlaps Q_ik = w_i . w_k / s", "1"),
    "M": ("student-teacher overlaps M_ir = w_i . w*_r / s", "1"),
    "a": ("effective (readout-scaled) student second layer", "1"),
    "risk": ("excess population risk (noise floor Delta/2 not included)", "1"),
    "P": ("teacher-teacher overlaps P_rs = w*_r . w*_s / s", "1"),
    "v": ("effective (readout-scaled) teacher second layer", "1"),
    "status": ("how the run ended: " + ", ".join(_STATUSES), "1"),
    "message": ("what happened", "1"),
    "stop_time": ("time of the stop: early stop, divergence, step budget or interruption (NaN: no stop)", ""),
    "t_final": ("time of the last recorded state", ""),
    "n_recorded": ("number of rows recorded on the output grid t (later rows are NaN)", "1"),
    "n_rhs": ("right-hand-side evaluations", "1"),
    "n_steps": ("accepted steps", "1"),
    "n_rejected": ("rejected steps (adaptive method)", "1"),
    "lr": ("first-layer learning rate", "1"),
    "lr_readout": ("second-layer learning rate", "1"),
    "noise": ("label-noise variance Delta", "1"),
    "risk_tol": ("early stop at this excess risk (NaN: off)", "1"),
    "risk_rtol": ("early stop at this fraction of the initial excess risk (NaN: off)", "1"),
    "member": ("batch member index", "1"),
    "n_student": ("student units K", "1"),
    "n_teacher": ("teacher units M", "1"),
    "run": ("run, in call order", "1"),
    "run_id": ("run index j of the random streams keyed by (seed, j)", "1"),
    "stop_step": ("SGD step of the stop (-1: no stop)", "1"),
}

# Dimensions of the overlap fields after their leading (member or run, then t) axes.
_DIMS: dict[str, tuple[str, ...]] = {
    "Q": ("student", "student2"),
    "M": ("student", "teacher"),
    "a": ("student",),
    "risk": (),
    "P": ("teacher", "teacher2"),
    "v": ("teacher",),
}
_ROWS = ("Q", "M", "a", "risk")  # recorded over time; P and v are fixed


def variable_attrs(name: str, time_unit: str) -> dict[str, str]:
    """``{"long_name": ..., "units": ...}`` for a result variable or coordinate ``name``: times (``t``,
    ``stop_time``, ``t_final``) in ``time_unit``, everything else dimensionless ("1"). A ``*_final`` variable is
    labelled as its base variable's last recorded state."""
    base = name[: -len("_final")] if name.endswith("_final") and name != "t_final" else name
    long_name, units = _LABELS[base]
    if base != name:
        long_name += ", last recorded state"
    return {"long_name": long_name, "units": units or time_unit}


def import_xarray() -> Any:
    """The xarray module (an optional dependency, imported on first use: ImportError naming the extra)."""
    try:
        import xarray as xr
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("to_xarray needs xarray: pip install 'twolayer[xarray]'") from exc
    return xr


def netcdf_attrs(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The NetCDF-storable scalar entries of ``meta`` (bools as 0/1; None and non-scalars left out)."""
    out: dict[str, Any] = {}
    for k, v in meta.items():
        if isinstance(v, (bool, np.bool_)):
            out[k] = int(v)
        elif isinstance(v, (int, float, str, np.integer, np.floating)):
            out[k] = v.item() if isinstance(v, np.generic) else v
    return out


def _from_attr(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def dataset_parts(ds: Any) -> tuple[dict[str, Any], list[str], str]:
    """(attributes, parameter names, time unit) of a ``to_xarray`` Dataset of a batch or an ensemble: its
    attributes as Python scalars, without ``params`` (the names of the per-member / per-run parameter
    coordinates, stored space-separated) and ``time_unit``, which are returned apart."""
    attrs = {k: _from_attr(v) for k, v in ds.attrs.items()}
    names = [p for p in str(attrs.pop("params", "")).split() if p]
    time_unit = str(attrs.pop("time_unit", ds["t"].attrs.get("units", "t")))
    return attrs, names, time_unit


def float_values(ds: Any, name: str) -> NDArray[np.float64]:
    """Variable ``name`` of the Dataset ``ds`` as an owned float64 array."""
    return np.array(ds[name].values, dtype=np.float64)


def int_values(ds: Any, name: str) -> NDArray[np.int64]:
    """Variable ``name`` of the Dataset ``ds`` as an owned int64 array."""
    return np.array(ds[name].values, dtype=np.int64)


@dataclass(eq=False)
class Trajectory:
    """Order parameters over time, time first.

    ``t`` (T,), ``Q`` (T, K, K), ``M`` (T, K, M), ``a`` (T, K) and ``risk`` (T,) — the excess population risk
    (the noise floor Delta/2 is not included). ``status`` is ``"completed"``, ``"converged"`` (early stop on the
    risk: the last row is the state at the located crossing, at ``stop_time``), ``"diverged"``, ``"max_steps"``
    (the step budget ran out) or ``"interrupted"`` (Ctrl-C: the partial result of :class:`twolayer.Interrupted`);
    ``message`` says why and when, ``stop_time`` when the run stopped (NaN if it completed). ``time_unit`` names
    the clock (e.g. "t = steps / d" or "iterations"). ``P`` (M, M) and ``v`` (M,): the fixed teacher overlaps and
    second layer, when known (None otherwise), so that :meth:`overlaps_at` can rebuild the overlaps at any row.
    ``student`` holds the final network of weight-space runs (None for the ODE).

    Attributes
    ----------
    t : ndarray, shape (T,)
        Output times, in the clock ``time_unit`` names.
    Q, M, a : ndarray, shapes (T, K, K), (T, K, M), (T, K)
        The order parameters (``a``: the effective second layer).
    risk : ndarray, shape (T,)
        The excess population risk.
    status, message : str
        How the run ended, and why and when.
    time_unit : str
        The clock.
    student : Network or None
        The final network of a weight-space run.
    meta : dict
        The run's parameters and costs.
    P, v : ndarray or None
        The teacher's overlaps and second layer.
    stop_time : float
        When the run stopped (NaN: it completed).

    Examples
    --------
    >>> traj = tl.ode.integrate(tl.ode.plateau_overlaps(), "erf", lr=1.0,
    ...                         t_max=300, n_points=4)
    >>> traj
    Trajectory(T=4, K=2, M=2, status='completed', final_risk=1.59016e-07)
    >>> traj.Q.shape, traj.time_unit
    ((4, 2, 2), 't = steps / d')

    Continue from the last state:

    >>> more = tl.ode.integrate(traj.overlaps_at(-1), "erf", lr=1.0, t_max=10,
    ...                         n_points=2)
    >>> bool(np.allclose(more.Q[0], traj.Q[-1]))
    True
    """

    t: NDArray[np.float64]
    Q: NDArray[np.float64]
    M: NDArray[np.float64]
    a: NDArray[np.float64]
    risk: NDArray[np.float64]
    status: str = "completed"
    message: str = ""
    time_unit: str = "t"
    student: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    P: NDArray[np.float64] | None = None
    v: NDArray[np.float64] | None = None
    stop_time: float = math.nan

    def __len__(self) -> int:
        return int(self.t.shape[0])

    @property
    def final_risk(self) -> float:
        """The last recorded excess risk (NaN if nothing was recorded)."""
        return float(self.risk[-1]) if len(self.risk) else float("nan")

    def first_passage(self, level: float, relative: bool = True) -> float:
        """First t with risk <= level * R(0) (``relative``) or <= level, interpolated; NaN if never
        (:mod:`twolayer.passage`)."""
        return run_passage(self, level, relative)

    def overlaps_at(self, index: int = -1) -> Any:
        """The :class:`~twolayer.Overlaps` of row ``index``.

        Default: the last state, e.g. to continue the run with
        :func:`twolayer.ode.integrate`; with the activations recorded in
        ``meta``. Needs ``P`` and ``v``.

        Parameters
        ----------
        index : int, default -1
            The row.

        Returns
        -------
        Overlaps
        """
        if self.P is None or self.v is None:
            raise ValueError("P, v: this trajectory does not record the teacher overlaps P and v")
        if len(self) == 0:
            raise ValueError("index: the trajectory has no rows")
        return Overlaps(self.Q[index], self.M[index], self.P, self.a[index], self.v,
                        activation=self.meta.get("activation"),
                        teacher_activation=self.meta.get("teacher_activation"))

    def to_xarray(self) -> Any:
        """An ``xarray.Dataset`` with dimensions t, student, student2, teacher (and teacher2 for P); Q, M, a,
        risk, and P, v when known; ``long_name``/``units`` on every variable (see the module docstring); status,
        message, stop_time and the scalar ``meta`` entries as attributes. Needs the xarray extra."""
        xr = import_xarray()
        data: dict[str, Any] = {}
        for name, dims in _DIMS.items():
            if getattr(self, name) is not None:
                lead = ("t",) if name in _ROWS else ()
                data[name] = ((*lead, *dims), getattr(self, name), variable_attrs(name, self.time_unit))
        t = xr.Variable("t", self.t, variable_attrs("t", self.time_unit))
        attrs = {**netcdf_attrs(self.meta), "status": self.status, "message": self.message,
                 "time_unit": self.time_unit, "stop_time": float(self.stop_time)}
        return xr.Dataset(data, coords={"t": t}, attrs=attrs)

    @classmethod
    def from_xarray(cls, ds: Any) -> Trajectory:
        """The Trajectory a :meth:`to_xarray` Dataset (possibly saved and reopened) describes.

        Parameters
        ----------
        ds : xarray.Dataset
            From :meth:`to_xarray`.

        Returns
        -------
        Trajectory
        """
        attrs, _, time_unit = dataset_parts(ds)
        return cls(
            t=float_values(ds, "t"),
            Q=float_values(ds, "Q"),
            M=float_values(ds, "M"),
            a=float_values(ds, "a"),
            risk=float_values(ds, "risk"),
            status=str(attrs.get("status", "completed")),
            message=str(attrs.get("message", "")),
            time_unit=time_unit,
            meta={k: v for k, v in attrs.items() if k not in ("status", "message")},
            P=float_values(ds, "P") if "P" in ds else None,
            v=float_values(ds, "v") if "v" in ds else None,
            stop_time=float(attrs.get("stop_time", math.nan)),
        )

    def __repr__(self) -> str:
        K = self.Q.shape[1] if self.Q.ndim == 3 else 0
        M = self.M.shape[2] if self.M.ndim == 3 else 0
        return (f"Trajectory(T={len(self)}, K={K}, M={M}, status={self.status!r}, "
                f"final_risk={self.final_risk:.6g})")


_COUNTS = ("n_recorded", "n_rhs", "n_steps", "n_rejected")


@dataclass(eq=False)
class BatchTrajectory:
    """The trajectories of a batch of B ODE systems, stacked: member first, then time.

    Attributes
    ----------
    t : (T,)
        The output times shared by every member.
    Q, M, a, risk : (B, T, K, K), (B, T, K, M), (B, T, K), (B, T)
        The rows on the output grid. **Fill**: a member that stopped early (converged, diverged, max_steps,
        interrupted) has ``n_recorded[b]`` rows; its later rows are NaN. Members of different K or M (a mixed
        batch) are padded with NaN to the largest K and M; ``n_student[b]``, ``n_teacher[b]`` give each member's
        own sizes.
    P, v : (B, M, M), (B, M)
        The fixed teacher overlaps and second layer of every member (NaN-padded likewise).
    t_final, Q_final, M_final, a_final, risk_final : (B,), (B, K, K), (B, K, M), (B, K), (B,)
        The last state each member recorded: for a run stopped by ``risk_tol``/``risk_rtol`` the state at the
        located crossing, at ``t_final = stop_time``, which lies between two output times; otherwise the last
        row on the grid (NaN for a member that recorded nothing).
    status, message : (B,) str
        Per-member status ("completed", "converged", "diverged", "max_steps", "interrupted") and message.
    stop_time : (B,)
        When each member stopped (NaN: no stop).
    n_recorded, n_rhs, n_steps, n_rejected : (B,) int64
        Rows on the grid, right-hand-side evaluations, accepted and rejected steps.
    params : dict of (B,) arrays
        The per-member parameters (``lr``, ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol``; 0 means no
        threshold): coordinates along ``member`` in :meth:`to_xarray`.
    meta : dict
        The parameters shared by every member (activations, regime, method, ...).

    Notes
    -----
    ``len()`` is B; ``batch[b]`` (and iteration) gives member b as a :class:`Trajectory` whose arrays are views of
    its rows (plus the crossing row of an early stop, copied), trimmed to its own K and M — exactly what
    :func:`twolayer.ode.integrate` returns for that member alone.

    Examples
    --------
    >>> ov = tl.ode.plateau_overlaps()
    >>> batch = tl.ode.integrate_batch([ov, ov], "erf", lr=[0.5, 1.0], t_max=20,
    ...                                n_points=3)
    >>> batch
    BatchTrajectory(B=2, T=3, completed=2)
    >>> batch.Q.shape, batch[1].Q.shape
    ((2, 3, 2, 2), (3, 2, 2))
    >>> bool(np.array_equal(batch[1].risk, tl.ode.integrate(
    ...     ov, "erf", lr=1.0, t_max=20, n_points=3).risk))
    True
    """

    t: NDArray[np.float64]
    Q: NDArray[np.float64]
    M: NDArray[np.float64]
    a: NDArray[np.float64]
    risk: NDArray[np.float64]
    P: NDArray[np.float64]
    v: NDArray[np.float64]
    t_final: NDArray[np.float64]
    Q_final: NDArray[np.float64]
    M_final: NDArray[np.float64]
    a_final: NDArray[np.float64]
    risk_final: NDArray[np.float64]
    status: NDArray[np.str_]
    message: NDArray[np.str_]
    stop_time: NDArray[np.float64]
    n_recorded: NDArray[np.int64]
    n_rhs: NDArray[np.int64]
    n_steps: NDArray[np.int64]
    n_rejected: NDArray[np.int64]
    n_student: NDArray[np.int64]
    n_teacher: NDArray[np.int64]
    params: dict[str, NDArray[np.float64]] = field(default_factory=dict)
    time_unit: str = "t"
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.status.shape[0])

    def __getitem__(self, b: int) -> Trajectory:
        B = len(self)
        if isinstance(b, (bool, np.bool_)) or not isinstance(b, (int, np.integer)):
            raise TypeError(f"index: expected an integer member index, got {type(b).__name__}")
        if not -B <= b < B:
            raise IndexError(f"index: member {b} out of range for a batch of {B}")
        b = int(b) % B
        K, Mt, n = int(self.n_student[b]), int(self.n_teacher[b]), int(self.n_recorded[b])
        t, Q, M, a, risk = self.t[:n], self.Q[b, :n, :K, :K], self.M[b, :n, :K, :Mt], self.a[b, :n, :K], \
            self.risk[b, :n]
        tf = float(self.t_final[b])
        if not math.isnan(tf) and (n == 0 or tf != t[-1]):  # the crossing row of an early stop
            t = np.append(t, tf)
            Q = np.concatenate([Q, self.Q_final[b, None, :K, :K]])
            M = np.concatenate([M, self.M_final[b, None, :K, :Mt]])
            a = np.concatenate([a, self.a_final[b, None, :K]])
            risk = np.append(risk, self.risk_final[b])
        meta = {**self.meta, **{k: _from_attr(v[b]) for k, v in self.params.items()},
                **{k: int(getattr(self, k)[b]) for k in ("n_rhs", "n_steps", "n_rejected")},
                "stop_time": float(self.stop_time[b])}
        return Trajectory(t=t, Q=Q, M=M, a=a, risk=risk, status=str(self.status[b]), message=str(self.message[b]),
                          time_unit=self.time_unit, meta=meta, P=self.P[b, :Mt, :Mt], v=self.v[b, :Mt],
                          stop_time=float(self.stop_time[b]))

    def __iter__(self) -> Iterator[Trajectory]:
        return (self[b] for b in range(len(self)))

    def first_passage(self, level: float, relative: bool = True) -> FirstPassage:
        """Per-member first passage (:meth:`Trajectory.first_passage`) with censoring (:mod:`twolayer.passage`)."""
        return first_passage(self, level, relative)

    def overlaps_at(self, index: int = -1) -> Any:
        """The :class:`~twolayer.BatchOverlaps` of every member at output row ``index``, or with ``index=-1`` at
        each member's last recorded state (``*_final``; e.g. to continue the runs). Needs equal K and M."""
        if np.any(self.n_student != self.n_student[0]) or np.any(self.n_teacher != self.n_teacher[0]):
            raise ValueError("index: the members have different K or M; index the batch member by member")
        if index == -1:
            Q, M, a = self.Q_final, self.M_final, self.a_final
        else:
            Q, M, a = self.Q[:, index], self.M[:, index], self.a[:, index]
        return BatchOverlaps(Q, M, self.P, a, self.v, self.meta.get("activation"),
                             self.meta.get("teacher_activation"))

    def to_xarray(self) -> Any:
        """An ``xarray.Dataset`` with dimensions member, t, student, student2, teacher, teacher2: Q, M, a, risk
        (member, t, ...), P, v and the ``*_final`` state per member, and the per-member results status, message,
        stop_time, n_recorded, n_rhs, n_steps, n_rejected; the per-member parameters (``params``) and sizes
        ``n_student``, ``n_teacher`` are coordinates along ``member``; shared parameters are attributes. Every
        variable has ``long_name`` and ``units``."""
        xr = import_xarray()
        unit = self.time_unit

        def var(name: str, dims: tuple[str, ...], values: Any) -> tuple[Any, ...]:
            return dims, values, variable_attrs(name, unit)

        data: dict[str, Any] = {}
        for name, dims in _DIMS.items():
            if name in _ROWS:
                data[name] = var(name, ("member", "t", *dims), getattr(self, name))
                data[f"{name}_final"] = var(f"{name}_final", ("member", *dims), getattr(self, f"{name}_final"))
            else:
                data[name] = var(name, ("member", *dims), getattr(self, name))
        for name in ("t_final", "stop_time", *_COUNTS):
            data[name] = var(name, ("member",), getattr(self, name))
        data["status"] = var("status", ("member",), self.status.astype(str))
        data["message"] = var("message", ("member",), self.message.astype(str))
        coords: dict[str, Any] = {
            "member": var("member", ("member",), np.arange(len(self))),
            "t": var("t", ("t",), self.t),
            "n_student": var("n_student", ("member",), self.n_student),
            "n_teacher": var("n_teacher", ("member",), self.n_teacher),
            **{name: var(name, ("member",), values) for name, values in self.params.items()},
        }
        attrs = {**netcdf_attrs(self.meta), "time_unit": self.time_unit, "params": " ".join(self.params)}
        return xr.Dataset(data, coords=coords, attrs=attrs)

    @classmethod
    def from_xarray(cls, ds: Any) -> BatchTrajectory:
        """The BatchTrajectory a :meth:`to_xarray` Dataset (possibly saved and reopened) describes.

        Parameters
        ----------
        ds : xarray.Dataset
            From :meth:`to_xarray`.

        Returns
        -------
        BatchTrajectory
        """
        attrs, names, time_unit = dataset_parts(ds)

        def f64(name: str) -> NDArray[np.float64]:
            return float_values(ds, name)

        def i64(name: str) -> NDArray[np.int64]:
            return int_values(ds, name)

        return cls(
            t=f64("t"), Q=f64("Q"), M=f64("M"), a=f64("a"), risk=f64("risk"), P=f64("P"), v=f64("v"),
            t_final=f64("t_final"), Q_final=f64("Q_final"), M_final=f64("M_final"), a_final=f64("a_final"),
            risk_final=f64("risk_final"),
            status=np.array(ds["status"].values, dtype=str), message=np.array(ds["message"].values, dtype=str),
            stop_time=f64("stop_time"),
            **{k: i64(k) for k in (*_COUNTS, "n_student", "n_teacher")},
            params={p: f64(p) for p in names},
            time_unit=time_unit,
            meta=attrs,
        )

    def __repr__(self) -> str:
        counts = {s: int(np.sum(self.status == s)) for s in _STATUSES}
        text = ", ".join(f"{s}={c}" for s, c in counts.items() if c)
        return f"BatchTrajectory(B={len(self)}, T={self.t.shape[0]}{', ' + text if text else ''})"
