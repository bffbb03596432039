"""Batches of ODE systems (issue 10, ODE side): stacked input, per-member stops with located first passage,
stacked results with xarray/NetCDF round trips, the shared output grid and the activation convention."""

from __future__ import annotations

import math

import numpy as np
import pytest
import twolayer as tl
from twolayer.networks import teacher_student

xr = pytest.importorskip("xarray")


def random_overlaps(K, M, seed=0, d=None):
    rng = np.random.default_rng(seed)
    d = d or (K + M + 5)
    X = rng.standard_normal((K + M, d)) / np.sqrt(d)
    Om = X @ X.T
    return tl.Overlaps(Om[:K, :K], Om[:K, K:], Om[K:, K:], 1 + 0.3 * rng.standard_normal(K),
                       1 + 0.3 * rng.standard_normal(M))


def assert_same(batch_member: tl.Trajectory, single: tl.Trajectory) -> None:
    """Bitwise equality of everything a run produces."""
    assert batch_member.status == single.status
    assert batch_member.message == single.message
    for name in ("t", "Q", "M", "a", "risk", "P", "v"):
        np.testing.assert_array_equal(getattr(batch_member, name), getattr(single, name), err_msg=name)
    np.testing.assert_array_equal(batch_member.stop_time, single.stop_time)
    for key in ("n_rhs", "n_steps", "n_rejected", "stop_time"):
        np.testing.assert_array_equal(batch_member.meta[key], single.meta[key], err_msg=key)


METHODS = {"euler": dict(method="euler", dt=0.01), "rk4": dict(method="rk4", dt=0.02),
           "adaptive": dict(method="adaptive", rtol=1e-9, atol=1e-11)}


# ------------------------------------------------------------------------------- stacked = list = one by one


@pytest.mark.parametrize("method", list(METHODS))
def test_stacked_list_and_single_runs_agree_bitwise(method):
    opts = METHODS[method]
    same = [random_overlaps(2, 2, seed=s) for s in range(5)]
    B = len(same)
    lr = np.linspace(0.4, 1.2, B)
    lr_a = np.array([0.0, 0.2, 0.0, 0.5, 0.1])
    noise = np.array([0.0, 0.1, 0.3, 0.0, 0.05])
    risk_tol = np.array([0.0, 0.0, 0.14, 0.0, 0.0])  # member 2 stops early (between output times)
    ts = np.linspace(0, 8, 9)
    stack = tl.BatchOverlaps.stack(same)
    stacked = tl.ode.integrate_batch(stack, "erf", lr=lr, lr_readout=lr_a, noise=noise, risk_tol=risk_tol,
                                     times=ts, n_threads=2, **opts)
    listed = tl.ode.integrate_batch(same, "erf", lr=lr, lr_readout=lr_a, noise=noise, risk_tol=risk_tol,
                                    times=ts, n_threads=1, **opts)
    assert isinstance(stacked, tl.BatchTrajectory) and len(stacked) == B
    assert stacked.Q.shape == (B, len(ts), 2, 2) and stacked.risk.shape == (B, len(ts))
    assert stacked.status[2] == "converged" and stacked.n_recorded[2] < len(ts)
    assert np.all(np.isnan(stacked.risk[2, stacked.n_recorded[2]:]))  # the documented fill
    assert np.isnan(stacked.stop_time[0]) and stacked.stop_time[2] > 0
    for b, ov in enumerate(same):
        single = tl.ode.integrate(ov, "erf", lr=lr[b], lr_readout=lr_a[b], noise=noise[b],
                                  risk_tol=risk_tol[b] or None, times=ts, **opts)
        assert_same(stacked[b], single)
        assert_same(listed[b], single)
    for b, tr in enumerate(stacked):  # iteration as before: one Trajectory per member
        assert_same(tr, stacked[b])
    assert_same(stacked[-1], stacked[B - 1])
    with pytest.raises(IndexError, match="member 5 out of range"):
        stacked[5]
    empty = tl.ode.integrate_batch([], "erf", lr=1.0, times=ts, **opts)
    assert len(empty) == 0 and list(empty) == [] and empty.Q.shape[:2] == (0, len(ts))


