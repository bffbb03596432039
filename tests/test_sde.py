"""The SDE of online SGD (twolayer.sde): increment moments against one-step SGD, paths against SGD ensembles."""

import math
import os
import signal
import threading
import time

import numpy as np
import pytest
import twolayer as tl


def networks_with_overlaps(Q, M, a, d, act, P=((1.0,),), v=(1.0,), teacher_act=None):
    """Student (K, d) and teacher (len(v), d) with exactly these Q, M and P, lambda = w.x / sqrt(d)."""
    K, R = len(a), len(v)
    G = np.block([[np.asarray(Q), np.asarray(M)], [np.asarray(M).T, np.asarray(P)]])
    L = np.linalg.cholesky(G)  # rows: coordinates of (w_1..w_K, w*) / sqrt(d) in an orthonormal basis
    basis = np.linalg.qr(np.random.default_rng(0).standard_normal((d, K + R)))[0].T
    V = math.sqrt(d) * L @ basis
    return tl.Network(V[:K], a, act), tl.Network(V[K:], list(v), teacher_act or act)


def one_step_increments(student, teacher, lr, noise, n, spherical=False):
    d = student.d
    ens = tl.sgd.simulate(student, teacher, lr=lr, noise=noise, spherical=spherical, times=[0.0, 1.0 / d], seeds=n,
                          keep_weights=False)
    Q, M = ens.stack("Q"), ens.stack("M")
    K = Q.shape[-1]
    iu = np.triu_indices(K)
    dQ = (Q[:, 1] - Q[:, 0])[:, iu[0], iu[1]]
    dM = (M[:, 1] - M[:, 0]).reshape(n, -1)
    return d * np.concatenate([dQ, dM], axis=1)


def assert_moments(xi, ic, n_se=4.0):
    n = xi.shape[0]
    mu = xi.mean(axis=0)
    dev = xi - mu
    se_mu = xi.std(axis=0, ddof=1) / math.sqrt(n)
    assert np.all(np.abs(mu - ic.mean) <= n_se * se_mu + 1e-9), (mu, ic.mean, se_mu)
    prod = dev[:, :, None] * dev[:, None, :]
    cov = prod.mean(axis=0) * n / (n - 1)
    se_cov = prod.std(axis=0, ddof=1) / math.sqrt(n)
    assert np.all(np.abs(cov - ic.cov) <= n_se * se_cov + 1e-9), (cov, ic.cov, se_cov)


@pytest.mark.parametrize("act,spherical,n", [
    ("quadratic", True, 5000), ("erf", False, 5000),
    pytest.param("quadratic", False, 20_000, marks=pytest.mark.slow),
    pytest.param("quadratic", True, 20_000, marks=pytest.mark.slow),
    pytest.param("erf", False, 20_000, marks=pytest.mark.slow)])
def test_increment_covariance_against_one_step_sgd(act, spherical, n):
    Q = [[1.0, 0.3], [0.3, 1.0]] if spherical else [[1.0, 0.3], [0.3, 0.8]]
    M, a = [[0.4], [-0.2]], [0.7, 0.5]
    d, lr, noise = 1000, 0.2, 0.5
    student, teacher = networks_with_overlaps(Q, M, a, d, act)
    ov = tl.Overlaps.from_networks(student, teacher)
    ic = tl.sde.increment_covariance(ov, act, lr=lr, noise=noise, spherical=spherical)
    assert ic.labels == ("Q[0,0]", "Q[0,1]", "Q[1,1]", "M[0,0]", "M[1,0]")
    # the mean is the ODE right-hand side (exact for quadratic, converged quadrature for erf)
    dQ, dM, _ = tl.ode.rhs(ov, act, lr=lr, noise=noise, spherical=spherical)
    np.testing.assert_allclose(ic.mean, [dQ[0, 0], dQ[0, 1], dQ[1, 1], dM[0, 0], dM[1, 0]], rtol=1e-8, atol=1e-12)
    xi = one_step_increments(student, teacher, lr, noise, n, spherical)
    assert_moments(xi, ic)


