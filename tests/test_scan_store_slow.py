"""The scan store through the public API, under abuse (issue 27; all slow): ``twolayer scan`` killed with SIGKILL
at random moments and resumed, two ``twolayer scan --resume`` on one store, and the client's peak memory of a
10^4 / 10^5 (TWOLAYER_SCALE_TEST=1e6: 10^6) configuration scan on a 2-worker Dask LocalCluster.

The stores are read with ``xarray.open_zarr`` (the store is a standard Zarr dataset) and with
``tl.scan.open_dataset``; both must agree bit for bit with an uninterrupted run."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import twolayer as tl

xr = pytest.importorskip("xarray")
pytest.importorskip("zarr")
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(os.name != "posix", reason="POSIX processes and signals")]

# 12 groups of two ODE configurations (erf K = M = 2, the plateau and its escape), about 0.25 s each on one core
CONFIG = """engine = "ode"
group_size = 2
[constants]
activation = "erf"
K = 2
M = 2
init = "gaussian"
d = 1000
t_max = 4000.0
n_records = 201
method = "euler"
dt = 0.01
[axes]
lr = [0.5, 1.0, 1.5]
seed = [0, 1, 2, 3, 4, 5, 6, 7]
"""

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "twolayer.cli", "scan", *args, "--no-progress"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """The config, the store of an uninterrupted run, and that run's wall time (interpreter start included)."""
    tmp = tmp_path_factory.mktemp("ref")
    cfg = tmp / "scan.toml"
    cfg.write_text(CONFIG)
    store = tmp / "ref.zarr"
    start = time.perf_counter()
    res = subprocess.run(_cli(str(cfg), "--store", str(store)), capture_output=True, text=True, env=ENV,
                         timeout=300)
    seconds = time.perf_counter() - start
    assert res.returncode == 0, res.stderr
    print(f"uninterrupted twolayer scan: {seconds:.2f} s")
    return cfg, store, seconds


def _bits(a: Any) -> np.ndarray:
    a = np.asarray(a)
    return a.view(np.uint8) if a.dtype.kind in "fiub" else a


def assert_bitwise(got: Any, ref: Any) -> None:
    """Same dims, coordinates, attributes and values, floats compared by their bytes (NaN payloads, -0.0)."""
    got, ref = got.load(), ref.load()
    xr.testing.assert_identical(got, ref)
    for name in [*ref.data_vars, *ref.coords]:
        np.testing.assert_array_equal(_bits(got[name].values), _bits(ref[name].values), err_msg=name)


def assert_same_store(store: Path, ref: Path) -> None:
    """``store`` reads as ``ref`` through both readers (see the module docstring)."""
    assert_bitwise(tl.scan.open_dataset(store), tl.scan.open_dataset(ref))
    opened, expected = xr.open_zarr(store, consolidated=False), xr.open_zarr(ref, consolidated=False)
    assert expected.data_vars
    assert_bitwise(opened, expected)
    assert_bitwise(opened, tl.scan.open_dataset(ref))  # the labelled Dataset of tl.scan


def test_sigkill_at_random_moments_then_resume(reference: tuple[Path, Path, float], tmp_path: Path) -> None:
    cfg, ref, seconds = reference
    rng = random.Random(2027)
    killed_midway = 0
    for trial in range(12):
        store = tmp_path / f"t{trial}.zarr"
        proc = subprocess.Popen(_cli(str(cfg), "--store", str(store)), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=ENV)
        time.sleep(rng.uniform(0.3, 1.1 * seconds))
        finished = proc.poll() is not None
        proc.kill()
        proc.communicate(timeout=30)
        if store.exists() and not finished:
            killed_midway += 1
        res = subprocess.run(_cli(str(cfg), "--store", str(store), "--resume"), capture_output=True, text=True,
                             env=ENV, timeout=300)
        assert res.returncode == 0, f"trial {trial}: {res.stderr}"
        assert "Traceback" not in res.stderr, res.stderr
        print(f"trial {trial}: killed {'after the end' if finished else 'midway'}; resumed: "
              f"{res.stdout.strip().split(': ')[-1]}")
        assert_bitwise(tl.scan.open_dataset(store), tl.scan.open_dataset(ref))
    assert killed_midway >= 6, killed_midway  # most kills landed while the store was being written
    for trial in range(12):
        assert_same_store(tmp_path / f"t{trial}.zarr", ref)