@pytest.mark.parametrize("method", list(METHODS))
def test_mixed_shapes_in_one_call(method):
    opts = METHODS[method]
    members = [random_overlaps(2, 2, seed=0), random_overlaps(3, 1, seed=1), random_overlaps(2, 2, seed=2),
               random_overlaps(1, 3, seed=3)]
    lr = [0.5, 0.7, 0.9, 0.3]
    ts = np.linspace(0, 3, 4)
    batch = tl.ode.integrate_batch(members, "erf", lr=lr, times=ts, **opts)
    # padded with NaN to the largest K = 3 and M = 3, in input order
    assert batch.Q.shape == (4, 4, 3, 3) and batch.M.shape == (4, 4, 3, 3)
    assert list(batch.n_student) == [2, 3, 2, 1] and list(batch.n_teacher) == [2, 1, 2, 3]
    assert np.all(np.isnan(batch.Q[0, :, 2, :])) and np.all(np.isnan(batch.M[1, :, :, 1:]))
    for b, ov in enumerate(members):
        assert_same(batch[b], tl.ode.integrate(ov, "erf", lr=lr[b], times=ts, **opts))


def test_stiff_or_diverging_member_does_not_change_the_others():
    """Adaptive step sizes are per member: adding stiff members (huge lr: many more, and rejected, steps) leaves
    the others' steps and rows alone; so does a diverging member (linear units, lr > 2)."""
    calm = [random_overlaps(2, 2, seed=s) for s in range(3)]
    stiff = random_overlaps(2, 2, seed=10)
    ts = np.linspace(0, 5, 6)
    alone = tl.ode.integrate_batch(tl.BatchOverlaps.stack(calm), "erf", lr=0.5, times=ts)
    mixed = tl.ode.integrate_batch(tl.BatchOverlaps.stack([calm[0], stiff, calm[1], stiff, calm[2]]), "erf",
                                   lr=[0.5, 1e4, 0.5, 1e5, 0.5], times=ts, n_threads=2)
    # the stiff member needs many more steps ...
    assert mixed.n_steps[1] > 3 * mixed.n_steps[0] and mixed.n_rejected[1] > 0
    for b, m in zip(range(3), (0, 2, 4), strict=True):  # ... which the others do not take
        assert_same(mixed[m], alone[b])
    lin = tl.Overlaps([[0.5]], [[0.1]], [[1.0]], [1.0], [1.0])
    out = tl.ode.integrate_batch([lin] * 3, "linear", lr=[0.5, 3.0, 1.0], t_max=200.0, method="rk4", dt=0.01)
    assert list(out.status) == ["completed", "diverged", "completed"]
    assert_same(out[0], tl.ode.integrate(lin, "linear", lr=0.5, t_max=200.0, method="rk4", dt=0.01))
    assert 5.5 < out.stop_time[1] < 7.0 and np.all(np.isnan(out.risk[1, out.n_recorded[1]:]))  # |Q| past 1e8



def test_core_returns_statuses_and_messages_as_text_arrays():
    """The core hands per-member statuses and messages back as NumPy unicode arrays (no Python string per member,
    which for 10^5 members cost more than a GPU's run), the messages of members that stopped differently intact."""
    lin = tl.Overlaps([[0.5]], [[0.1]], [[1.0]], [1.0], [1.0])
    stack = tl.BatchOverlaps.stack([lin] * 3)
    ts = np.linspace(0.0, 200.0, 5)
    z = np.zeros(3)
    out = tl._core.ode_integrate_batch(stack.Q, stack.M, stack.a, stack.P[0], stack.v[0], "linear", "linear",
                                       "online", False, np.array([0.5, 3.0, 1.0]), z, z, ts, "rk4", 0.01, 1e-8,
                                       1e-10, 0.0, 0.0, z, z, 100_000_000, 1)
    for name in ("status", "message"):
        assert isinstance(out[name], np.ndarray) and out[name].dtype.kind == "U" and out[name].shape == (3,)
    assert list(out["status"]) == ["completed", "diverged", "completed"]
    single = [tl.ode.integrate(lin, "linear", lr=lr, times=ts, method="rk4", dt=0.01) for lr in (0.5, 3.0, 1.0)]
    assert list(out["message"]) == [tr.message for tr in single]


# ---------------------------------------------------------------------------------------- first passage


