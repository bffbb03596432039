"""Benchmarks of the scan layer (run: python -m pytest bench/test_bench_scan.py --benchmark-only -s).

In one run, on 10^4 erf K = M = 2 online ODE configurations (t_max = 100, adaptive, lr x seed grid, initial
overlaps from random networks at d = 100):

* the bare ``integrate_batch`` call on the stacked initial overlaps (built beforehand, not timed);
* the scan in memory (``tl.scan.run(scan)``: configurations, groups of 1000, initial overlaps, one
  ``integrate_batch`` per group, assembly into one Dataset), and into a Zarr store (plus reading it back);
  the scan's overhead is reported both against the bare call and against the bare call plus the same
  initial-condition derivation (the work a user's own script must do too);
* the naive Python loop users write today: one ``ode.integrate`` per configuration, results combined with
  ``xarray.combine_by_coords`` (on the first 2000 configurations; compared per configuration);
* the cost of the distribution layer per group: a 2-worker Dask LocalCluster against in-process, on many tiny
  groups (t_max = 1, one configuration per group), so that users can choose the group size.

The ratios are printed at the end (``-s``).
"""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest
import twolayer as tl
from twolayer.scan.engines import ENGINES, _overlap_arrays

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")

N_LR, N_SEED = 100, 100  # 10^4 configurations
SCAN = tl.scan.Scan("ode", constants={"activation": "erf", "K": 2, "M": 2, "d": 100, "t_max": 100.0},
                    axes={"lr": np.linspace(0.1, 2.0, N_LR).tolist(), "seed": list(range(N_SEED))})
TIMES: dict[str, float] = {}


def _configs():
    return [ENGINES["ode"].complete(c) for c in SCAN.configs()]


def _timed(name, fn):
    start = time.perf_counter()
    out = fn()
    TIMES[name] = time.perf_counter() - start
    return out


@pytest.fixture(scope="module")
def stacked():
    configs = _configs()
    arrays = _timed("init", lambda: [_overlap_arrays(c) for c in configs])
    stack = tl.BatchOverlaps(*(np.stack([a[i] for a in arrays]) for i in range(5)))
    return stack, np.array([c["lr"] for c in configs])


def test_bare_integrate_batch(benchmark, stacked):
    stack, lr = stacked
    res = benchmark.pedantic(lambda: _timed("bare", lambda: tl.ode.integrate_batch(stack, "erf", lr=lr,
                                                                                    t_max=100.0)),
                             rounds=1, iterations=1)
    assert len(res) == N_LR * N_SEED and set(res.status) == {"completed"}


def test_scan_in_memory(benchmark):
    ds = benchmark.pedantic(lambda: _timed("scan", lambda: tl.scan.run(SCAN)), rounds=1, iterations=1)
    assert ds["risk"].shape == (N_LR, N_SEED, 101)
    start = time.perf_counter()
    tl.scan.make_groups(SCAN)
    TIMES["grouping"] = time.perf_counter() - start


def test_scan_store(benchmark, tmp_path):
    path = tmp_path / "bench.zarr"

    def run():
        shutil.rmtree(path, ignore_errors=True)
        return tl.scan.run(SCAN, store=path, load_result=False)

    benchmark.pedantic(lambda: _timed("scan_store", run), rounds=1, iterations=1)
    ds = _timed("open", lambda: tl.scan.open_dataset(path))
    assert ds["risk"].shape == (N_LR, N_SEED, 101)


N_NAIVE = 2000  # the naive loop on the first 2000 configurations (its cost is per configuration)


def test_naive_loop(benchmark):
    configs = _configs()[:N_NAIVE]

    def loop():
        rows = []
        for c in configs:
            tr = tl.ode.integrate(tl.scan.initial_overlaps(c), lr=c["lr"], t_max=100.0)
            rows.append(tr.to_xarray().expand_dims(lr=[c["lr"]], seed=[c["seed"]]))
        return xr.combine_by_coords(rows, combine_attrs="drop_conflicts")

    ds = benchmark.pedantic(lambda: _timed("naive", loop), rounds=1, iterations=1)
    assert ds["risk"].sizes["lr"] == N_NAIVE // N_SEED


def test_dask_cost_per_group(benchmark, tmp_path):
    distributed = pytest.importorskip("distributed")
    tiny = tl.scan.Scan("ode", constants={"K": 2, "M": 2, "d": 100, "t_max": 1.0, "n_threads": 1},
                        axes={"lr": np.linspace(0.1, 2.0, 20).tolist(), "seed": [0, 1]}, group_size=1)
    n = len(tl.scan.make_groups(tiny))
    start = time.perf_counter()
    tl.scan.run(tiny, store=tmp_path / "in.zarr", load_result=False)
    TIMES["tiny_in_process"] = time.perf_counter() - start
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        client.submit(lambda: __import__("twolayer").__version__).result()  # workers warm
        benchmark.pedantic(lambda: _timed("tiny_dask", lambda: tl.scan.run(tiny, store=tmp_path / "dask.zarr",
                                                                            executor=client, load_result=False)),
                           rounds=1, iterations=1)
    TIMES["tiny_groups"] = n


@pytest.fixture(scope="module", autouse=True)
def report():
    """Print the ratios after the module's benchmarks (``-s``)."""
    yield
    t = TIMES
    if not {"bare", "scan", "scan_store", "naive", "init"} <= set(t):
        return
    per = {k: t[k] / (N_NAIVE if k == "naive" else N_LR * N_SEED) for k in ("bare", "scan", "scan_store", "naive")}
    print(f"\n10^4 erf K = M = 2 ODE configurations, t_max = 100 (one run, {tl.build_info()['max_threads']} "
          "OpenMP threads)")
    print(f"  bare integrate_batch (stacked overlaps given):    {t['bare']:8.2f} s")
    print(f"  initial overlaps from (K, M, d, seed), all 10^4:  {t['init']:8.2f} s (the scan derives each seed once)")
    print(f"  grouping (configurations, keys, groups):          {t['grouping']:8.3f} s")
    for name, label in (("scan", "scan, in memory"), ("scan_store", "scan into a Zarr store"),
                        ("naive", f"naive loop (ode.integrate + xarray, {N_NAIVE})")):
        print(f"  {label:<48} {t[name]:8.2f} s   per configuration x{per[name] / per['bare']:.3f} of bare")
    print(f"  reading the store back into one Dataset:         {t['open']:8.2f} s")
    if "tiny_dask" in t:
        n = t["tiny_groups"]
        print(f"  {n:.0f} tiny groups (t_max = 1): in-process {t['tiny_in_process']:.2f} s "
              f"({t['tiny_in_process'] / n * 1e3:.1f} ms/group), 2-worker LocalCluster {t['tiny_dask']:.2f} s "
              f"({t['tiny_dask'] / n * 1e3:.1f} ms/group)")
