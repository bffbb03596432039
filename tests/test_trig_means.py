"""sin and cos pair moments with means (biases) in closed form (gaussian_mean.hpp pair_moment, through
gaussian_smooth.hpp TrigPair: E[cos(A + l1) cos(B + l2)] = (cos(A - B) e^(-(x + z - 2y)/2) + cos(A + B)
e^(-(x + z + 2y)/2)) / 2, a derivative a quarter turn of phase): against the conditioning engine they replace
(``_core.pair_moment(quadrature=True)``), against mpmath on a grid with singular covariances and zero variances, and
the closed form taken where that engine cannot follow (large variances)."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import twolayer as tl
from twolayer import _core

ORDERS = [(i, j) for i in range(5) for j in range(5) if i + j <= 4]
TRIG = [("sin", "sin"), ("sin", "cos"), ("cos", "sin"), ("cos", "cos")]


def _grid() -> tuple[np.ndarray, np.ndarray]:
    """Covariances (random, near-singular, exactly singular with either sign, zero variances, the self pair x = y = z)
    and means (zero, moderate, large)."""
    rng = np.random.default_rng(29)
    Cs, mus = [], []
    for t in range(30):
        A = rng.normal(size=(2, 2)) * (0.1, 1.0, 2.0)[t % 3]
        C = A @ A.T
        if t % 5 == 1:
            C = np.outer(A[0], A[0]) + 1e-10 * np.eye(2)
        elif t % 5 == 2:
            C = np.outer(A[0], A[0]) * np.array([[1.0, -1.0], [-1.0, 1.0]])
        elif t % 5 == 3:
            C = np.outer(A[0], A[0])
        Cs.append(C)
        mus.append(rng.normal(size=2) * (0.3, 2.0, 6.0, 0.0)[t % 4])
    for C, mu in (([[0.0, 0.0], [0.0, 2.0]], [0.5, -1.0]), ([[1.5, 0.0], [0.0, 0.0]], [0.0, 0.7]),
                  ([[0.0, 0.0], [0.0, 0.0]], [0.3, 1.1]), ([[0.8, 0.8], [0.8, 0.8]], [0.4, 0.4])):
        Cs.append(np.array(C))
        mus.append(np.array(mu))
    return np.array(Cs), np.array(mus)


@pytest.mark.parametrize("a,b", TRIG)
def test_trig_pair_moments_match_the_quadrature_engine(a: str, b: str) -> None:
    """Every order i + j <= 4 of every sin/cos pair on the grid: the closed form within 1e-12 of the adaptive
    quadrature it replaces."""
    C, mu = _grid()
    for i, j in ORDERS:
        closed = _core.pair_moment(a, i, b, j, mu, C)
        quad = _core.pair_moment(a, i, b, j, mu, C, quadrature=True)
        np.testing.assert_allclose(closed, quad, rtol=0, atol=1e-12, err_msg=f"{a}^({i}) {b}^({j})")


def _sigma(act: str, k: int, v: mp.mpf) -> mp.mpf:
    """The k-th derivative of sin or cos."""
    f = (mp.sin, mp.cos, lambda w: -mp.sin(w), lambda w: -mp.cos(w))
    return f[(k + (0 if act == "sin" else 1)) % 4](v)


def _mp_pair(a: str, i: int, b: str, j: int, mu: np.ndarray, C: np.ndarray) -> float:
    """E[a^(i)(mu1 + l1) b^(j)(mu2 + l2)] summed in mpmath (30 digits) by the 2D Gauss-Hermite rule of 60 x 60 nodes
    over the Cholesky factor of C (l1 = L11 t, l2 = L21 t + L22 u; a zero pivot leaves one variable): for these
    entire integrands and variances <= 2.2 exact far below 1e-13."""
    nodes, weights = np.polynomial.hermite.hermgauss(60)  # int e^(-s^2) f(s): t = sqrt(2) s, weights / sqrt(pi)
    with mp.workdps(30):
        t = [mp.sqrt(2) * mp.mpf(float(v)) for v in nodes]
        w = [mp.mpf(float(v)) / mp.sqrt(mp.pi) for v in weights]
        x, y, z = (mp.mpf(float(v)) for v in (C[0, 0], C[0, 1], C[1, 1]))
        m1, m2 = mp.mpf(float(mu[0])), mp.mpf(float(mu[1]))
        L11 = mp.sqrt(x)
        L21 = y / L11 if x > 0 else mp.mpf(0)
        L22 = mp.sqrt(max(z - L21 * L21, mp.mpf(0)))
        fa = [_sigma(a, i, m1 + L11 * tk) for tk in t]
        total = mp.mpf(0)
        for k in range(len(t)):
            inner = mp.fsum(wu * _sigma(b, j, m2 + L21 * t[k] + L22 * tu) for wu, tu in zip(w, t, strict=True))
            total += w[k] * fa[k] * inner
        return float(total)


def test_trig_pair_moments_match_mpmath() -> None:
    """The closed form against an mpmath Gauss-Hermite sum (30 digits) at 1e-13 on a grid of means and covariances,
    singular ones (rho = +-1, zero variances) included."""
    cases = [
        (np.array([0.3, -1.2]), np.array([[1.0, 0.4], [0.4, 2.0]])),
        (np.array([2.5, 0.7]), np.array([[0.5, -0.5], [-0.5, 0.5]])),  # rho = -1
        (np.array([-0.4, 0.4]), np.array([[1.3, 1.3], [1.3, 1.3]])),   # the self pair
        (np.array([1.0, -2.0]), np.array([[0.0, 0.0], [0.0, 1.7]])),   # a constant unit
        (np.array([0.9, 0.2]), np.array([[2.2, 0.0], [0.0, 0.0]])),
        (np.array([-3.0, 5.0]), np.array([[0.04, 0.01], [0.01, 0.09]])),
    ]
    for (a, b), (i, j) in [(("sin", "sin"), (0, 0)), (("sin", "cos"), (1, 0)), (("cos", "sin"), (2, 1)),
                           (("cos", "cos"), (1, 1)), (("sin", "sin"), (3, 1)), (("cos", "sin"), (0, 4))]:
        for mu, C in cases:
            want = _mp_pair(a, i, b, j, mu, C)
            got = _core.pair_moment(a, i, b, j, mu[None], C[None])[0]
            assert abs(got - want) <= 1e-13, (a, i, b, j, mu, C, got, want)


def _closed(a: str, i: int, b: str, j: int, mu: np.ndarray, C: np.ndarray) -> float:
    """The closed form in Python: sigma^(k)(v) = cos(v + (p + k) pi / 2), p = -1 for sin, 0 for cos."""
    pf, pg = (-1 if a == "sin" else 0) + i, (-1 if b == "sin" else 0) + j
    x, y, z = C[0, 0], C[0, 1], C[1, 1]
    return 0.5 * (math.cos(mu[0] - mu[1] + (pf - pg) * math.pi / 2) * math.exp(-0.5 * (x + z - 2 * y))
                  + math.cos(mu[0] + mu[1] + (pf + pg) * math.pi / 2) * math.exp(-0.5 * (x + z + 2 * y)))


def _closed_mp(a: str, i: int, b: str, j: int, mu: np.ndarray, C: np.ndarray) -> float:
    """The same closed form in mpmath (40 digits)."""
    with mp.workdps(40):
        pf, pg = (-1 if a == "sin" else 0) + i, (-1 if b == "sin" else 0) + j
        m1, m2, x, y, z = (mp.mpf(float(v)) for v in (mu[0], mu[1], C[0, 0], C[0, 1], C[1, 1]))
        return float((mp.cos(m1 - m2 + (pf - pg) * mp.pi / 2) * mp.exp(-(x + z - 2 * y) / 2)
                      + mp.cos(m1 + m2 + (pf + pg) * mp.pi / 2) * mp.exp(-(x + z + 2 * y) / 2)) / 2)


def test_closed_form_is_taken_where_the_quadrature_fails() -> None:
    """Large variances make the moments tiny against the integrand (sin(mu + sqrt(x) t) over ~20 periods): there the
    adaptive quadrature was off by 1e-3 relative (e^(-30), e^(-60)), by 1e-18 absolute with the wrong sign (e^(-100)),
    or did not converge (x = z = 60, y = 30). pair_moment is the closed form to rounding (against mpmath), at every
    order of every sin/cos pair."""
    C = np.array([[[60.0, 0.0], [0.0, 0.0]], [[60.0, 0.0], [0.0, 60.0]], [[200.0, 0.0], [0.0, 1.0]],
                  [[60.0, 30.0], [30.0, 60.0]], [[400.0, 399.99], [399.99, 400.0]]])
    mu = np.array([[0.7, -0.3], [0.7, -0.3], [0.7, -0.3], [-2.0, 1.5], [5.0, 3.0]])
    for a, b in TRIG:
        for i, j in ORDERS:
            got = _core.pair_moment(a, i, b, j, mu, C)
            want = [_closed_mp(a, i, b, j, m, c) for m, c in zip(mu, C, strict=True)]
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=f"{a}^({i}) {b}^({j})")


def test_risk_with_biases_is_the_closed_form() -> None:
    """tl.population.risk of a biased sin committee (K = 2, M = 1) against the closed form summed in Python:
    1/2 E[(sum_r v_r sin(l*_r) - sum_i a_i sin(l_i))^2], every pair (self pairs included) a closed-form moment."""
    s, t = tl.networks.teacher_student(2, 1, 50, "sin", seed=3)
    s = s.with_weights(s.W, bias=[0.4, -0.9])
    t = t.with_weights(t.W, bias=[1.3])
    W = np.concatenate([s.W, t.W]) / math.sqrt(s.scale)
    O = W @ W.T
    w = np.concatenate([-s.effective_a, t.effective_a])
    mu = np.concatenate([s.bias, t.bias])
    want = 0.5 * sum(w[p] * w[q] * _closed("sin", 0, "sin", 0, mu[[p, q]], O[np.ix_([p, q], [p, q])])
                     for p in range(3) for q in range(3))
    assert tl.population.risk(s, t) == pytest.approx(want, rel=1e-13, abs=1e-15)
