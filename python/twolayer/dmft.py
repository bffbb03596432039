r"""Dynamical mean-field theory (DMFT) of full-batch gradient descent on n = alpha d reused samples, d -> infinity.

The finite-d process is :func:`twolayer.full_batch.simulate` (its docstring states the normalisation):
lambda = W x / sqrt(d) + b, f = sum_i a_i sigma(lambda_i) (fixed effective readout a in R^p, student biases b, fixed
or trained with ``lr_bias``), target y(z) of k
orthonormal directions z = W* x / sqrt(d) (committee, with its biases y = sum_r v_r sigma*(z_r + b*_r), Hermite
polynomial or function), loss 1/2 (y - f)^2, and

    W^{t+1} = (1 - lr ridge) W^t + (lr sqrt(d) / n) sum_mu g(lambda_mu^t, y_mu) x_mu^T,
    b^{t+1} = b^t + (lr_bias / n) sum_mu g(lambda_mu^t, y_mu),
    g(h, y) = a * sigma'(h) (y - a . sigma(h))  in R^p.

Iteration t here is step t there (lr = the first-order-methods paper's gamma0; the package's SGD with lr_sgd = lr d,
batch = n, t_sgd = t / d). Write W^t = M^t W* + Theta^t (Theta orthogonal to the teacher), eta = lr, lambda = ridge.
In d -> infinity at fixed alpha the equations below hold, with E over the effective processes (numerically verified
against the finite-d simulation, tests/test_dmft.py):

Sample side (one training sample; z ~ N(0, I_k), y = y(z) + sqrt(noise) xi fixed in time):

    h^t = b^t + M^t z + w^t + sum_{s<t} R_theta(t, s) g^s,   g^t = g(h^t, y),   b^{t+1} = b^t + lr_bias E[g^t],
    w ~ centred Gaussian process, E[w^t w^s^T] = C_theta(t, s),
    C_g(t, s) = E[g^t g^s^T],   R_g(t, s) = E[d g^t / d w^s]  (s <= t; total derivative through the memory),

the biases deterministic (the mean over the n samples concentrates; one sample moves them by O(1/n)).

Weight side (one coordinate of Theta, a p-vector; linear, hence Gaussian and solved exactly):

    theta^{t+1} = (1 - eta lambda) theta^t + eta sum_{s<=t} R_g(t, s) theta^s + (eta / alpha) u^t,
    u ~ centred Gaussian, E[u^t u^s^T] = alpha C_g(t, s),   theta^0 ~ N(0, Q^0 - M^0 M^0^T).

Its propagator K(t, s) = d theta^t / d theta^s (K(s, s) = I, K(t+1, s) = (1 - eta lambda) K(t, s)
+ eta sum_{u=s..t} R_g(t, u) K(u, s)) gives the response and the correlation

    R_theta(t, s) = (eta / alpha) K(t, s + 1)                         (s < t),
    C_theta(t, s) = K(t, 0) C_theta(0, 0) K(s, 0)^T + (eta^2 / alpha) sum_{u<t, v<s} K(t, u+1) C_g(u, v) K(s, v+1)^T,

and the overlaps follow:

    M^{t+1} = (1 - eta lambda) M^t + eta E[g^t z^T],     Q^t = M^t M^t^T + C_theta(t, t),
    train risk = 1/2 E[(y - a . sigma(h^t))^2],
    test risk = 1/2 E[(y(z) - a . sigma(b^t + M^t z + C_theta(t, t)^{1/2} zeta))^2]  (zeta ~ N(0, I_p)).

R_g is computed without derivatives of sigma (so ReLU works) by Gaussian integration by parts: drawing
w = L zeta (L the lower Cholesky factor of C_theta over times 0..t, zeta iid N(0, 1)), E[g^t zeta^T] = R_g(t, .) L,
solved by back substitution. alpha -> infinity removes the memory and the noise: R_g(t, t) = E[d g / d h], and the
process is population gradient descent with step eta (:func:`one_pass` with alpha = inf).

Monte Carlo: ``n_groups`` independent groups of ``n_mc`` samples (Philox streams keyed by (seed, group)); every
reported quantity is the mean over groups, with its standard error std / sqrt(n_groups).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._interrupt import partial_result
from ._validation import as_float_array, integer, n_threads_arg, positive, seed_arg
from .activations import check_activation
from .full_batch import labels
from .networks import Network, check_network
from .results import import_xarray
from .targets import FunctionTarget, HermiteTarget

__all__ = ["DmftResult", "one_pass", "solve"]

_STREAM_Z, _STREAM_Z_TEST, _STREAM_NOISE = 18, 19, 20
_KERNELS = ("C_theta", "R_theta", "C_g", "R_g")
_CURVES = ("M", "Q", "train_risk", "test_risk")


@dataclass(eq=False)
class DmftResult:
    """The DMFT solution at iterations 0..T (fewer when stopped): means over the Monte Carlo groups and their
    standard errors (``se[name]``).

    Attributes
    ----------
    M : ndarray, shape (T+1, p, k)
    Q : ndarray, shape (T+1, p, p)
    train_risk, test_risk : ndarray, shape (T+1,)
        Train risk with the label noise; excess test risk.
    C_theta, R_theta, C_g, R_g : ndarray, shape (T+1, T+1, p, p)
        Kernels, block (t, s) a p x p matrix (R_theta strictly causal, R_g causal).
    bias : ndarray, shape (T+1, p), or None
        The student's biases (a run with biases: nonzero ones or ``lr_bias > 0``; None otherwise).
    se : dict of ndarray
        Monte Carlo standard error of each of the above (over ``n_groups``).
    status : str
        "completed", "diverged" or "interrupted".
    meta : dict
        The parameters.

    Examples
    --------
    >>> tgt = tl.targets.hermite({(1, 0): 1.0, (1, 1): 1.0}, d=10, seed=0)
    >>> res = tl.dmft.solve(tgt, activation="erf", a=[1.0, 1.0], alpha=2.0, lr=0.5, n_steps=3, n_mc=1000,
    ...                     n_groups=4)
    >>> res.M.shape, res.C_theta.shape, res.status
    ((4, 2, 2), (4, 4, 2, 2), 'completed')
    """

    M: NDArray[np.float64]
    Q: NDArray[np.float64]
    train_risk: NDArray[np.float64]
    test_risk: NDArray[np.float64]
    C_theta: NDArray[np.float64]
    R_theta: NDArray[np.float64]
    C_g: NDArray[np.float64]
    R_g: NDArray[np.float64]
    se: dict[str, NDArray[np.float64]] = field(default_factory=dict)
    status: str = "completed"
    meta: dict[str, Any] = field(default_factory=dict)
    bias: NDArray[np.float64] | None = None

    @property
    def n_steps(self) -> int:
        """Number of recorded iterations minus one."""
        return len(self.train_risk) - 1

    def to_xarray(self) -> Any:
        """An xarray Dataset: M, Q, train/test risk over ``step``; the kernels over (``step``, ``step_b``); each
        with its ``<name>_se``."""
        xr = import_xarray()
        T1 = len(self.train_risk)
        dims = {"M": ("step", "student", "teacher"), "Q": ("step", "student", "student_b"),
                "train_risk": ("step",), "test_risk": ("step",)}
        dims.update({k: ("step", "step_b", "student", "student_b") for k in _KERNELS})
        if self.bias is not None:
            dims["bias"] = ("step", "student")
        data = {}
        for name, dm in dims.items():
            data[name] = (dm, getattr(self, name))
            data[name + "_se"] = (dm, self.se[name])
        attrs = {k: v for k, v in self.meta.items() if isinstance(v, (int, float, str))}
        attrs["status"] = self.status
        return xr.Dataset(data, coords={"step": np.arange(T1), "step_b": np.arange(T1)}, attrs=attrs)


def _matrix(x: Any, name: str, shape: tuple[int, int]) -> NDArray[np.float64]:
    m = as_float_array(x, name, ndim=2)
    if m.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {m.shape}")
    return m


def _directions_k(target: Any) -> int:
    if isinstance(target, Network):
        check_network(target, "target", biases=True)  # the biases enter the labels only (full_batch.labels)
        if target.scaling != "sqrt_d" or not np.allclose(target.W @ target.W.T / target.d, np.eye(target.K),
                                                          atol=1e-8):
            raise ValueError("target: a committee teacher needs orthonormal rows in the scaling (P = I)")
        return int(target.K)
    if isinstance(target, (HermiteTarget, FunctionTarget)):
        return int(target.k)
    raise TypeError(f"target: expected a committee Network, HermiteTarget or FunctionTarget, got "
                    f"{type(target).__name__}")


def _bias_args(bias: ArrayLike | None, lr_bias: float, p: int) -> tuple[NDArray[np.float64], float]:
    """The checked initial biases (p; zeros for None) and their step."""
    b0 = np.zeros(p) if bias is None else as_float_array(bias, "bias", ndim=1)
    if b0.shape != (p,):
        raise ValueError(f"bias: expected shape ({p},) (one per entry of a), got {b0.shape}")
    return b0, positive(lr_bias, "lr_bias", allow_zero=True)


def solve(target: Any, *, activation: str, a: ArrayLike, alpha: float, lr: float, n_steps: int,
          ridge: float = 0.0, noise: float = 0.0, Q0: ArrayLike | None = None, M0: ArrayLike | None = None,
          n_mc: int = 100_000, n_groups: int = 8, seed: int = 0, n_threads: int | None = None,
          bias: ArrayLike | None = None, lr_bias: float = 0.0) -> DmftResult:
    """Solve the DMFT of full-batch GD (module docstring) for ``n_steps`` iterations.

    Parameters
    ----------
    target : Network or HermiteTarget or FunctionTarget
        Committee teacher (orthonormal rows, with its biases if any), polynomial or function target of k
        directions (only its labels y(z) are used; d plays no role).
    activation : str
        Student activation (any of :data:`twolayer.activations.ACTIVATIONS` with a pointwise derivative).
    a : array_like, shape (p,)
        Fixed effective readout of the p student units.
    alpha : float
        Samples per dimension n / d.
    lr : float
        eta (the first-order-methods paper's gamma0).
    n_steps : int
        T; records at iterations 0..T.
    ridge : float, default 0
        lambda of the penalty ridge / (2d) sum_ij W_ij^2.
    noise : float, default 0
        Label-noise variance of the training labels.
    Q0, M0 : array_like, optional
        Initial overlaps (p, p) and (p, k); default I and 0.
    n_mc : int, default 100000
        S, Monte Carlo samples of the effective process per group.
    n_groups : int, default 8
        Independent groups (>= 2 for standard errors).
    seed : int, default 0
        Master seed of the Philox streams.
    n_threads : int, optional
        OpenMP threads (None: the OpenMP default).
    bias : array_like, shape (p,), optional
        Initial student biases b (default 0).
    lr_bias : float, default 0
        Step of the biases, b <- b + lr_bias E[g] (full batch's ``lr_bias``; 0: fixed).

    Returns
    -------
    DmftResult

    Raises
    ------
    MemoryError
        When the histories (2 G S (T + 1) p doubles) and kernels would not fit in 80% of the memory.
    twolayer.Interrupted
        On Ctrl-C, with ``.partial`` the DmftResult of the finished iterations (status "interrupted").

    Examples
    --------
    >>> tgt = tl.targets.function(lambda z: np.tanh(z[:, 0] + z[:, 1] ** 3 - 3 * z[:, 1]), k=2, d=10, seed=0)
    >>> res = tl.dmft.solve(tgt, activation="relu", a=[1.0, 1.0], alpha=3.0, lr=0.2, n_steps=5, n_mc=4000)
    >>> bool(res.train_risk[-1] < res.train_risk[0]), res.to_xarray()["R_g"].dims
    (True, ('step', 'step_b', 'student', 'student_b'))
    """
    act = check_activation(activation)
    if act == "step":
        raise ValueError("activation: 'step' has a delta derivative, so gradient descent cannot train it")
    a_ = as_float_array(a, "a", ndim=1)
    p = len(a_)
    if not 1 <= p <= 64:
        raise ValueError(f"a: expected 1 to 64 student units, got {p}")
    k = _directions_k(target)
    alpha_ = positive(alpha, "alpha")
    lr_ = positive(lr, "lr")
    ridge_ = positive(ridge, "ridge", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    T = integer(n_steps, "n_steps", 0, 100_000)
    S = integer(n_mc, "n_mc", 1, 10**9)
    G = integer(n_groups, "n_groups", 1, 10**4)
    seed_ = seed_arg(seed)
    threads = n_threads_arg(n_threads)
    b0, lr_b = _bias_args(bias, lr_bias, p)
    biased = bool(np.any(b0 != 0.0) or lr_b > 0)
    Q0_ = np.eye(p) if Q0 is None else _matrix(Q0, "Q0", (p, p))
    M0_ = np.zeros((p, k)) if M0 is None else _matrix(M0, "M0", (p, k))
    C0 = Q0_ - M0_ @ M0_.T
    if not np.allclose(C0, C0.T) or np.linalg.eigvalsh(0.5 * (C0 + C0.T)).min() < -1e-10:
        raise ValueError("Q0, M0: expected Q0 - M0 M0^T symmetric positive semi-definite")

    need = 8 * (2 * G * S * (T + 1) * p + 4 * G * (T + 1) ** 2 * p * p + 4 * G * S * k)
    try:
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        have = None
    if have and need > 0.8 * have:
        raise MemoryError(f"n_mc, n_groups, n_steps: the solver would need {need / 2**30:.1f} GiB (histories of "
                          f"2 n_groups n_mc (n_steps + 1) p doubles and four (n_steps + 1)^2 p^2 kernels per group), "
                          f"more than 80% of this machine's {have / 2**30:.1f} GiB; lower n_mc or n_groups")

    def draws(stream: int) -> NDArray[np.float64]:
        return np.stack([_core.rng_gaussians(seed_, g, stream, 0, S * k).reshape(S, k) for g in range(G)])

    z, zt = draws(_STREAM_Z), draws(_STREAM_Z_TEST)
    y = labels(target, z.reshape(-1, k)).reshape(G, S)
    yt = labels(target, zt.reshape(-1, k)).reshape(G, S)
    if noise_ > 0:
        y = y + math.sqrt(noise_) * np.stack([_core.rng_gaussians(seed_, g, _STREAM_NOISE, 0, S) for g in range(G)])
    meta = {"activation": act, "alpha": alpha_, "lr": lr_, "ridge": ridge_, "noise": noise_, "n_steps": T,
            "n_mc": S, "n_groups": G, "seed": seed_, "p": p, "k": k, **({"lr_bias": lr_b} if biased else {})}

    def build(raw: dict[str, Any], status: str | None = None) -> DmftResult:
        n = int(raw["steps_done"])
        vals: dict[str, NDArray[np.float64]] = {}
        se: dict[str, NDArray[np.float64]] = {}
        for name in _CURVES + _KERNELS + (("bias",) if biased else ()):
            x = np.asarray(raw[name])
            x = x[:, :n, :n] if name in _KERNELS else x[:, :n]
            vals[name] = x.mean(axis=0)
            se[name] = x.std(axis=0, ddof=1) / math.sqrt(G) if G > 1 else np.full(x.shape[1:], np.nan)
        st = status or ("diverged" if raw["diverged"] else "completed")
        return DmftResult(**vals, se=se, status=st, meta=meta)

    with partial_result(lambda raw: build(raw, "interrupted")):
        raw = _core.dmft_solve(a_, act, z, y, zt, yt, M0_, C0, lr_, ridge_, alpha_, T, seed_, threads,
                               bias=b0 if biased else None, lr_bias=lr_b)
    return build(raw)


def one_pass(target: Any, *, activation: str, a: ArrayLike, lr: float, n_steps: int, alpha: float = math.inf,
             ridge: float = 0.0, Q0: ArrayLike | None = None, M0: ArrayLike | None = None, n_mc: int = 400_000,
             seed: int = 0, bias: ArrayLike | None = None, lr_bias: float = 0.0) -> dict[str, NDArray[np.float64]]:
    """The one-pass counterpart of :func:`solve`: GD on a fresh batch of n = alpha d samples at every step, d -> inf
    (the first-order-methods paper's large-batch map with a ridge), on the overlaps, Theta = C^{1/2}:
    M <- (1 - lr ridge) M + lr E[g z^T], C <- B C B^T + (lr^2 / alpha) E[g g^T], B = (1 - lr ridge) I + lr E[dg/dh],
    Q = M M^T + C, and the student biases b <- b + lr_bias E[g] (the fields b + M z + C^{1/2} zeta). ``alpha = inf`` is
    population gradient descent with step ``lr`` (the alpha -> infinity limit of :func:`solve`). Expectations by
    Monte Carlo over (z, zeta), E[dg/dh] by integration by parts.

    Parameters
    ----------
    target, activation, a, lr, n_steps, ridge, Q0, M0, bias, lr_bias
        As in :func:`solve`.
    alpha : float, default inf
        Fresh samples per dimension and step (inf: population gradient descent).
    n_mc : int, default 400000
        Gaussian draws of the expectations.
    seed : int, default 0
        Seed of the draws.

    Returns
    -------
    dict
        M (T+1, p, k), Q (T+1, p, p), test_risk (T+1,); bias (T+1, p) in a run with biases.

    Examples
    --------
    >>> tgt = tl.targets.hermite({(1,): 1.0}, d=10, seed=0)
    >>> out = tl.dmft.one_pass(tgt, activation="linear", a=[1.0], lr=0.5, n_steps=2, n_mc=10_000)
    >>> np.round(out["M"][:, 0, 0], 2)
    array([0.  , 0.5 , 0.75])
    """
    act = check_activation(activation)
    a_ = as_float_array(a, "a", ndim=1)
    p, k = len(a_), _directions_k(target)
    lr_, ridge_ = positive(lr, "lr"), positive(ridge, "ridge", allow_zero=True)
    alpha_ = math.inf if alpha == math.inf else positive(alpha, "alpha")
    T = integer(n_steps, "n_steps", 0, 100_000)
    b, lr_b = _bias_args(bias, lr_bias, p)
    rng = np.random.Generator(np.random.Philox(key=[seed_arg(seed), 7]))
    z = rng.standard_normal((n_mc, k))
    zeta = rng.standard_normal((n_mc, p))
    y = labels(target, z)
    M = np.zeros((p, k)) if M0 is None else _matrix(M0, "M0", (p, k)).copy()
    C = (np.eye(p) if Q0 is None else _matrix(Q0, "Q0", (p, p))) - M @ M.T
    from .activations import derivative, sigma
    Ms, Qs, risk, bs = [], [], [], []
    for t in range(T + 1):
        w, V = np.linalg.eigh(0.5 * (C + C.T))
        Lc = V * np.sqrt(np.clip(w, 0, None))
        h = b + z @ M.T + zeta @ Lc.T
        E = y - np.asarray(sigma(act, h)) @ a_  # type: ignore[arg-type,operator]
        Ms.append(M.copy())
        Qs.append(M @ M.T + C)
        bs.append(b.copy())
        risk.append(0.5 * float(np.mean(E * E)))
        if t == T:
            break
        g = a_ * np.asarray(derivative(act, h)) * E[:, None]  # type: ignore[arg-type]
        J = (g.T @ zeta / n_mc) @ np.linalg.pinv(Lc)  # E[dg/dh] by integration by parts
        M = (1 - lr_ * ridge_) * M + lr_ * g.T @ z / n_mc
        B = (1 - lr_ * ridge_) * np.eye(p) + lr_ * J
        C = B @ C @ B.T + (lr_**2 / alpha_) * (g.T @ g / n_mc)
        b = b + lr_b * g.mean(axis=0)
    biased = bool(np.any(bs[0] != 0.0) or lr_b > 0)
    return {"M": np.array(Ms), "Q": np.array(Qs), "test_risk": np.array(risk),
            **({"bias": np.array(bs)} if biased else {})}