def test_increment_covariance_quadrature_is_exact_or_converged():
    ov = tl.Overlaps([[1.0, 0.2], [0.2, 1.5]], [[0.3], [0.1]], [[1.0]], [0.7, 0.4], [1.0])
    kw = {"lr": 0.3, "noise": 0.5, "lr_readout": 0.2}
    q7 = tl.sde.increment_covariance(ov, "quadratic", **kw)
    q12 = tl.sde.increment_covariance(ov, "quadratic", n_nodes=12, **kw)
    np.testing.assert_allclose(q7.cov, q12.cov, rtol=1e-11, atol=1e-13)  # polynomial: exact at 7 nodes
    assert q7.labels[-2:] == ("a[0]", "a[1]")
    e48 = tl.sde.increment_covariance(ov, "erf", **kw)
    e64 = tl.sde.increment_covariance(ov, "erf", n_nodes=64, **kw)
    np.testing.assert_allclose(e48.cov, e64.cov, rtol=1e-6, atol=1e-9)
    dQ, dM, da = tl.ode.rhs(ov, "erf", **kw)
    np.testing.assert_allclose(e48.mean, [dQ[0, 0], dQ[0, 1], dQ[1, 1], dM[0, 0], dM[1, 0], da[0], da[1]],
                               rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="activation: no diffusion term for 'step' students"):
        tl.sde.increment_covariance(ov, "step", lr=0.1)
    # relu students with erf teachers: Gauss-Hermite over the teacher's field, orthant moments given it
    # (tests/test_sde_relu_bias.py); once refused
    assert tl.sde.increment_covariance(ov, "relu", "erf", lr=0.1).mean_error < 1e-12
    ov5 = tl.Overlaps(np.eye(4), np.zeros((4, 1)), [[1.0]], np.ones(4), [1.0])
    with pytest.raises(ValueError, match=r"K \+ M: the relu diffusion term is exact .* for K \+ M <= 4 units, got 5"):
        tl.sde.increment_covariance(ov5, "relu", lr=0.1)


@pytest.mark.parametrize("act,teacher_act,n", [
    ("relu", "relu", 5000),
    pytest.param("relu", "step", 20_000, marks=pytest.mark.slow),
    pytest.param("linear", "relu", 20_000, marks=pytest.mark.slow)])
def test_relu_increment_covariance_against_one_step_sgd(act, teacher_act, n):
    """K + M = 4 relu units: exact orthant-moment covariance against one-step SGD increments (readout trained)."""
    Q, M, P = [[1.0, 0.3], [0.3, 0.8]], [[0.4, 0.1], [-0.2, 0.5]], [[1.0, 0.2], [0.2, 0.9]]
    a, v, d, lr, lr_a, noise = [0.7, 0.5], [1.0, -0.6], 1000, 0.2, 0.3, 0.5
    student, teacher = networks_with_overlaps(Q, M, a, d, act, P, v, teacher_act)
    ov = tl.Overlaps.from_networks(student, teacher)
    ic = tl.sde.increment_covariance(ov, lr=lr, noise=noise, lr_readout=lr_a)
    dQ, dM, da = tl.ode.rhs(ov, lr=lr, noise=noise, lr_readout=lr_a)
    np.testing.assert_allclose(ic.mean, np.concatenate([dQ[np.triu_indices(2)], dM.ravel(), da]), rtol=1e-10,
                               atol=1e-14)
    ens = tl.sgd.simulate(student, teacher, lr=lr, lr_readout=lr_a, noise=noise, times=[0.0, 1.0 / d], seeds=n,
                          keep_weights=False)
    Qs, Ms, As = ens.stack("Q"), ens.stack("M"), ens.stack("a")
    xi = d * np.concatenate([(Qs[:, 1] - Qs[:, 0])[:, [0, 0, 1], [0, 1, 1]], (Ms[:, 1] - Ms[:, 0]).reshape(n, -1),
                             As[:, 1] - As[:, 0]], axis=1)
    assert_moments(xi, ic)


