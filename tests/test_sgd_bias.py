"""Biases in the finite-d SGD simulator (issue 23): lambda_i = w_i . x / sqrt(s) + b_i, lambda*_r likewise with b*_r,
and b_i += (lr_bias / d) mean_batch[c a_i sigma'(lambda_i) E]. Checked against NumPy on the same Philox samples (inputs
of sample row r: Gaussians [r d, (r + 1) d) of stream 1 of (seed, run); its label noise: Gaussian r of stream 2),
the first-step drift of b and M against a Monte Carlo estimate of E[c a_i sigma'(lambda_i) E (1, nu_r)], the
records and exports, and the argument checks."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from scipy.special import erf
from twolayer import _core
from twolayer.networks import teacher_student


def _act(name: str, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sigma(z), sigma'(z)) written out here, independent of the package."""
    if name == "erf":
        return erf(z / np.sqrt(2)), np.sqrt(2 / np.pi) * np.exp(-(z**2) / 2)
    assert name == "relu"
    return np.maximum(z, 0.0), (z > 0).astype(float)


def _biased_pair(act: str, readout: str = "sum", K: int = 3, M: int = 2, d: int = 40, seed: int = 4
                 ) -> tuple[tl.Network, tl.Network]:
    st, te = teacher_student(K, M, d, act, seed=seed, readout=readout)
    rng = np.random.default_rng(seed + 100)
    return st.with_weights(st.W, bias=rng.normal(0, 0.5, K)), te.with_weights(te.W, bias=rng.normal(0, 0.5, M))


@pytest.mark.parametrize("act, B, readout, spherical, train_first",
                         [("erf", 1, "sum", False, True), ("erf", 3, "mean", False, True),
                          ("relu", 1, "mean", True, True), ("erf", 4, "sum", True, True),
                          ("relu", 2, "sum", False, False)])