def seed003_crossing_time(gamma, noise, m0, rho):
    """Arnaboldi et al., p = 1 (spherical online SGD, square activations, K = M = 1): with u = m^2,
    du/dt = 2 gamma u (A - B u), A = 4 (1 - 6 gamma) - 2 gamma Delta, B = 4 (1 - 6 gamma), whose solution is
    u = A u0 e^{2 A gamma t} / (A + B u0 (e^{2 A gamma t} - 1)); the excess risk is 2 (1 - u). The time where
    R = rho R(0), i.e. u* = 1 - rho (1 - u0): e^{2 A gamma t} = u* (A - B u0) / (u0 (A - B u*))."""
    A, B = 4 * (1 - 6 * gamma) - 2 * gamma * noise, 4 * (1 - 6 * gamma)
    u0 = m0**2
    us = 1 - rho * (1 - u0)
    assert us < A / B  # the threshold is above the noise floor: it is crossed
    return math.log(us * (A - B * u0) / (u0 * (A - B * us))) / (2 * A * gamma), A, B


@pytest.mark.parametrize("gamma,noise,rho", [(0.05, 0.5, 0.5), (0.1, 0.0, 0.1), (0.02, 2.0, 0.3)])
def test_first_passage_located_on_the_dense_output(gamma, noise, rho):
    m0 = 0.05
    ov = tl.Overlaps([[1.0]], [[m0]], [[1.0]], [1.0], [1.0])
    t_exact, A, B = seed003_crossing_time(gamma, noise, m0, rho)
    # The package's own right-hand side has exactly this form (so the closed form is the ODE being integrated).
    for m in (0.05, 0.3, 0.8):
        _, dM, _ = tl.ode.rhs(tl.Overlaps([[1.0]], [[m]], [[1.0]], [1.0], [1.0]), "quadratic", lr=gamma,
                              noise=noise, spherical=True)
        np.testing.assert_allclose(2 * m * dM[0, 0], 2 * gamma * m * m * (A - B * m * m), rtol=1e-12)
    tr = tl.ode.integrate(ov, "quadratic", lr=gamma, noise=noise, spherical=True, t_max=3 * t_exact,
                          risk_rtol=rho, rtol=1e-10, atol=1e-12)
    assert tr.status == "converged" and "reached the threshold" in tr.message
    assert tr.stop_time == tr.t[-1] == tr.meta["stop_time"]
    assert abs(tr.stop_time - t_exact) <= 1e-8 * t_exact
    R0 = tr.risk[0]
    assert tr.risk[-1] <= rho * R0 and tr.risk[-1] == pytest.approx(rho * R0, rel=1e-12)
    assert np.all(tr.risk[:-1] > rho * R0)
    # the same threshold given absolutely, and in a batch with per-member thresholds
    ab = tl.ode.integrate(ov, "quadratic", lr=gamma, noise=noise, spherical=True, t_max=3 * t_exact,
                          risk_tol=rho * R0, rtol=1e-10, atol=1e-12)
    assert abs(ab.stop_time - t_exact) <= 1e-8 * t_exact


@pytest.mark.parametrize("method,dt,tol", [("euler", 1e-3, 2e-3), ("rk4", 1e-2, 1e-6)])
def test_first_passage_fixed_step_on_the_chord(method, dt, tol):
    """Fixed steps: the crossing is located on the line between the last two states (linear interpolation)."""
    gamma, noise, m0, rho = 0.05, 0.5, 0.05, 0.5
    t_exact, *_ = seed003_crossing_time(gamma, noise, m0, rho)
    ov = tl.Overlaps([[1.0]], [[m0]], [[1.0]], [1.0], [1.0])
    tr = tl.ode.integrate(ov, "quadratic", lr=gamma, noise=noise, spherical=True, t_max=3 * t_exact,
                          risk_rtol=rho, method=method, dt=dt)
    assert tr.status == "converged"
    assert tr.risk[-1] == pytest.approx(rho * tr.risk[0], rel=1e-12)  # on the threshold, not past it
    k = math.floor(tr.stop_time / dt)
    assert k * dt - 1e-9 < tr.stop_time < (k + 1) * dt and tr.stop_time % dt > 1e-9 * dt  # inside a step
    assert abs(tr.stop_time - t_exact) <= tol * t_exact


