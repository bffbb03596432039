"""Finite-d SGD simulator: random streams, reproducibility, exactness of the recorded risk, agreement with
population gradient descent and with closed-form online ODEs (linear activation; spherical quadratic p = 1 of
Arnaboldi et al.), the training-set regime, divergence handling and argument checks.

Statistical tolerances: ``Z`` standard errors of the ensemble mean plus a finite-size allowance ``c / d`` for
the O(1/d) bias of the mean (fluctuations of the overlaps are O(1/sqrt(d)); the standard error measures them).
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from scipy import stats
from scipy.integrate import solve_ivp
from twolayer import _core
from twolayer.networks import teacher_student

Z = 4.0  # standard errors allowed


def sem(x: np.ndarray) -> np.ndarray:
    return x.std(axis=0, ddof=1) / np.sqrt(x.shape[0])


def unit_pair(d: int, m0: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Teacher w* and student w with |w|^2 = |w*|^2 = d and overlap w.w*/d = m0 exactly."""
    rng = np.random.default_rng(seed)
    ws = rng.standard_normal(d)
    ws *= np.sqrt(d) / np.linalg.norm(ws)
    u = rng.standard_normal(d)
    u -= (u @ ws) / d * ws
    u *= np.sqrt(d) / np.linalg.norm(u)
    return m0 * ws + np.sqrt(1 - m0**2) * u, ws


