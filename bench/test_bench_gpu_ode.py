"""GPU benchmarks of the ODE batch (``device="cuda"``; need the CUDA backend and a GPU, skipped otherwise; run by
.ci/gpu-check). Issue 22's configuration: erf committees, online regime, Euler, 1000 steps (dt = 0.01 to t = 10),
101 records, float64, member right-hand sides per second:

* the GPU (``test_gpu_ode``), against the JAX ``vmap`` + ``jit`` batch a user would write (bench/jax_reference.py,
  ``test_jax_ode``) on the same GPU in the same run (goal >= 3x), and the CPU batch path on all cores of the same
  machine (``test_cpu_ode``, goal >= 25x); K = M in {2, 4, 8};
* RK4 and the adaptive method at K = M = 2, GPU against CPU.

Rates count member right-hand sides (B members x steps x evaluations per step); the CPU runs fewer members than
the GPU (its rate does not depend on B once every core is busy).
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl

pytestmark = pytest.mark.gpu  # skipped without the CUDA backend and a GPU (bench/conftest.py)

STEPS, DT = 1000, 0.01
GPU_B = {2: 100_000, 4: 100_000, 8: 10_000}
CPU_B = {2: 20_000, 4: 4_000, 8: 400}
EVALS = {"euler": 1, "rk4": 4}


def batch(K: int, B: int, seed: int = 0, d: int = 100) -> tl.BatchOverlaps:
    teacher = tl.Network.random(K, d, "erf", seed=seed)
    base = [tl.Overlaps.from_networks(tl.Network.random(K, d, "erf", seed=1 + s), teacher) for s in range(16)]
    Q = np.stack([base[b % 16].Q for b in range(B)])
    M = np.stack([base[b % 16].M for b in range(B)])
    return tl.BatchOverlaps(Q=Q, M=M, P=base[0].P, a=np.ones((B, K)), v=base[0].v)


def run(stack: tl.BatchOverlaps, device: str, method: str = "euler") -> tl.BatchTrajectory:
    lr = np.linspace(0.5, 1.5, stack.Q.shape[0])
    return tl.ode.integrate_batch(stack, "erf", lr=lr, method=method, dt=DT, t_max=STEPS * DT, n_records=101,
                                  device=device)


@pytest.mark.benchmark(group="gpu ode euler")
@pytest.mark.parametrize("K,threads", [(2, "auto"), (4, "auto"), (8, "auto"), (8, "128")])
def test_gpu_ode(benchmark, record, monkeypatch, K: int, threads: str) -> None:
    """threads: per block, chosen by the batch's size ("auto": fewer than 128 for small batches) or fixed (the
    launch of before that choice, for comparison)."""
    if threads != "auto":
        monkeypatch.setenv("TWOLAYER_GPU_ODE_THREADS", threads)
    stack = batch(K, GPU_B[K])
    run(stack, "cuda")  # warm-up: kernel modules loaded, device memory touched
    out = benchmark.pedantic(run, args=(stack, "cuda"), rounds=3, iterations=1)
    assert set(out.status) == {"completed"}
    # the device's own time (copies in, kernels; not the rows' way into fresh host memory), for the note
    benchmark.extra_info["device_rate"] = GPU_B[K] * STEPS / out.meta["gpu_seconds"]
    record(benchmark, work=GPU_B[K] * STEPS, unit="RHS", ref=f"test_jax_ode[{K}]")


@pytest.mark.benchmark(group="gpu ode euler")
@pytest.mark.parametrize("K", [2, 4, 8])
def test_cpu_ode(benchmark, record, K: int) -> None:
    stack = batch(K, CPU_B[K])
    out = benchmark.pedantic(run, args=(stack, "cpu"), rounds=3, iterations=1)
    assert set(out.status) == {"completed"}
    record(benchmark, work=CPU_B[K] * STEPS, unit="RHS")


@pytest.mark.benchmark(group="gpu ode euler")
@pytest.mark.parametrize("K", [2, 4, 8])
def test_jax_ode(benchmark, record, K: int) -> None:
    pytest.importorskip("jax")
    from jax_reference import erf_euler_batch

    stack = batch(K, GPU_B[K])
    P, v = stack.P[0], stack.v[0]
    lr = float(np.mean(np.linspace(0.5, 1.5, 3)))

    def call() -> np.ndarray:
        Qs, Ms = erf_euler_batch(stack.Q, stack.M, stack.a, P, v, lr, DT, STEPS, STEPS // 100)
        np.asarray(Ms)
        return np.asarray(Qs)  # the records on the host, as twolayer's

    Qs = call()  # compiles
    check = tl.ode.integrate_batch(tl.BatchOverlaps(Q=stack.Q[:4], M=stack.M[:4], P=P, a=stack.a[:4], v=v), "erf",
                                   lr=lr, method="euler", dt=DT, t_max=STEPS * DT, n_records=101)
    np.testing.assert_allclose(Qs[:4], check.Q, rtol=0, atol=1e-10)
    benchmark.pedantic(call, rounds=3, iterations=1)
    record(benchmark, work=GPU_B[K] * STEPS, unit="RHS")


@pytest.mark.benchmark(group="gpu ode methods")
@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("method", ["rk4", "adaptive"])
def test_ode_methods(benchmark, record, method: str, device: str) -> None:
    B = GPU_B[2] if device == "cuda" else CPU_B[2]
    stack = batch(2, B)
    if device == "cuda":
        run(stack, device, method)
    out = benchmark.pedantic(run, args=(stack, device, method), rounds=3, iterations=1)
    record(benchmark, work=float(np.sum(out.n_rhs)), unit="RHS",
           ref=None if device == "cpu" else f"test_ode_methods[{method}-cpu]")