def test_per_member_thresholds():
    ovs = [tl.ode.plateau_overlaps(seed=s) for s in range(4)]
    risk_tol = np.array([1e-3, 0.0, 1e-2, 1e-3])
    risk_rtol = np.array([0.0, 1e-2, 0.0, 0.5])  # member 3: max(1e-3, 0.5 R0) -> the relative one
    batch = tl.ode.integrate_batch(ovs, "erf", lr=1.0, t_max=2000.0, risk_tol=risk_tol, risk_rtol=risk_rtol)
    assert list(batch.status) == ["converged"] * 4
    for b, ov in enumerate(ovs):
        single = tl.ode.integrate(ov, "erf", lr=1.0, t_max=2000.0, risk_tol=risk_tol[b] or None,
                                  risk_rtol=risk_rtol[b] or None)
        assert_same(batch[b], single)
        thr = max(risk_tol[b], risk_rtol[b] * single.risk[0])
        assert single.risk[-1] <= thr and single.risk[-1] == pytest.approx(thr, rel=1e-9)
    assert batch.stop_time[3] < batch.stop_time[2] < batch.stop_time[0]
    assert batch.params["risk_rtol"][1] == 1e-2
    # no threshold: NaN stop time; a member already below its threshold stops at t = 0 with one row
    free = tl.ode.integrate(ovs[0], "erf", lr=1.0, t_max=10.0)
    assert free.status == "completed" and math.isnan(free.stop_time) and math.isnan(free.meta["stop_time"])
    at0 = tl.ode.integrate(ovs[0], "erf", lr=1.0, t_max=10.0, risk_tol=1.0)
    assert at0.status == "converged" and at0.stop_time == 0.0 and len(at0) == 1


# --------------------------------------------------------------------------------- xarray, NetCDF, restart


def check_attrs(ds):
    for name in list(ds.data_vars) + list(ds.coords):
        assert ds[name].attrs.get("long_name") is not None and "units" in ds[name].attrs, name
    assert ds["t"].attrs["units"] == "t = steps / d"


def test_trajectory_netcdf_round_trip_and_restart(tmp_path):
    student, teacher = teacher_student(2, 2, 50, "erf", seed=4)
    ov = tl.Overlaps.from_networks(student, teacher)
    opts = dict(lr=0.8, lr_readout=0.3, noise=0.05, rtol=1e-11, atol=1e-13)
    t1, t2 = 15.0, 40.0
    first = tl.ode.integrate(ov, t_max=t1, **opts)
    ds = first.to_xarray()
    assert ds["Q"].dims == ("t", "student", "student2") and ds["P"].dims == ("teacher", "teacher2")
    check_attrs(ds)
    path = tmp_path / "traj.nc"
    ds.to_netcdf(path)
    with xr.open_dataset(path) as back_ds:
        back = tl.Trajectory.from_xarray(back_ds.load())
    for name in ("t", "Q", "M", "a", "risk", "P", "v"):
        np.testing.assert_array_equal(getattr(back, name), getattr(first, name), err_msg=name)
    assert back.status == first.status and back.message == first.message and back.time_unit == first.time_unit
    assert math.isnan(back.stop_time) and back.meta["activation"] == "erf" and back.meta["lr"] == 0.8
    assert back.meta.keys() == first.meta.keys()
    for k, val in first.meta.items():
        assert back.meta[k] == val or (math.isnan(val) and math.isnan(back.meta[k])), k
    # continue from the saved last state: the same as one run to t2, within the integrator's tolerance
    rest = tl.ode.integrate(back.overlaps_at(-1), times=np.linspace(0, t2 - t1, 6), **opts)
    whole = tl.ode.integrate(ov, times=t1 + np.linspace(0, t2 - t1, 6), **opts)
    np.testing.assert_allclose(rest.Q, whole.Q, rtol=0, atol=1e-8)
    np.testing.assert_allclose(rest.M, whole.M, rtol=0, atol=1e-8)
    np.testing.assert_allclose(rest.a, whole.a, rtol=0, atol=1e-8)
    np.testing.assert_allclose(rest.risk, whole.risk, rtol=0, atol=1e-9)


