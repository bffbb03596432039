"""erf kernels with means (biases) in closed form against the conditioning engine they replaced
(``_core.pair_moment(quadrature=True)``, adaptive Gauss-Legendre), on the same covariances and means; and the
online ODE with biases, erf K = M = 2, as a batch of members (the right-hand side that now runs on them)."""

import numpy as np
import pytest
import twolayer as tl
from twolayer import _core

N_CLOSED, N_QUAD = 20_000, 200


@pytest.fixture(scope="module")
def pairs():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((N_CLOSED, 2, 2))
    return rng.standard_normal((N_CLOSED, 2)), A @ np.swapaxes(A, -1, -2) / 2


@pytest.mark.parametrize("order", [(0, 0), (1, 1)], ids=["00", "11"])
@pytest.mark.benchmark(group="erf pair moment with means")
def test_erf_pair_moment_quadrature(benchmark, record, pairs, order):
    mu, C = pairs[0][:N_QUAD], pairs[1][:N_QUAD]
    benchmark.pedantic(_core.pair_moment, ("erf", order[0], "erf", order[1], mu, C), {"quadrature": True}, rounds=5)
    record(benchmark, work=N_QUAD, unit="cov")


@pytest.mark.quick
@pytest.mark.parametrize("order", [(0, 0), (1, 1)], ids=["00", "11"])
@pytest.mark.benchmark(group="erf pair moment with means")
def test_erf_pair_moment_closed_form(benchmark, record, pairs, order):
    mu, C = pairs
    out = benchmark(_core.pair_moment, "erf", order[0], "erf", order[1], mu, C)
    record(benchmark, work=N_CLOSED, unit="cov", ref=f"test_erf_pair_moment_quadrature[{order[0]}{order[1]}]")
    quad = _core.pair_moment("erf", order[0], "erf", order[1], mu[:N_QUAD], C[:N_QUAD], quadrature=True)
    np.testing.assert_allclose(out[:N_QUAD], quad, rtol=0, atol=1e-13)


@pytest.mark.quick
@pytest.mark.benchmark(group="erf online ODE with biases, K = M = 2")
def test_erf_batch_with_biases(benchmark, record):
    rng = np.random.default_rng(1)
    ovs = []
    for _ in range(100):
        W, Wt = rng.standard_normal((2, 50)), rng.standard_normal((2, 50))
        ovs.append(tl.Overlaps(W @ W.T / 50, W @ Wt.T / 50, Wt @ Wt.T / 50, rng.uniform(0.5, 1.0, 2), np.ones(2),
                               activation="erf", teacher_activation="erf", bias=0.5 * rng.standard_normal(2),
                               teacher_bias=0.5 * rng.standard_normal(2)))
    out = benchmark.pedantic(tl.ode.integrate_batch, (ovs,), {"lr": 0.5, "lr_bias": 0.5, "t_max": 10.0,
                                                             "n_records": 11}, rounds=3)
    assert np.all(out.status == "completed")
    record(benchmark, work=int(np.sum(out.n_rhs)), unit="RHS")
