"""Step units (Mariantoni & Chizat): the overlap-space gradient flow through alignment (the core's step-unit flow, used
by ode.integrate and ode.integrate_batch for step units in the gradient-flow regime) against weight-space descent with
a decaying step.

Gaussian starts that converge reach risk <= 1e-9 in the flow (exactly 0 up to rounding: the students are merged
with their teachers) and by descent (whose step-step pairs take their angle from the chords of the unit vectors, so
that its gradient stays exact down to angles ~1e-13), aligned on the same teachers; the overlaps agree along the way
to the accuracy of descent with step 0.01; orthogonal starts stay at their symmetric fixed point (0.356189... at
m = 4); students that meet each other (antipodal with equal readouts, aligned with readouts of opposite signs) move
on as one cluster, as in descent. Along every flow the risk is non-increasing on the record grid and the cost stays
at a few steps per unit time, also where a student is held by its teacher's cusp against a smooth force nearly as
strong (issue 28: it chattered there at ~700 steps per unit time, the risk rising between records).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import twolayer as tl
from twolayer import schedules as S


def pair(m: int, d: int, seed: int, init: str = "gaussian"):
    """Mariantoni & Chizat's setting: lambda = w.x, teacher and student rows N(0, I / d) or one orthonormal set."""
    rng = np.random.default_rng(seed)
    te = tl.Network(rng.standard_normal((m, d)) / np.sqrt(d), None, "step", scaling="none")
    st = tl.Network(rng.standard_normal((m, d)) / np.sqrt(d), None, "step", scaling="none")
    if init == "orthogonal":
        q, _ = np.linalg.qr(rng.standard_normal((d, 2 * m)))
        te, st = te.with_weights(q[:, :m].T), st.with_weights(q[:, m:].T)
    return st, te


def cosines(path_W: np.ndarray, te: tl.Network) -> np.ndarray:
    tn = np.linalg.norm(te.W, axis=1)
    return path_W @ te.W.T / np.linalg.norm(path_W, axis=-1)[..., None] / tn


@pytest.mark.parametrize("theta", [1e-12, 1e-9, 1e-6, 0.1])
def test_step_risk_and_gradient_exact_near_alignment(theta):
    """One student at angle theta from its teacher (a = v = 1): R = theta / (2 pi) and |grad| = 1 / (2 pi |w|),
    pointing away from the teacher, down to theta = 1e-12 (through cosines: nothing below ~1.5e-8)."""
    w = 1.7
    te = tl.Network([[1.0, 0.0, 0.0]], None, "step", scaling="none")
    st = tl.Network([[w * math.cos(theta), w * math.sin(theta), 0.0]], None, "step", scaling="none")
    assert tl.population.risk(st, te) == pytest.approx(theta / (2 * math.pi), rel=1e-3)
    g, _ = tl.population.gradient(st, te, train_readout=False)
    assert np.linalg.norm(g) == pytest.approx(1 / (2 * math.pi * w), rel=1e-3)
    tangent = np.array([-math.sin(theta), math.cos(theta), 0.0])  # direction of increasing theta
    assert g[0] @ tangent == pytest.approx(np.linalg.norm(g), rel=1e-6)
    assert tl.population.risk(te, te) <= 1e-15


