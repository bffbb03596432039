"""The order-parameter ODE with biases (issue 23): gradient flow against finite differences of the population risk
and against weight-space population gradient flow, the with-means right-hand side against the zero-mean one, online
SGD at d >= 2000 against the ODE, and the runs without biases bitwise unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl


def _pair(act: str, K: int = 2, M: int = 2, d: int = 4, seed: int = 0, teacher: str | None = None
          ) -> tuple[tl.Network, tl.Network]:
    s, t = tl.networks.teacher_student(K, M, d, act, teacher, seed=seed)
    rng = np.random.default_rng(seed + 100)
    s = s.with_weights(s.W, a=rng.uniform(0.5, 1.2, K), bias=rng.uniform(-0.6, 0.6, K))
    return s, t.with_weights(t.W, bias=rng.uniform(-0.6, 0.6, M))


def _flow_from_gradient(s: tl.Network, t: tl.Network, gW: np.ndarray, ga: np.ndarray, gb: np.ndarray, lr: float,
                        lr_readout: float, lr_bias: float) -> tuple[np.ndarray, ...]:
    """Gradient flow dW/dt = -lr d dR/dW (t = steps / d), db/dt = -lr_bias dR/db, da/dt = -lr_readout dR/da
    (readout "sum"), mapped to (Q, M, a, b)."""
    d = s.W.shape[1]
    Wd = -lr * d * gW
    dQ = (Wd @ s.W.T + s.W @ Wd.T) / d
    dM = Wd @ t.W.T / d
    return dQ, dM, -lr_readout * ga, -lr_bias * gb


@pytest.mark.parametrize("act, teacher", [("tanh", "tanh"), ("softplus", "softplus"), ("relu", "relu"),
                                          ("erf", "relu"), ("softplus", "step"), ("relu", "erf"), ("relu", "tanh"),
                                          ("tanh", "relu")])
def test_gradient_flow_is_minus_the_finite_difference_gradient(act: str, teacher: str) -> None:
    s, t = _pair(act, teacher=teacher)
    ov = tl.Overlaps.from_networks(s, t)
    lr, lr_a, lr_b = 0.7, 0.3, 1.3
    dQ, dM, da, db = tl.ode.rhs(ov, lr=lr, lr_readout=lr_a, lr_bias=lr_b, regime="gradient_flow")
    h = 1e-5

    def fd(get: np.ndarray, make) -> np.ndarray:  # central differences of the population risk
        g = np.zeros_like(get)
        for idx in np.ndindex(get.shape):
            e = np.zeros_like(get)
            e[idx] = h
            g[idx] = (tl.population.risk(*make(get + e), t) - tl.population.risk(*make(get - e), t)) / (2 * h)
        return g

    gW = fd(s.W, lambda W: (s.with_weights(W, a=s.a, bias=s.bias),))
    ga = fd(s.a, lambda a: (s.with_weights(s.W, a=a, bias=s.bias),))
    gb = fd(s.bias, lambda b: (s.with_weights(s.W, a=s.a, bias=b),))
    eQ, eM, ea, eb = _flow_from_gradient(s, t, gW, ga, gb, lr, lr_a, lr_b)
    for got, want in ((dQ, eQ), (dM, eM), (da, ea), (db, eb)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    # and the closed-form population gradient with biases
    pW, pa, pb = tl.population.gradient(s, t, train_bias=True)
    for got, want in zip((dQ, dM, da, db), _flow_from_gradient(s, t, pW, pa, pb, lr, lr_a, lr_b), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    # the recorded risk is the population risk with biases
    traj = tl.ode.integrate(ov, lr=lr, lr_bias=lr_b, regime="gradient_flow", t_max=1e-9, n_records=2)
    assert traj.risk[0] == pytest.approx(tl.population.risk(s, t), rel=1e-11, abs=1e-14)


@pytest.mark.parametrize("act, regime", [("erf", "online"), ("erf", "gradient_flow"), ("tanh", "gradient_flow"),
                                         ("relu", "gradient_flow"), ("quadratic", "online")])
def test_with_means_at_zero_bias_is_the_zero_mean_rhs(act: str, regime: str) -> None:
    """lr_bias > 0 with zero biases forces the with-means right-hand side: it must agree with the zero-mean one."""
    s, t = tl.networks.teacher_student(3, 2, 8, act, seed=4)
    ov = tl.Overlaps.from_networks(s, t)
    plain = tl.ode.rhs(ov, lr=0.8, lr_readout=0.4, noise=0.1, regime=regime)
    biased = tl.ode.rhs(ov, lr=0.8, lr_readout=0.4, noise=0.1, regime=regime, lr_bias=1.0)
    assert len(plain) == 3 and len(biased) == 4
    for got, want in zip(biased[:3], plain, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-11)


def test_zero_biases_are_bitwise_the_run_without() -> None:
    s, t = tl.networks.teacher_student(2, 2, 20, "erf", seed=1)
    ov = tl.Overlaps.from_networks(s, t)
    zero = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, bias=np.zeros(2), teacher_bias=np.zeros(2))
    a = tl.ode.integrate(ov, "erf", lr=1.0, lr_readout=0.5, t_max=5.0, n_records=6)
    b = tl.ode.integrate(zero, "erf", lr=1.0, lr_readout=0.5, t_max=5.0, n_records=6, lr_bias=0.0)
    for name in ("t", "Q", "M", "a", "risk"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.bias is None and b.bias is None and "bias" not in b.to_xarray()
    assert "lr_bias" not in b.meta


def test_run_with_biases_records_them() -> None:
    s, t = _pair("erf")
    ov = tl.Overlaps.from_networks(s, t)
    traj = tl.ode.integrate(ov, lr=0.5, lr_bias=0.5, t_max=2.0, n_records=5)
    assert traj.bias.shape == (5, 2)
    np.testing.assert_array_equal(traj.bias[0], s.bias)
    np.testing.assert_array_equal(traj.teacher_bias, t.bias)
    assert traj.meta["lr_bias"] == 0.5
    assert np.all(np.isfinite(traj.risk)) and traj.risk[-1] < traj.risk[0]
    ds = traj.to_xarray()
    assert ds["bias"].dims == ("t", "student")
    np.testing.assert_array_equal(traj.overlaps_at(-1).bias, traj.bias[-1])  # a run continues with its biases
    fixed = tl.ode.integrate(ov, lr=0.5, t_max=2.0, n_records=5)  # biases present but not trained
    np.testing.assert_array_equal(fixed.bias, np.broadcast_to(s.bias, (5, 2)))
    # the fixed-step methods take the same right-hand side
    rk4 = tl.ode.integrate(ov, lr=0.5, lr_bias=0.5, t_max=2.0, n_records=5, method="rk4", dt=0.01)
    np.testing.assert_allclose(rk4.bias, traj.bias, atol=1e-7)
    np.testing.assert_allclose(rk4.Q, traj.Q, atol=1e-7)


def test_refusals() -> None:
    s, t = _pair("relu")
    ov = tl.Overlaps.from_networks(s, t)
    with pytest.raises(NotImplementedError, match="step students with biases"):
        tl.ode.integrate(ov, "step", lr=0.5, t_max=1.0, regime="gradient_flow")
    with pytest.raises(ValueError, match="lr_bias: expected"):
        tl.ode.integrate(ov, lr=0.5, t_max=1.0, regime="gradient_flow", lr_bias=-1.0)
    # the map trains biases against committees too (test_bias_targets_maps.py); step students have no map
    run = tl.ode.integrate(tl.ode.plateau_overlaps(), "erf", lr=0.5, regime="large_batch", batch_ratio=1.0,
                           n_steps=2, lr_bias=0.1)
    assert run.bias.shape == (3, 2) and np.all(np.isfinite(run.bias))


def test_relu_gradient_flow_against_weight_space_flow() -> None:
    """Population gradient flow with biases is exact at finite d: RK4 in weight space on population.gradient."""
    s, t = _pair("relu", d=4, seed=2)
    lr, lr_b, T, n = 1.0, 1.0, 2.0, 200
    ode = tl.ode.integrate(tl.Overlaps.from_networks(s, t), lr=lr, lr_bias=lr_b, regime="gradient_flow", t_max=T,
                           n_records=2, rtol=1e-10, atol=1e-12)
    d = s.W.shape[1]

    def f(W: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        gW, _, gb = tl.population.gradient(s.with_weights(W, a=s.a, bias=b), t, train_bias=True)
        return -lr * d * gW, -lr_b * gb

    W, b, h = s.W.copy(), s.bias.copy(), T / n
    for _ in range(n):
        k1 = f(W, b)
        k2 = f(W + h / 2 * k1[0], b + h / 2 * k1[1])
        k3 = f(W + h / 2 * k2[0], b + h / 2 * k2[1])
        k4 = f(W + h * k3[0], b + h * k3[1])
        W = W + h / 6 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        b = b + h / 6 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
    end = tl.Overlaps.from_networks(s.with_weights(W, a=s.a, bias=b), t)
    np.testing.assert_allclose(ode.Q[-1], end.Q, atol=1e-7)
    np.testing.assert_allclose(ode.M[-1], end.M, atol=1e-7)
    np.testing.assert_allclose(ode.bias[-1], b, atol=1e-7)
    assert abs(ode.bias[-1] - s.bias).max() > 1e-2  # the biases moved


def _ode_vs_sgd(act: str, teacher: str, d: int, n_seeds: int, t_max: float, K: int = 2, M: int = 2,
                spherical: bool = False) -> dict[str, float]:
    """The largest |mean over SGD runs - ODE| over the records of Q, M, a, b and the risk, in units of SE + 1/d (its
    standard error over the runs plus the O(1/d) finite-d bias of the mean), online with trained biases and readout
    (spherical: the student's rows start on the sphere |w_i|^2 = d and SGD renormalises them)."""
    s, t = _pair(act, K=K, M=M, d=d, seed=7, teacher=teacher)
    if spherical:
        s = s.with_weights(np.sqrt(d) * s.W / np.linalg.norm(s.W, axis=1, keepdims=True), a=s.a, bias=s.bias)
    lr, lr_a, lr_b = 0.6, 0.3, 0.6
    ov = tl.Overlaps.from_networks(s, t)
    ode = tl.ode.integrate(ov, lr=lr, lr_readout=lr_a, lr_bias=lr_b, t_max=t_max, n_records=5, rtol=1e-8,
                           atol=1e-10, spherical=spherical)
    ens = tl.sgd.simulate(s, t, lr=lr, lr_readout=lr_a, lr_bias=lr_b, t_max=t_max, n_records=5,
                          seeds=list(range(n_seeds)), spherical=spherical)
    out = {}
    for name in ("Q", "M", "a", "bias", "risk"):  # SGD records the exact risk with means
        runs = np.stack([getattr(r, name) for r in ens.runs])
        mean, se = runs.mean(0), runs.std(0, ddof=1) / np.sqrt(n_seeds)
        out[name] = float(np.max(np.abs(mean - getattr(ode, name)) / (se + 1.0 / d)))
    return out


@pytest.mark.parametrize("student, teacher, K", [("relu", "relu", 2), ("relu", "tanh", 2), ("relu", "step", 2),
                                                 ("tanh", "relu", 1), ("softplus", "step", 1),
                                                 ("quadratic", "quadratic", 2), ("linear", "quadratic", 2),
                                                 ("hermite(0.2,1,0.5,-0.3)", "quadratic", 2)])
def test_online_second_moment_against_monte_carlo(student: str, teacher: str, K: int) -> None:
    """The online lr^2 term with biases, dQ(online) - dQ(gradient flow) = lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2]
    + noise E[g'(l_i) g'(l_k)]), against Monte Carlo of the fields: relu students (I4 with means of the step pair)
    and smooth students of relu or step teachers (the smooth pair moment inside), and polynomial units (the exact
    polynomial moments with means)."""
    s, t = _pair(student, K=K, M=K, teacher=teacher, seed=1)
    ov = tl.Overlaps.from_networks(s, t)
    lr, noise = 0.7, 0.2
    online = tl.ode.rhs(ov, lr=lr, noise=noise, lr_bias=0.5)
    flow = tl.ode.rhs(ov, lr=lr, noise=noise, lr_bias=0.5, regime="gradient_flow")
    got = (online[0] - flow[0]) / (lr * lr * np.outer(ov.a, ov.a))  # effective second layers
    n = 2_000_000
    Omega = np.block([[ov.Q, ov.M], [ov.M.T, ov.P]])
    w, V = np.linalg.eigh(Omega)
    lam = np.concatenate([s.bias, t.bias]) + np.random.default_rng(2).normal(size=(n, 2 * K)) @ (
        V * np.sqrt(np.clip(w, 0, None))).T
    err = tl.activations.sigma(teacher, lam[:, K:]) @ ov.v - tl.activations.sigma(student, lam[:, :K]) @ ov.a
    dg = tl.activations.derivative(student, lam[:, :K]) if student != "relu" else (lam[:, :K] > 0).astype(float)
    for i in range(K):
        for k in range(K):
            v = dg[:, i] * dg[:, k] * (err * err + noise)
            assert abs(got[i, k] - v.mean()) < 5 * v.std() / np.sqrt(n), (i, k, got[i, k], v.mean())


def test_online_ode_against_sgd_quick() -> None:
    z = _ode_vs_sgd("erf", "softplus", d=2000, n_seeds=4, t_max=1.0)
    assert max(z.values()) < 4.0, z
    z = _ode_vs_sgd("softplus", "softplus", d=2000, n_seeds=4, t_max=1.0, K=1, M=1)
    assert max(z.values()) < 4.0, z


@pytest.mark.slow
@pytest.mark.parametrize("act, teacher", [("erf", "softplus"), ("erf", "tanh"), ("erf", "erf")])
def test_online_ode_against_sgd(act: str, teacher: str) -> None:
    z = _ode_vs_sgd(act, teacher, d=4000, n_seeds=20, t_max=4.0)
    assert max(z.values()) < 4.0, z


@pytest.mark.slow
@pytest.mark.parametrize("act", ["tanh", "softplus"])
def test_online_ode_against_sgd_smooth_student(act: str) -> None:
    """A tanh or softplus student (its I4 with means is the costly certified quadrature: one unit each)."""
    z = _ode_vs_sgd(act, act, d=4000, n_seeds=20, t_max=3.0, K=1, M=1)
    assert max(z.values()) < 4.0, z


@pytest.mark.parametrize("act, regime", [("erf", "online"), ("tanh", "gradient_flow"), ("relu", "gradient_flow")])
def test_spherical_rhs_with_biases_is_the_projected_rhs(act: str, regime: str) -> None:
    """Spherical with biases: the weights' increments projected (Q_ii fixed), the biases and readout not."""
    s, t = _pair(act, d=6, seed=3)
    d = s.W.shape[1]
    s = s.with_weights(np.sqrt(d) * s.W / np.linalg.norm(s.W, axis=1, keepdims=True), a=s.a, bias=s.bias)
    ov = tl.Overlaps.from_networks(s, t)
    kw = {"lr": 0.7, "lr_readout": 0.3, "lr_bias": 0.9, "noise": 0.2 if regime == "online" else 0.0, "regime": regime}
    Phi, dM, da, db = tl.ode.rhs(ov, **kw)
    sQ, sM, sa, sb = tl.ode.rhs(ov, spherical=True, **kw)
    ph = np.diag(Phi)
    np.testing.assert_allclose(sQ, Phi - ov.Q * (ph[:, None] + ph[None, :]) / 2, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(np.diag(sQ), 0.0)
    np.testing.assert_allclose(sM, dM - ov.M * ph[:, None] / 2, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(sa, da)
    np.testing.assert_array_equal(sb, db)
    traj = tl.ode.integrate(ov, spherical=True, t_max=2.0, n_records=3, **kw)
    np.testing.assert_allclose(np.diagonal(traj.Q, axis1=1, axis2=2), 1.0, atol=1e-12)
    assert abs(traj.bias[-1] - s.bias).max() > 1e-2


def test_spherical_online_ode_with_biases_against_sgd_quick() -> None:
    z = _ode_vs_sgd("erf", "softplus", d=2000, n_seeds=4, t_max=1.0, spherical=True)
    assert max(z.values()) < 4.0, z


@pytest.mark.slow
def test_spherical_online_ode_with_biases_against_sgd() -> None:
    z = _ode_vs_sgd("erf", "tanh", d=4000, n_seeds=20, t_max=4.0, spherical=True)
    assert max(z.values()) < 4.0, z


@pytest.mark.slow
@pytest.mark.parametrize("teacher", ["relu", "tanh"])
def test_online_ode_against_sgd_relu_student(teacher: str) -> None:
    """A relu student with trained biases and readout (issue 23's check): I4 with means of the step pair."""
    z = _ode_vs_sgd("relu", teacher, d=4000, n_seeds=16, t_max=3.0)
    assert max(z.values()) < 3.0, z


@pytest.mark.slow
def test_online_ode_against_sgd_smooth_student_relu_teacher() -> None:
    """A tanh student of a relu teacher (the smooth pair moment inside the nested I4 with means), K = M = 1."""
    z = _ode_vs_sgd("tanh", "relu", d=4000, n_seeds=16, t_max=2.0, K=1, M=1)
    assert max(z.values()) < 3.0, z
