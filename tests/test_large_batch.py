"""The large-batch map (seed 002; cpp/include/twolayer/large_batch.hpp, twolayer.large_batch).

* Its linear and squared-population-gradient terms are exact at any finite d: with batch_ratio -> infinity one
  iteration is one step of weight-space population gradient descent (``population.gradient``), lr = gamma0 d.
* The whole map, with the finite-batch term phi^HD / alpha, against SGD with n_b = alpha d and lr = gamma0 d
  (``sgd.simulate``): the ensemble mean within 4 standard errors + c / d, and (slow) the single runs' distance to
  the map shrinking like 1 / sqrt(d) over d = 1000, 2000, 4000.
* Layer-wise training: the population ridge readout is the stationary point of the readout's gradient flow
  (the ODE's da), and the map's layer-wise result against the simulator's (SGD, then ridge on fresh samples).
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer.networks import Network, teacher_student


def _pair(K: int, M: int, d: int, act: str = "erf", t_act: str | None = None, seed: int = 1, a: float = 1.0):
    st, te = teacher_student(K, M, d, act, t_act, seed=seed)
    W = np.random.default_rng(seed + 7).standard_normal((K, d)) * 0.7
    return st.with_weights(W, a * np.ones(K)), te


@pytest.mark.parametrize(("act", "t_act"), [("erf", "erf"), ("relu", "relu"), ("relu", "quadratic"),
                                             ("linear", "erf"), ("quadratic", "relu")])
def test_infinite_batch_is_population_gradient_descent(act, t_act):
    """alpha -> infinity: Q', M' of the map = those of W' = W - gamma0 d dR/dW at finite d (exact)."""
    d, gamma0 = 40, 0.3
    st, te = _pair(3, 2, d, act, t_act, seed=4)
    ov = tl.Overlaps.from_networks(st, te)
    tr = tl.ode.integrate(ov, lr=gamma0, regime="large_batch", batch_ratio=1e15, n_steps=1)
    dW, _ = tl.population.gradient(st, te, train_readout=False)
    new = st.with_weights(st.W - gamma0 * d * dW)
    ref = tl.Overlaps.from_networks(new, te)
    assert tr.status == "completed" and tr.t.tolist() == [0.0, 1.0]
    np.testing.assert_allclose(tr.Q[1], ref.Q, rtol=0, atol=1e-11 * (1 + np.abs(ref.Q).max()))
    np.testing.assert_allclose(tr.M[1], ref.M, rtol=0, atol=1e-11 * (1 + np.abs(ref.M).max()))
    np.testing.assert_allclose(tr.risk[1], tl.population.risk(new, te), rtol=1e-10)


def _compare_with_sgd(d: int, steps: int, runs: int, gamma0: float, alpha: float, spherical: bool = False,
                      act: str = "erf", t_act: str = "erf", noise: float = 0.0):
    st, te = _pair(2, 2, d, act, t_act, seed=3)
    if spherical:
        st = st.with_weights(st.W / np.linalg.norm(st.W, axis=1, keepdims=True) * np.sqrt(d))
    ov = tl.Overlaps.from_networks(st, te)
    tr = tl.ode.integrate(ov, lr=gamma0, regime="large_batch", batch_ratio=alpha, n_steps=steps, noise=noise,
                          spherical=spherical)
    ens = tl.sgd.simulate(st, te, lr=gamma0 * d, batch_size=int(round(alpha * d)), t_max=steps / d,
                          n_records=steps + 1, seeds=runs, noise=noise, spherical=spherical, keep_weights=False)
    np.testing.assert_allclose(ens.t * d, tr.t, atol=1e-9)
    return tr, ens


def _assert_close_in_mean(tr, ens, c: float):
    runs = ens.Q.shape[0]
    for name in ("Q", "M"):
        x = getattr(ens, name)
        mean, sem = x.mean(0), x.std(0, ddof=1) / np.sqrt(runs)
        err = np.abs(mean - getattr(tr, name))
        assert np.all(err <= 4 * sem + c), (name, err.max(), sem.max())


@pytest.mark.parametrize(("alpha", "spherical", "t_act", "noise"), [(1.0, False, "erf", 0.0),
                                                                    (0.5, False, "erf", 0.3),
                                                                    (1.0, True, "erf", 0.0),
                                                                    (1.0, False, "quadratic", 0.0)])