def test_step_gradient_matches_finite_differences():
    st, te = pair(3, 10, 0)
    g, _ = tl.population.gradient(st, te, train_readout=False)
    h = 1e-6
    for i, j in [(0, 0), (1, 3), (2, 9)]:
        Wp, Wm = st.W.copy(), st.W.copy()
        Wp[i, j] += h
        Wm[i, j] -= h
        fd = (tl.population.risk(st.with_weights(Wp), te) - tl.population.risk(st.with_weights(Wm), te)) / (2 * h)
        assert g[i, j] == pytest.approx(fd, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("m, seed", [(2, 0), (3, 1), (4, 3), (5, 4), (6, 0)])
def test_overlap_flow_and_weight_descent_converge_together(m, seed):
    st, te = pair(m, 20, seed)
    times = np.array([0.0, 5.0, 20.0, 60.0, 250.0])
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", times=times)
    assert flow.status == "completed" and flow.meta["method"] == "step_events"
    assert f"{m} of {m} students on a teacher" in flow.message
    assert abs(flow.risk[-1]) <= 1e-9
    lr, start = 0.01, 250.0 / 0.01
    sched = S.step_decay(0.5, every=100.0, start=start)  # flow time 250 + 2, then halvings
    path = tl.landscape.step_gradient_flow(st, te, np.append(times[:-1], [250.0, 252.0 - 1e-10]), lr=lr,
                                           schedule=sched)
    final = st.with_weights(path.W[-1])
    assert tl.population.risk(final, te) <= 1e-9  # was ~2e-9 per aligned pair with the angle from the cosines
    cos_w = cosines(path.W, te)
    cos_f = flow.M / np.sqrt(np.diagonal(flow.Q, axis1=1, axis2=2))[..., None] / np.linalg.norm(te.W, axis=1)
    np.testing.assert_allclose(cos_w[:4], cos_f[:4], atol=0.02)  # Euler with step 0.01 against the flow
    np.testing.assert_allclose(cos_w[-1], cos_f[-1], atol=1e-9)  # the same alignment at the end


@pytest.mark.parametrize("m", [4, pytest.param(6, marks=pytest.mark.slow)])
def test_orthogonal_start_stays_at_its_fixed_point(m):
    """Mariantoni & Chizat's orthogonal start (the demo's: d = 50, lambda = w.x / sqrt(d)): the flow stays at the
    symmetric fixed point (0.356189... at m = 4) over the demo's horizon (t = 400), as population descent does. (The
    point is a saddle: rounding-level asymmetry grows out of it by t ~ 1000 in the flow, the NumPy reference's too.)"""
    st, te = tl.networks.teacher_student(m, m, 50, "step", init="orthogonal", seed=2)
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", t_max=400.0,
                            n_records=5)
    assert flow.status == "completed"
    assert np.ptp(flow.risk[2:]) < 1e-8
    descent = tl.population.descend(st, te, lr=1.0, n_steps=20_000, n_records=2)
    assert descent.final_risk == pytest.approx(flow.risk[-1], abs=1e-6)
    if m == 4:
        assert flow.risk[-1] == pytest.approx(0.356189, abs=1e-6)


def test_students_pinned_at_antipodes_move_as_one_pair():
    """Two students with equal readouts meet at antipodes (their repulsive cusp holds them there): the flow goes on
    with the pair as one cluster (it stopped as "diverged" before), to the risk descent reaches."""
    st, te = pair(4, 20, 1)
    times = np.array([0.0, 5.0, 20.0, 60.0, 250.0])
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", times=times)
    assert flow.status == "completed" and "2 in clusters of students" in flow.message
    Q = flow.Q[-1]
    assert Q[1, 2] / math.sqrt(Q[1, 1] * Q[2, 2]) == pytest.approx(-1.0, abs=1e-14)
    path = tl.landscape.step_gradient_flow(st, te, np.append(times[:-1], [250.0, 252.0 - 1e-10]), lr=0.01,
                                           schedule=S.step_decay(0.5, every=100.0, start=25_000))
    W = path.W[-1]
    assert W[1] @ W[2] / np.linalg.norm(W[1]) / np.linalg.norm(W[2]) == pytest.approx(-1.0, abs=1e-12)
    assert path.risk[-1] == pytest.approx(flow.risk[-1], abs=1e-6)


def test_students_with_opposite_readouts_merge_and_move_as_one():
    """Readouts 1 and -0.5 attract: the two students align, then move as one unit of readout 0.5 towards the
    teacher, as descent with a decaying step does."""
    te = tl.Network([[1.0, 0.0, 0.0]], [0.2], "step", scaling="none")
    st = tl.Network([[0.0, 1.0, 0.0], [0.0, math.cos(0.3), math.sin(0.3)]], [1.0, -0.5], "step", scaling="none")
    times = [0.0, 0.5, 2.0, 5.0, 10.0]
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", times=times)
    assert flow.status == "completed" and "2 in clusters of students" in flow.message
    assert flow.Q[-1, 0, 1] / math.sqrt(flow.Q[-1, 0, 0] * flow.Q[-1, 1, 1]) == 1.0
    path = tl.landscape.step_gradient_flow(st, te, times + [10.19], lr=1e-3,
                                           schedule=S.step_decay(0.5, every=100.0, start=10_000))
    np.testing.assert_allclose(cosines(path.W[:5], te), flow.M, atol=2e-5)  # |w| = 1, |teacher| = 1
    assert path.risk[-2] == pytest.approx(flow.risk[-1], abs=1e-6)


def test_step_flow_early_stop():
    st, te = pair(3, 20, 1)
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", t_max=250.0,
                            risk_tol=0.05)
    assert flow.status == "converged" and 0.0 < flow.stop_time < 250.0
    assert flow.risk[-1] == pytest.approx(0.05, rel=1e-6)
    assert np.all(flow.risk[:-1] > 0.05)


