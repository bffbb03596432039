"""Population gradient for ReLU (lambda = w.x, unit second layers) at K = M = d = 100: twolayer against a
vectorised NumPy implementation of the closed form g(u, v) of DESIGN.md section 4; and the Hessian."""

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
