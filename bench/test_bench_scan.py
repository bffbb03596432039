"""Benchmarks of the scan layer (run: python -m pytest bench/test_bench_scan.py --benchmark-only -s).

On 3000 (10^4 with ``TWOLAYER_BENCH_FULL=1``) erf K = M = 2 online ODE configurations (t_max = 100, adaptive,
lr x seed grid, initial overlaps from random networks at d = 100), one OpenMP thread:

* ``test_scan_overhead``: the scan in memory (``tl.scan.run(scan)``: configurations, groups of 1000, initial
  overlaps, one ``integrate_batch`` per group, the Dataset) against the bare ``integrate_batch`` call on the stacked
  initial overlaps (built beforehand, not timed), in interleaved rounds (bare, scan, bare, scan, ...: a machine
  shared with other jobs slows both alike). The headline is the ratio of the minima of the wall times and of the
  CPU times (``time.process_time``, less disturbed by other processes); the per-round times and ratios are in
  ``extra_info`` and printed with ``-s``; the table's times are per configuration. The scan starts each round with
  empty caches (initial overlaps, output grid), so it pays what a first scan pays.
* ``test_scan_store``: the same scan into a Zarr store (written group by group), then read back.
* ``test_scan_store_overhead[benchmark|larger]``: bare ``integrate_batch``, the scan in memory and the scan into a
  fresh store, side by side in interleaved rounds (ratios of the minima of wall and CPU times to the bare call's),
  on the configuration above and on a larger one (``LARGER``: K = M = 3, t_max = 1000, 2000 configurations, ~10
  times the compute per configuration: a plateau scan).
* ``test_store_write_per_group[benchmark|larger]``: one group's write (``write_group``) against its compute, for
  groups of 100, 1000 and 3000 configurations, the chunks written as files (this layout's write path) and through
  Zarr's ``array[region] = values`` for every array (the path before it), interleaved; the CPU per group, its
  share of the compute's, a fit write = a + b n (per group, per configuration) and the group size from which the
  write costs <= 5 % of the compute's CPU.
* ``test_naive_loop``: the loop users write today (one ``ode.integrate`` per configuration, results combined with
  ``xarray.combine_by_coords``), on the first N_NAIVE (200) configurations; its speed-up column is per configuration
  against the scan in memory.
* ``test_group_cost_*``: the cost of the distribution layer per group: 20 tiny groups (t_max = 1, one
  configuration each) into a store, in-process and on a 2-worker Dask LocalCluster, so that users can choose
  the group size (a group should compute for much longer than the difference per group).
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest
import twolayer as tl
from sizes import size
from twolayer import _grid
from twolayer.scan import engines
from twolayer.scan.engines import ENGINES, _overlap_arrays

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")

N_LR, N_SEED = size(30, 100), 100  # 3000 configurations (10^4 with TWOLAYER_BENCH_FULL=1)
N_CONFIGS = N_LR * N_SEED
SCAN = tl.scan.Scan("ode", constants={"activation": "erf", "K": 2, "M": 2, "d": 100, "t_max": 100.0, "n_threads": 1},
                    axes={"lr": np.linspace(0.1, 2.0, N_LR).tolist(), "seed": list(range(N_SEED))})
ROUNDS = 6
TIMES: dict[str, np.ndarray] = {}
# ~10 times the compute per configuration (a plateau scan): 2000 configurations, ~0.8 ms of CPU each
LARGER = tl.scan.Scan("ode", constants={"activation": "erf", "K": 3, "M": 3, "d": 100, "t_max": 1000.0,
                                        "n_threads": 1},
                      axes={"lr": np.linspace(0.1, 2.0, 20).tolist(), "seed": list(range(100))})
CONFIGURATIONS = {"benchmark": (SCAN, ROUNDS), "larger": (LARGER, 3)}


def _configs(scan=SCAN):
    return [ENGINES["ode"].complete(c) for c in scan.configs()]


def _cold_caches():
    """What a first scan in a fresh process pays: no initial overlaps or output grid computed yet."""
    engines._STARTS.arrays.clear()
    engines._STARTS.floats = 0
    _grid._exact_grid.cache_clear()


def _stack(scan):
    """The bare call's inputs: the stacked initial overlaps and learning rates of every configuration."""
    configs = _configs(scan)
    arrays = [_overlap_arrays(c) for c in configs]
    stack = tl.BatchOverlaps(*(np.stack([a[i] for a in arrays]) for i in range(5)))
    return stack, np.array([c["lr"] for c in configs])


@pytest.fixture(scope="module")
def stacked():
    return _stack(SCAN)


