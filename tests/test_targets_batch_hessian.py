"""Polynomial targets in the batch engine (bitwise against ode.integrate one by one), the population Hessian with
a target (against finite differences of the exact population gradient), and clear errors where a target is not
taken."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer import _core

D = 40


def _targets():
    tgt = tl.targets.staircase(3, d=D, seed=0)
    other = tl.targets.hermite({(1, 0, 0): 1.0, (0, 2, 0): 0.5, (1, 1, 1): -0.7}, directions=tgt.directions)
    return tgt, other


def _overlaps(act, tgt, seed, K=2):
    st = tl.Network.random(K, D, act, seed=seed)
    st = st.with_weights(st.W + 0.4 * tgt.directions[np.arange(K) % tgt.k], np.linspace(0.6, -0.3, K))
    return tl.Overlaps.from_networks(st, tgt)


def _assert_same(member, alone):
    for name in ("t", "Q", "M", "a", "risk"):
        np.testing.assert_array_equal(getattr(member, name), getattr(alone, name), err_msg=name)
    assert member.status == alone.status
    assert member.meta["n_rhs"] == alone.meta["n_rhs"]


@pytest.mark.parametrize(("act", "regime"), [("relu", "online"), ("erf", "online"), ("relu", "gradient_flow"),
                                             ("step", "gradient_flow")])
def test_batch_with_targets_is_bitwise_one_by_one(act, regime):
    """Shared and per-member targets, K = 2 and 3 (two shape groups), per-member lr: every member equals
    ode.integrate(..., target=) of that member alone, bit for bit."""
    tgt, other = _targets()
    ovs = [_overlaps(act, tgt, 0), _overlaps(act, other, 1), _overlaps(act, tgt, 2, K=3)]
    lrs = [0.3, 0.5, 0.4]
    kw = dict(lr_readout=0.2, t_max=1.0, n_records=5, regime=regime, readout="mean")
    batch = tl.ode.integrate_batch(ovs, act, lr=lrs, **kw)  # the targets the overlaps remember
    assert batch.Q.shape == (3, 5, 3, 3) and list(batch.n_student) == [2, 2, 3]
    for b, ov in enumerate(ovs):
        _assert_same(batch[b], tl.ode.integrate(ov, act, lr=lrs[b], **kw))
    ds = batch.to_xarray()
    assert ds.sizes["member"] == 3 and "target" in ds.attrs


def test_batch_shared_target_on_stacked_overlaps_and_xarray():
    tgt, _ = _targets()
    ovs = [_overlaps("relu", tgt, s) for s in range(3)]
    stack = tl.BatchOverlaps(np.stack([o.Q for o in ovs]), np.stack([o.M for o in ovs]), np.eye(3),
                             np.stack([o.a for o in ovs]), np.zeros(3))
    batch = tl.ode.integrate_batch(stack, "relu", target=tgt, lr=0.4, t_max=1.5, n_records=4, risk_tol=[0, 0.2, 0])
    for b, ov in enumerate(ovs):
        _assert_same(batch[b], tl.ode.integrate(ov, "relu", lr=0.4, t_max=1.5, n_records=4,
                                                risk_tol=[None, 0.2, None][b]))
    assert batch.meta["target"] == repr(tgt)
    back = tl.BatchTrajectory.from_xarray(batch.to_xarray())
    np.testing.assert_array_equal(back.Q, batch.Q)


def test_batch_mixes_committee_and_target_members():
    tgt, _ = _targets()
    s, t = tl.networks.teacher_student(2, 3, D, "relu", seed=0)
    committee = tl.Overlaps.from_networks(s, t)
    ovs = [_overlaps("relu", tgt, 0), committee]
    batch = tl.ode.integrate_batch(ovs, "relu", lr=0.3, t_max=1.0, n_records=3)
    _assert_same(batch[0], tl.ode.integrate(ovs[0], "relu", lr=0.3, t_max=1.0, n_records=3))
    _assert_same(batch[1], tl.ode.integrate(committee, "relu", lr=0.3, t_max=1.0, n_records=3))


def test_batch_target_errors():
    tgt, _ = _targets()
    ovs = [_overlaps("relu", tgt, s) for s in range(2)]
    fn = tl.targets.function(lambda z: z[:, 0] * z[:, 1], k=3, d=D, seed=0)
    with pytest.raises(TypeError, match="target: a FunctionTarget"):
        tl.ode.integrate_batch(ovs, "relu", lr=0.3, t_max=1.0, target=fn)
    with pytest.raises(TypeError, match=r"target\[1\]: a FunctionTarget"):
        tl.ode.integrate_batch(ovs, "relu", lr=0.3, t_max=1.0, target=[tgt, fn])
    with pytest.raises(ValueError, match=r"target: expected one target for all members or one per member \(2\)"):
        tl.ode.integrate_batch(ovs, "relu", lr=0.3, t_max=1.0, target=[tgt])
    with pytest.raises(ValueError, match="regime: integrate_batch integrates the ODE"):
        tl.ode.integrate_batch(ovs, "relu", lr=0.3, regime="large_batch")
    k2 = tl.targets.staircase(2, d=D, seed=0)
    with pytest.raises(ValueError, match=r"overlaps\[0\]: M: must be \(K, k\) = \(2, 2\)"):
        tl.ode.integrate_batch(ovs, "relu", lr=0.3, t_max=1.0, target=k2)
    with pytest.raises(ValueError, match="regime: the step activation"):
        tl.ode.integrate_batch([_overlaps("step", tgt, 0)], "step", lr=0.3, t_max=1.0)


def _fd_hessian(student, teacher, h=1e-5):
    K, d = student.K, student.d
    n = K * d
    x0 = np.concatenate([student.W.ravel(), student.a])

    def grad(x):
        gW, ga = tl.population.gradient(student.with_weights(x[:n].reshape(K, d), x[n:]), teacher)
        return np.concatenate([gW.ravel(), ga])

    H = np.empty((x0.size, x0.size))
    for j in range(x0.size):
        e = np.zeros_like(x0)
        e[j] = h
        H[:, j] = (grad(x0 + e) - grad(x0 - e)) / (2 * h)
    return H


@pytest.mark.parametrize("act", ["erf", "relu", "linear", "quadratic", "step"])
@pytest.mark.parametrize("scaling", ["sqrt_d", "none"])
def test_hessian_with_target_against_finite_differences(act, scaling):
    """d^2 R / d theta^2 of -sum_i c a_i E[sigma(l_i) f] + the student part, against central differences of the
    exact population gradient (itself checked against Monte Carlo in test_targets.py): error O(h^2 |R'''|)."""
    d = 8
    coefs = {(1, 0): 1.0, (1, 1): 0.8, (0, 3): 0.5, (2, 0): -0.3, (0, 0): 0.2}
    if scaling == "sqrt_d":
        tgt = tl.targets.hermite(coefs, d=d, seed=0)
    else:
        W = np.linalg.qr(np.random.default_rng(0).standard_normal((d, 2)))[0].T
        tgt = tl.targets.hermite(coefs, directions=W, scaling="none")
    st = tl.Network.random(3, d, act, seed=1, scaling=scaling, readout="mean")
    st = st.with_weights(st.W + 0.5 * tgt.directions[[0, 1, 0]], np.array([0.7, -0.4, 0.5]))
    H = tl.population.hessian(st, tgt)
    Hfd = _fd_hessian(st, tgt)
    np.testing.assert_allclose(H, Hfd, rtol=0, atol=2e-8 * max(1.0, np.max(np.abs(H))))
    np.testing.assert_allclose(H, H.T, rtol=0, atol=1e-15 * np.max(np.abs(H)))  # as the committee Hessian
    Hw = tl.population.hessian(st, tgt, train_readout=False)
    np.testing.assert_array_equal(Hw, H[:st.K * d, :st.K * d])


def test_target_unit_jet_value_and_first_derivatives():
    """Phi = E[sigma(l) f], Phi_m = E[sigma'(l) d_r f] and Phi_q against the exact expectations (target.hpp) and
    central differences of Phi in q and m."""
    tgt = tl.targets.hermite({(1, 0): 1.0, (1, 1): 0.8, (0, 3): 0.5}, d=10, seed=0)
    alpha, coef = tgt._arrays()
    q, m = np.array([0.9]), np.array([[0.3, -0.2]])
    for act in ("erf", "relu", "linear", "quadratic", "step"):
        phi, phi_q, phi_m, phi_qq, phi_qm, phi_mm = _core.target_unit_jet(alpha, coef, q, m, act)
        direct = _core.target_expectation(act, q[:, None], m, np.array([[0, 1, 0]]), alpha, coef)
        assert phi[0] == pytest.approx(direct, abs=1e-13)

        def jet(qq, mm, act=act):
            return _core.target_unit_jet(alpha, coef, np.array([qq]), mm[None, :], act)

        h = 1e-5
        assert phi_q[0] == pytest.approx((jet(q[0] + h, m[0])[0][0] - jet(q[0] - h, m[0])[0][0]) / (2 * h),
                                         abs=1e-8)
        assert phi_qq[0] == pytest.approx((jet(q[0] + h, m[0])[1][0] - jet(q[0] - h, m[0])[1][0]) / (2 * h),
                                          abs=1e-7)
        for r in range(2):
            e = np.eye(2)[r] * h
            assert phi_m[0, r] == pytest.approx((jet(q[0], m[0] + e)[0][0] - jet(q[0], m[0] - e)[0][0]) / (2 * h),
                                                abs=1e-8)
            np.testing.assert_allclose(phi_mm[0, r], (jet(q[0], m[0] + e)[2][0] - jet(q[0], m[0] - e)[2][0]) / (2 * h),
                                       atol=1e-7)
            assert phi_qm[0, r] == pytest.approx((jet(q[0], m[0] + e)[1][0] - jet(q[0], m[0] - e)[1][0]) / (2 * h),
                                                 abs=1e-7)


def test_targets_where_not_taken_give_clear_errors():
    tgt = tl.targets.staircase(2, d=10, seed=0)
    st = tl.Network.random(2, 10, "relu", seed=0)
    fn = tl.targets.function(lambda z: z[:, 0] * z[:, 1], k=2, d=10, seed=0)
    with pytest.raises(TypeError, match="teacher: the population Hessian of a FunctionTarget has no closed form"):
        tl.population.hessian(st, fn)
    with pytest.raises(TypeError, match="teacher: expected a committee twolayer.Network here, got a HermiteTarget"):
        tl.landscape.refine(st, tgt)
    with pytest.raises(TypeError, match="teacher: expected a committee twolayer.Network here"):
        tl.population.descend(st, tgt, lr=0.1, n_steps=2)
    with pytest.raises(ValueError, match="teacher: the target's d = 10"):
        tl.population.hessian(tl.Network.random(2, 12, "relu", seed=0), tgt)
    with pytest.raises(TypeError, match="student: expected a twolayer.Network"):
        tl.population.hessian(np.eye(2), tgt)


def test_function_target_fixed_training_set():
    """A FunctionTarget trains on a fixed set too (n_samples, shuffle as the core's simulator): reproducible,
    the order matters only when shuffled, batches crossing an epoch are allowed, and a tiny set is fitted
    (memorised) where online SGD is not."""
    d = 30
    fn = tl.targets.function(lambda z: z[:, 0] * z[:, 1], k=2, d=d, seed=0)
    st = tl.Network.random(2, d, "erf", seed=0)
    kw = dict(lr=0.5, t_max=2.0, batch_size=7, n_samples=25, seed=3, n_records=4)
    a, b = tl.sgd.simulate(st, fn, **kw), tl.sgd.simulate(st, fn, **kw)
    np.testing.assert_array_equal(a.Q, b.Q)
    assert a.meta["n_samples"] == 25 and "training set of 25" in a.message
    c = tl.sgd.simulate(st, fn, **{**kw, "shuffle": False})
    assert not np.array_equal(a.Q, c.Q)
    full = [tl.sgd.simulate(st, fn, **{**kw, "batch_size": 25, "shuffle": s}) for s in (True, False)]
    np.testing.assert_array_equal(full[0].Q, full[1].Q)  # full batches: the order does not matter
    with pytest.raises(ValueError, match="batch_size: 30 exceeds the training set size n_samples=25"):
        tl.sgd.simulate(st, fn, **{**kw, "batch_size": 30})
    with pytest.raises(ValueError, match="n_samples"):
        tl.sgd.simulate(st, fn, **{**kw, "n_samples": 0})


def test_sde_takes_the_target_the_overlaps_remember():
    # Overlaps.from_networks(student, target) carry the target: the SDE uses it (not a zero teacher), exactly as
    # when it is passed explicitly.
    tgt = tl.targets.staircase(2, d=30, seed=0)
    ov = tl.Overlaps.from_networks(tl.Network.random(2, 30, "relu", seed=0), tgt)
    remembered = tl.sde.increment_covariance(ov, "relu", lr=0.5)
    explicit = tl.sde.increment_covariance(ov, "relu", lr=0.5, target=tgt)
    np.testing.assert_array_equal(remembered.cov, explicit.cov)
    np.testing.assert_array_equal(remembered.mean, explicit.mean)
    assert np.abs(remembered.mean).max() > 0