def test_batch_netcdf_round_trip(tmp_path):
    members = [random_overlaps(2, 2, seed=s) for s in range(3)] + [random_overlaps(1, 3, seed=7)]
    batch = tl.ode.integrate_batch(members, "erf", lr=[0.5, 1.0, 1.5, 0.7], noise=[0.0, 0.1, 0.0, 0.2],
                                   risk_rtol=[0.0, 0.0, 0.5, 0.0], t_max=5.0)
    ds = batch.to_xarray()
    assert set(ds.dims) == {"member", "t", "student", "student2", "teacher", "teacher2"}
    assert ds["Q"].dims == ("member", "t", "student", "student2")
    for p in ("lr", "lr_readout", "noise", "risk_tol", "risk_rtol"):
        assert p in ds.coords and ds[p].dims == ("member",)
    np.testing.assert_array_equal(ds["noise"].values, [0.0, 0.1, 0.0, 0.2])
    check_attrs(ds)
    assert ds.sel(member=2)["status"].item() == "converged"
    path = tmp_path / "batch.nc"
    ds.to_netcdf(path)
    with xr.open_dataset(path) as back_ds:
        back = tl.BatchTrajectory.from_xarray(back_ds.load())
    for name in ("t", "Q", "M", "a", "risk", "P", "v", "t_final", "Q_final", "M_final", "a_final", "final_risk",
                 "stop_time", "n_recorded", "n_rhs", "n_steps", "n_rejected", "n_student", "n_teacher"):
        np.testing.assert_array_equal(getattr(back, name), getattr(batch, name), err_msg=name)
    assert list(back.status) == list(batch.status) and list(back.message) == list(batch.message)
    assert back.params.keys() == batch.params.keys() and back.meta["activation"] == "erf"
    for b in range(len(batch)):
        assert_same(back[b], batch[b])
    # restart every member of a same-shape batch from its last state
    same = tl.ode.integrate_batch(tl.BatchOverlaps.stack(members[:3]), "erf", lr=0.5, t_max=5.0)
    more = tl.ode.integrate_batch(same.overlaps_at(-1), lr=0.5, t_max=5.0)
    whole = tl.ode.integrate_batch(tl.BatchOverlaps.stack(members[:3]), "erf", lr=0.5, times=[0.0, 5.0, 10.0])
    np.testing.assert_allclose(more.risk[:, -1], whole.risk[:, -1], rtol=0, atol=1e-8)


# --------------------------------------------------------------------------------------------- conventions


def test_default_grid_aligns_with_sgd():
    d, t_max = 100, 2.0  # SGD's default 101 records: every 2 steps; the ODE's default grid has the same times
    student, teacher = teacher_student(2, 2, d, "erf", seed=0)
    sgd = tl.sgd.simulate(student, teacher, lr=0.5, t_max=t_max, seed=1)
    ode = tl.ode.integrate(tl.Overlaps.from_networks(student, teacher), lr=0.5, t_max=t_max)
    np.testing.assert_array_equal(ode.t, sgd.t)
    diff = ode.to_xarray() - sgd.to_xarray()
    assert diff.sizes["t"] == len(ode.t) == len(sgd.t) == 101
    assert np.all(np.isfinite(diff["risk"].values))
    for method, dt in (("euler", 0.01), ("rk4", 0.02)):  # fixed steps: this grid lies on their dt grid
        np.testing.assert_array_equal(tl.ode.integrate(tl.Overlaps.from_networks(student, teacher), lr=0.5,
                                                       t_max=t_max, method=method, dt=dt).t, sgd.t)


def test_activation_is_remembered_or_required():
    student, teacher = teacher_student(2, 2, 30, "relu", seed=0)
    ov = tl.Overlaps.from_networks(student, teacher)
    assert ov.activation == ov.teacher_activation == "relu"
    tr = tl.ode.integrate(ov, lr=0.5, t_max=1.0, method="rk4", dt=0.05)
    assert tr.meta["activation"] == tr.meta["teacher_activation"] == "relu"
    assert_same(tr, tl.ode.integrate(ov, "relu", "relu", lr=0.5, t_max=1.0, method="rk4", dt=0.05))
    bare = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v)
    assert bare.activation is None
    with pytest.raises(TypeError, match="activation: required"):
        tl.ode.integrate(bare, lr=0.5, t_max=1.0)
    with pytest.raises(TypeError, match="activation: required"):
        tl.ode.integrate_batch([bare, bare], lr=0.5, t_max=1.0)
    with pytest.raises(TypeError, match="activation: required"):
        tl.ode.rhs(bare, lr=0.5)
    np.testing.assert_array_equal(tl.ode.rhs(ov, lr=0.5)[0], tl.ode.rhs(bare, "relu", lr=0.5)[0])
    # mixed students (erf / relu) in one teacher: the batch needs activation
    s2, t2 = teacher_student(2, 2, 30, "erf", seed=0)
    with pytest.raises(TypeError, match="activation: required"):
        tl.ode.integrate_batch([ov, tl.Overlaps.from_networks(s2, t2)], lr=0.5, t_max=1.0)


# ------------------------------------------------------------------------------------------ validation