def test_map_against_sgd_small(alpha, spherical, t_act, noise):
    """d = 1000, a few iterations, 6 runs: mean within 4 SEM + 2 / d (the finite-d bias)."""
    tr, ens = _compare_with_sgd(1000, 4, 6, gamma0=1.0, alpha=alpha, spherical=spherical, t_act=t_act, noise=noise)
    _assert_close_in_mean(tr, ens, 2.0 / 1000)


def test_each_term_of_the_map_is_needed():
    """One iteration from the same start: the map agrees with SGD, while dropping the 1/alpha term (alpha -> inf),
    or both quadratic terms (the linear, gradient-flow step), moves Q by many standard errors of the SGD mean."""
    d, gamma0, alpha = 1000, 1.5, 0.5
    tr, ens = _compare_with_sgd(d, 1, 8, gamma0=gamma0, alpha=alpha)
    sem = ens.Q[:, 1].std(0, ddof=1) / np.sqrt(8)
    mean = ens.Q[:, 1].mean(0)
    assert np.all(np.abs(tr.Q[1] - mean) <= 4 * sem + 2.0 / d)
    ov = tl.Overlaps(tr.Q[0], tr.M[0], tr.P, tr.a[0], tr.v)
    no_hd = tl.ode.integrate(ov, "erf", lr=gamma0, regime="large_batch", batch_ratio=1e15, n_steps=1).Q[1]
    dQ, _, _ = tl.ode.rhs(ov, "erf", lr=gamma0, regime="gradient_flow")
    linear = ov.Q + dQ
    assert np.max(np.abs(no_hd - mean) / sem) > 10
    assert np.max(np.abs(linear - no_hd) / sem) > 5


def _fixed_overlap_pair(d: int, seed: int = 0):
    """K = M = 2 erf networks at input dimension d whose overlaps are the same for every d (a fixed Gram
    factor in a random orthonormal frame), so that runs at different d follow one and the same map."""
    L = np.array([[0.8, 0.0, 0.0, 0.0], [0.1, 0.7, 0.0, 0.0], [0.3, 0.2, 0.9, 0.0], [0.1, -0.3, 0.2, 0.9]])
    U, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, 4)))
    W = L @ U.T * np.sqrt(d)
    return Network(W[:2], np.ones(2), "erf"), Network(W[2:], np.ones(2), "erf")


@pytest.mark.slow
def test_map_against_sgd_gap_shrinks_like_inverse_sqrt_d():
    """Same overlaps at d = 1000, 2000, 4000, 24 runs each: the ensemble mean within 5 SEM + 2 / d of the map, and
    the runs' spread around the map shrinking like d^(-1/2) (log-log slope in [-0.75, -0.35])."""
    runs, steps, sds = 24, 4, []
    for d in (1000, 2000, 4000):
        st, te = _fixed_overlap_pair(d)
        tr = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, regime="large_batch", batch_ratio=1.0,
                              n_steps=steps)
        ens = tl.sgd.simulate(st, te, lr=float(d), batch_size=d, t_max=steps / d, n_records=steps + 1, seeds=runs,
                              keep_weights=False)
        dev = np.concatenate([(ens.Q - tr.Q)[:, 1:].reshape(runs, -1), (ens.M - tr.M)[:, 1:].reshape(runs, -1)], 1)
        sem = dev.std(0, ddof=1) / np.sqrt(runs)
        assert np.all(np.abs(dev.mean(0)) <= 5 * sem + 2.0 / d), (d, np.max(np.abs(dev.mean(0)) / sem))
        sds.append(float(np.sqrt(np.mean(dev.std(0, ddof=1) ** 2))))
    slope = np.polyfit(np.log([1000, 2000, 4000]), np.log(sds), 1)[0]
    assert -0.75 < slope < -0.35, (sds, slope)


def test_ridge_readout_is_stationary_for_the_readout_flow():
    """At a = ridge_readout(...): E[g(l_i) E] = ridge a_i, the readout's population gradient flow (ODE da)."""
    rng = np.random.default_rng(2)
    for act, t_act in (("erf", "erf"), ("relu", "quadratic"), ("relu", "relu")):
        A = rng.standard_normal((5, 7))
        Om = A @ A.T / 7
        ov = tl.Overlaps(Om[:3, :3], Om[:3, 3:], Om[3:, 3:], np.zeros(3), np.array([1.0, -0.5]))
        for ridge in (0.0, 0.1):
            a = tl.large_batch.ridge_readout(ov, act, t_act, ridge)
            ov_a = tl.Overlaps(ov.Q, ov.M, ov.P, a, ov.v)
            _, _, da = tl.ode.rhs(ov_a, act, t_act, lr=0.0, lr_readout=1.0, regime="gradient_flow")
            np.testing.assert_allclose(da, ridge * a, rtol=0, atol=1e-12)


