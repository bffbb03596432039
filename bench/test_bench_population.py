"""Population gradient for ReLU (lambda = w.x, unit second layers) at K = M = d = 100: twolayer against a
vectorised NumPy implementation of the closed form g(u, v) of DESIGN.md section 4; and the Hessian."""

import sys
from pathlib import Path

import numpy as np
import pytest
import twolayer as tl
from references import relu_gradient_numpy

K = 100


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(1)
    W, V = rng.standard_normal((K, K)), rng.standard_normal((K, K))
    return W, V, tl.Network(W, None, "relu", "none"), tl.Network(V, None, "relu", "none")


@pytest.mark.quick
@pytest.mark.benchmark(group="relu population gradient, K = M = d = 100")
def test_gradient_numpy(benchmark, problem, record):
    W, V, student, teacher = problem
    g = benchmark(relu_gradient_numpy, W, V)
    record(benchmark, unit="gradient")
    assert np.allclose(g, tl.population.gradient(student, teacher, train_readout=False)[0], atol=1e-11)


@pytest.mark.quick
@pytest.mark.benchmark(group="relu population gradient, K = M = d = 100")
def test_gradient_twolayer_1_thread(benchmark, problem, record):
    _, _, student, teacher = problem
    benchmark(tl.population.gradient, student, teacher, train_readout=False, n_threads=1)
    record(benchmark, unit="gradient", ref="test_gradient_numpy")


@pytest.mark.benchmark(group="relu population gradient, K = M = d = 100")
def test_gradient_twolayer_all_threads(benchmark, problem, record):
    _, _, student, teacher = problem
    benchmark(tl.population.gradient, student, teacher, train_readout=False)
    record(benchmark, unit="gradient", ref="test_gradient_numpy")


@pytest.mark.benchmark(group="relu population Hessian")
@pytest.mark.parametrize("k", [20, 50])
def test_hessian_twolayer(benchmark, k, record):
    net = tl.Network(np.random.default_rng(k).standard_normal((k, k)), None, "relu", "none")
    teacher = tl.Network(np.eye(k), None, "relu", "none")
    benchmark(tl.population.hessian, net, teacher)
    record(benchmark, unit="Hessian")


# With biases (issue 23): the core's gradient with means (population_gradient_mean) against the former Python path
# (Stein's lemma in NumPy over the core's pair-moment batches, tests/population_bias_reference.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import population_bias_reference as bias_ref  # noqa: E402


@pytest.fixture(scope="module", params=["relu", "tanh"])
def biased(request):
    s, t = tl.networks.teacher_student(4, 4, 100, request.param, seed=0)
    rng = np.random.default_rng(2)
    return s.with_weights(s.W, bias=rng.normal(size=4)), t.with_weights(t.W, bias=rng.normal(size=4))


@pytest.mark.quick
@pytest.mark.benchmark(group="population gradient with biases, K = M = 4, d = 100")
def test_bias_gradient_python(benchmark, biased, record):
    s, t = biased
    g = benchmark(bias_ref.gradient, s, t)
    record(benchmark, unit="gradient")
    for x, y in zip(g, tl.population.gradient(s, t, train_bias=True), strict=True):
        assert np.allclose(x, y, rtol=1e-12, atol=1e-14)


@pytest.mark.quick
@pytest.mark.benchmark(group="population gradient with biases, K = M = 4, d = 100")
def test_bias_gradient_twolayer_1_thread(benchmark, biased, record):
    s, t = biased
    benchmark(tl.population.gradient, s, t, train_bias=True, n_threads=1)
    record(benchmark, unit="gradient", ref="test_bias_gradient_python")
