"""Benchmarks of the generic Gaussian engine of the smooth activations (run: python -m pytest
bench/test_bench_smooth.py --benchmark-only; conventions in bench/conftest.py). One run shows, side by side:

* the ODE right-hand side at K = M = 2, gradient flow and online, tanh, softplus and gelu against the erf closed form,
  through ``tl.ode.rhs`` (what a user calls; issue 23's goal: within 20x) and as the C++ loop alone
  (``_core.ode_rhs_timing``, no Python in the way); online also with biases, and a whole online run; online at
  K = M = 3 (subsets of the fields) against the sum of the I4 kernels;
* the kernels I2, I3 and I4 per call (certified quadrature, <= 1e-10 relative, in practice ~1e-13) against erf's
  closed forms;
* Monte Carlo at the same covariances with 10^6 samples: its time and its standard error (``extra_info["mc_se"]``).
  The sample count that matches the engine's 1e-12 would be ~10^22 (SE^2 / 1e-24 times more): not run.
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer import _core

ACTS = ["erf", "tanh", "softplus", "gelu"]
MC_SAMPLES = 1_000_000


def _overlaps(K: int, M: int, act: str) -> tl.Overlaps:
    s, t = tl.networks.teacher_student(K=K, M=M, d=50, activation=act, seed=0)
    return tl.Overlaps.from_networks(s, t)


@pytest.mark.benchmark(group="smooth-rhs-gradient-flow")
@pytest.mark.quick
@pytest.mark.parametrize("act", ACTS)
def test_bench_rhs_gradient_flow(benchmark, record, act):
    ov = _overlaps(2, 2, act)
    benchmark(tl.ode.rhs, ov, act, lr=1.0, regime="gradient_flow")
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_gradient_flow[erf]")


@pytest.mark.benchmark(group="smooth-rhs-gradient-flow-core")
@pytest.mark.parametrize("act", ACTS)
def test_bench_rhs_gradient_flow_core(benchmark, record, act):
    """The C++ right-hand side alone (a loop of evals evaluations), without the Python call."""
    ov = _overlaps(2, 2, act)
    evals = 20_000 if act == "erf" else 20
    benchmark.pedantic(_core.ode_rhs_timing, args=(ov.Q, ov.M, ov.a, ov.P, ov.v, act, act, "gradient_flow", 1.0, 0.0,
                                                   evals, 1), rounds=5)
    record(benchmark, work=evals, unit="RHS", ref="test_bench_rhs_gradient_flow_core[erf]")


@pytest.mark.benchmark(group="smooth-rhs-online")
@pytest.mark.quick
@pytest.mark.parametrize("act", ACTS)
def test_bench_rhs_online(benchmark, record, act):
    """K = M = 2: the online term E[g'g' E^2] of smooth units is one nested lattice over the four fields
    (gaussian_error_square.hpp; before: 30 four-dimensional I4 quadratures). Issue 23's goal: within 20x of erf."""
    ov = _overlaps(2, 2, act)
    benchmark.pedantic(tl.ode.rhs, args=(ov, act), kwargs={"lr": 1.0}, rounds=5)
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_online[erf]", target_ratio_to_ref=20.0)


@pytest.mark.benchmark(group="smooth-rhs-online-init")
@pytest.mark.parametrize("act", [*ACTS, "sigmoid"])
def test_bench_rhs_online_init(benchmark, record, act):
    """The same at initial overlaps of d = 1000 (cross overlaps ~0.03: the last field moves by a small fraction of its
    grid step along a line, the case of the free lines; tanh's integrand is even: half the lattice)."""
    s, t = tl.networks.teacher_student(K=2, M=2, d=1000, activation=act, seed=2)
    ov = tl.Overlaps.from_networks(s, t)
    benchmark.pedantic(tl.ode.rhs, args=(ov, act), kwargs={"lr": 1.0}, rounds=5)
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_online_init[erf]", target_ratio_to_ref=20.0)


@pytest.mark.benchmark(group="smooth-rhs-online-bias")
@pytest.mark.parametrize("act", ["erf", "tanh", "softplus"])
def test_bench_rhs_online_bias(benchmark, record, act):
    """The same with biases (means 0.3, -0.2 for the students, 0.1, 0.4 for the teachers): the erf student's I4 with
    means by conditioning, the smooth students' by the one-lattice term with means."""
    ov = _overlaps(2, 2, act)
    ov = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, bias=np.array([0.3, -0.2]), teacher_bias=np.array([0.1, 0.4]))
    benchmark.pedantic(tl.ode.rhs, args=(ov, act), kwargs={"lr": 1.0}, rounds=5)
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_online_bias[erf]")


def _online_term_by_i4(ov: tl.Overlaps, act: str) -> np.ndarray:
    """E[g'(l_i) g'(l_k) E^2] as a user would sum it from the kernels: sum_jl w_j w_l I4 per student pair."""
    K, M = ov.M.shape
    om = np.block([[ov.Q, ov.M], [ov.M.T, ov.P]])
    w = np.concatenate([-ov.a, ov.v])
    out = np.zeros((K, K))
    for i in range(K):
        for k in range(i, K):
            for j in range(K + M):
                for m in range(j, K + M):
                    idx = [i, k, j, m]
                    i4 = float(tl.kernels.i4(act, act, act, om[np.ix_(idx, idx)], n_threads=1))
                    out[i, k] += (1.0 if j == m else 2.0) * w[j] * w[m] * i4
            out[k, i] = out[i, k]
    return out


