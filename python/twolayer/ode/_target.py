"""Polynomial targets (:class:`twolayer.targets.HermiteTarget`): the ODE and its right-hand side with the core's
target right-hand side (target.hpp), every expectation with the target exact."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _core
from .._interrupt import partial_result
from .._overlap_args import check_target_overlaps
from .._validation import boolean, positive
from ..results import Trajectory
from ..schedules import as_schedule, core_arg
from ._bias import bias_kwargs
from ._solver import check_choices, model_meta, solver_options, to_trajectory


def integrate_target(overlaps: Any, activation: Any, tgt: Any, *, lr: float, lr_readout: float, noise: float,
                     regime: Any, spherical: Any, t_max: float | None, times: ArrayLike | None, method: Any,
                     dt: float, rtol: float, atol: float, readout: Any, risk_tol: float | None,
                     risk_rtol: float | None, n_records: int, h_max: float | None, max_steps: int,
                     schedule: Any = None, lr_bias: float = 0.0) -> Trajectory:
    """:func:`~twolayer.ode.integrate` with the polynomial target ``tgt`` (arguments as there; student biases, fixed
    or trained with ``lr_bias``, as in ``ode._bias``)."""
    spherical = boolean(spherical, "spherical")
    ov, act = check_target_overlaps(overlaps, activation, tgt, spherical)
    biases = bias_kwargs(ov, lr_bias)
    reg, meth, ro = check_choices(act, regime, method, readout)
    lr_ = positive(lr, "lr", allow_zero=True)
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    tol = 0.0 if risk_tol is None else positive(risk_tol, "risk_tol")
    rtol_r = 0.0 if risk_rtol is None else positive(risk_rtol, "risk_rtol")
    tail, keywords, solver_meta = solver_options(meth, t_max, times, dt, rtol, atol, n_records, h_max, max_steps,
                                                 1)
    c = 1.0 if ro == "sum" else 1.0 / ov.K
    meta = {**model_meta(act, "target", reg, spherical, ro), **solver_meta, "lr": lr_, "lr_readout": lr_a,
            "noise": noise_, "risk_tol": tol or math.nan, "risk_rtol": rtol_r or math.nan, "target": repr(tgt),
            **({"lr_bias": biases["lr_bias"]} if biases else {})}
    sched = as_schedule(schedule, t_max=float(tail[0][-1]))
    if sched is not None:
        meta["schedule"] = repr(sched)
    alpha, coef = tgt._arrays()
    with partial_result(lambda out: to_trajectory(out, meta, ov)):
        out = _core.ode_integrate_target(ov.Q, ov.M, ov.a, alpha, coef, act, reg, bool(spherical), lr_,
                                         lr_a * c * c, noise_, *tail, keywords["h_max"], tol, rtol_r,
                                         keywords["max_steps"], schedule=core_arg(sched), **biases)
    return to_trajectory(out, meta, ov)


def rhs_target(overlaps: Any, activation: Any, tgt: Any, *, lr: float, lr_readout: float, noise: float,
               regime: Any, spherical: Any, readout: Any, lr_bias: float = 0.0,
               n_threads: int = 1) -> tuple[NDArray[np.float64], ...]:
    """:func:`~twolayer.ode.rhs` with the polynomial target ``tgt`` (arguments as there): (dQ, dM, da), and db
    with biases."""
    spherical = boolean(spherical, "spherical")
    ov, act = check_target_overlaps(overlaps, activation, tgt, spherical)
    reg, _, ro = check_choices(act, regime, "adaptive", readout)
    c = 1.0 if ro == "sum" else 1.0 / ov.K
    alpha, coef = tgt._arrays()
    dQ, dM, da, _, *db = _core.ode_rhs_target(ov.Q, ov.M, ov.a, alpha, coef, act, reg, bool(spherical),
                                              positive(lr, "lr", allow_zero=True),
                                              positive(lr_readout, "lr_readout", allow_zero=True) * c * c,
                                              positive(noise, "noise", allow_zero=True), n_threads=n_threads,
                                              **bias_kwargs(ov, lr_bias))
    out = (dQ, dM, da, *db)
    if not all(np.all(np.isfinite(x)) for x in out):
        raise ValueError("overlaps: out of range: the right-hand side exceeds the double range")
    return out
