"""The complete committee kernel table: every (student, teacher) activation pair has the I2, I3, I4 and J2 entries
the online ODE needs. The entries added for it, the ReLU-student I4 E[step(l1) step(l2) a(l3) b(l4)] for every
teacher pair (a, b) (orthant moments, cpp/include/twolayer/gaussian_orthant.hpp), are checked against Monte Carlo
(tolerance from the standard error) at a generic and at the degenerate covariances the ODE meets (l1 = l2: the
diagonal pairs; l3 = l4: a unit with itself; l3 = l1: a teacher unit equal to a student unit), against exact
identities (Price's theorem on the path-integral relu I4, relu(x) - relu(-x) = x), and through the ODE right-hand
side against a Monte Carlo estimate of it. Step students: sigma' is a delta, so E[sigma'(l_i)^2 E^2] is infinite
and online SGD (and the large-batch map) are undefined; they raise a clear ValueError (gradient flow applies)."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
import twolayer as tl
from conftest import assert_mc
from twolayer import kernels
from twolayer.activations import (
    CLOSED_FORM as ACTIVATIONS,  # the pairs with closed forms (the others: test_activations_smooth.py)
)
from twolayer.activations import derivative, sigma

PAIRS = list(itertools.product(ACTIVATIONS, ACTIVATIONS))
STUDENTS_WITH_DERIVATIVE = ("linear", "erf", "relu", "quadratic")


def _duplicate(C: np.ndarray, src: int, dst: int) -> np.ndarray:
    """C with variable dst replaced by a copy of variable src."""
    C = C.copy()
    C[dst, :] = C[src, :]
    C[:, dst] = C[:, src]
    C[dst, dst] = C[src, src]
    return C


def _covariances() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(77)
    A = rng.standard_normal((4, 5))
    C = A @ A.T / 5 + 0.05 * np.eye(4)
    return {
        "generic": C,
        "l1=l2": _duplicate(C, 0, 1),
        "l3=l4": _duplicate(C, 2, 3),
        "l3=l1": _duplicate(C, 0, 2),
        "l1=l2,l3=l4": _duplicate(_duplicate(C, 0, 1), 2, 3),
    }


COVS = _covariances()


def _i4_relu_mc(C: np.ndarray, samples: int, seed: int) -> dict[tuple[str, str], tuple[float, float]]:
    """Monte Carlo means and standard errors of step(l1) step(l2) a(l3) b(l4) for every pair (a, b), from one
    sample (each activation evaluated once per column)."""
    w, V = np.linalg.eigh(C)
    rng = np.random.default_rng(seed)
    s1 = np.zeros((5, 5))
    s2 = np.zeros((5, 5))
    for _ in range(samples // 500_000):
        X = rng.standard_normal((500_000, 4)) @ (V * np.sqrt(np.clip(w, 0, None))).T
        F3 = np.stack([sigma(a, X[:, 2]) for a in ACTIVATIONS], axis=1) * ((X[:, 0] > 0) & (X[:, 1] > 0))[:, None]
        F4 = np.stack([sigma(b, X[:, 3]) for b in ACTIVATIONS], axis=1)
        s1 += F3.T @ F4
        s2 += (F3 * F3).T @ (F4 * F4)
    n = 500_000 * (samples // 500_000)
    m = s1 / n
    se = np.sqrt(np.clip(s2 / n - m * m, 0, None) / n)
    return {(a, b): (m[i, j], se[i, j]) for (i, a), (j, b) in itertools.product(enumerate(ACTIVATIONS), repeat=2)}


@pytest.mark.parametrize("cov", list(COVS))
def test_relu_i4_every_teacher_pair_against_monte_carlo(cov):
    mc = _i4_relu_mc(COVS[cov], 1_000_000, seed=zlib.crc32(cov.encode()))
    for a, b in PAIRS:
        assert_mc(float(kernels.i4("relu", a, b, COVS[cov])), mc[(a, b)], what=f"I4(relu; {a}, {b}) {cov}")


@pytest.mark.slow
@pytest.mark.parametrize("cov", list(COVS))
def test_relu_i4_every_teacher_pair_against_monte_carlo_2e7(cov):
    mc = _i4_relu_mc(COVS[cov], 20_000_000, seed=1 + zlib.crc32(cov.encode()))
    for a, b in PAIRS:
        assert_mc(float(kernels.i4("relu", a, b, COVS[cov])), mc[(a, b)], what=f"I4(relu; {a}, {b}) {cov}")


def test_relu_i4_step_step_is_the_price_derivative_of_relu_relu():
    """Price: dI4(relu; relu, relu)/dC34 = E[step step step(l3) step(l4)] = I4(relu; step, step) -- the path
    integral of gaussian_relu_i4.hpp against the orthant moments, by central differences."""
    for C in (COVS["generic"], COVS["l1=l2"], COVS["l3=l1"]):
        h = 1e-5
        E = np.zeros((4, 4))
        E[2, 3] = E[3, 2] = h
        fd = (float(kernels.i4("relu", "relu", "relu", C + E)) - float(kernels.i4("relu", "relu", "relu", C - E))) / (
            2 * h)
        assert abs(fd - float(kernels.i4("relu", "step", "step", C))) < 1e-8


def test_relu_i4_quadratic_is_the_price_derivative_of_relu_linear():
    """Price: dI4(relu; relu, quadratic)/dC34 = E[step step step(l3) 2 l4] = 2 I4(relu; step, linear)."""
    C = COVS["generic"]
    h = 1e-5
    E = np.zeros((4, 4))
    E[2, 3] = E[3, 2] = h
    fd = (float(kernels.i4("relu", "relu", "quadratic", C + E)) -
          float(kernels.i4("relu", "relu", "quadratic", C - E))) / (2 * h)
    assert abs(0.5 * fd - float(kernels.i4("relu", "step", "linear", C))) < 1e-8


@pytest.mark.parametrize("b", ACTIVATIONS)
@pytest.mark.parametrize("cov", ["generic", "l1=l2"])
def test_relu_minus_mirrored_relu_is_linear(b, cov):
    """relu(x) - relu(-x) = x: I4(relu; relu, b; C) - I4(relu; relu, b; C with l3 -> -l3) = I4(relu; linear, b)."""
    C = COVS[cov]
    S = np.diag([1.0, 1.0, -1.0, 1.0])
    lhs = float(kernels.i4("relu", "relu", b, C)) - float(kernels.i4("relu", "relu", b, S @ C @ S))
    assert abs(lhs - float(kernels.i4("relu", "linear", b, C))) < 1e-12 * (1 + abs(lhs))


def _random_overlaps(K: int, M: int, seed: int) -> tl.Overlaps:
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((K + M, K + M + 2))
    Om = A @ A.T / (K + M + 2)
    return tl.Overlaps(Om[:K, :K], Om[:K, K:], Om[K:, K:], rng.uniform(0.5, 1.0, K), rng.uniform(0.5, 1.0, M))


@pytest.mark.parametrize(("student", "teacher"), PAIRS)
def test_every_pair_has_its_ode(student, teacher):
    """No (student, teacher) pair raises KernelNotImplemented: online (where defined) and gradient flow."""
    ov = _random_overlaps(2, 2, seed=5)
    regimes = ("gradient_flow",) if student == "step" else ("gradient_flow", "online")
    for regime in regimes:
        dQ, dM, da = tl.ode.rhs(ov, student, teacher, lr=0.5, lr_readout=0.2, noise=0.1, regime=regime)
        assert np.all(np.isfinite(dQ)) and np.all(np.isfinite(dM)) and np.all(np.isfinite(da))
    if student == "step":
        with pytest.raises(ValueError, match="delta"):
            tl.ode.rhs(ov, student, teacher, lr=0.5, regime="online")
        with pytest.raises(ValueError, match="delta"):
            tl.ode.integrate(ov, student, teacher, lr=0.5, regime="large_batch", batch_ratio=1.0, n_steps=1)


def _mc_online_rhs(ov: tl.Overlaps, act: str, t_act: str, lr: float, noise: float, n: int, seed: int):
    """dQ, dM of the online ODE by Monte Carlo over (l, l*) ~ N(0, Omega): means and standard errors."""
    K, M = ov.M.shape
    Om = np.block([[ov.Q, ov.M], [ov.M.T, ov.P]])
    w, V = np.linalg.eigh(Om)
    L = np.random.default_rng(seed).standard_normal((n, K + M)) @ (V * np.sqrt(np.clip(w, 0, None))).T
    lam, lst = L[:, :K], L[:, K:]
    err = sigma(t_act, lst) @ ov.v - sigma(act, lam) @ ov.a
    g = derivative(act, lam) * ov.a  # a_i g'(l_i)
    dQ = np.empty((K, K, 2))
    for i, k in itertools.product(range(K), range(K)):
        x = lr * (g[:, i] * lam[:, k] + g[:, k] * lam[:, i]) * err + lr**2 * g[:, i] * g[:, k] * (err**2 + noise)
        dQ[i, k] = x.mean(), x.std() / np.sqrt(n)
    dM = np.empty((K, M, 2))
    for i, r in itertools.product(range(K), range(M)):
        x = lr * g[:, i] * lst[:, r] * err
        dM[i, r] = x.mean(), x.std() / np.sqrt(n)
    return dQ, dM


@pytest.mark.parametrize("teacher", ["erf", "step", "quadratic"])
def test_relu_student_online_rhs_against_monte_carlo(teacher):
    """The online right-hand side with the new I4 entries (relu student, non-relu teacher) against a Monte Carlo
    estimate of E[a_i g'(l_i) l_k E] + ... + lr^2 a_i a_k E[g'g'(E^2 + Delta)]."""
    ov = _random_overlaps(2, 2, seed=8)
    dQ, dM, _ = tl.ode.rhs(ov, "relu", teacher, lr=0.7, noise=0.1, regime="online")
    mQ, mM = _mc_online_rhs(ov, "relu", teacher, 0.7, 0.1, 500_000, seed=3)
    np.testing.assert_array_less(np.abs(dQ - mQ[..., 0]), 5 * mQ[..., 1] + 1e-12)
    np.testing.assert_array_less(np.abs(dM - mM[..., 0]), 5 * mM[..., 1] + 1e-12)