def test_layerwise_map_against_simulation():
    """Layer-wise training: first layer for T steps (second fixed), then ridge on the features; map vs SGD."""
    d, T, gamma0, alpha = 1000, 3, 1.0, 1.0
    st, te = _pair(2, 2, d, "relu", "relu", seed=5)
    ov = tl.Overlaps.from_networks(st, te)
    lw = tl.large_batch.layerwise(ov, lr=gamma0, batch_ratio=alpha, n_steps=T, ridge=1e-3)
    sims = [tl.large_batch.simulate_layerwise(st, te, lr=gamma0 * d, batch_size=d, n_steps=T, ridge=1e-3,
                                              n_ridge=4 * d, seed=s) for s in range(4)]
    a_sim = np.array([s.a for s in sims])
    r_sim = np.array([s.risk for s in sims])
    assert lw.first.t.tolist() == [0, 1, 2, 3]
    np.testing.assert_allclose(a_sim.mean(0), lw.a, atol=0.05 * (1 + np.abs(lw.a).max()))
    assert abs(r_sim.mean() - lw.risk) < 0.1 * lw.risk + 4 * r_sim.std(ddof=1) / 2
    assert lw.risk < tl.population.risk(st, te)  # the ridge readout on learned features beats the initial one


def test_bad_input():
    st, te = _pair(2, 2, 50)
    ov = tl.Overlaps.from_networks(st, te)
    for ratio in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="batch_ratio"):
            tl.ode.integrate(ov, lr=1.0, regime="large_batch", batch_ratio=ratio, n_steps=2)
    with pytest.raises(ValueError, match="batch_ratio"):
        tl.ode.integrate(ov, lr=1.0, regime="large_batch", n_steps=2)
    for steps in (0, -3):
        with pytest.raises(ValueError, match="steps"):
            tl.ode.integrate(ov, lr=1.0, regime="large_batch", batch_ratio=1.0, n_steps=steps)
    with pytest.raises(TypeError, match="steps"):
        tl.ode.integrate(ov, lr=1.0, regime="large_batch", batch_ratio=1.0, n_steps=2.5)
    with pytest.raises(ValueError, match="steps"):
        tl.ode.integrate(ov, lr=1.0, regime="large_batch", batch_ratio=1.0)
    with pytest.raises(ValueError, match="lr"):
        tl.ode.integrate(ov, lr=-1.0, regime="large_batch", batch_ratio=1.0, n_steps=1)
    with pytest.raises(ValueError, match="spherical"):
        tl.ode.integrate(ov, lr=1.0, regime="large_batch", batch_ratio=1.0, n_steps=1, spherical=True)
    with pytest.raises(ValueError, match="regime"):
        tl.ode.integrate(ov, lr=1.0, regime="large", t_max=1.0)
    with pytest.raises(ValueError, match="t_max"):
        tl.ode.integrate(ov, lr=1.0, regime="large_batch", batch_ratio=1.0, n_steps=1, t_max=1.0)
    with pytest.raises(ValueError, match="lr_readout"):
        tl.ode.integrate(ov, lr=1.0, lr_readout=0.1, regime="large_batch", batch_ratio=1.0, n_steps=1)
    with pytest.raises(ValueError, match="ridge"):
        tl.large_batch.ridge_readout(ov, "erf", "erf", ridge=-1.0)


def test_divergence_is_reported():
    st, te = _pair(2, 2, 50, "quadratic", "quadratic")
    ov = tl.Overlaps.from_networks(st, te)
    tr = tl.ode.integrate(ov, lr=50.0, regime="large_batch", batch_ratio=0.1, n_steps=200)
    assert tr.status == "diverged" and len(tr.t) < 201 and np.isfinite(tr.Q).all()
    assert tr.stop_time == len(tr.t)


def test_network_import():
    assert isinstance(_pair(1, 1, 10)[0], Network)
