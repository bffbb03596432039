"""The DMFT of full-batch GD (twolayer.dmft.solve) against the straightforward NumPy DMFT of
bench/dmft_reference.py (same equations and algorithm, NumPy over the S samples, Python loops over the (t, s)
blocks), ReLU p = 2 on y = tanh(z1 + He3(z2)), alpha 3, lr 0.2.

* group "dmft": T = 7 with S = 10^5 samples (10^6 with TWOLAYER_BENCH_FULL=1), both on one set of S samples
  (``n_groups=1``); the unit of work is one sample-iteration (S (T + 1)), so OPS is samples x iterations / s;
* group "dmft_scaling": tl.dmft.solve at T = 15, 30, 60 (S = 2 10^4): the cost grows like S T^2 (memory terms);
  the time per S T^2 is recorded (``extra_info["per_S_T2"]``).
Correctness (asserted): C++ and NumPy agree within the Monte Carlo error (their samples differ).
Run: python -m pytest bench/test_bench_dmft.py --benchmark-only -s
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import twolayer as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dmft_reference import dmft_numpy  # noqa: E402
from sizes import size  # noqa: E402

S = size(100_000, 1_000_000)
T = 7
A = np.array([1.0, 1.0])


def _target():
    return tl.targets.function(lambda z: np.tanh(z[:, 0] + z[:, 1] ** 3 - 3 * z[:, 1]), k=2, d=10, seed=1)


def _solve(n_steps: int, n_mc: int):
    return tl.dmft.solve(_target(), activation="relu", a=A, alpha=3.0, lr=0.2, n_steps=n_steps, n_mc=n_mc,
                         n_groups=1, seed=1)


def _numpy():
    rng = np.random.default_rng(0)
    tgt = _target()
    z, zt = rng.standard_normal((S, 2)), rng.standard_normal((S, 2))
    return dmft_numpy(A, "relu", z, tgt.function(z), zt, tgt.function(zt), rng.standard_normal((S, 2)),
                      np.zeros((2, 2)), np.eye(2), 0.2, 0.0, 3.0, T, rng)


@pytest.mark.quick
@pytest.mark.benchmark(group="dmft")
def test_bench_dmft_numpy(benchmark, record):
    out = benchmark.pedantic(_numpy, rounds=3, iterations=1)
    record(benchmark, work=S * (T + 1), unit="sample-iteration")
    test_bench_dmft_numpy.out = out  # type: ignore[attr-defined]


@pytest.mark.quick
@pytest.mark.benchmark(group="dmft")
def test_bench_dmft_twolayer(benchmark, record):
    res = benchmark.pedantic(_solve, args=(T, S), rounds=5, iterations=1)
    record(benchmark, work=S * (T + 1), unit="sample-iteration", ref="test_bench_dmft_numpy")
    ref = getattr(test_bench_dmft_numpy, "out", None) or _numpy()
    tol = 6 / np.sqrt(S)
    np.testing.assert_allclose(res.M, ref["M"], atol=tol)
    np.testing.assert_allclose(res.train_risk, ref["train_risk"], atol=tol)


@pytest.mark.benchmark(group="dmft_scaling")
@pytest.mark.parametrize("n_steps", [15, 30, 60])
def test_bench_dmft_scaling(benchmark, record, n_steps):
    n_mc = 20_000
    benchmark.pedantic(_solve, args=(n_steps, n_mc), rounds=3, iterations=1)
    record(benchmark, work=n_mc * (n_steps + 1), unit="sample-iteration",
           per_S_T2=benchmark.stats.stats.median / (n_mc * n_steps**2))
