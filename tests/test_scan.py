"""tl.scan: a scan equals its configurations run one by one (bitwise), grouping, validation before anything runs,
the Zarr store (resume, refusal of another definition, incomplete groups), SIGKILL midway and resume, process-pool
and Dask executors against in-process, the TOML examples and the CLI commands."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import twolayer as tl
from twolayer import cli
from twolayer.scan import executors, store

xr = pytest.importorskip("xarray")  # the scan extra is in the test extra: never skipped in CI (Python 3.11+)
if sys.version_info < (3, 11):  # zarr 3 needs Python 3.11
    pytest.skip("the scan store needs zarr >= 3, which needs Python >= 3.11", allow_module_level=True)
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def identical(a, b):
    """Datasets equal bit for bit (NaN in the same places), with the same coordinates and attributes."""
    xr.testing.assert_identical(a, b)
    for name in a.data_vars:
        x, y = a[name].values, b[name].values
        if x.dtype.kind == "f":
            assert np.array_equal(x.view(np.int64), y.view(np.int64)), name


def unmark(path, scan, gid):
    """Mark group ``gid`` of a store unfinished, as a process killed while writing it leaves it."""
    import zarr

    region = tl.scan.grouping.group_regions(scan)[gid]
    zarr.open_array(str(path), path="complete", mode="r+")[region] = False


def small_ode_scan(**kw):
    return tl.scan.Scan("ode", constants={"activation": "linear", "d": 50, "t_max": 4.0, "risk_tol": 1e-3, **kw},
                        axes={"lr": [0.5, 1.0, 20.0], "seed": [0, 1]}, zip={"size": {"K": [1, 2], "M": [1, 3]}},
                        group_size=4)


# ------------------------------------------------------------------------------------------ equal to one by one


def test_ode_scan_equals_single_integrations_bitwise():
    scan = small_ode_scan()
    assert scan.dims == {"lr": 3, "seed": 2, "size": 2} and len(scan) == 12
    groups = tl.scan.make_groups(scan)
    # two shapes (K, M) = (1, 1), (2, 3), cut into groups of at most 4 configurations
    assert sorted(len(g.indices) for g in groups) == [2, 2, 4, 4]
    assert sorted(i for g in groups for i in g.indices) == list(range(12))
    ds = tl.scan.run(scan)
    assert ds["risk"].dims == ("lr", "seed", "size", "t") and ds["Q"].shape == (3, 2, 2, 101, 2, 2)
    assert list(ds["n_teacher"].values) == [1, 3] and list(ds["K"].values) == [1, 2]  # M renamed: M is the overlaps
    assert ds.attrs["engine"] == "ode" and ds.attrs["twolayer_version"] == tl.__version__
    assert ds.attrs["d"] == 50 and json.loads(ds.attrs["scan_definition"])["axes"]["lr"] == [0.5, 1.0, 20.0]
    for i, cfg in enumerate(scan.configs()):
        pos = dict(zip(scan.dims, np.unravel_index(i, tuple(scan.dims.values())), strict=True))
        one = ds.isel(pos)
        tr = tl.ode.integrate(tl.scan.initial_overlaps(cfg), lr=cfg["lr"], t_max=4.0, risk_tol=1e-3)
        n = int(one["n_recorded"])
        K, M = cfg["K"], cfg["M"]
        assert str(one["status"].values) == tr.status
        np.testing.assert_array_equal(one["risk"].values[:n], tr.risk[:n])
        np.testing.assert_array_equal(one["Q"].values[:n, :K, :K], tr.Q[:n])
        np.testing.assert_array_equal(one["M"].values[:n, :K, :M], tr.M[:n])
        assert np.all(np.isnan(one["Q"].values[:, K:, :]))  # padding of the smaller shape
        if tr.status == "completed":
            assert math.isnan(float(one["stop_time"])) and math.isnan(tr.stop_time)
        else:
            assert float(one["stop_time"]) == tr.stop_time
    # lr = 20 > 2 makes the linear K = M = 1 student diverge; the others are untouched by it
    assert set(ds["status"].sel(lr=20.0).isel(size=0).values.ravel()) == {"diverged"}
    assert np.all(np.isfinite(ds["stop_time"].sel(lr=20.0).isel(size=0).values))
    assert set(ds["status"].sel(lr=[0.5, 1.0]).values.ravel()) <= {"completed", "converged"}


def test_sgd_scan_equals_single_ensembles_bitwise():
    scan = tl.scan.Scan("sgd", constants={"K": 2, "M": 2, "d": 40, "t_max": 3.0, "seeds": 3, "n_records": 11},
                        axes={"lr": [0.5, 1.0], "noise": [0.0, 0.2]})
    ds = tl.scan.run(scan)
    assert ds["risk"].dims == ("lr", "noise", "member", "t") and list(ds["run_id"].values) == [0, 1, 2]
    student, teacher = tl.scan.initial_networks({"K": 2, "M": 2, "d": 40})
    for lr in (0.5, 1.0):
        for noise in (0.0, 0.2):
            ens = tl.sgd.simulate(student, teacher, lr=lr, noise=noise, t_max=3.0, seeds=3, n_records=11)
            np.testing.assert_array_equal(ds["risk"].sel(lr=lr, noise=noise).values, ens.risk)
            np.testing.assert_array_equal(ds["Q"].sel(lr=lr, noise=noise).values, ens.Q)
    np.testing.assert_array_equal(ds["t"].values, ens.t)


def test_large_batch_scan_equals_single_maps_bitwise():
    # lr x batch_ratio of the large-batch map (First order methods): one ode.integrate per configuration, t = iteration
    scan = tl.scan.Scan("ode", constants={"K": 2, "M": 2, "d": 50, "activation": "linear", "regime": "large_batch",
                                          "n_steps": 12},
                        axes={"lr": [0.5, 2.0, 1e6], "batch_ratio": [0.5, 4.0]}, group_size=4)
    ds = tl.scan.run(scan)
    assert ds["risk"].dims == ("lr", "batch_ratio", "t") and ds.attrs["time_unit"] == "t = iteration (large-batch map)"
    np.testing.assert_array_equal(ds["t"].values, np.arange(13.0))
    for cfg in scan.configs():
        tr = tl.ode.integrate(tl.scan.initial_overlaps(cfg), "linear", lr=cfg["lr"], regime="large_batch",
                              batch_ratio=cfg["batch_ratio"], n_steps=12)
        one = ds.sel(lr=cfg["lr"], batch_ratio=cfg["batch_ratio"])
        n = len(tr.t)
        assert str(one["status"].values) == tr.status and int(one["n_recorded"]) == n
        for name in ("risk", "Q", "M", "a"):
            np.testing.assert_array_equal(one[name].values[:n], getattr(tr, name))
            assert np.all(np.isnan(one[name].values[n:]))  # rows after a divergence
        np.testing.assert_array_equal(one["stop_time"].values, tr.stop_time)
    # lr = 1e6 overflows within 12 iterations and lr = 2 grows 15-40-fold per iteration past the divergence bound
    # (1e8 x the start's scale) at iteration 6 or 8; the others, in the same group, are untouched by them
    assert set(ds["status"].sel(lr=[2.0, 1e6]).values.ravel()) == {"diverged"}
    assert set(ds["status"].sel(lr=0.5).values) == {"completed"}


def test_descend_multistart_and_function_engines():
    ds = tl.scan.run(tl.scan.Scan("descend", constants={"K": 2, "M": 2, "d": 6, "n_steps": 50, "n_records": 8},
                                  axes={"lr": [0.1, 0.5]}))
    st, te = tl.scan.initial_networks({"K": 2, "M": 2, "d": 6})
    tr = tl.population.descend(st, te, 0.5, 50, n_records=8)
    np.testing.assert_array_equal(ds["risk"].sel(lr=0.5).values, tr.risk)
    np.testing.assert_array_equal(ds["t"].values, tr.t)
    ms = tl.scan.run(tl.scan.Scan("multistart", constants={"M": 3, "runs": 4}, axes={"seed": [0, 1]}))
    ref = tl.landscape.multistart(3, 4, seed=1)
    np.testing.assert_array_equal(ms["risk"].sel(seed=1).values, ref.risk)
    assert list(ms["kind"].sel(seed=1).values) == ref.kind
    fn = tl.scan.run(tl.scan.Scan(_quadratic, axes={"x": [1.0, 2.0, 3.0]}, constants={"c": 2.0}))
    np.testing.assert_array_equal(fn["y"].values, [3.0, 6.0, 11.0])
    np.testing.assert_array_equal(fn["both"].values, [[1.0, 3.0], [2.0, 6.0], [3.0, 11.0]])


def _quadratic(x, c=0.0):
    return {"y": x * x + c, "both": [x, x * x + c]}


# ------------------------------------------------------------------------------------------ validation


@pytest.mark.parametrize("definition,match", [
    ({"engine": "ode", "constants": {"lrr": 1.0, "t_max": 1.0}},
     r"constants\.lrr: unknown parameter.*did you mean 'lr'"),
    ({"engine": "ode", "constants": {"t_max": 1.0}, "axis": {"lr": [1.0]}}, r"axis: unknown key.*did you mean 'axes'"),
    ({"engine": "odee", "constants": {}}, r"engine: unknown engine 'odee'; did you mean 'ode'"),
    ({"engine": "ode", "constants": {"t_max": 1.0}, "axes": {"lr": []}}, r"axes\.lr: an axis needs at least one"),
    ({"engine": "ode", "constants": {"t_max": 1.0}, "axes": {"lr": [1.0, 1.0]}}, r"axes\.lr: .*distinct"),
    ({"engine": "ode", "constants": {"t_max": 1.0, "lr": 1.0}, "zip": {"s": {"K": [1, 2], "M": [1]}}},
     r"zip\.s: zipped axes need equal lengths, got K \(2\), M \(1\)"),
    ({"engine": "ode", "constants": {"t_max": 1.0, "lr": 1.0}, "axes": {"lr": [1.0, 2.0]}},
     r"axes\.lr: 'lr' is already given in constants"),
    ({"engine": "ode", "constants": {"lr": 1.0}}, r"t_max: engine 'ode' needs it"),
    ({"engine": "ode", "constants": {"t_max": 1.0}, "axes": {"lr": [1.0, -1.0]}}, r"axes\.lr\[1\]: expected a finite"),
    ({"engine": "ode", "constants": {"t_max": 1.0, "lr": 1.0, "activation": "erff"}},
     r"constants\.activation: "),
    ({"engine": "sgd", "constants": {"t_max": 1.0, "lr": 1.0, "seeds": 0}}, r"constants\.seeds: expected an integer"),
    ({"engine": "tests.nowhere:fn"}, r"engine: 'tests\.nowhere:fn' would import module 'tests\.nowhere'.*"
                                     r"allow_import"),  # never imported without it (test_scan_safety.py)
    ({"engine": "ode", "constants": {"t_max": 1.0, "lr": 1.0}, "zip": {"s": {"K": [1, 0], "M": [1, 2]}}},
     r"zip\.s\.K\[1\]: expected an integer in \[1, "),
    ({"engine": "ode", "constants": {"t_max": 1.0, "lr": 1.0, "n_steps": 3}},
     r"constants\.n_steps: only regime 'large_batch' takes it \(this scan's regime: 'online'\)"),
    ({"engine": "ode", "constants": {"t_max": 1.0, "lr": 1.0, "regime": "gradient_flow"},
      "axes": {"batch_ratio": [1.0, 2.0]}}, r"axes\.batch_ratio: only regime 'large_batch' takes it"),
    ({"engine": "ode", "constants": {"lr": 1.0, "regime": "large_batch", "batch_ratio": 1.0}},
     r"n_steps: engine 'ode' with regime 'large_batch' needs it"),
    ({"engine": "ode", "constants": {"lr": 1.0, "regime": "large_batch", "n_steps": 3}},
     r"batch_ratio: engine 'ode' with regime 'large_batch' needs it"),
    ({"engine": "ode", "constants": {"lr": 1.0, "regime": "large_batch", "n_steps": 3, "batch_ratio": 1.0,
                                     "t_max": 1.0}}, r"constants\.t_max: regime 'large_batch' does not take it"),
    ({"engine": "ode", "constants": {"lr": 1.0, "regime": "large_batch", "n_steps": 3, "batch_ratio": 1.0,
                                     "lr_readout": 0.5}}, r"constants\.lr_readout: regime 'large_batch' keeps"),
    ({"engine": "ode", "constants": {"lr": 1.0, "n_steps": 3, "batch_ratio": 1.0},
      "axes": {"regime": ["online", "large_batch"]}},
     r"axes\.regime: 'large_batch' cannot be scanned together with 'online'"),
    ({"engine": "ode", "constants": {"lr": 1.0, "regime": "large_batch", "n_steps": 3},
      "axes": {"batch_ratio": [1.0, 0.0]}}, r"axes\.batch_ratio\[1\]: expected a finite number > 0"),
    ({"engine": "ode", "constants": {"lr": 1.0, "regime": "large_batch", "n_steps": 0, "batch_ratio": 1.0}},
     r"constants\.n_steps: expected an integer in \[1, "),
])
def test_bad_definitions_name_the_key(definition, match):
    with pytest.raises((ValueError, TypeError), match=match):
        tl.scan.Scan.from_dict(definition)


def test_toml_round_trip_and_syntax_error(tmp_path):
    scan = tl.scan.Scan.from_toml(EXAMPLES / "scan_plateau.toml")
    assert tl.scan.Scan.from_dict(scan.to_dict()) == scan and scan.dims == {"lr": 3, "d": 3, "seed": 3}
    bad = tmp_path / "bad.toml"
    bad.write_text('engine = "ode"\n[constants\nlr = 1\n')
    with pytest.raises(ValueError, match="bad.toml: not valid TOML"):
        tl.scan.Scan.from_toml(bad)
    typo = tmp_path / "typo.toml"
    typo.write_text('engine = "ode"\n[constants]\nt_max = 1.0\nlearning_rate = 1.0\n')
    assert cli.main(["scan", str(typo)]) == 1  # one line naming the key, nothing written
    assert not (tmp_path / "typo.zarr").exists()


# ------------------------------------------------------------------------------------------ store and resume


def test_store_resume_refuse_and_incomplete_group(tmp_path, monkeypatch, capsys):
    scan = small_ode_scan()
    path = tmp_path / "s.zarr"
    ref = tl.scan.run(scan)
    ds = tl.scan.run(scan, store=path)
    identical(ds, ref)
    with pytest.raises(FileExistsError, match="resume=True"):
        tl.scan.run(scan, store=path)
    summary = tl.scan.run(scan, store=path, resume=True, load_result=False)
    assert (summary.computed, summary.skipped) == (0, 4)
    with pytest.raises(ValueError, match="different scan definition"):
        tl.scan.run(small_ode_scan(t_max=5.0), store=path, resume=True)
    # a group whose completion marker is missing (killed while writing) is computed again, and only it
    g = tl.scan.make_groups(scan)[2]
    unmark(path, scan, g.gid)
    assert store.complete_groups(path) == {0, 1, 3}
    ran = []
    real = executors.run_task
    monkeypatch.setattr(executors, "run_task", lambda task: ran.append(task.name) or real(task))
    identical(tl.scan.run(scan, store=path, resume=True, progress=True), ref)
    assert ran == [g.name]
    bar = capsys.readouterr().err  # the bar starts at the stored groups' configurations and counts groups
    assert "10/12" in bar and "groups 3/4" in bar and "12/12" in bar and "groups 4/4" in bar


KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    import twolayer as tl
    from twolayer.scan import executors
    real = executors.run_task
    def logged(task):
        with open(sys.argv[2], "a") as f:
            f.write(task.name + "\\n")
        time.sleep(0.25)
        return real(task)
    executors.run_task = logged
    tl.scan.run(tl.scan.Scan.from_dict({"engine": "ode", "group_size": 1,
        "constants": {"activation": "erf", "K": 2, "M": 2, "d": 100, "t_max": 20.0},
        "axes": {"lr": [0.5, 1.0, 1.5], "seed": [0, 1]}}), store=sys.argv[1], resume=True)
""")


