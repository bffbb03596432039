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


def _gpu_missing() -> str | None:
    info = tl.build_info()
    if not info["cuda"]:
        return "twolayer was built without the CUDA backend"
    return None if info.get("cuda_device") else f"no CUDA device: {info.get('cuda_error')}"


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpu_missing() is not None, reason=str(_gpu_missing()))]
GROUP = "erf I4, 1e7 covariances, GPU"


@pytest.fixture(scope="module")
def covariances() -> np.ndarray:
    A = np.random.default_rng(0).standard_normal((N, 4, 5))
    return A @ np.swapaxes(A, -1, -2) / 5


@pytest.fixture(scope="module")
def jax_erf_i4() -> Any:
    """The formula of references.erf_i4_numpy (DESIGN.md section 4) as one jitted, vmapped float64 function."""
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def one(C: Any) -> Any:
        c = lambda i, j: C[i - 1, j - 1]  # noqa: E731
        lam4 = (1 + c(1, 1)) * (1 + c(2, 2)) - c(1, 2) ** 2
        lam0 = (lam4 * c(3, 4) - c(2, 3) * c(2, 4) * (1 + c(1, 1)) - c(1, 3) * c(1, 4) * (1 + c(2, 2))
                + c(1, 2) * c(1, 3) * c(2, 4) + c(1, 2) * c(1, 4) * c(2, 3))
        lam1 = (lam4 * (1 + c(3, 3)) - c(2, 3) ** 2 * (1 + c(1, 1)) - c(1, 3) ** 2 * (1 + c(2, 2))
                + 2 * c(1, 2) * c(1, 3) * c(2, 3))
        lam2 = (lam4 * (1 + c(4, 4)) - c(2, 4) ** 2 * (1 + c(1, 1)) - c(1, 4) ** 2 * (1 + c(2, 2))
                + 2 * c(1, 2) * c(1, 4) * c(2, 4))
        return 4 / jnp.pi**2 / jnp.sqrt(lam4) * jnp.arcsin(lam0 / jnp.sqrt(lam1 * lam2))

    if jax.default_backend() != "gpu":
        pytest.skip(f"jax runs on {jax.default_backend()}, not the GPU")
    return jax, jax.jit(jax.vmap(one))


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