# --- random streams
def test_philox_known_answers():
    # Random123's known-answer vectors for philox4x32-10.
    assert list(_core.philox4x32([0, 0, 0, 0], [0, 0])) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert list(_core.philox4x32([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2)) == [
        0x408F276D,
        0x41C83B0E,
        0xA20BC7C6,
        0x6D5451FD,
    ]
    assert list(
        _core.philox4x32([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0])
    ) == [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_gaussian_stream_is_index_addressable_and_matches_scalar_reference():
    z = _core.rng_gaussians(11, 3, 1, 0, 5000)
    for first, n in [(1, 999), (31, 33), (32, 64), (77, 1), (1000, 3001)]:
        np.testing.assert_array_equal(_core.rng_gaussians(11, 3, 1, first, n), z[first : first + n])
    np.testing.assert_array_equal(_core.rng_gaussians(11, 3, 1, 5, 4000, scalar=True), z[5:4005])
    far = 2**40 + 7
    np.testing.assert_array_equal(
        _core.rng_gaussians(11, 3, 1, far, 100), _core.rng_gaussians(11, 3, 1, far, 100, scalar=True)
    )
    # different run / stream / seed: different numbers
    assert not np.array_equal(_core.rng_gaussians(11, 4, 1, 0, 100), z[:100])
    assert not np.array_equal(_core.rng_gaussians(11, 3, 2, 0, 100), z[:100])
    assert not np.array_equal(_core.rng_gaussians(12, 3, 1, 0, 100), z[:100])


def test_gaussians_are_the_documented_box_muller_of_the_philox_words():
    # group g = blocks 8g..8g+7; pair A (words 0, 1) -> [cos, sin] in slots 0-15, B (words 2, 3) -> 16-31
    seed, run, stream, groups = 99, 5, 1, 40
    z = _core.rng_gaussians(seed, run, stream, 0, 32 * groups)
    key = [seed & 0xFFFFFFFF, seed >> 32]
    ref = np.empty_like(z)
    for g in range(groups):
        w = np.array([_core.philox4x32([8 * g + b, 0, run, stream], key) for b in range(8)], dtype=np.float64)
        for pair, (kr, ka) in enumerate([(0, 1), (2, 3)]):
            r = np.sqrt(-2 * np.log((w[:, kr] + 0.5) * 2.0**-32))
            theta = 2 * np.pi * w[:, ka] * 2.0**-32
            ref[32 * g + 16 * pair: 32 * g + 16 * pair + 8] = r * np.cos(theta)
            ref[32 * g + 16 * pair + 8: 32 * g + 16 * pair + 16] = r * np.sin(theta)
    # single-precision transform: within a few float ulps of the exact one
    np.testing.assert_allclose(z, ref, rtol=2e-6, atol=2e-6)


def test_gaussian_moments_and_distribution():
    n = 2_000_000
    z = _core.rng_gaussians(2024, 0, 1, 0, n)
    for k, exact in [(1, 0.0), (2, 1.0), (3, 0.0), (4, 3.0)]:
        se = np.sqrt((np.mean(z ** (2 * k)) - np.mean(z**k) ** 2) / n)
        assert abs(np.mean(z**k) - exact) < 5 * se, k
    assert stats.kstest(z[:200_000], "norm").pvalue > 1e-4
    # neighbours within a group are independent
    assert abs(np.corrcoef(z[:-1], z[1:])[0, 1]) < 5 / np.sqrt(n)
    assert abs(np.corrcoef(z[:-8], z[8:])[0, 1]) < 5 / np.sqrt(n)


# --- reproducibility
def test_same_seed_identical_with_one_and_two_threads():
    st, te = teacher_student(3, 2, 200, "erf", seed=1)
    kw = dict(lr=0.8, lr_readout=0.3, noise=0.1, t_max=5.0, seed=42, seeds=4, n_records=11)
    e1 = tl.sgd.simulate(st, te, n_threads=1, **kw)
    e2 = tl.sgd.simulate(st, te, n_threads=2, **kw)
    for r1, r2 in zip(e1, e2, strict=True):
        for name in ("Q", "M", "a", "risk"):
            np.testing.assert_array_equal(getattr(r1, name), getattr(r2, name))
        np.testing.assert_array_equal(r1.student.W, r2.student.W)
    # run j of an ensemble is the run keyed (seed, j) on its own
    single = tl.sgd.simulate(st, te, n_threads=2, **{**kw, "seeds": [2]})
    np.testing.assert_array_equal(single[0].Q, e1[2].Q)
    # a different seed gives a different trajectory
    other = tl.sgd.simulate(st, te, **{**kw, "seed": 43, "seeds": None})
    assert not np.array_equal(other.Q, e1[0].Q)


def test_progress_bar_does_not_change_results(capsys):
    st, te = teacher_student(2, 2, 100, "erf", seed=1)
    kw = dict(lr=0.5, t_max=50.0, seeds=2, n_records=3)
    a = tl.sgd.simulate(st, te, progress=True, **kw)
    b = tl.sgd.simulate(st, te, **kw)
    for r1, r2 in zip(a, b, strict=True):
        np.testing.assert_array_equal(r1.Q, r2.Q)
    assert "10.0k/10.0k" in capsys.readouterr().err


def test_minibatch_and_training_set_reproducible():
    st, te = teacher_student(2, 2, 100, "relu", seed=3)
    for kw in (dict(batch_size=7), dict(n_samples=150, batch_size=4), dict(n_samples=150, batch_size=150)):
        a = tl.sgd.simulate(st, te, lr=0.3, t_max=2.0, seed=5, seeds=3, n_threads=1, **kw)
        b = tl.sgd.simulate(st, te, lr=0.3, t_max=2.0, seed=5, seeds=3, n_threads=2, **kw)
        for r1, r2 in zip(a, b, strict=True):
            np.testing.assert_array_equal(r1.Q, r2.Q)
            np.testing.assert_array_equal(r1.risk, r2.risk)


# --- the update rule itself
@pytest.mark.parametrize("B, readout, spherical", [(1, "sum", False), (3, "mean", False), (1, "mean", True),
                                                   (4, "sum", True)])
def test_one_step_is_the_documented_update(B, readout, spherical):
    """One step against NumPy on the same inputs: x rows are Gaussians [r d, (r + 1) d) of stream 1 of
    (seed, run), the label noise of row r is Gaussian r of stream 2."""
    from scipy.special import erf

    d, lr, lr_a, noise, seed = 40, 0.7, 0.3, 0.2, 17
    st, te = teacher_student(3, 2, d, "erf", seed=4, readout=readout)
    tr = tl.sgd.simulate(st, te, lr=lr, lr_readout=lr_a, noise=noise, batch_size=B, spherical=spherical,
                         times=[0.0, 1.0 / d], seed=seed)
    X = _core.rng_gaussians(seed, 0, 1, 0, B * d).reshape(B, d)
    xi = _core.rng_gaussians(seed, 0, 2, 0, B)
    c = st.readout_factor
    W, a = st.W.copy(), st.a.copy()
    if spherical:
        W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    lam = X @ W.T / np.sqrt(d)
    y = erf(X @ te.W.T / np.sqrt(2 * d)) @ te.effective_a + np.sqrt(noise) * xi
    E = y - c * erf(lam / np.sqrt(2)) @ a
    W1 = W + lr / np.sqrt(d) / B * ((c * a * np.sqrt(2 / np.pi) * np.exp(-(lam**2) / 2)) * E[:, None]).T @ X
    a1 = a + lr_a / d / B * (c * erf(lam / np.sqrt(2)) * E[:, None]).sum(0)
    if spherical:
        W1 *= np.sqrt(d) / np.linalg.norm(W1, axis=1, keepdims=True)
    np.testing.assert_allclose(tr.student.W, W1, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tr.student.a, a1, rtol=1e-13)
    np.testing.assert_allclose(tr.a[-1], c * a1, rtol=1e-13)


@pytest.mark.parametrize("spherical", [False, True])
def test_several_steps_across_input_chunks_match_numpy(spherical):
    # d = 3000: the core buffers two steps of inputs at a time, so 9 steps cross several chunk boundaries
    from scipy.special import erf

    d, steps, lr, lr_a, noise, seed = 3000, 9, 2.0, 1.0, 0.3, 4
    st, te = teacher_student(2, 2, d, "erf", seed=2)
    tr = tl.sgd.simulate(st, te, lr=lr, lr_readout=lr_a, noise=noise, spherical=spherical,
                         times=[0.0, steps / d], seed=seed)
    X = _core.rng_gaussians(seed, 0, 1, 0, steps * d).reshape(steps, d)
    xi = _core.rng_gaussians(seed, 0, 2, 0, steps)
    W, a = st.W.copy(), st.a.copy()
    if spherical:
        W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    for x, n in zip(X, xi, strict=True):
        lam = W @ x / np.sqrt(d)
        E = erf(te.W @ x / np.sqrt(2 * d)) @ te.a + np.sqrt(noise) * n - a @ erf(lam / np.sqrt(2))
        W = W + lr / np.sqrt(d) * np.outer(a * np.sqrt(2 / np.pi) * np.exp(-(lam**2) / 2) * E, x)
        a = a + lr_a / d * erf(lam / np.sqrt(2)) * E
        if spherical:
            W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    np.testing.assert_allclose(tr.student.W, W, rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(tr.student.a, a, rtol=1e-12)


# --- recorded quantities
@pytest.mark.parametrize(
    "act, teacher_act, readout, spherical",
    [
        ("erf", "erf", "sum", False),
        ("relu", "relu", "mean", False),
        ("quadratic", "relu", "sum", True),
        ("linear", "erf", "mean", False),
        ("erf", "step", "sum", False),
    ],
)
def test_recorded_risk_is_population_risk_of_final_weights(act, teacher_act, readout, spherical):
    d = 150
    st, te = teacher_student(3, 2, d, act, teacher_act, seed=7, readout=readout)
    tr = tl.sgd.simulate(st, te, lr=0.2, lr_readout=0.2, t_max=3.0, spherical=spherical, seed=1)
    assert tr.status == "completed"
    fin = tr.student
    np.testing.assert_allclose(tr.risk[-1], tl.population.risk(fin, te), rtol=1e-12, atol=1e-14)
    ov = tl.Overlaps.from_networks(fin, te)
    np.testing.assert_allclose(tr.Q[-1], ov.Q, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tr.M[-1], ov.M, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(tr.a[-1], ov.a, rtol=1e-12)
    ov0 = tl.Overlaps.from_networks(st, te)
    if not spherical:
        np.testing.assert_allclose(tr.Q[0], ov0.Q, rtol=1e-12)
        np.testing.assert_allclose(tr.risk[0], tl.population.risk(st, te), rtol=1e-12)
    else:
        np.testing.assert_allclose(np.diag(tr.Q[-1]), 1.0, rtol=1e-12)
    assert tr.t[-1] == pytest.approx(3.0) and tr.meta["steps"] == 3 * d


def test_times_are_whole_steps_and_requested_times_respected():
    st, te = teacher_student(2, 2, 64, "erf", seed=0)
    tr = tl.sgd.simulate(st, te, lr=0.5, times=[0.0, 0.5, 1.0, 2.5])
    np.testing.assert_array_equal(tr.t, [0.0, 0.5, 1.0, 2.5])
    assert (
        tr.Q.shape == (4, 2, 2) and tr.M.shape == (4, 2, 2) and tr.a.shape == (4, 2) and tr.risk.shape == (4,)
    )
    tr = tl.sgd.simulate(st, te, lr=0.5, t_max=1.0, n_records=5)
    np.testing.assert_allclose(tr.t, [0, 0.25, 0.5, 0.75, 1.0])


def test_scaling_none_gives_the_same_overlap_dynamics():
    # lambda = w.x (scaling "none", Q = W W^T) with W / sqrt(d): the same overlaps step by step
    d = 64
    st, te = teacher_student(2, 2, d, "relu", seed=8)
    ns, nt = (tl.Network(n.W / np.sqrt(d), n.a, n.activation, scaling="none") for n in (st, te))
    kw = dict(lr=0.4, lr_readout=0.2, noise=0.1, t_max=3.0, n_records=4, seed=6)
    for spherical in (False, True):
        a = tl.sgd.simulate(st, te, spherical=spherical, **kw)
        b = tl.sgd.simulate(ns, nt, spherical=spherical, **kw)
        for name in ("Q", "M", "a", "risk"):
            np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=1e-9, atol=1e-11)


# --- against population gradient descent
@pytest.mark.parametrize("act", ["erf", "relu"])
def test_large_batch_sgd_tracks_population_gradient_descent(act):
    # One online step of lr eta is in expectation one population-GD step of lr eta (readout lr_readout / d).
    d, eta, eta_a, t_max, B = 100, 0.5, 0.5, 3.0, 1000
    st, te = teacher_student(2, 2, d, act, seed=11)
    steps = int(t_max * d)
    gd = tl.population.descend(st, te, lr=eta, lr_readout=eta_a / d, n_steps=steps, n_records=5)
    assert gd.t[-1] == steps
    ens = tl.sgd.simulate(
        st, te, lr=eta, lr_readout=eta_a, batch_size=B, t_max=t_max, n_records=2, seed=3, seeds=4
    )
    for name in ("Q", "M", "a"):
        x = getattr(ens, name)[:, -1]
        # the eta^2 / B noise term biases Q by O(eta^2 t / B)
        tol = Z * sem(x) + 2 * eta**2 * t_max / B
        np.testing.assert_array_less(np.abs(x.mean(0) - getattr(gd, name)[-1]), tol + 1e-12)
    assert abs(ens.risk[:, -1].mean() - gd.risk[-1]) < Z * sem(ens.risk[:, -1]) + 2 * eta**2 * t_max / B


def test_full_batch_training_set_tracks_population_gradient_descent():
    # n = 40 d samples, full-batch GD: the empirical gradient is the population one up to O(1/sqrt(n)).
    d, eta, t_max = 50, 0.5, 2.0
    n = 40 * d
    st, te = teacher_student(2, 2, d, "erf", seed=5)
    gd = tl.population.descend(st, te, lr=eta, n_steps=int(t_max * d), n_records=5)
    assert gd.t[-1] == int(t_max * d)
    ens = tl.sgd.simulate(st, te, lr=eta, n_samples=n, batch_size=n, t_max=t_max, n_records=2, seeds=6)
    M = ens.M[:, -1]
    assert np.all(np.abs(M.mean(0) - gd.M[-1]) < Z * sem(M) + 0.005)
    assert ens.meta["regime"] == "training_set"


def test_small_training_set_is_reused_and_generalises_worse_than_online():
    # alpha = n / d = 0.5: many epochs over few samples overfit; online SGD with the same steps does not.
    d = 100
    st, te = teacher_student(2, 2, d, "erf", seed=2)
    kw = dict(lr=0.5, t_max=30.0, n_records=2, seeds=4)
    fixed = tl.sgd.simulate(st, te, n_samples=d // 2, **kw)
    online = tl.sgd.simulate(st, te, **kw)
    assert fixed.risk[:, -1].mean() > 3 * online.risk[:, -1].mean()


# --- against closed-form online ODEs
def linear_ode(Q0, M0, a0, P, v, eta, eta_a, noise, times):
    K, Mt = M0.shape

    def rhs(_, y):
        Q = y[: K * K].reshape(K, K)
        M = y[K * K : K * K + K * Mt].reshape(K, Mt)
        a = y[K * K + K * Mt :]
        g = M @ v - Q @ a  # E[lambda_k E]
        gs = P @ v - M.T @ a  # E[lambda*_r E]
        e2 = v @ P @ v - 2 * a @ M @ v + a @ Q @ a + noise
        dQ = eta * (np.outer(a, g) + np.outer(g, a)) + eta**2 * np.outer(a, a) * e2
        dM = eta * np.outer(a, gs)
        return np.concatenate([dQ.ravel(), dM.ravel(), eta_a * g])

    y0 = np.concatenate([Q0.ravel(), M0.ravel(), a0])
    sol = solve_ivp(rhs, (0, times[-1]), y0, t_eval=times, rtol=1e-10, atol=1e-12)
    return (
        sol.y[: K * K].T.reshape(-1, K, K),
        sol.y[K * K : K * K + K * Mt].T.reshape(-1, K, Mt),
        sol.y[K * K + K * Mt :].T,
    )


def test_linear_online_sgd_matches_linear_ode():
    d, eta, eta_a, noise = 400, 0.3, 0.2, 0.25
    st, te = teacher_student(3, 2, d, "linear", seed=4)
    st = st.with_weights(0.5 * st.W, [0.4, -0.3, 0.2])
    ov = tl.Overlaps.from_networks(st, te)
    ens = tl.sgd.simulate(
        st, te, lr=eta, lr_readout=eta_a, noise=noise, t_max=4.0, n_records=9, seed=9, seeds=12
    )
    Q, M, a = linear_ode(ov.Q, ov.M, ov.a, ov.P, ov.v, eta, eta_a, noise, ens.t)
    for name, ode in (("Q", Q), ("M", M), ("a", a)):
        x = getattr(ens, name)
        assert np.all(np.abs(x.mean(0) - ode) <= Z * sem(x) + 2.0 / d + 1e-12), name


def test_spherical_quadratic_p1_matches_seed003_ode():
    # Arnaboldi et al. (p = 1, quadratic student and teacher, unit readouts, projected SGD): in our units
    # (t = steps / d, lr = gamma) the overlap m = w.w*/d obeys
    # dm/dt = lr * m [4 (1 - 6 lr)(1 - m^2) - 2 lr Delta]: the paper's equation in time lr * t.
    # Risk 2 (1 - m^2); fixed point risk lr Delta / (1 - 6 lr).
    d, eta, noise, m0 = 500, 0.1, 0.5, 0.3
    w, ws = unit_pair(d, m0)
    st = tl.Network(w[None], [1.0], "quadratic")
    te = tl.Network(ws[None], [1.0], "quadratic")
    ens = tl.sgd.simulate(
        st, te, lr=eta, noise=noise, spherical=True, t_max=30.0, n_records=16, seed=0, seeds=16
    )
    sol = solve_ivp(
        lambda t, m: eta * m * (4 * (1 - 6 * eta) * (1 - m**2) - 2 * eta * noise),
        (0, 30),
        [m0],
        t_eval=ens.t,
        rtol=1e-10,
        atol=1e-12,
    )
    m = ens.M[:, :, 0, 0]
    assert np.all(np.abs(m.mean(0) - sol.y[0]) <= Z * sem(m) + 2.0 / d)
    np.testing.assert_allclose(ens.Q[:, :, 0, 0], 1.0, rtol=1e-12)
    np.testing.assert_allclose(ens.risk, 2 * (1 - m**2), rtol=1e-9)
    fixed = eta * noise / (1 - 6 * eta)
    assert abs(ens.risk[:, -1].mean() - fixed) < Z * sem(ens.risk[:, -1]) + 0.01


# --- divergence
def test_divergence_stops_one_run_without_spoiling_the_others():
    d = 100
    st, te = teacher_student(2, 1, d, "quadratic", seed=0)
    big = st.with_weights(30 * st.W)
    ens = tl.sgd.simulate([st, big, st], te, lr=0.05, t_max=5.0, seeds=3, n_records=6)
    assert ens.status == ["completed", "diverged", "completed"]
    bad = ens[1]
    assert bad.message.startswith(f"diverged at t = {bad.stop_time:g}: ")
    assert len(bad.t) < 6 and np.all(np.isfinite(bad.risk))
    assert bad.meta["stop_step"] >= 0
    assert ens.n_diverged == 1 and ens.Q.shape[0] == 2
    alone = tl.sgd.simulate(st, te, lr=0.05, t_max=5.0, n_records=6)
    np.testing.assert_array_equal(alone.Q, ens[0].Q)
    assert "1 diverged" in ens.mean().message


# --- bad input
def test_bad_input_names_the_argument():
    st, te = teacher_student(2, 2, 20, "erf", seed=0)
    _, te_wrong = teacher_student(2, 2, 21, "erf", seed=0)
    cases = [
        (dict(teacher=te_wrong), "teacher"),
        (dict(lr=0.0), "lr"),
        (dict(lr=-1.0), "lr"),
        (dict(batch_size=0), "batch_size"),
        (dict(noise=-0.1), "noise"),
        (dict(lr_readout=-1.0), "lr_readout"),
        (dict(t_max=-1.0), "t_max"),
        (dict(t_max=None), "t_max"),
        (dict(times=[0.0, 0.5, 0.2]), "times"),
        (dict(times=[0.0, 0.001]), "times"),
        (dict(seeds=0), "seeds"),
        (dict(seeds=[1, 1]), "seeds"),
        (dict(seed=-1), "seed"),
        (dict(n_samples=0), "n_samples"),
        (dict(n_samples=5, batch_size=6), "batch_size"),
    ]
    base = dict(teacher=te, lr=0.5, t_max=1.0)
    for change, name in cases:
        kw = {**base, **change}
        with pytest.raises(ValueError, match=name):
            tl.sgd.simulate(st, **kw)
    # a float count is the wrong type: TypeError (it was a ValueError before the input-hardening pass)
    with pytest.raises(TypeError, match="batch_size"):
        tl.sgd.simulate(st, **{**base, "batch_size": 1.5})
    nan = tl.Network(st.W.copy(), st.a, "erf")
    nan.W[0, 0] = np.nan  # the arrays of a frozen Network can still be written in place
    with pytest.raises(ValueError, match="student"):
        tl.sgd.simulate(nan, te, lr=0.5, t_max=1.0)
    with pytest.raises(ValueError, match="activation"):
        tl.sgd.simulate(tl.Network(st.W, st.a, "step"), te, lr=0.5, t_max=1.0)
    with pytest.raises(ValueError, match="student"):
        tl.sgd.simulate([st, st], te, lr=0.5, t_max=1.0, seeds=3)
    zero = tl.Network(np.zeros((2, 20)), st.a, "erf")
    with pytest.raises(ValueError, match="student"):
        tl.sgd.simulate(zero, te, lr=0.5, t_max=1.0, spherical=True)
    with pytest.raises(TypeError, match="student"):
        tl.sgd.simulate(st.W, te, lr=0.5, t_max=1.0)
    # the readout alone may be trained with a step student
    tr = tl.sgd.simulate(
        tl.Network(st.W, st.a, "step"), te, lr=1.0, lr_readout=0.5, train_first_layer=False, t_max=1.0
    )
    np.testing.assert_array_equal(tr.Q[0], tr.Q[-1])
    assert not np.array_equal(tr.a[0], tr.a[-1])


def test_ensemble_statistics_and_xarray():
    st, te = teacher_student(2, 2, 80, "erf", seed=0)
    ens = tl.sgd.simulate(st, te, lr=0.5, t_max=2.0, n_records=5, seeds=5)
    mean, std, se = ens.mean(), ens.std(), ens.sem()
    np.testing.assert_allclose(mean.risk, ens.risk.mean(0))
    np.testing.assert_allclose(std.Q, ens.Q.std(0, ddof=1))
    np.testing.assert_allclose(se.M, ens.M.std(0, ddof=1) / np.sqrt(5))
    assert len(ens) == 5 and ens.t.shape == (5,)
    ds = ens[0].to_xarray()
    assert ds["Q"].shape == (5, 2, 2)
    dse = ens.to_xarray()
    assert dse["M"].shape == (5, 5, 2, 2) and list(dse["member"].values) == [0, 1, 2, 3, 4]
