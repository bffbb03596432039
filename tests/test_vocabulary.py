"""The vocabulary of issue 25 (docs: conventions, "Vocabulary"): every old spelling of a renamed argument, attribute
or scan key still works for one release, warns with a DeprecationWarning naming the new spelling, and gives the same
result as the new one; twolayer.Status compares equal to the old status strings."""

from __future__ import annotations

import inspect
import warnings

import numpy as np
import pytest
import twolayer as tl
from twolayer import landscape as L

ST, TE = tl.networks.teacher_student(2, 2, 40, "erf", seed=0)
OV = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")


def _same_run(a: tl.Trajectory, b: tl.Trajectory) -> None:
    for name in ("t", "Q", "M", "a", "risk"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.status == b.status and a.message == b.message


def _old(match: str):
    return pytest.warns(DeprecationWarning, match=match)


# ------------------------------------------------------------------------------------------ arguments
def test_sgd_records_is_n_records() -> None:
    new = tl.sgd.simulate(ST, TE, lr=0.5, t_max=2.0, n_records=5, seed=1)
    with _old("'records' of twolayer.sgd.simulate is deprecated; use 'n_records'"):
        old = tl.sgd.simulate(ST, TE, lr=0.5, t_max=2.0, records=5, seed=1)
    assert len(new) == 5
    _same_run(new, old)
    with pytest.raises(TypeError, match="both 'records' and its new spelling 'n_records'"):
        tl.sgd.simulate(ST, TE, lr=0.5, t_max=2.0, records=5, n_records=5)


def test_sde_records_is_n_records() -> None:
    new = tl.sde.simulate(OV, lr=0.5, d=100, t_max=1.0, n_records=3, seeds=2)
    with _old("'records' of twolayer.sde.simulate"):
        old = tl.sde.simulate(OV, lr=0.5, d=100, t_max=1.0, records=3, seeds=2)
    for a, b in zip(new, old, strict=True):
        _same_run(a, b)


def test_descend_steps_and_records() -> None:
    new = tl.population.descend(ST, TE, 0.5, 30, n_records=4)
    with _old("'steps' of twolayer.population.descend"), _old("'records' of twolayer.population.descend"):
        old = tl.population.descend(ST, TE, lr=0.5, steps=30, records=4)
    _same_run(new, old)
    for fn in (tl.population.descend, tl.sgd.simulate, tl.sde.simulate):  # the default row count, as everywhere
        assert inspect.signature(fn).parameters["n_records"].default == 101


def test_ode_n_points_is_n_records() -> None:
    ov = tl.ode.plateau_overlaps()
    new = tl.ode.integrate(ov, "erf", lr=1.0, t_max=5.0, n_records=4)
    with _old("'n_points' of twolayer.ode.integrate is deprecated; use 'n_records'"):
        old = tl.ode.integrate(ov, "erf", lr=1.0, t_max=5.0, n_points=4)
    _same_run(new, old)
    assert len(new) == 4
    batch = tl.ode.integrate_batch([ov, ov], "erf", lr=[0.5, 1.0], t_max=5.0, n_records=3)
    with _old("'n_points' of twolayer.ode.integrate_batch"):
        old_batch = tl.ode.integrate_batch([ov, ov], "erf", lr=[0.5, 1.0], t_max=5.0, n_points=3)
    np.testing.assert_array_equal(batch.risk, old_batch.risk)
    with _old("'n_points'"):
        _same_run(tl.ode.plateau_example(t_max=5.0, n_points=3), tl.ode.plateau_example(t_max=5.0, n_records=3))


def test_large_batch_regime_steps_is_n_steps() -> None:
    s, t = tl.networks.teacher_student(K=2, M=2, d=10, activation="relu", seed=0)
    ov = tl.Overlaps.from_networks(s, t)
    new = tl.ode.integrate(ov, lr=0.5, regime="large_batch", batch_ratio=2.0, n_steps=3)
    with _old("'steps' of twolayer.ode.integrate"):
        old = tl.ode.integrate(ov, lr=0.5, regime="large_batch", batch_ratio=2.0, steps=3)
    _same_run(new, old)
    assert len(new) == 4


def test_batch_risk_final_is_final_risk() -> None:
    ov = tl.ode.plateau_overlaps()
    batch = tl.ode.integrate_batch([ov, ov], "erf", lr=[0.5, 1.0], t_max=300.0, n_records=3, risk_tol=[0.05, 0.05])
    assert list(batch.status) == ["converged", "converged"] and batch.n_converged == 2
    assert batch.success.tolist() == [True, True] and batch.n_diverged == 0
    with _old("attribute 'risk_final' of twolayer.results.BatchTrajectory is deprecated; use 'final_risk'"):
        np.testing.assert_array_equal(batch.risk_final, batch.final_risk)
    np.testing.assert_array_equal(batch.final_risk, [batch[0].final_risk, batch[1].final_risk])
    ds = batch.to_xarray()
    assert "final_risk" in ds and "risk_final" not in ds
    back = tl.BatchTrajectory.from_xarray(ds.rename({"final_risk": "risk_final"}))  # an older release's Dataset
    np.testing.assert_array_equal(back.final_risk, batch.final_risk)


def test_large_batch_steps_is_n_steps() -> None:
    s, t = tl.networks.teacher_student(K=2, M=2, d=50, activation="relu", seed=0)
    new = tl.large_batch.simulate_layerwise(s, t, lr=25.0, batch_size=100, n_steps=3, seed=0)
    with _old("'steps' of twolayer.large_batch.simulate_layerwise"):
        old = tl.large_batch.simulate_layerwise(s, t, lr=25.0, batch_size=100, steps=3, seed=0)
    _same_run(new.first, old.first)
    assert new.risk == old.risk


def test_as_schedule_steps_is_n_steps() -> None:
    f = lambda t: 0.5**t  # noqa: E731
    new = tl.schedules.as_schedule(f, n_steps=3)
    with _old("'steps' of twolayer.schedules.as_schedule"):
        old = tl.schedules.as_schedule(f, steps=3)
    assert new is not None and old is not None
    np.testing.assert_array_equal(new([0, 1, 2]), old([0, 1, 2]))


def test_multistart_k_and_n_students() -> None:
    new = L.multistart(3, 2, seed=0, K=4, max_iter=50)
    with _old("'k' of twolayer.landscape.multistart"), _old("'n_students'"):
        old = L.multistart(k=3, runs=2, seed=0, n_students=4, max_iter=50)
    np.testing.assert_array_equal(new.W, old.W)
    assert new.W.shape == (2, 4, 4) and new.meta["K"] == 4 and new.meta["M"] == 3


def test_plot_family_quantity_loss() -> None:
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    fam = L.continue_family(lambda k: (k - 1, 1), [6], [0.986704, -0.050413, -0.601512, 0.308011, 0.224516])
    with _old("quantity 'loss'"):
        ax = L.figures.plot_family(fam, "loss")
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), [fam[0].risk])


