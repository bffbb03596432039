"""Order-parameter ODEs: online SGD in the high-dimensional limit (Saad-Solla) and population gradient flow.

Conventions (DESIGN.md §3): student pre-activations l_i = w_i . x / sqrt(d), x ~ N(0, I_d); Q = W W^T / d,
M = W W*^T / d, P = W* W*^T / d; output f = sum_i a_i g(l_i) with the *effective* (readout-scaled) second
layer a held by :class:`~twolayer.Overlaps`; teacher y = sum_r v_r t(l*_r) + sqrt(Delta) xi; error
E = y - f. With E over (l, l*) ~ N(0, Omega), Omega = [[Q, M], [M^T, P]]:

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
lr = 1 and dt = eps / d); output noise has no effect there. ``spherical=True``: projected SGD (seed 003),
which keeps Q_ii = 1 exactly.
The recorded ``risk`` is the excess population risk (no Delta / 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._interrupt import partial_result
from ._validation import (
    INT32_MAX,
    as_float_array,
    boolean,
    choice,
    integer,
    n_threads_arg,
    positive,
    real,
    seed_arg,
)
from .activations import ActivationName, check_activation
from .overlaps import Overlaps
from .results import Trajectory

Regime = Literal["online", "gradient_flow"]
Method = Literal["euler", "rk4", "adaptive"]
Readout = Literal["sum", "mean"]

__all__ = ["integrate", "integrate_batch", "plateau_example", "plateau_overlaps", "rhs"]

_TIME_UNIT = "t = steps / d"


def _check_overlaps(ov: Any, name: str = "overlaps", spherical: bool = False) -> Overlaps:
    if not isinstance(ov, Overlaps):
        raise TypeError(f"{name}: expected a twolayer.Overlaps, got {type(ov).__name__}")
    # Overlaps validates on construction; its arrays are mutable, so re-check what the C++ core relies on.
    omega = ov.omega
    if not np.all(np.isfinite(omega)) or not np.all(np.isfinite(ov.a)) or not np.all(np.isfinite(ov.v)):
        raise ValueError(f"{name}: overlaps and second layers must be finite")
    scale = max(float(np.max(np.abs(np.diag(omega)))), 1e-300)
    if not np.allclose(omega, omega.T, rtol=0, atol=1e-9 * scale):
        raise ValueError(f"{name}: Q and P must be symmetric")
    if np.linalg.eigvalsh(omega)[0] < -1e-9 * scale:
        raise ValueError(f"{name}: the overlap matrix [[Q, M], [M^T, P]] must be positive semi-definite")
    if spherical and not np.allclose(np.diag(ov.Q), 1.0, rtol=0, atol=1e-10):
        raise ValueError(f"{name}: spherical=True needs diag(Q) = 1 (weights on the sphere |w|^2 = d)")
    return ov


def _check_overlaps_batch(overlaps: Sequence[Any], spherical: bool) -> list[Overlaps]:
    """_check_overlaps for many members at once: members of equal (K, M) are checked as one stacked array."""
    groups: dict[tuple[int, int], list[int]] = {}
    for b, ov in enumerate(overlaps):
        if not isinstance(ov, Overlaps):
            raise TypeError(f"overlaps[{b}]: expected a twolayer.Overlaps, got {type(ov).__name__}")
        groups.setdefault((ov.K, ov.n_teacher), []).append(b)
    for idx in groups.values():
        Q = np.stack([overlaps[b].Q for b in idx])
        Mo = np.stack([overlaps[b].M for b in idx])
        P = np.stack([overlaps[b].P for b in idx])
        omega = np.concatenate(
            [np.concatenate([Q, Mo], axis=2), np.concatenate([np.swapaxes(Mo, 1, 2), P], axis=2)], axis=1
        )
        lam = None
        if np.all(np.isfinite(omega)):
            scale = np.maximum(np.max(np.abs(np.diagonal(omega, axis1=1, axis2=2)), axis=1), 1e-300)
            asym = np.max(np.abs(omega - np.swapaxes(omega, 1, 2)), axis=(1, 2)) > 1e-9 * scale
            if not np.any(asym):
                lam = np.linalg.eigvalsh(omega)[:, 0] / scale
        if lam is None or np.any(lam < -1e-9):  # find and name the first bad member
            for b in idx:
                _check_overlaps(overlaps[b], f"overlaps[{b}]", spherical)
        for b in idx:
            ov = overlaps[b]
            if not (np.all(np.isfinite(ov.a)) and np.all(np.isfinite(ov.v))):
                raise ValueError(f"overlaps[{b}]: second layers must be finite")
            if spherical and not np.allclose(np.diag(ov.Q), 1.0, rtol=0, atol=1e-10):
                raise ValueError(f"overlaps[{b}]: spherical=True needs diag(Q) = 1 (weights on |w|^2 = d)")
    return list(overlaps)


def _times(
    t_max: float | None, times: ArrayLike | None, method: str, dt: float, n_points: int
) -> NDArray[np.float64]:
    if times is not None:
        ts = as_float_array(times, "times", ndim=1)
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
    start = min(1e-2, T / 10) if method == "adaptive" else min(dt, T)
    ts = np.concatenate([[0.0], np.geomspace(start, T, n_points - 1)])
    if method != "adaptive":  # snap to the fixed-step grid, so outputs need no shortened steps
        ts = np.unique(np.round(ts / dt) * dt)
        ts[-1] = T
    return ts


def _common(
    activation: Any, teacher_activation: Any, regime: Any, method: Any, readout: Any
) -> tuple[str, ...]:
    act = check_activation(activation, "activation")
    t_act = check_activation(
        teacher_activation if teacher_activation is not None else activation, "teacher_activation"
    )
    reg = choice(regime, "regime", ("online", "gradient_flow"))
    meth = choice(method, "method", ("euler", "rk4", "adaptive"))
    ro = choice(readout, "readout", ("sum", "mean"))
    if reg == "online" and act == "step":
        raise ValueError(
            "regime: the step activation's derivative is a delta, so only regime='gradient_flow' "
            "applies to step units"
        )
    return act, t_act, reg, meth, ro


def _trajectory(out: dict[str, Any], meta: dict[str, Any]) -> Trajectory:
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
    risk_tol: float | None,
    max_steps: int,
    n_threads: int | None,
) -> tuple[tuple[Any, ...], dict[str, Any], dict[str, Any]]:
    """The integrator settings shared by :func:`integrate` and :func:`integrate_batch`, checked: the core's
    positional tail (times, method, dt, rtol, atol), its keyword arguments, and the matching metadata."""
    dt_ = positive(dt, "dt")
    rtol_ = positive(rtol, "rtol", allow_zero=True)
    atol_ = positive(atol, "atol", allow_zero=True)
    if meth == "adaptive" and rtol_ == 0 and atol_ == 0:
        raise ValueError("rtol, atol: they cannot both be 0")
    ts = _times(t_max, times, meth, dt_, n_points)
    keywords = {
        "h_max": 0.0 if h_max is None else positive(h_max, "h_max"),
        "risk_tol": 0.0 if risk_tol is None else positive(risk_tol, "risk_tol"),
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
    activation: ActivationName = "erf",
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    lr_readout: float = 0.0,
    noise: float = 0.0,
    regime: Regime = "online",
    spherical: bool = False,
    t_max: float | None = None,
    times: ArrayLike | None = None,
    method: Method = "adaptive",
    dt: float = 0.01,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    readout: Readout = "sum",
    risk_tol: float | None = None,
    n_points: int = 100,
    h_max: float | None = None,
    max_steps: int = 100_000_000,
    n_threads: int | None = None,
) -> Trajectory:
    """Integrate the order-parameter ODE from ``overlaps`` (effective second layers a, v; see the module
    docstring).

    ``method``: ``"euler"`` or ``"rk4"`` with fixed step ``dt`` (a step is shortened only to land on an
    output time
    off the dt grid), or ``"adaptive"``: Dormand-Prince 5(4) with error control ``rtol``, ``atol`` (weighted
    RMS
    norm over the state). Output at ``times`` (default: 0 and ``n_points - 1`` log-spaced times up to
    ``t_max``).
    ``risk_tol``: stop early, with ``status="converged"``, once the excess risk falls below it. A run whose
    state becomes non-finite, overflows or leaves the positive semi-definite cone stops with
    ``status="diverged"``; one that has taken ``max_steps`` steps stops with ``status="max_steps"``; the
    trajectory then holds the outputs reached and ``message`` / ``meta["stop_time"]`` say when. Ctrl-C stops
    the integration within a fraction of a second and raises :class:`twolayer.Interrupted`, whose ``partial``
    is the trajectory so far (``status="interrupted"``).
    ``n_threads``: threads inside the right-hand side (used for K >= 8; None = the OpenMP default).
    ``meta`` records the parameters and the cost (``n_rhs`` right-hand-side evaluations, ``n_steps``).
    """
    act, t_act, reg, meth, ro = _common(activation, teacher_activation, regime, method, readout)
    spherical = boolean(spherical, "spherical")
    ov = _check_overlaps(overlaps, spherical=spherical)
    lr_ = positive(lr, "lr", allow_zero=True)
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    tail, keywords, solver_meta = _solver_options(meth, t_max, times, dt, rtol, atol, n_points, h_max, risk_tol,
                                                  max_steps, n_threads)
    c = 1.0 if ro == "sum" else 1.0 / ov.K
    meta = {**_model_meta(act, t_act, reg, spherical, ro), **solver_meta, "lr": lr_, "lr_readout": lr_a,
            "noise": noise_}
    with partial_result(lambda out: _trajectory(out, meta)):
        out = _core.ode_integrate(ov.Q, ov.M, ov.a, ov.P, ov.v, act, t_act, reg, bool(spherical), lr_,
                                  lr_a * c * c, noise_, *tail, **keywords)
    return _trajectory(out, meta)


def _max_steps(max_steps: Any) -> int:
    return integer(max_steps, "max_steps", 1)


def _per_member(x: ArrayLike, name: str, B: int) -> list[float]:
    arr = as_float_array(x, name, finite=False)
    if np.ndim(x) == 0:
        arr = np.full(B, arr[0])
    if arr.shape != (B,):
        raise ValueError(f"{name}: expected a scalar or one value per system ({B}), got shape {arr.shape}")
    return [positive(v, name, allow_zero=True) for v in arr]


def integrate_batch(
    overlaps: Sequence[Overlaps],
    activation: ActivationName = "erf",
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
    risk_tol: float | None = None,
    n_points: int = 100,
    h_max: float | None = None,
    max_steps: int = 100_000_000,
    n_threads: int | None = None,
) -> list[Trajectory]:
    """Integrate many independent systems in one C++ call (GIL released, OpenMP across systems).

    ``overlaps``: a sequence of :class:`~twolayer.Overlaps` (K and M may differ between members); ``lr``,
    ``lr_readout`` and ``noise`` are scalars or one value per member. Activations, regime, method and output
    times are shared. Returns one :class:`~twolayer.Trajectory` per member, each with its own status: a diverging
    member does not affect the others. On Ctrl-C, :class:`twolayer.Interrupted`'s ``partial`` is that list:
    finished members as they are, the others with ``status="interrupted"`` and the rows they reached. Other
    arguments as in :func:`integrate`.
    """
    act, t_act, reg, meth, ro = _common(activation, teacher_activation, regime, method, readout)
    if isinstance(overlaps, Overlaps) or not isinstance(overlaps, Sequence):
        raise TypeError("overlaps: expected a sequence of twolayer.Overlaps")
    spherical = boolean(spherical, "spherical")
    ovs = _check_overlaps_batch(overlaps, spherical)
    B = len(ovs)
    if B == 0:
        return []
    lrs = _per_member(lr, "lr", B)
    lr_as = _per_member(lr_readout, "lr_readout", B)
    noises = _per_member(noise, "noise", B)
    tail, keywords, solver_meta = _solver_options(meth, t_max, times, dt, rtol, atol, n_points, h_max, risk_tol,
                                                  max_steps, n_threads)
    cs = [1.0 if ro == "sum" else 1.0 / o.K for o in ovs]
    base = {**_model_meta(act, t_act, reg, spherical, ro), **solver_meta}

    def results(outs: list[dict[str, Any]]) -> list[Trajectory]:
        return [
            _trajectory(out, {**base, "lr": lrs[b], "lr_readout": lr_as[b], "noise": noises[b]})
            for b, out in enumerate(outs)
        ]

    with partial_result(results):
        outs = _core.ode_integrate_batch(
            [o.Q for o in ovs], [o.M for o in ovs], [o.a for o in ovs], [o.P for o in ovs], [o.v for o in ovs],
            act, t_act, reg, bool(spherical), np.array(lrs),
            np.array([la * c * c for la, c in zip(lr_as, cs, strict=True)]), np.array(noises), *tail, **keywords)
    return results(outs)


# |state| above which the integrators report "diverged" (IntegrateOptions::overflow in integrators.hpp).
_OVERFLOW = 1e100


def rhs(
    overlaps: Overlaps,
    activation: ActivationName = "erf",
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    lr_readout: float = 0.0,
    noise: float = 0.0,
    regime: Regime = "online",
    spherical: bool = False,
    readout: Readout = "sum",
    n_threads: int | None = None,
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The right-hand side (dQ/dt, dM/dt, da/dt) at ``overlaps`` (same conventions as :func:`integrate`).

    Overlaps above 1e100 in magnitude (where :func:`integrate` stops with "diverged"), or a right-hand side
    beyond the double range, raise ValueError."""
    act, t_act, reg, _, ro = _common(activation, teacher_activation, regime, "adaptive", readout)
    spherical = boolean(spherical, "spherical")
    ov = _check_overlaps(overlaps, spherical=spherical)
    for name in ("Q", "M", "a", "P", "v"):
        big = float(np.max(np.abs(getattr(ov, name)), initial=0.0))
        if big > _OVERFLOW:
            raise ValueError(f"overlaps: {name} out of range (max |{name}| = {big:.3g} > {_OVERFLOW:.0e}, where the "
                             "integrators stop with 'diverged')")
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
    """A near-symmetric erf start (Saad & Solla 1995): Q = q0 I, P = I, tiny M, a = v = 1."""
    K, M = integer(K, "K", 1, INT32_MAX), integer(M, "M", 1, INT32_MAX)
    q0, m0 = positive(q0, "q0"), real(m0, "m0")
    rng = np.random.default_rng(seed_arg(seed))
    Mo = m0 * (1.0 + 0.5 * rng.standard_normal((K, M)))
    return Overlaps(q0 * np.eye(K), Mo, np.eye(M), np.ones(K), np.ones(M))


def plateau_example(
    t_max: float = 2000.0, lr: float = 1.0, method: Method = "adaptive", **kwargs: Any
) -> Trajectory:
    """The erf K = M = 2 Saad-Solla plateau and its escape, integrated by the online ODE (for the demo panel).

    The excess risk falls quickly onto the symmetric plateau (students not yet specialised: all M_ir nearly
    equal), stays there for a time growing like log(1 / asymmetry), then escapes to 0 as each student
    specialises
    on one teacher unit."""
    return integrate(
        plateau_overlaps(),
        "erf",
        lr=lr,
        t_max=t_max,
        method=method,
        n_points=kwargs.pop("n_points", 400),
        **kwargs,
    )
