"""Order-parameter ODEs: online SGD in the high-dimensional limit (Saad-Solla) and population gradient flow.

Conventions (the documentation's Conventions page): student pre-activations l_i = w_i . x / sqrt(d),
x ~ N(0, I_d); Q = W W^T / d, M = W W*^T / d, P = W* W*^T / d; output f = sum_i a_i g(l_i) with the
*effective* (readout-scaled) second layer a held by :class:`~twolayer.Overlaps`; teacher
y = sum_r v_r t(l*_r) + sqrt(Delta) xi; error E = y - f. With E over (l, l*) ~ N(0, Omega), Omega = [[Q, M], [M^T, P]]:

* ``dM_ir/dt = lr a_i E[g'(l_i) l*_r E]``
* ``dQ_ik/dt = lr a_i E[g'(l_i) l_k E] + lr a_k E[g'(l_k) l_i E]
  + lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2] + Delta E[g'(l_i) g'(l_k)])`` (the last term in the online regime
  only)
* ``da_i/dt = lr_readout c^2 E[g(l_i) E]`` with c the readout factor (1 for ``readout="sum"``, 1/K for
  ``"mean"``).

``regime="online"``: the d -> infinity limit of online SGD (one fresh sample per step,
w_i += (lr / sqrt d) a_i g'(l_i) E x, a_i += (lr_readout / d) c g(l_i) E), time t = steps / d.
``regime="gradient_flow"``: the first-order terms only — the exact population gradient flow at any finite
d >= K + M (weight-space population GD with step eps, lambda = w.x / sqrt d, is Euler for this flow with
lr = 1 and dt = eps / d); output noise has no effect there. ``spherical=True``: projected SGD (as in
Arnaboldi, Krzakala, Loureiro & Stephan 2023, "Escaping mediocrity"), which keeps Q_ii = 1 exactly.
The recorded ``risk`` is the excess population risk (no Delta / 2).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._grid import output_times
from ._interrupt import Interrupted, keep_partial, partial_result
from ._progress import progress_bar
from ._validation import (
    INT32_MAX,
    Device,
    as_float_array,
    boolean,
    check_memory,
    choice,
    device_arg,
    integer,
    n_threads_arg,
    per_item,
    positive,
    real,
    seed_arg,
)
from .activations import ACTIVATIONS, ActivationName, check_activation
from .overlaps import BatchOverlaps, Overlaps, check_stack
from .results import BatchTrajectory, Trajectory
from .schedules import Schedule, as_schedule, core_arg

Regime = Literal["online", "gradient_flow"]
Method = Literal["euler", "rk4", "adaptive"]
Readout = Literal["sum", "mean"]

__all__ = ["BatchOverlaps", "BatchTrajectory", "integrate", "integrate_batch", "plateau_example", "plateau_overlaps",
           "rhs"]

_TIME_UNIT = "t = steps / d"


def _check_overlaps(ov: Any, name: str = "overlaps", spherical: bool = False) -> Overlaps:
    if not isinstance(ov, Overlaps):
        raise TypeError(f"{name}: expected a twolayer.Overlaps, got {type(ov).__name__}")
    # Overlaps validates on construction; its arrays are mutable, so re-check what the C++ core relies on.
    check_stack(ov.Q[None], ov.M[None], ov.P[None], ov.a[None], ov.v[None], lambda b, field: f"{name}: {field}")
    _check_spherical(ov.Q[None], spherical, lambda b, field: name)
    return ov


def _check_spherical(Q: NDArray[np.float64], spherical: bool, label: Callable[[int, str], str]) -> None:
    """spherical=True needs diag(Q) = 1 for every member of the stack Q (B, K, K)."""
    if not spherical:
        return
    bad = ~np.all(np.abs(np.diagonal(Q, axis1=1, axis2=2) - 1.0) <= 1e-10, axis=1)
    if bad.any():
        raise ValueError(f"{label(int(np.argmax(bad)), 'Q')}: spherical=True needs diag(Q) = 1 (weights on the sphere "
                         "|w|^2 = d)")


def _times(
    t_max: float | None, times: ArrayLike | None, method: str, dt: float, n_points: int, row_bytes: int = 0
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
    n_points = integer(n_points, "n_points", 2, INT32_MAX)
    check_memory(n_points * row_bytes, "n_points", f"{n_points} output times")
    ts = output_times(T, n_points)  # the grid SGD records on (twolayer._grid)
    if method != "adaptive":  # times off the fixed-step grid move to it, so outputs need no shortened steps
        k = np.round(ts / dt)
        off = np.abs(ts - k * dt) > 1e-9 * dt
        if off.any():
            ts = np.where(off, k * dt, ts)
            ts[-1] = T
            ts = np.unique(np.minimum(ts, T))
    return ts


def _activations(activation: Any, teacher_activation: Any, overlaps: Any) -> tuple[str, str]:
    """The (student, teacher) activations: the caller's (the teacher's defaulting to the student's, as before),
    or, when the caller gives no ``activation``, the ones the overlaps remember (``Overlaps.from_networks``)."""
    if activation is None:
        activation = getattr(overlaps, "activation", None)
        if teacher_activation is None:
            teacher_activation = getattr(overlaps, "teacher_activation", None)
        if activation is None:
            raise TypeError(
                f"activation: required (one of {', '.join(map(repr, ACTIVATIONS))}): the overlaps do not "
                "remember the activations of the networks they describe (only Overlaps.from_networks records them)")
    act = check_activation(activation, "activation")
    t_act = check_activation(teacher_activation if teacher_activation is not None else act, "teacher_activation")
    return act, t_act


def _common(
    act: str, regime: Any, method: Any, readout: Any
) -> tuple[str, str, str]:
    reg = choice(regime, "regime", ("online", "gradient_flow"))
    meth = choice(method, "method", ("euler", "rk4", "adaptive"))
    ro = choice(readout, "readout", ("sum", "mean"))
    if reg == "online" and act == "step":
        raise ValueError(
            "regime: the step activation's derivative is a delta, so only regime='gradient_flow' "
            "applies to step units"
        )
    return reg, meth, ro


def _trajectory(out: dict[str, Any], meta: dict[str, Any], ov: Overlaps) -> Trajectory:
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
        status=str(out["status"]),
        message=str(out["message"]),
        time_unit=_TIME_UNIT,
        meta=meta,
        P=ov.P.copy(),
        v=ov.v.copy(),
        stop_time=float(out["stop_time"]),
    )


def _solver_options(
    meth: str,
    t_max: float | None,
    times: ArrayLike | None,
    dt: float,
    rtol: float,
    atol: float,
    n_points: int,
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
    ts = _times(t_max, times, meth, dt_, n_points, row_bytes)
    keywords = {
        "h_max": 0.0 if h_max is None else positive(h_max, "h_max"),
        "max_steps": _max_steps(max_steps),
        "n_threads": n_threads_arg(n_threads),
    }
    meta: dict[str, Any] = {"method": meth}
    meta.update({"rtol": rtol_, "atol": atol_} if meth == "adaptive" else {"dt": dt_})
    return (ts, meth, dt_, rtol_, atol_), keywords, meta


def _model_meta(act: str, t_act: str, reg: str, spherical: bool, ro: str) -> dict[str, Any]:
    return {"activation": act, "teacher_activation": t_act, "regime": reg, "spherical": int(bool(spherical)),
            "readout": ro}


def integrate(
    overlaps: Overlaps,
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    lr_readout: float = 0.0,
    noise: float = 0.0,
    regime: Regime | Literal["large_batch"] = "online",
    spherical: bool = False,
    t_max: float | None = None,
    times: ArrayLike | None = None,
    method: Method = "adaptive",
    dt: float = 0.01,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    readout: Readout = "sum",
    risk_tol: float | None = None,
    risk_rtol: float | None = None,
    n_points: int = 101,
    h_max: float | None = None,
    max_steps: int = 100_000_000,
    n_threads: int | None = None,
    batch_ratio: float | None = None,
    steps: int | None = None,
    target: Any = None,
    schedule: Schedule | Callable[..., Any] | None = None,
) -> Trajectory:
    """Integrate the order-parameter ODE from ``overlaps``.

    The equations, time t = steps / d and the effective second layers a, v
    are those of the module docstring and the documentation's Conventions
    page.

    Parameters
    ----------
    overlaps : Overlaps
        The initial Q, M, a and the teacher's P, v.
    activation, teacher_activation : str, optional
        The student's and teacher's activations. When ``activation`` is not
        given, both come from the overlaps (``Overlaps.from_networks``
        records them; ``teacher_activation`` may still override the
        teacher's); overlaps built by hand remember none, and then
        ``activation`` is required (TypeError). When it is given,
        ``teacher_activation`` defaults to it.
    lr : float
        First-layer learning rate eta (>= 0).
    lr_readout : float, default 0.0
        Second-layer learning rate (0: the readout is fixed).
    noise : float, default 0.0
        Label-noise variance Delta (no effect for ``"gradient_flow"``).
    regime : {"online", "gradient_flow", "large_batch"}
        Online SGD as d -> infinity, or population gradient flow (the same
        ODE without the eta^2 and noise terms), or ``"large_batch"``: the
        d -> infinity map of SGD with fresh batches of ``batch_ratio`` * d
        samples and step ``lr`` = gamma0 (the simulator's ``lr / d``),
        iterated ``steps`` times with the second layer fixed; one row per
        iteration, t = iteration (:mod:`twolayer.large_batch`). Only
        ``noise``, ``spherical`` and ``n_threads`` of the other options
        apply.
    spherical : bool, default False
        Projected SGD on the sphere (needs diag(Q) = 1).
    t_max : float, optional
        Integrate to this time (give ``t_max`` or ``times``).
    times : array_like, optional
        Output times (non-decreasing, >= 0). Default: ``n_points`` equally
        spaced times t_k = k t_max / (n_points - 1), each the correctly
        rounded double, the grid :func:`twolayer.sgd.simulate` records on,
        so that ODE and SGD results align point by point in xarray (for the
        fixed-step methods, default times off the dt grid move to the
        nearest multiple of dt).
    method : {"adaptive", "rk4", "euler"}
        ``"adaptive"``: Dormand-Prince 5(4) with error control ``rtol``,
        ``atol`` (weighted RMS norm over the state); ``"euler"``, ``"rk4"``:
        fixed step ``dt`` (shortened only to land on an output time off the
        dt grid).
    dt : float, default 0.01
        Step of the fixed-step methods.
    rtol, atol : float
        Tolerances of the adaptive method (default 1e-8, 1e-10).
    readout : {"sum", "mean"}
        The readout factor c (1 or 1/K) of the trained second layer.
    risk_tol, risk_rtol : float, optional
        Stop early, with ``status="converged"``, at the first time the
        excess risk R(t) falls to ``max(risk_tol, risk_rtol * R(0))`` (None:
        no threshold of that kind). The crossing is located inside the step:
        on the adaptive method's 4th-order dense output (Illinois root
        finding to a few ulps of t), and for ``"euler"``/``"rk4"`` on the
        straight line between the last two states (an O(dt^2)
        approximation). The last recorded row is the state there and
        ``stop_time`` its time; later output times are not recorded.
    n_points : int, default 101
        Number of default output times.
    h_max : float, optional
        Largest step of the adaptive method.
    max_steps : int, default 100_000_000
        Step budget; when spent the run stops with ``status="max_steps"``.
    n_threads : int, optional
        Threads inside the right-hand side (used for K >= 8; None: the
        OpenMP default).
    batch_ratio : float, optional
        alpha = n_b / d of ``regime="large_batch"`` (required there).
    steps : int, optional
        Number of iterations of ``regime="large_batch"`` (required there).
    schedule : Schedule or callable, optional
        A learning-rate multiplier s(t) (:mod:`twolayer.schedules`):
        lr(t) = lr s(t) and lr_readout(t) = lr_readout s(t), evaluated at
        every stage's time inside the core (a callable is evaluated once, on
        4097 points of [0, t_end], and linearly interpolated); the adaptive
        method ends its steps at the jumps of a piecewise-constant one.
    target : HermiteTarget, optional
        A polynomial target of :mod:`twolayer.targets` instead of the
        committee teacher (default: the one ``Overlaps.from_networks(student,
        target)`` remembers). Then M is (K, k), P = I_k, v = 0, the error is
        E = f(z) - sum_j a_j g(l_j), and every expectation with the target is
        exact (Gaussian conditioning on the student fields, closed-form
        orthant moments); ``teacher_activation`` is unused. A
        :class:`~twolayer.targets.FunctionTarget` has no ODE (TypeError).

    Returns
    -------
    Trajectory
        ``t``, ``Q``, ``M``, ``a``, ``risk`` (the excess risk) at the output
        times, the teacher's ``P`` and ``v`` (``traj.overlaps_at(-1)``
        continues the run), ``status``, ``message``, ``stop_time`` (NaN when
        the run completed), and ``meta`` with the parameters and the cost
        (``n_rhs`` right-hand-side evaluations, ``n_steps``).

    Notes
    -----
    A run whose state becomes non-finite, overflows or leaves the positive
    semi-definite cone stops with ``status="diverged"``; the trajectory then
    holds the outputs reached and ``message`` / ``stop_time`` say when.
    Ctrl-C stops the integration within a fraction of a second and raises
    :class:`twolayer.Interrupted`, whose ``partial`` is the trajectory so far
    (``status="interrupted"``).

    Step units (student and teacher) in the gradient-flow regime are
    integrated by :mod:`twolayer.step_flow` whatever ``method`` (event
    location at alignment and Filippov sliding: their right-hand side is
    discontinuous there), with error control ``rtol``, ``atol``.

    Examples
    --------
    The Saad-Solla plateau of two erf students and its escape:

    >>> ov = tl.ode.plateau_overlaps(K=2, M=2)
    >>> traj = tl.ode.integrate(ov, "erf", lr=1.0, t_max=300, n_points=4)
    >>> traj.t
    array([  0., 100., 200., 300.])
    >>> np.round(traj.risk, 4)
    array([0.4598, 0.0207, 0.0009, 0.    ])

    Stop where the excess risk reaches 1e-2:

    >>> traj = tl.ode.integrate(ov, "erf", lr=1.0, t_max=300, risk_tol=1e-2)
    >>> traj.status, round(traj.stop_time, 3)
    ('converged', 166.818)
    """
    tgt = _target_arg(target, overlaps)
    if tgt is not None:
        return _integrate_target(overlaps, activation, tgt, lr=lr, lr_readout=lr_readout, noise=noise, regime=regime,
                                 spherical=spherical, t_max=t_max, times=times, method=method, dt=dt, rtol=rtol,
                                 atol=atol, readout=readout, risk_tol=risk_tol, risk_rtol=risk_rtol,
                                 n_points=n_points, h_max=h_max, max_steps=max_steps, schedule=schedule,
                                 batch_ratio=batch_ratio, steps=steps)
    act, t_act = _activations(activation, teacher_activation, overlaps)
    if regime == "large_batch":
        from .large_batch import iterate

        for name, value in (("t_max", t_max), ("times", times)):
            if value is not None:
                raise ValueError(f"{name}: regime='large_batch' counts iterations; give steps= instead")
        if lr_readout != 0.0:
            raise ValueError("lr_readout: regime='large_batch' keeps the second layer fixed (use "
                             "twolayer.large_batch.layerwise for a ridge second layer)")
        return iterate(_check_overlaps(overlaps), act, t_act, lr=lr, batch_ratio=batch_ratio, steps=steps,
                       noise=noise, spherical=spherical, n_threads=n_threads)
    reg, meth, ro = _common(act, regime, method, readout)
    spherical = boolean(spherical, "spherical")
    ov = _check_overlaps(overlaps, spherical=spherical)
    lr_ = positive(lr, "lr", allow_zero=True)
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    tol = 0.0 if risk_tol is None else positive(risk_tol, "risk_tol")
    rtol_r = 0.0 if risk_rtol is None else positive(risk_rtol, "risk_rtol")
    row_bytes = (ov.K * ov.K + ov.K * ov.n_teacher + ov.K + 1) * 8
    tail, keywords, solver_meta = _solver_options(meth, t_max, times, dt, rtol, atol, n_points, h_max, max_steps,
                                                  n_threads, row_bytes=row_bytes)
    c = 1.0 if ro == "sum" else 1.0 / ov.K
    sched = as_schedule(schedule, t_max=float(tail[0][-1]))
    meta = {**_model_meta(act, t_act, reg, spherical, ro), **solver_meta, "lr": lr_, "lr_readout": lr_a,
            "noise": noise_, "risk_tol": tol or math.nan, "risk_rtol": rtol_r or math.nan,
            **({} if sched is None else {"schedule": repr(sched)})}
    if _is_step_flow(act, t_act, reg, spherical):
        meta["method"] = "step_events"
    with partial_result(lambda out: _trajectory(out, meta, ov)):
        out = _core.ode_integrate(ov.Q, ov.M, ov.a, ov.P, ov.v, act, t_act, reg, bool(spherical), lr_,
                                  lr_a * c * c, noise_, *tail, 0.0, keywords["h_max"], tol, rtol_r,
                                  keywords["max_steps"], keywords["n_threads"], schedule=core_arg(sched))
    return _trajectory(out, meta, ov)


def _is_step_flow(act: str, t_act: str, regime: str, spherical: bool) -> bool:
    """Whether the core integrates the system by the step-unit flow (:mod:`twolayer.step_flow`), whatever method."""
    return act == t_act == "step" and regime == "gradient_flow" and not spherical


def _max_steps(max_steps: Any) -> int:
    return integer(max_steps, "max_steps", 1)


def _per_member(x: Any, name: str, B: int, none: float | None = None) -> NDArray[np.float64]:
    """:func:`per_item` over the B members, 0 allowed; ``None`` -> ``none`` where given."""
    if x is None and none is not None:
        return np.full(B, none)
    return per_item(x, name, B, allow_zero=True, item="member")


def _thresholds_off_as_nan(params: dict[str, NDArray[np.float64]]) -> dict[str, NDArray[np.float64]]:
    """The parameters as results report them: a threshold of 0 (the core's "off") as NaN, as in sgd.Ensemble."""
    return {k: np.where(v > 0, v, np.nan) if k in ("risk_tol", "risk_rtol") else v for k, v in params.items()}


def _group_by_shape(overlaps: Sequence[Any], tgts: Sequence[Any] | None = None) -> dict[tuple[int, int, bool],
                                                                                      list[int]]:
    """Member indices by (K, M, has a polynomial target)."""
    groups: dict[tuple[int, int, bool], list[int]] = {}
    for b, ov in enumerate(overlaps):
        if not isinstance(ov, Overlaps):
            raise TypeError(f"overlaps[{b}]: expected a twolayer.Overlaps, got {type(ov).__name__}")
        groups.setdefault((ov.K, ov.n_teacher, tgts is not None and tgts[b] is not None), []).append(b)
    return groups


def _stack_label(j: int, field: str) -> str:
    """Error labels of a BatchOverlaps input: ``Q[17]``."""
    return f"{field}[{j}]"


def _list_label(idx: list[int]) -> Callable[[int, str], str]:
    """Error labels of a shape group of a list input: member j of the group is ``overlaps[idx[j]]``."""

    def label(j: int, field: str) -> str:
        return f"overlaps[{idx[j]}]: {field}"

    return label


def _batch_groups(overlaps: Any, tgts: list[Any] | None = None) -> tuple[list[tuple[BatchOverlaps,
                                                                                NDArray[np.int64]]], int, Any]:
    """The input of :func:`integrate_batch` as shape groups: (stack, member indices) pairs, the batch size, and
    the object whose remembered activations apply (the BatchOverlaps, or the first member of a list when every
    member remembers the same ones). With per-member targets (``tgts``), members with and without one are
    separate groups."""
    if isinstance(overlaps, BatchOverlaps):
        if tgts is not None and any(t is None for t in tgts):
            raise TypeError("target: a BatchOverlaps takes one target for every member (or none)")
        return [(overlaps, np.arange(len(overlaps)))], len(overlaps), overlaps
    if isinstance(overlaps, Overlaps) or not isinstance(overlaps, Sequence) or isinstance(overlaps, str):
        raise TypeError(f"overlaps: expected a twolayer.BatchOverlaps or a sequence of twolayer.Overlaps, got "
                        f"{type(overlaps).__name__}")
    groups = []
    for idx in _group_by_shape(overlaps, tgts).values():
        members = [overlaps[b] for b in idx]
        # Stacked copies, validated together (the Overlaps' own arrays are mutable: re-checked here).
        stack = BatchOverlaps(np.stack([o.Q for o in members]), np.stack([o.M for o in members]),
                              np.stack([o.P for o in members]), np.stack([o.a for o in members]),
                              np.stack([o.v for o in members]),
                              _label=_list_label(idx))
        groups.append((stack, np.array(idx, dtype=np.int64)))
    acts = {(o.activation, o.teacher_activation) for o in overlaps}
    source = overlaps[0] if len(acts) == 1 else None
    return groups, len(overlaps), source


def _batch_targets(target: Any, overlaps: Any) -> list[Any] | None:
    """Each member's polynomial target (None: a committee member), or None when no member has one: ``target``
    (one for all, or a sequence of one per member), else what the members' overlaps remember."""
    if isinstance(overlaps, BatchOverlaps):
        B = len(overlaps)
        remembered: list[Any] = [None] * B
    elif isinstance(overlaps, Sequence) and not isinstance(overlaps, str):
        B = len(overlaps)
        remembered = [getattr(o, "target", None) for o in overlaps]
    else:
        return None  # _batch_groups raises the TypeError
    if target is None:
        tgts = remembered
    elif isinstance(target, Sequence) and not isinstance(target, str):
        if len(target) != B:
            raise ValueError(f"target: expected one target for all members or one per member ({B}), got "
                             f"{len(target)}")
        tgts = list(target)
    else:
        tgts = [target] * B
    if all(t is None for t in tgts):
        return None
    per_member = target is not None and isinstance(target, Sequence) and not isinstance(target, str)
    for b, t in enumerate(tgts):
        if t is not None:
            try:
                _target_arg(t, None)
            except TypeError as exc:
                if not per_member:
                    raise
                raise TypeError(f"target[{b}]: {str(exc).removeprefix('target: ')}") from None
    return tgts


def _target_activation(activation: Any, source: Any) -> str:
    """The student activation of a target batch (the argument, else what the overlaps remember)."""
    act = activation if activation is not None else getattr(source, "activation", None)
    if act is None:
        raise TypeError("activation: required (the overlaps do not remember one shared student activation)")
    return check_activation(act, "activation")


def _check_target_stack(stack: BatchOverlaps, tgts: list[Any], label: Callable[[int, str], str]) -> None:
    """Every member of a target group: M (K, k) for its target, P = I_k."""
    eye = np.eye(stack.n_teacher)
    for j, t in enumerate(tgts):
        if t.k != stack.n_teacher:
            raise ValueError(f"{label(j, 'M')}: must be (K, k) = ({stack.K}, {t.k}) for a target of k = {t.k} "
                             f"directions, got {(stack.K, stack.n_teacher)}")
        P = stack.P[0] if stack.shared_teacher else stack.P[j]
        if not np.allclose(P, eye, rtol=0.0, atol=1e-10):
            raise ValueError(f"{label(j, 'P')}: must be the identity I_k with a target (orthonormal directions)")


def integrate_batch(
    overlaps: BatchOverlaps | Sequence[Overlaps],
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float | ArrayLike,
    lr_readout: float | ArrayLike = 0.0,
    noise: float | ArrayLike = 0.0,
    regime: Regime = "online",
    spherical: bool = False,
    t_max: float | None = None,
    times: ArrayLike | None = None,
    method: Method = "adaptive",
    dt: float = 0.01,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    readout: Readout = "sum",
    risk_tol: float | ArrayLike | None = None,
    risk_rtol: float | ArrayLike | None = None,
    n_points: int = 101,
    h_max: float | None = None,
    max_steps: int = 100_000_000,
    n_threads: int | None = None,
    progress: bool = False,
    schedule: Schedule | Callable[..., Any] | None = None,
    target: Any = None,
    device: Device = "cpu",
) -> BatchTrajectory:
    """Integrate B independent systems in one C++ call per shape.

    The GIL is released and members run in parallel (OpenMP).

    Parameters
    ----------
    overlaps : BatchOverlaps or sequence of Overlaps
        Stacked arrays (:class:`~twolayer.BatchOverlaps`: Q (B, K, K), M (B, K, M), P (B, M, M) or (M, M),
        a (B, K), v (B, M) or (M,), validated all at once), or a list of :class:`~twolayer.Overlaps`, whose K
        and M may differ: members of equal shape are stacked and integrated together, in one core call per
        shape.
    lr, lr_readout, noise, risk_tol, risk_rtol : float or array_like (B,)
        One value for all members or one per member (>= 0; for ``risk_tol``/``risk_rtol`` None or 0 means no
        threshold).
    progress : bool
        Show a ``tqdm.auto`` bar of members finished (off by default; no effect on the results).
    schedule : Schedule or callable, optional
        Learning-rate multiplier s(t) shared by every member (each keeps its own base ``lr``), as in
        :func:`integrate`.
    target : HermiteTarget or sequence, optional
        A polynomial target of :mod:`twolayer.targets` shared by every
        member, or one per member (None for a committee member); without
        it, the targets the members' overlaps remember
        (``Overlaps.from_networks(student, target)``). Each target member
        runs exactly as ``integrate(..., target=)`` runs it (M (K, k),
        P = I_k); members of equal K and k share a core call. Regimes
        'online' and 'gradient_flow' ('large_batch' is per member:
        :func:`integrate`).
    device : {"cpu", "cuda"}
        ``"cuda"``: the optional CUDA backend (a build with ``TWOLAYER_CUDA=ON`` and a GPU, else
        :class:`twolayer.DeviceUnavailable` naming what is missing), one GPU thread per member with its own steps,
        status and stop rule, for committees whose student and teacher are both erf, relu, quadratic or linear,
        K = M in {2, 4, 8} (erf: {1, 2, 3, 4, 8}; relu: {2, 4}) or K, M <= 4, a constant learning rate and no
        target; ``n_threads`` is then unused. The GPU does the CPU lanes' operations in the same order (no fused
        multiply-add): rows agree with the CPU's to the last bits for the fixed-step methods (docs/layers/gpu.rst).

    Returns
    -------
    BatchTrajectory
        Arrays (B, T, ...) on the shared output times, rows after a member's stop filled with NaN (its own
        ``n_recorded`` rows are valid; the state at a located early stop is in the ``*_final`` arrays), members
        of a mixed-shape batch padded with NaN to the largest K and M; per-member ``status``, ``stop_time``
        (NaN: no stop), ``n_rhs``. Iterating or indexing it gives each member's :class:`~twolayer.Trajectory`.
        On Ctrl-C, :class:`twolayer.Interrupted`'s ``partial`` is the BatchTrajectory so far: finished members as
        they are, the others with ``status="interrupted"`` and the rows they reached (none if never started).

    Notes
    -----
    Activations (from the arguments, else from the overlaps as in :func:`integrate`), regime, method and output
    times are shared by every member; the other arguments are as in :func:`integrate`. Each member is integrated
    exactly as :func:`integrate` would integrate it alone (bitwise: same steps, same rows), with its own step
    sizes and its own status: a stiff or diverging member does not affect the others. Step units in the
    gradient-flow regime run the step-unit flow of :mod:`twolayer.step_flow`, member by member.

    Examples
    --------
    Two members with their own learning rate and threshold:

    >>> ov = tl.ode.plateau_overlaps()
    >>> batch = tl.ode.integrate_batch([ov, ov], "erf", lr=[1.0, 1.0],
    ...                                t_max=300, risk_tol=[1e-2, 1e-3])
    >>> batch
    BatchTrajectory(B=2, T=101, converged=2)
    >>> np.round(batch.stop_time, 3)
    array([166.818, 198.457])
    >>> batch[0].status, batch.risk.shape
    ('converged', (2, 101))

    A polynomial target shared by two students (or ``target=[t1, t2]``):

    >>> tgt = tl.targets.staircase(2, d=30, seed=0)
    >>> ovs = [tl.Overlaps.from_networks(tl.Network.random(2, 30, "relu", seed=s), tgt)
    ...        for s in (1, 2)]
    >>> tl.ode.integrate_batch(ovs, "relu", lr=0.5, t_max=1, n_points=3).M.shape
    (2, 3, 2, 2)
    """
    if regime == "large_batch":
        raise ValueError("regime: integrate_batch integrates the ODE ('online' or 'gradient_flow'); the "
                         "large-batch map counts iterations: run ode.integrate(..., regime='large_batch', "
                         "batch_ratio=..., steps=...) per member")
    tgts = _batch_targets(target, overlaps)
    groups, B, source = _batch_groups(overlaps, tgts)
    if tgts is None:
        act, t_act = _activations(activation, teacher_activation, source)
    else:
        act = _target_activation(activation, source)
        committee = [o for o, t in zip(overlaps, tgts, strict=True) if t is None]
        t_act = "target" if not committee else _activations(act, teacher_activation, committee[0])[1]
    reg, meth, ro = _common(act, regime, method, readout)
    spherical = boolean(spherical, "spherical")
    progress = boolean(progress, "progress")
    device = device_arg(device)
    for stack, idx in groups:
        label = _stack_label if isinstance(overlaps, BatchOverlaps) else _list_label(idx.tolist())
        _check_spherical(stack.Q, spherical, label)
        if tgts is not None and tgts[idx[0]] is not None:
            _check_target_stack(stack, [tgts[b] for b in idx], label)
    params = {
        "lr": _per_member(lr, "lr", B),
        "lr_readout": _per_member(lr_readout, "lr_readout", B),
        "noise": _per_member(noise, "noise", B),
        "risk_tol": _per_member(risk_tol, "risk_tol", B, none=0.0),
        "risk_rtol": _per_member(risk_rtol, "risk_rtol", B, none=0.0),
    }
    K, Mt = (max((getattr(s, n) for s, _ in groups), default=0) for n in ("K", "n_teacher"))
    tail, keywords, solver_meta = _solver_options(meth, t_max, times, dt, rtol, atol, n_points, h_max, max_steps,
                                                  n_threads, row_bytes=B * (K * K + K * Mt + K + 1) * 8)
    sched = as_schedule(schedule, t_max=float(tail[0][-1]))
    meta = {**_model_meta(act, t_act, reg, spherical, ro), **solver_meta,
            **({} if sched is None else {"schedule": repr(sched)}),
            **({"method": "step_events"} if _is_step_flow(act, t_act, reg, spherical) else {}),
            **({"device": "cuda"} if device == "cuda" else {})}
    if tgts is not None:
        names = [repr(t) for t in tgts if t is not None]
        meta["target"] = names[0] if len(set(names)) == 1 else "[" + ", ".join(map(str, (
            repr(t) if t is not None else None for t in tgts))) + "]"
    ts = tail[0]
    outs: list[dict[str, Any] | None] = [None] * len(groups)
    shared: dict[str, NDArray[Any]] | None = None

    def result() -> BatchTrajectory:
        return _assemble(groups, outs, B, ts, params, meta, shared)

    def run(report: Callable[[int], None] | None) -> None:
        done = 0
        for g, (stack, idx) in enumerate(groups):
            P, v = (stack.P[0], stack.v[0]) if stack.shared_teacher else (stack.P, stack.v)
            member_tgts = None if tgts is None or tgts[idx[0]] is None else [tgts[b]._arrays() for b in idx]
            if member_tgts is None:
                c2 = 1.0 if ro == "sum" else 1.0 / stack.K**2
                lr_a, teacher = params["lr_readout"][idx] * c2, t_act
            else:  # as ode.integrate(..., target=) runs each member: P = I_k exactly, v = 0, a linear zero committee
                c = 1.0 if ro == "sum" else 1.0 / stack.K
                lr_a, teacher = params["lr_readout"][idx] * c * c, "linear"
                P, v = np.eye(stack.n_teacher), np.zeros(stack.n_teacher)
            callback = None if report is None else (lambda n, done=done: report(done + n))
            try:
                outs[g] = _core.ode_integrate_batch(
                    stack.Q, stack.M, stack.a, P, v, act, teacher, reg, bool(spherical), params["lr"][idx],
                    lr_a, params["noise"][idx], *tail, 0.0, keywords["h_max"],
                    params["risk_tol"][idx], params["risk_rtol"][idx], keywords["max_steps"], keywords["n_threads"],
                    callback, schedule=core_arg(sched), targets=member_tgts, out=shared,
                    members=None if shared is None else idx, device=device)
            except Interrupted as exc:
                if exc.partial is not None:
                    outs[g] = exc.partial
                exc.partial = result()
                raise
            done += len(idx)

    # a Ctrl-C between two groups' core calls, or in the bar: the finished members (None before the first call)
    with keep_partial(lambda: None if all(o is None for o in outs) else result()):
        # several shapes: every group's rows go straight into one set of arrays padded to the largest K and M,
        # made (NaN) before the first run, so that neither the result nor a Ctrl-C's partial copies them afterwards
        shared = None if len(groups) == 1 else _padded_rows(B, ts.size, K, Mt)
        with progress_bar(progress, B, "member", "ODE batch") as update:
            run(update)
        return result()


def _padded_rows(B: int, T: int, K: int, M: int) -> dict[str, NDArray[Any]]:
    """The row arrays of a mixed-shape batch, padded to the largest K and M, as the core fills them: NaN, no row
    recorded (filled in blocks of ~32 MB, so that a Ctrl-C is seen between them)."""
    def nans(*shape: int) -> NDArray[np.float64]:
        out = np.empty(shape)
        step = max(1, (1 << 22) // max(1, out[:1].size))
        for i in range(0, shape[0], step):
            out[i:i + step] = math.nan
        return out

    return {"Q": nans(B, T, K, K), "M": nans(B, T, K, M), "a": nans(B, T, K), "risk": nans(B, T),
            "t_final": nans(B), "Q_final": nans(B, K, K), "M_final": nans(B, K, M), "a_final": nans(B, K),
            "risk_final": nans(B), "n_recorded": np.zeros(B, dtype=np.int64)}


def _assemble(
    groups: list[tuple[BatchOverlaps, NDArray[np.int64]]],
    outs: list[dict[str, Any] | None],
    B: int,
    ts: NDArray[np.float64],
    params: dict[str, NDArray[np.float64]],
    meta: dict[str, Any],
    shared: dict[str, NDArray[Any]] | None = None,
) -> BatchTrajectory:
    """One BatchTrajectory from the core's per-group outputs (None: the group never ran, its members are
    "interrupted" with no rows). A single group is used as it is (no copy); several wrote their rows into the
    ``shared`` padded arrays (:func:`_padded_rows`), and only their per-member scalars are scattered here."""
    T = ts.shape[0]
    gpu_seconds = [o["gpu_seconds"] for o in outs if o is not None and "gpu_seconds" in o]
    if gpu_seconds:  # device="cuda": the device's own time (kernels and copies), for benchmarks
        meta = {**meta, "gpu_seconds": float(sum(gpu_seconds))}
    if len(groups) == 1 and outs[0] is not None:
        stack, _ = groups[0]
        out = outs[0]
        assert out is not None
        arrays = {k: out[k] for k in ("Q", "M", "a", "risk", "t_final", "Q_final", "M_final", "a_final",
                                      "risk_final", "stop_time", "n_recorded", "n_rhs", "n_steps", "n_rejected")}
        status, message = np.array(out["status"], dtype=str), np.array(out["message"], dtype=str)
        P, v = stack.P, stack.v
        n_student, n_teacher = np.full(B, stack.K, dtype=np.int64), np.full(B, stack.n_teacher, dtype=np.int64)
    else:
        K = max((s.K for s, _ in groups), default=0)
        Mt = max((s.n_teacher for s, _ in groups), default=0)
        nan = math.nan
        arrays = {**(shared if shared is not None else _padded_rows(B, T, K, Mt)), "stop_time": np.zeros(B),
                  **{k: np.zeros(B, dtype=np.int64) for k in ("n_rhs", "n_steps", "n_rejected")}}
        status = np.full(B, "interrupted", dtype="<U11")
        message = np.full(B, "interrupted before it started", dtype=object)
        P, v = np.full((B, Mt, Mt), nan), np.full((B, Mt), nan)
        n_student, n_teacher = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
        for (stack, idx), part in zip(groups, outs, strict=True):
            k, m = stack.K, stack.n_teacher
            P[idx, :m, :m], v[idx, :m] = stack.P, stack.v
            n_student[idx], n_teacher[idx] = k, m
            if part is None:
                continue
            for name in ("stop_time", "n_rhs", "n_steps", "n_rejected"):
                arrays[name][idx] = part[name]
            status[idx] = part["status"]
            message[idx] = part["message"]
        message = message.astype(str)
    return BatchTrajectory(
        t=ts.copy(), P=P, v=v, status=status, message=message, n_student=n_student, n_teacher=n_teacher,
        params=_thresholds_off_as_nan(params), time_unit=_TIME_UNIT, meta=meta, **arrays)


# |overlaps| above which rhs() refuses to evaluate (the kernels' range; integrate() stops far earlier, at the
# divergence rule's bound: docs/conventions.rst, "Divergence").
_OVERFLOW = 1e100


def rhs(
    overlaps: Overlaps,
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    lr_readout: float = 0.0,
    noise: float = 0.0,
    regime: Regime = "online",
    spherical: bool = False,
    readout: Readout = "sum",
    n_threads: int | None = None,
    target: Any = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The right-hand side of the ODE at ``overlaps``.

    Same conventions and arguments as :func:`integrate` (activations from
    the overlaps when ``activation`` is not given). Overlaps above 1e100 in
    magnitude (beyond the kernels' range; :func:`integrate` stops a run long
    before, at 1e8 times the scale of its start), or a right-hand side beyond
    the double range, raise ValueError.

    Parameters
    ----------
    overlaps : Overlaps
        Where to evaluate.
    activation, teacher_activation : str, optional
        As in :func:`integrate`.
    lr, lr_readout, noise : float
        Learning rates and label-noise variance.
    regime : {"online", "gradient_flow"}
        As in :func:`integrate`.
    spherical : bool, default False
        Projected SGD.
    readout : {"sum", "mean"}
        The readout factor of the trained second layer.
    n_threads : int, optional
        Threads (used for K >= 8).
    target : HermiteTarget, optional
        A polynomial target of :mod:`twolayer.targets` instead of the
        committee teacher (default: the one ``Overlaps.from_networks(student,
        target)`` remembers). Then M is (K, k), P = I_k, v = 0, the error is
        E = f(z) - sum_j a_j g(l_j), and every expectation with the target is
        exact (Gaussian conditioning on the student fields, closed-form
        orthant moments); ``teacher_activation`` is unused. A
        :class:`~twolayer.targets.FunctionTarget` has no ODE (TypeError).

    Returns
    -------
    dQ, dM, da : ndarray
        Shapes (K, K), (K, M), (K,).

    Examples
    --------
    Gradient flow is the online ODE without the eta^2 terms, so the two
    differ in dQ only:

    >>> ov = tl.ode.plateau_overlaps()
    >>> dQ, dM, da = tl.ode.rhs(ov, "erf", lr=1.0)
    >>> dQg, dMg, dag = tl.ode.rhs(ov, "erf", lr=1.0, regime="gradient_flow")
    >>> bool(np.allclose(dM, dMg)), bool(np.allclose(dQ, dQg))
    (True, False)
    """
    tgt = _target_arg(target, overlaps)
    if tgt is not None:
        return _rhs_target(overlaps, activation, tgt, lr=lr, lr_readout=lr_readout, noise=noise, regime=regime,
                           spherical=spherical, readout=readout)
    act, t_act = _activations(activation, teacher_activation, overlaps)
    reg, _, ro = _common(act, regime, "adaptive", readout)
    spherical = boolean(spherical, "spherical")
    ov = _check_overlaps(overlaps, spherical=spherical)
    for name in ("Q", "M", "a", "P", "v"):
        big = float(np.max(np.abs(getattr(ov, name)), initial=0.0))
        if big > _OVERFLOW:
            raise ValueError(f"overlaps: {name} out of range (max |{name}| = {big:.3g} > {_OVERFLOW:.0e}, beyond the "
                             "kernels' range)")
    c = 1.0 if ro == "sum" else 1.0 / ov.K
    dQ, dM, da = _core.ode_rhs(
        ov.Q,
        ov.M,
        ov.a,
        ov.P,
        ov.v,
        act,
        t_act,
        reg,
        bool(spherical),
        positive(lr, "lr", allow_zero=True),
        positive(lr_readout, "lr_readout", allow_zero=True) * c * c,
        positive(noise, "noise", allow_zero=True),
        n_threads=n_threads_arg(n_threads),
    )
    if not (np.all(np.isfinite(dQ)) and np.all(np.isfinite(dM)) and np.all(np.isfinite(da))):
        raise ValueError("overlaps: out of range: the right-hand side exceeds the double range")
    return dQ, dM, da


def plateau_overlaps(K: int = 2, M: int = 2, q0: float = 0.25, m0: float = 1e-3, seed: int = 0) -> Overlaps:
    """A near-symmetric erf start (Saad & Solla 1995): Q = q0 I, P = I, tiny M, a = v = 1.

    Parameters
    ----------
    K, M : int, default 2
        Student and teacher units.
    q0 : float, default 0.25
        Q = q0 I.
    m0 : float, default 1e-3
        M_ir = m0 (1 + 0.5 z_ir) with z_ir ~ N(0, 1) from ``seed``.
    seed : int, default 0
        Seed of the asymmetry.

    Returns
    -------
    Overlaps
        (Remembering no activation: pass ``"erf"`` to the ODE.)

    Examples
    --------
    >>> ov = tl.ode.plateau_overlaps()
    >>> ov.Q
    array([[0.25, 0.  ],
           [0.  , 0.25]])
    >>> bool(np.all(np.abs(ov.M) < 2e-3))
    True
    """
    K, M = integer(K, "K", 1, INT32_MAX), integer(M, "M", 1, INT32_MAX)
    q0, m0 = positive(q0, "q0"), real(m0, "m0")
    rng = np.random.default_rng(seed_arg(seed))
    Mo = m0 * (1.0 + 0.5 * rng.standard_normal((K, M)))
    return Overlaps(q0 * np.eye(K), Mo, np.eye(M), np.ones(K), np.ones(M))


def plateau_example(
    t_max: float = 2000.0, lr: float = 1.0, method: Method = "adaptive", **kwargs: Any
) -> Trajectory:
    """The erf K = M = 2 Saad-Solla plateau and its escape, by the online ODE.

    The excess risk falls quickly onto the symmetric plateau (students not
    yet specialised: all M_ir nearly equal), stays there for a time growing
    like log(1 / asymmetry), then escapes to 0 as each student specialises
    on one teacher unit.

    Parameters
    ----------
    t_max : float, default 2000.0
        Duration.
    lr : float, default 1.0
        Learning rate.
    method : {"adaptive", "rk4", "euler"}
        The integrator.
    **kwargs
        Passed to :func:`integrate` (``n_points`` defaults to 400).

    Returns
    -------
    Trajectory

    Examples
    --------
    >>> traj = tl.ode.plateau_example(t_max=50, n_points=3)
    >>> traj
    Trajectory(T=3, K=2, M=2, status='completed', final_risk=0.0207531)
    """
    return integrate(
        plateau_overlaps(),
        "erf",
        lr=lr,
        t_max=t_max,
        method=method,
        n_points=kwargs.pop("n_points", 400),
        **kwargs,
    )


# ---- polynomial targets (twolayer.targets.HermiteTarget): the core's target right-hand side (target.hpp) ----

def _target_arg(target: Any, overlaps: Any) -> Any:
    """The polynomial target of a call: ``target``, else the one the overlaps remember, else None; TypeError
    for targets without an ODE."""
    from .networks import Network
    from .targets import FunctionTarget, HermiteTarget

    tgt = target if target is not None else getattr(overlaps, "target", None)
    if tgt is None or isinstance(tgt, HermiteTarget):
        return tgt
    if isinstance(tgt, FunctionTarget):
        raise TypeError("target: a FunctionTarget (a Python function of the projections) has no order-parameter "
                        "ODE: its expectations are not known in closed form; use sgd.simulate, or write the target "
                        "as a polynomial (targets.hermite)")
    if isinstance(tgt, Network):
        raise TypeError("target: a committee Network is the ODE's ordinary teacher: pass its overlaps "
                        "(Overlaps.from_networks(student, teacher)) without target=")
    raise TypeError(f"target: expected a twolayer.targets.HermiteTarget, got {type(tgt).__name__}")


def _target_state(overlaps: Any, activation: Any, tgt: Any, spherical: bool) -> tuple[Overlaps, str]:
    """The checked overlaps (M (K, k), P = I_k, v = 0) and the student activation of a target run."""
    ov = _check_overlaps(overlaps, spherical=spherical)
    act = activation if activation is not None else ov.activation
    if act is None:
        raise TypeError("activation: required (the overlaps do not remember the student's activation)")
    act = check_activation(act, "activation")
    if ov.M.shape != (ov.K, tgt.k):
        raise ValueError(f"overlaps: M must be (K, k) = ({ov.K}, {tgt.k}) for a target of k = {tgt.k} directions, "
                         f"got {ov.M.shape}")
    if not np.allclose(ov.P, np.eye(tgt.k), rtol=0.0, atol=1e-10):
        raise ValueError("overlaps: P must be the identity I_k with a target (orthonormal directions)")
    return ov, act


def _integrate_target(overlaps: Any, activation: Any, tgt: Any, *, lr: float, lr_readout: float, noise: float,
                      regime: Any, spherical: Any, t_max: float | None, times: ArrayLike | None, method: Any,
                      dt: float, rtol: float, atol: float, readout: Any, risk_tol: float | None,
                      risk_rtol: float | None, n_points: int, h_max: float | None, max_steps: int,
                      schedule: Any = None, batch_ratio: float | None = None,
                      steps: int | None = None) -> Trajectory:
    spherical = boolean(spherical, "spherical")
    ov, act = _target_state(overlaps, activation, tgt, spherical)
    if regime == "large_batch":
        from .large_batch import iterate

        for name, value in (("t_max", t_max), ("times", times), ("schedule", schedule)):
            if value is not None:
                raise ValueError(f"{name}: regime='large_batch' counts iterations at a fixed step; give steps= "
                                 "instead")
        if lr_readout != 0.0:
            raise ValueError("lr_readout: regime='large_batch' keeps the second layer fixed")
        return iterate(ov, act, "target", lr=lr, batch_ratio=batch_ratio, steps=steps, noise=noise,
                       spherical=spherical, target=tgt)
    reg, meth, ro = _common(act, regime, method, readout)
    lr_ = positive(lr, "lr", allow_zero=True)
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    tol = 0.0 if risk_tol is None else positive(risk_tol, "risk_tol")
    rtol_r = 0.0 if risk_rtol is None else positive(risk_rtol, "risk_rtol")
    tail, keywords, solver_meta = _solver_options(meth, t_max, times, dt, rtol, atol, n_points, h_max, max_steps,
                                                  1)
    c = 1.0 if ro == "sum" else 1.0 / ov.K
    meta = {**_model_meta(act, "target", reg, spherical, ro), **solver_meta, "lr": lr_, "lr_readout": lr_a,
            "noise": noise_, "risk_tol": tol or math.nan, "risk_rtol": rtol_r or math.nan, "target": repr(tgt)}
    sched = as_schedule(schedule, t_max=float(tail[0][-1]))
    if sched is not None:
        meta["schedule"] = repr(sched)
    alpha, coef = tgt._arrays()
    with partial_result(lambda out: _trajectory(out, meta, ov)):
        out = _core.ode_integrate_target(ov.Q, ov.M, ov.a, alpha, coef, act, reg, bool(spherical), lr_,
                                         lr_a * c * c, noise_, *tail, keywords["h_max"], tol, rtol_r,
                                         keywords["max_steps"], schedule=core_arg(sched))
    return _trajectory(out, meta, ov)


def _rhs_target(overlaps: Any, activation: Any, tgt: Any, *, lr: float, lr_readout: float, noise: float,
                regime: Any, spherical: Any, readout: Any) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                                                    NDArray[np.float64]]:
    spherical = boolean(spherical, "spherical")
    ov, act = _target_state(overlaps, activation, tgt, spherical)
    reg, _, ro = _common(act, regime, "adaptive", readout)
    c = 1.0 if ro == "sum" else 1.0 / ov.K
    alpha, coef = tgt._arrays()
    dQ, dM, da, _ = _core.ode_rhs_target(ov.Q, ov.M, ov.a, alpha, coef, act, reg, bool(spherical),
                                         positive(lr, "lr", allow_zero=True),
                                         positive(lr_readout, "lr_readout", allow_zero=True) * c * c,
                                         positive(noise, "noise", allow_zero=True))
    if not (np.all(np.isfinite(dQ)) and np.all(np.isfinite(dM)) and np.all(np.isfinite(da))):
        raise ValueError("overlaps: out of range: the right-hand side exceeds the double range")
    return dQ, dM, da
