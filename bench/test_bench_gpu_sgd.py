"""SGD grid on the GPU: ``tl.sgd.simulate(device="cuda")`` against the CPU path on all cores, same grid, same run.

Run with ``python -m pytest bench/test_bench_gpu_sgd.py --benchmark-only`` (needs the CUDA backend and a GPU; the
``gpu`` marker; .ci/gpu-check runs it). The grid: 20 learning rates x 5 noise levels x 10 seeds = 10^3 runs of
online SGD at d = 1000, K = M = 2 erf, 3000 steps each (t = 3), 4 records. Rate in SGD steps per second (all runs);
the speed-up is the GPU's rate over the CPU's (OpenMP across runs on every core). The GPU's rows are checked against
the CPU's (reassociation of the sums over d only).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pytest
import twolayer as tl

pytestmark = pytest.mark.gpu  # skipped without the CUDA backend and a GPU (bench/conftest.py)

D, K = 1000, 2
T_MAX = 3.0
GROUP = "SGD grid, 10^3 runs, d = 1000, K = M = 2 erf, 3000 steps: GPU vs CPU (all cores)"
GRID = tl.sgd.grid(seeds=10, lr=np.linspace(0.1, 1.0, 20), noise=np.linspace(0.0, 0.4, 5))
STEPS = int(T_MAX * D) * len(GRID["seeds"])
_results: dict[str, tl.sgd.Ensemble] = {}


def _run(device: Literal["cpu", "cuda"]) -> tl.sgd.Ensemble:
    st, te = tl.networks.teacher_student(K, K, D, "erf", seed=1)
    return tl.sgd.simulate(st, te, t_max=T_MAX, n_records=4, seed=0, keep_weights=False, device=device,
                           seeds=GRID["seeds"], lr=GRID["lr"], noise=GRID["noise"])


@pytest.mark.quick
@pytest.mark.benchmark(group=GROUP)
def test_sgd_grid_cpu_all_cores(benchmark, record):
    _results["cpu"] = benchmark.pedantic(_run, args=("cpu",), rounds=3, iterations=1)
    record(benchmark, work=STEPS, unit="step")


@pytest.mark.quick
@pytest.mark.benchmark(group=GROUP)
def test_sgd_grid_gpu(benchmark, record):
    on_gpu = benchmark.pedantic(_run, args=("cuda",), rounds=5, iterations=1, warmup_rounds=1)
    record(benchmark, work=STEPS, unit="step", ref="test_sgd_grid_cpu_all_cores")
    on_cpu = _results.get("cpu") or _run("cpu")
    assert on_gpu.status == on_cpu.status
    # 3000 steps of reassociated sums over d = 1000: agreement to ~1e-12 expected; 1e-7 leaves room for growth
    np.testing.assert_allclose(on_gpu.risk, on_cpu.risk, rtol=1e-7, atol=1e-9)
