"""Biases in the stacked batch (issue 23): BatchOverlaps carries ``bias`` / ``teacher_bias``, ``integrate_batch``
runs members with biases with the right-hand side with means (erf committees in lanes, each with its own status),
bitwise as ``integrate`` runs each alone, and scans sweep ``bias``, ``teacher_bias`` and ``lr_bias``."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import twolayer as tl


def _members() -> list[tl.Overlaps]:
    """Four erf members of K = M = 2: biased student, biased teacher, both, and none."""
    out = []
    for seed, b, bt in ((0, [0.3, -0.2], None), (1, None, [0.5, 0.0]), (2, [0.1, 0.4], [-0.3, 0.2]), (3, None, None)):
        s, t = tl.networks.teacher_student(2, 2, 40, "erf", seed=seed)
        s = s.with_weights(s.W, bias=b) if b is not None else s
        t = t.with_weights(t.W, bias=bt) if bt is not None else t
        out.append(tl.Overlaps.from_networks(s, t))
    return out


def _same_member(tr: tl.Trajectory, alone: tl.Trajectory) -> None:
    """Member tr equals the run alone bit for bit (rows, biases, status, counts)."""
    for name in ("t", "Q", "M", "a", "risk"):
        np.testing.assert_array_equal(getattr(tr, name), getattr(alone, name), err_msg=name)
    if alone.bias is not None:
        np.testing.assert_array_equal(tr.bias, alone.bias)
        np.testing.assert_array_equal(tr.teacher_bias, alone.teacher_bias)
    else:  # a member without biases in a batch with biases: zeros
        assert tr.bias is None or not np.any(tr.bias)
    assert tr.status == alone.status
    for k in ("n_rhs", "n_steps", "n_rejected"):
        assert tr.meta[k] == alone.meta[k], k


def test_batch_overlaps_carry_the_biases() -> None:
    ovs = _members()
    batch = tl.BatchOverlaps.stack(ovs)
    assert batch.bias.shape == (4, 2) and batch.teacher_bias.shape == (4, 2)
    np.testing.assert_array_equal(batch.has_bias, [True, True, True, False])
    for b, ov in enumerate(ovs):
        np.testing.assert_array_equal(batch[b].bias, ov.bias)
        np.testing.assert_array_equal(batch[b].teacher_bias, ov.teacher_bias)
    plain = tl.BatchOverlaps(batch.Q, batch.M, batch.P, batch.a, batch.v)
    assert not plain.has_bias.any() and plain.bias.shape == (4, 2)
    shared = tl.BatchOverlaps(batch.Q, batch.M, batch.P, batch.a, batch.v, teacher_bias=[0.5, -0.5])
    np.testing.assert_array_equal(shared.teacher_bias[3], [0.5, -0.5])
    with pytest.raises(ValueError, match=r"bias: expected shape \(4, 2\)"):
        tl.BatchOverlaps(batch.Q, batch.M, batch.P, batch.a, batch.v, bias=np.zeros((4, 3)))
    bad = np.zeros((4, 2))
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"bias\[2\]: entries must be finite"):
        tl.BatchOverlaps(batch.Q, batch.M, batch.P, batch.a, batch.v, bias=bad)
    with pytest.raises(ValueError, match="read-only"):
        batch.bias[0, 0] = 1.0


@pytest.mark.parametrize("method", ["euler", "rk4", "adaptive"])
@pytest.mark.parametrize("regime", ["online", "gradient_flow"])
def test_batch_with_biases_equals_integrate_bitwise(method: str, regime: str) -> None:
    """Every member (biased or not, each with its own lr_bias) is integrate() of that member alone, bit for bit."""
    ovs = _members()
    lr_bias = [0.5, 0.0, 1.0, 0.7]  # member 3 has zero biases but trains them: a run with biases
    batch = tl.ode.integrate_batch(ovs, "erf", lr=0.8, lr_bias=lr_bias, regime=regime, t_max=3.0, n_records=7,
                                   method=method, dt=0.05, n_threads=2)
    assert batch.bias.shape == (4, 7, 2) and batch.teacher_bias.shape == (4, 2)
    np.testing.assert_array_equal(batch.params["lr_bias"], lr_bias)
    for b, ov in enumerate(ovs):
        alone = tl.ode.integrate(ov, "erf", lr=0.8, lr_bias=lr_bias[b], regime=regime, t_max=3.0, n_records=7,
                                 method=method, dt=0.05)
        assert alone.bias is not None
        _same_member(batch[b], alone)
    assert np.any(batch.bias[0, -1] != batch.bias[0, 0])  # trained
    np.testing.assert_array_equal(batch.bias[1], np.zeros((7, 2)))  # lr_bias 0: fixed at zero
    # the stacked input gives the same batch
    stacked = tl.ode.integrate_batch(tl.BatchOverlaps.stack(ovs), "erf", lr=0.8, lr_bias=lr_bias, regime=regime,
                                     t_max=3.0, n_records=7, method=method, dt=0.05)
    np.testing.assert_array_equal(stacked.bias, batch.bias)
    np.testing.assert_array_equal(stacked.risk, batch.risk)


def test_batch_with_biases_and_a_schedule_equals_integrate() -> None:
    kw = {"lr": 0.5, "lr_bias": 0.5, "regime": "gradient_flow", "t_max": 2.0, "n_records": 5,
          "schedule": tl.schedules.inverse_time(1.0)}
    ovs = _members()
    batch = tl.ode.integrate_batch(ovs, "erf", **kw)
    for b, ov in enumerate(ovs):
        _same_member(batch[b], tl.ode.integrate(ov, "erf", **kw))


def test_members_without_biases_run_as_before() -> None:
    """In a batch with biases a member without any (zero biases, lr_bias 0) runs the lanes path as integrate()
    runs it without biases; a batch without biases records none (bitwise the batch of before)."""
    ovs = _members()
    mixed = tl.ode.integrate_batch(ovs, "erf", lr=0.8, lr_bias=0.5 * np.array([1, 1, 1, 0]), t_max=5.0,
                                   n_records=6, risk_tol=[0.0, 0.0, 0.0, 1e-3])
    plain = tl.ode.integrate(ovs[3], "erf", lr=0.8, t_max=5.0, n_records=6, risk_tol=1e-3)
    assert plain.bias is None
    _same_member(mixed[3], plain)
    np.testing.assert_array_equal(mixed.bias[3][: int(mixed.n_recorded[3])], 0.0)
    assert "lr_bias" in mixed[3].meta
    unbiased = [tl.Overlaps(o.Q, o.M, o.P, o.a, o.v) for o in ovs]
    batch = tl.ode.integrate_batch(unbiased, "erf", lr=0.8, t_max=5.0, n_records=6)
    assert batch.bias is None and batch.teacher_bias is None and "lr_bias" not in batch.params
    assert "bias" not in batch.to_xarray()
    for b, ov in enumerate(unbiased):
        _same_member(batch[b], tl.ode.integrate(ov, "erf", lr=0.8, t_max=5.0, n_records=6))


def test_gradient_flow_with_trained_biases_decreases_the_risk() -> None:
    ovs = _members()
    batch = tl.ode.integrate_batch(ovs, "erf", lr=1.0, lr_bias=1.0, regime="gradient_flow", t_max=20.0,
                                   n_records=41)
    assert np.all(batch.status == "completed")
    assert np.all(np.diff(batch.risk, axis=1) <= 1e-15), np.diff(batch.risk, axis=1).max()
    assert np.all(batch.risk[:, -1] < 0.5 * batch.risk[:, 0])


def test_divergence_of_one_member_stops_only_that_member() -> None:
    ovs = _members()
    # member 1: online SGD so far beyond its stable rate that the first step grows Q past 1e8 times its scale (at
    # lr = 200 erf saturates and Q_11 grows to only 4e3 by t = 5, a run that completes: the quadrature engine's
    # failure on its large aligned variances used to stop it; the closed forms integrate it)
    lr = [0.5, 1e5, 0.5, 0.5]
    kw = {"lr_bias": 0.5, "t_max": 5.0, "n_records": 11, "method": "euler", "dt": 0.05}
    batch = tl.ode.integrate_batch(ovs, "erf", lr=lr, n_threads=2, **kw)
    np.testing.assert_array_equal(batch.status, ["completed", "diverged", "completed", "completed"])
    alone = tl.ode.integrate(ovs[1], "erf", lr=1e5, **kw)
    assert alone.status == tl.Status.diverged
    assert batch.stop_time[1] == alone.stop_time and batch.message[1] == alone.message
    assert np.isnan(batch.bias[1, -1]).all()  # NaN after its stop, like its Q
    _same_member(batch[1], alone)
    for b in (0, 2):
        _same_member(batch[b], tl.ode.integrate(ovs[b], "erf", lr=0.5, **kw))


def test_early_stop_and_mixed_shapes_with_biases() -> None:
    """Members of different K (one core call per shape, padded rows) with biases and their own stop rule."""
    s3, t3 = tl.networks.teacher_student(3, 2, 40, "erf", seed=5)
    ov3 = tl.Overlaps.from_networks(s3.with_weights(s3.W, bias=[0.2, 0.0, -0.1]), t3)
    ovs = [*_members()[:2], ov3]
    batch = tl.ode.integrate_batch(ovs, "erf", lr=1.0, lr_bias=0.5, regime="gradient_flow", t_max=200.0,
                                   n_records=5, risk_rtol=[0.0, 0.2, 0.2])
    assert batch.bias.shape == (3, 5, 3) and np.isnan(batch.bias[0, :, 2]).all()
    assert np.isnan(batch.teacher_bias).sum() == 0
    for b, ov in enumerate(ovs):
        alone = tl.ode.integrate(ov, "erf", lr=1.0, lr_bias=0.5, regime="gradient_flow", t_max=200.0, n_records=5,
                                 risk_rtol=[0.0, 0.2, 0.2][b] or None)
        _same_member(batch[b], alone)
    assert batch.status[2] == "converged"
    np.testing.assert_array_equal(batch.bias_final[2], batch[2].bias[-1])


def test_batch_with_biases_round_trips_xarray_and_continues() -> None:
    pytest.importorskip("xarray")
    ovs = _members()
    batch = tl.ode.integrate_batch(ovs, "erf", lr=0.8, lr_bias=0.5, t_max=2.0, n_records=3)
    ds = batch.to_xarray()
    assert ds["bias"].dims == ("member", "t", "student") and ds["teacher_bias"].dims == ("member", "teacher")
    assert ds["bias"].attrs["long_name"].startswith("student biases")
    np.testing.assert_array_equal(ds["lr_bias"].values, 0.5)
    back = tl.BatchTrajectory.from_xarray(ds)
    np.testing.assert_array_equal(back.bias, batch.bias)
    np.testing.assert_array_equal(back.teacher_bias, batch.teacher_bias)
    # continuing from the last states: the biases go on from where they were
    cont = batch.overlaps_at()
    np.testing.assert_array_equal(cont.bias, batch.bias_final)
    np.testing.assert_array_equal(cont.teacher_bias, batch.teacher_bias)


def test_batch_bias_arguments_are_checked() -> None:
    ovs = _members()
    with pytest.raises(ValueError, match="lr_bias"):
        tl.ode.integrate_batch(ovs, "erf", lr=0.5, lr_bias=-1.0, t_max=1.0)
    with pytest.raises(ValueError, match="lr_bias"):
        tl.ode.integrate_batch(ovs, "erf", lr=0.5, lr_bias=[0.1, 0.2], t_max=1.0)
    tgt = tl.targets.staircase(2, d=30, seed=0)
    ov = tl.Overlaps.from_networks(tl.Network.random(2, 30, "step", seed=1), tgt)
    with pytest.raises(NotImplementedError, match="step students with biases"):
        tl.ode.integrate_batch([ov, ov], "step", lr=0.5, lr_bias=0.5, t_max=1.0, regime="gradient_flow")


def test_spherical_batch_with_biases_equals_integrate() -> None:
    """Spherical members with biases (the weights' increments projected, Q_ii fixed) run the one-system spherical
    right-hand side with means: bitwise integrate() alone, and Q_ii stays 1."""
    M = np.array([[0.3, 0.1], [-0.2, 0.4]])
    ovs = [tl.Overlaps([[1.0, 0.2], [0.2, 1.0]], M, np.eye(2), [1.0, 1.0], [1.0, 1.0], bias=b, teacher_bias=bt)
           for b, bt in (([0.1, 0.0], None), ([-0.2, 0.3], [0.4, 0.0]))]
    kw = {"lr": 0.5, "lr_bias": 0.5, "spherical": True, "t_max": 2.0, "n_records": 5, "method": "rk4", "dt": 0.05}
    batch = tl.ode.integrate_batch(ovs, "erf", **kw)
    for b, ov in enumerate(ovs):
        _same_member(batch[b], tl.ode.integrate(ov, "erf", **kw))
        np.testing.assert_allclose(np.diagonal(batch.Q[b], axis1=-2, axis2=-1), 1.0, atol=1e-12)
    assert np.any(batch.bias[:, -1] != batch.bias[:, 0])


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_batch_with_biases_is_interruptible() -> None:
    """Ctrl-C stops a batch of members with biases within 0.5 s; the partial result keeps their rows and biases,
    which are those of an uninterrupted run."""
    ovs = _members()[:3] * 4
    times = np.linspace(0.0, 1e5, 11)
    sent: list[float] = []

    def fire() -> None:
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(0.5, fire)
    timer.start()
    try:
        with pytest.raises(tl.Interrupted) as info:
            tl.ode.integrate_batch(ovs, "erf", lr=0.5, lr_bias=0.5, times=times, method="euler", dt=1e-2,
                                   n_threads=2)
        latency = time.perf_counter() - sent[0]
    finally:
        timer.cancel()
        timer.join()
    assert latency < 0.5
    part = info.value.partial
    assert isinstance(part, tl.BatchTrajectory) and part.bias is not None
    assert set(part.status) <= {"interrupted"} and len(part) == 12
    b = int(np.argmax(part.n_recorded))
    tr = part[b]
    assert len(tr) >= 1 and np.all(np.isfinite(tr.bias))
    ref = tl.ode.integrate(ovs[b], "erf", lr=0.5, lr_bias=0.5, times=tr.t[: int(part.n_recorded[b])],
                           method="euler", dt=1e-2)
    np.testing.assert_array_equal(tr.bias[: len(ref.t)], ref.bias)


# ------------------------------------------------------------------------------------------ scans


def test_scan_sweeps_the_biases_and_stores_them(tmp_path) -> None:
    xr = pytest.importorskip("xarray")
    pytest.importorskip("zarr")
    pytest.importorskip("dask")
    scan = tl.scan.Scan("ode", constants={"K": 2, "M": 2, "d": 40, "t_max": 2.0, "n_records": 3, "lr": 0.8,
                                          "teacher_bias": [0.5, -0.5]},
                        axes={"bias": [0.0, 0.3, [0.1, -0.2]], "lr_bias": [0.0, 1.0]}, group_size=4)
    ref = tl.scan.run(scan)
    path = tmp_path / "bias.zarr"
    tl.scan.run(scan, store=path)
    ds = xr.open_zarr(path)
    assert bool(ds["complete"].all())
    assert ds["bias"].dims == ("param_bias", "lr_bias", "t", "student")
    assert ds["teacher_bias"].dims == ("param_bias", "lr_bias", "teacher")
    for name in ("bias", "bias_final", "teacher_bias", "risk", "Q"):
        np.testing.assert_array_equal(ds[name].values, ref[name].values, err_msg=name)
    assert list(ds["param_bias"].values) == ["0.0", "0.3", "[0.1, -0.2]"]
    # each configuration is integrate() of its start with those biases
    for i, b in enumerate([0.0, 0.3, [0.1, -0.2]]):
        for j, lrb in enumerate([0.0, 1.0]):
            ov = tl.scan.initial_overlaps({"K": 2, "M": 2, "d": 40})
            bias = np.full(2, b) if not isinstance(b, list) else np.array(b)
            ov = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, bias=bias, teacher_bias=[0.5, -0.5])
            alone = tl.ode.integrate(ov, "erf", lr=0.8, lr_bias=lrb, t_max=2.0, n_records=3)
            np.testing.assert_array_equal(ds["risk"].values[i, j], alone.risk)
            np.testing.assert_array_equal(ds["bias"].values[i, j], alone.bias)
    tl.scan.open_dataset(path).close()  # the coordinate checks accept the per-unit values


def test_scan_bias_parameters_are_checked() -> None:
    with pytest.raises(ValueError, match=r"axes.bias: a list of 3 biases, but K is 2"):
        tl.scan.Scan("ode", constants={"t_max": 1.0, "lr": 0.5}, axes={"bias": [0.0, [0.1, 0.2, 0.3]]})
    with pytest.raises(ValueError, match=r"constants.lr_bias"):
        tl.scan.Scan("ode", constants={"t_max": 1.0, "lr": 0.5, "lr_bias": -1.0})
    with pytest.raises(ValueError, match=r"axes.teacher_bias: a list of 3 biases, but M is 2"):
        tl.scan.Scan("ode", constants={"regime": "large_batch", "n_steps": 3, "batch_ratio": 1.0, "lr": 0.5},
                     axes={"teacher_bias": [0.0, [0.1, 0.2, 0.3]]})
    with pytest.raises(ValueError, match=r"axes.bias: a list of 3 biases, but K is 2"):
        tl.scan.Scan("sgd", constants={"t_max": 1.0, "lr": 0.5}, axes={"bias": [0.0, [0.1, 0.2, 0.3]]})
    with pytest.raises(ValueError, match=r"constants.lr_bias"):
        tl.scan.Scan("sgd", constants={"t_max": 1.0, "lr": 0.5, "lr_bias": -1.0})
    with pytest.raises((ValueError, TypeError), match=r"bias"):
        tl.scan.Scan("ode", constants={"t_max": 1.0, "lr": 0.5}, axes={"bias": [0.0, "x"]})


def test_scan_large_batch_map_with_biases() -> None:
    """The large-batch regime of an ODE scan takes student and teacher biases and lr_bias: each configuration is
    integrate(regime="large_batch") of its start with those biases, and the scan stores them as the ODE does."""
    pytest.importorskip("xarray")
    const = {"K": 2, "M": 2, "d": 40, "regime": "large_batch", "n_steps": 3, "batch_ratio": 2.0, "lr": 0.5,
             "activation": "tanh", "teacher_bias": [0.5, -0.5]}
    ds = tl.scan.run(tl.scan.Scan("ode", constants=const, axes={"bias": [0.0, [0.3, -0.2]], "lr_bias": [0.0, 1.0]}))
    assert ds["bias"].dims == ("param_bias", "lr_bias", "t", "student")
    for i, b in enumerate([0.0, [0.3, -0.2]]):
        for j, lrb in enumerate([0.0, 1.0]):
            ov = tl.scan.initial_overlaps({"K": 2, "M": 2, "d": 40})
            ov = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, bias=np.broadcast_to(b, 2), teacher_bias=[0.5, -0.5])
            alone = tl.ode.integrate(ov, "tanh", lr=0.5, lr_bias=lrb, regime="large_batch", batch_ratio=2.0,
                                     n_steps=3)
            for name in ("risk", "Q", "M", "bias"):
                np.testing.assert_array_equal(ds[name].values[i, j], getattr(alone, name), err_msg=name)
            np.testing.assert_array_equal(ds["bias_final"].values[i, j], alone.bias[-1])
            np.testing.assert_array_equal(ds["teacher_bias"].values[i, j], [0.5, -0.5])
    assert np.abs(ds["bias"].values[:, 1, -1] - ds["bias"].values[:, 1, 0]).max() > 1e-3  # trained: they move
    unbiased = const.copy()
    del unbiased["teacher_bias"], unbiased["lr"]
    assert "bias" not in tl.scan.run(tl.scan.Scan("ode", constants=unbiased, axes={"lr": [0.5]}))


def test_scan_sgd_with_biases() -> None:
    """An SGD scan takes bias, teacher_bias (shared by a group's networks) and lr_bias (per run): each configuration
    is tl.sgd.simulate of its networks with those biases, bit for bit, and the scan stores them."""
    pytest.importorskip("xarray")
    const = {"K": 2, "M": 1, "d": 50, "t_max": 1.0, "n_records": 3, "lr": 0.5, "seeds": 2, "activation": "tanh",
             "teacher_bias": 0.4}
    ds = tl.scan.run(tl.scan.Scan("sgd", constants=const, axes={"bias": [0.0, [0.3, -0.2]], "lr_bias": [0.0, 1.0]}))
    assert ds["bias"].dims == ("param_bias", "lr_bias", "member", "t", "student")
    s0, t0 = tl.scan.initial_networks({"K": 2, "M": 1, "d": 50, "activation": "tanh"})
    for i, b in enumerate([0.0, [0.3, -0.2]]):
        student = s0.with_weights(s0.W, bias=np.broadcast_to(b, 2))
        teacher = t0.with_weights(t0.W, bias=[0.4])
        for j, lrb in enumerate([0.0, 1.0]):
            alone = tl.sgd.simulate(student, teacher, lr=0.5, lr_bias=lrb, t_max=1.0, n_records=3, seeds=2)
            np.testing.assert_array_equal(ds["risk"].values[i, j], np.stack([r.risk for r in alone.runs]))
            np.testing.assert_array_equal(ds["Q"].values[i, j], np.stack([r.Q for r in alone.runs]))
            np.testing.assert_array_equal(ds["bias"].values[i, j], np.stack([r.bias for r in alone.runs]))
            np.testing.assert_array_equal(ds["teacher_bias"].values[i, j], [0.4])
    assert np.abs(ds["bias"].values[:, 1, :, -1] - ds["bias"].values[:, 1, :, 0]).min() > 1e-3
    net_s, net_t = tl.scan.initial_networks({**const, "bias": [0.3, -0.2]})
    np.testing.assert_array_equal(net_s.bias, [0.3, -0.2])
    np.testing.assert_array_equal(net_t.bias, [0.4])
