"""erf kernels with means (biases) in closed form (gaussian_mean.hpp, "erf pairs"): the pair moments
E[s^(i)(l1) s^(j)(l2)], s = erf(./sqrt 2), l ~ N(mu, C), against the conditioning engine they replace
(``_core.pair_moment(quadrature=True)``), against mpmath (30 digits) where that engine cannot reach (large variances,
correlations of the smoothed fields near +-1, tiny moments), and the kernels built on them (I2, J2, I3, I4) against
Monte Carlo and the zero-mean closed forms."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import twolayer as tl
from scipy.special import erf
from twolayer import _core

ORDERS = [(i, j) for i in range(5) for j in range(5) if i + j <= 4]


def _grid() -> tuple[np.ndarray, np.ndarray]:
    """Covariances (random, near-singular, exactly singular with either sign, one constant unit) and means."""
    rng = np.random.default_rng(23)
    Cs, mus = [], []
    for t in range(40):
        A = rng.normal(size=(2, 2)) * (0.1, 1.0, 3.0)[t % 3]
        C = A @ A.T
        if t % 5 == 1:
            C = np.outer(A[0], A[0]) + 1e-10 * np.eye(2)
        elif t % 5 == 2:
            C = np.outer(A[0], A[0]) * np.array([[1.0, -1.0], [-1.0, 1.0]])
        elif t % 5 == 3:
            C = np.outer(A[0], A[0])
        Cs.append(C)
        mus.append(rng.normal(size=2) * (0.3, 2.0, 6.0, 0.0)[t % 4] + (t % 4 == 3) * np.array([1e-3, 0.0]))
    Cs.append(np.diag([0.0, 2.0]))
    mus.append(np.array([0.5, -1.0]))
    return np.array(Cs), np.array(mus)


@pytest.mark.parametrize("i,j", ORDERS)
def test_pair_moments_match_the_quadrature_engine(i: int, j: int) -> None:
    C, mu = _grid()
    closed = _core.pair_moment("erf", i, "erf", j, mu, C)
    quad = _core.pair_moment("erf", i, "erf", j, mu, C, quadrature=True)
    np.testing.assert_allclose(closed, quad, rtol=0, atol=1e-13)


@pytest.mark.parametrize("rho", [0.0, 0.29, -0.31, 0.74, -0.76, 0.92, -0.93, 0.95])
def test_every_branch_of_the_orthant_probability(rho: float) -> None:
    """rho = C12 / sqrt((1 + C11)(1 + C22)) on both sides of 0.3, 0.75 (6, 12, 20 Drezner-Wesolowsky nodes) and 0.925
    (the near-one panels), means from 0 to the tails."""
    x = 20.0
    C = np.tile([[x, rho * (1 + x)], [rho * (1 + x), x]], (5, 1, 1))
    mu = np.array([[0.3, -0.2], [4.0, 3.0], [-10.0, 12.0], [25.0, -30.0], [-6.0, -8.0]])
    closed = _core.pair_moment("erf", 0, "erf", 0, mu, C)
    quad = _core.pair_moment("erf", 0, "erf", 0, mu, C, quadrature=True)
    np.testing.assert_allclose(closed, quad, rtol=0, atol=1e-14)


def _he(n: int, t: mp.mpf) -> mp.mpf:
    return [mp.mpf(1), t, t * t - 1, t**3 - 3 * t, t**4 - 6 * t * t + 3][n]


def _s(k: int, t: mp.mpf) -> mp.mpf:
    """s^(k)(t): erf(t / sqrt 2), then 2 (-1)^(k-1) He_(k-1)(t) phi(t)."""
    if k == 0:
        return mp.erf(t / mp.sqrt(2))
    return 2 * (-1) ** (k - 1) * _he(k - 1, t) * mp.npdf(t)


def _smoothed(k: int, m: mp.mpf, sd: mp.mpf) -> mp.mpf:
    """E[s^(k)(m + sd u)] = S^(k)(m): erf(m / sqrt(2 V)), V = 1 + sd^2, and its m-derivatives."""
    V = 1 + sd * sd
    w = m / mp.sqrt(V)
    if k == 0:
        return mp.erf(w / mp.sqrt(2))
    return 2 * (-1) ** (k - 1) * _he(k - 1, w) * mp.npdf(w) / V ** (mp.mpf(k) / 2)


def _mp_pair(i: int, j: int, mu: tuple[float, float], C: np.ndarray) -> float:
    """Condition on l1 = mu1 + sqrt(C11) t: the inner expectation is the closed smoothing, the outer one mpmath
    tanh-sinh split at the layers of both factors."""
    mp.mp.dps = 30
    x, y, z = (mp.mpf(float(v)) for v in (C[0, 0], C[0, 1], C[1, 1]))
    m1, m2 = mp.mpf(mu[0]), mp.mpf(mu[1])
    if x == 0:
        return float(_s(i, m1) * _smoothed(j, m2, mp.sqrt(z)))
    rx = mp.sqrt(x)
    c = y / rx
    sd = mp.sqrt(max(z - c * c, mp.mpf(0)))
    pts = [-m1 / rx + k / rx for k in (-8, -1, 0, 1, 8)]
    if c != 0:
        w = mp.sqrt(1 + sd * sd) / abs(c)
        pts += [-m2 / c + k * w for k in (-8, -1, 0, 1, 8)]
    pts = sorted({p for p in pts if -12 < p < 12})
    return float(mp.quad(lambda t: mp.npdf(t) * _s(i, m1 + rx * t) * _smoothed(j, m2 + c * t, sd),
                         [-mp.inf, *pts, mp.inf]))


# (mean, C): aligned fields with large variances (rho of the smoothed fields -> +-1: the orthant probability's
# near-one branch; the quadrature engine does not converge on the first), far tails (moments ~1e-20), a moderate one
EXTREME = [
    ((30.0, 31.0), [[1e4, 1e4 - 1.0], [1e4 - 1.0, 1e4]]),
    ((0.5, -0.2), [[1e8, -1e8], [-1e8, 1e8]]),
    ((-3.0, 2.0), [[100.0, -99.99], [-99.99, 100.0]]),
    ((4.0, 1.0), [[1e6, 1e6], [1e6, 1e6]]),
    ((9.0, -7.0), [[0.3, 0.1], [0.1, 0.2]]),
    ((0.7, -0.4), [[1.3, 0.6], [0.6, 0.9]]),
]


FAST_ORDERS = [(0, 0), (1, 0), (2, 1)]


@pytest.mark.parametrize("orders", [FAST_ORDERS, pytest.param([o for o in ORDERS if o not in FAST_ORDERS],
                                                              marks=pytest.mark.slow)])
@pytest.mark.parametrize("mu,C", EXTREME)
def test_pair_moments_against_mpmath(mu: tuple[float, float], C: list[list[float]],
                                     orders: list[tuple[int, int]]) -> None:
    Ca = np.array([C])
    for i, j in orders:
        ref = _mp_pair(i, j, mu, np.array(C))
        value = _core.pair_moment("erf", i, "erf", j, np.array([mu]), Ca)[0]
        assert abs(value - ref) <= 1e-13 * max(abs(ref), 1e-3), (i, j, value, ref)


def test_aligned_large_variance_pair_is_in_the_engines_reach() -> None:
    """The J2 on which the conditioning engine used to raise (a boundary layer of width 1e-2 in the outer variable,
    variances 1e4, correlation 0.9999): it now splits at that layer and meets the mpmath value, as the closed form
    does."""
    mu, C = (30.0, 31.0), [[1e4, 1e4 - 1.0], [1e4 - 1.0, 1e4]]
    quad = _core.pair_moment("erf", 1, "erf", 1, np.array([mu]), np.array([C]), quadrature=True)[0]
    value = tl.kernels.j2("erf", np.array(C), mean=np.array(mu))
    ref = _mp_pair(1, 1, mu, np.array(C))
    assert abs(float(value) - ref) < 1e-13 * abs(ref)
    assert abs(quad - ref) < 1e-12 * abs(ref)


@pytest.mark.parametrize("var", [100.0, 150.0, 200.0, 400.0, 1000.0])
def test_quadrature_reference_reaches_large_variances(var: float) -> None:
    """The reproducer: the conditioning engine (the reference of the erf pairs) raised 'did not converge' at
    variances from ~150 for every order with an erf derivative outside (a bump of width 1 / sqrt(C11) in the outer
    variable, missed by the first panels' nodes, so that their envelope, the tolerance's scale, was far below the
    integral). It now splits at the layers of smooth units and agrees with the closed forms (to 1e-14 absolute: the
    engine is certified against the integral of |integrand|, which the cancelling higher orders keep ~1)."""
    rows = [(rho, mu) for rho in (0.0, 0.3, -0.8, 0.99) for mu in ((0.4, -0.7), (3.0, 1.0), (-20.0, 5.0))]
    C = np.array([[[var, 0.9 * rho * var], [0.9 * rho * var, 0.81 * var]] for rho, _ in rows])
    mu = np.array([m for _, m in rows])
    for i, j in ORDERS:
        closed = _core.pair_moment("erf", i, "erf", j, mu, C)
        quad = _core.pair_moment("erf", i, "erf", j, mu, C, quadrature=True)
        np.testing.assert_allclose(quad, closed, rtol=1e-11, atol=1e-14, err_msg=f"order {(i, j)}")


def _sample(C: np.ndarray, mu: np.ndarray, n: int, seed: int) -> np.ndarray:
    L = np.linalg.cholesky(C + 1e-300 * np.eye(len(mu)))
    return mu + np.random.default_rng(seed).normal(size=(n, len(mu))) @ L.T


def _s_np(x: np.ndarray) -> np.ndarray:
    return erf(x / math.sqrt(2))


def _ds_np(x: np.ndarray) -> np.ndarray:
    return math.sqrt(2 / math.pi) * np.exp(-0.5 * x * x)


def _mc(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(values.std() / math.sqrt(values.size))


def test_kernels_against_monte_carlo() -> None:
    rng = np.random.default_rng(7)
    A = rng.normal(size=(4, 4))
    C = A @ A.T / 4 + 0.1 * np.eye(4)
    mu = np.array([0.8, -1.1, 0.4, 1.5])
    lam = _sample(C, mu, 2_000_000, 1)
    l1, l2, l3, l4 = lam.T
    cases = [
        (tl.kernels.i2("erf", "erf", C[np.ix_([0, 2], [0, 2])], mean=mu[[0, 2]]), _s_np(l1) * _s_np(l3)),
        (tl.kernels.j2("erf", C[:2, :2], mean=mu[:2]), _ds_np(l1) * _ds_np(l2)),
        (tl.kernels.i3("erf", "erf", C[:3, :3], mean=mu[:3]), _ds_np(l1) * l2 * _s_np(l3)),
        (tl.kernels.i4("erf", "erf", "erf", C, mean=mu), _ds_np(l1) * _ds_np(l2) * _s_np(l3) * _s_np(l4)),
    ]
    for value, samples in cases:
        m, se = _mc(samples)
        assert abs(float(value) - m) < 5 * se, (float(value), m, se)


@pytest.mark.parametrize("kernel", ["i2", "j2", "i3", "i4"])
def test_tiny_means_meet_the_zero_mean_closed_forms(kernel: str) -> None:
    """At mean 1e-9 the closed forms with means agree with the zero-mean arcsin forms (independent formulas) to
    O(1e-9); an all-zero mean returns them bitwise."""
    rng = np.random.default_rng(11)
    n = {"i2": 2, "j2": 2, "i3": 3, "i4": 4}[kernel]
    A = rng.normal(size=(6, n, n))
    C = A @ np.swapaxes(A, 1, 2) / n
    C[0] = np.outer(A[0, 0], A[0, 0])  # singular
    acts = {"i2": ("erf", "erf"), "j2": ("erf",), "i3": ("erf", "erf"), "i4": ("erf", "erf", "erf")}[kernel]
    fn = getattr(tl.kernels, kernel)
    zero = fn(*acts, C)
    assert np.array_equal(fn(*acts, C, mean=np.zeros((6, n))), zero)
    tiny = fn(*acts, C, mean=np.full((6, n), 1e-9))
    np.testing.assert_allclose(tiny, zero, rtol=0, atol=1e-8)


def test_ode_with_biases_matches_the_quadrature_moments() -> None:
    """The online ODE right-hand side with biases (erf/erf) against its terms rebuilt from the engine's pair moments
    (Stein's lemma, dynamics.hpp "Biases"): the bias pull db_i = lr_bias a_i sum_c w_c E[g'(l_i) h_c(l_c)]."""
    rng = np.random.default_rng(3)
    W, Wt = rng.normal(size=(2, 30)), rng.normal(size=(2, 30))
    b, bt = np.array([0.4, -0.9]), np.array([1.2, -0.3])
    a, v = np.array([0.8, -0.5]), np.array([1.0, 0.7])
    ov = tl.Overlaps(W @ W.T / 30, W @ Wt.T / 30, Wt @ Wt.T / 30, a, v, activation="erf", teacher_activation="erf",
                     bias=b, teacher_bias=bt)
    *_, db = tl.ode.rhs(ov, lr=0.5, lr_bias=0.3)
    om = np.block([[ov.Q, ov.M], [ov.M.T, ov.P]])
    mean, w = np.concatenate([b, bt]), np.concatenate([-a, v])
    for i in range(2):
        C = np.array([[[om[i, i], om[i, c]], [om[i, c], om[c, c]]] for c in range(4)])
        mu = np.array([[mean[i], mean[c]] for c in range(4)])
        pull = np.dot(w, _core.pair_moment("erf", 1, "erf", 0, mu, C, quadrature=True))
        assert abs(db[i] - 0.3 * a[i] * pull) < 1e-14
