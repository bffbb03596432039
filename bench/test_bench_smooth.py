"""Benchmarks of the generic Gaussian engine of the smooth activations (run: python -m pytest
bench/test_bench_smooth.py --benchmark-only; conventions in bench/conftest.py).

* the ODE right-hand side at K = M = 2 (gradient flow, and online for one pair of units) with tanh against the erf
  closed form (issue 23's goal: within 20x for the right-hand side);
* I2 over 1000 covariances, tanh (certified quadrature, ~1e-12) against erf (closed form) and against Monte Carlo
  at 1e-4 accuracy (the sample count that accuracy needs at the same covariance, 10^6 draws per covariance: the
  engine's 1e-12 would need ~1e22).
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl


def _overlaps(K: int, M: int, act: str) -> tl.Overlaps:
    s, t = tl.networks.teacher_student(K=K, M=M, d=50, activation=act, seed=0)
    return tl.Overlaps.from_networks(s, t)


@pytest.mark.benchmark(group="smooth-rhs-gradient-flow")
@pytest.mark.quick
@pytest.mark.parametrize("act", ["erf", "tanh", "softplus"])
def test_bench_rhs_gradient_flow(benchmark, record, act):
    ov = _overlaps(2, 2, act)
    benchmark(tl.ode.rhs, ov, act, lr=1.0, regime="gradient_flow")
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_gradient_flow[erf]")


@pytest.mark.benchmark(group="smooth-rhs-online")
@pytest.mark.parametrize("act", ["erf", "tanh"])
def test_bench_rhs_online(benchmark, record, act):
    ov = _overlaps(1, 1, act)
    benchmark.pedantic(tl.ode.rhs, args=(ov, act), kwargs={"lr": 1.0}, rounds=5)
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_online[erf]")


def _covs(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, 2, 2))
    return A @ A.transpose(0, 2, 1) / 2 + 0.1 * np.eye(2)


@pytest.mark.benchmark(group="smooth-i2")
@pytest.mark.parametrize("act", ["erf", "tanh"])
def test_bench_i2(benchmark, record, act):
    C = _covs(1000)
    benchmark(tl.kernels.i2, act, act, C, n_threads=1)
    record(benchmark, work=len(C), unit="cov", ref="test_bench_i2[erf]")


@pytest.mark.benchmark(group="smooth-i2")
def test_bench_i2_monte_carlo(benchmark, record):
    """Monte Carlo at 1e-4 (10^6 draws) for one covariance: the cost per covariance to compare with the engine's."""
    C = _covs(1)[0]
    L = np.linalg.cholesky(C)
    rng = np.random.default_rng(1)

    def mc():
        X = rng.standard_normal((1_000_000, 2)) @ L.T
        return float(np.mean(np.tanh(X[:, 0]) * np.tanh(X[:, 1])))

    value = benchmark.pedantic(mc, rounds=5)
    assert abs(value - tl.kernels.i2("tanh", "tanh", C)) < 5e-3
    record(benchmark, work=1, unit="cov", ref="test_bench_i2[tanh]")