def test_hermite_target_increment_covariance_against_one_step_sgd():
    """A polynomial target (k = 2, degree 3): exact Gauss-Hermite for linear students, exact orthant moments for
    relu, Gauss-Hermite for tanh; all against one-step SGD on the target, and the mean against the target ODE."""
    d, lr, noise, n = 1000, 0.2, 0.5, 5000
    tgt = tl.targets.hermite({(1, 0): 0.6, (1, 1): 0.8, (0, 3): 0.3}, d=d, seed=0)
    rng = np.random.default_rng(3)
    W = rng.standard_normal((2, d))
    W = math.sqrt(d) * W / np.linalg.norm(W, axis=1, keepdims=True)
    for act in ("linear", "relu", "tanh"):
        student = tl.Network(W, [0.7, 0.5], act)
        ov = tl.Overlaps.from_networks(student, tgt)
        ic = tl.sde.increment_covariance(ov, lr=lr, noise=noise)
        dQ, dM, _ = tl.ode.rhs(ov, lr=lr, noise=noise)
        # exact rules for linear and relu; tanh: 48 Gauss-Hermite nodes, the SDE's run-time drift check (1e-4)
        np.testing.assert_allclose(ic.mean, np.concatenate([dQ[np.triu_indices(2)], dM.ravel()]),
                                   rtol=1e-4 if act == "tanh" else 1e-10, atol=1e-13)
        assert_moments(one_step_increments(student, tgt, lr, noise, n), ic)
    q9 = tl.sde.increment_covariance(ov, "linear", lr=lr, noise=noise, n_nodes=9)
    q7 = tl.sde.increment_covariance(ov, "linear", lr=lr, noise=noise)  # 7 nodes: exact for degree 3
    np.testing.assert_allclose(q7.cov, q9.cov, rtol=1e-11, atol=1e-13)
    with pytest.raises(ValueError, match="teacher_activation: not used with a polynomial target"):
        tl.sde.increment_covariance(ov, "linear", "relu", lr=lr)


def p1(m0):
    return tl.Overlaps([[1.0]], [[m0]], [[1.0]], [1.0], [1.0])


def test_paths_reproducible_across_threads_and_subsets():
    kw = {"lr": 0.05, "noise": 0.5, "d": 500, "spherical": True, "t_max": 5.0, "n_records": 11}
    a = tl.sde.simulate(p1(0.1), "quadratic", seeds=6, n_threads=1, **kw)
    b = tl.sde.simulate(p1(0.1), "quadratic", seeds=6, n_threads=2, **kw)
    c = tl.sde.simulate(p1(0.1), "quadratic", seeds=[4], **kw)
    np.testing.assert_array_equal(a.stack("M"), b.stack("M"))
    np.testing.assert_array_equal(a[4].M, c[0].M)
    assert np.all(a.stack("Q") == 1.0)  # spherical: Q_ii stays 1 exactly
    assert len(set(a.stack("M")[:, -1, 0, 0])) == 6


def test_sde_matches_sgd_overlap_statistics_small():
    """Mean and variance of m at fixed times, SDE vs spherical SGD (p = 1, d = 300, 200 runs each), 3 SEM."""
    d, lr, noise, m0, n = 300, 0.05, 0.5, 0.1, 200
    times = [0.0, 1.5, 3.0]
    teacher = tl.Network(math.sqrt(d) * np.eye(1, d), [1.0], "quadratic")
    student = tl.Network(math.sqrt(d) * np.array([[m0, math.sqrt(1 - m0 * m0)] + [0.0] * (d - 2)]), [1.0],
                         "quadratic")
    sgd = tl.sgd.simulate(student, teacher, lr=lr, noise=noise, spherical=True, times=times, seeds=n,
                          keep_weights=False).stack("M")[:, :, 0, 0]
    sde = tl.sde.simulate(p1(m0), "quadratic", lr=lr, noise=noise, d=d, spherical=True, times=times, seeds=n,
                          dt=0.01).stack("M")[:, :, 0, 0]
    for k in (1, 2):
        a, b = sgd[:, k], sde[:, k]
        se = math.sqrt(a.var(ddof=1) / n + b.var(ddof=1) / n)
        assert abs(a.mean() - b.mean()) < 3 * se
        va, vb = a.var(ddof=1), b.var(ddof=1)
        assert abs(va - vb) < 3 * math.sqrt(2 / (n - 1)) * math.hypot(va, vb)


