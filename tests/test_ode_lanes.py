"""The structure-of-arrays ODE path (cpp/include/twolayer/batch_dynamics.hpp, cpp/src/batch_integrators.cpp):
erf systems integrated L at a time in the SIMD lanes. Its per-lane right-hand side agrees with the general one
(OdeRhs, what ``ode.rhs`` evaluates) to round-off, and a member's run does not depend on its block (lane position,
the other members, full or partial blocks) or on the thread count: bitwise its run alone. The lane right-hand side
of relu, quadratic and linear committees (the GPU kernels' source) is checked through a test binding."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from test_ode_batch import METHODS, assert_same, random_overlaps
from twolayer import _core


def spherical_overlaps(K, M, seed):
    """Overlaps with Q_ii = 1 (spherical SGD's constraint)."""
    ov = random_overlaps(K, M, seed=seed)
    s = 1 / np.sqrt(np.diag(ov.Q))
    return tl.Overlaps(ov.Q * np.outer(s, s), ov.M * s[:, None], ov.P, ov.a, ov.v)


@pytest.mark.parametrize("K,M", [(1, 1), (2, 2), (3, 1), (1, 4), (4, 4)])
@pytest.mark.parametrize("regime,spherical", [("online", False), ("gradient_flow", False), ("online", True)])
def test_lane_rhs_matches_the_general_rhs(K, M, regime, spherical):
    """One Euler step of ``ode.integrate`` (the lane path, one lane) against ``ode.rhs`` (the general OdeRhs):
    (y1 - y0) / dt agree to round-off, every field (dQ, dM, da), with noise and a trained readout."""
    ov = spherical_overlaps(K, M, seed=K + 7 * M) if spherical else random_overlaps(K, M, seed=K + 7 * M)
    opts = dict(lr=0.7, lr_readout=0.3, noise=0.2, regime=regime, spherical=spherical)
    dt = 1e-2
    tr = tl.ode.integrate(ov, "erf", times=[0.0, dt], method="euler", dt=dt, **opts)
    assert tr.status == "completed" and len(tr) == 2
    dQ, dM, da = tl.ode.rhs(ov, "erf", **opts)
    scale = max(1.0, np.abs(dQ).max(), np.abs(dM).max(), np.abs(da).max())
    np.testing.assert_allclose((tr.Q[1] - tr.Q[0]) / dt, dQ, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose((tr.M[1] - tr.M[0]) / dt, dM, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose((tr.a[1] - tr.a[0]) / dt, da, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("method", list(METHODS))
def test_blocks_threads_and_lane_positions_do_not_matter(method):
    """21 members (blocks of 8, 8 and 5 lanes) with per-member lr, readout, noise and thresholds, a member that
    stops early and a stiff one, K = M = 2 and K = 5, M = 3 (the one-system path) in the same call: every member
    is bitwise its run alone, with 1 or 2 threads and in reversed order (other lane positions and neighbours)."""
    opts = METHODS[method]
    rng = np.random.default_rng(3)
    members = [random_overlaps(2, 2, seed=s) for s in range(17)] + [random_overlaps(5, 3, seed=s) for s in range(4)]
    B = len(members)
    lr = rng.uniform(0.3, 1.2, B)
    lr[4] = 5e3  # stiff: the adaptive method takes more steps for it alone
    lr_readout = np.where(rng.random(B) < 0.5, 0.0, 0.2)
    noise = np.where(rng.random(B) < 0.5, 0.0, 0.1)
    risk_rtol = np.zeros(B)
    risk_rtol[[2, 11]] = 0.9  # stop early
    ts = np.linspace(0, 2, 5)
    kw = dict(times=ts, **opts)
    one = tl.ode.integrate_batch(members, "erf", lr=lr, lr_readout=lr_readout, noise=noise, risk_rtol=risk_rtol,
                                 n_threads=1, **kw)
    two = tl.ode.integrate_batch(members, "erf", lr=lr, lr_readout=lr_readout, noise=noise, risk_rtol=risk_rtol,
                                 n_threads=2, **kw)
    rev = tl.ode.integrate_batch(members[::-1], "erf", lr=lr[::-1], lr_readout=lr_readout[::-1],
                                 noise=noise[::-1], risk_rtol=risk_rtol[::-1], n_threads=2, **kw)
    assert one.status[2] == "converged" and one.status[11] == "converged"
    if method == "adaptive":
        assert one.n_steps[4] > one.n_steps[[0, 1, 3, 5, 6]].max()
    for b, ov in enumerate(members):
        alone = tl.ode.integrate(ov, "erf", lr=lr[b], lr_readout=lr_readout[b], noise=noise[b],
                                 risk_rtol=risk_rtol[b] or None, **kw)
        assert_same(one[b], alone)
        assert_same(two[b], alone)
        assert_same(rev[B - 1 - b], alone)


def test_gradient_flow_and_spherical_blocks():
    """The regime and the spherical projection are per call: blocks of gradient-flow and of spherical members are
    bitwise their runs alone (adaptive)."""
    plain = [random_overlaps(3, 2, seed=s) for s in range(10)]
    sph = [spherical_overlaps(2, 3, seed=s) for s in range(10)]
    lr = np.linspace(0.2, 1.0, 10)
    for members, kw in ((plain, dict(regime="gradient_flow")), (sph, dict(spherical=True, noise=0.05))):
        batch = tl.ode.integrate_batch(members, "erf", lr=lr, t_max=3.0, **kw)
        for b, ov in enumerate(members):
            assert_same(batch[b], tl.ode.integrate(ov, "erf", lr=lr[b], t_max=3.0, **kw))


LANE_ACTIVATIONS = ("erf", "relu", "quadratic", "linear")


def lane_rhs(members, act, regime, spherical, lr, lr_readout, noise, lanes):
    """committee_rhs_lanes and committee_risk_lanes of the members (one shape), `lanes` at a time (test binding)."""
    st = lambda field: np.stack([getattr(ov, field) for ov in members])  # noqa: E731
    return _core.ode_rhs_lanes(st("Q"), st("M"), st("a"), st("P"), st("v"), act, regime, spherical, lr, lr_readout,
                               noise, lanes)


def relu_noise_term(ov, lr, noise, spherical):
    """The online noise term's share of (dQ, dM) for a relu student: Phi_ik = lr^2 Delta a_i a_k J2_ik with J2 the
    kernel ``tl.kernels.j2`` off the diagonal and E[step(l)^2] = 1/2 exactly on it, projected when spherical. (OdeRhs
    evaluates the diagonal J2 as the angle form at a correlation q (1/q) that may round below 1, which costs ~1e-9.)"""
    K = len(ov.a)
    C = np.array([[[ov.Q[i, i], ov.Q[i, k]], [ov.Q[i, k], ov.Q[k, k]]] for i in range(K) for k in range(K)])
    J2 = tl.kernels.j2("relu", C).reshape(K, K)
    np.fill_diagonal(J2, 0.5)
    phi = lr**2 * noise * np.outer(ov.a, ov.a) * J2
    if not spherical:
        return phi, np.zeros_like(ov.M)
    d = np.diag(phi)
    dQ = phi - ov.Q * (d[:, None] + d[None, :]) / 2
    np.fill_diagonal(dQ, 0.0)
    return dQ, -ov.M * d[:, None] / 2


@pytest.mark.parametrize("act", LANE_ACTIVATIONS)
@pytest.mark.parametrize("regime,spherical", [("online", False), ("gradient_flow", False), ("online", True)])
def test_committee_lanes_match_the_general_rhs(act, regime, spherical):
    """The lane right-hand side of erf, relu, quadratic and linear committees (batch_dynamics.hpp
    committee_rhs_lanes, the CPU and GPU kernels' one source) against the general OdeRhs (``ode.rhs``) for every
    K, M in 1..4 with per-member lr, trained readouts and output noise: every field to 1e-13 of its scale; the risk
    lanes against the one-system risk to 1e-13; one lane and eight lanes (11 members: a full and a padded block)
    bitwise equal."""
    B = 11
    rng = np.random.default_rng(5)
    lr = rng.uniform(0.3, 1.2, B)
    lr_readout = np.where(np.arange(B) % 2 == 1, 0.3, 0.0)
    noise = np.where(np.arange(B) % 3 > 0, 0.2, 0.0)
    make = spherical_overlaps if spherical else random_overlaps
    for K in range(1, 5):
        for M in range(1, 5):
            members = [make(K, M, seed=31 * K + 7 * M + s) for s in range(B)]
            one = lane_rhs(members, act, regime, spherical, lr, lr_readout, noise, 1)
            eight = lane_rhs(members, act, regime, spherical, lr, lr_readout, noise, 8)
            for x, y in zip(one, eight, strict=True):
                np.testing.assert_array_equal(x, y)
            for b, ov in enumerate(members):
                kw = dict(lr=lr[b], lr_readout=lr_readout[b], regime=regime, spherical=spherical)
                if act == "relu" and regime == "online" and noise[b] > 0:
                    dQ, dM, da = tl.ode.rhs(ov, act, noise=0.0, **kw)
                    nQ, nM = relu_noise_term(ov, lr[b], noise[b], spherical)
                    want = (dQ + nQ, dM + nM, da)
                else:
                    want = tl.ode.rhs(ov, act, noise=noise[b], **kw)
                scale = max(np.abs(w).max() for w in want)
                for got, w, name in zip(one[:3], want, ("dQ", "dM", "da"), strict=True):
                    np.testing.assert_allclose(got[b], w, rtol=0, atol=1e-13 * scale,
                                               err_msg=f"{name} K={K} M={M} member {b}")
                risk = tl.ode.integrate(ov, act, lr=1.0, times=[0.0, 1e-3], method="euler", dt=1e-3).risk[0]
                np.testing.assert_allclose(one[3][b], risk, rtol=1e-13, atol=0, err_msg=f"risk K={K} M={M}")


def test_committee_lanes_refuse_what_they_do_not_cover():
    """The test binding names the argument it refuses: an activation without lanes, K or M above 4, a lane count."""
    ov = [random_overlaps(2, 2, seed=0)]
    args = ("online", False, np.ones(1), np.zeros(1), np.zeros(1))
    with pytest.raises(ValueError, match="act: .*got 'step'"):
        lane_rhs(ov, "step", "gradient_flow", *args[1:], 1)
    with pytest.raises(ValueError, match="K, M: .*at most 4"):
        lane_rhs([random_overlaps(5, 2, seed=0)], "relu", *args, 1)
    with pytest.raises(ValueError, match="lanes: expected 1 or 8, got 4"):
        lane_rhs(ov, "relu", *args, 4)


@pytest.mark.parametrize("act", ["quadratic", "linear"])
def test_quadratic_and_linear_committees_integrate_in_the_lanes(act):
    """Quadratic and linear committees take the lane path of the batch and of ``ode.integrate`` (lanes_supported):
    an Euler step is bitwise y0 + dt f(y0) with f the lane right-hand side, and batch members (a full and a padded
    block, two threads, gradient flow and spherical blocks) are bitwise their runs alone."""
    ov = random_overlaps(2, 3, seed=4)
    dt = 1e-2
    tr = tl.ode.integrate(ov, act, lr=0.1, lr_readout=0.2, noise=0.1, times=[0.0, dt], method="euler", dt=dt)
    dQ, dM, da, _ = lane_rhs([ov], act, "online", False, np.array([0.1]), np.array([0.2]), np.array([0.1]), 1)
    np.testing.assert_array_equal(tr.Q[1], ov.Q + dt * dQ[0])
    np.testing.assert_array_equal(tr.M[1], ov.M + dt * dM[0])
    np.testing.assert_array_equal(tr.a[1], ov.a + dt * da[0])
    lr = np.linspace(0.02, 0.1, 11)
    for members, kw in (([random_overlaps(2, 2, seed=s) for s in range(11)], dict(noise=0.05)),
                        ([random_overlaps(3, 1, seed=s) for s in range(11)], dict(regime="gradient_flow")),
                        ([spherical_overlaps(2, 3, seed=s) for s in range(11)], dict(spherical=True))):
        batch = tl.ode.integrate_batch(members, act, lr=lr, t_max=2.0, n_threads=2, **kw)
        for b, m in enumerate(members):
            assert_same(batch[b], tl.ode.integrate(m, act, lr=lr[b], t_max=2.0, **kw))


@pytest.mark.parametrize("method", list(METHODS))
def test_one_system_path_and_lanes_share_one_driver(method):
    """The same erf system with and without a schedule that is 1 throughout (the schedule sends it to the one-system
    path, OdeRhs as the driver's one lane; without it the SIMD lanes integrate it): the same steps, right-hand-side
    count, status and message, and the trajectory up to rounding."""
    ov = random_overlaps(2, 2, seed=1)
    kw = dict(lr=0.8, t_max=30.0, risk_rtol=0.05, **METHODS[method])
    lanes = tl.ode.integrate(ov, "erf", **kw)
    one = tl.ode.integrate(ov, "erf", schedule=tl.schedules.step_decay(1.0, 1e6), **kw)
    assert lanes.status == one.status == "converged"
    assert lanes.message == one.message
    counts = ("n_steps", "n_rhs", "n_rejected")
    assert [lanes.meta[c] for c in counts] == [one.meta[c] for c in counts]
    assert one.stop_time == pytest.approx(lanes.stop_time, rel=1e-11)
    for field in ("t", "Q", "M", "a", "risk"):
        np.testing.assert_allclose(getattr(one, field), getattr(lanes, field), rtol=1e-11, atol=1e-13)


# ----------------------------------------------------------------------------- erf committees with biases in lanes


def biased_members(K, M, B, seed, spherical=False):
    """B erf members of one shape with student and teacher biases; every third one with its overlaps scaled by 20,
    so that its self pairs' correlations (1 + q)^-1 q pass 0.925 (the near-one branch, scalar, beside vectorised
    lanes) and the blocks mix Genz's 6, 12 and 20 nodes (spherical: Q_ii = 1, unscaled)."""
    rng = np.random.default_rng(seed)
    out = []
    for s in range(B):
        ov = spherical_overlaps(K, M, seed + s) if spherical else random_overlaps(K, M, seed=seed + s)
        f = 20.0 if s % 3 == 2 and not spherical else 1.0
        out.append(tl.Overlaps(f * ov.Q, f * ov.M, f * ov.P, ov.a, ov.v, bias=rng.normal(0.0, 0.8, K),
                               teacher_bias=rng.normal(0.0, 0.8, M)))
    return out


def bias_lane_rhs(members, regime, spherical, lr, lr_readout, noise, lr_bias, lanes):
    st = lambda field: np.stack([getattr(ov, field) for ov in members])  # noqa: E731
    return _core.ode_rhs_lanes(st("Q"), st("M"), st("a"), st("P"), st("v"), "erf", regime, spherical, lr, lr_readout,
                               noise, lanes, st("bias"), st("teacher_bias"), lr_bias)


def one_system(ov, **kw):
    """``ode.integrate`` on the one-system right-hand side (OdeRhs with means): a constant schedule that is not the
    identity keeps a run off the lanes (lanes_supported) and multiplies by exactly 1."""
    return tl.ode.integrate(ov, "erf", schedule=tl.schedules.step_decay(1.0, every=1e6), **kw)


@pytest.mark.parametrize("regime,spherical", [("online", False), ("gradient_flow", False), ("online", True)])
def test_erf_bias_lanes_match_the_general_rhs(regime, spherical):
    """The lanes with biases (batch_dynamics_bias.hpp) against OdeRhs with means (``ode.rhs``, the closed-form erf
    pair moments and I4 of gaussian_mean.cpp) for every K, M in 1..4 with per-member lr, readouts, noise and lr_bias:
    every field (dQ, dM, da, db) to 1e-14 of its scale (measured 2e-15: libm's exp, sin, asin against exp_simd,
    sin_simd, asin_simd), the risk lanes to 1e-14 of OdeRhs's risk; one lane and eight lanes (11 members: a full and
    a padded block) bitwise equal."""
    B = 11
    rng = np.random.default_rng(9)
    lr = rng.uniform(0.3, 1.2, B)
    lr_readout = np.where(np.arange(B) % 2 == 1, 0.3, 0.0)
    noise = np.where(np.arange(B) % 3 > 0, 0.2, 0.0)
    lr_bias = np.where(np.arange(B) % 4 > 0, 0.5, 0.0)
    for K in range(1, 5):
        for M in range(1, 5):
            members = biased_members(K, M, B, seed=31 * K + 7 * M, spherical=spherical)
            one = bias_lane_rhs(members, regime, spherical, lr, lr_readout, noise, lr_bias, 1)
            eight = bias_lane_rhs(members, regime, spherical, lr, lr_readout, noise, lr_bias, 8)
            for x, y in zip(one, eight, strict=True):
                np.testing.assert_array_equal(x, y)
            for b, ov in enumerate(members):
                want = tl.ode.rhs(ov, "erf", lr=lr[b], lr_readout=lr_readout[b], noise=noise[b], regime=regime,
                                  spherical=spherical, lr_bias=lr_bias[b])
                scale = max(np.abs(w).max() for w in want)
                for got, w, name in zip(one[:4], want, ("dQ", "dM", "da", "db"), strict=True):
                    np.testing.assert_allclose(got[b], w, rtol=0, atol=1e-14 * scale,
                                               err_msg=f"{name} K={K} M={M} member {b}")
                risk = one_system(ov, lr=1.0, times=[0.0, 1e-3], method="euler", dt=1e-3).risk[0]
                np.testing.assert_allclose(one[4][b], risk, rtol=1e-14, atol=0, err_msg=f"risk K={K} M={M}")


def test_erf_bias_committees_integrate_in_the_lanes():
    """Biased erf members take the lane path of ``ode.integrate`` and of the batch: an Euler step is bitwise
    y0 + dt f(y0) with f the lane right-hand side; a whole RK4 and adaptive run agrees with the one-system path
    (OdeRhs with means) to 1e-12 relative; batch members (a full and a padded block, with fixed and trained biases)
    are bitwise their runs alone."""
    ov = biased_members(2, 3, 1, seed=4)[0]
    dt = 1e-2
    kw = dict(lr=0.4, lr_readout=0.2, noise=0.1, lr_bias=0.3)
    tr = tl.ode.integrate(ov, "erf", times=[0.0, dt], method="euler", dt=dt, **kw)
    dQ, dM, da, db, _ = bias_lane_rhs([ov], "online", False, *(np.array([kw[k]]) for k in
                                                                ("lr", "lr_readout", "noise", "lr_bias")), 1)
    np.testing.assert_array_equal(tr.Q[1], ov.Q + dt * dQ[0])
    np.testing.assert_array_equal(tr.M[1], ov.M + dt * dM[0])
    np.testing.assert_array_equal(tr.a[1], ov.a + dt * da[0])
    np.testing.assert_array_equal(tr.bias[1], ov.bias + dt * db[0])
    for method in ("rk4", "adaptive"):
        lanes = tl.ode.integrate(ov, "erf", t_max=20.0, method=method, dt=0.05, n_records=11, **kw)
        alone = one_system(ov, t_max=20.0, method=method, dt=0.05, n_records=11, **kw)
        for name in ("Q", "M", "a", "bias", "risk"):
            got, want = getattr(lanes, name), getattr(alone, name)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max(), err_msg=name)
    members = biased_members(2, 2, 11, seed=40)
    lr_bias = np.where(np.arange(11) % 2 == 0, 0.5, 0.0)
    batch = tl.ode.integrate_batch(members, "erf", lr=0.5, lr_bias=lr_bias, t_max=5.0, method="rk4", dt=0.05,
                                   n_threads=2)
    for b, m in enumerate(members):
        alone = tl.ode.integrate(m, "erf", lr=0.5, lr_bias=lr_bias[b], t_max=5.0, method="rk4", dt=0.05)
        for name in ("t", "Q", "M", "a", "bias", "risk"):
            np.testing.assert_array_equal(getattr(batch[b], name), getattr(alone, name), err_msg=name)
        assert batch[b].status == alone.status


# ----------------------------------------------------------------------------- sin and cos committees in lanes


def trig_members(K, M, B, seed, biased, spherical=False):
    """B members of one shape, with student and teacher biases ~ N(0, 0.8) when biased."""
    rng = np.random.default_rng(seed)
    make = spherical_overlaps if spherical else random_overlaps
    out = [make(K, M, seed=seed + s) for s in range(B)]
    if biased:
        out = [tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, bias=rng.normal(0.0, 0.8, K),
                           teacher_bias=rng.normal(0.0, 0.8, M)) for ov in out]
    return out


TRIG_PAIRS = [("sin", "sin"), ("cos", "cos"), ("sin", "cos"), ("cos", "sin")]


@pytest.mark.parametrize("act,teacher", TRIG_PAIRS)
@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("regime,spherical", [("online", False), ("gradient_flow", False), ("online", True)])
def test_trig_lanes_match_the_general_rhs(act, teacher, biased, regime, spherical):
    """The sin and cos lanes (batch_dynamics_trig.hpp: closed forms through the characteristic function; student and
    teacher each sin or cos) against OdeRhs (``ode.rhs``: the same closed-form pair moments, the online term by its
    certified lattice when K + M <= 4 and by the closed-form I4 above) for every K, M in 1..4 with per-member lr,
    readouts, noise (and lr_bias): every field to 1e-12 of its scale (measured 1.7e-13), the risk to 1e-13 of
    OdeRhs's (two members per shape); one lane and eight lanes (9 members: a full and a padded block) bitwise
    equal."""
    B = 9
    rng = np.random.default_rng(13)
    lr = rng.uniform(0.3, 1.2, B)
    lr_readout = np.where(np.arange(B) % 2 == 1, 0.3, 0.0)
    noise = np.where(np.arange(B) % 3 > 0, 0.2, 0.0)
    lr_bias = np.where(np.arange(B) % 4 > 0, 0.5, 0.0)
    for K in range(1, 5):
        for M in range(1, 5):
            members = trig_members(K, M, B, seed=31 * K + 7 * M, biased=biased, spherical=spherical)
            st = lambda field, members=members: np.stack([getattr(ov, field) for ov in members])  # noqa: E731
            extra = (st("bias"), st("teacher_bias"), lr_bias) if biased else ()
            one, eight = (_core.ode_rhs_lanes(st("Q"), st("M"), st("a"), st("P"), st("v"), act, regime, spherical, lr,
                                              lr_readout, noise, lanes, *(extra or (None,) * 3), teacher_act=teacher)
                          for lanes in (1, 8))
            for x, y in zip(one, eight, strict=True):
                np.testing.assert_array_equal(x, y)
            for b, ov in enumerate(members):
                kw = dict(lr=lr[b], lr_readout=lr_readout[b], noise=noise[b], regime=regime, spherical=spherical)
                if biased:
                    kw["lr_bias"] = lr_bias[b]
                want = tl.ode.rhs(ov, act, teacher, **kw)
                scale = max(np.abs(w).max() for w in want)
                for got, w, name in zip(one[:-1], want, ("dQ", "dM", "da", "db")[:len(want)], strict=True):
                    np.testing.assert_allclose(got[b], w, rtol=0, atol=1e-12 * scale,
                                               err_msg=f"{name} K={K} M={M} member {b}")
                if b < 2:  # (two members: the risk goes through ode.integrate)
                    risk = tl.ode.integrate(ov, act, teacher, lr=1.0, times=[0.0, 1e-3], method="euler", dt=1e-3,
                                            schedule=tl.schedules.step_decay(1.0, every=1e6)).risk[0]
                    np.testing.assert_allclose(one[-1][b], risk, rtol=1e-13, atol=0, err_msg=f"risk K={K} M={M}")


@pytest.mark.parametrize("act,teacher", TRIG_PAIRS)
def test_trig_committees_integrate_in_the_lanes(act, teacher):
    """Sin and cos committees (student and teacher each sin or cos), with and without biases, take the lane path of
    ``ode.integrate`` and of the batch: an Euler step is bitwise y0 + dt f(y0) with f the lane right-hand side; an
    adaptive run agrees with the one-system path (OdeRhs) to 1e-10; batch members (full and padded blocks, fixed and
    trained biases, two threads, online, gradient-flow and spherical blocks) are bitwise their runs alone."""
    for biased in (False, True):
        ov = trig_members(2, 3, 1, seed=4, biased=biased)[0]
        kw = dict(lr=0.4, lr_readout=0.2, noise=0.1, **(dict(lr_bias=0.3) if biased else {}))
        dt = 1e-2
        tr = tl.ode.integrate(ov, act, teacher, times=[0.0, dt], method="euler", dt=dt, **kw)
        args = [np.array([kw[k]]) for k in ("lr", "lr_readout", "noise")]
        extra = (ov.bias[None], ov.teacher_bias[None], np.array([kw["lr_bias"]])) if biased else ()
        f = _core.ode_rhs_lanes(ov.Q[None], ov.M[None], ov.a[None], ov.P[None], ov.v[None], act, "online", False,
                                *args, 1, *(extra or (None,) * 3), teacher_act=teacher)
        fields = ("Q", "M", "a", "bias") if biased else ("Q", "M", "a")
        for name, d in zip(fields, f[:-1], strict=True):
            np.testing.assert_array_equal(getattr(tr, name)[1], getattr(ov, name) + dt * d[0], err_msg=name)
        lanes = tl.ode.integrate(ov, act, teacher, t_max=10.0, n_records=11, **kw)
        alone = tl.ode.integrate(ov, act, teacher, t_max=10.0, n_records=11,
                                 schedule=tl.schedules.step_decay(1.0, 1e6), **kw)
        for name in fields + ("risk",):
            got, want = getattr(lanes, name), getattr(alone, name)
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * np.abs(want).max(), err_msg=name)
        lr = np.linspace(0.2, 0.8, 11)
        lr_bias = np.where(np.arange(11) % 2 == 0, 0.5, 0.0) if biased else np.zeros(11)
        for members, opts in ((trig_members(2, 2, 11, seed=40, biased=biased), dict(noise=0.05)),
                              (trig_members(3, 1, 11, seed=50, biased=biased), dict(regime="gradient_flow")),
                              (trig_members(2, 3, 11, seed=60, biased=biased, spherical=True), dict(spherical=True))):
            batch = tl.ode.integrate_batch(members, act, teacher, lr=lr, lr_bias=lr_bias, t_max=3.0, n_threads=2,
                                           **opts)
            for b, m in enumerate(members):
                alone = tl.ode.integrate(m, act, teacher, lr=lr[b], lr_bias=lr_bias[b], t_max=3.0, **opts)
                assert_same(batch[b], alone)
                if biased:
                    np.testing.assert_array_equal(batch[b].bias, alone.bias)
