"""Result objects: :class:`Status`, how a run ended; :class:`Trajectory`, the common output of every dynamics (ODE,
SGD, population descent); and :class:`BatchTrajectory`, the stacked output of a batch of ODE systems.

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
from enum import Enum
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._deprecation import renamed_attribute
from .overlaps import BatchOverlaps, Overlaps
from .passage import FirstPassage, first_passage, run_passage

__all__ = ["BatchTrajectory", "Ensemble", "Status", "Trajectory"]


class Status(str, Enum):
    """How a run ended. A ``str`` enumeration: ``Status.completed == "completed"``, so code that compares
    statuses with strings keeps working, and ``str()`` / f-strings give the bare name.

    ``completed``: ran to the end; ``converged``: a requested early stop (``risk_tol`` / ``risk_rtol``) was
    reached; ``diverged``: the state blew up (docs: conventions, "Divergence"); ``max_steps``: the step budget
    ran out; ``interrupted``: Ctrl-C (partial results kept). :attr:`success` is True for the first two.

    Attributes
    ----------
    value : str
        The status name.
    success : bool
        Whether the run ended well (``completed`` or ``converged``).

    Examples
    --------
    >>> tl.Status("converged").success, tl.Status.diverged == "diverged", f"{tl.Status.max_steps}"
    (True, True, 'max_steps')
    """

    completed = "completed"
    converged = "converged"
    diverged = "diverged"
    max_steps = "max_steps"
    interrupted = "interrupted"

    @property
    def success(self) -> bool:
        """Whether the run reached its end or its requested early stop."""
        return self in (Status.completed, Status.converged)

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


_STATUSES = tuple(s.value for s in Status)

# long_name and units of every variable and coordinate of the result datasets (to_xarray of Trajectory,
# BatchTrajectory and Ensemble); units "" marks a time, which takes the clock's unit.
_LABELS: dict[str, tuple[str, str]] = {
    "t": ("time", ""),
    "Q": ("student-student overlaps Q_ik = w_i . w_k / s", "1"),
    "M": ("student-teacher overlaps M_ir = w_i . w*_r / s", "1"),
    "a": ("effective (readout-scaled) student second layer", "1"),
    "risk": ("excess population risk (noise floor Delta/2 not included)", "1"),
    "final_risk": ("excess population risk, last recorded state", "1"),
    "P": ("teacher-teacher overlaps P_rs = w*_r . w*_s / s", "1"),
    "v": ("effective (readout-scaled) teacher second layer", "1"),
    "bias": ("student biases b_i (lambda_i = w_i . x / s^(1/2) + b_i)", "1"),
    "teacher_bias": ("teacher biases b*_r", "1"),
    "lr_bias": ("learning rate of the student biases", "1"),
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
# The biases of a run with biases (Trajectory.bias, recorded over time, and the fixed teacher_bias): exported only
# where present, so that results without biases keep exactly their variables.
_BIAS_DIMS: dict[str, tuple[str, ...]] = {"bias": ("t", "student"), "teacher_bias": ("teacher",)}


def integration_tol(meta: Mapping[str, Any]) -> tuple[float, float]:
    """(rtol, atol) of an adaptive ODE run's ``meta`` (its rows may leave the PSD cone by that much, as the engines'
    divergence rule allows: :class:`~twolayer.Overlaps`' ``integration_tol``); (0, 0) for other runs."""
    if meta.get("method") != "adaptive":
        return 0.0, 0.0
    rtol, atol = float(meta.get("rtol", 0.0)), float(meta.get("atol", 0.0))
    return (rtol, atol) if math.isfinite(rtol) and math.isfinite(atol) else (0.0, 0.0)


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
    ``student`` holds the final network of weight-space runs (None for the ODE). ``bias`` (T, K) and ``teacher_bias``
    (M,): the units' biases of a run with biases (None without: the engines without biases, and runs whose biases are
    all zero and fixed).

    Attributes
    ----------
    t : ndarray, shape (T,)
        Output times, in the clock ``time_unit`` names.
    Q, M, a : ndarray, shapes (T, K, K), (T, K, M), (T, K)
        The order parameters (``a``: the effective second layer).
    risk : ndarray, shape (T,)
        The excess population risk.
    status : Status
        How the run ended (a ``str`` enumeration: compares equal to the status names).
    message : str
        Why and when it ended.
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
    bias, teacher_bias : ndarray or None
        The student's biases over time (T, K) and the teacher's (M,), in a run with biases.

    Examples
    --------
    >>> traj = tl.ode.integrate(tl.ode.plateau_overlaps(), "erf", lr=1.0,
    ...                         t_max=300, n_records=4)
    >>> traj
    Trajectory(T=4, K=2, M=2, status='completed', final_risk=1.59016e-07)
    >>> traj.Q.shape, traj.time_unit
    ((4, 2, 2), 't = steps / d')

    Continue from the last state:

    >>> more = tl.ode.integrate(traj.overlaps_at(-1), "erf", lr=1.0, t_max=10,
    ...                         n_records=2)
    >>> bool(np.allclose(more.Q[0], traj.Q[-1]))
    True
    """

    t: NDArray[np.float64]
    Q: NDArray[np.float64]
    M: NDArray[np.float64]
    a: NDArray[np.float64]
    risk: NDArray[np.float64]
    status: Status = Status.completed
    message: str = ""
    time_unit: str = "t"
    student: Any = None
    meta: dict[str, Any] = field(default_factory=dict)
    P: NDArray[np.float64] | None = None
    v: NDArray[np.float64] | None = None
    stop_time: float = math.nan
    bias: NDArray[np.float64] | None = None
    teacher_bias: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)  # the engines give the status by name

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
                        teacher_activation=self.meta.get("teacher_activation"),
                        bias=None if self.bias is None else self.bias[index],
                        teacher_bias=self.teacher_bias, integration_tol=integration_tol(self.meta))

    def to_xarray(self) -> Any:
        """An ``xarray.Dataset`` with dimensions t, student, student2, teacher (and teacher2 for P); Q, M, a, risk, and
        P, v when known, ``bias`` (t, student) and ``teacher_bias`` (teacher) in a run with biases;
        ``long_name``/``units`` on every variable (see the module docstring); status, message, stop_time and the
        scalar ``meta`` entries as attributes. Needs the xarray extra."""
        xr = import_xarray()
        data: dict[str, Any] = {}
        for name, dims in _DIMS.items():
            if getattr(self, name) is not None:
                lead = ("t",) if name in _ROWS else ()
                data[name] = ((*lead, *dims), getattr(self, name), variable_attrs(name, self.time_unit))
        for name, dims in _BIAS_DIMS.items():
            if getattr(self, name) is not None:
                data[name] = (dims, getattr(self, name), variable_attrs(name, self.time_unit))
        t = xr.Variable("t", self.t, variable_attrs("t", self.time_unit))
        attrs = {**netcdf_attrs(self.meta), "status": str(self.status), "message": self.message,
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
            status=Status(attrs.get("status", "completed")),
            message=str(attrs.get("message", "")),
            time_unit=time_unit,
            meta={k: v for k, v in attrs.items() if k not in ("status", "message")},
            P=float_values(ds, "P") if "P" in ds else None,
            v=float_values(ds, "v") if "v" in ds else None,
            stop_time=float(attrs.get("stop_time", math.nan)),
            bias=float_values(ds, "bias") if "bias" in ds else None,
            teacher_bias=float_values(ds, "teacher_bias") if "teacher_bias" in ds else None,
        )

    def __repr__(self) -> str:
        K = self.Q.shape[1] if self.Q.ndim == 3 else 0
        M = self.M.shape[2] if self.M.ndim == 3 else 0
        return (f"Trajectory(T={len(self)}, K={K}, M={M}, status={str(self.status)!r}, "
                f"final_risk={self.final_risk:.6g})")


_COUNTS = ("n_recorded", "n_rhs", "n_steps", "n_rejected")


def _final_name(name: str) -> str:
    """The name of the last recorded state of row variable ``name``: ``Q_final``, ..., but ``final_risk``."""
    return "final_risk" if name == "risk" else f"{name}_final"


class _Members:
    """What every stacked batch result (:class:`BatchTrajectory`, :class:`Ensemble`) derives from its per-member
    ``status``: one implementation of the members' outcome counts."""

    status: Any

    @property
    def success(self) -> NDArray[np.bool_]:
        """Per member: whether it ran to its end or to its requested early stop (:attr:`Status.success`)."""
        return np.array([Status(s).success for s in self.status], dtype=bool)

    @property
    def n_diverged(self) -> int:
        """Number of diverged members."""
        return sum(s == Status.diverged for s in self.status)

    @property
    def n_converged(self) -> int:
        """Number of members stopped early by ``risk_tol`` / ``risk_rtol``."""
        return sum(s == Status.converged for s in self.status)


