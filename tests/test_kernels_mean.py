"""Gaussian kernels with means (biases, issue 23): lambda ~ N(mu, C). Against an independent reference (nested scipy
adaptive quadrature of the raw activations, conditioning on one variable), exact formulas, Monte Carlo (tolerance
from the standard error), and the zero-mean kernels (bitwise at mu = 0)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import numpy as np
import pytest
import twolayer as tl
from scipy import integrate
from twolayer import _core

ACTS = ["linear", "erf", "relu", "step", "quadratic", "tanh", "softplus", "sigmoid"]
KINK = {"relu", "step"}


def _sigma(act: str, x: float) -> float:
    return float(tl.activations.sigma(act, np.array([x]))[0]) if act not in KINK else (
        max(x, 0.0) if act == "relu" else float(x > 0))


def _dsigma(act: str, x: float) -> float:
    if act == "relu":
        return float(x > 0)
    return float(tl.activations.derivative(act, np.array([x]))[0])


def _phi(t: float) -> float:
    return math.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)


def _quad(f: Callable[[float], float], pts: list[float]) -> float:
    pts = sorted(p for p in pts if -12 < p < 12)
    edges = [-12.0, *pts, 12.0]
    with warnings.catch_warnings():  # QUADPACK's round-off warnings on the reference side are not the engine's
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        return sum(integrate.quad(f, a, b, epsabs=1e-15, epsrel=1e-13, limit=200)[0]
                   for a, b in zip(edges[:-1], edges[1:], strict=True))


def ref_pair(f: Callable[[float], float], g: Callable[[float], float], mu: np.ndarray, C: np.ndarray,
             kf: bool, kg: bool) -> float:
    """E[f(lambda1) g(lambda2)]: lambda1 = mu1 + sqrt(C11) t, lambda2 | t ~ N(mu2 + c t, s^2), nested quad."""
    rx = math.sqrt(C[0, 0])
    c = C[0, 1] / rx
    s = math.sqrt(max(C[1, 1] - c * c, 0.0))

    def inner(t: float) -> float:
        m = mu[1] + c * t
        if s < 1e-12:
            return g(m)
        return _quad(lambda u: _phi(u) * g(m + s * u), [-m / s] if kg else [])

    pts = [-mu[0] / rx] if kf else []
    if kg and c != 0:  # g's kink, smoothed over a layer of width s / |c| around t1
        t1, w = -mu[1] / c, s / abs(c)
        pts += [t1, t1 - w, t1 + w, t1 - 8 * w, t1 + 8 * w]
    return _quad(lambda t: _phi(t) * f(mu[0] + rx * t) * inner(t), pts)


def _cov(rng: np.random.Generator, n: int, near_singular: bool = False) -> np.ndarray:
    A = rng.normal(size=(n, n))
    if near_singular:
        A[-1] = A[0] + 1e-4 * rng.normal(size=n)
    return A @ A.T / n


CASES = [(0.3, -0.5), (1.5, 0.7), (-2.5, 4.0), (6.0, -1.0)]


SLOW = pytest.mark.slow


@pytest.mark.parametrize("a,b", [("relu", "relu"), pytest.param("relu", "erf", marks=SLOW), ("step", "relu"),
                                 pytest.param("step", "step", marks=SLOW), pytest.param("relu", "tanh", marks=SLOW),
                                 pytest.param("quadratic", "step", marks=SLOW), pytest.param("erf", "erf", marks=SLOW),
                                 pytest.param("softplus", "tanh", marks=SLOW)])
def test_i2_mean_against_quadrature(a: str, b: str) -> None:
    rng = np.random.default_rng(1)
    for k, (m1, m2) in enumerate(CASES):
        C = _cov(rng, 2, near_singular=(k == 3))
        mu = np.array([m1, m2])
        ref = ref_pair(lambda x: _sigma(a, x), lambda x: _sigma(b, x), mu, C, a in KINK, b in KINK)
        val = tl.kernels.i2(a, b, C, mean=mu)
        assert abs(val - ref) <= 1e-10 * max(abs(ref), 1e-3), (a, b, mu, C, val, ref)


@pytest.mark.parametrize("s", ["relu", pytest.param("erf", marks=SLOW), pytest.param("tanh", marks=SLOW),
                               pytest.param("quadratic", marks=SLOW), pytest.param("softplus", marks=SLOW)])
def test_j2_mean_against_quadrature(s: str) -> None:
    rng = np.random.default_rng(2)
    for m1, m2 in CASES[:3]:
        C = _cov(rng, 2)
        mu = np.array([m1, m2])
        ref = ref_pair(lambda x: _dsigma(s, x), lambda x: _dsigma(s, x), mu, C, s == "relu", s == "relu")
        val = tl.kernels.j2(s, C, mean=mu)
        assert abs(val - ref) <= 1e-10 * max(abs(ref), 1e-3), (s, mu, val, ref)


def test_j2_mean_step_is_the_density_at_zero() -> None:
    rng = np.random.default_rng(3)
    for m1, m2 in CASES:
        C = _cov(rng, 2)
        mu = np.array([m1, m2])
        ref = math.exp(-0.5 * mu @ np.linalg.solve(C, mu)) / (2 * math.pi * math.sqrt(np.linalg.det(C)))
        assert tl.kernels.j2("step", C, mean=mu) == pytest.approx(ref, rel=1e-10, abs=1e-300)


@pytest.mark.parametrize("s,b", [("relu", "relu"), pytest.param("relu", "step", marks=SLOW),
                                 pytest.param("erf", "relu", marks=SLOW), pytest.param("tanh", "erf", marks=SLOW),
                                 pytest.param("quadratic", "relu", marks=SLOW),
                                 pytest.param("softplus", "step", marks=SLOW)])
def test_i3_mean_against_quadrature(s: str, b: str) -> None:
    """E[s'(l1) l2 b(l3)] with l2 regressed on (l1, l3): E[s'(l1) (mu2 + beta . (l1 - mu1, l3 - mu3)) b(l3)]."""
    rng = np.random.default_rng(4)
    for m1, m2 in CASES[:3]:
        C = _cov(rng, 3)
        mu = np.array([m1, 0.4, m2])
        idx = [0, 2]
        beta = np.linalg.solve(C[np.ix_(idx, idx)], C[idx, 1])
        C13 = C[np.ix_(idx, idx)]
        # E[s'(x) (mu2 + b1 (x - mu1)) b(y)] + b3 E[s'(x) (y - mu3) b(y)]
        m, bt = mu, beta
        r1 = ref_pair(lambda x, m=m, bt=bt: _dsigma(s, x) * (m[1] + bt[0] * (x - m[0])), lambda y: _sigma(b, y),
                      mu[idx], C13, s == "relu", b in KINK)
        r2 = ref_pair(lambda x: _dsigma(s, x), lambda y, m=m: (y - m[2]) * _sigma(b, y), mu[idx], C13, s == "relu",
                      b in KINK)
        ref = r1 + beta[1] * r2
        val = tl.kernels.i3(s, b, C, mean=mu)
        assert abs(val - ref) <= 1e-10 * max(abs(ref), 1e-3), (s, b, mu, val, ref)


def _mc(f: Callable[[np.ndarray], np.ndarray], mu: np.ndarray, C: np.ndarray, n: int = 2_000_000,
        seed: int = 0) -> tuple[float, float]:
    L = np.linalg.cholesky(C + 1e-300 * np.eye(len(mu)))
    z = np.random.default_rng(seed).normal(size=(n, len(mu)))
    v = f(mu + z @ L.T)
    return float(v.mean()), float(v.std() / math.sqrt(n))


@pytest.mark.parametrize("s,a,b", [("erf", "relu", "erf"), pytest.param("linear", "relu", "step", marks=SLOW),
                                   pytest.param("tanh", "tanh", "erf", marks=SLOW),
                                   pytest.param("quadratic", "erf", "linear", marks=SLOW),
                                   pytest.param("softplus", "sigmoid", "tanh", marks=SLOW)])
def test_i4_mean_against_monte_carlo(s: str, a: str, b: str) -> None:
    rng = np.random.default_rng(5)
    C = _cov(rng, 4)
    mu = np.array([0.4, -0.3, 0.8, -1.1])

    def f(lam: np.ndarray) -> np.ndarray:
        ds = tl.activations.derivative
        return (ds(s, lam[:, 0]) * ds(s, lam[:, 1]) * tl.activations.sigma(a, lam[:, 2])
                * tl.activations.sigma(b, lam[:, 3]))

    est, se = _mc(f, mu, C)
    val = tl.kernels.i4(s, a, b, C, mean=mu)
    assert abs(val - est) < 5 * se, (s, a, b, val, est, se)


def test_i4_mean_step_student_against_quadrature() -> None:
    """Step: the density of (l1, l2) at 0 times the conditioned I2 (the conditioning checked by nested quadrature)."""
    rng = np.random.default_rng(6)
    C = _cov(rng, 4)
    mu = np.array([0.4, -0.3, 0.8, -1.1])
    A, B = [0, 1], [2, 3]
    K = C[np.ix_(B, A)] @ np.linalg.inv(C[np.ix_(A, A)])
    mB = mu[B] - K @ mu[A]
    CB = C[np.ix_(B, B)] - K @ C[np.ix_(A, B)]
    dens = math.exp(-0.5 * mu[A] @ np.linalg.solve(C[np.ix_(A, A)], mu[A])) / (
        2 * math.pi * math.sqrt(np.linalg.det(C[np.ix_(A, A)])))
    ref = dens * ref_pair(lambda x: max(x, 0.0), lambda y: math.erf(y / math.sqrt(2)), mB, CB, True, False)
    assert tl.kernels.i4("step", "relu", "erf", C, mean=mu) == pytest.approx(ref, rel=1e-10)


def test_zero_mean_is_bitwise_the_zero_mean_kernel() -> None:
    rng = np.random.default_rng(7)
    C2 = np.stack([_cov(rng, 2) for _ in range(5)])
    C3 = np.stack([_cov(rng, 3) for _ in range(5)])
    C4 = np.stack([_cov(rng, 4) for _ in range(5)])
    for a in ACTS:
        for b in ["relu", "erf", "tanh"]:
            if (a in KINK and b == "tanh") or (b in KINK and a in ("tanh", "softplus", "sigmoid")):
                continue  # no zero-mean kernel for these pairs
            np.testing.assert_array_equal(tl.kernels.i2(a, b, C2, mean=np.zeros((5, 2))), tl.kernels.i2(a, b, C2))
            np.testing.assert_array_equal(tl.kernels.i3(a, b, C3, mean=np.zeros((5, 3))), tl.kernels.i3(a, b, C3))
        m = 5 if a in ("linear", "erf", "relu", "step", "quadratic") else 1  # the smooth zero-mean I4 is slow
        np.testing.assert_array_equal(tl.kernels.i4(a, "erf", "linear", C4[:m], mean=np.zeros((m, 4))),
                                      tl.kernels.i4(a, "erf", "linear", C4[:m]))
        if a != "step":
            np.testing.assert_array_equal(tl.kernels.j2(a, C2, mean=np.zeros((5, 2))), tl.kernels.j2(a, C2))
    # a batch mixing zero and nonzero means: the zero rows are the zero-mean kernel's values
    mu = np.zeros((5, 2))
    mu[2] = [0.5, -0.5]
    out = tl.kernels.i2("relu", "erf", C2, mean=mu)
    np.testing.assert_array_equal(out[[0, 1, 3, 4]], tl.kernels.i2("relu", "erf", C2[[0, 1, 3, 4]]))
    assert out[2] == tl.kernels.i2("relu", "erf", C2[2], mean=mu[2])
    # pairs without a zero-mean kernel (relu with tanh) exist with means, zero ones included, and without: the
    # with-means engine at mean 0
    out = tl.kernels.i2("relu", "tanh", C2, mean=mu)
    np.testing.assert_array_equal(tl.kernels.i2("relu", "tanh", C2[[0, 1, 3, 4]]), out[[0, 1, 3, 4]])
    assert np.all(np.isfinite(out))
    assert out[0] == pytest.approx(tl.kernels.i2("relu", "tanh", C2[0], mean=[1e-9, 0.0]), rel=1e-7)


def test_mean_errors() -> None:
    C = np.eye(2)
    with pytest.raises(ValueError, match=r"mean: expected shape \(2,\)"):
        tl.kernels.i2("relu", "relu", C, mean=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="mean: entries must be finite"):
        tl.kernels.i2("relu", "relu", C, mean=[np.nan, 0.0])
    with pytest.raises(ValueError, match=r"mean: expected shape \(3, 2\)"):
        tl.kernels.i2("relu", "relu", np.stack([C] * 3), mean=[1.0, 0.0])
    with pytest.raises(ValueError, match=r"C\[0\]"):
        tl.kernels.i2("relu", "relu", -np.eye(2), mean=[1.0, 0.0])
    with pytest.raises(ValueError, match="exceeds the double range"):
        tl.kernels.i2("quadratic", "quadratic", C, mean=[1e200, 1.0])
    with pytest.raises(ValueError, match="exceeds the double range"):  # the relu student's I4 (nested rule)
        tl.kernels.i4("relu", "quadratic", "quadratic", np.eye(4), mean=[0.1, 0.0, 1e200, 0.0])
    with pytest.raises(ValueError, match="delta"):  # E[delta(l1) delta(l2)] with l1 = l2 = 0 identically
        tl.kernels.j2("step", np.array([[0.0, 0.0], [0.0, 1.0]]), mean=[0.0, 1.0])


def test_bias_derivative_is_the_pair_moment() -> None:
    """The ODE's bias term E[s'(lambda1) b(lambda2)] as I3 with lambda2 the constant 1 (C22 = 0, mu2 = 1)."""
    C = np.array([[1.2, 0.0, 0.5], [0.0, 0.0, 0.0], [0.5, 0.0, 0.8]])
    mu = np.array([0.3, 1.0, -0.4])
    ref = ref_pair(lambda x: _dsigma("relu", x), lambda y: _sigma("erf", y), mu[[0, 2]], C[np.ix_([0, 2], [0, 2])],
                   True, False)
    assert tl.kernels.i3("relu", "erf", C, mean=mu) == pytest.approx(ref, rel=1e-10)


def test_i3_mean_step_student_by_conditioning() -> None:
    """Step student: s' = delta, I3 = p1(0) E[lambda2 b(lambda3) | lambda1 = 0], the conditional expectation by
    regressing lambda2 on lambda3 (one-dimensional quadrature): checks the delta' moment of Stein's lemma."""
    rng = np.random.default_rng(8)
    for mu1, mu3 in [(0.3, -0.5), (-1.5, 0.7)]:
        C = _cov(rng, 3)
        mu = np.array([mu1, 0.4, mu3])
        g = C[1:, 0] / C[0, 0]
        m = mu[1:] - g * mu[0]                     # means of (lambda2, lambda3) | lambda1 = 0
        S = C[1:, 1:] - np.outer(C[1:, 0], C[0, 1:]) / C[0, 0]
        beta = S[0, 1] / S[1, 1]
        sd = math.sqrt(S[1, 1])
        p0 = math.exp(-0.5 * mu[0] ** 2 / C[0, 0]) / math.sqrt(2 * math.pi * C[0, 0])
        ref = p0 * _quad(lambda u, m=m, beta=beta, sd=sd: _phi(u) * (m[0] + beta * sd * u) * max(m[1] + sd * u, 0.0),
                         [-m[1] / sd])
        assert tl.kernels.i3("step", "relu", C, mean=mu) == pytest.approx(ref, rel=1e-10)


@pytest.mark.parametrize("a, i, b, j", [("relu", 4, "erf", 0), ("relu", 3, "tanh", 1), ("tanh", 4, "relu", 0),
                                        ("erf", 2, "relu", 2), ("step", 3, "erf", 1), ("softplus", 3, "step", 1),
                                        ("tanh", 1, "erf", 3), ("erf", 0, "relu", 4)])
def test_pair_moment_orders_up_to_four_are_mean_derivatives(a: str, i: int, b: str, j: int) -> None:
    """The orders the population Hessian uses (i + j <= 4; relu'''' = step''' = delta'' integrated out exactly):
    E[a^(i) b^(j)] = d/dmu of the moment one order lower, by central differences in the mean."""
    C = np.array([[[1.3, 0.4], [0.4, 0.9]]])
    mu = np.array([[0.35, -0.6]])
    h = 1e-4
    lower, e = ((i - 1, j), np.array([[h, 0.0]])) if i > j else ((i, j - 1), np.array([[0.0, h]]))
    fd = (_core.pair_moment(a, lower[0], b, lower[1], mu + e, C)
          - _core.pair_moment(a, lower[0], b, lower[1], mu - e, C)) / (2 * h)
    value = _core.pair_moment(a, i, b, j, mu, C)
    assert value[0] == pytest.approx(fd[0], rel=1e-6, abs=1e-9), (value, fd)
    with pytest.raises(ValueError, match="i \\+ j <= 4"):
        _core.pair_moment(a, 3, b, 2, mu, C)


def test_linear_and_quadratic_pair_moments_with_means_are_exact() -> None:
    """Pairs of linear and quadratic units with means take the exact polynomial moments (gaussian_mean.cpp, as the
    hermite pairs; the adaptive quadrature before, ~200 us per linear right-hand side with biases, now ~10 us):
    E[l1 l2] = C12 + m1 m2, E[l1^2 l2] = 2 m1 C12 + m2 (C11 + m1^2), E[l1^2 l2^2] = (C11 + m1^2)(C22 + m2^2)
    + 2 C12^2 + 4 C12 m1 m2 and derivatives, to 4e-15; the quadrature reference is the same exact path; a value
    beyond the double range raises."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(50, 2, 2))
    C, mu = A @ A.transpose(0, 2, 1), 2.0 * rng.normal(size=(50, 2))
    x, y, z, m1, m2 = C[:, 0, 0], C[:, 0, 1], C[:, 1, 1], mu[:, 0], mu[:, 1]
    want = {("linear", 0, "linear", 0): y + m1 * m2, ("linear", 1, "linear", 0): m2,
            ("quadratic", 0, "linear", 0): 2 * m1 * y + m2 * (x + m1**2),
            ("quadratic", 0, "quadratic", 0): (x + m1**2) * (z + m2**2) + 2 * y**2 + 4 * y * m1 * m2,
            ("quadratic", 1, "quadratic", 1): 4 * (y + m1 * m2), ("quadratic", 2, "quadratic", 0): 2 * (z + m2**2),
            ("quadratic", 1, "linear", 0): 2 * (y + m1 * m2)}
    for (a, i, b, j), w in want.items():
        for quadrature in (False, True):
            got = _core.pair_moment(a, i, b, j, mu, C, quadrature=quadrature)
            np.testing.assert_allclose(got, w, rtol=4e-15, atol=0, err_msg=f"{a}^({i}) {b}^({j})")
    with pytest.raises(ValueError, match="exceeds the double range"):
        _core.pair_moment("quadratic", 0, "quadratic", 0, np.array([[1e200, 1.0]]), np.eye(2)[None])
