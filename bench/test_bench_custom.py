"""Benchmarks of user-function activations, ``tl.activations.custom`` (run: python -m pytest
bench/test_bench_custom.py --benchmark-only; conventions in bench/conftest.py). One run shows, side by side:

* registration: tabulating ``np.tanh`` (derivatives by Cauchy's formula on complex arguments) and tanh given with its
  four derivatives (piecewise Chebyshev series of degree 32 on [-30, 30], _custom.py);
* the kernels I2, I3 and I4 of the custom tanh against the built-in ``"tanh"`` (same certified quadrature, the
  activation read from the tables instead of closed-form code) and against NumPy Monte Carlo at equal accuracy;
* ``tl.ode.rhs`` at K = M = 2, online and gradient flow: custom tanh against built-in tanh and the erf closed form;
  online also with trained biases (student and teacher biases nonzero, ``lr_bias > 0``) and at the initial overlaps
  of d = 1000 (issue 23's 20x goal is stated against erf in the same run).

Monte Carlo at equal accuracy: the engine's kernels are certified to 1e-10 relative; a Monte Carlo standard error
of even 1e-6 needs 2-7 x 10^10 samples per covariance here (``mc_samples_at_target``), so each Monte Carlo
benchmark runs ``MC_SAMPLES`` samples, measures the standard error ``mc_se`` of that run and scales its time to the
samples that reach ``MC_TARGET_SE``: the work of one timed call is MC_SAMPLES / samples needed, in covariances at
that error (Monte Carlo's cost is linear in the samples). ``extra_info`` also holds the engine's deviation from the
mean (``engine_minus_mc``).
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl

MC_SAMPLES = 4_000_000
MC_CHUNK = 1_000_000  # samples drawn at once (memory)
MC_TARGET_SE = 1e-6  # far above the engine's certified 1e-10 relative: Monte Carlo's most favourable comparison


def _tanh_derivatives() -> list:
    """sigma', ..., sigma'''' of tanh as polynomials in t = tanh(s)."""
    return [
        lambda s: 1.0 - np.tanh(s) ** 2,
        lambda s: -2.0 * np.tanh(s) * (1.0 - np.tanh(s) ** 2),
        lambda s: -2.0 * (1.0 - np.tanh(s) ** 2) * (1.0 - 3.0 * np.tanh(s) ** 2),
        lambda s: 8.0 * np.tanh(s) * (1.0 - np.tanh(s) ** 2) * (2.0 - 3.0 * np.tanh(s) ** 2),
    ]


CUSTOM = tl.activations.custom("bench_tanh", np.tanh)
TANHS = {"custom": CUSTOM, "builtin": "tanh"}


@pytest.mark.benchmark(group="custom-register")
@pytest.mark.quick
@pytest.mark.parametrize("given", ["function", "derivatives"])
def test_bench_register(benchmark, record, given):
    """One registration (registering a name again with the same function tabulates again and checks the table)."""
    derivatives = _tanh_derivatives() if given == "derivatives" else None
    act = benchmark.pedantic(tl.activations.custom, args=(f"bench_register_{given}", np.tanh, derivatives),
                             rounds=3)
    C = np.array([[1.0, 0.5], [0.5, 1.0]])
    assert abs(float(tl.kernels.i2(act, act, C)) - float(tl.kernels.i2("tanh", "tanh", C))) < 1e-10
    record(benchmark, work=1, unit="registration", ref="test_bench_register[function]")


def _cov(n: int, seed: int) -> np.ndarray:
    A = np.random.default_rng(seed).standard_normal((n, n))
    return A @ A.T / n + 0.1 * np.eye(n)


def _covs(count: int, n: int) -> np.ndarray:
    return np.stack([_cov(n, seed) for seed in range(count)])


def _kernel(kind: str, act: str, C: np.ndarray, **kwargs) -> np.ndarray:
    """I2(act, act), I3(act, act) or I4(act, act, act) at the covariances C (2x2, 3x3, 4x4), as tl.kernels takes
    them."""
    n_acts = {"i2": 2, "i3": 2, "i4": 3}[kind]
    return getattr(tl.kernels, kind)(*([act] * n_acts), C, **kwargs)


KERNEL_COVS = {"i2": 200, "i3": 100, "i4": 2}


@pytest.mark.benchmark(group="custom-kernels")
@pytest.mark.quick
@pytest.mark.parametrize("which", ["custom", "builtin"])
@pytest.mark.parametrize("kind", ["i2", "i3", "i4"])
def test_bench_kernel(benchmark, record, kind, which):
    """Per covariance, single-threaded; the custom tables agree with the built-in tanh to the certified accuracy."""
    n = {"i2": 2, "i3": 3, "i4": 4}[kind]
    C = _covs(KERNEL_COVS[kind], n)
    value = benchmark.pedantic(_kernel, args=(kind, TANHS[which], C), kwargs={"n_threads": 1}, rounds=3)
    if which == "custom":
        np.testing.assert_allclose(value, _kernel(kind, "tanh", C), rtol=1e-9, atol=1e-12)
    record(benchmark, work=len(C), unit="cov", ref=f"test_bench_kernel[{kind}-builtin]")


def _mc_integrand(kind: str):
    """What a user writes for I2, I3, I4 of tanh (E[s s], E[s' x s], E[s' s' s s])."""
    s = np.tanh

    def ds(v):
        return 1.0 - np.tanh(v) ** 2

    return {
        "i2": lambda X: s(X[:, 0]) * s(X[:, 1]),
        "i3": lambda X: ds(X[:, 0]) * X[:, 1] * s(X[:, 2]),
        "i4": lambda X: ds(X[:, 0]) * ds(X[:, 1]) * s(X[:, 2]) * s(X[:, 3]),
    }[kind]


@pytest.mark.benchmark(group="custom-kernels")
@pytest.mark.quick
@pytest.mark.parametrize("kind", ["i2", "i3", "i4"])
def test_bench_kernel_monte_carlo(benchmark, record, kind):
    """MC_SAMPLES samples at one covariance, timed; the time is scaled to the samples for a standard error of
    MC_TARGET_SE (module docstring). The custom engine's value lies within 6 standard errors of the mean (a
    correctness check, not a timing)."""
    n = {"i2": 2, "i3": 3, "i4": 4}[kind]
    C = _cov(n, 0)
    L = np.linalg.cholesky(C)
    rng = np.random.default_rng(1)
    f = _mc_integrand(kind)

    def mc():
        v = np.concatenate([f(rng.standard_normal((MC_CHUNK, n)) @ L.T) for _ in range(MC_SAMPLES // MC_CHUNK)])
        return float(np.mean(v)), float(np.std(v) / np.sqrt(len(v)))

    mean, se = benchmark.pedantic(mc, rounds=3)
    value = float(_kernel(kind, CUSTOM, C))
    assert abs(value - mean) < 6 * se  # the engine within Monte Carlo's error
    needed = MC_SAMPLES * (se / MC_TARGET_SE) ** 2
    record(benchmark, work=MC_SAMPLES / needed, unit="cov", ref=f"test_bench_kernel[{kind}-custom]",
           mc_se=se, mc_samples=MC_SAMPLES, mc_target_se=MC_TARGET_SE, mc_samples_at_target=needed,
           engine_minus_mc=value - mean)


RHS_ACTS = {"custom": CUSTOM, "builtin": "tanh", "erf": "erf"}


def _overlaps() -> tl.Overlaps:
    """K = M = 2 at d = 50: the same state for every activation (the work differs only by the activation)."""
    s, t = tl.networks.teacher_student(K=2, M=2, d=50, activation="tanh", seed=0)
    return tl.Overlaps.from_networks(s, t)


@pytest.mark.benchmark(group="custom-rhs-gradient-flow")
@pytest.mark.quick
@pytest.mark.parametrize("which", list(RHS_ACTS))
def test_bench_rhs_gradient_flow(benchmark, record, which):
    ov = _overlaps()
    rhs = benchmark.pedantic(tl.ode.rhs, args=(ov, RHS_ACTS[which]), kwargs={"lr": 1.0, "regime": "gradient_flow"},
                             rounds=5)
    if which == "custom":
        _assert_rhs_close(rhs, tl.ode.rhs(ov, "tanh", lr=1.0, regime="gradient_flow"))
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_gradient_flow[builtin]")


@pytest.mark.benchmark(group="custom-rhs-online")
@pytest.mark.quick
@pytest.mark.parametrize("which", list(RHS_ACTS))
def test_bench_rhs_online(benchmark, record, which):
    """Issue 23's goal for the generic path: within 20x of erf (``target_ratio_to_erf``; reported, not asserted)."""
    ov = _overlaps()
    rhs = benchmark.pedantic(tl.ode.rhs, args=(ov, RHS_ACTS[which]), kwargs={"lr": 1.0}, rounds=5)
    if which == "custom":
        _assert_rhs_close(rhs, tl.ode.rhs(ov, "tanh", lr=1.0))
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_online[builtin]", target_ratio_to_erf=20.0)


def _biased(ov: tl.Overlaps) -> tl.Overlaps:
    """The same state with student biases (0.3, -0.2) and teacher biases (0.1, 0.4)."""
    return tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, bias=np.array([0.3, -0.2]), teacher_bias=np.array([0.1, 0.4]))


@pytest.mark.benchmark(group="custom-rhs-online-bias")
@pytest.mark.parametrize("which", list(RHS_ACTS))
def test_bench_rhs_online_bias(benchmark, record, which):
    """Online with trained biases (lr_bias = 0.5): the smooth students' E[g'g' E^2] by the one lattice with means
    (gaussian_error_square.hpp), erf's I4 with means by conditioning."""
    ov = _biased(_overlaps())
    kw = {"lr": 1.0, "lr_bias": 0.5}
    rhs = benchmark.pedantic(tl.ode.rhs, args=(ov, RHS_ACTS[which]), kwargs=kw, rounds=5)
    if which == "custom":
        _assert_rhs_close(rhs, tl.ode.rhs(ov, "tanh", **kw))
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_online_bias[erf]", target_ratio_to_ref=20.0)


@pytest.mark.benchmark(group="custom-rhs-online-init")
@pytest.mark.parametrize("which", list(RHS_ACTS))
def test_bench_rhs_online_init(benchmark, record, which):
    """Online without biases at the initial overlaps of d = 1000 (cross overlaps ~0.03)."""
    s, t = tl.networks.teacher_student(K=2, M=2, d=1000, activation="tanh", seed=2)
    ov = tl.Overlaps.from_networks(s, t)
    rhs = benchmark.pedantic(tl.ode.rhs, args=(ov, RHS_ACTS[which]), kwargs={"lr": 1.0}, rounds=5)
    if which == "custom":
        _assert_rhs_close(rhs, tl.ode.rhs(ov, "tanh", lr=1.0))
    record(benchmark, work=1, unit="RHS", ref="test_bench_rhs_online_init[erf]", target_ratio_to_ref=20.0)


def _assert_rhs_close(got, want) -> None:
    """The custom tanh's right-hand side equals the built-in's to the engine's accuracy."""
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12 * max(1.0, float(np.abs(w).max())))