def test_sigkill_midway_then_resume_recomputes_only_missing(tmp_path, monkeypatch):
    path, log, script = tmp_path / "k.zarr", tmp_path / "calls.log", tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(path), str(log)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(store.complete_groups(path)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = store.complete_groups(path)
    assert 2 <= len(finished) < 6, finished  # killed midway
    started = log.read_text().split()
    scan = tl.scan.Scan.from_dict({"engine": "ode", "group_size": 1,
                                   "constants": {"activation": "erf", "K": 2, "M": 2, "d": 100, "t_max": 20.0},
                                   "axes": {"lr": [0.5, 1.0, 1.5], "seed": [0, 1]}})
    ran = []
    real = executors.run_task
    monkeypatch.setattr(executors, "run_task", lambda task: ran.append(task.name) or real(task))
    with pytest.warns(UserWarning, match="taking over the lock"):  # the killed writer never released it
        resumed = tl.scan.run(scan, store=path, resume=True)
    names = {g.gid: g.name for g in tl.scan.make_groups(scan)}
    assert sorted(ran) == sorted(names[g] for g in names if g not in finished)  # no finished group again
    assert len(started) >= len(finished)
    identical(resumed, tl.scan.run(scan))


# ------------------------------------------------------------------------------------------ executors


def test_process_pool_and_dask_equal_in_process(tmp_path):
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    distributed = pytest.importorskip("distributed")  # in the test extra: never skipped in CI
    scan = small_ode_scan()
    ref = tl.scan.run(scan)
    # forked workers (the core runs serially after a fork): no interpreter start-up, so the test stays quick
    with ProcessPoolExecutor(2, mp_context=mp.get_context("fork")) as pool:
        identical(tl.scan.run(scan, store=tmp_path / "pool.zarr", executor=pool), ref)
    sgd = tl.scan.Scan("sgd", constants={"d": 30, "t_max": 2.0, "seeds": 2, "n_records": 5},
                       axes={"lr": [0.5, 1.0], "seed": [0, 1]}, group_size=1)
    dask_cluster(distributed, "fork", tmp_path, [(scan, ref), (sgd, tl.scan.run(sgd))])
    with pytest.raises(TypeError, match="executor: expected None"):
        tl.scan.run(scan, store=tmp_path / "x.zarr", executor=object())
    with pytest.raises(ValueError, match="store: an executor"):
        with ProcessPoolExecutor(1) as pool:
            tl.scan.run(scan, executor=pool)


def dask_cluster(distributed, method, tmp_path, scans):
    """Each (scan, in-process dataset) run on a LocalCluster of 2 worker processes started by ``method``."""
    import dask

    with dask.config.set({"distributed.worker.multiprocessing-method": method}), \
            distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as c, \
            distributed.Client(c) as client:
        assert len(client.scheduler_info()["workers"]) == 2
        for k, (scan, ref) in enumerate(scans):
            identical(tl.scan.run(scan, store=tmp_path / f"{method}{k}.zarr", executor=client), ref)


# ------------------------------------------------------------------------------------------ examples and CLI


def exact_escape_time(gamma, noise, m0, rho):
    """Closed-form first passage of the p = 1 ODE of Arnaboldi et al. below rho R(0) (see tests/test_ode_batch.py)."""
    A, B = 4 * (1 - 6 * gamma) - 2 * gamma * noise, 4 * (1 - 6 * gamma)
    u0 = m0 * m0
    us = 1 - rho * (1 - u0)
    return math.log(us * (A - B * u0) / (u0 * (A - B * us))) / (2 * A * gamma)


def test_example_escaping_mediocrity_escape_times(tmp_path):
    assert cli.main(["scan", str(EXAMPLES / "escaping_mediocrity_scan.toml"), "--store", str(tmp_path / "e.zarr"),
                     "--no-progress"]) == 0
    ds = store.open_dataset(tmp_path / "e.zarr")
    assert set(ds["status"].values.ravel()) == {"converged"}
    m0 = ds["M"].isel(t=0, student=0, teacher=0).values
    exact = np.vectorize(exact_escape_time)(ds["lr"].values[:, None], 0.0, m0, 0.5)
    np.testing.assert_allclose(ds["stop_time"].values, exact, rtol=1e-6)
    # the example's comment: the package's exact formula, at Delta = 0 log((T / m0^2 + 1 - T) / (1 - T)) /
    # (8 gamma (1 - 6 gamma)); the paper's printed one (annealed, m0^2 = 1/d) is 10 % short of it
    g, T, d = ds["lr"].values[:, None], 0.5, 1000
    theory = np.array([tl.theory.escape_time_p1(m, lr=lr, noise=0.0, threshold=T)
                       for lr, m in zip(ds["lr"].values, m0, strict=True)])
    np.testing.assert_allclose(ds["stop_time"].values, theory, rtol=1e-6)
    np.testing.assert_allclose(theory, np.log((T / m0**2 + 1 - T) / (1 - T)) / (8 * g * (1 - 6 * g)), rtol=1e-12)
    annealed = np.array([tl.theory.escape_time_p1(d**-0.5, lr=lr, noise=0.0, threshold=T) for lr in g[:, 0]])
    np.testing.assert_allclose(np.log(T * d + 1 - T) / (8 * g[:, 0] * (1 - 6 * g[:, 0])) / annealed, 0.8997, atol=1e-4)
    # the escape time is shortest near gamma = 1/12 (Arnaboldi et al.'s optimal learning rate with Delta = 0)
    assert ds["lr"].values[np.argmin(ds["stop_time"].mean("seed").values)] == 0.08
    assert cli.main(["plot", str(tmp_path / "e.zarr")]) == 0
    assert (tmp_path / "e.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_example_plateau_and_cli_resume(tmp_path, capsys):
    config = tmp_path / "plateau.toml"
    config.write_text((EXAMPLES / "scan_plateau.toml").read_text())
    assert cli.main(["scan", str(config), "--no-progress"]) == 0
    assert "27 configurations in 1 groups: 1 computed" in capsys.readouterr().out
    assert cli.main(["scan", str(config), "--no-progress"]) == 1  # exists: needs --resume
    assert "--resume" in capsys.readouterr().err
    assert cli.main(["scan", str(config), "--resume", "--no-progress"]) == 0
    assert "0 computed, 1 already stored" in capsys.readouterr().out
    ds = store.open_dataset(tmp_path / "plateau.zarr")
    t = ds["stop_time"].mean("seed")
    assert set(ds["status"].values.ravel()) == {"converged"}
    assert np.all(np.diff(t.values, axis=0) < 0)  # a larger lr learns faster
    assert np.all(np.diff(t.values, axis=1) > 0)  # a larger d starts closer to the symmetric plateau


def test_noise_example_points_all_reach_risk_tol():
    """examples/scan_sgd_noise.toml: at every (lr, noise) the d -> infinity ODE from the example's start reaches
    risk_tol well before t_max, and its noise floor (the fixed point) lies below risk_tol, as its comment says."""
    data = tl.scan.spec.read_toml(EXAMPLES / "scan_sgd_noise.toml")
    c = data["constants"]
    ov = tl.scan.initial_overlaps(c)
    floors = {}
    for lr in data["axes"]["lr"]:
        for noise in data["axes"]["noise"]:
            tr = tl.ode.integrate(ov, "erf", lr=lr, noise=noise, t_max=c["t_max"], risk_tol=c["risk_tol"])
            assert tr.status == "converged" and tr.stop_time < 0.7 * c["t_max"]
            floors[lr, noise] = tl.ode.integrate(ov, "erf", lr=lr, noise=noise, t_max=3000.0, n_records=2).risk[-1]
    assert max(floors.values()) < 0.8 * c["risk_tol"]
    np.testing.assert_allclose([floors[0.5, 0.01], floors[1.5, 0.01]], [1.2e-3, 7.6e-3], rtol=0.03)


@pytest.mark.slow  # ~25 s: the example itself
def test_noise_example_runs_and_noise_slows_large_lr_most(tmp_path):
    ds = tl.scan.run(tl.scan.spec.read_toml(EXAMPLES / "scan_sgd_noise.toml"))
    assert set(ds["status"].values.ravel()) == {"converged"}
    t = ds["stop_time"].mean("member")
    speedup = t.sel(lr=0.5) / t.sel(lr=1.5)
    assert float(speedup.sel(noise=0.0)) > 2.2 and float(speedup.sel(noise=0.01)) < float(speedup.sel(noise=0.0))


def test_realistic_example_small_and_run_command(tmp_path, capsys, monkeypatch):
    data = tl.scan.spec.read_toml(EXAMPLES / "scan_sgd_noise.toml")
    data["constants"].update({"d": 40, "t_max": 2.0, "n_records": 5})
    ds = tl.scan.run(data)
    assert ds["risk"].shape == (4, 3, 4, 5)
    config = tmp_path / "exp.toml"
    config.write_text((EXAMPLES / "experiment_plateau.toml").read_text().replace("t_max = 200.0", "t_max = 5.0")
                      .replace("d = 1000", "d = 100"))
    assert cli.main(["run", str(config), "--no-progress"]) == 0
    rows = (tmp_path / "exp.csv").read_text().splitlines()
    assert rows[0] == "engine,t,risk,risk_std" and len(rows) == 1 + 2 * 101
    assert (tmp_path / "exp.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the full results of each engine as NetCDF, equal to what the experiment computes
    ode, sgd = (xr.load_dataset(tmp_path / f"exp.{e}.nc") for e in ("ode", "sgd"))
    constants = tl.scan.spec.read_toml(config)["constants"]
    student, teacher = tl.scan.initial_networks(constants)
    tr = tl.ode.integrate(tl.Overlaps.from_networks(student, teacher), lr=1.0, t_max=5.0)
    np.testing.assert_array_equal(ode["risk"].values, tr.risk)
    np.testing.assert_array_equal(ode["Q"].values, tr.Q)
    assert str(ode["status"].values) == "completed" and ode.attrs["twolayer_version"] == tl.__version__
    ens = tl.sgd.simulate(student, teacher, lr=1.0, t_max=5.0, seeds=constants["seeds"], seed=constants["seed"])
    assert sgd["risk"].dims == ("member", "t")
    np.testing.assert_array_equal(sgd["risk"].values, ens.risk)
    assert list(sgd["status"].values) == ens.status
    config.write_text('engine = "both"\n[constants]\nt_max = 1.0\nlr = 1.0\nseedz = 3\n')
    assert cli.main(["run", str(config)]) == 1
    assert "constants.seedz: unknown parameter of ode and sgd; did you mean 'seed'?" in capsys.readouterr().err
    config.write_text('engine = "both"\n[constants]\nt_max = 1.0\nlr = 1.0\nregime = "gradient_flow"\n')
    assert cli.main(["run", str(config)]) == 1  # the ODE's regime must match online SGD
    assert "constants.regime: engine 'both' puts the ODE beside online SGD" in capsys.readouterr().err
    config.write_text('engine = "ode"\n[constants]\nt_max = 1.0\nlr = 1.0\n')
    monkeypatch.setattr(xr.backends, "list_engines", lambda: {"zarr": None})  # no NetCDF backend installed
    assert cli.main(["run", str(config)]) == 1
    assert "writes NetCDF: it needs scipy, netCDF4 or h5netcdf" in capsys.readouterr().err


def test_interrupted_in_memory_scan_keeps_finished_groups(monkeypatch):
    scan = small_ode_scan()
    eng = tl.scan.engine_for("ode")
    calls = []

    def run(configs):
        calls.append(len(configs))
        if len(calls) == 3:
            raise tl.Interrupted("Ctrl-C")
        return real(configs)

    real = eng.run
    import dataclasses

    monkeypatch.setitem(tl.scan.engines.ENGINES, "ode", dataclasses.replace(eng, run=run))
    with pytest.raises(tl.Interrupted) as exc:
        tl.scan.run(scan)
    part = exc.value.partial
    finished = part["status"] != ""
    assert int(finished.sum()) == sum(calls[:2])  # the two groups done before Ctrl-C, the rest not run
    monkeypatch.undo()
    ref = tl.scan.run(scan)
    np.testing.assert_array_equal(part["risk"].where(finished).values, ref["risk"].where(finished).values)


def test_store_of_another_version_refused_unless_allowed(tmp_path, monkeypatch, capsys):
    """Results of two versions need not agree bit for bit: resuming a store written by another version is refused
    (naming both versions) unless allowed explicitly, and the store then records both."""
    config = tmp_path / "v.toml"
    config.write_text('engine = "ode"\ngroup_size = 4\n[constants]\nactivation = "linear"\nd = 50\nt_max = 4.0\n'
                      '[axes]\nlr = [0.5, 1.0, 2.0]\nseed = [0, 1, 2]\n')
    path = tmp_path / "v.zarr"
    monkeypatch.setattr(store, "_version", lambda: "0.0.1.dev0")
    tl.scan.run(config, store=path, load_result=False)
    monkeypatch.undo()
    unmark(path, tl.scan.Scan.from_toml(config), 1)  # work left to do
    message = f"written by twolayer 0.0.1.dev0, this is twolayer {tl.__version__}.*allow_version_change=True"
    with pytest.raises(ValueError, match=message):
        tl.scan.run(config, store=path, resume=True)
    assert cli.main(["scan", str(config), "--resume", "--no-progress"]) == 1
    assert "--allow-version-change" in capsys.readouterr().err
    assert store.complete_groups(path) == {0, 2}  # nothing was computed
    assert cli.main(["scan", str(config), "--resume", "--allow-version-change", "--no-progress"]) == 0
    assert "1 computed, 2 already stored" in capsys.readouterr().out
    ds = tl.scan.open_dataset(path)
    assert ds.attrs["twolayer_version"] == f"0.0.1.dev0, {tl.__version__}"
    assert [store.group_record(path, g)["twolayer_version"] for g in range(3)] == \
        ["0.0.1.dev0", tl.__version__, "0.0.1.dev0"]
    ref = tl.scan.run(config)
    ref.attrs["twolayer_version"] = ds.attrs["twolayer_version"]
    identical(ds, ref)  # the same code computed both here: the same numbers
    tl.scan.run(config, store=path, resume=True)  # this version is recorded now: no flag needed any more


INTERRUPT_SCRIPT = textwrap.dedent("""
    import signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a shell may start a background job with SIGINT ignored
    from twolayer import cli
    sys.exit(cli.main(["scan", sys.argv[1], "--store", sys.argv[2], "--no-progress"]))
""")


def test_ctrl_c_in_process_then_resume(tmp_path, monkeypatch):
    """SIGINT to `twolayer scan` running in-process (12 groups, each ~0.05 s in the core): it stops at once with
    exit code 130 and a message, the store holds the finished groups (complete, nothing half-marked), and resuming
    computes only the others and gives the dataset of an uninterrupted run."""
    config, path, script = tmp_path / "c.toml", tmp_path / "c.zarr", tmp_path / "interrupt.py"
    config.write_text('engine = "ode"\ngroup_size = 1\n[constants]\nactivation = "erf"\nK = 2\nM = 2\nd = 100\n'
                      't_max = 100.0\nmethod = "rk4"\ndt = 0.01\nn_threads = 1\n'
                      '[axes]\nlr = [0.5, 1.0, 1.5, 2.0]\nseed = [0, 1, 2]\n')
    scan = tl.scan.Scan.from_toml(config)
    script.write_text(INTERRUPT_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), str(config), str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while (not path.exists() or len(store.complete_groups(path)) < 2) and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "interrupted: the finished groups are in" in err and "--resume" in err
    assert "Traceback" not in err
    finished = store.complete_groups(path)
    assert 2 <= len(finished) < 12, finished  # stopped midway
    for g in finished:  # what is marked complete reads back whole
        index, values = store.read_group(path, g)
        assert values["risk"].shape == (1, 1, 101) and str(values["status"][0, 0]) == "completed"
    ran = []
    real = executors.run_task
    monkeypatch.setattr(executors, "run_task", lambda task: ran.append(task.name) or real(task))
    resumed = tl.scan.run(scan, store=path, resume=True)
    names = {g.gid: g.name for g in tl.scan.make_groups(scan)}
    assert sorted(ran) == sorted(names[g] for g in names if g not in finished)  # no finished group again
    identical(resumed, tl.scan.run(scan))
