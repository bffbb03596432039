"""The large-batch map with polynomial multi-index targets (seed 002; twolayer.large_batch, TargetRhs::add_raw).

* alpha -> infinity: one iteration of the map with a target is one step of weight-space population gradient
  descent (``population.gradient(student, target)``, lr = gamma0 d), exact at any finite d (to rounding).
* The whole map (with phi^HD / alpha) against SGD with n_b = alpha d, lr = gamma0 d on the staircase
  z1 + z1 z2 + z1 z2 z3: the ensemble mean within 4 standard errors + 2 / d at d = 1000, and (slow) the runs'
  distance to the map shrinking like 1 / sqrt(d) over d = 1000, 2000, 4000.
* The 1/alpha term (phi^HD with the target's raw parts) against Monte Carlo for relu and erf students.
* A committee teacher is untouched by the target path (tests/test_large_batch.py checks its values).
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer.networks import Network


def _student(K: int, d: int, act: str, seed: int = 4, spherical: bool = False) -> Network:
    W = np.random.default_rng(seed).standard_normal((K, d)) * 0.7
    if spherical:
        W = W / np.linalg.norm(W, axis=1, keepdims=True) * np.sqrt(d)
    return Network(W, np.array([1.0, -0.5, 0.8, 0.6][:K]), act)


@pytest.mark.parametrize("act", ["erf", "relu", "linear", "quadratic"])
@pytest.mark.parametrize("coefs", [{(1, 0, 0): 1.0, (1, 1, 0): 1.0, (1, 1, 1): 1.0},  # the staircase
                                   {(1, 1): 1.0},                                       # z1 z2 (leap 2)
                                   {(3,): 0.5, (1,): -0.3, (0,): 0.2}])                 # single index
def test_infinite_batch_with_a_target_is_population_gradient_descent(act, coefs):
    """alpha -> infinity: Q', M' and the risk of the map = those of W' = W - gamma0 d dR/dW (exact, finite d)."""
    d, gamma0 = 40, 0.3
    k = len(next(iter(coefs)))
    tgt = tl.targets.hermite(coefs, d=d, seed=0)
    st = _student(3, d, act)
    ov = tl.Overlaps.from_networks(st, tgt)
    tr = tl.ode.integrate(ov, act, target=tgt, lr=gamma0, regime="large_batch", batch_ratio=1e15, n_steps=1)
    dW, _ = tl.population.gradient(st, tgt, train_readout=False)
    new = st.with_weights(st.W - gamma0 * d * dW)
    ref = tl.Overlaps.from_networks(new, tgt)
    assert tr.status == "completed" and tr.t.tolist() == [0.0, 1.0] and tr.M.shape == (2, 3, k)
    assert tr.meta["teacher_activation"] == "target" and tr.time_unit.startswith("t = iteration")
    np.testing.assert_allclose(tr.Q[1], ref.Q, rtol=0, atol=1e-10 * (1 + np.abs(ref.Q).max()))
    np.testing.assert_allclose(tr.M[1], ref.M, rtol=0, atol=1e-10 * (1 + np.abs(ref.M).max()))
    np.testing.assert_allclose(tr.risk[1], tl.population.risk(new, tgt), rtol=1e-10, atol=1e-12)


def test_target_taken_from_the_overlaps():
    """Overlaps.from_networks(student, tgt) remembers the target: target= may be left out, same numbers."""
    d = 50
    tgt = tl.targets.staircase(3, d=d, seed=1)
    ov = tl.Overlaps.from_networks(_student(2, d, "relu"), tgt)
    a = tl.ode.integrate(ov, "relu", target=tgt, lr=0.5, regime="large_batch", batch_ratio=2.0, n_steps=3)
    b = tl.ode.integrate(ov, "relu", lr=0.5, regime="large_batch", batch_ratio=2.0, n_steps=3)
    np.testing.assert_array_equal(a.Q, b.Q)
    np.testing.assert_array_equal(a.M, b.M)