@dataclass(eq=False)
class BatchTrajectory(_Members):
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
    t_final, Q_final, M_final, a_final, final_risk : (B,), (B, K, K), (B, K, M), (B, K), (B,)
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
        threshold; ``lr_bias`` in a batch with biases): coordinates along ``member`` in :meth:`to_xarray`.
    meta : dict
        The parameters shared by every member (activations, regime, method, ...).
    bias, bias_final, teacher_bias : (B, T, K), (B, K), (B, M) or None
        In a batch with biases (None without): the students' biases on the output grid (NaN-filled like Q), at
        the last recorded state, and the teachers' fixed biases.

    Notes
    -----
    ``len()`` is B; ``batch[b]`` (and iteration) gives member b as a :class:`Trajectory` whose arrays are views of
    its rows (plus the crossing row of an early stop, copied), trimmed to its own K and M — exactly what
    :func:`twolayer.ode.integrate` returns for that member alone.

    Examples
    --------
    >>> ov = tl.ode.plateau_overlaps()
    >>> batch = tl.ode.integrate_batch([ov, ov], "erf", lr=[0.5, 1.0], t_max=20,
    ...                                n_records=3)
    >>> batch
    BatchTrajectory(B=2, T=3, completed=2)
    >>> batch.Q.shape, batch[1].Q.shape
    ((2, 3, 2, 2), (3, 2, 2))
    >>> bool(np.array_equal(batch[1].risk, tl.ode.integrate(
    ...     ov, "erf", lr=1.0, t_max=20, n_records=3).risk))
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
    final_risk: NDArray[np.float64]
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
    bias: NDArray[np.float64] | None = None
    bias_final: NDArray[np.float64] | None = None
    teacher_bias: NDArray[np.float64] | None = None

    risk_final = renamed_attribute("final_risk")

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
        bias = None if self.bias is None else self.bias[b, :n, :K]
        tf = float(self.t_final[b])
        if not math.isnan(tf) and (n == 0 or tf != t[-1]):  # the crossing row of an early stop
            t = np.append(t, tf)
            Q = np.concatenate([Q, self.Q_final[b, None, :K, :K]])
            M = np.concatenate([M, self.M_final[b, None, :K, :Mt]])
            a = np.concatenate([a, self.a_final[b, None, :K]])
            risk = np.append(risk, self.final_risk[b])
            if bias is not None and self.bias_final is not None:
                bias = np.concatenate([bias, self.bias_final[b, None, :K]])
        meta = {**self.meta, **{k: _from_attr(v[b]) for k, v in self.params.items()},
                **{k: int(getattr(self, k)[b]) for k in ("n_rhs", "n_steps", "n_rejected")},
                "stop_time": float(self.stop_time[b])}
        return Trajectory(t=t, Q=Q, M=M, a=a, risk=risk, status=Status(self.status[b]), message=str(self.message[b]),
                          time_unit=self.time_unit, meta=meta, P=self.P[b, :Mt, :Mt], v=self.v[b, :Mt],
                          stop_time=float(self.stop_time[b]), bias=bias,
                          teacher_bias=None if self.teacher_bias is None else self.teacher_bias[b, :Mt])

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
            Q, M, a, b = self.Q_final, self.M_final, self.a_final, self.bias_final
        else:
            Q, M, a = self.Q[:, index], self.M[:, index], self.a[:, index]
            b = None if self.bias is None else self.bias[:, index]
        return BatchOverlaps(Q, M, self.P, a, self.v, self.meta.get("activation"),
                             self.meta.get("teacher_activation"), bias=b, teacher_bias=self.teacher_bias,
                             integration_tol=integration_tol(self.meta))

    def to_xarray(self) -> Any:
        """An ``xarray.Dataset`` with dimensions member, t, student, student2, teacher, teacher2: Q, M, a, risk
        (member, t, ...), P, v and the ``*_final`` state per member, and the per-member results status, message,
        stop_time, n_recorded, n_rhs, n_steps, n_rejected; in a batch with biases ``bias`` (member, t, student),
        ``bias_final`` and ``teacher_bias`` (member, teacher); the per-member parameters (``params``) and sizes
        ``n_student``, ``n_teacher`` are coordinates along ``member``; shared parameters are attributes. Every
        variable has ``long_name`` and ``units``."""
        xr = import_xarray()
        unit = self.time_unit

        def var(name: str, dims: tuple[str, ...], values: Any) -> tuple[Any, ...]:
            return dims, values, variable_attrs(name, unit)

        data: dict[str, Any] = {}
        for name, dims in _DIMS.items():
            if name in _ROWS:
                final = _final_name(name)
                data[name] = var(name, ("member", "t", *dims), getattr(self, name))
                data[final] = var(final, ("member", *dims), getattr(self, final))
            else:
                data[name] = var(name, ("member", *dims), getattr(self, name))
        for name, dims in (("bias", ("member", "t", "student")), ("bias_final", ("member", "student")),
                           ("teacher_bias", ("member", "teacher"))):
            if getattr(self, name) is not None:
                data[name] = var(name, dims, getattr(self, name))
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
            final_risk=f64("final_risk" if "final_risk" in ds else "risk_final"),
            status=np.array(ds["status"].values, dtype=str), message=np.array(ds["message"].values, dtype=str),
            stop_time=f64("stop_time"),
            **{k: i64(k) for k in (*_COUNTS, "n_student", "n_teacher")},
            params={p: f64(p) for p in names},
            time_unit=time_unit,
            meta=attrs,
            bias=f64("bias") if "bias" in ds else None,
            bias_final=f64("bias_final") if "bias_final" in ds else None,
            teacher_bias=f64("teacher_bias") if "teacher_bias" in ds else None,
        )

    def __repr__(self) -> str:
        counts = {s: int(np.sum(self.status == s)) for s in _STATUSES}
        text = ", ".join(f"{s}={c}" for s, c in counts.items() if c)
        return f"BatchTrajectory(B={len(self)}, T={self.t.shape[0]}{', ' + text if text else ''})"


