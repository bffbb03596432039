"""I4 with means where a relu or step unit is involved (issue 23): the relu student's I4 = E[step(l1) step(l2) a(l3)
b(l4)], l ~ N(mu, C), for every teacher pair (a, b), and a smooth student's I4 with relu or step units among (a, b)
(cpp/src/gaussian_mean.cpp, kinked_i4: nested adaptive quadrature over (l3, l4), the student pair in closed form:
the bivariate orthant probability, or the certified smooth pair moment).

Checked against
* mpmath: the bivariate orthant probability alone (a, b = 1: constant units of mean 1), to 1e-15 absolute;
* the certified zero-mean closed forms (gaussian_relu_i4.hpp, section 8) at a vanishing mean, on the reference grid
  of test_kernels_relu_i4.py (degenerate, aligned, nearly aligned and rank-deficient covariances), to 1e-10;
* Price's theorem with means: dI4/dC12 = the step student's I4 (density at 0 times a conditioned I2);
* Monte Carlo within 5 standard errors, smooth and kinked teachers, a repeated student unit (the ODE's i = k);
* smooth students: relu(x) - relu(-x) = x ties I4(s, relu, b) to I4(s, linear, b) of the smooth engine (an
  independent route: gaussian_smooth.hpp's own I4 with means), to 1e-10.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import twolayer as tl
from test_kernels_relu_i4 import REFERENCE_CASES

mp.mp.dps = 30


def _orthant_ref(m1: float, m2: float, x: float, y: float, z: float) -> float:
    """P(m1 + X > 0, m2 + Y > 0), (X, Y) ~ N(0, [[x, y], [y, z]]): int_{-m1/sx}^inf phi(t) Phi(cond) dt (mpmath)."""
    sx, sz = mp.sqrt(x), mp.sqrt(z)
    r = mp.mpf(y) / (sx * sz)
    s = mp.sqrt(1 - r * r)

    def f(t):  # X = sx t; Y | t = sz (r t + s v)
        return mp.npdf(t) * mp.ncdf((mp.mpf(m2) / sz + r * t) / s)

    lo = -mp.mpf(m1) / sx
    knot = -mp.mpf(m2) / (sz * r) if r != 0 else lo
    pts = sorted({lo, max(lo, knot)}) + [mp.inf]
    return float(mp.quad(f, pts))


ORTHANT = [(0.3, -0.5, 1.0, 0.2, 1.5), (1.5, 0.7, 1.0, -0.6, 2.0), (-2.5, 4.0, 2.0, 1.9, 2.0),
           (0.4, 0.41, 1.0, 0.99999, 1.0), (0.4, 0.4, 1.0, 0.999999999, 1.0), (1.0, -1.2, 1.0, -0.95, 1.0),
           (-0.2, 0.3, 1.0, -0.9999, 1.0), (3.0, 2.0, 1.0, 0.93, 1.0), (-3.0, -2.5, 1.0, 0.9, 1.0),
           (0.0, 0.0, 1.0, 0.5, 1.0), (2.0, 2.0, 1.0, 0.924, 1.0), (-1.0, 1.0, 4.0, -3.0, 4.0)]


@pytest.mark.parametrize("m1, m2, x, y, z", ORTHANT)
def test_orthant_probability_against_mpmath(m1: float, m2: float, x: float, y: float, z: float) -> None:
    C = np.zeros((4, 4))
    C[:2, :2] = [[x, y], [y, z]]
    got = tl.kernels.i4("relu", "linear", "linear", C, mean=[m1, m2, 1.0, 1.0])
    assert abs(got - _orthant_ref(m1, m2, x, y, z)) < 2e-15


@pytest.mark.parametrize("name", list(REFERENCE_CASES))
@pytest.mark.parametrize("a, b", [("relu", "relu"), ("linear", "relu"), ("linear", "linear")])
def test_vanishing_mean_is_the_zero_mean_closed_form(name: str, a: str, b: str) -> None:
    C = REFERENCE_CASES[name]
    if name in ("tiny scale", "huge scale"):
        C = C / math.sqrt(C[2, 2] * C[3, 3])  # (a mean of 1e-200 is not negligible at every scale)
    ref = tl.kernels.i4("relu", a, b, C)
    got = tl.kernels.i4("relu", a, b, C, mean=[0.0, 0.0, 1e-200, 0.0])  # any nonzero mean takes the engine
    scale = math.sqrt(C[2, 2] * C[3, 3])
    assert abs(got - ref) <= 1e-10 * abs(ref) + 1e-13 * scale + 1e-190, (name, got, ref)  # (the mean itself)


@pytest.mark.parametrize("a, b", [("relu", "erf"), ("step", "quadratic"), ("tanh", "relu")])
def test_price_derivative_is_the_step_student(a: str, b: str) -> None:
    """dI4/dC12 = E[delta(l1) delta(l2) a b] (the step student's I4 with means), by central differences."""
    rng = np.random.default_rng(3)
    A = rng.normal(size=(4, 4))
    C = A @ A.T / 4 + 0.2 * np.eye(4)
    mu = np.array([0.3, -0.4, 0.5, -0.2])
    h = 1e-5
    E = np.zeros((4, 4))
    E[0, 1] = E[1, 0] = h
    fd = (tl.kernels.i4("relu", a, b, C + E, mean=mu) - tl.kernels.i4("relu", a, b, C - E, mean=mu)) / (2 * h)
    assert fd == pytest.approx(tl.kernels.i4("step", a, b, C, mean=mu), rel=1e-7)


def _mc(s: str, a: str, b: str, mu: np.ndarray, C: np.ndarray, n: int = 1_000_000) -> tuple[float, float]:
    w, V = np.linalg.eigh(C)
    Lr = V * np.sqrt(np.clip(w, 0, None))
    lam = mu + np.random.default_rng(11).normal(size=(n, 4)) @ Lr.T
    ds, sg = tl.activations.derivative, tl.activations.sigma
    v = ds(s, lam[:, 0]) * ds(s, lam[:, 1]) * sg(a, lam[:, 2]) * sg(b, lam[:, 3])
    return float(v.mean()), float(v.std() / math.sqrt(n))


@pytest.mark.parametrize("a, b, case", [("relu", "relu", "generic"), ("tanh", "relu", "generic"),
                                        ("softplus", "step", "generic"), ("erf", "quadratic", "generic"),
                                        ("relu", "tanh", "near singular"), ("relu", "relu", "repeated unit")])
def test_against_monte_carlo(a: str, b: str, case: str) -> None:
    rng = np.random.default_rng(5)
    A = rng.normal(size=(4, 4))
    if case == "near singular":
        A[2] = A[0] + 1e-3 * rng.normal(size=4)  # the teacher nearly the student
    if case == "repeated unit":
        A[1] = A[0]  # the ODE's diagonal pair i = k
    C = A @ A.T / 4
    mu = np.array([0.4, -0.3, 0.8, -1.1])
    if case == "repeated unit":
        mu[1] = mu[0]
    est, se = _mc("relu", a, b, mu, C)
    got = tl.kernels.i4("relu", a, b, C, mean=mu)
    assert abs(got - est) < 5 * se, (got, est, se)


@pytest.mark.parametrize("s, b", [("tanh", "tanh"), ("softplus", "relu"), ("sin", "tanh"), ("quadratic", "erf"),
                                  ("gelu", "step")])
def test_smooth_student_relu_minus_mirrored_relu_is_linear(s: str, b: str) -> None:
    rng = np.random.default_rng(4)
    A = rng.normal(size=(4, 4))
    C = A @ A.T / 4
    mu = np.array([0.3, -0.2, 0.5, -0.4])
    F = np.diag([1.0, 1.0, -1.0, 1.0])  # l3 -> -l3
    got = tl.kernels.i4(s, "relu", b, C, mean=mu) - tl.kernels.i4(s, "relu", b, F @ C @ F, mean=F @ mu)
    ref = tl.kernels.i4(s, "linear", b, C, mean=mu)  # no relu or step unit: the smooth engine (or closed forms)
    assert got == pytest.approx(ref, rel=1e-10, abs=1e-13)


@pytest.mark.parametrize("s, a, b", [("tanh", "relu", "tanh"), ("softplus", "step", "relu")])
def test_smooth_student_against_monte_carlo(s: str, a: str, b: str) -> None:
    rng = np.random.default_rng(9)
    A = rng.normal(size=(4, 4))
    C = A @ A.T / 4
    mu = np.array([0.4, -0.3, 0.8, -1.1])
    est, se = _mc(s, a, b, mu, C)
    got = tl.kernels.i4(s, a, b, C, mean=mu)
    assert abs(got - est) < 5 * se, (got, est, se)


def _linear_linear_ref(mu: np.ndarray, C: np.ndarray) -> float:
    """E[step(l1) step(l2) l3 l4] with means in closed form (Stein's lemma on the centred c3, c4): the orthant
    probability S = P(l1 > 0, l2 > 0) by mpmath, the delta terms p_j(0) times conditioned normal moments."""
    def given(j: int, o: int, k: int | None) -> float:  # E[delta(l_j) 1(l_o > 0) (c_k or 1)]
        pj = math.exp(-0.5 * mu[j] ** 2 / C[j, j]) / math.sqrt(2 * math.pi * C[j, j])
        mo = mu[o] - C[o, j] / C[j, j] * mu[j]
        so = math.sqrt(C[o, o] - C[o, j] ** 2 / C[j, j])
        P = 0.5 * math.erfc(-mo / so / math.sqrt(2))
        if k is None:
            return pj * P
        mk = -C[k, j] / C[j, j] * mu[j]
        cov = C[k, o] - C[k, j] * C[j, o] / C[j, j]
        return pj * (mk * P + cov * math.exp(-0.5 * (mo / so) ** 2) / (so * math.sqrt(2 * math.pi)))

    S = _orthant_ref(mu[0], mu[1], C[0, 0], C[0, 1], C[1, 1])
    e3 = C[2, 0] * given(0, 1, None) + C[2, 1] * given(1, 0, None)  # E[c3 S]
    e4 = C[3, 0] * given(0, 1, None) + C[3, 1] * given(1, 0, None)
    e34 = C[2, 3] * S + C[2, 0] * given(0, 1, 3) + C[2, 1] * given(1, 0, 3)  # E[c3 c4 S]
    return mu[2] * mu[3] * S + mu[2] * e4 + mu[3] * e3 + e34


@pytest.mark.parametrize("case", range(6))
def test_linear_teachers_with_means_against_closed_form(case: int) -> None:
    rng = np.random.default_rng(20 + case)
    A = rng.normal(size=(4, 4))
    if case == 3:
        A[2] = A[0] + 1e-4 * rng.normal(size=4)  # nearly aligned teacher and student
    if case == 4:
        A[3] = A[1] - 1e-3 * rng.normal(size=4)
    if case == 5:
        A[1] = A[0] + 0.05 * rng.normal(size=4)  # strongly correlated student pair (|rho| near 1)
    C = A @ A.T / 4
    mu = rng.uniform(-1.5, 1.5, 4)
    ref = _linear_linear_ref(mu, C)
    got = tl.kernels.i4("relu", "linear", "linear", C, mean=mu)
    assert got == pytest.approx(ref, rel=1e-10, abs=1e-14), (got, ref)
