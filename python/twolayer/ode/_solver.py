"""The options every ODE entry point shares, checked: the model choices (regime, method, readout), the output
times, the solver settings and the metadata and :class:`~twolayer.Trajectory` of a run."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._grid import output_times
from .._validation import INT32_MAX, as_float_array, check_memory, choice, integer, n_threads_arg, positive
from ..overlaps import Overlaps
from ..results import Status, Trajectory

Regime = Literal["online", "gradient_flow"]
Method = Literal["euler", "rk4", "adaptive"]
Readout = Literal["sum", "mean"]

TIME_UNIT = "t = steps / d"


def _times(
    t_max: float | None, times: ArrayLike | None, method: str, dt: float, n_records: int, row_bytes: int = 0
) -> NDArray[np.float64]:
    """The output times, checked; ``row_bytes``: the bytes of the results per output time (checked against
    memory before the grid is built)."""
    if times is not None:
        ts = as_float_array(times, "times", ndim=1)
        check_memory(ts.size * row_bytes, "times", f"{ts.size} output times")
        if ts.size == 0:
            raise ValueError("times: expected at least one output time")
        if np.any(ts < 0) or np.any(np.diff(ts) < 0):
            raise ValueError("times: expected non-negative, non-decreasing output times")
        if t_max is not None and ts[-1] > positive(t_max, "t_max") * (1 + 1e-12):
            raise ValueError(f"times: the last output time {ts[-1]} exceeds t_max = {t_max}")
        return ts
    if t_max is None:
        raise ValueError("t_max: give t_max or times")
    T = positive(t_max, "t_max")
    n_records = integer(n_records, "n_records", 2, INT32_MAX)
    check_memory(n_records * row_bytes, "n_records", f"{n_records} output times")
    ts = output_times(T, n_records)  # the grid SGD records on (twolayer._grid)
    if method != "adaptive":  # times off the fixed-step grid move to it, so outputs need no shortened steps
        k = np.round(ts / dt)
        off = np.abs(ts - k * dt) > 1e-9 * dt
        if off.any():
            ts = np.where(off, k * dt, ts)
            ts[-1] = T
            ts = np.unique(np.minimum(ts, T))
    return ts


def check_choices(
    act: str, regime: Any, method: Any, readout: Any
) -> tuple[str, str, str]:
    """The regime, method and readout, checked (step students have no online regime)."""
    reg = choice(regime, "regime", ("online", "gradient_flow"))
    meth = choice(method, "method", ("euler", "rk4", "adaptive"))
    ro = choice(readout, "readout", ("sum", "mean"))
    if reg == "online" and act == "step":
        raise ValueError(
            "regime: the step activation's derivative is a delta, so only regime='gradient_flow' "
            "applies to step units"
        )
    return reg, meth, ro


def to_trajectory(out: dict[str, Any], meta: dict[str, Any], ov: Overlaps) -> Trajectory:
    """The :class:`~twolayer.Trajectory` of the core's output ``out`` from the start ``ov``, with the cost in its
    ``meta``."""
    meta = {
        **meta,
        "n_rhs": int(out["n_rhs"]),
        "n_steps": int(out["n_steps"]),
        "n_rejected": int(out["n_rejected"]),
        "stop_time": float(out["stop_time"]),
    }
    return Trajectory(
        t=out["t"],
        Q=out["Q"],
        M=out["M"],
        a=out["a"],
        risk=out["risk"],
        status=Status(out["status"]),
        message=str(out["message"]),
        time_unit=TIME_UNIT,
        meta=meta,
        P=ov.P.copy(),
        v=ov.v.copy(),
        stop_time=float(out["stop_time"]),
        bias=out.get("bias"),
        teacher_bias=ov.teacher_bias.copy() if "bias" in out else None,
    )


def solver_options(
    meth: str,
    t_max: float | None,
    times: ArrayLike | None,
    dt: float,
    rtol: float,
    atol: float,
    n_records: int,
    h_max: float | None,
    max_steps: int,
    n_threads: int | None,
    row_bytes: int = 0,
) -> tuple[tuple[NDArray[np.float64], str, float, float, float], dict[str, Any], dict[str, Any]]:
    """The integrator settings shared by :func:`integrate` and :func:`integrate_batch`, checked: the core's
    positional tail (times, method, dt, rtol, atol), its keyword arguments, and the matching metadata.
    ``row_bytes``: the bytes of the results per output time."""
    dt_ = positive(dt, "dt")
    rtol_ = positive(rtol, "rtol", allow_zero=True)
    atol_ = positive(atol, "atol", allow_zero=True)
    if meth == "adaptive" and rtol_ == 0 and atol_ == 0:
        raise ValueError("rtol, atol: they cannot both be 0")
    ts = _times(t_max, times, meth, dt_, n_records, row_bytes)
    keywords = {
        "h_max": 0.0 if h_max is None else positive(h_max, "h_max"),
        "max_steps": _max_steps(max_steps),
        "n_threads": n_threads_arg(n_threads),
    }
    meta: dict[str, Any] = {"method": meth}
    meta.update({"rtol": rtol_, "atol": atol_} if meth == "adaptive" else {"dt": dt_})
    return (ts, meth, dt_, rtol_, atol_), keywords, meta


def model_meta(act: str, t_act: str, reg: str, spherical: bool, ro: str) -> dict[str, Any]:
    """The model part of a run's ``meta``."""
    return {"activation": act, "teacher_activation": t_act, "regime": reg, "spherical": int(bool(spherical)),
            "readout": ro}


def is_step_flow(act: str, t_act: str, regime: str, spherical: bool) -> bool:
    """Whether the core integrates the system by the step-unit flow (:mod:`twolayer.step_flow`), whatever method."""
    return act == t_act == "step" and regime == "gradient_flow" and not spherical


def _max_steps(max_steps: Any) -> int:
    return integer(max_steps, "max_steps", 1)
