"""Online SGD throughput: ``tl.sgd.simulate`` against a straightforward NumPy loop and a PyTorch CPU loop.

Run with ``python -m pytest bench/test_bench_sgd.py --benchmark-only`` (``bench`` extra; torch is optional;
conventions in bench/conftest.py). Every implementation runs the same computation single-threaded: K student and
M = K teacher erf units, one fresh Gaussian sample x in R^d per step, first layer trained, the update of
DESIGN.md §3. Steps per second (median of 5 rounds) are the headline metric.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import twolayer as tl
from twolayer.networks import teacher_student

try:  # scipy is in the bench extra; only the NumPy reference needs it
    from scipy.special import erf as sp_erf
except ImportError:  # pragma: no cover
    sp_erf = None

try:
    import torch
except ImportError:  # pragma: no cover - optional
    torch = None

LR = 0.5
SQRT_2_PI = math.sqrt(2 / math.pi)


def problem(d: int, K: int):
    return teacher_student(K, K, d, "erf", seed=1)


def run_twolayer(st, te, steps: int) -> None:
    d = st.d
    tl.sgd.simulate(st, te, lr=LR, times=[0.0, steps / d], n_threads=1, keep_weights=False)


def run_numpy(st, te, steps: int) -> None:
    """The same loop written plainly in NumPy (one sample per step)."""
    rng = np.random.default_rng(0)
    W, a = st.W.copy(), st.a.copy()
    Wt, v = te.W, te.a
    d = W.shape[1]
    s = 1 / math.sqrt(d)
    for _ in range(steps):
        x = rng.standard_normal(d)
        lam = W @ x * s
        y = v @ sp_erf(Wt @ x * (s / math.sqrt(2)))
        E = y - a @ sp_erf(lam / math.sqrt(2))
        g = a * SQRT_2_PI * np.exp(-0.5 * lam * lam) * E
        W += (LR * s) * np.outer(g, x)


def run_torch(st, te, steps: int) -> None:
    """The same loop in PyTorch (float64, CPU, one thread, no autograd)."""
    gen = torch.Generator().manual_seed(0)
    W = torch.tensor(st.W.copy())
    a, Wt, v = torch.tensor(st.a), torch.tensor(te.W), torch.tensor(te.a)
    d = W.shape[1]
    s = 1 / math.sqrt(d)
    with torch.no_grad():
        for _ in range(steps):
            x = torch.randn(d, generator=gen, dtype=torch.float64)
            lam = W @ x * s
            y = v @ torch.erf(Wt @ x * (s / math.sqrt(2)))
            E = y - a @ torch.erf(lam / math.sqrt(2))
            g = a * SQRT_2_PI * torch.exp(-0.5 * lam * lam) * E
            W.add_(torch.outer(g, x), alpha=LR * s)


@pytest.fixture(autouse=True, scope="module")
def _single_thread_torch():
    if torch is not None:
        old = torch.get_num_threads()
        torch.set_num_threads(1)
        yield
        torch.set_num_threads(old)
    else:
        yield


def _steps(d: int, K: int) -> int:
    return int(min(100_000, max(2000, 3e7 / (d * (K + 8)))))


@pytest.mark.parametrize("K", [2, 8, 32])
@pytest.mark.parametrize("d", [100, pytest.param(1000, marks=pytest.mark.quick), 10_000])
def test_twolayer_steps_per_second(benchmark, d, K, record):
    """One thread, first layer trained; one timed call = ``steps`` SGD steps (rate in steps/s)."""
    st, te = problem(d, K)
    steps = _steps(d, K)
    benchmark.group = f"online SGD, one thread, K = M = {K}"
    benchmark.pedantic(run_twolayer, args=(st, te, steps), rounds=5, iterations=1, warmup_rounds=1)
    target = {"target_rate": 2e5} if (d, K) == (1000, 2) else {}  # the project's target: reported, not asserted
    record(benchmark, work=steps, unit="step", d=d, K=K, **target)
    if target and benchmark.extra_info.get("rate") is not None:
        benchmark.extra_info["target_met"] = bool(benchmark.extra_info["rate"] >= 2e5)


SIDE = "online SGD, d = 1000, K = M = 2, one thread: twolayer vs NumPy vs PyTorch"


@pytest.mark.quick
@pytest.mark.skipif(sp_erf is None, reason="needs scipy")
@pytest.mark.benchmark(group=SIDE)
def test_sgd_numpy_loop(benchmark, record):
    st, te = problem(1000, 2)
    benchmark.pedantic(run_numpy, args=(st, te, 2000), rounds=5, iterations=1)
    record(benchmark, work=2000, unit="step")


@pytest.mark.skipif(torch is None, reason="needs torch (optional)")
@pytest.mark.benchmark(group=SIDE)
def test_sgd_torch_loop(benchmark, record):
    st, te = problem(1000, 2)
    benchmark.pedantic(run_torch, args=(st, te, 2000), rounds=5, iterations=1)
    record(benchmark, work=2000, unit="step", ref="test_sgd_numpy_loop", torch=torch.__version__)


@pytest.mark.quick
@pytest.mark.benchmark(group=SIDE)
def test_sgd_twolayer(benchmark, record):
    st, te = problem(1000, 2)
    benchmark.pedantic(run_twolayer, args=(st, te, 50_000), rounds=5, iterations=1, warmup_rounds=1)
    record(benchmark, work=50_000, unit="step", ref="test_sgd_numpy_loop")


# --- SGD grid: 20 lr x 5 noise x 5 seeds at d = 500, K = M = 2 (500 runs), one call against 100 calls
GRID_LR = np.linspace(0.1, 1.0, 20)
GRID_NOISE = np.linspace(0.0, 0.4, 5)
GRID_SEEDS = 5
GRID_KW = dict(t_max=2.0, n_records=11, seed=0, keep_weights=False)


def grid_one_call(st, te, n_threads=None):
    grid = tl.sgd.grid(seeds=GRID_SEEDS, lr=GRID_LR, noise=GRID_NOISE)
    return tl.sgd.simulate(st, te, n_threads=n_threads, **grid, **GRID_KW)


def grid_loop(st, te, n_threads=None):
    """One call per (lr, noise) point, each with the 5 seeds as an ensemble: 100 calls."""
    return [
        tl.sgd.simulate(st, te, lr=float(lr), noise=float(noise), seeds=GRID_SEEDS, n_threads=n_threads, **GRID_KW)
        for lr in GRID_LR
        for noise in GRID_NOISE
    ]


_grid_times: dict[str, float] = {}


@pytest.mark.benchmark(group="SGD grid: 500 runs, d = 500, K = M = 2")
@pytest.mark.parametrize("how", [pytest.param("one_call", marks=pytest.mark.quick), "loop_of_100"])
def test_grid_lr_noise_seeds(benchmark, how, record):
    """20 lr x 5 noise x 5 seeds = 500 runs of online SGD, d = 500, K = M = 2, t_max = 2 (1000 steps each):
    one batched call against a loop of 100 calls of 5 seeds (the same runs, bitwise: tests/test_sgd_batch.py)."""
    st, te = problem(500, 2)
    fn = grid_one_call if how == "one_call" else grid_loop
    benchmark.pedantic(fn, args=(st, te), rounds=3, iterations=1, warmup_rounds=1)
    _grid_times[how] = benchmark.stats.stats.min
    record(benchmark, work=500_000, unit="step", ref="test_grid_lr_noise_seeds[loop_of_100]" if how == "one_call"
           else None, runs=500, d=500, K=2, steps_per_run=1000, calls=1 if how == "one_call" else 100)
    if len(_grid_times) == 2:
        ratio = _grid_times["loop_of_100"] / _grid_times["one_call"]
        benchmark.extra_info["loop_over_one_call"] = ratio
        print(f"\nSGD grid 20 lr x 5 noise x 5 seeds, d=500, K=M=2: one call {_grid_times['one_call']:.3f} s, "
              f"loop of 100 calls {_grid_times['loop_of_100']:.3f} s, ratio {ratio:.2f}x")
