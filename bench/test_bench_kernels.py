"""Batched erf I4 over 10^6 covariances: twolayer (1 thread and the OpenMP default) against the vectorised NumPy
formula of DESIGN.md section 4."""

import numpy as np
import pytest
import twolayer as tl
from references import erf_i4_numpy

N = 1_000_000


@pytest.fixture(scope="module")
def covariances():
    A = np.random.default_rng(0).standard_normal((N, 4, 4))
    return A @ np.swapaxes(A, -1, -2) / 4


@pytest.mark.quick
@pytest.mark.benchmark(group="erf I4, 1e6 covariances")
def test_erf_i4_numpy(benchmark, covariances, record):
    benchmark(erf_i4_numpy, covariances)
    record(benchmark, work=N, unit="cov")


@pytest.mark.quick
@pytest.mark.benchmark(group="erf I4, 1e6 covariances")
def test_erf_i4_twolayer_1_thread(benchmark, covariances, record):
    out = benchmark(tl.kernels.i4, "erf", "erf", "erf", covariances, n_threads=1)
    record(benchmark, work=N, unit="cov", ref="test_erf_i4_numpy")
    assert np.allclose(out[:1000], erf_i4_numpy(covariances[:1000]), rtol=1e-12)


@pytest.mark.benchmark(group="erf I4, 1e6 covariances")
def test_erf_i4_twolayer_all_threads(benchmark, covariances, record):
    benchmark(tl.kernels.i4, "erf", "erf", "erf", covariances)
    record(benchmark, work=N, unit="cov", ref="test_erf_i4_numpy")


@pytest.mark.benchmark(group="relu I4, 2e4 covariances")
def test_relu_i4_twolayer_1_thread(benchmark, covariances, record):
    benchmark(tl.kernels.i4, "relu", "relu", "relu", covariances[:20_000], n_threads=1)  # ~4e4 cov/s
    record(benchmark, work=20_000, unit="cov")
