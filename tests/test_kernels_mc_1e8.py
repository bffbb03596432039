"""The kernels of the smooth activations against 10^8-sample Monte Carlo (issue 23, "How it is checked").

One set of 10^8 draws per dimension (antithetic pairs, Philox, in chunks of 10^6 so the memory stays ~100 MB) serves
every kernel of that dimension: I2 = E[a(l1) b(l2)], I3 = E[s'(l1) l2 b(l3)], J2 = E[s'(l1) s'(l2)] and
I4 = E[s'(l1) s'(l2) a(l3) b(l4)] over l ~ N(mu, C), with and without means. The standard error of a 10^8-sample
mean is ~1e-4 of the integrand's spread, so this check catches errors far above the engine's certificate (1e-10,
checked against mpmath and nested quadrature in tests/test_activations_smooth.py and tests/test_kernels_mean.py);
what it adds is an independent check of the definitions (which factor is differentiated, which mean enters where)
at a sample size no unit test can afford. Tolerance: 5 standard errors per value (about 60 values: a false alarm has
probability ~4e-5; an absolute 1e-12 floor for an integrand that the antithetic pairs cancel exactly).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import twolayer as tl

SAMPLES = 100_000_000
CHUNK = 1_000_000

S = tl.activations.sigma
D = tl.activations.derivative


def _covariance(n: int, seed: int) -> np.ndarray:
    A = np.random.default_rng(seed).standard_normal((n, n))
    C = A @ A.T / n + 0.2 * np.eye(n)
    return C


def _mc(n: int, C: np.ndarray, mu: np.ndarray, integrands: list[Callable[[np.ndarray], np.ndarray]],
        seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Means and standard errors of every integrand over the same 10^8 draws of N(mu, C)."""
    L = np.linalg.cholesky(C)
    rng = np.random.Generator(np.random.Philox(seed))
    total = np.zeros(len(integrands))
    total2 = np.zeros(len(integrands))
    for _ in range(SAMPLES // (2 * CHUNK)):
        Z = rng.standard_normal((CHUNK, n)) @ L.T
        X, Y = mu + Z, mu - Z  # antithetic: each pair's mean is one sample of the estimator
        for j, f in enumerate(integrands):
            v = 0.5 * (f(X) + f(Y))
            total[j] += v.sum()
            total2[j] += (v * v).sum()
    count = SAMPLES // 2
    mean = total / count
    var = total2 / count - mean**2
    return mean, np.sqrt(np.maximum(var, 0.0) / count)


PAIRS = [("tanh", "softplus"), ("sigmoid", "gelu"), ("silu", "sin"), ("gelu", "cos"), ("softplus", "erf")]


@pytest.mark.slow
@pytest.mark.parametrize("with_mean", [False, True])
def test_two_point_kernels_against_1e8_samples(with_mean: bool) -> None:
    C = _covariance(2, 3)
    mu = np.array([0.4, -0.7]) if with_mean else np.zeros(2)
    integrands, engine = [], []
    for a, b in PAIRS:
        integrands.append(lambda X, a=a, b=b: S(a, X[:, 0]) * S(b, X[:, 1]))
        engine.append(tl.kernels.i2(a, b, C, mean=mu))
        integrands.append(lambda X, a=a: D(a, X[:, 0]) * D(a, X[:, 1]))
        engine.append(tl.kernels.j2(a, C, mean=mu))
    mean, se = _mc(2, C, mu, integrands, seed=11 + with_mean)
    np.testing.assert_array_less(np.abs(np.array(engine) - mean), 5 * se + 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("with_mean", [False, True])
def test_three_point_kernels_against_1e8_samples(with_mean: bool) -> None:
    C = _covariance(3, 4)
    # the ODE's I3 has a centred middle field: mu2 = 0 (the kernel takes any mean; the MC uses the same one)
    mu = np.array([0.5, 0.0, -0.3]) if with_mean else np.zeros(3)
    integrands, engine = [], []
    for s, b in PAIRS:
        integrands.append(lambda X, s=s, b=b: D(s, X[:, 0]) * X[:, 1] * S(b, X[:, 2]))
        engine.append(tl.kernels.i3(s, b, C, mean=mu))
    mean, se = _mc(3, C, mu, integrands, seed=21 + with_mean)
    np.testing.assert_array_less(np.abs(np.array(engine) - mean), 5 * se + 1e-12)


FOUR = [("tanh", "tanh", "softplus"), ("softplus", "erf", "gelu"), ("gelu", "sigmoid", "silu"), ("sin", "tanh", "sin")]


@pytest.mark.slow
@pytest.mark.parametrize("with_mean", [False, True])
def test_four_point_kernels_against_1e8_samples(with_mean: bool) -> None:
    C = _covariance(4, 5)
    mu = np.array([0.3, -0.5, 0.6, -0.2]) if with_mean else np.zeros(4)
    integrands, engine = [], []
    for s, a, b in FOUR:
        integrands.append(lambda X, s=s, a=a, b=b: D(s, X[:, 0]) * D(s, X[:, 1]) * S(a, X[:, 2]) * S(b, X[:, 3]))
        engine.append(tl.kernels.i4(s, a, b, C, mean=mu))
    mean, se = _mc(4, C, mu, integrands, seed=31 + with_mean)
    np.testing.assert_array_less(np.abs(np.array(engine) - mean), 5 * se + 1e-12)
