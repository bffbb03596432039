"""Full-batch gradient descent on a fixed training set of n = alpha d samples (reused at every step): the finite-d
ground truth of :mod:`twolayer.dmft`.

Conventions (docs/layers/dmft.rst). Inputs x ~ N(0, I_d), lambda = W x / sqrt(d) + b, f(x) = sum_i a_i
sigma(lambda_i) with the student's effective readout a (fixed, or trained with ``lr_readout``) and biases b (the
student's, zero by default; fixed, or trained with ``lr_bias``), labels y = target(z) + sqrt(noise) xi with
z = W* x / sqrt(d) (P = I; a committee teacher's target(z) = sum_r v_r sigma*(z_r + b*_r) with its biases b*).
One step on the empirical risk with ridge,

    L(W) = 1/(2n) sum_mu (y_mu - f(x_mu))^2 + ridge / (2d) sum_ij W_ij^2,
    W <- W - lr d grad L = (1 - lr ridge) W + (lr sqrt(d) / n) sum_mu g_mu x_mu^T,
    g_mu = a * sigma'(lambda_mu) (y_mu - f(x_mu))                                        (in R^K),
    a <- a + (lr_readout / n) sum_mu sigma(lambda_mu) (y_mu - f(x_mu)),
    b <- b + (lr_bias / n) sum_mu g_mu     (all three from the weights before the step: b <- b - lr_bias dL/db),

moves the overlaps M = W W*^T / d and Q = W W^T / d by O(lr) per step: ``lr`` is the first-order-methods
paper's gamma0 and step T of this loop is iteration T of :func:`twolayer.dmft.solve` (no rescaling of time; the
DMFT keeps a fixed). It is
``tl.sgd.simulate(..., lr = lr d, lr_readout = lr_readout d, lr_bias = lr_bias d, batch_size = n_samples = n,
shuffle=False)`` of the package's SGD (t = steps / d there), plus the ridge.

Every step is two GEMMs with the (n, d) input matrix, so NumPy's BLAS does all the work. Recorded per step: M, Q,
the train risk 1/(2n) sum (y - f)^2 (labels with their noise, no ridge term) and the excess test risk
1/2 E[(y* - f)^2] over fresh inputs. Against a committee teacher the test risk is exact (the kernels with means of
the current overlaps and both networks' biases, as :func:`twolayer.population.risk`); against a Hermite or function
target it is a Monte Carlo estimate on ``n_test`` Gaussian fields drawn from the current overlaps (exact in
distribution: the risk depends on W only through (Q, M)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import _core
from ._validation import boolean, integer, positive, seed_arg
from .activations import derivative as dsigma
from .activations import sigma
from .networks import Network, check_network
from .results import import_xarray
from .targets import FunctionTarget, HermiteTarget

__all__ = ["FullBatchRun", "labels", "simulate"]


def labels(target: Any, z: NDArray[np.float64]) -> NDArray[np.float64]:
    """Noise-free labels of a target at projections ``z`` (n, k): committee Network (sum_r v_r
    sigma*(z_r + b*_r), effective readout v and biases b*), HermiteTarget or FunctionTarget.

    Parameters
    ----------
    target : Network or HermiteTarget or FunctionTarget
        The target; a committee's directions must be orthonormal (P = I).
    z : ndarray, shape (n, k)
        Projections W* x / sqrt(d).

    Returns
    -------
    ndarray, shape (n,)

    Examples
    --------
    >>> tl.full_batch.labels(tl.targets.hermite({(2,): 1.0}, d=5, seed=0), np.array([[1.0], [2.0]]))
    array([0., 3.])
    """
    if isinstance(target, Network):
        check_network(target, "target", biases=True)
        return np.asarray(sigma(target.activation, z + target.bias) @ target.effective_a, dtype=np.float64)
    return target.function(z)


def directions(target: Any) -> NDArray[np.float64]:
    """W* (k, d) of a target (a committee's weights, or the target's directions), checked orthonormal (P = I)."""
    if isinstance(target, Network):
        Wt = np.asarray(target.W, dtype=np.float64)
    elif isinstance(target, (HermiteTarget, FunctionTarget)):
        Wt = np.asarray(target.directions, dtype=np.float64)
    else:
        raise TypeError(f"target: expected a committee Network, HermiteTarget or FunctionTarget, got "
                        f"{type(target).__name__}")
    d = Wt.shape[1]
    if getattr(target, "scaling", "sqrt_d") != "sqrt_d":
        raise ValueError("target: only scaling='sqrt_d' (z = W* x / sqrt(d)) is supported")
    P = Wt @ Wt.T / d
    if not np.allclose(P, np.eye(len(P)), atol=1e-8):
        raise ValueError("target: the directions W* must be orthonormal in the scaling (W* W*^T / d = I)")
    return Wt


@dataclass(eq=False)
class FullBatchRun:
    """Records of full-batch GD runs, steps 0..n_steps, the runs (one per training set, dimension ``member``)
    first.

    Attributes
    ----------
    M : ndarray, shape (R, T+1, K, k)
    Q : ndarray, shape (R, T+1, K, K)
    a : ndarray, shape (R, T+1, K)
        The effective readout (constant unless ``lr_readout > 0``).
    train_risk, test_risk : ndarray, shape (R, T+1)
    meta : dict
    bias : ndarray, shape (R, T+1, K), or None
        The student's biases (a run with biases: nonzero ones or ``lr_bias > 0``; None otherwise).

    Examples
    --------
    >>> s = tl.Network.random(2, 50, "erf", seed=0)
    >>> run = tl.full_batch.simulate(s, tl.targets.hermite({(1,): 1.0}, d=50, seed=1), alpha=2.0, lr=0.5,
    ...                              n_steps=3, seeds=2, n_test=1000)
    >>> run.M.shape, run.to_xarray()["train_risk"].dims
    ((2, 4, 2, 1), ('member', 'step'))
    """

    M: NDArray[np.float64]
    Q: NDArray[np.float64]
    a: NDArray[np.float64]
    train_risk: NDArray[np.float64]
    test_risk: NDArray[np.float64]
    meta: dict[str, Any] = field(default_factory=dict)
    bias: NDArray[np.float64] | None = None

    def mean(self, name: str) -> NDArray[np.float64]:
        """Mean over seeds of ``name`` ("M", "Q", "a", "bias", "train_risk" or "test_risk")."""
        return np.asarray(getattr(self, name).mean(axis=0))

    def sem(self, name: str) -> NDArray[np.float64]:
        """Standard error over seeds of ``name`` (NaN for one seed)."""
        x = getattr(self, name)
        if len(x) < 2:
            return np.full(x.shape[1:], np.nan)
        return np.asarray(x.std(axis=0, ddof=1) / math.sqrt(len(x)))

    def to_xarray(self) -> Any:
        """An xarray Dataset with dimensions (member, step, student, teacher): ``member`` the runs (independent
        training sets) in seed order, as in every stacked result."""
        xr = import_xarray()
        dims = ("member", "step")
        bias = {} if self.bias is None else {"bias": (dims + ("student",), self.bias)}
        return xr.Dataset({"M": (dims + ("student", "teacher"), self.M),
                           "Q": (dims + ("student", "student_b"), self.Q), "a": (dims + ("student",), self.a),
                           **bias, "train_risk": (dims, self.train_risk), "test_risk": (dims, self.test_risk)},
                          coords={"step": np.arange(self.M.shape[1])},
                          attrs={k: v for k, v in self.meta.items() if isinstance(v, (int, float, str))})


def _risk_from_overlaps(Q: NDArray[np.float64], M: NDArray[np.float64], a: NDArray[np.float64], act: str,
                        b: NDArray[np.float64] | None, zeta: NDArray[np.float64], z: NDArray[np.float64],
                        y: NDArray[np.float64]) -> float:
    """1/2 E[(y - f)^2] with lambda = M z + chol(Q - M M^T) zeta (+ b; None: none) (Monte Carlo on the given
    draws)."""
    C = Q - M @ M.T
    w, V = np.linalg.eigh(0.5 * (C + C.T))
    lam = z @ M.T + zeta @ (V * np.sqrt(np.clip(w, 0.0, None))).T
    if b is not None:
        lam = lam + b
    return 0.5 * float(np.mean((y - sigma(act, lam) @ a) ** 2))  # type: ignore[arg-type,operator]


def simulate(student: Network, target: Any, *, alpha: float, lr: float, n_steps: int, ridge: float = 0.0,
             noise: float = 0.0, lr_readout: float = 0.0, seeds: int = 1, seed: int = 0, n_test: int = 100_000,
             project_init: bool = False, lr_bias: float = 0.0) -> FullBatchRun:
    """Full-batch GD on n = round(alpha d) reused samples (module docstring), ``seeds`` independent training sets.

    Parameters
    ----------
    student : Network
        Initial student (scaling "sqrt_d"), with its biases if any.
    target : Network or HermiteTarget or FunctionTarget
        Committee teacher (orthonormal rows, with its biases if any) or target of k orthonormal directions.
    alpha : float
        Samples per dimension, n = round(alpha d).
    lr : float
        gamma0: W <- (1 - lr ridge) W + lr d (-grad of the empirical square loss).
    n_steps : int
        Iterations T (records at steps 0..T).
    ridge : float, default 0
        lambda of the penalty ridge / (2d) sum_ij W_ij^2.
    noise : float, default 0
        Label-noise variance of the training labels.
    lr_readout : float, default 0
        Step of the effective readout (0: fixed).
    seeds : int, default 1
        Independent training sets (run j uses NumPy's Philox keyed by (seed, j)).
    seed : int, default 0
        Master seed.
    n_test : int, default 100000
        Gaussian draws of the test-risk estimate against a Hermite or function target (a committee's is exact).
    project_init : bool, default False
        Remove the teacher directions from the initial weights (M(0) = 0 exactly, as the DMFT's default).
    lr_bias : float, default 0
        Step of the student's biases, b <- b - lr_bias dL/db (0: fixed).

    Returns
    -------
    FullBatchRun

    Examples
    --------
    >>> s = tl.Network.random(2, 100, "relu", seed=0)
    >>> tgt = tl.targets.hermite({(1, 0): 1.0, (0, 3): 0.5}, d=100, seed=1)
    >>> run = tl.full_batch.simulate(s, tgt, alpha=3.0, lr=0.2, n_steps=4, ridge=0.1, seeds=2, n_test=1000)
    >>> bool(run.mean("train_risk")[-1] < run.mean("train_risk")[0])
    True
    """
    check_network(student, "student", biases=True)
    if isinstance(target, Network):
        check_network(target, "target", biases=True)
    if student.scaling != "sqrt_d":
        raise ValueError("student: only scaling='sqrt_d' is supported")
    Wt = directions(target)
    d = student.d
    if Wt.shape[1] != d:
        raise ValueError(f"target: dimension {Wt.shape[1]} differs from the student's d = {d}")
    alpha_ = positive(alpha, "alpha")
    lr_ = positive(lr, "lr")
    ridge_ = positive(ridge, "ridge", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    lr_b = positive(lr_bias, "lr_bias", allow_zero=True)
    T = integer(n_steps, "n_steps", 0, 10**7)
    R = integer(seeds, "seeds", 1, 10**6)
    n_test_ = integer(n_test, "n_test", 1, 10**9)
    seed_ = seed_arg(seed)
    project = boolean(project_init, "project_init")
    n = max(1, int(round(alpha_ * d)))
    act, a0, b0 = student.activation, student.effective_a.copy(), np.array(student.bias, dtype=np.float64)
    biased = bool(np.any(b0 != 0.0) or lr_b > 0)
    k, K = Wt.shape[0], student.K
    if isinstance(target, Network):  # the exact test risk (kernels with means), P = W* W*^T / d
        P, v, bt, t_act = Wt @ Wt.T / d, target.effective_a, np.array(target.bias, dtype=np.float64), target.activation

        def test_risk(Q: NDArray[np.float64], M: NDArray[np.float64], a: NDArray[np.float64],
                      b: NDArray[np.float64]) -> float:
            return float(_core.overlap_risk_mean(Q, M, P, a, v, b, bt, act, t_act))
    else:
        test_rng = np.random.Generator(np.random.Philox(key=[seed_, 2**40]))
        zt = test_rng.standard_normal((n_test_, k))
        zeta_t = test_rng.standard_normal((n_test_, K))
        yt = labels(target, zt)

        def test_risk(Q: NDArray[np.float64], M: NDArray[np.float64], a: NDArray[np.float64],
                      b: NDArray[np.float64]) -> float:
            return _risk_from_overlaps(Q, M, a, act, b if biased else None, zeta_t, zt, yt)

    Ms = np.empty((R, T + 1, K, k))
    Qs = np.empty((R, T + 1, K, K))
    As = np.empty((R, T + 1, K))
    Bs = np.empty((R, T + 1, K))
    tr = np.empty((R, T + 1))
    te = np.empty((R, T + 1))
    for r in range(R):
        rng = np.random.Generator(np.random.Philox(key=[seed_, r]))
        X = rng.standard_normal((n, d))
        y = labels(target, X @ Wt.T / math.sqrt(d))
        if noise_ > 0:
            y = y + math.sqrt(noise_) * rng.standard_normal(n)
        W = np.array(student.W, dtype=np.float64)
        a, b = a0.copy(), b0.copy()
        if project:
            W = W - (W @ Wt.T / d) @ Wt
        for step in range(T + 1):
            H = X @ W.T / math.sqrt(d)
            if biased:
                H = H + b
            S = np.asarray(sigma(act, H))
            E = y - S @ a
            Ms[r, step] = W @ Wt.T / d
            Qs[r, step] = W @ W.T / d
            As[r, step] = a
            Bs[r, step] = b
            tr[r, step] = 0.5 * float(np.mean(E * E))
            te[r, step] = test_risk(Qs[r, step], Ms[r, step], a, b)
            if step == T:
                break
            G = a * dsigma(act, H) * E[:, None]
            W = (1.0 - lr_ * ridge_) * W + (lr_ * math.sqrt(d) / n) * (G.T @ X)
            if lr_a > 0:
                a = a + (lr_a / n) * (S.T @ E)
            if lr_b > 0:
                b = b + (lr_b / n) * G.sum(axis=0)
            if not np.all(np.isfinite(W)):
                raise FloatingPointError(f"full-batch GD diverged at step {step + 1} (seed {r})")
    return FullBatchRun(M=Ms, Q=Qs, a=As, train_risk=tr, test_risk=te,
                        meta={"d": d, "n_samples": n, "alpha": alpha_, "lr": lr_, "ridge": ridge_, "noise": noise_,
                              "lr_readout": lr_a, "seed": seed_, "activation": act, "n_steps": T,
                              **({"lr_bias": lr_b} if biased else {})},
                        bias=Bs if biased else None)