@pytest.mark.benchmark(group="smooth-rhs-online-wide")
@pytest.mark.parametrize("act", ACTS)
def test_bench_rhs_online_wide(benchmark, record, act):
    """K = M = 3 (six fields): the online term as a Moebius combination of lattices over the subsets of at most four
    fields (gaussian_error_square.hpp; before: the per-I4 sum, seconds per right-hand side)."""
    ov = _overlaps(3, 3, act)
    benchmark.pedantic(tl.ode.rhs, args=(ov, act), kwargs={"lr": 1.0, "n_threads": 1}, rounds=5)
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_online_wide[erf]")


@pytest.mark.benchmark(group="smooth-rhs-online-wide")
def test_bench_rhs_online_wide_i4_sum(benchmark, record):
    """The reference: softplus's online term alone from the certified I4 kernels (what the per-I4 path sums)."""
    ov = _overlaps(3, 3, "softplus")
    got = benchmark.pedantic(_online_term_by_i4, args=(ov, "softplus"), rounds=3)
    d1 = tl.ode.rhs(ov, "softplus", lr=1.0)[0]
    d2 = tl.ode.rhs(ov, "softplus", lr=2.0)[0]
    np.testing.assert_allclose((d2 - 2.0 * d1) / 2.0 / np.outer(ov.a, ov.a), got, rtol=1e-10,
                               atol=1e-10 * np.abs(got).max())
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_online_wide[softplus]")


@pytest.mark.benchmark(group="smooth-integrate-online")
@pytest.mark.parametrize("act", ["erf", "tanh"])
def test_bench_integrate_online(benchmark, record, act):
    """A whole online run, K = M = 2, t_max = 10 (adaptive steps; before the one-lattice term a tanh run took
    minutes)."""
    s, t = tl.networks.teacher_student(K=2, M=2, d=40, activation=act, seed=0)
    ov = tl.Overlaps.from_networks(s, t)
    benchmark.pedantic(tl.ode.integrate, args=(ov, act), kwargs={"lr": 0.5, "t_max": 10.0}, rounds=3)
    record(benchmark, work=1, unit="run", ref="test_bench_integrate_online[erf]")


def _cov(n: int, seed: int) -> np.ndarray:
    A = np.random.default_rng(seed).standard_normal((n, n))
    return A @ A.T / n + 0.1 * np.eye(n)


def _covs(count: int, n: int) -> np.ndarray:
    return np.stack([_cov(n, seed) for seed in range(count)])


@pytest.mark.benchmark(group="smooth-i2")
@pytest.mark.parametrize("act", ACTS)
def test_bench_i2(benchmark, record, act):
    C = _covs(200, 2)
    benchmark(tl.kernels.i2, act, act, C, n_threads=1)
    record(benchmark, work=len(C), unit="cov", ref="test_bench_i2[erf]")


@pytest.mark.benchmark(group="smooth-i3")
@pytest.mark.parametrize("act", ACTS)
def test_bench_i3(benchmark, record, act):
    C = _covs(100, 3)
    benchmark(tl.kernels.i3, act, act, C, n_threads=1)
    record(benchmark, work=len(C), unit="cov", ref="test_bench_i3[erf]")


@pytest.mark.benchmark(group="smooth-i4")
@pytest.mark.parametrize("act", ACTS)
def test_bench_i4(benchmark, record, act):
    C = _covs(2, 4)
    benchmark.pedantic(tl.kernels.i4, args=(act, act, act, C), kwargs={"n_threads": 1}, rounds=3)
    record(benchmark, work=len(C), unit="cov", ref="test_bench_i4[erf]")


def _mc_integrand(kind: str, act: str):
    s, ds = (lambda v: tl.activations.sigma(act, v)), (lambda v: tl.activations.derivative(act, v))
    return {
        "i2": lambda X: s(X[:, 0]) * s(X[:, 1]),
        "i3": lambda X: ds(X[:, 0]) * X[:, 1] * s(X[:, 2]),
        "i4": lambda X: ds(X[:, 0]) * ds(X[:, 1]) * s(X[:, 2]) * s(X[:, 3]),
    }[kind]


@pytest.mark.benchmark(group="smooth-monte-carlo")
@pytest.mark.parametrize("kind", ["i2", "i3", "i4"])
@pytest.mark.parametrize("act", ["tanh", "softplus"])
def test_bench_monte_carlo(benchmark, record, kind, act):
    """10^6 samples for one covariance (the cost per covariance to set beside the engine's); the standard error
    and the engine's deviation from the mean land in extra_info."""
    n = {"i2": 2, "i3": 3, "i4": 4}[kind]
    C = _cov(n, 0)
    L = np.linalg.cholesky(C)
    rng = np.random.default_rng(1)
    f = _mc_integrand(kind, act)

    def mc():
        v = f(rng.standard_normal((MC_SAMPLES, n)) @ L.T)
        return float(np.mean(v)), float(np.std(v) / np.sqrt(MC_SAMPLES))

    mean, se = benchmark.pedantic(mc, rounds=3)
    kernel = getattr(tl.kernels, kind)
    value = float(kernel(*([act] * (n - 1 if kind != "i2" else 2)), C))
    assert abs(value - mean) < 6 * se  # the engine within Monte Carlo's error (not a timing)
    record(benchmark, work=1, unit="cov", ref=f"test_bench_{kind}[{act}]", mc_se=se, engine_minus_mc=value - mean)
