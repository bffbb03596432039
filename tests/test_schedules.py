"""Learning-rate schedules (twolayer.schedules) in every engine: population descent, the ODE, SGD, the
weight-space step flow.

Checks: the formulas; a constant schedule (and an all-ones table, which goes through the scheduled code path)
gives today's results bitwise; a scheduled descent equals descent steps chained by hand; the scheduled
gradient-flow ODE equals the unscheduled one at the reparametrised time tau(t) = int_0^t s (exact for gradient
flow); the scheduled online ODE agrees with scheduled SGD at large d; descent of step units with a geometric
schedule reaches 1e-9.
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from test_sgd_ode import compare, erf_plateau_pair
from twolayer import schedules as S
from twolayer.networks import teacher_student


def test_formulas():
    t = np.array([0.0, 0.5, 1.0, 2.5, 10.0])
    np.testing.assert_array_equal(S.constant(0.5)(t), 0.5)
    np.testing.assert_allclose(S.step_decay(0.5, 2.0, start=1.0)(t), 0.5 ** np.floor(np.maximum(t - 1, 0) / 2))
    np.testing.assert_allclose(S.geometric(0.1, 4.0)(t), 0.1 ** (t / 4))
    np.testing.assert_allclose(S.inverse_time(2.0)(t), 1 / (1 + t / 2))
    np.testing.assert_array_equal(S.per_step([3.0, 2.0, 1.0])(np.array([0, 1, 2, 7])), [3, 2, 1, 1])
    tab = S.table([0.0, 1.0, 4.0], dt=0.5)
    np.testing.assert_allclose(tab(np.array([0.0, 0.25, 0.75, 9.0])), [0.0, 0.5, 2.5, 4.0])
    prev = S.table([0.0, 1.0, 4.0], dt=0.5, interpolation="previous")
    np.testing.assert_allclose(prev(np.array([0.0, 0.49, 0.5, 9.0])), [0.0, 0.0, 1.0, 4.0])
    f = S.from_function(lambda x: np.exp(-x), t_max=2.0, n=2001)
    np.testing.assert_allclose(f(np.array([0.3, 1.7])), np.exp(-np.array([0.3, 1.7])), rtol=1e-6)
    assert S.as_schedule(S.constant()) is None  # the identity: the engines' unscheduled path


@pytest.mark.parametrize("bad, match", [
    (lambda: S.geometric(1.5), "gamma"), (lambda: S.step_decay(0.5, 0.0), "every"),
    (lambda: S.per_step([]), "values"), (lambda: S.per_step([1.0, -1.0]), "values"),
    (lambda: S.inverse_time(-1.0), "t0"), (lambda: S.table([1.0], dt=0.0), "dt"),
    (lambda: S.as_schedule("fast"), "schedule"),
])
def test_bad_input(bad, match):
    with pytest.raises((ValueError, TypeError), match=match):
        bad()


def _relu_pair():
    st, te = teacher_student(3, 2, 20, "relu", seed=4)
    return st, te


def test_constant_schedule_is_bitwise_unscheduled():
    st, te = teacher_student(3, 2, 20, "erf", seed=4)  # erf: the online ODE's I4 in closed form (fast)
    ones = S.per_step(np.ones(50))  # not the identity: the scheduled path multiplying by 1.0
    base = tl.population.descend(st, te, lr=0.1, n_steps=50, lr_readout=0.05)
    for sched in (S.constant(), ones):
        other = tl.population.descend(st, te, lr=0.1, n_steps=50, lr_readout=0.05, schedule=sched)
        np.testing.assert_array_equal(other.student.W, base.student.W)
        np.testing.assert_array_equal(other.risk, base.risk)
    # The ODE: a linear student of an erf teacher runs on the one-system path with and without a schedule
    # (bitwise); erf and linear committees with K, M <= 4 run in the SIMD lanes (batch_integrators.cpp) unless
    # scheduled, and a scheduled run takes the one-system path, whose right-hand side differs from the lanes' at
    # round-off.
    lin = tl.Overlaps.from_networks(*teacher_student(3, 2, 20, "linear", seed=4))
    for ov, acts, exact in ((lin, ("linear", "erf"), True), (lin, ("linear", "linear"), False),
                            (tl.Overlaps.from_networks(st, te), ("erf", "erf"), False)):
        for method in ("rk4", "adaptive"):
            ref = tl.ode.integrate(ov, *acts, lr=0.5, lr_readout=0.2, t_max=3.0, method=method)
            for sched in (S.constant(), S.table(np.ones(7), dt=1.0, interpolation="previous")):
                out = tl.ode.integrate(ov, *acts, lr=0.5, lr_readout=0.2, t_max=3.0, method=method, schedule=sched)
                if exact or sched.identity:
                    np.testing.assert_array_equal(out.Q, ref.Q)
                    np.testing.assert_array_equal(out.a, ref.a)
                else:
                    np.testing.assert_allclose(out.Q, ref.Q, rtol=1e-12, atol=1e-14)
                    np.testing.assert_allclose(out.a, ref.a, rtol=1e-12, atol=1e-14)
    ref = tl.sgd.simulate(st, te, lr=0.5, lr_readout=0.2, t_max=2.0, seed=3)
    for sched in (S.constant(), S.per_step(np.ones(40))):
        out = tl.sgd.simulate(st, te, lr=0.5, lr_readout=0.2, t_max=2.0, seed=3, schedule=sched)
        np.testing.assert_array_equal(out.Q, ref.Q)
        np.testing.assert_array_equal(out.student.W, ref.student.W)


def test_scheduled_descent_equals_steps_chained_by_hand():
    st, te = _relu_pair()
    sched = S.geometric(0.8, every=1.0)
    lr, lr_a, n = 0.2, 0.1, 12
    out = tl.population.descend(st, te, lr=lr, lr_readout=lr_a, n_steps=n, schedule=sched)
    net = st
    for k in range(n):
        s = float(sched(k))
        net = tl.population.descend(net, te, lr=lr * s, lr_readout=lr_a * s, n_steps=1).student
    np.testing.assert_allclose(out.student.W, net.W, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(out.student.a, net.a, rtol=1e-13, atol=1e-15)
    # a callable is evaluated once per iteration into a table: the same run
    call = tl.population.descend(st, te, lr=lr, lr_readout=lr_a, n_steps=n, schedule=lambda k: 0.8**k)
    np.testing.assert_allclose(call.student.W, out.student.W, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("sched, tau", [
    (S.inverse_time(2.0), lambda t: 2.0 * np.log1p(t / 2.0)),
    (S.geometric(0.5, every=3.0, start=1.0),
     lambda t: np.minimum(t, 1.0) + 3.0 / np.log(2) * (1 - 0.5 ** (np.maximum(t - 1.0, 0) / 3.0))),
    (S.step_decay(0.5, every=1.5), lambda t: sum(np.clip(t - 1.5 * j, 0, 1.5) * 0.5**j for j in range(20))),
])
def test_scheduled_gradient_flow_is_the_flow_at_reparametrised_time(sched, tau):
    """Gradient flow with lr s(t) is the unscheduled flow at tau(t) = int_0^t s (readout trained too)."""
    st, te = _relu_pair()
    ov = tl.Overlaps.from_networks(st, te)
    ts = np.linspace(0.0, 6.0, 13)
    kw = dict(lr=0.7, lr_readout=0.3, regime="gradient_flow", method="adaptive", rtol=1e-11, atol=1e-13)
    out = tl.ode.integrate(ov, times=ts, schedule=sched, **kw)
    ref = tl.ode.integrate(ov, times=tau(ts), **kw)
    assert out.status == ref.status == "completed"
    np.testing.assert_allclose(out.Q, ref.Q, atol=1e-9)
    np.testing.assert_allclose(out.M, ref.M, atol=1e-9)
    np.testing.assert_allclose(out.a, ref.a, atol=1e-9)
    rk4 = tl.ode.integrate(ov, times=ts, schedule=sched, **{**kw, "method": "rk4", "dt": 1e-3})
    np.testing.assert_allclose(rk4.Q, ref.Q, atol=2e-3 if sched.kind == "step" else 1e-9)


def test_ode_refuses_per_step_tables():
    st, te = _relu_pair()
    with pytest.raises(ValueError, match="per-step"):
        tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=0.5, t_max=1.0, schedule=S.per_step([1.0, 0.5]))


@pytest.mark.parametrize("sched", [S.inverse_time(10.0), S.step_decay(0.5, every=20.0)])
def test_scheduled_ode_agrees_with_scheduled_sgd(sched):
    """Online SGD (d = 500, 12 seeds) with lr s(n / d) against the ODE with lr s(t): the erf plateau and escape,
    whose timing depends on the annealing, within the test_sgd_ode tolerances."""
    d = 500
    st, te = erf_plateau_pair(d)
    ens = tl.sgd.simulate(st, te, lr=1.5, t_max=80.0, n_records=33, seed=1, seeds=12, schedule=sched)
    ref = tl.ode.integrate(tl.Overlaps.from_networks(st, te), "erf", lr=1.5, times=ens.t, rtol=1e-9, atol=1e-11,
                           schedule=sched)
    assert ref.status == "completed"
    unscheduled = tl.ode.integrate(tl.Overlaps.from_networks(st, te), "erf", lr=1.5, times=ens.t)
    assert np.max(np.abs(unscheduled.risk - ref.risk)) > 5e-3  # the schedule matters at this scale
    compare(ens, ref, d, c_sqrt=0.2)


def test_step_descent_with_geometric_schedule_reaches_1e_9():
    """Mariantoni & Chizat's setting (m = 4, d = 50, Gaussian init): fixed steps stop at the oscillation floor, a
    geometric decay after the approach converges to ~1e-9 and below."""
    st, te = teacher_student(4, 4, 50, "step", init="gaussian", seed=0)
    fixed = tl.population.descend(st, te, lr=1.0, n_steps=6000, n_records=2)
    sched = S.geometric(0.5, every=150.0, start=3000.0)
    out = tl.population.descend(st, te, lr=1.0, n_steps=6000, n_records=2, schedule=sched)
    assert fixed.final_risk > 1e-6
    assert out.final_risk <= 1e-9


def test_step_gradient_flow_with_schedule():
    """Flow time tau_n = lr sum_{j < n} s(j); decaying steps resolve the cusp. Mariantoni & Chizat's scaling (lambda =
    w.x, rows N(0, I / d)): the approach takes tau ~ 80 at lr = 0.02, where fixed steps oscillate at risk ~1e-3;
    halving the step every 200 iterations after that brings the risk to the resolution of the overlap-based
    risk (an aligned pair whose cos theta does not round to 1 leaves theta ~ sqrt(2 eps) ~ 1.5e-8, i.e. a risk
    ~2.4e-9 per such pair)."""
    rng = np.random.default_rng(1)
    d, m = 30, 3
    te = tl.Network(rng.standard_normal((m, d)) / np.sqrt(d), None, "step", scaling="none")
    st = tl.Network(rng.standard_normal((m, d)) / np.sqrt(d), None, "step", scaling="none")
    sched = S.step_decay(0.5, every=200.0, start=4000.0)  # total flow time 80 + 4 * 2 = 88
    times = np.array([0.0, 1.0, 10.0, 80.0, 88.0 - 1e-8])
    path = tl.landscape.step_gradient_flow(st, te, times, lr=0.02, schedule=sched)
    assert path.status == "completed"
    np.testing.assert_allclose(path.tau, times, atol=0.02)
    plain = tl.landscape.step_gradient_flow(st, te, times[:4], lr=0.02)
    np.testing.assert_array_equal(path.W[:4], plain.W)  # s = 1 before `start`: the same iterations
    assert plain.risk[-1] > 1e-4
    assert path.risk[-1] <= 1e-8
    with pytest.raises(ValueError, match="decays too fast"):
        tl.landscape.step_gradient_flow(st, te, [0.0, 1e3], lr=0.02, schedule=S.geometric(0.5))


@pytest.mark.parametrize("kw,match", [
    ({"kind": "step", "gamma": 2.0}, "gamma: expected a decay factor in"),
    ({"kind": "bogus"}, "kind: expected one of"),
    ({"kind": "geometric", "every": 0.0}, "every: expected a finite number > 0"),
    ({"kind": "constant", "value": float("nan")}, "value: expected a finite real number"),
    ({"kind": "step", "start": -1.0}, "start: expected a finite number >= 0"),
    ({"kind": "table", "values": [-1.0]}, "values: expected values >= 0"),
    ({"kind": "table", "values": [1.0], "dt": 0.0}, "dt: expected a finite number > 0"),
    ({"kind": "table", "values": [1.0], "interpolation": "cubic"}, "interpolation: expected one of"),
])
def test_direct_construction_is_checked(kw, match):
    """Schedule(gamma=2.0) was accepted, an unknown kind failed later with a raw KeyError."""
    with pytest.raises(ValueError, match=match):
        tl.schedules.Schedule(**kw)


def test_as_schedule_checks_its_grid_arguments():
    f = lambda t: 1.0 + 0.0 * t  # noqa: E731
    with pytest.raises(ValueError, match="n_steps: expected an integer"):
        tl.schedules.as_schedule(f, n_steps=-1)
    with pytest.raises(TypeError, match="n_steps: expected an integer"):
        tl.schedules.as_schedule(f, n_steps=2.5)
    with pytest.raises(TypeError, match="step_time: expected a real number"):
        tl.schedules.as_schedule(f, n_steps=2, step_time="x")
    with pytest.raises(ValueError, match="t_max: expected a finite real number"):
        tl.schedules.as_schedule(f, t_max=float("nan"))
    with pytest.raises(MemoryError, match=r"n_steps: cannot allocate 1.126e\+15 float64 values"):
        tl.schedules.as_schedule(f, n_steps=2**50)
    with pytest.raises(ValueError, match="t_max, dt: the grid"):
        tl.schedules.from_function(f, t_max=1e300, dt=1e-300)
    assert tl.schedules.as_schedule(tl.schedules.step_decay(0.5, 1.0), t_max=0.0) is not None
