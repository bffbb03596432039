"""DMFT of full-batch GD (twolayer.dmft) against the finite-d simulation (twolayer.full_batch), its alpha -> infinity
limit, its Monte Carlo error and its argument checks. Tolerances: |DMFT - sim| <= Z sqrt(se_sim^2 + se_dmft^2)."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer import dmft, full_batch

Z = 4.5  # many entries are compared at once


def tanh_he3(d: int):
    return tl.targets.function(lambda z: np.tanh(z[:, 0] + z[:, 1] ** 3 - 3 * z[:, 1]), k=2, d=d, seed=1)


def erf_committee(d: int):
    Wt = np.linalg.qr(np.random.default_rng(1).standard_normal((d, 2)))[0].T * np.sqrt(d)
    return tl.Network(Wt, np.array([1.0, 1.0]), "erf")


def compare(target, act, a, d, seeds, T, alpha, lr, ridge=0.0, n_mc=40_000, z=Z, noise=0.0, risk_tol=0.02,
            bias=None, lr_bias=0.0):
    student = tl.Network(tl.Network.random(len(a), d, act, seed=5).W, np.asarray(a, dtype=float), act, bias=bias)
    run = full_batch.simulate(student, target, alpha=alpha, lr=lr, n_steps=T, ridge=ridge, seeds=seeds, seed=3,
                              project_init=True, n_test=20_000, noise=noise, lr_bias=lr_bias)
    Wt = full_batch.directions(target)
    W0 = student.W - (student.W @ Wt.T / d) @ Wt
    res = dmft.solve(target, activation=act, a=student.effective_a, alpha=alpha, lr=lr, ridge=ridge, n_steps=T,
                     Q0=W0 @ W0.T / d, n_mc=n_mc, n_groups=8, seed=11, noise=noise, bias=bias, lr_bias=lr_bias)
    assert res.status == "completed"
    worst = {}
    for name in ("M", "Q", "train_risk") + (("bias",) if lr_bias > 0 else ()):
        m, se = run.mean(name)[1:], run.sem(name)[1:]
        D, Dse = getattr(res, name)[1:], res.se[name][1:]
        err = np.abs(D - m) / np.sqrt(se**2 + Dse**2)
        worst[name] = float(err.max())
    # the simulation's test risk is exact (committee) or on one shared test draw: compare on absolute scale
    worst["test_risk"] = float(np.max(np.abs(res.test_risk - run.mean("test_risk"))))
    assert max(v for n, v in worst.items() if n != "test_risk") < z, worst
    assert worst["test_risk"] < risk_tol, worst
    return worst, run


def test_dmft_matches_full_batch_gd_small():
    # ReLU p = 2 on tanh(z1 + He3(z2)), alpha 3, lr 0.2: the seed-002 setting at small d and T
    compare(tanh_he3(400), "relu", [1.0, 1.0], d=400, seeds=6, T=4, alpha=3.0, lr=0.2, n_mc=10_000)


@pytest.mark.slow
def test_dmft_ridge_noise_erf_committee_small():
    compare(erf_committee(500), "erf", [1.0, -0.5], d=500, seeds=8, T=5, alpha=2.0, lr=0.5, ridge=0.3,
            n_mc=20_000, noise=0.25)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [3.0, 5.0])
@pytest.mark.parametrize("T", [7, 30])
def test_dmft_matches_full_batch_gd_relu_tanh_he3(alpha, T):
    compare(tanh_he3(2000), "relu", [1.0, 1.0], d=2000, seeds=16, T=T, alpha=alpha, lr=0.2, n_mc=100_000)


@pytest.mark.slow
@pytest.mark.parametrize("T", [7, 30])
def test_dmft_matches_full_batch_gd_erf_committee(T):
    compare(erf_committee(2000), "erf", [1.0, -0.5], d=2000, seeds=16, T=T, alpha=3.0, lr=0.5, n_mc=100_000)


def test_dmft_matches_full_batch_gd_committee_teacher_with_biases():
    # a tanh committee with biases b* (labels sum_r v_r tanh(z_r + b*_r)): the DMFT follows full-batch GD, and the
    # biases matter (the run without them ends elsewhere, by many standard errors)
    d = 400
    Wt = erf_committee(d).W
    biased = tl.Network(Wt, np.array([1.0, 0.8]), "tanh", bias=[0.8, 0.6])
    _, run = compare(biased, "erf", [1.0, 1.0], d=d, seeds=6, T=4, alpha=3.0, lr=0.3, n_mc=10_000, noise=0.1)
    plain = full_batch.simulate(tl.Network(tl.Network.random(2, d, "erf", seed=5).W, np.array([1.0, 1.0]), "erf"),
                                tl.Network(Wt, np.array([1.0, 0.8]), "tanh"), alpha=3.0, lr=0.3, n_steps=4, seeds=6,
                                seed=3, project_init=True, noise=0.1)
    diff = np.abs(run.mean("train_risk") - plain.mean("train_risk"))
    assert np.all(diff > 10 * np.sqrt(run.sem("train_risk") ** 2 + plain.sem("train_risk") ** 2)), diff


@pytest.mark.parametrize("lr_bias", [0.0, 0.6])
def test_dmft_matches_full_batch_gd_with_student_biases(lr_bias):
    # fixed and trained student biases (b <- b + lr_bias E[g], deterministic in the DMFT): relu on tanh(z1 + He3(z2))
    _, run = compare(tanh_he3(400), "relu", [1.0, 1.0], d=400, seeds=6, T=4, alpha=3.0, lr=0.2, n_mc=10_000,
                     bias=[0.4, -0.5], lr_bias=lr_bias)
    if lr_bias > 0:  # the biases move by many standard errors
        assert np.all(np.abs(run.mean("bias")[-1] - [0.4, -0.5]) > 10 * run.sem("bias")[-1])


@pytest.mark.slow
def test_dmft_matches_full_batch_gd_with_biases_large_d():
    # d = 2000, T = 7: trained relu biases on tanh(z1 + He3(z2)), and erf with biases on a biased tanh committee
    compare(tanh_he3(2000), "relu", [1.0, 1.0], d=2000, seeds=16, T=7, alpha=3.0, lr=0.2, n_mc=100_000,
            bias=[0.4, -0.5], lr_bias=0.6)
    teacher = tl.Network(erf_committee(2000).W, np.array([1.0, 0.8]), "tanh", bias=[0.8, 0.6])
    compare(teacher, "erf", [1.0, 1.0], d=2000, seeds=16, T=7, alpha=3.0, lr=0.3, n_mc=100_000, bias=[0.2, -0.3],
            lr_bias=0.8)


def test_dmft_student_and_teacher_biases_erf():
    # an erf student with trained biases on a tanh committee with biases
    d = 400
    teacher = tl.Network(erf_committee(d).W, np.array([1.0, 0.8]), "tanh", bias=[0.8, 0.6])
    compare(teacher, "erf", [1.0, 1.0], d=d, seeds=6, T=4, alpha=3.0, lr=0.3, n_mc=10_000, bias=[0.2, -0.3],
            lr_bias=0.8)


def test_one_pass_population_gd_matches_weight_space():
    # population GD on overlaps (alpha -> infinity limit) against exact weight-space population GD, erf committee
    d, lr, T = 8, 0.5, 6
    target = erf_committee(d)
    student = tl.Network(tl.Network.random(2, d, "erf", seed=2).W, np.array([1.0, -0.5]), "erf")
    W = student.W.copy()
    Ms = []
    for _ in range(T + 1):
        Ms.append(W @ target.W.T / d)
        dW, _ = tl.population.gradient(tl.Network(W, student.a, "erf"), target, train_readout=False)
        W = W - lr * d * dW
    Q0, M0 = student.W @ student.W.T / d, student.W @ target.W.T / d
    pop = dmft.one_pass(target, activation="erf", a=student.effective_a, lr=lr, n_steps=T, Q0=Q0, M0=M0,
                             n_mc=400_000)
    np.testing.assert_allclose(pop["M"], np.array(Ms), atol=5e-3)


def test_one_pass_population_gd_with_biases_matches_weight_space():
    # the same with a biased tanh committee and trained student biases (population.gradient with train_bias)
    d, lr, lr_b, T = 8, 0.5, 0.7, 6
    target = tl.Network(erf_committee(d).W, np.array([1.0, 0.8]), "tanh", bias=[0.5, -0.4])
    student = tl.Network(tl.Network.random(2, d, "tanh", seed=2).W, np.array([1.0, -0.5]), "tanh", bias=[0.2, 0.1])
    W, b = student.W.copy(), student.bias.copy()
    Ms, bs = [], []
    for _ in range(T + 1):
        Ms.append(W @ target.W.T / d)
        bs.append(b.copy())
        dW, _, db = tl.population.gradient(student.with_weights(W, bias=b), target, train_readout=False,
                                           train_bias=True)
        W, b = W - lr * d * dW, b - lr_b * db
    Q0, M0 = student.W @ student.W.T / d, student.W @ target.W.T / d
    pop = dmft.one_pass(target, activation="tanh", a=student.effective_a, lr=lr, n_steps=T, Q0=Q0, M0=M0,
                        n_mc=400_000, bias=student.bias, lr_bias=lr_b)
    np.testing.assert_allclose(pop["M"], np.array(Ms), atol=5e-3)
    np.testing.assert_allclose(pop["bias"], np.array(bs), atol=5e-3)
    assert np.abs(bs[-1] - bs[0]).max() > 0.03


@pytest.mark.slow
def test_alpha_to_infinity_is_population_gd():
    # alpha -> infinity: memory (eta / alpha) and noise (eta^2 / alpha) vanish; DMFT -> population GD, step lr
    target = tanh_he3(10)
    kw = dict(activation="relu", a=[1.0, 1.0], lr=0.2, n_steps=10, M0=[[0.3, 0.1], [0.2, -0.1]])
    pop = dmft.one_pass(target, n_mc=400_000, **kw)
    errs = []
    for alpha in (10.0, 1e4):
        res = dmft.solve(target, alpha=alpha, n_mc=50_000, n_groups=8, **kw)
        errs.append(np.abs(res.M - pop["M"]).max())
        if alpha > 1e3:
            assert np.all(np.abs(res.M - pop["M"]) < 5 * res.se["M"] + 3e-3)
            assert np.all(np.abs(res.Q - pop["Q"]) < 5 * res.se["Q"] + 3e-3)
    assert errs[1] < errs[0]


def test_monte_carlo_error_scales_as_inverse_sqrt():
    target = tanh_he3(10)
    kw = dict(activation="relu", a=[1.0, 1.0], alpha=3.0, lr=0.2, n_steps=3, n_groups=32)
    se1 = dmft.solve(target, n_mc=1_000, seed=1, **kw).se
    se4 = dmft.solve(target, n_mc=4_000, seed=2, **kw).se
    ratios = np.concatenate([(se1[n][1:] / se4[n][1:]).ravel() for n in ("M", "train_risk")])
    assert 1.6 < np.exp(np.mean(np.log(ratios))) < 2.5  # sqrt(4) = 2


def test_reproducible_and_thread_independent():
    target = tanh_he3(10)
    kw = dict(activation="relu", a=[1.0, 1.0], alpha=3.0, lr=0.2, n_steps=4, n_mc=3_000, n_groups=2, seed=4)
    r1 = dmft.solve(target, n_threads=1, **kw)
    r2 = dmft.solve(target, n_threads=2, **kw)
    for name in ("M", "Q", "train_risk", "test_risk", "C_theta", "R_g"):
        np.testing.assert_array_equal(getattr(r1, name), getattr(r2, name))
    ds = r1.to_xarray()
    assert ds["R_theta"].shape == (5, 5, 2, 2) and "M_se" in ds


def test_bad_arguments():
    target = tanh_he3(10)
    ok = dict(activation="relu", a=[1.0, 1.0], alpha=3.0, lr=0.2, n_steps=2, n_mc=100, n_groups=2)
    with pytest.raises(ValueError, match="alpha"):
        dmft.solve(target, **{**ok, "alpha": -1.0})
    with pytest.raises(ValueError, match="activation"):
        dmft.solve(target, **{**ok, "activation": "step"})
    with pytest.raises(ValueError, match="M0"):
        dmft.solve(target, **ok, M0=np.zeros((3, 2)))
    with pytest.raises(TypeError, match="target"):
        dmft.solve("tanh", **ok)
    with pytest.raises(MemoryError, match="n_mc"):
        dmft.solve(target, **{**ok, "n_mc": 10**9, "n_steps": 1000})
    with pytest.raises(ValueError, match=r"bias: expected shape \(2,\)"):
        dmft.solve(target, **ok, bias=[0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="bias"):
        dmft.solve(target, **ok, bias=[0.1, np.nan])
    with pytest.raises(ValueError, match="lr_bias"):
        dmft.solve(target, **ok, lr_bias=-1.0)
    plain = dmft.solve(target, **ok)
    assert plain.bias is None and "bias" not in plain.to_xarray()
    biased = dmft.solve(target, **ok, bias=[0.1, 0.0])
    np.testing.assert_array_equal(biased.bias, [[0.1, 0.0]] * 3)
    assert biased.to_xarray()["bias"].dims == ("step", "student")
    zero = dmft.solve(target, **ok, bias=[0.0, 0.0])  # zero biases: bitwise the run without
    np.testing.assert_array_equal(zero.M, plain.M)
    np.testing.assert_array_equal(zero.train_risk, plain.train_risk)


def test_scan_engines_dmft_and_full_batch():
    sc = tl.scan.Scan(engine="dmft", constants={"n_steps": 3, "lr": 0.5, "n_mc": 2000, "n_groups": 4},
                      axes={"alpha": [2.0, 4.0], "ridge": [0.0, 0.1]})
    ds = tl.scan.run(sc)
    teacher, a = tl.scan.engines._reuse_problem(tl.scan.engines.ENGINES["dmft"].complete(
        {"alpha": 4.0, "lr": 0.5, "n_steps": 3}), 2)
    one = dmft.solve(teacher, activation="erf", a=a, alpha=4.0, lr=0.5, ridge=0.1, n_steps=3, n_mc=2000, n_groups=4)
    np.testing.assert_allclose(ds["train_risk"].sel(alpha=4.0, ridge=0.1).values, one.train_risk, rtol=1e-12)
    fb = tl.scan.run(tl.scan.Scan(engine="full_batch", constants={"n_steps": 2, "lr": 0.5, "d": 50, "seeds": 2},
                                  axes={"alpha": [2.0, 3.0]}))
    assert fb["train_risk"].shape == (2, 2, 3) and np.all(np.isfinite(fb["train_risk"].values))


def test_scan_engines_dmft_and_full_batch_with_biases():
    # bias, teacher_bias, lr_bias in the dmft and full_batch engines: each configuration is the direct call
    const = {"n_steps": 2, "lr": 0.5, "alpha": 3.0, "activation": "tanh", "teacher_bias": [0.3, -0.2]}
    axes = {"bias": [0.0, [0.2, -0.1]], "lr_bias": [0.0, 0.5]}
    ds = tl.scan.run(tl.scan.Scan(engine="dmft", constants={**const, "n_mc": 2000, "n_groups": 4}, axes=axes))
    fb = tl.scan.run(tl.scan.Scan(engine="full_batch", constants={**const, "d": 50, "seeds": 2}, axes=axes))
    assert ds["bias"].dims == ("param_bias", "lr_bias", "step", "student")
    assert fb["bias"].dims == ("param_bias", "lr_bias", "member", "step", "student")
    full = {"alpha": 3.0, "lr": 0.5, "n_steps": 2, "activation": "tanh", "teacher_bias": [0.3, -0.2]}
    for i, b in enumerate([[0.0, 0.0], [0.2, -0.1]]):
        for j, lrb in enumerate([0.0, 0.5]):
            teacher, a = tl.scan.engines._reuse_problem(tl.scan.engines.ENGINES["dmft"].complete(full), 2)
            np.testing.assert_array_equal(teacher.bias, [0.3, -0.2])
            one = dmft.solve(teacher, activation="tanh", a=a, alpha=3.0, lr=0.5, n_steps=2, n_mc=2000, n_groups=4,
                             bias=b, lr_bias=lrb)
            np.testing.assert_array_equal(ds["train_risk"].values[i, j], one.train_risk)
            np.testing.assert_array_equal(ds["bias"].values[i, j], np.broadcast_to(b, (3, 2)) if one.bias is None
                                          else one.bias)
            # the Monte Carlo standard error of the biases, as of every other curve (zero where they are fixed)
            np.testing.assert_array_equal(ds["bias_se"].values[i, j], np.zeros((3, 2)) if one.bias is None
                                          else one.se["bias"])
            teacher, a = tl.scan.engines._reuse_problem(tl.scan.engines.ENGINES["full_batch"].complete(
                {**full, "d": 50}), 50)
            s0 = tl.Network.random(2, 50, "tanh", seed=0)
            run = full_batch.simulate(tl.Network(s0.W, a, "tanh", bias=b), teacher, alpha=3.0, lr=0.5, n_steps=2,
                                      seeds=2, project_init=True, lr_bias=lrb)
            np.testing.assert_array_equal(fb["test_risk"].values[i, j], run.test_risk)
            np.testing.assert_array_equal(fb["bias"].values[i, j], np.broadcast_to(b, (2, 3, 2)) if run.bias is None
                                          else run.bias)
    assert np.abs(ds["bias"].values[1, 1, -1] - [0.2, -0.1]).max() > 1e-3
    assert ds["bias_se"].values[1, 1, -1].min() > 0.0  # trained biases: a Monte Carlo estimate


def test_one_pass_matches_large_batch_map():
    # finite alpha: seed 002's large-batch map (tl.ode, exact expectations) for an erf committee
    target = erf_committee(2)
    a, T, lr, alpha = np.array([1.0, -0.5]), 5, 0.8, 2.0
    Q0, M0 = np.array([[1.0, 0.2], [0.2, 0.8]]), np.array([[0.3, 0.1], [-0.1, 0.2]])
    ov = tl.Overlaps(Q0, M0, np.eye(2), a, np.ones(2))
    tr = tl.ode.integrate(ov, "erf", lr=lr, regime="large_batch", batch_ratio=alpha, n_steps=T)
    out = dmft.one_pass(target, activation="erf", a=a, lr=lr, n_steps=T, alpha=alpha, Q0=Q0, M0=M0, n_mc=400_000)
    np.testing.assert_allclose(out["M"], tr.M, atol=5e-3)
    np.testing.assert_allclose(out["Q"], tr.Q, atol=1e-2)


@pytest.mark.skipif(not hasattr(__import__("signal"), "SIGINT") or __import__("os").name != "posix",
                    reason="POSIX signals")
def test_ctrl_c_returns_the_finished_iterations():
    import os
    import signal
    import threading
    import time

    sent: list[float] = []

    def fire() -> None:
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(2.0, fire)
    timer.start()
    try:
        with pytest.raises(tl.Interrupted) as info:
            dmft.solve(tanh_he3(10), activation="relu", a=[1.0, 1.0], alpha=3.0, lr=0.2, n_steps=400, n_mc=5_000,
                       n_groups=2)
        latency = time.perf_counter() - sent[0]
    finally:
        timer.cancel()
        timer.join()
    part = info.value.partial
    assert isinstance(part, dmft.DmftResult) and part.status == "interrupted"
    assert 1 <= len(part.train_risk) < 401 and np.all(np.isfinite(part.train_risk))
    assert part.C_theta.shape[0] == len(part.train_risk)
    assert latency < 2.0  # the machine may be loaded; the core polls once per chunk of 1024 samples


@pytest.mark.parametrize("lr_readout", [0.0, 0.4])
def test_full_batch_is_sgd_with_the_whole_training_set(lr_readout):
    # full_batch.simulate(lr, lr_readout) = tl.sgd.simulate(lr = lr d, lr_readout = lr_readout d,
    # batch_size = n_samples = n, shuffle=False), t = steps / d
    d, alpha, lr, T, R = 200, 2.0, 0.5, 5, 12
    target = erf_committee(d)
    student = tl.Network(tl.Network.random(2, d, "erf", seed=5).W, np.array([1.0, -0.5]), "erf")
    fb = full_batch.simulate(student, target, alpha=alpha, lr=lr, n_steps=T, seeds=R, n_test=1000,
                             lr_readout=lr_readout)
    n = int(alpha * d)
    ens = tl.sgd.simulate(student, target, lr=lr * d, lr_readout=lr_readout * d, batch_size=n, n_samples=n,
                          shuffle=False, times=np.arange(T + 1) / d, seeds=R)
    for name, x in (("M", ens.M), ("Q", ens.Q), ("a", ens.a)):
        diff = fb.mean(name) - x.mean(axis=0)
        se = np.sqrt(fb.sem(name) ** 2 + x.std(axis=0, ddof=1) ** 2 / R) + 1e-12
        assert np.all(np.abs(diff) < Z * se), (name, np.abs(diff / se).max())


@pytest.mark.slow
@pytest.mark.parametrize("ridge", [0.0, 0.1])
def test_dmft_long_horizon(ridge):
    # T = 100: the Cholesky factor of C_theta over 101 times and the back substitution for R_g stay accurate
    compare(tanh_he3(1000), "relu", [1.0, 1.0], d=1000, seeds=8, T=100, alpha=3.0, lr=0.2, ridge=ridge, n_mc=50_000)


def z1_plus_he3(d: int):
    # z2 enters only through He3 (zero first Hermite coefficient, additively): E[y z2 | z1] = 0
    return tl.targets.function(lambda z: z[:, 0] + z[:, 1] ** 3 - 3 * z[:, 1], k=2, d=d, seed=1)


@pytest.mark.slow
def test_reuse_pulls_along_a_direction_one_pass_cannot_see():
    # y = z1 + He3(z2), ReLU p = 2, alpha 3, lr 0.3, T = 10, M(0) = 0. One pass: h does not depend on z2 while
    # M_z2 = 0 and E[y z2 | z1] = 0, so M_z2 = 0 is a fixed point of the map (here within its Monte Carlo error).
    # Reuse: the memory term feeds y (hence He3(z2)) into the pre-activations; the DMFT measures a small,
    # significant pull along z2 (about -0.09 summed over the two units, docs/layers/dmft.rst), and full-batch GD at
    # d = 2000 (16 training sets) agrees with it and is itself significantly below zero.
    kw = dict(activation="relu", a=[1.0, 1.0], lr=0.3, n_steps=10)
    target = z1_plus_he3(2000)
    res = dmft.solve(target, alpha=3.0, n_mc=50_000, n_groups=8, seed=2, **kw)
    reuse, se = res.M[-1, :, 1].sum(), res.se["M"][-1, :, 1].sum()  # se summed: conservative
    assert reuse < -4 * se, (reuse, se)
    one = np.array([dmft.one_pass(target, alpha=3.0, n_mc=200_000, seed=s, **kw)["M"][-1, :, 1].sum()
                    for s in range(4)])
    one_se = one.std(ddof=1) / 2
    assert abs(one.mean()) < 4 * one_se + 1e-3, (one, reuse)
    assert abs(one.mean()) < 0.25 * abs(reuse), (one, reuse)
    # test risk ~ 4 from 20000 heavy-tailed draws (per-draw std of (y - f)^2 / 2 about 27 at M = 0): SE ~ 0.2
    _, run = compare(target, "relu", [1.0, 1.0], d=2000, seeds=16, T=10, alpha=3.0, lr=0.3, n_mc=40_000,
                     risk_tol=0.8)
    sim = run.M[:, -1, :, 1].sum(axis=1)
    assert sim.mean() < -3 * sim.std(ddof=1) / np.sqrt(len(sim)), sim