def _clock(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


@pytest.mark.benchmark(group="scan overhead")
@pytest.mark.quick
def test_scan_overhead(benchmark, record, stacked):
    stack, lr = stacked
    bare: list[tuple[float, float]] = []
    scan: list[tuple[float, float]] = []

    def bare_round():  # the setup of each round (not timed by the benchmark, timed here)
        res, wall, cpu = _clock(lambda: tl.ode.integrate_batch(stack, "erf", lr=lr, t_max=100.0, n_threads=1))
        assert len(res) == N_CONFIGS and set(res.status) == {"completed"}
        bare.append((wall, cpu))
        _cold_caches()

    def scan_round():
        ds, wall, cpu = _clock(lambda: tl.scan.run(SCAN))
        scan.append((wall, cpu))
        return ds

    tl.scan.run(tl.scan.Scan("ode", constants={"t_max": 1.0, "lr": 1.0}))  # imports (xarray) out of the rounds
    ds = benchmark.pedantic(scan_round, setup=bare_round, rounds=ROUNDS, iterations=1)
    assert ds["risk"].shape == (N_LR, N_SEED, 101)
    b, s = np.array(bare[-ROUNDS:]), np.array(scan[-ROUNDS:])
    per_round = s / b  # columns: wall, cpu
    ratio = {"wall_min": s[:, 0].min() / b[:, 0].min(), "cpu_min": s[:, 1].min() / b[:, 1].min()}
    TIMES.update(bare=b, scan=s)
    record(benchmark, work=N_CONFIGS, unit="config", wall_ratio_of_minima=float(ratio["wall_min"]),
           cpu_ratio_of_minima=float(ratio["cpu_min"]),
           wall_ratio_per_round=per_round[:, 0].round(4).tolist(),
           cpu_ratio_per_round=per_round[:, 1].round(4).tolist(),
           bare_wall_s=b[:, 0].round(4).tolist(), scan_wall_s=s[:, 0].round(4).tolist(),
           bare_cpu_s=b[:, 1].round(4).tolist(), scan_cpu_s=s[:, 1].round(4).tolist())
    if "headline" in benchmark.extra_info:  # the overhead in the headline table (the rate stays in the JSON)
        benchmark.extra_info["headline"] = (f"x{ratio['wall_min']:.3f} wall, x{ratio['cpu_min']:.3f} CPU of bare "
                                            "integrate_batch (ratio of minima)")
    print(f"\n{N_CONFIGS} erf K = M = 2 ODE configurations, t_max = 100, one thread, {ROUNDS} interleaved rounds")
    for r in range(ROUNDS):
        print(f"  round {r}: bare {b[r, 0]:.3f} s (CPU {b[r, 1]:.3f} s), scan {s[r, 0]:.3f} s (CPU {s[r, 1]:.3f} s): "
              f"x{per_round[r, 0]:.3f} wall, x{per_round[r, 1]:.3f} CPU")
    print(f"  ratio of minima: x{ratio['wall_min']:.3f} wall, x{ratio['cpu_min']:.3f} CPU; median per-round ratio "
          f"x{np.median(per_round[:, 0]):.3f} wall, x{np.median(per_round[:, 1]):.3f} CPU")


@pytest.mark.benchmark(group="scan overhead")
def test_scan_store(benchmark, record, tmp_path):
    path = tmp_path / "bench.zarr"

    def run():
        _cold_caches()
        shutil.rmtree(path, ignore_errors=True)
        return tl.scan.run(SCAN, store=path, load_result=False)

    benchmark.pedantic(run, rounds=5, iterations=1)
    ds, wall, _ = _clock(lambda: tl.scan.open_dataset(path))
    assert ds["risk"].shape == (N_LR, N_SEED, 101)
    record(benchmark, work=N_CONFIGS, unit="config", ref="test_scan_overhead", open_dataset_s=round(wall, 4))
    if "bare" in TIMES:
        bare = TIMES["bare"]
        print(f"\n  into a Zarr store: min {benchmark.stats.stats.min * N_CONFIGS:.3f} s, x"
              f"{benchmark.stats.stats.min * N_CONFIGS / bare[:, 0].min():.3f} of the bare minimum; "
              f"reading it back {wall:.3f} s")


@pytest.mark.benchmark(group="scan overhead")
@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_scan_store_overhead(benchmark, record, tmp_path, configuration):
    """Side by side in interleaved rounds: the bare ``integrate_batch``, the scan in memory, the scan into a
    fresh Zarr store (``load_result=False``): the store's cost is the last two's difference."""
    scan, rounds = CONFIGURATIONS[configuration]
    stack, lr = _stack(scan)
    t_max, n = scan.constants["t_max"], len(scan)
    times: dict[str, list[tuple[float, float]]] = {"bare": [], "memory": [], "store": []}
    path = tmp_path / "overhead.zarr"

    def setup():  # not timed by the benchmark: the bare call and the scan in memory, timed here
        _, wall, cpu = _clock(lambda: tl.ode.integrate_batch(stack, "erf", lr=lr, t_max=t_max, n_threads=1))
        times["bare"].append((wall, cpu))
        _cold_caches()
        _, wall, cpu = _clock(lambda: tl.scan.run(scan))
        times["memory"].append((wall, cpu))
        _cold_caches()
        shutil.rmtree(path, ignore_errors=True)

    def store_round():
        _, wall, cpu = _clock(lambda: tl.scan.run(scan, store=path, load_result=False))
        times["store"].append((wall, cpu))

    tl.scan.run(tl.scan.Scan("ode", constants={"t_max": 1.0, "lr": 1.0}), store=tmp_path / "warm.zarr",
                load_result=False)  # imports (xarray, zarr) out of the rounds
    benchmark.pedantic(store_round, setup=setup, rounds=rounds, iterations=1)
    t = {k: np.array(v[-rounds:]) for k, v in times.items()}
    ratio = {f"{k}_{c}": float(t[k][:, i].min() / t["bare"][:, i].min())
             for k in ("memory", "store") for i, c in enumerate(("wall", "cpu"))}
    per_round = {f"{k}_{c}": (t[k][:, i] / t["bare"][:, i]).round(4).tolist()
                 for k in ("memory", "store") for i, c in enumerate(("wall", "cpu"))}
    record(benchmark, work=n, unit="config", load_1min=round(os.getloadavg()[0], 2),
           **{f"{k}_ratio_of_minima": v for k, v in ratio.items()},
           **{f"{k}_ratio_per_round": v for k, v in per_round.items()},
           **{f"{k}_{c}_s": t[k][:, i].round(4).tolist() for k in t for i, c in enumerate(("wall", "cpu"))})
    if "headline" in benchmark.extra_info:
        benchmark.extra_info["headline"] = (f"store x{ratio['store_wall']:.3f} wall, x{ratio['store_cpu']:.3f} CPU "
                                            "of bare integrate_batch (ratio of minima)")
    print(f"\n{configuration}: {n} configurations (K = M = {scan.constants['K']}, t_max = {t_max:g}), {rounds} "
          f"interleaved rounds (wall / CPU, s), load {os.getloadavg()[0]:.2f}:")
    for r in range(rounds):
        print("  " + ", ".join(f"{k} {t[k][r, 0]:.3f} / {t[k][r, 1]:.3f}" for k in t))
    print(f"  ratio of minima to bare: memory x{ratio['memory_wall']:.3f} wall x{ratio['memory_cpu']:.3f} CPU; "
          f"store x{ratio['store_wall']:.3f} wall x{ratio['store_cpu']:.3f} CPU; median per-round store ratio "
          f"x{np.median(per_round['store_wall']):.3f} wall x{np.median(per_round['store_cpu']):.3f} CPU")


GROUP_SIZES = (100, 1000, 3000)


@pytest.mark.benchmark(group="scan store, per group")
@pytest.mark.parametrize("configuration", list(CONFIGURATIONS))
def test_store_write_per_group(benchmark, record, tmp_path, monkeypatch, configuration):
    """The cost of writing one group (``write_group``: the values padded and checked, their checksum, every
    array's chunk, the record, ``complete``) against the group's compute, per group size: the chunks written as
    files (this layout) and every array through Zarr's ``array[region] = values`` (before), interleaved."""
    from twolayer.scan import store

    base, _ = CONFIGURATIONS[configuration]
    setups = {}
    for size_asked in GROUP_SIZES:
        scan = tl.scan.Scan(base.engine_name, constants=dict(base.constants), axes=dict(base.axes),
                            group_size=size_asked)
        group = tl.scan.make_groups(scan)[0]
        n = len(group.indices)  # (at most the scan's size)
        part, _, compute_cpu = _clock(lambda g=group: ENGINES["ode"].run(list(g.configs)))
        mib = sum(np.asarray(a).nbytes for _, a in part.data.values()) / 2**20
        setups[n] = (scan, group, part, compute_cpu, mib)
    cpu: dict[tuple[str, int], list[float]] = {}
    real_chunks = store._chunks

    def one_round():
        for path_kind in ("files", "zarr"):
            monkeypatch.setattr(store, "_chunks", real_chunks if path_kind == "files" else lambda *a: None)
            for n, (scan, group, part, _, _) in setups.items():
                path = tmp_path / f"{path_kind}-{n}.zarr"
                shutil.rmtree(path, ignore_errors=True)
                store.prepare(path, scan, len(tl.scan.make_groups(scan)), resume=False)
                store._handles(path)  # opened once per store and process: not part of a group's cost
                _, _, c = _clock(lambda p=path, g=group, pt=part: store.write_group(p, g.name, g.indices, pt))
                cpu.setdefault((path_kind, n), []).append(c)

    benchmark.pedantic(one_round, rounds=5, iterations=1)
    best = {k: min(v) for k, v in cpu.items()}
    compute = {n: s[3] for n, s in setups.items()}
    fits = {}
    for kind in ("files", "zarr"):
        b, a = np.polyfit(list(setups), [best[kind, n] for n in setups], 1)  # write = a + b n
        c = np.mean([compute[n] / n for n in setups])  # compute per configuration
        fits[kind] = (a, b, c, a / (0.05 * c - b) if 0.05 * c > b else float("inf"))
    record(benchmark, work=len(setups), unit="group", load_1min=round(os.getloadavg()[0], 2),
           **{f"{kind}_write_cpu_ms_{n}": round(best[kind, n] * 1e3, 3) for kind, n in best},
           **{f"compute_cpu_ms_{n}": round(compute[n] * 1e3, 2) for n in setups},
           **{f"mib_per_group_{n}": round(setups[n][4], 3) for n in setups},
           **{f"{kind}_ms_per_group": round(f[0] * 1e3, 3) for kind, f in fits.items()},
           **{f"{kind}_us_per_config": round(f[1] * 1e6, 3) for kind, f in fits.items()},
           **{f"{kind}_group_size_for_5_percent": f[3] for kind, f in fits.items()})
    print(f"\n{configuration}: one group's write, CPU (minimum of 5 rounds), load {os.getloadavg()[0]:.2f}:")
    for n in setups:
        print(f"  {n:5d} configurations ({setups[n][4]:.2f} MiB): files {best['files', n] * 1e3:.1f} ms, Zarr "
              f"{best['zarr', n] * 1e3:.1f} ms; compute {compute[n] * 1e3:.1f} ms: files "
              f"{best['files', n] / compute[n]:.1%}, Zarr {best['zarr', n] / compute[n]:.1%} of it")
    for kind, (a, b, c, n5) in fits.items():
        print(f"  {kind}: {a * 1e3:.2f} ms per group + {b * 1e6:.2f} us per configuration (compute "
              f"{c * 1e6:.0f} us per configuration): <= 5 % of the compute from "
              f"{'no group size' if n5 == float('inf') else f'{max(n5, 1):.0f} configurations per group'}")


N_NAIVE = 200  # the naive loop on the first 200 configurations (its cost is per configuration)


@pytest.mark.benchmark(group="scan overhead")
def test_naive_loop(benchmark, record):
    configs = _configs()[:N_NAIVE]

    def loop():
        rows = []
        for c in configs:
            tr = tl.ode.integrate(tl.scan.initial_overlaps(c), lr=c["lr"], t_max=100.0, n_threads=1)
            rows.append(tr.to_xarray().expand_dims(lr=[c["lr"]], seed=[c["seed"]]))
        return xr.combine_by_coords(rows, combine_attrs="drop_conflicts")

    ds = benchmark.pedantic(loop, rounds=5, iterations=1)
    assert ds["risk"].sizes["lr"] == N_NAIVE // N_SEED
    record(benchmark, work=N_NAIVE, unit="config", ref="test_scan_overhead")
    if "scan" in TIMES:
        per_naive = benchmark.stats.stats.min * N_CONFIGS  # record() made the timings per configuration
        print(f"\n  naive loop (ode.integrate + xarray), per configuration: "
              f"x{per_naive / TIMES['scan'][:, 0].min():.2f} "
              f"the scan's, x{per_naive / TIMES['bare'][:, 0].min():.2f} the bare call's")


TINY = tl.scan.Scan("ode", constants={"K": 2, "M": 2, "d": 100, "t_max": 1.0, "n_threads": 1},
                    axes={"lr": np.linspace(0.1, 2.0, 10).tolist(), "seed": [0, 1]}, group_size=1)
N_TINY = len(TINY)  # 20 groups of one configuration


@pytest.mark.benchmark(group="scan distribution, per group")
def test_group_cost_in_process(benchmark, record, tmp_path):
    def run():
        shutil.rmtree(tmp_path / "in.zarr", ignore_errors=True)
        tl.scan.run(TINY, store=tmp_path / "in.zarr", load_result=False)

    benchmark.pedantic(run, rounds=5, iterations=1)
    record(benchmark, work=N_TINY, unit="group")


@pytest.mark.benchmark(group="scan distribution, per group")
def test_group_cost_dask(benchmark, record, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        client.submit(lambda: __import__("twolayer").__version__).result()  # workers warm

        def run():
            shutil.rmtree(tmp_path / "dask.zarr", ignore_errors=True)
            tl.scan.run(TINY, store=tmp_path / "dask.zarr", executor=client, load_result=False)

        benchmark.pedantic(run, rounds=5, iterations=1)
    record(benchmark, work=N_TINY, unit="group", ref="test_group_cost_in_process")
    print(f"\n  {N_TINY} tiny groups: 2-worker LocalCluster {benchmark.stats.stats.median * 1e3:.1f} ms per group "
          "(median)")
