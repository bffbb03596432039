"""Step units (seed 000): the overlap-space gradient flow through alignment (twolayer.step_flow, used by
ode.integrate for step units in the gradient-flow regime) against weight-space descent with a decaying step.

Gaussian starts that converge reach risk <= 1e-9 in the flow (exactly 0 up to rounding: the students are snapped
onto their teachers) and <= 5e-9 by descent (its risk evaluated from the weights' angles; its gradient, through
the overlaps' cosines, resolves angles only down to ~1.5e-8), aligned on the same teachers;
the overlaps agree along the way to the accuracy of descent with step 0.01; orthogonal starts stay at their
symmetric fixed point (0.356189... at m = 4).
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer import schedules as S
from twolayer import step_flow


def pair(m: int, d: int, seed: int, init: str = "gaussian"):
    """Seed 000's setting: lambda = w.x, teacher and student rows N(0, I / d) or one orthonormal set."""
    rng = np.random.default_rng(seed)
    te = tl.Network(rng.standard_normal((m, d)) / np.sqrt(d), None, "step", scaling="none")
    st = tl.Network(rng.standard_normal((m, d)) / np.sqrt(d), None, "step", scaling="none")
    if init == "orthogonal":
        q, _ = np.linalg.qr(rng.standard_normal((d, 2 * m)))
        te, st = te.with_weights(q[:, :m].T), st.with_weights(q[:, m:].T)
    return st, te


def test_weight_risk_matches_population_risk_away_from_alignment():
    st, te = pair(3, 10, 0)
    assert step_flow.risk(st, te) == pytest.approx(tl.population.risk(st, te), rel=1e-12, abs=1e-14)
    assert step_flow.risk(te, te) == 0.0  # exactly aligned: no cosine floor


@pytest.mark.parametrize("m, seed", [(2, 0), (3, 1), (4, 3), pytest.param(5, 4, marks=pytest.mark.slow),
                                     pytest.param(6, 0, marks=pytest.mark.slow)])
def test_overlap_flow_and_weight_descent_converge_together(m, seed):
    st, te = pair(m, 20, seed)
    times = np.array([0.0, 5.0, 20.0, 60.0, 250.0])
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", times=times)
    assert flow.status == "completed" and flow.meta["method"] == "step_events"
    assert flow.risk[-1] <= 1e-9
    lr, start = 0.01, 250.0 / 0.01
    sched = S.step_decay(0.5, every=100.0, start=start)  # flow time 250 + 2, then halvings
    path = tl.landscape.step_gradient_flow(st, te, np.append(times[:-1], [250.0, 252.0 - 1e-10]), lr=lr,
                                           schedule=sched)
    final = st.with_weights(path.W[-1])
    # descent's gradient comes through the cosines of the overlaps, which cannot resolve angles below ~1.5e-8:
    # its students stop within that of their teachers (a risk ~2e-9 per such pair, seed 000's "1e-9")
    assert step_flow.risk(final, te) <= 5e-9
    # cosines student-teacher (Euler steps let |w_i| drift by O(lr); the flow conserves it)
    tn = np.linalg.norm(te.W, axis=1)
    cos_w = path.W @ te.W.T / np.linalg.norm(path.W, axis=2)[..., None] / tn
    cos_f = flow.M / np.sqrt(np.diagonal(flow.Q, axis1=1, axis2=2))[..., None] / tn
    np.testing.assert_allclose(cos_w[:4], cos_f[:4], atol=0.02)  # Euler with step 0.01 against the flow
    np.testing.assert_allclose(cos_w[-1], cos_f[-1], atol=1e-7)  # the same alignment at the end


@pytest.mark.parametrize("m", [4, pytest.param(6, marks=pytest.mark.slow)])
def test_orthogonal_start_stays_at_its_fixed_point(m):
    """Seed 000's orthogonal start (the demo's: d = 50, lambda = w.x / sqrt(d)): the flow stays at the symmetric
    fixed point (0.356189... at m = 4), as population descent does. (At m = 2 that point is a saddle the rounding
    errors of a long run leave.)"""
    st, te = tl.networks.teacher_student(m, m, 50, "step", init="orthogonal", seed=2)
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", t_max=400.0,
                            n_points=5)
    assert flow.status == "completed"
    assert np.ptp(flow.risk[2:]) < 1e-8
    descent = tl.population.descend(st, te, lr=1.0, steps=20_000, records=2)
    assert descent.final_risk == pytest.approx(flow.risk[-1], abs=1e-6)
    if m == 4:
        assert flow.risk[-1] == pytest.approx(0.356189, abs=1e-6)


def test_students_meeting_stop_the_flow_with_a_clear_message():
    """Two students pinned antipodally (their repulsion holds them there) are not merged: the run stops."""
    st, te = pair(4, 20, 1)
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="gradient_flow", t_max=250.0)
    assert flow.status == "diverged" and "students" in flow.message and "not implemented" in flow.message