# ------------------------------------------------------------------------------------------ attributes
def test_landscape_loss_is_risk() -> None:
    teacher = L.identity_teacher(3)
    cp = L.refine(teacher.with_weights(np.eye(3) + 1e-3), teacher)
    with _old("attribute 'loss' of twolayer.landscape.critical.CriticalPoint is deprecated; use 'risk'"):
        assert cp.loss == cp.risk
    res = L.multistart(3, 2, seed=0, max_iter=50)
    with _old("attribute 'loss'"):
        np.testing.assert_array_equal(res.loss, res.risk)
    fam = L.continue_family(lambda k: (k - 1, 1), [6], [0.986704, -0.050413, -0.601512, 0.308011, 0.224516])
    with _old("attribute 'loss'"):
        assert fam[0].loss == fam[0].risk == fam[0].point.risk


def test_landscape_json_of_an_older_release_reads_loss() -> None:
    res = L.multistart(3, 2, seed=0, max_iter=50)
    text = L.to_json(res).replace('"risk"', '"loss"')
    np.testing.assert_array_equal(L.from_json(text).risk, res.risk)


def test_ensemble_dimension_is_member_and_old_run_datasets_read() -> None:
    ens = tl.sgd.simulate(ST, TE, lr=0.5, t_max=2.0, n_records=3, seeds=3)
    ds = ens.to_xarray()
    assert ds["risk"].dims == ("member", "t") and ds["run_id"].dims == ("member",)
    np.testing.assert_array_equal(ds["final_risk"], ens.final_risk)
    back = tl.Ensemble.from_xarray(ds.rename({"member": "run"}))  # a Dataset written by an older release
    for a, b in zip(back, ens, strict=True):
        np.testing.assert_array_equal(a.risk, b.risk)
    assert tl.sgd.Ensemble is tl.Ensemble  # the old import path