def test_relu_and_target_paths_follow_the_ode_at_large_d():
    """SDE paths of a relu committee and of a Hermite target: reproducible, and their mean tends to the ODE."""
    ov = tl.Overlaps([[1.0, 0.1], [0.1, 1.0]], [[0.3], [0.1]], [[1.0]], [0.7, 0.5], [1.0])
    kw = {"lr": 0.5, "noise": 0.1, "t_max": 1.0, "n_records": 3, "seeds": 8, "dt": 0.05}
    a = tl.sde.simulate(ov, "relu", d=10**6, n_threads=1, **kw)
    b = tl.sde.simulate(ov, "relu", d=10**6, n_threads=2, **kw)
    np.testing.assert_array_equal(a.stack("M"), b.stack("M"))
    assert a.meta["diffusion"] == "exact" and a.runs[0].status == "completed"
    ode = tl.ode.integrate(ov, "relu", lr=0.5, noise=0.1, t_max=1.0, method="euler", dt=0.05, n_records=3)
    np.testing.assert_allclose(a.mean().M, ode.M, atol=3e-3)  # Euler steps alike; noise ~ 1/sqrt(d)
    tgt = tl.targets.hermite({(1,): 1.0, (2,): 0.5}, d=50, seed=0)
    ovt = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [0.5], [0.0])
    c = tl.sde.simulate(ovt, "relu", d=10**6, target=tgt, **kw)
    odet = tl.ode.integrate(ovt, "relu", lr=0.5, noise=0.1, t_max=1.0, method="euler", dt=0.05, n_records=3,
                            target=tgt)
    np.testing.assert_allclose(c.mean().M, odet.M, atol=3e-3)
    np.testing.assert_allclose(c.mean().risk, odet.risk, rtol=1e-2)


def test_d_var_m_independent_of_d_at_early_times():
    """At early times the fluctuation of m is O(1/sqrt d): d Var(m) agrees at d = 1000 and 4000."""
    out = []
    n = 1500
    for d in (1000, 4000):
        e = tl.sde.simulate(p1(0.2), "quadratic", lr=0.05, noise=0.5, d=d, spherical=True, times=[0.0, 1.0],
                            seeds=n, dt=0.02)
        m = e.stack("M")[:, 1, 0, 0]
        out.append((d * m.var(ddof=1), d * m.var(ddof=1) * math.sqrt(2 / (n - 1))))
    (v1, s1), (v2, s2) = out
    assert abs(v1 - v2) < 3 * math.hypot(s1, s2)


def test_escape_time_ensemble_and_bad_input():
    d = 1000
    e = tl.sde.simulate(p1(1 / math.sqrt(d)), "quadratic", lr=0.05, noise=0.5, d=d, spherical=True, t_max=200.0,
                        seeds=50, risk_rtol=0.5)
    fp = e.first_passage(0.5)
    assert fp.n_censored == 0 and np.all(np.isfinite(fp.times))
    np.testing.assert_allclose(fp.times, e.stop_time)
    assert all(r.risk[-1] <= 0.5 * r.risk[0] for r in e)
    with pytest.raises(ValueError, match="d"):
        tl.sde.simulate(p1(0.1), "quadratic", lr=0.05, d=0, t_max=1.0)
    with pytest.raises(ValueError, match="t_max"):
        tl.sde.simulate(p1(0.1), "quadratic", lr=0.05, d=10)
    with pytest.raises(ValueError, match="spherical=True needs diag"):
        tl.sde.simulate(tl.Overlaps([[2.0]], [[0.1]], [[1.0]], [1.0], [1.0]), "quadratic", lr=0.05, d=10,
                        spherical=True, t_max=1.0)
    with pytest.raises(ValueError, match="overlaps: got 2 starts for 3 paths"):
        tl.sde.simulate([p1(0.1), p1(0.2)], "quadratic", lr=0.05, d=10, t_max=1.0, seeds=3)


