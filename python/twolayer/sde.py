"""The diffusion approximation of online SGD at finite d: the ODE plus the first correction (seed 003, "does
stochasticity help?").

One online SGD step (one fresh sample, conventions of :mod:`twolayer.sgd`, t = steps / d) moves the order
parameters y = (Q, M, a) by xi / d, with the per-sample increment (E = y - f including the label noise)

* ``xi_M_ir = lr a_i g'(l_i) l*_r E``, ``xi_a_i = lr_readout g(l_i) E`` (effective units, as in the ODE),
* ``xi_Q_ik = lr (a_i g'(l_i) l_k + a_k g'(l_k) l_i) E + lr^2 a_i a_k g'(l_i) g'(l_k) E^2`` (``|x|^2 / d -> 1``),

and spherical SGD projects it linearly (``xi_M_ir - M_ir xi_Q_ii / 2``, ``xi_Q_ik - Q_ik (xi_Q_ii + xi_Q_kk) / 2``,
Q_ii fixed) as the ODE does. Over dt = 1/d the mean of xi is the ODE's right-hand side and its covariance
contributes Cov(xi) / d per unit time, so

    dy = F(y) dt + sqrt(Cov(xi)(y) / d) dB_t,

with F the core's online right-hand side (:func:`twolayer.ode.rhs`, not re-derived). This is the seed's SDE
``dm = (Psi - m Phi / 2) dt + sqrt(gamma / d) (sigma_m - m sigma_Q / 2) . dB`` written for every order parameter and
the full covariance. :func:`increment_covariance` gives Cov(xi) (and E[xi], which equals F: a test), by
Gauss-Hermite product quadrature over the pre-activations and exact integration over the label noise: exact for
``linear`` (3 nodes per unit) and ``quadratic`` (7 nodes) units for any K, M (cost n^(K+M)), converged
quadrature for ``erf`` (default 48 nodes: mean within 1e-10, covariance within ~1e-7 relative of the
64-node values at K + M = 3; the cost 48^(K+M) per evaluation limits the erf SDE to K + M <= 3). ``relu`` and
``step`` have no diffusion term here (ValueError).

:func:`simulate` integrates the SDE by Euler-Maruyama (strong order 1/2, weak order 1 in dt) over many paths in one
C++ call (OpenMP across paths, GIL released, Ctrl-C stops it), with Brownian increments from counter-based Philox
streams keyed by (seed, path id): bit-identical for any thread count, path j equal to the path run alone. It
returns a :class:`twolayer.sgd.Ensemble`, so ``first_passage``, ``mean``, ``std`` work as for SGD.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._interrupt import partial_result
from ._progress import progress_bar
from ._validation import INT32_MAX, as_float_array, boolean, integer, n_threads_arg, positive, seed_arg
from .activations import ActivationName
from .ode import _activations, _check_overlaps
from .overlaps import BatchOverlaps, Overlaps
from .results import Trajectory
from .sgd import Ensemble, _run_ids

__all__ = ["IncrementCovariance", "increment_covariance", "simulate"]

_NODES = {"linear": 3, "quadratic": 7, "erf": 48}
_STATUS = {0: "completed", 1: "diverged", 2: "interrupted", 3: "converged"}
_TIME_UNIT = "t = steps / d"


@dataclass(frozen=True)
class IncrementCovariance:
    """Moments of the one-sample increment xi = d * (one SGD step's change of the order parameters).

    ``labels`` name the components: ``Q[i,k]`` (i <= k), ``M[i,r]``, then ``a[i]`` when the readout is trained.
    ``mean`` (n,) is E[xi] (= the ODE right-hand side), ``cov`` (n, n) is Cov(xi); the SDE's diffusion matrix is
    ``cov / d``.

    Attributes
    ----------
    labels : tuple of str
        Component names.
    mean : ndarray, shape (n,)
        E[xi].
    cov : ndarray, shape (n, n)
        Cov(xi).

    Examples
    --------
    >>> ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    >>> inc = tl.sde.increment_covariance(ov, lr=0.5)
    >>> inc.labels, inc.cov.shape
    (('Q[0,0]', 'M[0,0]'), (2, 2))
    """

    labels: tuple[str, ...]
    mean: NDArray[np.float64]
    cov: NDArray[np.float64]


def _labels(K: int, M: int, readout: bool) -> tuple[str, ...]:
    out = [f"Q[{i},{k}]" for i in range(K) for k in range(i, K)]
    out += [f"M[{i},{r}]" for i in range(K) for r in range(M)]
    if readout:
        out += [f"a[{i}]" for i in range(K)]
    return tuple(out)


def _no_target(ov: Any, name: str) -> None:
    """The SDE's drift and diffusion are the committee kernels': a clear error for overlaps of a polynomial
    target (``Overlaps.from_networks(student, target)``), which would otherwise run as a zero teacher."""
    if getattr(ov, "target", None) is not None:
        raise TypeError(f"{name}: the overlaps of a polynomial target have no SDE here (its diffusion term is not "
                        "implemented); use ode.integrate(..., target=) or sgd.simulate(student, target)")


def _state(ov: Overlaps) -> NDArray[np.float64]:
    return np.concatenate([ov.Q.ravel(), ov.M.ravel(), ov.a.ravel()])


def _rule(act: str, t_act: str, n_nodes: int | None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Gauss-Hermite rule for N(0, 1) (probabilists' Hermite polynomials), weights summing to 1."""
    for name, a in (("activation", act), ("teacher_activation", t_act)):
        if a not in _NODES:
            raise ValueError(f"{name}: no diffusion term for {a!r} units (Gauss-Hermite quadrature of a kinked or "
                             "discontinuous integrand does not converge spectrally); expected 'linear', 'quadratic' "
                             "or 'erf'")
    n = max(_NODES[act], _NODES[t_act]) if n_nodes is None else integer(n_nodes, "n_nodes", 1, 64)
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return np.ascontiguousarray(x), np.ascontiguousarray(w / w.sum())


def increment_covariance(
    overlaps: Overlaps,
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    noise: float = 0.0,
    lr_readout: float = 0.0,
    spherical: bool = False,
    n_nodes: int | None = None,
) -> IncrementCovariance:
    """Mean and covariance of the one-sample increment xi of online SGD at ``overlaps`` (see the module
    docstring). ``n_nodes``: Gauss-Hermite nodes per unit (default: exact for linear/quadratic, 48 for erf).

    Parameters
    ----------
    overlaps : Overlaps
        The state y.
    activation, teacher_activation : str, optional
        ``"linear"``, ``"quadratic"`` or ``"erf"`` (default: those of ``overlaps``).
    lr, noise, lr_readout, spherical
        As in :func:`twolayer.ode.integrate` (online regime).
    n_nodes : int, optional
        Gauss-Hermite nodes per unit (1..64).

    Returns
    -------
    IncrementCovariance

    Examples
    --------
    Linear units, K = M = 1: the mean is the ODE's right-hand side (dQ/dt = 2 lr (M - Q) + lr^2 (Q - 2M + P),
    dM/dt = lr (P - M)):

    >>> ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    >>> inc = tl.sde.increment_covariance(ov, lr=0.5)
    >>> print(np.round(inc.mean, 6), np.round(tl.ode.rhs(ov, lr=0.5)[0].ravel(), 6))
    [-0.4  0.4] [-0.4]
    >>> print(np.round(inc.cov, 6))
    [[1.28 0.16]
     [0.16 0.56]]
    """
    _no_target(overlaps, "overlaps")
    act, t_act = _activations(activation, teacher_activation, overlaps)
    sph = boolean(spherical, "spherical")
    ov = _check_overlaps(overlaps, spherical=sph)
    lr_ = positive(lr, "lr")
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    x, w = _rule(act, t_act, n_nodes)
    mean, cov = _core.sde_increment_moments(_state(ov), ov.K, ov.P, ov.v, act, t_act, sph, lr_, lr_a, noise_, x, w)
    return IncrementCovariance(_labels(ov.K, ov.n_teacher, lr_a > 0), mean, cov)


def simulate(
    overlaps: Overlaps | BatchOverlaps | Sequence[Overlaps],
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    d: int,
    noise: float = 0.0,
    lr_readout: float = 0.0,
    spherical: bool = False,
    t_max: float | None = None,
    times: ArrayLike | None = None,
    dt: float = 0.01,
    seeds: int | Sequence[int] = 1,
    seed: int = 0,
    records: int = 101,
    risk_tol: float | None = None,
    risk_rtol: float | None = None,
    n_nodes: int | None = None,
    n_threads: int | None = None,
    progress: bool = False,
) -> Ensemble:
    """Paths of the SGD diffusion approximation at dimension ``d`` (Euler-Maruyama, step ``dt`` in t = steps / d).

    Parameters
    ----------
    overlaps : Overlaps, BatchOverlaps or sequence of Overlaps
        One start for every path, or one per path (as many as ``seeds`` gives).
    lr, noise, lr_readout, spherical
        As in :func:`twolayer.ode.integrate` (online regime; effective second layers).
    d : int
        Dimension: the diffusion is Cov(xi) / d.
    t_max, times, records
        Record at ``records`` equal steps up to ``t_max`` or at ``times`` (each moved to the nearest multiple of
        ``dt``); the returned ``t`` holds the times used.
    seeds, seed
        Path ids (an int n: 0..n-1; or a sequence of ids < 2^32) and the master seed: path j draws its Brownian
        increments from the stream (seed, j).
    risk_tol, risk_rtol
        Stop a path, status ``"converged"``, at the first step whose excess risk is <= max(risk_tol, risk_rtol *
        R(0)); its last row is that step's state and ``stop_time`` the crossing interpolated linearly between the
        last two steps.
    n_nodes
        Gauss-Hermite nodes per unit for the covariance (see :func:`increment_covariance`).

    activation, teacher_activation : str, optional
        ``"linear"``, ``"quadratic"`` or ``"erf"`` (default: those of ``overlaps``).
    dt : float, default 0.01
        Euler-Maruyama step.
    n_threads : int, optional
        OpenMP threads (paths are bitwise the same for any number).
    progress : bool, default False
        A tqdm bar over steps.

    Returns
    -------
    twolayer.sgd.Ensemble
        Statuses: completed, converged, diverged (the state left the positive semi-definite cone or blew up),
        interrupted.

    Examples
    --------
    >>> ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    >>> ens = tl.sde.simulate(ov, lr=0.5, d=100, t_max=1.0, records=3, seeds=4, seed=0)
    >>> ens, ens.t.tolist()
    (Ensemble(runs=4, T=3, diverged=0, converged=0, seed=0), [0.0, 0.5, 1.0])
    >>> print(np.round(ens.mean().risk, 6))
    [0.8      0.542449 0.378277]
    >>> print(np.round(tl.ode.integrate(ov, lr=0.5, t_max=1.0, n_points=3).risk, 6))
    [0.8      0.549831 0.377893]
    """
    if isinstance(overlaps, Overlaps):
        first, y0 = overlaps, None
    elif isinstance(overlaps, BatchOverlaps):
        first = overlaps[0]
        y0 = np.concatenate([overlaps.Q.reshape(len(overlaps), -1), overlaps.M.reshape(len(overlaps), -1),
                             overlaps.a], axis=1)
    elif isinstance(overlaps, Sequence) and not isinstance(overlaps, str) and len(overlaps) > 0:
        first = overlaps[0]
        y0 = np.stack([_state(_check_overlaps(o, f"overlaps[{j}]")) for j, o in enumerate(overlaps)])
    else:
        raise TypeError(f"overlaps: expected a twolayer.Overlaps, BatchOverlaps or a non-empty sequence of Overlaps, "
                        f"got {type(overlaps).__name__}")
    for j, o in enumerate(overlaps if isinstance(overlaps, Sequence) else [overlaps]):
        _no_target(o, "overlaps" if isinstance(overlaps, Overlaps) else f"overlaps[{j}]")
    act, t_act = _activations(activation, teacher_activation, first)
    sph = boolean(spherical, "spherical")
    ov = _check_overlaps(first, spherical=sph)
    if y0 is not None and sph and np.any(np.abs(y0[:, : ov.K * ov.K : ov.K + 1] - 1.0) > 1e-10):
        raise ValueError("overlaps: spherical=True needs diag(Q) = 1 for every path")
    lr_ = positive(lr, "lr")
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    d_ = integer(d, "d", 1, INT32_MAX)
    dt_ = positive(dt, "dt")
    x, w = _rule(act, t_act, n_nodes)
    run_ids = _run_ids(seeds)
    if y0 is not None and y0.shape[0] != run_ids.size:
        raise ValueError(f"overlaps: got {y0.shape[0]} starts for {run_ids.size} paths (seeds)")
    if times is not None:
        tt = as_float_array(times, "times", ndim=1)
        if tt.size == 0 or np.any(tt < 0) or np.any(np.diff(tt) <= 0):
            raise ValueError("times: expected a non-empty, strictly increasing array of times >= 0")
        steps_rec = np.round(tt / dt_).astype(np.int64)
        if np.any(np.diff(steps_rec) <= 0):
            raise ValueError(f"times: two requested times fall on the same step (spacing below dt = {dt_:g})")
    else:
        if t_max is None:
            raise ValueError("t_max: give t_max or times")
        tm = positive(t_max, "t_max")
        n_rec = integer(records, "records", 2, INT32_MAX)
        steps_rec = np.unique(np.round(np.linspace(0.0, tm, n_rec) / dt_).astype(np.int64))
    n_steps = int(steps_rec[-1])
    t_rec = np.asarray(steps_rec * dt_, dtype=np.float64)
    tol = -1.0 if risk_tol is None else positive(risk_tol, "risk_tol")
    rtol = -1.0 if risk_rtol is None else positive(risk_rtol, "risk_rtol")
    seed_ = seed_arg(seed)
    meta: dict[str, Any] = {"activation": act, "teacher_activation": t_act, "spherical": sph, "d": d_, "dt": dt_,
                            "seed": seed_, "integrator": "euler_maruyama", "n_nodes": int(x.size),
                            "regime": "online"}
    params = {"lr": np.full(run_ids.size, lr_), "lr_readout": np.full(run_ids.size, lr_a),
              "noise": np.full(run_ids.size, noise_), "risk_tol": np.full(run_ids.size, tol if tol > 0 else np.nan),
              "risk_rtol": np.full(run_ids.size, rtol if rtol > 0 else np.nan)}

    def results(out: dict[str, Any]) -> Ensemble:
        runs = []
        for j, rid in enumerate(run_ids):
            T = int(out["recorded"][j])
            status = _STATUS[int(out["status"][j])]
            stop_time = float(out["stop_time"][j])
            t = t_rec[:T].copy()
            if status == "converged" and T > 0:  # the last row is the step at which the path crossed
                t[-1] = math.ceil(stop_time / dt_ - 1e-9) * dt_
            msg = {"completed": f"{n_steps} Euler-Maruyama steps of dt = {dt_:g}",
                   "converged": f"reached the risk threshold; interpolated crossing at t = {stop_time:g}",
                   "diverged": f"diverged at t = {stop_time:g} (left the positive semi-definite cone or blew up)",
                   "interrupted": f"interrupted at t = {stop_time:g}"}[status]
            runs.append(Trajectory(t=t, Q=out["Q"][j, :T].copy(), M=out["M"][j, :T].copy(),
                                   a=out["a"][j, :T].copy(), risk=out["risk"][j, :T].copy(), status=status,
                                   message=msg, time_unit=_TIME_UNIT,
                                   meta={**meta, "lr": lr_, "lr_readout": lr_a, "noise": noise_, "run": int(rid),
                                         "risk_tol": tol if tol > 0 else math.nan,
                                         "risk_rtol": rtol if rtol > 0 else math.nan},
                                   P=ov.P.copy(), v=ov.v.copy(), stop_time=stop_time))
        return Ensemble(runs=runs, run_ids=run_ids, t=t_rec, seed=seed_, meta=meta, params=params)

    state = _state(ov) if y0 is None else np.ascontiguousarray(y0)
    with partial_result(results), progress_bar(progress, n_steps * run_ids.size, "step", "SDE", True) as update:
        out = _core.sde_simulate(state, ov.K, ov.P, ov.v, act, t_act, sph, lr_, lr_a, noise_, d_, dt_, n_steps,
                                 steps_rec, x, w, seed_, run_ids.astype(np.uint32), tol, rtol,
                                 n_threads_arg(n_threads), progress=update)
    return results(out)