def test_integrate_batch_with_step_units_is_one_by_one():
    """Batch members of step units run the same core flow: bitwise the runs alone."""
    ovs = [tl.Overlaps.from_networks(*pair(3, 20, s)) for s in (1, 2)] + [tl.Overlaps.from_networks(*pair(2, 20, 0))]
    lr = [1.0, 0.5, 1.0]
    batch = tl.ode.integrate_batch(ovs, lr=lr, regime="gradient_flow", t_max=100.0, n_records=5,
                                   risk_tol=[0.0, 0.0, 0.1])
    assert batch.meta["method"] == "step_events"
    for b, (ov, traj) in enumerate(zip(ovs, batch, strict=True)):
        alone = tl.ode.integrate(ov, lr=lr[b], regime="gradient_flow", t_max=100.0, n_records=5,
                                 risk_tol=0.1 if b == 2 else None)
        assert traj.status == alone.status
        np.testing.assert_array_equal(traj.Q, alone.Q)
        np.testing.assert_array_equal(traj.risk, alone.risk)


def gaussian_start(k: int, m: int, d: int, seed: int):
    """teacher_student's Gaussian start (lambda = w.x / sqrt(d)) as lambda = w.x networks with the same overlaps."""
    st, te = tl.networks.teacher_student(k, m, d, "step", init="gaussian", seed=seed)
    r = 1.0 / math.sqrt(d)
    return tl.Network(st.W * r, st.a, "step", scaling="none"), tl.Network(te.W * r, te.a, "step", scaling="none")


def check_monotone_cheap_and_descent(k: int, m: int, d: int, seed: int, t_max: float, descent: bool,
                                     steps_per_time: float = 40.0):
    """The flow on a 0.1 grid to t_max (+ the 2 flow-time units of descent's decaying tail): completed, risk
    non-increasing up to rounding, at most steps_per_time steps per unit time; and, if descent, its endpoint equal
    to that of weight-space descent with step 0.01 halved every 100 iterations after t_max (O(step) apart)."""
    st, te = gaussian_start(k, m, d, seed)
    lr, tail = 0.01, 2.0  # the tail: 0.01 x 100 x (1 + 1/2 + 1/4 + ...) flow time
    times = np.append(np.linspace(0.0, t_max, round(10 * t_max) + 1), t_max + tail)
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", times=times)
    assert flow.status == "completed", (seed, flow.message)
    assert np.max(np.diff(flow.risk)) <= 1e-13, seed
    assert flow.meta["n_steps"] <= steps_per_time * times[-1], (seed, flow.meta["n_steps"])
    if descent:
        path = tl.landscape.step_gradient_flow(st, te, [0.0, t_max, t_max + tail - 1e-10], lr=lr,
                                               schedule=S.step_decay(0.5, every=100.0, start=t_max / lr))
        assert path.risk[-1] == pytest.approx(flow.risk[-1], abs=1e-4), seed


def test_antipodal_pair_starts_do_not_chatter():
    """Issue 28's reproducers (K = M = 4, d = 10, seeds 0, 15, 17: a student held by its teacher's cusp against a
    nearly equal smooth force, next to an antipodal pair of students): the endpoint of descent, monotone risk, and
    the README's horizon t = 2e4 in ~1300 steps (it took ~700 steps per unit time, >2 min)."""
    for seed in (0, 15, 17):
        check_monotone_cheap_and_descent(4, 4, 10, seed, 100.0, descent=True)
    st, te = gaussian_start(4, 4, 10, 0)
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", t_max=2e4)
    assert flow.status == "completed" and flow.meta["n_steps"] <= 3000
    assert flow.final_risk == pytest.approx(0.151726, abs=2e-6)  # descent: 0.151727 (issue 28)


@pytest.mark.parametrize("k, m, d", [(4, 4, 10), (3, 5, 10)])
def test_step_flow_monotone_and_cheap_over_seeds(k, m, d):
    """24 Gaussian starts each: risk non-increasing on a 0.1 grid to t = 60, at most 40 steps per unit time."""
    for seed in range(24):
        check_monotone_cheap_and_descent(k, m, d, seed, 60.0, descent=False)


@pytest.mark.slow
@pytest.mark.parametrize("k, m, d, seeds", [(4, 4, 10, 40), (3, 3, 10, 20), (5, 5, 12, 20), (6, 4, 12, 10)])
def test_step_flow_matches_descent_over_seeds(k, m, d, seeds):
    """Settled starts (t = 150): monotone, cheap, and the endpoint of small-step descent (measured: within 1.5e-5)."""
    for seed in range(seeds):
        check_monotone_cheap_and_descent(k, m, d, seed, 150.0, descent=True, steps_per_time=20.0)