@pytest.mark.slow
@pytest.mark.parametrize("d,n", [(1000, 300), (4000, 120)])
def test_sde_matches_sgd_escape_time(d, n):
    """Mean escape time (T = 0.5) of spherical SGD and of the SDE from the same random starts, within 3 SEM."""
    lr, noise = 0.05, 0.5
    rng = np.random.default_rng(d)
    teacher = tl.Network(math.sqrt(d) * np.eye(1, d), [1.0], "quadratic")
    students, starts = [], []
    for _ in range(n):
        w = rng.standard_normal(d)
        w *= math.sqrt(d) / np.linalg.norm(w)
        students.append(tl.Network(w[None], [1.0], "quadratic"))
        starts.append(p1(w[0] / math.sqrt(d)))
    sgd = tl.sgd.simulate(students, teacher, lr=lr, noise=noise, spherical=True, t_max=150.0, n_records=3001,
                          seeds=n, risk_rtol=0.5, keep_weights=False).first_passage(0.5)
    sde = tl.sde.simulate(starts, "quadratic", lr=lr, noise=noise, d=d, spherical=True, t_max=150.0, seeds=n,
                          risk_rtol=0.5, dt=0.005).first_passage(0.5)
    assert sgd.n_censored == 0 and sde.n_censored == 0
    assert abs(sgd.mean() - sde.mean()) < 3 * math.hypot(sgd.sem(), sde.sem())


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_ctrl_c_keeps_the_paths_so_far():
    kw = {"lr": 0.05, "noise": 0.5, "d": 1000, "spherical": True, "n_records": 50, "n_threads": 2}
    tl.sde.simulate(p1(0.1), "quadratic", t_max=0.1, seeds=4, **kw)  # warm: everything imported
    sent = []
    timer = threading.Timer(1.0, lambda: (sent.append(time.perf_counter()), os.kill(os.getpid(), signal.SIGINT)))
    timer.start()
    try:
        with pytest.raises(tl.Interrupted) as info:
            tl.sde.simulate(p1(0.1), "quadratic", t_max=1e7, seeds=4, **kw)
        assert time.perf_counter() - sent[0] < 0.5
    finally:
        timer.cancel()
        timer.join()
    ens = info.value.partial
    assert isinstance(ens, tl.sgd.Ensemble) and len(ens) == 4
    assert all(r.status == "interrupted" and np.all(np.isfinite(r.M)) for r in ens)
    assert any(r.stop_time > 0 and len(r) >= 1 for r in ens)  # the paths that started keep their records


@pytest.mark.parametrize("kw", [{"lr": 1e300}, {"lr": 1e100}, {"lr": 0.5, "noise": 1e300},
                                {"lr": 0.5, "lr_readout": 1e300}])
def test_increment_covariance_refuses_overflow(kw):
    """It returned NaN/inf silently for lr, noise or lr_readout near 1e300."""
    ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    with pytest.raises(ValueError, match="lr, noise, lr_readout: the increment's moments exceed the double range"):
        tl.sde.increment_covariance(ov, **kw)


def test_simulate_refuses_duplicate_paths():
    """seeds=[1, 1] with one start ran the same path twice (sgd.simulate refuses duplicates); an id may repeat with
    different starts."""
    ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    with pytest.raises(ValueError, match="seeds: path ids must be distinct"):
        tl.sde.simulate(ov, lr=0.5, d=100, t_max=1.0, n_records=3, seeds=[1, 1])
    with pytest.raises(ValueError, match="seeds: path ids must be distinct"):
        tl.sde.simulate([ov, ov], lr=0.5, d=100, t_max=1.0, n_records=3, seeds=[1, 1])
    other = tl.Overlaps([[1.0]], [[0.3]], [[1.0]], [1.0], [1.0], "linear", "linear")
    ens = tl.sde.simulate([ov, other], lr=0.5, d=100, t_max=1.0, n_records=3, seeds=[1, 1])
    assert len(ens.runs) == 2


def test_simulate_names_step_counts_and_allocations():
    """dt = 1e-300 failed with a RuntimeWarning and 'record_steps: must increase strictly' (naming no argument)."""
    import warnings

    ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=r"t_max, dt: the run needs 1e\+300 steps of dt, more than 2\*\*62"):
            tl.sde.simulate(ov, lr=0.5, d=10, dt=1e-300, t_max=1.0)
        with pytest.raises(ValueError, match="t_max, dt: the run needs"):
            tl.sde.simulate(ov, lr=0.5, d=10, dt=1e-3, t_max=1e300)
        with pytest.raises(ValueError, match="times, dt: the run needs"):
            tl.sde.simulate(ov, lr=0.5, d=10, dt=1e-300, times=[0.0, 1.0])