def stacked_arrays(B, K=2, M=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((B, K + M, K + M + 5)) / np.sqrt(K + M + 5)
    Om = X @ np.swapaxes(X, 1, 2)
    return Om[:, :K, :K].copy(), Om[:, :K, K:].copy(), Om[:, K:, K:].copy(), np.ones((B, K)), np.ones((B, M))


def test_vectorised_validation_names_the_member():
    Q, M, P, a, v = stacked_arrays(30)
    ok = tl.BatchOverlaps(Q, M, P, a, v)
    assert len(ok) == 30 and ok.K == 2 and ok.n_teacher == 2 and not ok.Q.flags.writeable
    np.testing.assert_array_equal(ok[4].M, M[4])
    bad = Q.copy()
    bad[17] = [[1.0, 2.0], [2.0, 1.0]]
    with pytest.raises(ValueError, match=r"Q\[17\]: expected a positive semi-definite matrix"):
        tl.BatchOverlaps(bad, M, P, a, v)
    bad = M.copy()
    bad[3] *= 50
    with pytest.raises(ValueError, match=r"M\[3\]: the overlap matrix .* not positive semi-definite"):
        tl.BatchOverlaps(Q, bad, P, a, v)
    bad = Q.copy()
    bad[5, 0, 1] += 0.1
    with pytest.raises(ValueError, match=r"Q\[5\]: expected a symmetric matrix"):
        tl.BatchOverlaps(bad, M, P, a, v)
    bad = a.copy()
    bad[9, 1] = np.nan
    with pytest.raises(ValueError, match=r"a\[9\]: entries must be finite"):
        tl.BatchOverlaps(Q, M, P, bad, v)
    with pytest.raises(ValueError, match=r"P: expected shape \(30, 2, 2\) or \(2, 2\)"):
        tl.BatchOverlaps(Q, M, P[:, :1, :1], a, v)
    shared = tl.BatchOverlaps(Q, M, np.eye(2), a, np.ones(2))  # one teacher for all members: broadcast
    assert shared.shared_teacher and shared.P.shape == (30, 2, 2)
    with pytest.raises(ValueError, match=r"lr\[2\]: expected a finite number >= 0"):
        tl.ode.integrate_batch(ok, "erf", lr=[1.0, 1.0, -1.0] + [1.0] * 27, t_max=1.0)
    with pytest.raises(ValueError, match=r"risk_rtol\[4\]"):
        tl.ode.integrate_batch(ok, "erf", lr=1.0, risk_rtol=np.r_[np.zeros(4), np.nan, np.zeros(25)], t_max=1.0)
    with pytest.raises(ValueError, match=r"noise: expected a number or a 1-d array of 30 values \(one per member\)"):
        tl.ode.integrate_batch(ok, "erf", lr=1.0, noise=[0.1, 0.2], t_max=1.0)
    with pytest.raises(ValueError, match=r"Q\[0\]: spherical=True needs diag\(Q\) = 1"):
        tl.ode.integrate_batch(ok, "erf", lr=1.0, spherical=True, t_max=1.0)
    members = [random_overlaps(2, 2, seed=s) for s in range(3)] + [random_overlaps(3, 1, seed=s) for s in (0, 1)]
    members[4].M[:] = 9.0  # edited in place after construction: caught by the batch's own check
    with pytest.raises(ValueError, match=r"overlaps\[4\]: M: .*semi-definite"):
        tl.ode.integrate_batch(members, "erf", lr=1.0, t_max=1.0)


# --------------------------------------------------------------------------------------------- progress


def test_progress_bar_counts_members(monkeypatch):
    import tqdm.auto

    seen = {}

    class Recorder(tqdm.auto.tqdm):  # type: ignore[misc,name-defined]
        def close(self):
            seen["n"], seen["total"] = self.n, self.total
            super().close()

    monkeypatch.setattr(tqdm.auto, "tqdm", Recorder)
    members = [random_overlaps(2, 2, seed=s) for s in range(6)] + [random_overlaps(1, 1, seed=1)]
    out = tl.ode.integrate_batch(members, "erf", lr=0.5, t_max=2.0, progress=True)
    assert seen == {"n": 7, "total": 7}
    plain = tl.ode.integrate_batch(members, "erf", lr=0.5, t_max=2.0)
    np.testing.assert_array_equal(out.risk, plain.risk)
    with pytest.raises(TypeError, match="progress: expected True or False"):
        tl.ode.integrate_batch(members, "erf", lr=0.5, t_max=2.0, progress=1)