# ------------------------------------------------------------------------------------------ status
def test_status_is_a_str_enum_with_success() -> None:
    assert [s.value for s in tl.Status] == ["completed", "converged", "diverged", "max_steps", "interrupted"]
    assert [s.success for s in tl.Status] == [True, True, False, False, False]
    assert tl.Status.converged == "converged" and str(tl.Status.converged) == "converged"
    assert f"{tl.Status.max_steps:>10}" == " max_steps" and tl.Status("diverged") is tl.Status.diverged
    run = tl.sgd.simulate(ST, TE, lr=0.5, t_max=1.0, n_records=2)
    assert isinstance(run.status, tl.Status) and run.status == "completed" and run.status.success
    ens = tl.sgd.simulate(ST, TE, lr=0.5, t_max=50.0, n_records=51, seeds=2, risk_rtol=0.5)
    assert ens.status == ["converged", "converged"] and all(isinstance(s, tl.Status) for s in ens.status)
    assert ens.success.tolist() == [True, True]
    assert isinstance(tl.population.descend(ST, TE, 0.5, 3).status, tl.Status)


def test_stochastic_messages_come_from_the_core() -> None:
    """SGD and SDE build their messages from the core's text (run_messages.hpp), as the ODE does."""
    run = tl.sgd.simulate(ST, TE, lr=0.5, t_max=2.0, n_records=3, batch_size=2)
    assert run.message == tl._core.sgd_completed_message(80, 160, 0) == "80 SGD steps (160 samples)"
    ens = tl.sgd.simulate(ST, TE, lr=0.5, t_max=50.0, n_records=51, seeds=1, risk_tol=0.1)
    r = ens[0]
    assert r.status == "converged"
    assert r.message == tl._core.converged_message(r.risk[-1], 0.1, 0.1, 0.0, r.stop_time)
    assert r.message == f"excess risk {r.risk[-1]:g} reached the threshold 0.1 (risk_tol = 0.1) at t = {r.stop_time:g}"
    sde = tl.sde.simulate(OV, lr=0.5, d=100, t_max=1.0, n_records=3, seeds=1)
    assert sde[0].message == "100 Euler-Maruyama steps of dt = 0.01"


# ------------------------------------------------------------------------------------------ scan keys
@pytest.mark.parametrize("old", ["records", "n_points"])
def test_sgd_scan_old_and_new_records(old: str) -> None:
    base = {"K": 2, "M": 2, "d": 20, "t_max": 1.0, "lr": 0.5}
    new = tl.scan.run(tl.scan.Scan("sgd", constants={**base, "n_records": 3}))
    with _old(f"parameter '{old}' of constants of scan engine 'sgd' is deprecated; use 'n_records'"):
        sc = tl.scan.Scan("sgd", constants={**base, old: 3})
    assert sc.constants["n_records"] == 3 and old not in sc.constants
    np.testing.assert_array_equal(tl.scan.run(sc)["risk"].values, new["risk"].values)
    assert new.sizes["t"] == 3 and new["risk"].dims == ("member", "t")


def test_ode_scan_old_keys() -> None:
    base = {"K": 1, "M": 1, "d": 10, "lr": 0.5}
    new = tl.scan.run(tl.scan.Scan("ode", constants={**base, "t_max": 1.0, "n_records": 3}))
    with _old("parameter 'n_points' of constants of scan engine 'ode'"):
        old = tl.scan.run(tl.scan.Scan("ode", constants={**base, "t_max": 1.0, "n_points": 3}))
    np.testing.assert_array_equal(new["risk"].values, old["risk"].values)
    assert "final_risk" in new and new.sizes["t"] == 3
    with _old("parameter 'steps' of constants of scan engine 'ode'"):
        sc = tl.scan.Scan("ode", constants={**base, "regime": "large_batch", "batch_ratio": 1.0, "steps": 2})
    assert sc.constants["n_steps"] == 2


def test_experiment_both_takes_n_records_for_both_engines(tmp_path) -> None:
    """``twolayer run`` with engine "both": one n_records for the ODE and SGD (the old n_points / records still
    read, with a warning)."""
    pytest.importorskip("matplotlib")
    from twolayer import cli

    config = tmp_path / "both.toml"
    config.write_text('engine = "both"\n[constants]\nK = 1\nM = 1\nd = 20\nlr = 0.5\nt_max = 1.0\nn_records = 3\n')
    assert cli.main(["run", str(config), "--no-progress"]) == 0
    import xarray as xr

    for engine in ("ode", "sgd"):
        with xr.open_dataset(tmp_path / f"both.{engine}.nc") as ds:
            assert ds.sizes["t"] == 3


