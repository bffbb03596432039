"""The large-batch map of "First order optimization methods in two-layer neural networks training": SGD with fresh
batches of n_b = alpha d samples and an O(1) step per iteration, in the limit d -> infinity, as a deterministic map of
the overlaps (iterations, not a continuous time).

Conventions (the documentation's Conventions page: lambda = w.x / sqrt d, effective second layer a, error
E = y - f with label noise).
One iteration of the simulator ``twolayer.sgd.simulate(lr=gamma0 * d, batch_size=alpha * d)``,
``w_i += (lr / sqrt d) mean_batch[a_i g'(l_i) E x]``, becomes, with psi_ic = E[g'(l_i) l_c E] for every unit c
(students, then teacher units) and Omega = [[Q, M], [M^T, P]]::

    M_ir <- M_ir + gamma0 a_i psi_{i,K+r}
    Q_ik <- Q_ik + gamma0 (a_i psi_ik + a_k psi_ki)
                 + gamma0^2 a_i a_k (psi_i^T Omega^+ psi_k + (E[g'(l_i) g'(l_k) E^2] + Delta E[g'g']) / alpha)

the linear term, the squared population gradient (the gradient E[g'(l_i) E x] lies in the span of the weights;
its Gram matrix in overlap space is psi Omega^+ psi^T) and the finite-batch term phi^HD / alpha. This is the paper's
eq. (6) with (n_b, gamma_d) = (alpha d, gamma0) split into its pairs of distinct samples and its diagonal (the
transcription's second sum names sigma'(lambda_{l'}), a typo for lambda_l; its 1/p factors are the "mean" readout,
absorbed here in the effective second layers). Its step gamma0 is the simulator's ``lr / d`` because the paper's
weights have unit norm (lambda = w.z) and ours norm sqrt d. The clock is t = iteration (t = 0, 1, ..., n_steps).
``spherical=True`` (the paper's eq. 7): every w_i is rescaled to ``|w_i|^2 = d`` after each step (exact in overlap
space: Q_ik / sqrt(Q_ii Q_kk), M_ir / sqrt(Q_ii)).

Biases: with student biases b (``overlaps.bias``) and, for a committee teacher, teacher biases b*
(``overlaps.teacher_bias``) every expectation is taken at lambda_i = l_i + b_i, lambda*_r = l*_r + b*_r, the l_c of
psi centred (the update of w is that of the centred field); with ``lr_bias`` the biases move as
b_i <- b_i + lr_bias a_i E[g'(lambda_i) E], the limit of ``sgd.simulate(lr_bias=lr_bias * d)`` (a batch mean of a
scalar: no 1/alpha term). A committee teacher takes the online ODE's expectations with means (``ode._bias``; every
student but step); a polynomial target any student but step (relu: exact orthant moments with means). Smooth
students without closed-form kernels
(tanh, softplus, ...) against a target take this path at any bias: the committee terms from the kernels with means
(i3_mean, i4_mean), the target's by the certified quadrature of :mod:`twolayer.targets`' expectations. A run without
biases (zero biases, ``lr_bias = 0``) takes the paths without means, bitwise as before.

Layer-wise training (the paper): :func:`layerwise` runs the map on the first layer with a fixed, then sets the
second layer to the population ridge solution a = (E[g(l) g(l)^T] + ridge I)^(-1) E[g(l) y], computed from the
closed-form I2 kernels (with means where the overlaps carry biases); :func:`simulate_layerwise` is its finite-d
counterpart (``sgd.simulate`` with ``batch_size = alpha d``, then ridge regression on fresh samples).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import _core
from ._deprecation import renamed
from ._interrupt import partial_result
from ._overlap_args import bias_kwargs, check_overlaps, check_target_overlaps, resolve_activations, resolve_target
from ._validation import boolean, integer, n_threads_arg, positive, seed_arg
from .activations import ActivationName, check_activation, sigma
from .kernels import i2
from .networks import Network, check_network
from .overlaps import Overlaps
from .results import Status, Trajectory
from .sgd import simulate

__all__ = ["LayerwiseResult", "iterate", "layerwise", "ridge_readout", "simulate_layerwise"]

_TIME_UNIT = "t = iteration (large-batch map)"


def _batch_ratio(batch_ratio: Any) -> float:
    if batch_ratio is None:
        raise ValueError("batch_ratio: regime='large_batch' needs the batch size over d, alpha = n_b / d > 0 "
                         "(got None)")
    return positive(batch_ratio, "batch_ratio")


def _steps(n_steps: Any) -> int:
    if n_steps is None:
        raise ValueError("n_steps: regime='large_batch' needs the number of iterations (a positive int, got None)")
    return integer(n_steps, "n_steps", 1)


@renamed(steps="n_steps")
def iterate(
    overlaps: Overlaps,
    activation: str,
    teacher_activation: str,
    *,
    lr: float,
    batch_ratio: float | None,
    n_steps: int | None,
    noise: float = 0.0,
    spherical: bool = False,
    n_threads: int | None = None,
    target: Any = None,
    lr_bias: float = 0.0,
) -> Trajectory:
    """Iterate the large-batch map ``n_steps`` times from ``overlaps`` (see the module docstring).

    Called by ``twolayer.ode.integrate(..., regime="large_batch")``, which validates the overlaps and activations.

    Parameters
    ----------
    overlaps : Overlaps
        The start (Q, M, P, a, v); with a target M is (K, k) and P = I_k.
    activation, teacher_activation : str
        Student and teacher activations ("target" for a polynomial target).
    lr : float
        The step gamma0 (the simulator's ``lr / d``).
    batch_ratio : float
        alpha = n_b / d > 0.
    n_steps : int
        Number of iterations.
    noise : float, default 0
        Label-noise variance Delta.
    spherical : bool, default False
        Rescale every ``|w_i|^2`` to d after each step (needs diag(Q) = 1).
    n_threads : int, optional
        OpenMP threads inside the committee expectations and a target's tuples of fields.
    target : HermiteTarget, optional
        A polynomial target: the teacher units are its k directions, and psi, phi^HD take its exact terms
        (psi_ic += E[g'(l_i) l_c f], phi^HD_ik += E[g'g' f^2] - 2 E[g'g' f fhat], C++ ``TargetRhs::add_raw``).
        With a target the students may carry biases (``overlaps.bias``, any activation but step):
        every expectation is then taken at l_i + b_i (l_c of psi centred); with a committee teacher the student
        and teacher biases of ``overlaps`` (see the module docstring).
    lr_bias : float, default 0
        Trains the student biases, b_i <- b_i + lr_bias a_i E[g'(l_i + b_i) E] after each step
        (simultaneous with the weights'), the limit of ``sgd.simulate(lr_bias=lr_bias * d)`` (the batch mean of a
        scalar: no 1/alpha term). The result's ``bias`` holds them per row.

    Returns
    -------
    Trajectory
        One row per iteration, t = 0, 1, ..., n_steps (``time_unit`` "t = iteration"), the second layer a fixed; a
        state that is not finite, leaves the PSD cone or has an excess risk that is not finite (even the start's)
        stops it with ``status="diverged"`` (that state not recorded).

    Examples
    --------
    >>> tgt = tl.targets.staircase(2, d=100, seed=0)
    >>> ov = tl.Overlaps.from_networks(tl.Network.random(2, 100, "relu", seed=1), tgt)
    >>> tr = tl.ode.integrate(ov, "relu", target=tgt, lr=1.0, regime="large_batch", batch_ratio=1.0, n_steps=3)
    >>> tr.t, tr.M.shape, tr.status
    (array([0., 1., 2., 3.]), (4, 2, 2), <Status.completed: 'completed'>)
    """
    if target is not None and np.any(overlaps.teacher_bias != 0.0):
        raise ValueError(f"overlaps: a polynomial target has no teacher biases, got {overlaps.teacher_bias}")
    gamma0 = positive(lr, "lr", allow_zero=True)
    alpha = _batch_ratio(batch_ratio)
    T = _steps(n_steps)
    noise_ = positive(noise, "noise", allow_zero=True)
    spherical = boolean(spherical, "spherical")
    if activation == "step":
        raise ValueError("activation: the step activation's derivative is a delta; the large-batch map (like online "
                         "SGD) needs E[g'(l_i)^2 E^2], which is infinite for step units")
    if spherical and not np.allclose(np.diag(overlaps.Q), 1.0, rtol=0, atol=1e-10):
        raise ValueError("overlaps: spherical=True needs diag(Q) = 1 (weights on the sphere |w|^2 = d)")
    meta = {"activation": activation, "teacher_activation": teacher_activation, "regime": "large_batch",
            "spherical": int(spherical), "lr": gamma0, "batch_ratio": alpha, "steps": T, "noise": noise_}

    lr_b = positive(lr_bias, "lr_bias", allow_zero=True)
    # a run with biases (ode._bias's rule): recorded per row like an ODE run with biases
    bias = overlaps.bias.copy() if overlaps.has_bias or lr_b > 0 else None
    if bias is not None:
        meta["lr_bias"] = lr_b

    def to_trajectory(out: dict[str, Any]) -> Trajectory:
        T_ = len(out["t"])
        return Trajectory(t=out["t"], Q=out["Q"], M=out["M"], a=out["a"], risk=out["risk"],
                          status=Status(out["status"]), message=str(out["message"]), time_unit=_TIME_UNIT,
                          meta={**meta, "n_rhs": int(out["n_rhs"]), "n_steps": int(out["n_steps"])},
                          P=overlaps.P.copy(), v=overlaps.v.copy(), stop_time=float(out["stop_time"]),
                          bias=None if bias is None else np.asarray(out.get("bias", np.tile(bias, (T_, 1)))),
                          teacher_bias=None if bias is None else overlaps.teacher_bias.copy())

    if target is not None:
        meta["target"] = repr(target)
        alpha_t, coef = target._arrays()
        with partial_result(to_trajectory):
            out = _core.large_batch_iterate_target(overlaps.Q, overlaps.M, overlaps.a, alpha_t, coef, activation,
                                                   gamma0, alpha, T, noise_, spherical, bias, lr_b,
                                                   n_threads=n_threads_arg(n_threads))
        return to_trajectory(out)
    with partial_result(to_trajectory):
        out = _core.large_batch_iterate(overlaps.Q, overlaps.M, overlaps.a, overlaps.P, overlaps.v, activation,
                                        teacher_activation, gamma0, alpha, T, noise_, spherical,
                                        n_threads_arg(n_threads), **bias_kwargs(overlaps, lr_b))
    return to_trajectory(out)


def iterate_checked(
    overlaps: Any,
    activation: Any,
    teacher_activation: Any,
    target: Any,
    *,
    lr: float,
    batch_ratio: float | None,
    n_steps: int | None,
    noise: float = 0.0,
    spherical: bool = False,
    n_threads: int | None = None,
    lr_readout: float = 0.0,
    t_max: float | None = None,
    times: Any = None,
    schedule: Any = None,
    lr_bias: float = 0.0,
) -> Trajectory:
    """``twolayer.ode.integrate(..., regime="large_batch")``: the overlaps and activations checked as the ODE checks
    them (the activations from the overlaps when not given; ``target``: the polynomial target, already resolved, or
    None), the options the map has no use for (``lr_readout``, ``t_max``, ``times``, with a target ``schedule``)
    refused, then :func:`iterate`."""
    if target is None:
        act, t_act = resolve_activations(activation, teacher_activation, overlaps)
        for name, value in (("t_max", t_max), ("times", times)):
            if value is not None:
                raise ValueError(f"{name}: regime='large_batch' counts iterations; give n_steps= instead")
        if lr_readout != 0.0:
            raise ValueError("lr_readout: regime='large_batch' keeps the second layer fixed (use "
                             "twolayer.large_batch.layerwise for a ridge second layer)")
        return iterate(check_overlaps(overlaps), act, t_act, lr=lr, batch_ratio=batch_ratio,
                       n_steps=n_steps, noise=noise, spherical=spherical, n_threads=n_threads, lr_bias=lr_bias)
    spherical = boolean(spherical, "spherical")
    ov, act = check_target_overlaps(overlaps, activation, target, spherical)
    for name, value in (("t_max", t_max), ("times", times), ("schedule", schedule)):
        if value is not None:
            raise ValueError(f"{name}: regime='large_batch' counts iterations at a fixed step; give n_steps= "
                             "instead")
    if lr_readout != 0.0:
        raise ValueError("lr_readout: regime='large_batch' keeps the second layer fixed")
    return iterate(ov, act, "target", lr=lr, batch_ratio=batch_ratio, n_steps=n_steps, noise=noise,
                   spherical=spherical, target=target, lr_bias=lr_bias)


def ridge_readout(
    overlaps: Overlaps, activation: ActivationName, teacher_activation: ActivationName, ridge: float = 0.0
) -> NDArray[np.float64]:
    """The population ridge second layer for the first layer of ``overlaps``:
    a = (I2_ss + ridge I)^(-1) I2_st v, with (I2_ss)_ik = E[g(l_i) g(l_k)] and (I2_st)_ir = E[g(l_i) t(l*_r)]
    (closed-form I2 kernels; with the overlaps' biases the kernels with means, l_i + b_i and l*_r + b*_r), the
    minimiser of (1/2) E[(y - sum_i a_i g(l_i))^2] + (ridge/2) ``|a|^2`` (effective second layer; label noise
    does not enter). ``ridge`` >= 0; with ridge = 0 a singular I2_ss gets the
    minimum-norm solution (least squares).

    Parameters
    ----------
    overlaps : Overlaps
        The first layer (Q, M) and teacher (P, v).
    activation, teacher_activation : str
        Student and teacher activations.
    ridge : float, default 0.0
        The ridge penalty.

    Returns
    -------
    ndarray, shape (K,)

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(K=2, M=2, d=10, activation="relu", seed=0)
    >>> ov = tl.Overlaps.from_networks(s, t)
    >>> print(np.round(tl.large_batch.ridge_readout(ov, "relu", "relu", ridge=1.0), 6))
    [0.024344 0.216942]
    """
    overlaps = check_overlaps(overlaps)  # its arrays are mutable: re-checked, as by every engine
    act: Any = check_activation(activation, "activation")
    t_act: Any = check_activation(teacher_activation, "teacher_activation")
    lam = positive(ridge, "ridge", allow_zero=True)
    Q, M, P = overlaps.Q, overlaps.M, overlaps.P
    K, Mt = M.shape
    cq = np.empty((K, K, 2, 2))
    cq[..., 0, 0] = np.diag(Q)[:, None]
    cq[..., 1, 1] = np.diag(Q)[None, :]
    cq[..., 0, 1] = cq[..., 1, 0] = Q
    cm = np.empty((K, Mt, 2, 2))
    cm[..., 0, 0] = np.diag(Q)[:, None]
    cm[..., 1, 1] = np.diag(P)[None, :]
    cm[..., 0, 1] = cm[..., 1, 0] = M
    mq = mm = None  # the means (None without biases: the zero-mean kernels, bitwise)
    if overlaps.has_bias:
        bs, bt = overlaps.bias, overlaps.teacher_bias
        mq = np.stack(np.broadcast_arrays(bs[:, None], bs[None, :]), axis=-1)
        mm = np.stack(np.broadcast_arrays(bs[:, None], bt[None, :]), axis=-1)
    A = np.asarray(i2(act, act, cq, mean=mq)) + lam * np.eye(K)
    b = np.asarray(i2(act, t_act, cm, mean=mm)) @ overlaps.v
    return np.asarray(np.linalg.lstsq(A, b, rcond=None)[0], dtype=np.float64)


@dataclass(frozen=True)
class LayerwiseResult:
    """Layer-wise training: ``first`` the first-layer phase (a fixed), ``a`` the ridge second layer fitted after it
    (effective units), ``risk`` the excess population risk with that second layer, ``overlaps`` the final state.
    A first phase that diverged (``first.status == "diverged"``) gets no readout: ``a``, ``risk`` and ``overlaps``
    are those of its last recorded state (``a`` the fixed second layer).

    Attributes
    ----------
    first : Trajectory
    a : ndarray
    risk : float
    overlaps : Overlaps

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(K=2, M=2, d=10, activation="relu", seed=0)
    >>> res = tl.large_batch.layerwise(tl.Overlaps.from_networks(s, t), lr=0.5, batch_ratio=2.0, n_steps=3)
    >>> res.first.t.tolist(), f"{res.risk:.6f}"
    ([0.0, 1.0, 2.0, 3.0], '0.121456')
    """

    first: Trajectory
    a: NDArray[np.float64]
    risk: float
    overlaps: Overlaps


def _final_overlaps(traj: Trajectory, a: NDArray[np.float64], act: str, t_act: str) -> Overlaps:
    assert traj.P is not None and traj.v is not None
    biases = {} if traj.bias is None else {"bias": traj.bias[-1], "teacher_bias": traj.teacher_bias}
    return Overlaps(traj.Q[-1], traj.M[-1], traj.P, a, traj.v, activation=act, teacher_activation=t_act, **biases)


def _risk(ov: Overlaps, act: str, t_act: str) -> float:
    out = _core.ode_integrate(ov.Q, ov.M, ov.a, ov.P, ov.v, act, t_act, "gradient_flow", False, 0.0, 0.0, 0.0,
                              np.zeros(1), "euler", 1.0, 0.0, 0.0, **bias_kwargs(ov, 0.0))
    if len(out["risk"]) == 0:  # the divergence rule at t = 0 (divergence.hpp): the risk overflows
        raise ValueError(f"ridge: the excess risk with the fitted second layer a = {ov.a} is not finite")
    return float(out["risk"][0])


def _diverged(first: Trajectory, act: str, t_act: str, name: str) -> LayerwiseResult:
    """The result of a first phase that diverged: no readout, its last recorded state (see LayerwiseResult)."""
    if len(first) == 0:
        raise ValueError(f"{name}: the first phase diverged at its start, no state to fit a readout on "
                         f"({first.message})")
    a = first.a[-1].copy()
    return LayerwiseResult(first=first, a=a, risk=float(first.risk[-1]), overlaps=_final_overlaps(first, a, act, t_act))


@renamed(steps="n_steps")
def layerwise(
    overlaps: Overlaps,
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    batch_ratio: float,
    n_steps: int,
    ridge: float = 0.0,
    noise: float = 0.0,
    spherical: bool = False,
    n_threads: int | None = None,
    lr_bias: float = 0.0,
) -> LayerwiseResult:
    """The paper's layer-wise training in the large-batch limit: ``n_steps`` iterations of the map on the first layer
    with the second fixed (:func:`iterate`), then the second layer by population ridge regression
    (:func:`ridge_readout`) on the learned features.

    Parameters
    ----------
    overlaps : Overlaps
        The start.
    activation, teacher_activation : str, optional
        Default: those of ``overlaps``.
    lr, batch_ratio, n_steps, noise, spherical, n_threads, lr_bias
        As in :func:`iterate` (the overlaps' biases, fixed or trained in the first phase, stay in the readout's
        kernels and the risk).
    ridge : float, default 0.0
        As in :func:`ridge_readout`.

    Returns
    -------
    LayerwiseResult

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(K=2, M=2, d=10, activation="relu", seed=0)
    >>> res = tl.large_batch.layerwise(tl.Overlaps.from_networks(s, t), lr=0.5, batch_ratio=2.0, n_steps=3)
    >>> print(np.round(res.a, 6), f"{res.risk:.6f}")
    [0.422672 0.997536] 0.121456
    """
    # checked as ode.integrate(..., regime="large_batch") checks it (activations from the overlaps if not given)
    first = iterate_checked(overlaps, activation, teacher_activation, resolve_target(None, overlaps), lr=lr,
                            batch_ratio=batch_ratio, n_steps=n_steps, noise=noise, spherical=spherical,
                            n_threads=n_threads, lr_bias=lr_bias)
    act: Any = first.meta["activation"]
    t_act: Any = first.meta["teacher_activation"]
    if first.status == "diverged":
        return _diverged(first, act, t_act, "overlaps")
    last = _final_overlaps(first, first.a[-1], act, t_act)
    a = ridge_readout(last, act, t_act, ridge)
    final = _final_overlaps(first, a, act, t_act)
    return LayerwiseResult(first=first, a=a, risk=_risk(final, act, t_act), overlaps=final)


@renamed(steps="n_steps")
def simulate_layerwise(
    student: Network,
    teacher: Network,
    *,
    lr: float,
    batch_size: int,
    n_steps: int,
    ridge: float = 0.0,
    n_ridge: int | None = None,
    noise: float = 0.0,
    spherical: bool = False,
    seed: int = 0,
    lr_bias: float = 0.0,
) -> LayerwiseResult:
    """Layer-wise training at finite d: ``n_steps`` SGD steps on the first layer (``sgd.simulate`` with ``lr``,
    ``batch_size``, second layer fixed; for the large-batch regime lr = gamma0 d, batch_size = alpha d), then the
    second layer by ridge regression on ``n_ridge`` fresh samples (default: ``batch_size``):
    minimise (1/2n) sum (y - c sum_i a_i g(l_i))^2 + (ridge/2) ``|c a|^2`` in the effective second layer c a.
    The returned ``a`` and ``risk`` (exact, from the overlaps) are effective, as in :func:`layerwise`.

    Parameters
    ----------
    student, teacher : Network
        The start and the teacher.
    lr, batch_size, n_steps, noise, spherical, seed, lr_bias
        As in :func:`twolayer.sgd.simulate` (``n_steps`` SGD steps; the networks' biases, the student's fixed or
        trained, enter the features and the risk).
    ridge : float, default 0.0
        The ridge penalty.
    n_ridge : int, optional
        Fresh samples of the ridge regression.

    Returns
    -------
    LayerwiseResult

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(K=2, M=2, d=50, activation="relu", seed=0)
    >>> res = tl.large_batch.simulate_layerwise(s, t, lr=0.5 * 50, batch_size=100, n_steps=3, seed=0)
    >>> res.first.t.tolist(), res.a.shape
    ([0.0, 0.02, 0.04, 0.06], (2,))
    """
    student = check_network(student, "student", biases=True)
    teacher = check_network(teacher, "teacher", biases=True)
    T = integer(n_steps, "n_steps", 1)
    lam = positive(ridge, "ridge", allow_zero=True)
    n = integer(batch_size if n_ridge is None else n_ridge, "n_ridge", 1)
    seed_ = seed_arg(seed)
    d = student.d
    first = simulate(student, teacher, lr=lr, batch_size=batch_size, t_max=T / d, n_records=T + 1, noise=noise,
                     spherical=spherical, seed=seed_, lr_bias=lr_bias)
    assert isinstance(first, Trajectory)
    if first.status == "diverged":
        return _diverged(first, student.activation, teacher.activation, "student")
    assert first.student is not None
    net = first.student
    rng = np.random.default_rng([seed_, 0x5EED002])  # the ridge samples: a stream apart from the simulator's
    X = rng.standard_normal((n, d))
    s = math.sqrt(net.scale)
    G = sigma(net.activation, X @ net.W.T / s + net.bias)  # (n, K) features
    y = teacher(X) + math.sqrt(positive(noise, "noise", allow_zero=True)) * rng.standard_normal(n)
    a = np.linalg.lstsq(G.T @ G / n + lam * np.eye(net.K), G.T @ y / n, rcond=None)[0]
    act, t_act = net.activation, teacher.activation
    final = _final_overlaps(first, a, act, t_act)
    return LayerwiseResult(first=first, a=np.asarray(a, dtype=np.float64), risk=_risk(final, act, t_act),
                           overlaps=final)
