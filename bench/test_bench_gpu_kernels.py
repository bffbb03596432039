"""erf I4 on 10^7 covariances: twolayer's device="cuda" against its CPU batch (all cores) and the same closed form
in JAX (vmap + jit, float64) on the same GPU, in one run. Every call starts and ends with NumPy arrays in host memory
(the 1.28 GB of matrices cross the bus each time); the JAX call with the matrices already on the device is there
too, for the kernel alone. Skipped without the CUDA backend and a GPU (JAX's part without jax)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import twolayer as tl
from references import erf_i4_numpy

N = 10_000_000


pytestmark = pytest.mark.gpu  # skipped without the CUDA backend and a GPU (bench/conftest.py)
GROUP = "erf I4, 1e7 covariances, GPU"


@pytest.fixture(scope="module")
def covariances() -> np.ndarray:
    A = np.random.default_rng(0).standard_normal((N, 4, 5))
    return A @ np.swapaxes(A, -1, -2) / 5


@pytest.fixture(scope="module")
def jax_erf_i4() -> Any:
    """references.erf_i4_numpy's formula (DESIGN.md section 4) on jax.numpy arrays, jitted, in float64."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    if jax.default_backend() != "gpu":
        pytest.skip(f"jax runs on {jax.default_backend()}, not the GPU")
    return jax, jax.jit(lambda C: erf_i4_numpy(C, jnp))


@pytest.mark.quick
@pytest.mark.benchmark(group=GROUP)
def test_gpu_erf_i4_cpu_all_cores(benchmark: Any, covariances: np.ndarray, record: Any) -> None:
    out = benchmark.pedantic(tl.kernels.i4, args=("erf", "erf", "erf", covariances), rounds=3, warmup_rounds=1)
    record(benchmark, work=N, unit="cov")
    np.testing.assert_allclose(out[:1000], erf_i4_numpy(covariances[:1000]), rtol=1e-12)


@pytest.mark.quick
@pytest.mark.benchmark(group=GROUP)
def test_gpu_erf_i4_cuda(benchmark: Any, covariances: np.ndarray, record: Any) -> None:
    out = benchmark.pedantic(tl.kernels.i4, args=("erf", "erf", "erf", covariances), kwargs={"device": "cuda"},
                             rounds=3, warmup_rounds=1)
    record(benchmark, work=N, unit="cov", ref="test_gpu_erf_i4_cpu_all_cores")
    cpu = tl.kernels.i4("erf", "erf", "erf", covariances[:100_000])
    np.testing.assert_allclose(out[:100_000], cpu, rtol=1e-11, atol=1e-15)  # tests/test_gpu_kernels.py: tolerance


@pytest.mark.benchmark(group=GROUP)
def test_gpu_erf_i4_jax_host_arrays(benchmark: Any, covariances: np.ndarray, jax_erf_i4: Any, record: Any) -> None:
    jax, f = jax_erf_i4

    def call() -> np.ndarray:
        return np.asarray(f(jax.device_put(covariances)))

    out = benchmark.pedantic(call, rounds=3, warmup_rounds=1)
    record(benchmark, work=N, unit="cov", ref="test_gpu_erf_i4_cpu_all_cores")
    np.testing.assert_allclose(out[:1000], erf_i4_numpy(covariances[:1000]), rtol=1e-11)


@pytest.mark.benchmark(group=GROUP)
def test_gpu_erf_i4_jax_on_device(benchmark: Any, covariances: np.ndarray, jax_erf_i4: Any, record: Any) -> None:
    jax, f = jax_erf_i4
    C = jax.device_put(covariances)

    def call() -> Any:
        return f(C).block_until_ready()

    benchmark.pedantic(call, rounds=3, warmup_rounds=1)
    record(benchmark, work=N, unit="cov", ref="test_gpu_erf_i4_cpu_all_cores")