def _compare_with_sgd(tgt, st: Network, steps: int, runs: int, gamma0: float, alpha: float,
                      spherical: bool = False, noise: float = 0.0):
    d = st.d
    ov = tl.Overlaps.from_networks(st, tgt)
    tr = tl.ode.integrate(ov, st.activation, target=tgt, lr=gamma0, regime="large_batch", batch_ratio=alpha,
                          n_steps=steps, noise=noise, spherical=spherical)
    ens = tl.sgd.simulate(st, tgt, lr=gamma0 * d, batch_size=int(round(alpha * d)), t_max=steps / d,
                          n_records=steps + 1, seeds=runs, noise=noise, spherical=spherical, keep_weights=False)
    np.testing.assert_allclose(ens.t * d, tr.t, atol=1e-9)
    return tr, ens


@pytest.mark.parametrize(("act", "alpha", "spherical", "noise"), [("relu", 1.0, False, 0.0),
                                                                  ("erf", 0.5, True, 0.2)])
def test_staircase_map_against_sgd_small(act, alpha, spherical, noise):
    """d = 1000, 4 iterations, 32 runs on the staircase: the SGD mean of Q and M within 4 SEM + 2 / d of the map."""
    d, runs = 1000, 32
    tgt = tl.targets.staircase(3, d=d, seed=0)
    tr, ens = _compare_with_sgd(tgt, _student(3, d, act, seed=5, spherical=spherical), 4, runs, gamma0=1.0,
                                alpha=alpha, spherical=spherical, noise=noise)
    assert tr.status == "completed"
    for name in ("Q", "M"):
        x = getattr(ens, name)
        mean, sem = x.mean(0), x.std(0, ddof=1) / np.sqrt(runs)
        err = np.abs(mean - getattr(tr, name))
        assert np.all(err <= 4 * sem + 2.0 / d), (name, err.max(), sem.max())


def test_finite_batch_term_is_needed_with_a_target():
    """One iteration at alpha = 0.5: SGD agrees with the map, not with the alpha -> infinity map (phi^HD dropped)."""
    d, runs, gamma0, alpha = 1000, 16, 1.0, 0.5
    tgt = tl.targets.staircase(3, d=d, seed=0)
    tr, ens = _compare_with_sgd(tgt, _student(2, d, "relu", seed=6), 1, runs, gamma0=gamma0, alpha=alpha)
    mean, sem = ens.Q[:, 1].mean(0), ens.Q[:, 1].std(0, ddof=1) / np.sqrt(runs)
    assert np.all(np.abs(tr.Q[1] - mean) <= 4 * sem + 2.0 / d)
    ov = tl.Overlaps(tr.Q[0], tr.M[0], tr.P, tr.a[0], tr.v)
    no_hd = tl.ode.integrate(ov, "relu", target=tgt, lr=gamma0, regime="large_batch", batch_ratio=1e15, n_steps=1)
    assert np.max(np.abs(no_hd.Q[1] - mean) / sem) > 10


def _fixed_overlap_student(d: int, K: int = 2, seed: int = 0) -> tuple[Network, tl.targets.HermiteTarget]:
    """A relu student and the staircase whose overlaps are the same at every d (a fixed Gram factor in a random
    orthonormal frame), so that runs at different d follow one and the same map."""
    L = np.array([[1.0, 0.0, 0.0, 0.0, 0.0], [0.1, 0.9, 0.0, 0.0, 0.0], [0.3, 0.1, 0.9, 0.0, 0.0],
                  [0.1, 0.2, 0.0, 0.97, 0.0], [0.05, 0.1, 0.0, 0.0, 0.99]])
    U, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, 5)))
    W = L @ U.T * np.sqrt(d)
    tgt = tl.targets.staircase(3, directions=U[:, 2:].T * np.sqrt(d))
    return Network(W[:K], np.array([1.0, 0.6]), "relu"), tgt


@pytest.mark.slow
def test_staircase_map_against_sgd_gap_shrinks_like_inverse_sqrt_d():
    """Same overlaps at d = 1000, 2000, 4000, 32 runs each, 4 iterations (gamma0 = 0.5, alpha = 1): the ensemble
    mean within 5 SEM + 2 / d of the map, and the runs' spread around the map shrinking like d^(-1/2) (log-log
    slope in [-0.75, -0.35])."""
    runs, steps, sds = 32, 4, []
    for d in (1000, 2000, 4000):
        st, tgt = _fixed_overlap_student(d)
        tr, ens = _compare_with_sgd(tgt, st, steps, runs, gamma0=0.5, alpha=1.0)
        dev = np.concatenate([(ens.Q - tr.Q)[:, 1:].reshape(runs, -1), (ens.M - tr.M)[:, 1:].reshape(runs, -1)], 1)
        sem = dev.std(0, ddof=1) / np.sqrt(runs)
        assert np.all(np.abs(dev.mean(0)) <= 5 * sem + 2.0 / d), (d, np.max(np.abs(dev.mean(0)) / sem))
        sds.append(float(np.sqrt(np.mean(dev.std(0, ddof=1) ** 2))))
    slope = np.polyfit(np.log([1000, 2000, 4000]), np.log(sds), 1)[0]
    assert -0.75 < slope < -0.35, (sds, slope)