def test_steps_with_biases_match_numpy(act, B, readout, spherical, train_first):
    d, steps, lr, lr_a, lr_b, noise, seed = 40, 7, 0.7, 0.3, 0.9, 0.2, 17
    st, te = _biased_pair(act, readout, d=d)
    tr = tl.sgd.simulate(st, te, lr=lr, lr_readout=lr_a, lr_bias=lr_b, noise=noise, batch_size=B,
                         spherical=spherical, train_first_layer=train_first, times=[0.0, 3 / d, steps / d], seed=seed)
    X = _core.rng_gaussians(seed, 0, 1, 0, steps * B * d).reshape(steps, B, d)
    xi = _core.rng_gaussians(seed, 0, 2, 0, steps * B).reshape(steps, B)
    c = st.readout_factor
    W, a, b = st.W.copy(), st.a.copy(), st.bias.copy()
    if spherical:
        W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    rows = [b.copy()]
    for n in range(steps):
        lam = X[n] @ W.T / np.sqrt(d) + b
        y = _act(act, X[n] @ te.W.T / np.sqrt(d) + te.bias)[0] @ te.effective_a + np.sqrt(noise) * xi[n]
        s, ds = _act(act, lam)
        E = y - c * s @ a
        g = c * a * ds * E[:, None]  # (B, K): c a_i sigma'(lambda_i) E
        if train_first:
            W = W + lr / np.sqrt(d) / B * g.T @ X[n]
        a = a + lr_a / d / B * (c * s * E[:, None]).sum(0)
        b = b + lr_b / d / B * g.sum(0)
        if spherical:
            W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
        if n == 2:
            rows.append(b.copy())
    rows.append(b.copy())
    np.testing.assert_allclose(tr.student.W, W, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tr.student.a, a, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(tr.student.bias, b, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(tr.bias, np.array(rows), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(tr.teacher_bias, te.bias)
    np.testing.assert_allclose(tr.Q[-1], W @ W.T / d, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tr.M[-1], W @ te.W.T / d, rtol=1e-12, atol=1e-13)
    assert tr.meta["risk_method"] == "exact (kernels with means)"
    np.testing.assert_allclose(tr.risk[-1], tl.population.risk(tr.student, te), rtol=1e-12, atol=1e-14)


def test_training_set_and_hermite_target_with_student_biases():
    """The training-set regime and a polynomial target: the same rule on the stored samples / the target's labels."""
    d, lr, lr_b, seed = 30, 0.5, 0.8, 3
    st, _ = _biased_pair("erf", d=d, K=2)
    target = tl.targets.hermite({(2,): 1.0}, d, seed=1)
    tr = tl.sgd.simulate(st, target, lr=lr, lr_bias=lr_b, times=[0.0, 2 / d], seed=seed)
    X = _core.rng_gaussians(seed, 0, 1, 0, 2 * d).reshape(2, d)
    W, b = st.W.copy(), st.bias.copy()
    for x in X:
        z = target.directions @ x / np.sqrt(d)
        lam = W @ x / np.sqrt(d) + b
        s, ds = _act("erf", lam)
        E = (z[0] ** 2 - 1) - st.a @ s
        W = W + lr / np.sqrt(d) * np.outer(st.a * ds * E, x)
        b = b + lr_b / d * st.a * ds * E
    np.testing.assert_allclose(tr.student.W, W, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tr.bias[-1], b, rtol=1e-12, atol=1e-14)
    assert tr.teacher_bias is None
    # a training set: the runs with and without biases draw the same samples, and fixed biases stay put
    te = teacher_student(2, 1, d, "erf", seed=5)[1]
    tb = tl.sgd.simulate(st, te, lr=lr, n_samples=50, batch_size=5, t_max=1.0, n_records=3, seed=seed)
    np.testing.assert_array_equal(tb.bias, np.tile(st.bias, (3, 1)))
    assert tb.meta["regime"] == "training_set"


@pytest.mark.parametrize("act", ["tanh", "erf", "relu"])
def test_hermite_target_with_student_biases_records_the_exact_risk(act: str) -> None:
    """Against a polynomial target a student with trained biases records the target engine's exact risk: the ODE's
    risk of Overlaps.from_networks(recorded student, target), and a Monte Carlo estimate of 1/2 E[(f*(z) - f)^2]
    over the fields of the recorded overlaps (4 standard errors); early stop works."""
    d, seed = 60, 2
    target = tl.targets.hermite({(1, 0): 1.0, (1, 1): 0.5, (0, 2): 0.3}, d, seed=1)
    rng = np.random.default_rng(5)
    st = tl.Network(rng.standard_normal((2, d)), [0.8, 0.6], act, bias=[0.4, -0.3])
    tr = tl.sgd.simulate(st, target, lr=0.5, lr_bias=0.7, t_max=1.0, n_records=3, seed=seed)
    assert tr.meta["risk_method"] == "exact (target kernels with means)"
    assert np.all(np.isfinite(tr.risk)) and np.abs(tr.bias[-1] - tr.bias[0]).max() > 1e-3
    ode = tl.ode.integrate(tl.Overlaps.from_networks(tr.student, target), act, lr=0.5, times=[0.0])
    np.testing.assert_allclose(tr.risk[-1], ode.risk[0], rtol=1e-12)
    Q, M, a, b = tr.Q[-1], tr.M[-1], tr.a[-1], tr.bias[-1]
    n = 2_000_000
    z = rng.standard_normal((n, 2))
    w, V = np.linalg.eigh(Q - M @ M.T)
    lam = z @ M.T + rng.standard_normal((n, 2)) @ (V * np.sqrt(np.clip(w, 0, None))).T + b
    g = {"tanh": np.tanh, "erf": lambda s: erf(s / np.sqrt(2)), "relu": lambda s: np.maximum(s, 0.0)}[act](lam)
    y = z[:, 0] + 0.5 * z[:, 0] * z[:, 1] + 0.3 * (z[:, 1] ** 2 - 1)
    sq = 0.5 * (y - g @ a) ** 2
    assert abs(sq.mean() - tr.risk[-1]) < 4 * sq.std() / np.sqrt(n), (sq.mean(), tr.risk[-1])
    stop = tl.sgd.simulate(st, target, lr=0.5, lr_bias=0.7, t_max=1.0, n_records=11, seed=seed,
                           risk_tol=0.5 * (tr.risk[0] + tr.risk[-1]))
    assert stop.status == "converged" and stop.t[len(stop) - 1] < 1.0


def test_zero_biases_take_the_unbiased_arithmetic_bitwise():
    """Explicit zero biases in the core (the biased code path) give bitwise the rows of the run without biases, and a
    Network with zero biases is a run without biases (no bias records)."""
    st, te = teacher_student(3, 2, 64, "erf", seed=2)
    for B, spherical in ((1, False), (1, True), (3, False)):
        plain = tl.sgd.simulate(st, te, lr=1.0, lr_readout=0.5, noise=0.1, batch_size=B, spherical=spherical,
                                t_max=2.0, n_records=5, seed=9)
        assert plain.bias is None and plain.teacher_bias is None and "lr_bias" not in plain.meta
        zero = tl.sgd.simulate(st.with_weights(st.W, bias=np.zeros(3)), te, lr=1.0, lr_readout=0.5, noise=0.1,
                               batch_size=B, spherical=spherical, t_max=2.0, n_records=5, seed=9, lr_bias=0.0)
        for name in ("Q", "M", "a", "risk"):
            np.testing.assert_array_equal(getattr(zero, name), getattr(plain, name))
        kw = dict(lr=np.array([1.0]), train_first=True, lr_readout=np.array([0.5]), noise=np.array([0.1]),
                  risk_tol=np.array([-1.0]), risk_rtol=np.array([-1.0]), batch=B, spherical=spherical, n_samples=0,
                  shuffle=True, steps=128, record_steps=np.array([0, 64, 128]), seed=9,
                  runs=np.array([0], dtype=np.uint32))
        args = (st.W, st.effective_a, "erf", te.W, te.effective_a, "erf", float(st.scale))
        ref = _core.sgd_simulate(*args, **kw)
        biased = _core.sgd_simulate(*args, **kw, bias=np.zeros(3), teacher_bias=np.zeros(2), lr_bias=np.zeros(1))
        for name in ("Q", "M", "a", "W"):
            np.testing.assert_array_equal(biased[name], ref[name])
        np.testing.assert_array_equal(biased["bias"], np.zeros((1, 3, 3)))
        # the risk with zero means: the zero-mean kernels (the self pairs through i2 at a singular covariance)
        np.testing.assert_allclose(biased["risk"], ref["risk"], rtol=1e-13, atol=0)


def test_fixed_biases_stay_and_the_teacher_bias_changes_the_labels():
    st, te = _biased_pair("erf", d=50)
    tr = tl.sgd.simulate(st, te, lr=1.0, t_max=2.0, n_records=4, seed=1)
    np.testing.assert_array_equal(tr.bias, np.tile(st.bias, (4, 1)))
    np.testing.assert_array_equal(tr.student.bias, st.bias)
    unbiased_teacher = tl.sgd.simulate(st, te.with_weights(te.W, bias=np.zeros(2)), lr=1.0, t_max=2.0, n_records=4,
                                       seed=1)
    assert not np.array_equal(unbiased_teacher.M, tr.M)  # same samples, other labels
    assert unbiased_teacher.teacher_bias is not None  # the student's biases make it a run with biases


@pytest.mark.slow
def test_first_steps_drift_of_b_and_M_against_monte_carlo():
    """The mean over R runs of (b(t) - b(0)) / t and (M(t) - M(0)) / t after a few online steps (t = 10 / d, d = 2000)
    against lr_bias E[c a_i sigma'(lambda_i) E] and lr E[c a_i sigma'(lambda_i) E nu_r] (nu_r = w*_r . x / sqrt(d)),
    those expectations by NumPy Monte Carlo over (u, nu) ~ N(0, [[Q, M], [M^T, P]]), lambda = u + b, lambda* = nu + b*.
    Tolerance: 4 standard errors of the runs plus that of the Monte Carlo, plus the O(t) change of the drift."""
    d, steps, R, lr, lr_b, noise = 2000, 10, 400, 1.0, 2.0, 0.0
    st, te = _biased_pair("erf", K=2, M=2, d=d, seed=7)
    ens = tl.sgd.simulate(st, te, lr=lr, lr_bias=lr_b, noise=noise, times=[0.0, steps / d], seeds=R, seed=5)
    t = steps / d
    db = (ens.bias[:, 1] - ens.bias[:, 0]) / t
    dM = (ens.M[:, 1] - ens.M[:, 0]) / t
    ov = tl.Overlaps.from_networks(st, te)
    Om = np.block([[ov.Q, ov.M], [ov.M.T, ov.P]])
    rng = np.random.default_rng(0)
    n = 2_000_000
    z = rng.multivariate_normal(np.zeros(4), Om, size=n)
    lam, nu = z[:, :2] + st.bias, z[:, 2:]
    s, ds = _act("erf", lam)
    E = _act("erf", nu + te.bias)[0] @ te.a - s @ st.a
    g = st.a * ds * E[:, None]  # (n, K)
    mc_b = lr_b * g.mean(0)
    mc_b_se = lr_b * g.std(0) / np.sqrt(n)
    gm = lr * g[:, :, None] * nu[:, None, :]  # (n, K, M)
    mc_M, mc_M_se = gm.mean(0), gm.std(0) / np.sqrt(n)
    drift_change = 0.01  # the O(t) change of the drift over the window, t = 0.005
    sem = lambda x: x.std(0, ddof=1) / np.sqrt(x.shape[0])  # noqa: E731
    np.testing.assert_array_less(np.abs(db.mean(0) - mc_b), 4 * (sem(db) + mc_b_se) + drift_change)
    np.testing.assert_array_less(np.abs(dM.mean(0) - mc_M), 4 * (sem(dM) + mc_M_se) + drift_change)
    assert np.all(np.abs(mc_b) > 4 * sem(db))  # the drift is resolved, not just noise


def test_results_and_exports_carry_the_biases():
    xr = pytest.importorskip("xarray")
    st, te = _biased_pair("erf", d=40)
    tr = tl.sgd.simulate(st, te, lr=1.0, lr_bias=0.5, t_max=1.0, n_records=3, seed=2)
    ov = tr.overlaps_at(-1)
    np.testing.assert_array_equal(ov.bias, tr.bias[-1])
    np.testing.assert_array_equal(ov.teacher_bias, te.bias)
    ds = tr.to_xarray()
    assert ds["bias"].dims == ("t", "student") and "bias" in ds["bias"].attrs["long_name"]
    assert ds["teacher_bias"].dims == ("teacher",)
    back = tl.Trajectory.from_xarray(ds)
    np.testing.assert_array_equal(back.bias, tr.bias)
    np.testing.assert_array_equal(back.teacher_bias, tr.teacher_bias)
    ens = tl.sgd.simulate(st, te, lr=1.0, **tl.sgd.grid(seeds=2, lr_bias=[0.0, 0.5]), t_max=1.0, n_records=3)
    assert ens.bias.shape == (4, 3, 3)
    np.testing.assert_array_equal(ens.select(lr_bias=0.0).bias, np.tile(st.bias, (2, 3, 1)))
    np.testing.assert_allclose(ens.select(lr_bias=0.5).mean().bias, ens.bias[2:].mean(0))
    eds = ens.to_xarray()
    assert eds["bias"].dims == ("member", "t", "student") and "lr_bias" in eds.coords
    again = tl.Ensemble.from_xarray(eds)
    np.testing.assert_array_equal(again.bias, ens.bias)
    np.testing.assert_array_equal(again[0].teacher_bias, te.bias)
    # a run without biases exports exactly its former variables
    plain = tl.sgd.simulate(*teacher_student(2, 2, 40, "erf", seed=0), lr=1.0, t_max=1.0, n_records=3, seeds=2)
    assert "bias" not in plain.to_xarray() and "teacher_bias" not in plain[0].to_xarray()
    assert "lr_bias" not in plain.to_xarray().coords
    assert isinstance(plain.to_xarray(), xr.Dataset)


def test_bad_bias_arguments_name_them():
    st, te = _biased_pair("erf", d=20)
    with pytest.raises(ValueError, match=r"lr_bias: expected a finite number >= 0"):
        tl.sgd.simulate(st, te, lr=1.0, lr_bias=-1.0, t_max=0.5)
    with pytest.raises(ValueError, match=r"lr_bias: expected a number or a 1-d array of 2 values"):
        tl.sgd.simulate(st, te, lr=1.0, lr_bias=[0.1, 0.2, 0.3], t_max=0.5, seeds=2)
    with pytest.raises(ValueError, match=r"lr_bias\[1\]: expected a finite number >= 0"):
        tl.sgd.simulate(st, te, lr=1.0, lr_bias=[0.1, np.nan], t_max=0.5, seeds=2)
    kw = dict(lr=np.array([1.0]), train_first=True, lr_readout=np.array([0.0]), noise=np.array([0.0]),
              risk_tol=np.array([-1.0]), risk_rtol=np.array([-1.0]), batch=1, spherical=False, n_samples=0,
              shuffle=True, steps=4, record_steps=np.array([0, 4]), seed=0, runs=np.array([0], dtype=np.uint32))
    args = (st.W, st.effective_a, "erf", te.W, te.effective_a, "erf", 20.0)
    with pytest.raises(ValueError, match=r"student\.bias"):
        _core.sgd_simulate(*args, **kw, bias=np.zeros(2))
    with pytest.raises(ValueError, match=r"teacher\.bias"):
        _core.sgd_simulate(*args, **kw, teacher_bias=np.zeros(3))
    with pytest.raises(ValueError, match=r"lr_bias\[0\]: trained biases need the student's biases"):
        _core.sgd_simulate(*args, **kw, teacher_bias=np.zeros(2), lr_bias=np.array([0.5]))
    with pytest.raises(ValueError, match=r"lr_bias\[0\]: must be a finite number >= 0"):
        _core.sgd_simulate(*args, **kw, bias=np.zeros(3), lr_bias=np.array([-0.5]))


def test_diverging_biases_stop_the_run():
    st, te = _biased_pair("relu", d=20)
    tr = tl.sgd.simulate(st, te, lr=1e-12, lr_bias=1e60, noise=1.0, t_max=3.0, n_records=4, seed=0)
    assert tr.status == "diverged" and "biases grew past 1e8" in tr.message
    assert np.all(np.isfinite(tr.bias))  # the rows before the stop


def test_function_target_with_student_biases_matches_numpy():
    """The NumPy simulator of a FunctionTarget (NumPy's streams keyed by (seed, run)) applies the same rule, and its
    Monte Carlo risk sees the biases."""
    d, steps, B, lr, lr_a, lr_b, seed = 30, 5, 2, 0.6, 0.2, 0.7, 11
    st, _ = _biased_pair("erf", d=d, K=2)
    ft = tl.targets.function(lambda z: np.tanh(z[:, 0]) * z[:, 1], k=2, d=d, seed=3)
    tr = tl.sgd.simulate(st, ft, lr=lr, lr_readout=lr_a, lr_bias=lr_b, batch_size=B, times=[0.0, steps / d],
                         seed=seed)
    rng = np.random.default_rng([seed, 0])
    W, a, b = st.W.copy(), st.a.copy(), st.bias.copy()
    for _ in range(steps):
        X = rng.standard_normal((B, d))
        z = X @ ft.directions.T / np.sqrt(d)
        s, ds = _act("erf", X @ W.T / np.sqrt(d) + b)
        E = np.tanh(z[:, 0]) * z[:, 1] - s @ a
        g = a * ds * E[:, None]
        W, a, b = W + lr / np.sqrt(d) / B * g.T @ X, a + lr_a / d / B * s.T @ E, b + lr_b / d / B * g.sum(0)
    np.testing.assert_allclose(tr.student.W, W, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tr.student.a, a, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(tr.bias[-1], b, rtol=1e-12, atol=1e-14)
    assert tr.meta["lr_bias"] == lr_b and np.all(np.isfinite(tr.risk))
    unbiased = tl.sgd.simulate(st.with_weights(st.W, bias=np.zeros(2)), ft, lr=lr, times=[0.0], seed=seed)
    assert unbiased.bias is None and unbiased.risk[0] != tr.risk[0]  # the same test set, other predictions


def test_per_run_starts_grids_and_schedules_with_biases():
    """Per-run starts with their own biases equal the runs done alone; a constant schedule of 1/2 equals halving lr,
    lr_readout and lr_bias (bitwise: the factors are exact)."""
    st, te = _biased_pair("erf", d=32)
    other = st.with_weights(st.W[::-1], bias=-st.bias)
    kw = dict(lr=0.8, lr_readout=0.4, t_max=1.0, n_records=3, seed=6)
    ens = tl.sgd.simulate([st, other], te, seeds=[0, 1], lr_bias=[0.5, 1.5], **kw)
    for j, (start, lr_b) in enumerate(((st, 0.5), (other, 1.5))):
        alone = tl.sgd.simulate(start, te, seeds=[j], lr_bias=lr_b, **kw)
        np.testing.assert_array_equal(ens[j].bias, alone[0].bias)
        np.testing.assert_array_equal(ens[j].M, alone[0].M)
    steps = 32
    half = tl.sgd.simulate(st, te, lr=0.4, lr_readout=0.2, lr_bias=0.25, t_max=1.0, n_records=3, seed=6)
    sched = tl.sgd.simulate(st, te, lr_bias=0.5, schedule=np.full(steps, 0.5), **kw)
    np.testing.assert_array_equal(sched.bias, half.bias)
    np.testing.assert_array_equal(sched.Q, half.Q)
    with pytest.raises(ValueError, match="seeds: run indices must be distinct"):
        tl.sgd.simulate(st, te, seeds=[0, 0], lr_bias=[0.5, 0.5], **kw)
    tl.sgd.simulate(st, te, seeds=[0, 0], lr_bias=[0.5, 0.6], **kw)  # the same samples, other lr_bias: allowed


@pytest.mark.parametrize("act", ["erf", "relu", "tanh"])
@pytest.mark.parametrize("lr_bias", [0.0, 0.8])
def test_recorded_risk_with_biases_is_the_population_risk(act, lr_bias):
    """The recorded risk of a run with biases (fixed or trained) is the exact population risk with means of its
    weights: at the start, and at the end (the final network), to ~1e-12."""
    st, te = _biased_pair(act, d=40)
    tr = tl.sgd.simulate(st, te, lr=0.5, lr_readout=0.2, lr_bias=lr_bias, t_max=0.5, n_records=3, seed=2)
    assert tr.status == "completed" and np.all(np.isfinite(tr.risk))
    np.testing.assert_allclose(tr.risk[0], tl.population.risk(st, te), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(tr.risk[-1], tl.population.risk(tr.student, te), rtol=1e-12, atol=1e-14)
    assert tr.risk[-1] != tr.risk[0]
    if lr_bias > 0:
        assert np.any(tr.student.bias != st.bias)
    else:
        np.testing.assert_array_equal(tr.student.bias, st.bias)


def test_teacher_bias_alone_records_the_risk_with_means():
    """Only the teacher has biases: the student's biases are zeros and the recorded risk sees the teacher's."""
    st, te = _biased_pair("erf", d=30)
    plain = st.with_weights(st.W, bias=np.zeros(st.K))
    tr = tl.sgd.simulate(plain, te, lr=0.5, t_max=0.3, n_records=2, seed=1)
    np.testing.assert_allclose(tr.risk, [tl.population.risk(plain, te), tl.population.risk(tr.student, te)],
                               rtol=1e-12, atol=1e-14)


def test_early_stop_with_biases():
    """risk_rtol with trained biases stops the run at the first record below the threshold (status converged), and
    the records before it are above; risk_tol likewise."""
    st, te = _biased_pair("erf", K=2, M=2, d=30, seed=1)
    kw = dict(lr=1.0, lr_readout=0.5, lr_bias=1.0, t_max=40.0, n_records=41, seed=3)
    full = tl.sgd.simulate(st, te, **kw)
    r0 = full.risk[0]
    tr = tl.sgd.simulate(st, te, risk_rtol=0.5, **kw)
    assert tr.status == "converged", tr.message
    assert tr.risk[-1] < 0.5 * r0 and np.all(tr.risk[:-1] >= 0.5 * r0)
    np.testing.assert_array_equal(tr.risk, full.risk[: tr.risk.size])  # the same run up to the stop
    assert tr.t[-1] - 1.0 < tr.stop_time <= tr.t[-1]
    tol = float(full.risk[full.risk.size // 2])
    by_tol = tl.sgd.simulate(st, te, risk_tol=tol, **kw)
    assert by_tol.status == "converged" and by_tol.risk[-1] < tol and np.all(by_tol.risk[:-1] >= tol)