@dataclass(eq=False)
class Ensemble(_Members):
    """Independent SGD (or SDE) runs of one problem, the batch result of :func:`twolayer.sgd.simulate` and
    :func:`twolayer.sde.simulate`: same teacher, sizes and regime; each run (a batch member) has its own stream key
    (seed, run id) and hyper-parameters (``params``).

    ``runs`` holds one :class:`~twolayer.Trajectory` per run, in call order. A run that stopped early is
    truncated at its stop: status ``"converged"`` (its recorded risk fell below ``risk_tol`` / ``risk_rtol``;
    the crossing record is its last row), ``"diverged"``, or ``"interrupted"`` (in the partial result of
    :class:`twolayer.Interrupted`). ``t`` holds the requested record times, ``run_ids`` the stream keys and
    ``params`` the per-run ``lr``, ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol`` (arrays of shape
    (R,); NaN where a tolerance is off). ``status`` and ``stop_time`` are per run (``stop_time``: see
    :func:`simulate`; NaN for completed runs).

    The stacked arrays ``Q`` (R_completed, T, K, K), ``M``, ``a``, ``risk`` and the statistics :meth:`mean`,
    :meth:`std`, :meth:`sem` use the runs that completed only: a converged run is a success, but its records
    end at its stop, so it has no value at later times (study it through ``stop_time``). The statistics are
    over repetitions of one experiment: they raise ValueError when the completed runs differ in their
    parameters (take a sub-ensemble of one grid point with :meth:`select`, or group ``toimport_xarray()``).

    Attributes
    ----------
    runs : list of Trajectory
        One per run, in call order.
    run_ids : ndarray of int, shape (R,)
        The stream keys (seed, run id).
    t : ndarray, shape (T,)
        The requested record times (t = steps / d).
    seed : int
        The master seed.
    meta : dict
        The parameters shared by every run.
    params : dict of ndarray, shape (R,)
        The per-run parameters.

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(2, 2, 100, "erf", seed=0)
    >>> ens = tl.sgd.simulate(s, t, lr=1.0, t_max=5, n_records=6, seeds=4)
    >>> ens
    Ensemble(runs=4, T=6, diverged=0, converged=0, seed=0)
    >>> ens.risk.shape, ens.Q.shape
    ((4, 6), (4, 6, 2, 2))
    >>> np.round(ens.mean().risk, 3)
    array([0.735, 0.353, 0.176, 0.101, 0.064, 0.048])
    """

    runs: list[Trajectory]
    run_ids: NDArray[np.int64]
    t: NDArray[np.float64]
    seed: int
    meta: dict[str, Any] = field(default_factory=dict)
    params: dict[str, NDArray[np.float64]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Iterator[Trajectory]:
        return iter(self.runs)

    def __getitem__(self, j: int) -> Trajectory:
        return self.runs[j]

    @property
    def status(self) -> list[Status]:
        """The status of every run."""
        return [r.status for r in self.runs]

    @property
    def stop_time(self) -> NDArray[np.float64]:
        """(R,) per run: the interpolated early-stop crossing (converged), the time of the divergence or
        interruption, NaN for completed runs; in the clock of ``t`` (steps / d)."""
        return np.array([r.stop_time for r in self.runs], dtype=np.float64)

    @property
    def final_risk(self) -> NDArray[np.float64]:
        """(R,) the last recorded excess risk of every run (NaN for a run that recorded nothing)."""
        return np.array([r.final_risk for r in self.runs], dtype=np.float64)

    @property
    def n_recorded(self) -> NDArray[np.int64]:
        """(R,) the number of rows every run recorded."""
        return np.array([len(r) for r in self.runs], dtype=np.int64)

    @property
    def completed(self) -> list[Trajectory]:
        """The runs that completed (neither converged early, diverged nor were interrupted)."""
        return [r for r in self.runs if r.status == "completed"]

    def first_passage(self, level: float, relative: bool = True) -> FirstPassage:
        """Per-run first passage of the risk with censoring (:mod:`twolayer.passage`)."""
        return first_passage(self.runs, level, relative)

    def select(self, **values: float) -> Ensemble:
        """The sub-ensemble of the runs whose parameters equal ``values`` (keywords among ``lr``,
        ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol``, ``run_id``), e.g. one point of a grid.

        Parameters
        ----------
        **values : float
            Parameter values to keep.

        Returns
        -------
        Ensemble
        """
        keep = np.ones(len(self.runs), dtype=bool)
        for name, value in values.items():
            column = self.run_ids if name == "run_id" else self.params.get(name)
            if column is None:
                raise ValueError(
                    f"{name}: expected one of {', '.join(map(repr, [*self.params, 'run_id']))}; got {name!r}"
                )
            keep &= column == value
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            raise ValueError(f"values: no run has {values}")
        return Ensemble(
            runs=[self.runs[j] for j in idx],
            run_ids=self.run_ids[idx],
            t=self.t,
            seed=self.seed,
            meta=self.meta,
            params={k: v[idx] for k, v in self.params.items()},
        )

    @property
    def _rows(self) -> tuple[str, ...]:
        """The recorded fields: Q, M, a, risk, and bias in runs with biases."""
        return (*_ROWS, "bias") if self.runs and self.runs[0].bias is not None else _ROWS

    def stack(self, name: str) -> NDArray[np.float64]:
        """``name`` ("Q", "M", "a", "risk", or "bias" in runs with biases) of the completed runs, run first.

        Parameters
        ----------
        name : {"Q", "M", "a", "risk", "bias"}
            The field.

        Returns
        -------
        ndarray, shape (R_completed, T, ...)
        """
        if name not in self._rows:
            raise ValueError(f"name: expected one of {', '.join(map(repr, self._rows))}; got {name!r}")
        runs = self.completed
        if not runs:
            raise ValueError("seeds: no run completed (diverged, converged or interrupted), there is nothing to stack")
        return np.stack([getattr(r, name) for r in runs])

    Q = property(lambda self: self.stack("Q"), doc="(R_completed, T, K, K)")
    M = property(lambda self: self.stack("M"), doc="(R_completed, T, K, M)")
    a = property(lambda self: self.stack("a"), doc="(R_completed, T, K)")
    risk = property(lambda self: self.stack("risk"), doc="(R_completed, T)")
    bias = property(lambda self: self.stack("bias"), doc="(R_completed, T, K), in runs with biases")

    def _statistic(self, fn: Any, label: str) -> Trajectory:
        done = np.array([r.status == "completed" for r in self.runs], dtype=bool)
        shared: dict[str, float] = {}
        for name, column in self.params.items():
            values = np.unique(column[done])
            if values.size > 1:
                raise ValueError(
                    f"{name}: {label} is over runs of identical parameters, but the completed runs have "
                    f"{values.size} different values of {name}; take one grid point with select({name}=...) "
                    "or group toimport_xarray()"
                )
            if values.size == 1:
                shared[name] = float(values[0])
        n = int(done.sum())
        fields = {k: fn(self.stack(k)) for k in self._rows}
        msg = f"{label} over {n} of {len(self.runs)} runs" + (
            f" ({len(self.runs) - n} not completed: {self.n_diverged} diverged, {self.n_converged} converged)"
            if n < len(self.runs)
            else ""
        )
        return Trajectory(
            t=self.t.copy(),
            **fields,
            status=Status.completed,
            message=msg,
            time_unit=self.runs[0].time_unit,
            meta={**self.meta, **shared, "statistic": label, "n_runs": n},
            teacher_bias=self.runs[0].teacher_bias,
        )

    def mean(self) -> Trajectory:
        """Mean over the completed runs (of identical parameters), as a Trajectory."""
        return self._statistic(lambda x: x.mean(axis=0), "mean")

    def std(self) -> Trajectory:
        """Sample standard deviation (ddof = 1) over the completed runs (of identical parameters)."""
        return self._statistic(
            lambda x: x.std(axis=0, ddof=1) if x.shape[0] > 1 else np.zeros_like(x[0]), "std"
        )

    def sem(self) -> Trajectory:
        """Standard error of the mean over the completed runs (of identical parameters): std / sqrt(n)."""
        n = len(self.completed)
        return self._statistic(
            lambda x: (x.std(axis=0, ddof=1) if n > 1 else np.zeros_like(x[0])) / np.sqrt(n), "sem"
        )

    def _padded(self, name: str) -> NDArray[np.float64]:
        """``name`` of every run, (R, T, ...), NaN after a run's last record."""
        first = self.runs[0]
        out = np.full((len(self.runs), len(self.t), *getattr(first, name).shape[1:]), np.nan)
        for j, r in enumerate(self.runs):
            out[j, : len(r)] = getattr(r, name)
        return out

    def to_xarray(self) -> Any:
        """An ``xarray.Dataset`` of every run, in the layout of :meth:`BatchTrajectory.to_xarray` and of a scan:
        dimensions ``member`` (the runs in call order), ``t``, ``student``, ``student2``, ``teacher``.

        Data ``Q``, ``M``, ``a``, ``risk`` (NaN after the last record of a run that stopped early; ``bias`` and
        ``teacher_bias`` too in runs with biases), ``status``,
        ``message``, ``stop_time``, ``stop_step``, ``n_recorded`` and ``final_risk`` per member, the teacher's
        ``P`` and ``v`` (so that overlaps can be rebuilt); coordinates ``t`` and, along ``member``, ``run_id``,
        ``lr``, ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol``. Every variable has ``long_name`` and
        ``units`` attributes (times in steps / d). A grid becomes labelled axes with
        ``ds.set_index(member=["lr", "noise", "run_id"]).unstack("member")``.
        """
        xr = import_xarray()
        unit = "steps / d"

        def var(name: str, dims: tuple[str, ...], values: Any) -> Any:
            return xr.Variable(dims, values, attrs=variable_attrs(name, unit))

        stop_step = [int(r.meta.get("stop_step", -1)) for r in self.runs]
        member = ("member",)
        data = {
            "Q": var("Q", ("member", "t", "student", "student2"), self._padded("Q")),
            "M": var("M", ("member", "t", "student", "teacher"), self._padded("M")),
            "a": var("a", ("member", "t", "student"), self._padded("a")),
            "risk": var("risk", ("member", "t"), self._padded("risk")),
            "final_risk": var("final_risk", member, self.final_risk),
            "status": var("status", member, np.array(self.status, dtype=str)),
            "stop_time": var("stop_time", member, self.stop_time),
            "message": var("message", member, np.array([r.message for r in self.runs], dtype=str)),
            "n_recorded": var("n_recorded", member, self.n_recorded),
            "stop_step": var("stop_step", member, np.array(stop_step, dtype=np.int64)),
        }
        first = self.runs[0]
        if first.P is not None and first.v is not None:  # one teacher for every run: rebuild overlaps from P, v
            data["P"] = var("P", ("teacher", "teacher2"), first.P)
            data["v"] = var("v", ("teacher",), first.v)
        if first.bias is not None:  # runs with biases
            data["bias"] = var("bias", ("member", "t", "student"), self._padded("bias"))
        if first.teacher_bias is not None:
            data["teacher_bias"] = var("teacher_bias", ("teacher",), first.teacher_bias)
        coords = {
            "member": var("member", member, np.arange(len(self.runs))),
            "t": var("t", ("t",), self.t),
            "run_id": var("run_id", member, self.run_ids),
            **{k: var(k, member, v) for k, v in self.params.items()},
        }
        attrs = netcdf_attrs(self.meta)
        return xr.Dataset(
            data,
            coords=coords,
            attrs={**attrs, "seed": self.seed, "time_unit": unit, "n_diverged": self.n_diverged,
                   "params": " ".join(self.params)},
        )

    @classmethod
    def from_xarray(cls, ds: Any) -> Ensemble:
        """The Ensemble a :meth:`to_xarray` Dataset (possibly saved and reopened) describes: every run's rows
        (up to its ``n_recorded``), status, message, stop time and parameters, and the teacher's ``P`` and ``v``
        (so that ``ens[j].overlaps_at(-1)`` restarts the ODE from run j's last state). The final student
        weights are not stored: ``student`` is None. A Dataset of an older release (dimension ``run``) is read
        too."""
        if "run" in ds.dims and "member" not in ds.dims:
            ds = ds.rename({"run": "member"})
        attrs, names, _ = dataset_parts(ds)
        seed = int(attrs["seed"])
        attrs.pop("n_diverged", None)
        t, run_ids = float_values(ds, "t"), int_values(ds, "run_id")
        params = {p: float_values(ds, p) for p in names}
        P = float_values(ds, "P") if "P" in ds else None
        v = float_values(ds, "v") if "v" in ds else None
        rows = {name: float_values(ds, name) for name in (*_ROWS, "bias") if name in ds}
        teacher_bias = float_values(ds, "teacher_bias") if "teacher_bias" in ds else None
        n_recorded, stop_step = int_values(ds, "n_recorded"), int_values(ds, "stop_step")
        stop_time = float_values(ds, "stop_time")
        status = np.array(ds["status"].values, dtype=str)
        message = np.array(ds["message"].values, dtype=str)
        runs = [
            Trajectory(
                t=t[: n_recorded[j]].copy(),
                **{name: x[j, : n_recorded[j]].copy() for name, x in rows.items()},
                status=Status(status[j]),
                message=str(message[j]),
                time_unit=SIMULATION_TIME_UNIT,
                meta=run_meta(attrs, params, j, int(run_ids[j]), str(status[j]), int(stop_step[j])),
                P=None if P is None else P.copy(),
                v=None if v is None else v.copy(),
                stop_time=float(stop_time[j]),
                teacher_bias=None if teacher_bias is None else teacher_bias.copy(),
            )
            for j in range(run_ids.size)
        ]
        return cls(runs=runs, run_ids=run_ids, t=t, seed=seed, meta=attrs, params=params)

    def __repr__(self) -> str:
        return (
            f"Ensemble(runs={len(self.runs)}, T={len(self.t)}, diverged={self.n_diverged}, "
            f"converged={self.n_converged}, seed={self.seed})"
        )


# The clock of the SGD and SDE simulations.
SIMULATION_TIME_UNIT = "t = steps / d"


def run_meta(meta: dict[str, Any], params: dict[str, NDArray[np.float64]], j: int, run: int, status: str,
              stop_step: int) -> dict[str, Any]:
    """The ``meta`` of run j (stream index ``run``): the ensemble's, its own parameters, and the step of its
    stop when it did not complete."""
    return {
        **meta,
        **{k: float(v[j]) for k, v in params.items()},
        "run": run,
        **({"stop_step": stop_step} if status != "completed" else {}),
    }



# The simulators' (SGD, SDE) status codes of a run.
SIMULATION_STATUS = {0: Status.completed, 1: Status.diverged, 2: Status.interrupted, 3: Status.converged}
