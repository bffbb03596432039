"""Biases where the overlap engines met a polynomial target or a large batch (issue 23): the ODE of a target with
fixed and trained student biases (gradient flow against finite differences of the population risk, online SGD at
d >= 2000 against the ODE), and the runs without biases bitwise unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from test_sde import assert_moments
from twolayer import _core


def _student(act: str, d: int, K: int = 2, seed: int = 0) -> tl.Network:
    rng = np.random.default_rng(seed)
    return tl.Network(rng.standard_normal((K, d)), rng.uniform(0.5, 1.2, K), act, bias=rng.uniform(-0.6, 0.6, K))


@pytest.mark.parametrize("act", ["tanh", "erf", "softplus", "relu"])
def test_target_gradient_flow_is_minus_the_finite_difference_gradient(act: str) -> None:
    """Gradient flow against a staircase target with biases: db/dt = -lr_bias dR/db, dW/dt = -lr d dR/dW mapped to
    (Q, M), da/dt = -lr_readout dR/da, with R the population risk (central differences; and the closed-form
    population gradient with biases, exactly)."""
    d = 5
    tgt = tl.targets.staircase(2, d=d, seed=1)
    s = _student(act, d)
    ov = tl.Overlaps.from_networks(s, tgt)
    lr, lr_a, lr_b = 0.7, 0.3, 1.3
    dQ, dM, da, db = tl.ode.rhs(ov, act, lr=lr, lr_readout=lr_a, lr_bias=lr_b, regime="gradient_flow")
    h = 1e-5

    def fd(x: np.ndarray, make) -> np.ndarray:
        g = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            e = np.zeros_like(x)
            e[idx] = h
            g[idx] = (tl.population.risk(make(x + e), tgt) - tl.population.risk(make(x - e), tgt)) / (2 * h)
        return g

    gW = fd(s.W, lambda W: s.with_weights(W, a=s.a, bias=s.bias))
    ga = fd(s.a, lambda a: s.with_weights(s.W, a=a, bias=s.bias))
    gb = fd(s.bias, lambda b: s.with_weights(s.W, a=s.a, bias=b))
    pW, pa, pb = tl.population.gradient(s, tgt, train_bias=True)

    def flow(gW: np.ndarray, ga: np.ndarray, gb: np.ndarray) -> tuple[np.ndarray, ...]:
        Wd = -lr * d * gW
        return ((Wd @ s.W.T + s.W @ Wd.T) / d, Wd @ tgt.directions.T / d, -lr_a * ga, -lr_b * gb)

    for got, want in zip((dQ, dM, da, db), flow(gW, ga, gb), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    for got, want in zip((dQ, dM, da, db), flow(pW, pa, pb), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert np.abs(db).max() > 1e-3
    # the recorded risk is the population risk with biases, and the fixed biases (lr_bias = 0) stay put
    traj = tl.ode.integrate(ov, act, lr=lr, regime="gradient_flow", t_max=1e-9, n_records=2)
    assert traj.risk[0] == pytest.approx(tl.population.risk(s, tgt), rel=1e-10, abs=1e-13)
    np.testing.assert_array_equal(traj.bias, np.broadcast_to(s.bias, (2, 2)))


def test_target_online_rhs_with_biases_against_monte_carlo() -> None:
    """The online lr^2 term with a target and biases, dQ(online) - dQ(gradient flow) = lr^2 a_i a_k
    E[g'(l_i) g'(l_k) (E^2 + noise)], E = f(z) - sum_j a_j g(l_j), against Monte Carlo of the fields."""
    d = 6
    tgt = tl.targets.staircase(2, d=d, seed=2)
    s = _student("tanh", d, seed=3)
    ov = tl.Overlaps.from_networks(s, tgt)
    lr, noise = 0.7, 0.2
    online = tl.ode.rhs(ov, "tanh", lr=lr, noise=noise, lr_bias=0.5)
    flow = tl.ode.rhs(ov, "tanh", lr=lr, noise=noise, lr_bias=0.5, regime="gradient_flow")
    got = (online[0] - flow[0]) / (lr * lr * np.outer(ov.a, ov.a))
    rng = np.random.default_rng(4)
    n = 1_000_000
    x = rng.standard_normal((n, d))
    lam = x @ s.W.T / np.sqrt(d) + s.bias
    err = tgt.function(x @ tgt.directions.T / np.sqrt(d)) - np.tanh(lam) @ s.a
    dg = 1.0 - np.tanh(lam) ** 2
    for i in range(2):
        for k in range(2):
            v = dg[:, i] * dg[:, k] * (err * err + noise)
            assert abs(got[i, k] - v.mean()) < 5 * v.std() / np.sqrt(n), (i, k, got[i, k], v.mean())


def test_target_with_zero_biases_matches_the_path_without() -> None:
    """Zero biases trained at lr_bias > 0 (the with-means right-hand side) against the closed-form target path
    without biases (erf student): the same numbers to rounding; without biases the result is bitwise the one without
    the lr_bias argument."""
    d = 8
    tgt = tl.targets.staircase(2, d=d, seed=0)
    s = _student("erf", d, seed=5)
    ov = tl.Overlaps.from_networks(tl.Network(s.W, s.a, "erf"), tgt)
    kw = {"lr": 0.6, "lr_readout": 0.2, "noise": 0.1}
    ref = tl.ode.rhs(ov, "erf", **kw)
    assert len(ref) == 3
    for x, y in zip(ref, tl.ode.rhs(ov, "erf", lr_bias=0.0, **kw), strict=True):
        np.testing.assert_array_equal(x, y)
    got = tl.ode.rhs(ov, "erf", lr_bias=0.4, **kw)
    for x, y in zip(ref, got[:3], strict=True):
        np.testing.assert_allclose(y, x, rtol=1e-10, atol=1e-12)
    # db = lr_bias a_i E[erf'(l_i) E] = -lr_bias dR/db at b = 0 (the population gradient with biases)
    np.testing.assert_allclose(got[3], -0.4 * tl.population.gradient(tl.Network(s.W, s.a, "erf"), tgt,
                                                                      train_bias=True)[2], rtol=1e-10, atol=1e-13)


def test_target_schedule_scales_the_target_terms() -> None:
    """A constant learning-rate schedule s is lr -> s lr everywhere, the target's terms included (they ignored the
    schedule before)."""
    d = 8
    tgt = tl.targets.staircase(2, d=d, seed=0)
    ov = tl.Overlaps.from_networks(tl.Network(np.random.default_rng(6).standard_normal((2, d)), [0.7, 0.9], "erf"),
                                   tgt)
    kw = {"t_max": 2.0, "n_records": 3, "method": "rk4", "dt": 0.01, "lr_readout": 0.0}
    sched = tl.ode.integrate(ov, "erf", lr=1.0, schedule=lambda t: 0.5, **kw)
    plain = tl.ode.integrate(ov, "erf", lr=0.5, **kw)
    np.testing.assert_allclose(sched.Q, plain.Q, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(sched.M, plain.M, rtol=1e-12, atol=1e-14)


def test_target_bias_refusals() -> None:
    d = 6
    tgt = tl.targets.staircase(2, d=d, seed=0)
    s = _student("step", d)
    ov = tl.Overlaps.from_networks(s, tgt)
    with pytest.raises(NotImplementedError, match="step students with biases"):
        tl.ode.rhs(ov, "step", lr=0.5, lr_bias=0.5, regime="gradient_flow")
    with pytest.raises(ValueError, match="lr_bias"):
        tl.ode.rhs(tl.Overlaps.from_networks(_student("tanh", d), tgt), "tanh", lr=0.5, lr_bias=-1.0)


@pytest.mark.parametrize("regime", ["online", "gradient_flow"])
@pytest.mark.parametrize("act", ["erf", "relu"])
def test_target_batch_with_biases_equals_integrate(act: str, regime: str) -> None:
    """integrate_batch with a target and biases (fixed nonzero and trained from zero; relu students by the exact
    orthant moments with means): each member bitwise as integrate() alone; the recorded risk is the population risk
    with biases."""
    d = 8
    tgt = tl.targets.staircase(2, d=d, seed=0)
    W = np.random.default_rng(0).standard_normal((2, d))
    nets = [tl.Network(W, [0.7, 0.5], act, bias=b) for b in ([0.3, -0.1], [0.0, 0.0])]
    ovs = [tl.Overlaps.from_networks(s, tgt) for s in nets]
    kw = {"lr": 0.5, "lr_bias": 0.5, "t_max": 1.0, "n_records": 3, "regime": regime}
    batch = tl.ode.integrate_batch(ovs, act, **kw)
    for b, ov in enumerate(ovs):
        one = tl.ode.integrate(ov, act, **kw)
        for name in ("Q", "M", "a", "bias", "risk"):
            np.testing.assert_array_equal(getattr(batch, name)[b], getattr(one, name))
    assert np.abs(batch.bias[1, -1]).max() > 1e-3
    assert batch.risk[0, 0] == pytest.approx(tl.population.risk(nets[0], tgt), rel=1e-12)


def _target_ode_vs_sgd(act: str, d: int, n_seeds: int, t_max: float) -> dict[str, float]:
    """The largest |mean over SGD runs - ODE| over the records of Q, M, a and b, in units of SE + 1/d,
    online with trained biases and readout against a staircase target."""
    tgt = tl.targets.staircase(2, d=d, seed=7)
    rng = np.random.default_rng(8)
    s = tl.Network(0.5 * rng.standard_normal((2, d)), [0.6, 0.8], act, bias=[0.3, -0.4])
    lr, lr_a, lr_b = 0.6, 0.3, 0.6
    ov = tl.Overlaps.from_networks(s, tgt)
    ode = tl.ode.integrate(ov, act, lr=lr, lr_readout=lr_a, lr_bias=lr_b, t_max=t_max, n_records=5, rtol=1e-8,
                           atol=1e-10)
    ens = tl.sgd.simulate(s, tgt, lr=lr, lr_readout=lr_a, lr_bias=lr_b, t_max=t_max, n_records=5,
                          seeds=list(range(n_seeds)))
    out = {}
    for name in ("Q", "M", "a", "bias"):  # (SGD records no risk against a target with biases)
        runs = np.stack([getattr(r, name) for r in ens.runs])
        mean, se = runs.mean(0), runs.std(0, ddof=1) / np.sqrt(n_seeds)
        out[name] = float(np.max(np.abs(mean - getattr(ode, name)) / (se + 1.0 / d)))
    assert np.abs(ode.bias[-1] - ode.bias[0]).max() > 2e-2  # the biases moved
    assert np.all(np.isfinite(ode.risk)) and ode.risk[-1] < ode.risk[0]
    return out


def test_target_online_ode_against_sgd_quick() -> None:
    z = _target_ode_vs_sgd("erf", d=2000, n_seeds=4, t_max=1.0)
    assert max(z.values()) < 4.0, z


@pytest.mark.slow
@pytest.mark.parametrize("act", ["erf", "tanh"])
def test_target_online_ode_against_sgd(act: str) -> None:
    z = _target_ode_vs_sgd(act, d=4000, n_seeds=16, t_max=3.0)
    assert max(z.values()) < 4.0, z


# ------------------------------------------------------------------ the large-batch map with a committee teacher


def _committee(act: str, d: int, seed: int = 0) -> tuple[tl.Network, tl.Network]:
    s, t = tl.networks.teacher_student(2, 2, d, act, seed=seed)
    W = s.W * np.sqrt(d) / np.linalg.norm(s.W, axis=1, keepdims=True)
    return (tl.Network(W, [0.8, 0.6], act, bias=[0.4, -0.3]),
            tl.Network(t.W, t.a, act, bias=[0.5, -0.2]))


@pytest.mark.parametrize("act", ["erf", "relu", "tanh"])
def test_committee_map_first_order_terms_are_the_odes(act: str) -> None:
    """One step of the map with biases: M and b move by exactly the ODE's first-order terms (the with-means online
    right-hand side at lr = 1, lr_bias = 1) times gamma0 and lr_bias; a (fixed), the biases' record and the risk at
    t = 0 as the ODE's."""
    s, t = _committee(act, 8, seed=1)
    ov = tl.Overlaps.from_networks(s, t)
    g0, lr_b = 0.3, 0.7
    tr = tl.large_batch.iterate(ov, act, act, lr=g0, batch_ratio=2.0, n_steps=1, lr_bias=lr_b)
    _, dM, _, db = tl.ode.rhs(ov, act, lr=1.0, lr_bias=1.0)
    np.testing.assert_allclose(tr.M[1] - tr.M[0], g0 * dM, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(tr.bias[1] - tr.bias[0], lr_b * db, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(tr.bias[0], s.bias)
    np.testing.assert_array_equal(tr.teacher_bias, t.bias)
    assert tr.risk[0] == pytest.approx(tl.population.risk(s, t), rel=1e-12)
    assert np.abs(db).max() > 1e-3


def test_committee_map_zero_biases() -> None:
    """Zero biases without lr_bias: the map without means, bitwise (the same call as before the biases); trained from
    zero, its first step's (Q, M) are those of the closed-form erf map to rounding."""
    s, t = tl.networks.teacher_student(2, 2, 10, "erf", seed=0)
    ov = tl.Overlaps.from_networks(s, t)
    kw = {"lr": 0.5, "batch_ratio": 2.0, "n_steps": 3, "noise": 0.1}
    plain = tl.large_batch.iterate(ov, "erf", "erf", **kw)
    out = _core.large_batch_iterate(ov.Q, ov.M, ov.a, ov.P, ov.v, "erf", "erf", 0.5, 2.0, 3, 0.1, False, 1)
    np.testing.assert_array_equal(plain.Q, out["Q"])
    np.testing.assert_array_equal(plain.M, out["M"])
    np.testing.assert_array_equal(plain.risk, out["risk"])
    assert plain.bias is None
    zero = tl.large_batch.iterate(ov, "erf", "erf", lr_bias=0.5, **kw)
    np.testing.assert_allclose(zero.Q[:2], plain.Q[:2], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(zero.M[:2], plain.M[:2], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(zero.risk[:2], plain.risk[:2], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(zero.bias[0], 0.0)


def _map_vs_sgd(act: str, d: int, runs: int, T: int, lr_bias: float) -> dict[str, float]:
    """The map against the mean of SGD runs (lr = gamma0 d, batch_size = alpha d, lr_bias = beta0 d): the largest
    |map - mean| over the rows of M, Q and b in units of 4 SE + 2/d."""
    s, t = _committee(act, d, seed=2)
    g0, alpha = 1.0, 1.0
    tr = tl.large_batch.iterate(tl.Overlaps.from_networks(s, t), act, act, lr=g0, batch_ratio=alpha, n_steps=T,
                                lr_bias=lr_bias)
    ens = tl.sgd.simulate(s, t, lr=g0 * d, batch_size=int(alpha * d), t_max=T / d, n_records=T + 1, seeds=runs,
                          keep_weights=False, lr_bias=lr_bias * d)
    out = {}
    for name in ("M", "Q", "bias"):
        x = getattr(ens, name)
        sem = x.std(0) / np.sqrt(runs)
        out[name] = float(np.max(np.abs(getattr(tr, name) - x.mean(0)) / (4 * sem + 2 / d)))
    assert np.abs(tr.M[-1] - tr.M[0]).max() > 0.05  # the map moved
    if lr_bias:
        assert np.abs(tr.bias[-1] - tr.bias[0]).max() > 0.02  # the biases moved
    return out


def test_committee_map_against_sgd_quick() -> None:
    z = _map_vs_sgd("erf", d=1000, runs=8, T=2, lr_bias=1.0)
    assert max(z.values()) < 1.0, z


@pytest.mark.slow
@pytest.mark.parametrize("act, lr_bias", [("erf", 0.0), ("erf", 1.0), ("tanh", 1.0), ("relu", 1.0)])
def test_committee_map_against_sgd_d4000(act: str, lr_bias: float) -> None:
    z = _map_vs_sgd(act, d=4000, runs=16, T=3, lr_bias=lr_bias)
    assert max(z.values()) < 1.0, z


def test_ridge_readout_with_biases_minimises_the_population_objective() -> None:
    """ridge_readout with student and teacher biases (kernels with means) zeroes the gradient of the population
    ridge objective R(a) + ridge |a|^2 / 2 (central differences of population.risk with the biases)."""
    s, t = _committee("erf", 10, seed=3)
    ridge = 0.3
    a = tl.large_batch.ridge_readout(tl.Overlaps.from_networks(s, t), "erf", "erf", ridge=ridge)
    h = 1e-6

    def objective(x: np.ndarray) -> float:
        return tl.population.risk(s.with_weights(s.W, a=x, bias=s.bias), t) + 0.5 * ridge * float(x @ x)

    grad = [(objective(a + h * e) - objective(a - h * e)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(grad, 0.0, atol=1e-8)
    plain = tl.Overlaps.from_networks(tl.Network(s.W, s.a, "erf"), tl.Network(t.W, t.a, "erf"))
    assert np.abs(a - tl.large_batch.ridge_readout(plain, "erf", "erf", ridge=ridge)).max() > 1e-3


def test_layerwise_with_biases_against_simulate_layerwise() -> None:
    """Layer-wise training with trained student biases and teacher biases: the map's readout and risk against the
    mean of finite-d runs (d = 1000, batches and ridge samples of d), within 4 standard errors + 2/d."""
    d, runs = 1000, 6
    s, t = _committee("erf", d, seed=5)
    kw = {"n_steps": 2, "ridge": 0.1, "lr_bias": 0.5}
    lw = tl.large_batch.layerwise(tl.Overlaps.from_networks(s, t), lr=0.5, batch_ratio=1.0, **kw)
    sims = [tl.large_batch.simulate_layerwise(s, t, lr=0.5 * d, batch_size=d, seed=j, **{**kw, "lr_bias": 0.5 * d})
            for j in range(runs)]
    for name, want in (("a", lw.a), ("risk", lw.risk)):
        x = np.array([getattr(r, name) for r in sims])
        sem = x.std(0, ddof=1) / np.sqrt(runs)
        assert np.all(np.abs(x.mean(0) - want) <= 4 * sem + 2 / d), (name, x.mean(0), want, sem)
    np.testing.assert_allclose(np.mean([r.overlaps.bias for r in sims], axis=0), lw.overlaps.bias, atol=0.005)
    assert np.abs(lw.overlaps.bias - s.bias).max() > 0.02


# ------------------------------------------------------------------ full-batch gradient descent with student biases


def _train_risk(student: tl.Network, tgt: object, n: int, seed: int, W: np.ndarray, a: np.ndarray,
                b: np.ndarray) -> float:
    """The empirical risk 1/(2n) sum (y - f)^2 on run 0's training set (Philox keyed by (seed, 0), as simulate)."""
    d = student.d
    rng = np.random.Generator(np.random.Philox(key=[seed, 0]))
    X = rng.standard_normal((n, d))
    y = tl.full_batch.labels(tgt, X @ tl.full_batch.directions(tgt).T / np.sqrt(d))
    f = tl.activations.sigma(student.activation, X @ W.T / np.sqrt(d) + b) @ a
    return 0.5 * float(np.mean((y - f) ** 2))


@pytest.mark.parametrize("target_kind", ["hermite", "committee"])
def test_full_batch_bias_step_is_minus_the_train_risk_gradient(target_kind: str) -> None:
    """One full-batch step moves b by -lr_bias dL/db of the train risk (central differences on the same training
    set), the recorded train risk is L at the biases, and small steps decrease it."""
    d, alpha, lr_b = 40, 2.0, 0.8
    s = _student("tanh", d, seed=9)
    tgt = (tl.targets.hermite({(1, 0): 1.0, (1, 1): 0.5}, d=d, seed=1) if target_kind == "hermite"
           else tl.networks.teacher_student(2, 2, d, "tanh", seed=4)[1])
    if target_kind == "committee":  # orthonormal rows (P = I)
        q, _ = np.linalg.qr(tgt.W.T)
        tgt = tl.Network(np.sqrt(d) * q.T, tgt.a, "tanh")
    run = tl.full_batch.simulate(s, tgt, alpha=alpha, lr=0.05, lr_bias=lr_b, n_steps=5, n_test=2000)
    n = run.meta["n_samples"]
    np.testing.assert_array_equal(run.bias[0, 0], s.bias)
    h = 1e-6
    a = s.effective_a
    grad = np.array([(_train_risk(s, tgt, n, 0, s.W, a, s.bias + h * e) - _train_risk(s, tgt, n, 0, s.W, a,
                                                                                       s.bias - h * e)) / (2 * h)
                     for e in np.eye(s.K)])
    np.testing.assert_allclose(run.bias[0, 1] - run.bias[0, 0], -lr_b * grad, rtol=1e-6, atol=1e-10)
    assert run.train_risk[0, 0] == pytest.approx(_train_risk(s, tgt, n, 0, s.W, a, s.bias), rel=1e-12)
    assert np.all(np.diff(run.train_risk[0]) < 0)
    fixed = tl.full_batch.simulate(s, tgt, alpha=alpha, lr=0.05, n_steps=2, n_test=2000)
    np.testing.assert_array_equal(fixed.bias[0], np.broadcast_to(s.bias, (3, 2)))
    assert "bias" in run.to_xarray()


def test_full_batch_without_biases_unchanged() -> None:
    d = 30
    s = tl.Network(np.random.default_rng(0).standard_normal((2, d)), [0.7, 0.5], "erf")
    tgt = tl.targets.hermite({(1,): 1.0}, d=d, seed=1)
    run = tl.full_batch.simulate(s, tgt, alpha=2.0, lr=0.1, n_steps=2, n_test=500)
    assert run.bias is None and "lr_bias" not in run.meta
    zero = tl.full_batch.simulate(s.with_weights(s.W, bias=np.zeros(2)), tgt, alpha=2.0, lr=0.1, n_steps=2,
                                  n_test=500)
    np.testing.assert_array_equal(zero.Q, run.Q)
    np.testing.assert_array_equal(zero.test_risk, run.test_risk)
    with pytest.raises(ValueError, match="lr_bias"):
        tl.full_batch.simulate(s, tgt, alpha=2.0, lr=0.1, n_steps=1, lr_bias=-1.0)


def _orthonormal_committee(d: int, act: str, v: list[float], bias: list[float], seed: int) -> tl.Network:
    """A committee teacher with orthonormal rows (P = I) and biases."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, len(v))))
    return tl.Network(np.sqrt(d) * q.T, v, act, bias=bias)


_NUMPY = {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0)}
_NUMPY_PRIME = {"tanh": lambda x: 1.0 - np.tanh(x) ** 2, "relu": lambda x: (x > 0).astype(float)}


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_full_batch_committee_teacher_with_biases(act: str) -> None:
    """Labels y = sum_r v_r g(z_r + b*_r) (a direct NumPy evaluation); a NumPy replica of the GD loop (labels with
    the teacher biases and noise, trained student biases) gives the recorded train risk, and the recorded test risk is
    tl.population.risk of the replica's weights with both networks' biases (exact)."""
    d, alpha, lr, lr_b, noise, T, seed = 40, 2.0, 0.3, 0.5, 0.1, 3, 7
    tgt = _orthonormal_committee(d, act, [1.0, -0.7], [0.4, -0.3], seed=2)
    s = _student(act, d, seed=3)
    z = np.random.default_rng(4).standard_normal((6, 2))
    np.testing.assert_allclose(tl.full_batch.labels(tgt, z), _NUMPY[act](z + [0.4, -0.3]) @ [1.0, -0.7],
                               rtol=1e-14, atol=1e-15)
    run = tl.full_batch.simulate(s, tgt, alpha=alpha, lr=lr, lr_bias=lr_b, noise=noise, n_steps=T, seeds=2,
                                 seed=seed)
    n = run.meta["n_samples"]
    for r in range(2):
        rng = np.random.Generator(np.random.Philox(key=[seed, r]))
        X = rng.standard_normal((n, d))
        y = _NUMPY[act](X @ tgt.W.T / np.sqrt(d) + tgt.bias) @ tgt.a + np.sqrt(noise) * rng.standard_normal(n)
        W, a, b = s.W.copy(), s.effective_a, s.bias.copy()
        for step in range(T + 1):
            H = X @ W.T / np.sqrt(d) + b
            E = y - _NUMPY[act](H) @ a
            assert run.train_risk[r, step] == pytest.approx(0.5 * np.mean(E**2), rel=1e-10)
            assert run.test_risk[r, step] == pytest.approx(tl.population.risk(s.with_weights(W, bias=b), tgt),
                                                           rel=1e-10)
            np.testing.assert_allclose(run.bias[r, step], b, rtol=1e-12)
            G = a * _NUMPY_PRIME[act](H) * E[:, None]
            W, b = W + (lr * np.sqrt(d) / n) * (G.T @ X), b + (lr_b / n) * G.sum(axis=0)
    assert np.all(np.diff(run.train_risk[0]) < 0)


# ------------------------------------------------------------------ the SDE of a polynomial target with biases


def test_target_sde_increment_with_biases_against_ode_and_one_step_sgd() -> None:
    """One erf student with a trained bias against a two-direction target: the increment's mean is the ODE's
    right-hand side with the target and the bias (to the quadrature's error), its mean and covariance those of
    one-step SGD (4 standard errors); a short SDE path moves the bias."""
    d, n, lr, lr_b, noise = 1000, 2000, 0.3, 0.7, 0.2
    tgt = tl.targets.hermite({(1, 0): 1.0, (1, 1): 0.5}, d=d, seed=0)
    rng = np.random.default_rng(1)
    s = tl.Network(0.7 * rng.standard_normal((1, d)), [0.8], "erf", bias=[0.4])
    ov = tl.Overlaps.from_networks(s, tgt)
    ic = tl.sde.increment_covariance(ov, lr=lr, lr_bias=lr_b, noise=noise, target=tgt)
    assert ic.labels == ("Q[0,0]", "M[0,0]", "M[0,1]", "b[0]")
    dQ, dM, _, db = tl.ode.rhs(ov, "erf", lr=lr, lr_bias=lr_b, noise=noise)
    rhs = np.concatenate([dQ.ravel(), dM.ravel(), db])
    assert np.abs(ic.mean - rhs).max() <= 1e-9 * np.abs(rhs).max()
    ens = tl.sgd.simulate(s, tgt, lr=lr, lr_bias=lr_b, noise=noise, times=[0.0, 1.0 / d], seeds=n,
                          keep_weights=False)
    Qs, Ms, bs = ens.stack("Q"), ens.stack("M"), ens.stack("bias")
    xi = d * np.concatenate([Qs[:, 1, 0] - Qs[:, 0, 0], (Ms[:, 1] - Ms[:, 0]).reshape(n, -1),
                             bs[:, 1] - bs[:, 0]], axis=1)
    assert_moments(xi, ic)
    path = tl.sde.simulate(ov, lr=lr, lr_bias=lr_b, t_max=0.2, n_records=3, d=d, seeds=1, target=tgt)
    assert path.runs[0].bias.shape == (3, 1) and abs(path.runs[0].bias[-1, 0] - 0.4) > 1e-3
