"""Benchmarks for tl.landscape, each side by side with a NumPy/SciPy reference.

Run: .venv/bin/python -m pytest bench/test_bench_landscape.py --benchmark-only -s

- Hessian + spectrum at k = d = 20 (and 50 with TWOLAYER_BENCH_FULL=1) (Safran-Shamir point near W = I):
  analytic C++ Hessian + grouped eigenvalues vs a NumPy central-difference Hessian of the closed-form gradient + the
  same eigensolver.
- multistart, RUNS runs at k = 10 (100; 300 with TWOLAYER_BENCH_FULL=1; or TWOLAYER_BENCH_RUNS): the C++ L-BFGS
  batch (OpenMP across runs) + batched Newton classification vs
  a loop of SciPy L-BFGS-B over the NumPy closed-form loss/gradient from the same starts + the same
  classification. The family frequencies of the two must agree.

BLAS is pinned to one thread (set before NumPy is imported): multithreaded BLAS on 10 x 10 matrices only slows
the NumPy reference down on a shared machine.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import time  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import twolayer as tl  # noqa: E402
from sizes import size  # noqa: E402
from twolayer.landscape.multistart import _relu_loss_grad, classify_batch  # noqa: E402

L = tl.landscape
RUNS_DEFAULT = 100
RUNS = int(os.environ.get("TWOLAYER_BENCH_RUNS", size(RUNS_DEFAULT, 300)))
K_MS = 10
K_HESSIAN = [pytest.param(20, marks=pytest.mark.quick), *size([], [50])]  # k^2 x k^2 Hessians, eigensolver ~ k^6
_times: dict[str, float] = {}
_results: dict[str, dict] = {}


def _point(k: int):
    rng = np.random.default_rng(k)
    W = np.eye(k) + 0.05 * rng.standard_normal((k, k))
    return W, tl.Network(W, None, "relu", scaling="none"), L.identity_teacher(k)


def _fd_hessian(W: np.ndarray, h: float = 1e-6) -> np.ndarray:
    V = np.eye(W.shape[0])
    x = W.ravel()
    n = x.size
    H = np.empty((n, n))
    for i in range(n):
        e = np.zeros(n)
        e[i] = h
        gp = _relu_loss_grad((x + e).reshape(W.shape), V)[1].ravel()
        gm = _relu_loss_grad((x - e).reshape(W.shape), V)[1].ravel()
        H[i] = (gp - gm) / (2 * h)
    return 0.5 * (H + H.T)


@pytest.mark.parametrize("k", K_HESSIAN)
def test_hessian_spectrum_twolayer(benchmark, k, record):
    benchmark.group = f"hessian+spectrum k=d={k}"
    _, s, t = _point(k)
    spec = benchmark.pedantic(lambda: L.spectrum(tl.population.hessian(s, t, train_readout=False)), rounds=5)
    record(benchmark, unit="Hessian+spectrum", ref=f"test_hessian_spectrum_numpy_fd_reference[{k}]")
    _results[f"spec{k}"] = {"ours": spec}
    assert sum(m for _, m in spec) == k * k


@pytest.mark.parametrize("k", K_HESSIAN)
def test_hessian_spectrum_numpy_fd_reference(benchmark, k, record):
    benchmark.group = f"hessian+spectrum k=d={k}"
    W, s, t = _point(k)
    lam = benchmark.pedantic(lambda: np.linalg.eigvalsh(_fd_hessian(W)), rounds=3)
    record(benchmark, unit="Hessian+spectrum")
    ours = np.linalg.eigvalsh(tl.population.hessian(s, t, train_readout=False))
    # central differences: error ~ h^2 |D^4 R| + eps |grad| / h ~ 1e-9
    np.testing.assert_allclose(lam, ours, atol=1e-6)


def _scipy_loop(W0: np.ndarray) -> np.ndarray:
    from scipy.optimize import minimize

    k = W0.shape[1]
    V = np.eye(k)

    def fg(v):
        loss, g = _relu_loss_grad(v.reshape(k, k), V)
        return loss, g.ravel()

    out = np.empty_like(W0)
    for r in range(W0.shape[0]):
        res = minimize(
            fg,
            W0[r].ravel(),
            jac=True,
            method="L-BFGS-B",
            options={"gtol": 1e-8, "ftol": 0.0, "maxiter": 5000},
        )
        out[r] = res.x.reshape(k, k)
    return out


def _freq(kinds, losses) -> dict[tuple[str, float], float]:
    keys = [(kd, round(float(lo), 6) + 0.0) for kd, lo in zip(kinds, losses, strict=True)]
    return {key: keys.count(key) / len(keys) for key in sorted(set(keys))}


def test_multistart_twolayer(benchmark, record):
    benchmark.group = f"multistart k={K_MS} runs={RUNS}"

    def run():
        t0 = time.perf_counter()
        res = L.multistart(K_MS, RUNS, seed=0)
        _times["ours"] = time.perf_counter() - t0
        return res

    res = benchmark.pedantic(run, rounds=3, iterations=1)
    record(benchmark, work=RUNS, unit="search", ref="test_multistart_scipy_reference")
    _results["ms"] = {"ours": res}
    print("\n" + res.table())


def test_multistart_scipy_reference(benchmark, record):
    benchmark.group = f"multistart k={K_MS} runs={RUNS}"
    W0 = L.random_starts(RUNS, K_MS, K_MS, "xavier", 0)
    teacher = L.identity_teacher(K_MS)

    def run():
        t0 = time.perf_counter()
        W = _scipy_loop(W0)
        cls = classify_batch(W, np.ones((RUNS, K_MS)), teacher)
        _times["ref"] = time.perf_counter() - t0
        return cls

    cls = benchmark.pedantic(run, rounds=3, iterations=1)
    record(benchmark, work=RUNS, unit="search")
    ref = _freq(cls["kind"], cls["risk"])
    print("\nreference families:", ref)
    if "ms" in _results:
        ours = _results["ms"]["ours"]
        mine = _freq(ours.kind, ours.risk)
        print("twolayer families: ", mine)
        print(
            f"time ours {_times['ours']:.2f} s, reference {_times['ref']:.2f} s, ratio "
            f"{_times['ref'] / _times['ours']:.1f}x"
        )
        agree = np.mean([a == b for a, b in zip(ours.kind, cls["kind"], strict=True)])
        print(f"per-run kind agreement {agree:.3f}")
        assert set(mine) == set(ref)
        for key in ref:  # same starts, different line searches: a few runs may cross a basin boundary
            assert abs(mine[key] - ref[key]) < 0.03
