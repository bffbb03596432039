"""tl.sgd.simulate batched over parameters: per-run lr / lr_readout / noise in one core call (bitwise equal to
the runs done one by one), per-run early stop (risk_tol / risk_rtol), and Ensemble results that stack."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer.networks import teacher_student

REGIMES = {
    "online": dict(batch_size=1),
    "mini-batch": dict(batch_size=4),
    "training set": dict(n_samples=150, batch_size=10),
}


def _alone(st, te, j: int, grid: dict, **kw) -> tl.Trajectory:
    """Run j of a batched call, done by itself."""
    one = tl.sgd.simulate(
        st,
        te,
        lr=float(grid["lr"][j]),
        lr_readout=float(grid["lr_readout"][j]),
        noise=float(grid["noise"][j]),
        seeds=[grid["seeds"][j]],
        **kw,
    )
    return one[0]


def _assert_same_run(a: tl.Trajectory, b: tl.Trajectory) -> None:
    assert a.status == b.status
    for name in ("t", "Q", "M", "a", "risk"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    if a.student is not None or b.student is not None:
        np.testing.assert_array_equal(a.student.W, b.student.W)
        np.testing.assert_array_equal(a.student.a, b.student.a)


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("regime", list(REGIMES))
def test_grid_in_one_call_equals_runs_one_by_one(regime: str, n_threads: int) -> None:
    st, te = teacher_student(2, 2, 60, "erf", seed=3)
    grid = tl.sgd.grid(seeds=[0, 5], lr=[0.3, 0.9], lr_readout=[0.0, 0.2], noise=[0.0, 0.3])
    kw = dict(t_max=2.0, n_records=9, seed=11, **REGIMES[regime])
    ens = tl.sgd.simulate(st, te, n_threads=n_threads, **kw, **grid)
    assert len(ens) == 16 and ens.status == ["completed"] * 16
    for j, run in enumerate(ens):
        _assert_same_run(run, _alone(st, te, j, grid, **kw))
        assert run.meta["lr"] == grid["lr"][j] and run.meta["noise"] == grid["noise"][j]
    # the parameters matter (the runs are not all the same), and a scalar is the same as a constant array
    assert not np.array_equal(ens[0].risk, ens[-2].risk)
    const = tl.sgd.simulate(st, te, lr=np.full(16, 0.3), seeds=16, **kw)
    scalar = tl.sgd.simulate(st, te, lr=0.3, seeds=16, **kw)
    np.testing.assert_array_equal(const.risk, scalar.risk)


def test_single_run_without_seeds_is_run_zero_of_a_grid() -> None:
    st, te = teacher_student(2, 2, 50, "erf", seed=0)
    ens = tl.sgd.simulate(st, te, lr=[0.4, 0.7], noise=[0.1, 0.2], seeds=[0, 0], t_max=1.0, n_records=5)
    single = tl.sgd.simulate(st, te, lr=0.7, noise=0.2, t_max=1.0, n_records=5)
    _assert_same_run(ens[1], single)


def test_per_run_starts_and_parameters_together() -> None:
    st, te = teacher_student(2, 1, 40, "erf", seed=1)
    other = tl.Network.random(2, 40, "erf", seed=9)
    ens = tl.sgd.simulate([st, other, st], te, lr=[0.2, 0.5, 0.8], seeds=3, t_max=1.0, n_records=4)
    for j, start in enumerate([st, other, st]):
        alone = tl.sgd.simulate(start, te, lr=[0.2, 0.5, 0.8][j], seeds=[j], t_max=1.0, n_records=4)
        _assert_same_run(ens[j], alone[0])


def test_a_diverging_run_does_not_change_the_others() -> None:
    d = 100
    st, te = teacher_student(2, 1, d, "quadratic", seed=0)
    kw = dict(t_max=5.0, n_records=6, seed=2)
    ens = tl.sgd.simulate(st, te, lr=[0.05, 500.0, 0.08], seeds=[0, 1, 2], n_threads=2, **kw)
    assert ens.status == ["completed", "diverged", "completed"]
    assert ens.n_diverged == 1 and np.isfinite(ens.stop_time[1]) and np.isnan(ens.stop_time[[0, 2]]).all()
    assert ens.stop_time[1] == ens[1].meta["stop_step"] / d
    without = tl.sgd.simulate(st, te, lr=[0.05, 0.08], seeds=[0, 2], **kw)
    _assert_same_run(ens[0], without[0])
    _assert_same_run(ens[2], without[1])


def _crossing(t: np.ndarray, risk: np.ndarray, threshold: float) -> tuple[int, float]:
    """First record below the threshold and the linearly interpolated crossing time."""
    k = int(np.flatnonzero(risk < threshold)[0])
    if k == 0:
        return 0, float(t[0])
    return k, float(t[k - 1] + (t[k] - t[k - 1]) * (risk[k - 1] - threshold) / (risk[k - 1] - risk[k]))


def test_early_stop_risk_tol_per_run() -> None:
    st, te = teacher_student(2, 2, 80, "erf", seed=4)
    kw = dict(lr=0.8, t_max=20.0, n_records=41, seed=1, seeds=4)
    full = tl.sgd.simulate(st, te, **kw)
    assert full.status == ["completed"] * 4
    # per-run thresholds between each run's initial and final risk, plus one never reached (below the minimum)
    tol = np.array([np.sqrt(r.risk[0] * r.risk[-1]) for r in full])
    tol[3] = 0.5 * full[3].risk.min()
    ens = tl.sgd.simulate(st, te, risk_tol=tol, **kw)
    assert ens.status == ["converged"] * 3 + ["completed"]
    assert ens.n_converged == 3 and np.isnan(ens.stop_time[3])
    for j in range(3):
        k, t_cross = _crossing(full[j].t, full[j].risk, tol[j])
        assert k >= 1
        run = ens[j]
        assert len(run) == k + 1  # the crossing record is the last row
        np.testing.assert_array_equal(run.risk, full[j].risk[: k + 1])
        np.testing.assert_array_equal(run.Q, full[j].Q[: k + 1])
        assert full[j].t[k - 1] <= ens.stop_time[j] <= full[j].t[k]  # within one record spacing
        assert ens.stop_time[j] == pytest.approx(t_cross, rel=1e-12)
        assert run.meta["stop_step"] == round(full[j].t[k] * 80)
        assert run.message.startswith(f"excess risk {run.risk[-1]:g} reached the threshold ")
        assert run.student is not None  # the weights at the stop
    _assert_same_run(ens[3], full[3])


def test_early_stop_relative_to_the_initial_risk() -> None:
    st, te = teacher_student(2, 2, 80, "erf", seed=4)
    kw = dict(lr=[0.6, 1.0], t_max=20.0, seed=1, seeds=2)
    full = tl.sgd.simulate(st, te, n_records=41, **kw)
    rtol = np.array([0.5, 0.25])
    # recorded from t = 0.5 on: the initial risk is still the one at step 0
    times = full.t[1:]
    ens = tl.sgd.simulate(st, te, times=times, risk_rtol=rtol, **kw)
    for j in range(2):
        threshold = rtol[j] * full[j].risk[0]
        k, t_cross = _crossing(full[j].t, full[j].risk, threshold)
        assert k >= 2 and ens[j].status == "converged"
        np.testing.assert_array_equal(ens[j].risk, full[j].risk[1 : k + 1])
        assert ens.stop_time[j] == pytest.approx(t_cross, rel=1e-12)
    # both criteria: the larger threshold wins (stop when either is met)
    both = tl.sgd.simulate(st, te, n_records=41, risk_rtol=0.25, risk_tol=0.5 * full[1].risk[0], **kw)
    k, t_cross = _crossing(full[1].t, full[1].risk, max(0.25, 0.5) * full[1].risk[0])
    assert both.stop_time[1] == pytest.approx(t_cross, rel=1e-12)


def test_early_stop_at_the_first_record() -> None:
    st, te = teacher_student(2, 2, 50, "erf", seed=0)
    r0 = tl.sgd.simulate(st, te, lr=0.5, t_max=1.0, n_records=3).risk[0]
    tr = tl.sgd.simulate(st, te, lr=0.5, t_max=1.0, n_records=3, risk_tol=2 * r0)
    assert tr.status == "converged" and len(tr) == 1 and tr.stop_time == 0.0


def test_ensemble_to_xarray_coordinates_and_attrs() -> None:
    pytest.importorskip("xarray")
    st, te = teacher_student(2, 3, 60, "erf", seed=2)
    grid = tl.sgd.grid(seeds=2, lr=[0.5, 1.0], noise=[0.0, 0.1])
    full = tl.sgd.simulate(st, te, t_max=6.0, n_records=13, **grid)
    tol = 0.5 * full[0].risk[0]
    ens = tl.sgd.simulate(st, te, t_max=6.0, n_records=13, risk_tol=[tol] + [1e-12] * 7, **grid)
    ds = ens.to_xarray()
    assert ds["Q"].dims == ("member", "t", "student", "student2")
    assert ds["M"].dims == ("member", "t", "student", "teacher") and ds.sizes["teacher"] == 3
    assert ds["risk"].dims == ("member", "t") and ds["status"].dims == ("member",)
    assert ds["stop_time"].dims == ("member",)
    for name in ("run_id", "lr", "lr_readout", "noise", "risk_tol", "risk_rtol"):
        assert ds[name].dims == ("member",)
    np.testing.assert_array_equal(ds["lr"], grid["lr"])
    np.testing.assert_array_equal(ds["noise"], grid["noise"])
    np.testing.assert_array_equal(ds["run_id"], grid["seeds"])
    assert np.isnan(ds["risk_rtol"]).all()
    for name in [*ds.data_vars, *ds.coords]:
        assert "long_name" in ds[name].attrs and "units" in ds[name].attrs, name
    assert ds["t"].attrs["units"] == "steps / d" and ds["stop_time"].attrs["units"] == "steps / d"
    # the stopped run is padded with NaN after its last record; the others are the runs' own arrays
    assert ds["status"].values[0] == "converged"
    n0 = len(ens[0])
    np.testing.assert_array_equal(ds["risk"].values[0, :n0], ens[0].risk)
    assert np.isnan(ds["risk"].values[0, n0:]).all() and n0 < 13
    np.testing.assert_array_equal(ds["Q"].values[1], ens[1].Q)
    assert ds["stop_time"].values[0] == ens.stop_time[0]
    # the grid unstacks into labelled axes
    cube = ds.set_index(member=["lr", "noise", "run_id"]).unstack("member")
    assert set(cube["risk"].dims) == {"t", "lr", "noise", "run_id"}


def test_statistics_are_over_runs_of_identical_parameters() -> None:
    st, te = teacher_student(2, 2, 60, "erf", seed=0)
    grid = tl.sgd.grid(seeds=3, lr=[0.4, 0.8])
    ens = tl.sgd.simulate(st, te, t_max=2.0, n_records=5, **grid)
    with pytest.raises(ValueError, match="lr"):
        ens.mean()
    point = ens.select(lr=0.8)
    assert list(point.run_ids) == [0, 1, 2]
    same = tl.sgd.simulate(st, te, lr=0.8, t_max=2.0, n_records=5, seeds=3)
    np.testing.assert_array_equal(point.mean().risk, same.mean().risk)
    assert point.mean().meta["lr"] == 0.8
    with pytest.raises(ValueError, match="momentum"):
        ens.select(momentum=0.1)
    # converged runs are successes, counted apart from the completed runs that enter the statistics
    r0 = same[0].risk[0]
    stopped = tl.sgd.simulate(st, te, lr=0.8, t_max=2.0, n_records=5, seeds=3, risk_tol=[2 * r0, 1e-12, 1e-12])
    assert stopped.n_converged == 1 and stopped.Q.shape[0] == 2
    assert "1 converged" in stopped.mean().message


def test_progress_bar_with_per_run_parameters() -> None:
    pytest.importorskip("tqdm")
    st, te = teacher_student(2, 2, 50, "erf", seed=0)
    kw = dict(t_max=5.0, n_records=6, **tl.sgd.grid(seeds=2, lr=[0.3, 0.6], noise=[0.0, 0.1]))
    with_bar = tl.sgd.simulate(st, te, progress=True, **kw)
    without = tl.sgd.simulate(st, te, **kw)
    np.testing.assert_array_equal(with_bar.risk, without.risk)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (dict(lr=[0.5, 0.5]), r"lr: expected a number or a 1-d array of 3 values"),
        (dict(lr=[0.5, -0.1, 0.5]), r"lr\[1\]: expected a finite number > 0"),
        (dict(lr=[0.5, 0.0, 0.5]), r"lr\[1\]"),
        (dict(lr=[[0.5, 0.5, 0.5]]), r"lr: expected a number or a 1-d array"),
        (dict(noise=[0.1, np.nan, 0.1]), r"noise\[1\]: expected a finite number >= 0, got nan"),
        (dict(noise=[0.1, 0.1, -1.0]), r"noise\[2\]"),
        (dict(lr_readout=[0.1, -0.1, 0.1]), r"lr_readout\[1\]"),
        (dict(lr_readout=np.ones(4)), r"lr_readout: .* 3 values"),
        (dict(risk_tol=0.0), r"risk_tol"),
        (dict(risk_tol=[0.1, 0.1]), r"risk_tol"),
        (dict(risk_rtol=[0.1, np.inf, 0.1]), r"risk_rtol"),
        (dict(risk_rtol=-0.5), r"risk_rtol"),
        (dict(lr=[0.5, 0.5, 0.5], seeds=[0, 0, 1]), r"seeds: run indices must be distinct"),
        (dict(lr=[0.5, 0.6], seeds=None), r"lr: .*give seeds="),
    ],
)
def test_bad_per_run_input_names_the_argument(change: dict, match: str) -> None:
    st, te = teacher_student(2, 2, 20, "erf", seed=0)
    kw = {**dict(lr=0.5, t_max=1.0, seeds=3), **change}
    with pytest.raises(ValueError, match=match):
        tl.sgd.simulate(st, te, **kw)


def test_bad_per_run_types() -> None:
    st, te = teacher_student(2, 2, 20, "erf", seed=0)
    with pytest.raises(TypeError, match=r"lr: expected a real number, got '0.5'"):
        tl.sgd.simulate(st, te, lr="0.5", t_max=1.0, seeds=3)
    with pytest.raises(TypeError, match=r"noise: expected an array of real numbers"):
        tl.sgd.simulate(st, te, lr=0.5, noise=["0", "0", "0"], t_max=1.0, seeds=3)
    with pytest.raises(TypeError, match=r"lr: expected an array of real numbers"):
        tl.sgd.simulate(st, te, lr=[0.5, None, 0.5], t_max=1.0, seeds=3)


def test_bad_grid_input() -> None:
    with pytest.raises(ValueError, match="momentum"):
        tl.sgd.grid(seeds=2, momentum=[0.1])
    with pytest.raises(ValueError, match=r"lr\[1\]: expected a finite number > 0, got nan"):
        tl.sgd.grid(seeds=2, lr=[0.1, np.nan])
    with pytest.raises(TypeError, match="noise"):
        tl.sgd.grid(seeds=2, noise=["a"])
    with pytest.raises(ValueError, match="seeds"):
        tl.sgd.grid(seeds=0, lr=[0.1])


def test_ensemble_dataset_stores_the_teacher() -> None:
    st, te = teacher_student(2, 3, 40, "erf", seed=0)
    ds = tl.sgd.simulate(st, te, lr=0.5, t_max=1.0, seeds=2).to_xarray()
    np.testing.assert_array_equal(ds["P"].values, te.W @ te.W.T / te.scale)
    np.testing.assert_array_equal(ds["v"].values, te.effective_a)
    assert ds["P"].attrs["units"] == "1" and "teacher-teacher" in ds["P"].attrs["long_name"]


def test_ensemble_netcdf_round_trip_and_restart(tmp_path) -> None:
    """to_xarray -> NetCDF -> Ensemble.from_xarray gives back every run (rows, status, message, stop time,
    parameters, stream key, meta) bit for bit, and the ODE restarts from a restored run's last state exactly as
    from the original's."""
    xr = pytest.importorskip("xarray")
    st, te = teacher_student(2, 3, 60, "erf", seed=2)
    grid = tl.sgd.grid(seeds=2, lr=[0.5, 1.0], noise=[0.0, 0.1])
    full = tl.sgd.simulate(st, te, t_max=4.0, n_records=9, **grid)
    tol = 0.5 * full[0].risk[0]
    ens = tl.sgd.simulate(st, te, t_max=4.0, n_records=9, risk_tol=[tol] + [1e-12] * 7, **grid)
    assert ens[0].status == "converged" and len(ens[0]) < 9  # a run that stopped early, padded in the dataset
    path = tmp_path / "ensemble.nc"
    ens.to_xarray().to_netcdf(path)
    with xr.open_dataset(path) as ds:
        back = tl.sgd.Ensemble.from_xarray(ds.load())
    assert len(back) == len(ens) and back.seed == ens.seed
    np.testing.assert_array_equal(back.t, ens.t)
    np.testing.assert_array_equal(back.run_ids, ens.run_ids)
    assert list(back.params) == list(ens.params)
    for name, column in ens.params.items():
        np.testing.assert_array_equal(back.params[name], column, err_msg=name)
    np.testing.assert_array_equal(back.stop_time, ens.stop_time)
    assert back.status == ens.status
    for a, b in zip(back, ens, strict=True):
        assert a.status == b.status and a.student is None  # the final weights are not stored
        for name in ("t", "Q", "M", "a", "risk"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert a.stop_time == b.stop_time or (np.isnan(a.stop_time) and np.isnan(b.stop_time))
        assert a.message == b.message and a.time_unit == b.time_unit
        np.testing.assert_array_equal(a.P, b.P)
        np.testing.assert_array_equal(a.v, b.v)
        np.testing.assert_equal(a.meta, {k: (int(v) if isinstance(v, bool) else v) for k, v in b.meta.items()})
    assert back[0].meta["stop_step"] == ens[0].meta["stop_step"]
    np.testing.assert_array_equal(back.select(lr=1.0, noise=0.1).mean().risk,
                                  ens.select(lr=1.0, noise=0.1).mean().risk)
    # restart the ODE from a restored run's last state
    times = np.linspace(0.0, 1.0, 3)
    restarted = tl.ode.integrate(back[3].overlaps_at(-1), lr=1.0, times=times)
    original = tl.ode.integrate(ens[3].overlaps_at(-1), lr=1.0, times=times)
    np.testing.assert_array_equal(restarted.risk, original.risk)
    np.testing.assert_array_equal(restarted.Q[0], ens[3].Q[-1])