def test_scan_old_key_as_an_axis_keeps_the_axis_order() -> None:
    with _old("parameter 'steps' of axes of scan engine 'descend'"):
        sc = tl.scan.Scan("descend", constants={"lr": 0.5, "d": 10}, axes={"steps": [2, 4], "seed": [0, 1]})
    assert list(sc.dims) == ["n_steps", "seed"]
    with pytest.raises(ValueError, match="both 'steps' and its new spelling 'n_steps'"):
        tl.scan.Scan("descend", constants={"lr": 0.5, "n_steps": 3, "steps": 3})
    with _old("'steps'"), pytest.raises(ValueError, match="'n_steps' is already given in constants"):
        tl.scan.Scan("descend", constants={"lr": 0.5, "n_steps": 3}, axes={"steps": [2, 4]})


def test_store_of_an_older_release_with_old_keys_still_opens_and_resumes(tmp_path) -> None:
    """A store written before the renames recorded its definition with the old spellings and their hash: its
    definition still reads (with a warning) and the same old TOML resumes it."""
    pytest.importorskip("zarr")
    import json

    import zarr

    old_constants = {"K": 1, "M": 1, "d": 10, "t_max": 1.0, "lr": 0.5, "n_points": 3}
    with _old("'n_points'"):
        old = tl.scan.Scan("ode", constants=old_constants, axes={"noise": [0.0, 0.1]})
    assert len(old.digests()) == 2 and old.digests()[0] == old.digest()
    path = tmp_path / "old.zarr"
    tl.scan.run(old, store=path, load_result=False)
    # what the older release recorded: the definition as written and its hash
    group = zarr.open_group(str(path), mode="a", zarr_format=3)
    group.attrs["scan_definition"] = json.dumps({**old.to_dict(), "constants": old_constants})
    group.attrs["scan_hash"] = old.digests()[1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zarr: consolidated metadata is not in the v3 spec
        zarr.consolidate_metadata(str(path), zarr_format=3)
    assert tl.scan.store.definition(path).digest() == old.digest()  # the stored spellings are data: no warning
    with _old("'n_points'"):
        again = tl.scan.Scan("ode", constants=old_constants, axes={"noise": [0.0, 0.1]})
    summary = tl.scan.run(again, store=path, resume=True, load_result=False)  # nothing left to compute
    assert summary.computed == 0 and summary.skipped == summary.groups
    with _old("'n_points'"), pytest.raises(ValueError, match="different scan definition"):  # still refused
        tl.scan.run(tl.scan.Scan("ode", constants={**old_constants, "n_points": 4}), store=path, resume=True)
    ds = tl.scan.open_dataset(path)
    assert ds["risk"].shape == (2, 3)


# ------------------------------------------------------------------------------------------ demo configurations
def test_demo_config_old_fields() -> None:
    """DemoConfig's units (K = M), steps and records, PlateauConfig's records: keywords and attributes."""
    from twolayer import demo

    new = demo.DemoConfig(K=2, M=2, d=8, n_steps=10, seeds=(0,), n_records=3)
    with _old("'units' of twolayer.demo.DemoConfig is deprecated; use 'K' and 'M'"), _old("'steps'"), \
            _old("'records'"):
        old = demo.DemoConfig(units=2, d=8, steps=10, seeds=(0,), records=3)
    assert old == new
    a, b = demo.run_symmetry_breaking(new), demo.run_symmetry_breaking(old)
    for init in new.inits:
        _same_run(a.runs[init][0], b.runs[init][0])
    with _old("attribute 'steps' of twolayer.demo.DemoConfig is deprecated; use 'n_steps'"):
        assert old.steps == 10
    with _old("attribute 'records'"):
        assert old.records == 3
    with _old("'units'"):
        assert old.units == 2
    with _old("attribute 'steps'"), _old("attribute 'records'"), _old("'units'"):
        old.steps, old.records, old.units = 20, 4, 3
    assert (old.n_steps, old.n_records, old.K, old.M) == (20, 4, 3, 3)
    old.M = 4
    with _old("'units'"), pytest.raises(ValueError, match="K = 3 and M = 4 differ"):
        _ = old.units
    with pytest.raises(TypeError, match="both 'steps' and its new spelling 'n_steps'"):
        demo.DemoConfig(steps=1, n_steps=1)
    with pytest.raises(TypeError, match="both 'units' and its new spelling"):
        demo.DemoConfig(units=1, K=1)
    with _old("'records' of twolayer.demo.PlateauConfig"):
        plateau = demo.PlateauConfig(d=20, t_max=2.0, seeds=2, records=3)
    assert plateau == demo.PlateauConfig(d=20, t_max=2.0, seeds=2, n_records=3)
    with _old("attribute 'records' of twolayer.demo.PlateauConfig"):
        assert plateau.records == 3


def test_demo_config_checks_name_the_new_fields() -> None:
    from twolayer import demo

    with pytest.raises(ValueError, match=r"config\.n_records"):
        demo.run_symmetry_breaking(demo.DemoConfig(n_records=1))
    with pytest.raises(ValueError, match=r"config\.M"):
        demo.run_symmetry_breaking(demo.DemoConfig(M=0))
    with pytest.raises(TypeError):  # keyword-only: DemoConfig(4, 50) no longer means units = 4, d = 50
        demo.DemoConfig(4, 50)  # type: ignore[misc]


def test_demo_k_differs_from_m() -> None:
    """K and M are separate fields now: a student of 3 units learns a teacher of 2."""
    from twolayer import demo

    res = demo.run_symmetry_breaking(demo.DemoConfig(K=3, M=2, d=10, n_steps=5, seeds=(0,), n_records=2,
                                                     inits=("gaussian",)))
    run = res.runs["gaussian"][0]
    assert run.M.shape[-2:] == (3, 2) and run.Q.shape[-2:] == (3, 3)


# ------------------------------------------------------------------------------------------ full-batch GD
def test_full_batch_dimension_is_member() -> None:
    pytest.importorskip("xarray")
    s = tl.Network.random(2, 30, "erf", seed=0)
    run = tl.full_batch.simulate(s, tl.targets.hermite({(1,): 1.0}, d=30, seed=1), alpha=2.0, lr=0.5, n_steps=2,
                                 seeds=2, n_test=200)
    ds = run.to_xarray()
    assert ds["train_risk"].dims == ("member", "step") and ds["M"].dims[0] == "member"
    np.testing.assert_array_equal(ds["test_risk"].values, run.test_risk)
    sc = tl.scan.Scan("full_batch", constants={"K": 1, "M": 1, "d": 30, "alpha": 2.0, "lr": 0.5, "n_steps": 2,
                                               "seeds": 2})
    out = tl.scan.run(sc)
    assert out["train_risk"].dims == ("member", "step") and out["M"].dims == ("member", "step", "student", "teacher")


def test_store_with_run_dimension_opens_with_member(tmp_path) -> None:
    """A store written before the rename (stacked runs along ``run``) opens with dimension ``member``."""
    pytest.importorskip("zarr")
    import json

    path = tmp_path / "old.zarr"
    sc = tl.scan.Scan("sgd", constants={"K": 1, "M": 1, "d": 20, "t_max": 1.0, "lr": 0.5, "n_records": 3,
                                        "seeds": 2}, axes={"noise": [0.0, 0.1]})
    new = tl.scan.run(sc, store=path)
    renamed = 0
    for meta in path.rglob("zarr.json"):  # what the older release wrote: the same arrays along "run"
        doc = json.loads(meta.read_text())
        if "member" in (doc.get("dimension_names") or []):
            doc["dimension_names"] = ["run" if d == "member" else d for d in doc["dimension_names"]]
            meta.write_text(json.dumps(doc))
            renamed += 1
    assert renamed > 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # zarr: consolidated metadata is not in the v3 spec
        ds = tl.scan.open_dataset(path)
        assert "run" not in ds.dims and ds["risk"].dims == new["risk"].dims
        np.testing.assert_array_equal(ds["risk"].values, new["risk"].values)


# ------------------------------------------------------------------------------------------ landscape
def test_real_k_family_steps_is_n_steps() -> None:
    one = np.zeros(1)
    fam = L.RealKFamily(one, one[:, None], one[:, None], one, one, {}, {}, one, n_steps=7)
    with _old("attribute 'steps' of twolayer.landscape.realk.RealKFamily is deprecated; use 'n_steps'"):
        assert fam.steps == fam.n_steps == 7