def test_bad_input_with_a_target():
    d = 30
    tgt = tl.targets.staircase(3, d=d, seed=0)
    ov = tl.Overlaps.from_networks(_student(2, d, "erf"), tgt)
    kw = {"target": tgt, "lr": 1.0, "regime": "large_batch"}
    with pytest.raises(ValueError, match="batch_ratio"):
        tl.ode.integrate(ov, "erf", batch_ratio=-1.0, n_steps=2, **kw)
    with pytest.raises(ValueError, match="batch_ratio"):
        tl.ode.integrate(ov, "erf", n_steps=2, **kw)
    with pytest.raises(ValueError, match="steps"):
        tl.ode.integrate(ov, "erf", batch_ratio=1.0, **kw)
    with pytest.raises(ValueError, match="t_max"):
        tl.ode.integrate(ov, "erf", batch_ratio=1.0, n_steps=2, t_max=3.0, **kw)
    with pytest.raises(ValueError, match="lr_readout"):
        tl.ode.integrate(ov, "erf", batch_ratio=1.0, n_steps=2, lr_readout=0.1, **kw)
    with pytest.raises(ValueError, match="step"):
        tl.ode.integrate(tl.Overlaps.from_networks(_student(2, d, "step"), tgt), "step", batch_ratio=1.0, n_steps=2,
                         **kw)
    with pytest.raises(ValueError, match="spherical"):
        tl.ode.integrate(ov, "erf", batch_ratio=1.0, n_steps=2, spherical=True, **kw)
    fn = tl.targets.function(lambda z: z[:, 0] * z[:, 1], k=2, d=d, seed=0)
    with pytest.raises((TypeError, ValueError), match="target"):
        tl.ode.integrate(tl.Overlaps.from_networks(_student(2, d, "erf"), tgt), "erf", batch_ratio=1.0, n_steps=2,
                         target=fn, lr=1.0, regime="large_batch")


@pytest.mark.parametrize("act", ["relu", "erf"])
def test_finite_batch_term_against_monte_carlo(act):
    """The 1/alpha term of one step, (Q'(alpha=1) - Q'(alpha=inf)) / (gamma0^2 a_i a_k) = E[g'(l_i) g'(l_k) E^2]
    + Delta E[g'g'] with E = f(z) - sum_j a_j g(l_j), against 10^6 Monte Carlo samples (within 5 standard errors)."""
    d, gamma0, noise, n = 60, 0.7, 0.3, 1_000_000
    tgt = tl.targets.staircase(3, d=d, seed=2)
    st = _student(3, d, act, seed=8)
    st = st.with_weights(st.W + 0.8 * tgt.directions[[0, 1, 2]])
    ov = tl.Overlaps.from_networks(st, tgt)
    kw = {"target": tgt, "lr": gamma0, "regime": "large_batch", "n_steps": 1, "noise": noise}
    finite = tl.ode.integrate(ov, act, batch_ratio=1.0, **kw).Q[1]
    infinite = tl.ode.integrate(ov, act, batch_ratio=1e300, **kw).Q[1]
    hd = (finite - infinite) / (gamma0**2 * np.outer(ov.a, ov.a))
    X = np.random.default_rng(3).standard_normal((n, 6)) @ np.linalg.cholesky(ov.omega).T
    lam, z = X[:, :3], X[:, 3:]
    g = tl.activations.sigma(act, lam)
    dg = (lam > 0) * 1.0 if act == "relu" else np.sqrt(2 / np.pi) * np.exp(-lam**2 / 2)
    E = tgt.function(z) - g @ ov.a
    for i in range(3):
        for k in range(3):
            x = dg[:, i] * dg[:, k] * (E**2 + noise)
            assert abs(x.mean() - hd[i, k]) <= 5 * x.std() / np.sqrt(n), (i, k, x.mean(), hd[i, k])