def test_two_writers_one_is_refused(reference: tuple[Path, Path, float], tmp_path: Path) -> None:
    cfg, ref, seconds = reference
    for trial in range(3):
        store = tmp_path / f"t{trial}.zarr"
        first = subprocess.Popen(_cli(str(cfg), "--store", str(store), "--resume"), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=ENV)
        time.sleep(1.0)
        second = subprocess.Popen(_cli(str(cfg), "--store", str(store), "--resume"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=ENV)
        started = time.perf_counter()
        out2, err2 = second.communicate(timeout=300)
        second_seconds = time.perf_counter() - started
        out1, err1 = first.communicate(timeout=300)
        print(f"trial {trial}: first exit {first.returncode}, second exit {second.returncode} after "
              f"{second_seconds:.2f} s: {(err1 + err2).strip()}")
        # the second is refused, unless it took the lock first (the first still importing after 1 s)
        (winner, _, err_w), (loser, out_l, err_l) = sorted(
            [(first, out1, err1), (second, out2, err2)], key=lambda p: p[0].returncode)
        assert (winner.returncode, loser.returncode) == (0, 1), (err_w, out_l, err_l)
        last = err_l.splitlines()[-1]  # (after an editable install's rebuild messages)
        assert last.startswith(f"twolayer: store: {store} is being written by process {winner.pid} on host"), \
            err_l
        assert "--resume" in err_l and "Traceback" not in err_l + err_w
        if loser is second:
            assert second_seconds < seconds  # refused at once, not after waiting for the first
        assert_bitwise(tl.scan.open_dataset(store), tl.scan.open_dataset(ref))
    for trial in range(3):
        assert_same_store(tmp_path / f"t{trial}.zarr", ref)


_SCALE_CLIENT = """
import json, os, resource, sys, time
import twolayer as tl
from distributed import Client, LocalCluster


def main(n, store):
    scan = tl.scan.Scan("ode", constants={"activation": "erf", "K": 2, "M": 2, "d": 100, "t_max": 1.0,
                                          "n_records": 3},
                        axes={"lr": [0.1 + 0.01 * i for i in range(100)], "seed": list(range(n // 100))})
    with LocalCluster(n_workers=2, threads_per_worker=1, memory_limit="1GiB", processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        start = time.perf_counter()
        summary = tl.scan.run(scan, store, executor=client, load_result=False)
        seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    files = sum(len(f) for _, _, f in os.walk(store))
    print(json.dumps({"n": len(scan), "groups": summary.groups, "seconds": seconds, "peak_mib": peak,
                      "files": files}))


if __name__ == "__main__":  # (the workers' processes import this module)
    main(int(sys.argv[1]), sys.argv[2])
"""


def _scale(n: int, store: Path) -> dict[str, Any]:
    env = {**ENV, "MALLOC_ARENA_MAX": "2"}
    script = store.with_suffix(".py")
    script.write_text(_SCALE_CLIENT)
    res = subprocess.run([sys.executable, str(script), str(n), str(store)], capture_output=True, text=True,
                         env=env, timeout=3600)
    assert res.returncode == 0, res.stderr[-4000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["n"] == n
    print(f"{n} configurations in {out['groups']} groups on a 2-worker LocalCluster: {out['seconds']:.1f} s, "
          f"{n / out['seconds']:.0f} configurations/s, client peak RSS {out['peak_mib']:.0f} MiB, "
          f"{out['files']} files in the store")
    return out


# Measured on the private layout (2 shared cores): 10^4 configurations in 1.1 s, client peak 101 MiB; 10^5 in 3.1 s,
# 296 MiB: the client held every configuration's dict (make_groups: 0.9 kB each) and submitted every task at once.
# With the issue-27 layout, 10^4 145 MiB, 10^5 174 MiB, 10^6 424 MiB: the Dask scheduler (in the client's process
# with a LocalCluster) keeps the last 1000 messages it sent to each worker (BatchedSend.recent_message_log), each
# holding a task whose configurations cost ~250 kB per 1000 (a dict per value). With a task's axis values and
# indices as ranges or arrays (~1 kB): 10^4 145 MiB, 10^5 146 MiB, 10^6 159 MiB in 107 s (a loaded machine).
def test_client_memory_does_not_grow_with_the_scan(tmp_path: Path) -> None:
    large = int(float(os.environ.get("TWOLAYER_SCALE_TEST", "1e5")))
    small = _scale(10_000, tmp_path / "small.zarr")
    big = _scale(large, tmp_path / "large.zarr")
    # a client holding a few groups at a time: its peak is that of the imports (xarray, zarr, dask, the
    # core), not of the scan; what grows is bounded by Dask's log of 1000 messages per worker, ~15 MiB
    assert big["peak_mib"] <= small["peak_mib"] + 20, (small, big)
