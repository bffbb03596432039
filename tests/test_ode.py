"""Order-parameter ODE engine (tl.ode): RHS, integrators, exact solutions, weight-space ground truth.

Tolerances: the RHS is compared with a naive sum of public kernels (round-off: 1e-12 relative); integrations
with a closed form use the adaptive method at rtol 1e-10 (global error measured < 1e-8 here); the gradient-
flow check uses Richardson extrapolation of weight-space GD in its step h (error O(h^2), measured ~1e-7 at h =
1e-3).
"""

from __future__ import annotations

import math
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import twolayer as tl
from twolayer.networks import teacher_student

sys.path.insert(0, str(Path(__file__).parent))
from ode_reference import naive_rhs  # noqa: E402


def random_overlaps(K, M, seed=0, d=None, a=None, v=None):
    rng = np.random.default_rng(seed)
    d = d or (K + M + 5)
    X = rng.standard_normal((K + M, d)) / np.sqrt(d)
    Om = X @ X.T
    a = rng.standard_normal(K) if a is None else a
    v = rng.standard_normal(M) if v is None else v
    return tl.Overlaps(Om[:K, :K], Om[:K, K:], Om[K:, K:], a, v)


# --------------------------------------------------------------------------------------------- right-hand sid

PAIRS = [
    ("erf", "erf"),
    ("linear", "linear"),
    ("quadratic", "quadratic"),
    ("erf", "relu"),
    ("relu", "relu"),
    ("relu", "erf"),
    ("erf", "step"),
    ("quadratic", "erf"),
    ("linear", "erf"),
]


@pytest.mark.parametrize("act,t_act", PAIRS)
@pytest.mark.parametrize("regime", ["gradient_flow", "online"])
def test_rhs_matches_naive_kernel_sums(act, t_act, regime):
    ov = random_overlaps(3, 2, seed=zlib.crc32(f"{act}{t_act}".encode()) % 1000)
    kw = dict(lr=0.7, lr_readout=0.3, noise=0.2 if regime == "online" else 0.0, regime=regime)
    try:
        got = tl.ode.rhs(ov, act, t_act, **kw)
        ref = naive_rhs(ov, act, t_act, 0.7, 0.3, kw["noise"], regime)
    except NotImplementedError:  # the relu I4 exists for (relu; relu, relu) (and linear teachers) only
        assert act == "relu" and regime == "online" and t_act not in ("relu", "linear")
        pytest.skip(f"no I4 kernel for (relu; {t_act}, {t_act})")
    scale = max(np.max(np.abs(r)) for r in ref)
    for g, r in zip(got, ref, strict=False):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("K", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("M", [1, 2, 4, 5])
@pytest.mark.parametrize("act", ["erf", "quadratic"])
def test_rhs_every_compiled_size(K, M, act):
    """Systems with K, M <= 4 run a right-hand side compiled for their sizes, larger ones the run-time one; the erf
    I4 contraction handles its pairs in SIMD groups of 4 (K (K + 1) / 2 pairs: 1, 3, 6, 10, 15, a partial last
    group in each). Every variant against the naive kernel sums."""
    ov = random_overlaps(K, M, seed=10 * K + M)
    got = tl.ode.rhs(ov, act, lr=0.6, lr_readout=0.2, noise=0.1)
    ref = naive_rhs(ov, act, act, 0.6, 0.2, 0.1, "online")
    scale = max(np.max(np.abs(r)) for r in ref)
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-12 * scale)


@pytest.mark.parametrize("case", ["aligned", "anti-aligned", "large variances", "tiny variances"])
def test_erf_fast_paths_across_the_arcsine_range(case):
    """The vectorised erf tables (branch-free arcsine on both of its branches, |x| <= 0.625 and above) against
    the scalar kernels, where the arcsine arguments approach +-1 or 0."""
    rng = np.random.default_rng(3)
    W = rng.standard_normal((2, 40)) / np.sqrt(40)
    if case == "aligned":
        X = np.vstack([W + 1e-3 * rng.standard_normal(W.shape), W])
    elif case == "anti-aligned":
        X = np.vstack([-W + 1e-3 * rng.standard_normal(W.shape), W])
    elif case == "large variances":
        X = 30.0 * np.vstack([W + 0.3 * rng.standard_normal(W.shape), W])
    else:
        X = 1e-4 * rng.standard_normal((4, 40))
    Om = X @ X.T
    ov = tl.Overlaps(Om[:2, :2], Om[:2, 2:], Om[2:, 2:], [0.7, 1.3], [1.0, -0.5])
    got = tl.ode.rhs(ov, "erf", lr=0.9, lr_readout=0.4, noise=0.05)
    ref = naive_rhs(ov, "erf", "erf", 0.9, 0.4, 0.05, "online")
    scale = max(np.max(np.abs(r)) for r in ref)
    # Variances ~5e3: conditioning erf's I4 on (l_i, l_k) leaves variances O(1) by cancelling terms O(5e3), so
    # either algebra carries a relative round-off ~5e3 * eps ~ 1e-12 there (measured difference 9e-12).
    tol = 1e-10 if case == "large variances" else 1e-13
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_allclose(g, r, rtol=0, atol=tol * scale)


def test_rhs_spherical_and_symmetry():
    ov = random_overlaps(3, 2, seed=5)
    Q = ov.Q / np.sqrt(np.outer(np.diag(ov.Q), np.diag(ov.Q)))
    Mo = ov.M / np.sqrt(np.diag(ov.Q))[:, None]
    sph = tl.Overlaps(Q, Mo, ov.P, ov.a, ov.v)
    got = tl.ode.rhs(sph, "erf", lr=0.5, noise=0.1, spherical=True)
    ref = naive_rhs(sph, "erf", "erf", 0.5, 0.0, 0.1, "online", spherical=True)
    for g, r in zip(got, ref, strict=False):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-13)
    assert np.all(np.diag(got[0]) == 0.0)
    np.testing.assert_array_equal(got[0], got[0].T)


@pytest.mark.parametrize("K, M, act", [(12, 10, "erf"), (12, 10, "relu"), (12, 10, "quadratic"), (9, 3, "tanh")])
def test_rhs_threads_agree_for_large_K(K: int, M: int, act: str) -> None:
    """Bitwise the same right-hand side on one and two threads (tl.ode.rhs documents it): each thread's share is
    summed in a fixed order."""
    ov = random_overlaps(K, M, seed=2)
    one = tl.ode.rhs(ov, act, lr=0.3, noise=0.1, n_threads=1)
    two = tl.ode.rhs(ov, act, lr=0.3, noise=0.1, n_threads=2)
    for g, r in zip(one, two, strict=True):
        assert np.array_equal(g, r)


def test_readout_mean_scales_the_readout_rate():
    ov = random_overlaps(4, 2, seed=3)
    s = tl.ode.rhs(ov, "erf", lr=0.5, lr_readout=0.4, readout="sum")
    m = tl.ode.rhs(ov, "erf", lr=0.5, lr_readout=0.4 * 16, readout="mean")  # c^2 = 1/16
    for g, r in zip(s, m, strict=False):
        np.testing.assert_allclose(g, r, rtol=1e-14, atol=1e-16)


# ------------------------------------------------------------------------------- gradient flow vs weight spac


@pytest.mark.parametrize(
    "act,t_act,lr_a",
    [
        ("erf", "erf", 0.0),
        ("erf", "erf", 0.7),
        ("relu", "relu", 0.0),
        ("step", "step", 0.0),
        ("erf", "relu", 0.5),
        ("quadratic", "linear", 0.0),
    ],
)
def test_gradient_flow_matches_population_descent(act, t_act, lr_a):
    """Population GD with step eps in weight space (lambda = w.x/sqrt d) is Euler for dW/dt = -d grad R with
    dt = eps / d, i.e. the lr = 1 overlap flow; the readout step eps_a = lr_a * eps / d. Exact at any d >= K
    + M."""
    d, t, K, M = 8, 2.0, 2, 2
    student, teacher = teacher_student(K, M, d, act, t_act, seed=3)
    student = student.with_weights(0.7 * student.W)
    ov = tl.Overlaps.from_networks(student, teacher)
    finals = []
    for h in (2e-3, 1e-3):
        eps = d * h
        tr = tl.population.descend(
            student, teacher, lr=eps, n_steps=int(round(t / h)), lr_readout=lr_a * eps / d, n_records=3
        )
        assert tr.status == "completed"
        finals.append(np.concatenate([tr.Q[-1].ravel(), tr.M[-1].ravel(), tr.a[-1]]))
    extrapolated = 2 * finals[1] - finals[0]  # Euler's O(h) error removed
    ode = tl.ode.integrate(
        ov,
        act,
        t_act,
        lr=1.0,
        lr_readout=lr_a,
        regime="gradient_flow",
        times=[0.0, t],
        rtol=1e-11,
        atol=1e-13,
    )
    assert ode.status == "completed"
    y = np.concatenate([ode.Q[-1].ravel(), ode.M[-1].ravel(), ode.a[-1]])
    moved = np.max(np.abs(y - np.concatenate([ov.Q.ravel(), ov.M.ravel(), ov.a])))
    assert moved > 0.1  # the comparison is not trivial
    np.testing.assert_allclose(extrapolated, y, rtol=0, atol=1e-6)
    np.testing.assert_allclose(ode.risk[0], tl.population.risk(student, teacher), rtol=1e-13)


# ------------------------------------------------------------------------------------------ exact solutions


@pytest.mark.parametrize("lr,noise", [(0.5, 0.0), (0.8, 0.3), (1.5, 0.1)])
def test_online_linear_closed_form(lr, noise):
    """K = M = 1 linear, a = v = P = 1: dM/dt = lr (1 - M) and dR/dt = -lr (2 - lr) R + lr^2 Delta / 2."""
    m0, q0 = 0.1, 0.5
    ov = tl.Overlaps([[q0]], [[m0]], [[1.0]], [1.0], [1.0])
    ts = np.linspace(0, 10, 41)
    tr = tl.ode.integrate(ov, "linear", lr=lr, noise=noise, times=ts, rtol=1e-11, atol=1e-13)
    R0 = 0.5 * (q0 - 2 * m0 + 1)
    Rinf = lr * noise / (2 * (2 - lr))
    R = Rinf + (R0 - Rinf) * np.exp(-lr * (2 - lr) * ts)
    Mt = 1 - (1 - m0) * np.exp(-lr * ts)
    np.testing.assert_allclose(tr.risk, R, rtol=0, atol=1e-9)
    np.testing.assert_allclose(tr.M[:, 0, 0], Mt, rtol=0, atol=1e-9)
    np.testing.assert_allclose(tr.Q[:, 0, 0], 2 * R + 2 * Mt - 1, rtol=0, atol=1e-9)


@pytest.mark.parametrize("gamma,noise", [(0.05, 0.5), (0.1, 0.0), (0.02, 2.0)])
def test_online_quadratic_spherical_seed003(gamma, noise):
    """Arnaboldi et al., p = 1: y = (w*.x)^2 + sqrt(Delta) z, f = (w.x)^2, projected SGD with step gamma.
    In seed time tau = gamma t (our t = steps / d, lr = gamma):
    dm/dtau = m [4 (1 - 6 gamma)(1 - m^2) - 2 gamma Delta], excess risk 2 (1 - m^2) -> gamma Delta / (1 - 6
    gamma).
    With u = m^2, A = 4 (1 - 6 gamma) - 2 gamma Delta, B = 4 (1 - 6 gamma): u = A u0 e^{2 A tau} / (A + B u0
    (e^{2A tau} - 1))."""
    m0 = 0.05
    ov = tl.Overlaps([[1.0]], [[m0]], [[1.0]], [1.0], [1.0])
    taus = np.linspace(0, 6, 61)
    tr = tl.ode.integrate(
        ov, "quadratic", lr=gamma, noise=noise, spherical=True, times=taus / gamma, rtol=1e-11, atol=1e-13
    )
    assert tr.status == "completed"
    A, B = 4 * (1 - 6 * gamma) - 2 * gamma * noise, 4 * (1 - 6 * gamma)
    u0 = m0**2
    e = np.exp(2 * A * taus)
    u = A * u0 * e / (A + B * u0 * (e - 1))
    np.testing.assert_allclose(tr.M[:, 0, 0], np.sqrt(u), rtol=0, atol=1e-8)
    np.testing.assert_array_equal(tr.Q[:, 0, 0], 1.0)  # the constraint is kept exactly
    np.testing.assert_allclose(tr.risk, 2 * (1 - u), rtol=0, atol=1e-8)
    long = tl.ode.integrate(
        ov, "quadratic", lr=gamma, noise=noise, spherical=True, t_max=60 / gamma, rtol=1e-11, atol=1e-13
    )
    np.testing.assert_allclose(long.risk[-1], gamma * noise / (1 - 6 * gamma), rtol=1e-7, atol=1e-10)


# ---------------------------------------------------------------------------------------- plateau, integrator


@pytest.fixture(scope="module")
def plateau():
    ov = tl.ode.plateau_overlaps()
    ts = np.linspace(0, 1000, 501)
    ref = tl.ode.integrate(ov, "erf", lr=1.0, times=ts, rtol=1e-12, atol=1e-14)
    return ov, ts, ref


def test_erf_plateau_and_escape(plateau):
    _, ts, ref = plateau
    assert ref.status == "completed"
    on_plateau = ref.risk[(ts >= 20) & (ts <= 80)]
    # Saad-Solla symmetric plateau of the K = M = 2 erf committee: nearly flat at ~0.021 ...
    assert 0.019 < on_plateau.min() and on_plateau.max() < 0.022
    assert (on_plateau.max() - on_plateau.min()) / on_plateau.mean() < 0.02
    M_plateau = ref.M[np.searchsorted(ts, 50)]
    assert np.ptp(M_plateau) < 0.05 * np.abs(M_plateau).mean()  # students not yet specialised
    # ... then escape: the risk drops by orders of magnitude and each student aligns with one teacher unit.
    assert ref.risk[-1] < 1e-9
    Mf = np.sort(np.abs(ref.M[-1]), axis=1)
    np.testing.assert_allclose(Mf[:, 1], 1.0, atol=1e-4)
    np.testing.assert_allclose(Mf[:, 0], 0.0, atol=1e-4)


def test_integrators_agree_on_plateau_trajectory(plateau):
    """Euler (dt = 0.01, first order: error ~ dt, measured 7.7e-4 on the risk), RK4 (dt = 0.02) and the
    adaptive
    DP5(4) (rtol 1e-8) against a converged reference (rtol 1e-12), on the whole trajectory."""
    ov, ts, ref = plateau
    eu = tl.ode.integrate(ov, "erf", lr=1.0, times=ts, method="euler", dt=0.01)
    rk = tl.ode.integrate(ov, "erf", lr=1.0, times=ts, method="rk4", dt=0.02)
    ad = tl.ode.integrate(ov, "erf", lr=1.0, times=ts, method="adaptive", rtol=1e-8, atol=1e-10)
    assert eu.meta["n_rhs"] == 100_000 and rk.meta["n_rhs"] == 4 * 50_000
    np.testing.assert_allclose(eu.risk, ref.risk, rtol=0, atol=2e-3)
    np.testing.assert_allclose(rk.risk, ref.risk, rtol=0, atol=1e-9)
    np.testing.assert_allclose(ad.risk, ref.risk, rtol=0, atol=1e-8)
    np.testing.assert_allclose(ad.M, ref.M, rtol=0, atol=1e-6)
    assert ad.meta["n_rhs"] < eu.meta["n_rhs"] / 20


def test_euler_dt_grid_matches_hand_loop():
    ov = random_overlaps(2, 2, seed=7, a=np.ones(2), v=np.ones(2))
    tr = tl.ode.integrate(ov, "erf", lr=0.8, noise=0.1, times=[0.0, 0.05], method="euler", dt=0.01)
    Q, Mo = ov.Q.copy(), ov.M.copy()
    for _ in range(5):
        dQ, dM, _ = tl.ode.rhs(tl.Overlaps(Q, Mo, ov.P, ov.a, ov.v), "erf", lr=0.8, noise=0.1)
        Q, Mo = Q + 0.01 * dQ, Mo + 0.01 * dM
    np.testing.assert_allclose(tr.Q[-1], Q, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(tr.M[-1], Mo, rtol=1e-14, atol=1e-15)


def test_default_times_and_trajectory_shapes():
    ov = random_overlaps(3, 2, seed=1)
    tr = tl.ode.integrate(ov, "erf", lr=0.5, lr_readout=0.2, t_max=5.0, n_records=30)
    assert tr.t[0] == 0.0 and tr.t[-1] == 5.0 and len(tr) == 30 and np.all(np.diff(tr.t) > 0)
    assert (
        tr.Q.shape == (30, 3, 3)
        and tr.M.shape == (30, 3, 2)
        and tr.a.shape == (30, 3)
        and tr.risk.shape == (30,)
    )
    assert tr.time_unit == "t = steps / d" and tr.meta["regime"] == "online"
    assert not np.allclose(tr.a[-1], tr.a[0])  # the readout is trained
    eu = tl.ode.integrate(ov, "erf", lr=0.5, t_max=1.0, method="euler", dt=0.1)
    np.testing.assert_allclose(eu.t / 0.1, np.round(eu.t / 0.1), atol=1e-9)  # snapped to the dt grid


def test_early_stop_on_risk_tol():
    ov = tl.ode.plateau_overlaps()
    tr = tl.ode.integrate(ov, "erf", lr=1.0, t_max=2000.0, risk_tol=1e-4)
    assert tr.status == "converged" and tr.risk[-1] < 1e-4 and tr.t[-1] < 2000
    assert tr.meta["stop_time"] == tr.t[-1]


# ------------------------------------------------------------------------------------------------ divergence


@pytest.mark.parametrize("method", ["euler", "rk4", "adaptive"])
def test_divergence_stops_with_status(method):
    """Linear online SGD with lr > 2: the excess risk grows like exp(lr (lr - 2) t) until the state passes the
    divergence bound (1e8 x the scale of the start and teacher, here 1; docs: conventions, "Divergence")."""
    ov = tl.Overlaps([[0.5]], [[0.1]], [[1.0]], [1.0], [1.0])
    tr = tl.ode.integrate(ov, "linear", lr=3.0, t_max=500.0, method=method, dt=0.01)
    assert tr.status == "diverged"
    assert "diverged at t =" in tr.message
    assert 0 < tr.meta["stop_time"] < 500
    assert np.all(np.isfinite(tr.risk)) and np.all(np.isfinite(tr.Q)) and np.all(tr.t <= tr.meta["stop_time"])
    # growth rate 3 up to the bound |Q| = 1e8: t ~ log(1e8) / 3 ~ 6.1
    assert 5.5 < tr.meta["stop_time"] < 7.0 and "grew past 1e8" in tr.message


def test_loss_of_psd_is_divergence():
    """Euler with a huge step throws Omega out of the PSD cone: reported, not integrated on."""
    ov = random_overlaps(2, 2, seed=0, a=np.ones(2), v=np.ones(2), d=4)  # d = K + M: Omega nearly singular
    tr = tl.ode.integrate(
        ov, "erf", lr=1.0, times=[0.0, 100.0], method="euler", dt=1.0, regime="gradient_flow"
    )
    assert tr.status == "diverged" and "positive semi-definite" in tr.message
    assert tr.meta["stop_time"] == 1.0
    np.testing.assert_array_equal(tr.t, [0.0])  # outputs before the failure only
    assert np.all(np.isfinite(tr.Q))


# --------------------------------------------------------------------------------------------------- batches


def test_batch_matches_single_runs_and_isolates_divergence():
    members = [random_overlaps(2, 2, seed=s, a=np.ones(2), v=np.ones(2)) for s in range(4)]
    members.append(random_overlaps(3, 1, seed=9))  # a different K and M
    members.append(
        tl.Overlaps([[0.5]], [[0.1]], [[1.0]], [1.0], [1.0])
    )  # linear lr=3 would diverge; erf here
    lrs = np.array([0.5, 1.0, 1.5, 0.2, 0.7, 40.0])
    noises = np.array([0.0, 0.1, 0.0, 0.3, 0.0, 0.0])
    ts = np.linspace(0, 20, 11)
    batch = tl.ode.integrate_batch(members, "erf", lr=lrs, noise=noises, times=ts, n_threads=2)
    for ov, lr, nz, b in zip(members, lrs, noises, batch, strict=False):
        single = tl.ode.integrate(ov, "erf", lr=lr, noise=nz, times=ts)
        assert b.status == single.status
        np.testing.assert_array_equal(b.risk, single.risk)  # same code path, bit-identical
        np.testing.assert_array_equal(b.Q, single.Q)
    serial = tl.ode.integrate_batch(members, "erf", lr=lrs, noise=noises, times=ts, n_threads=1)
    for b, s in zip(batch, serial, strict=False):
        np.testing.assert_array_equal(b.risk, s.risk)


def test_batch_one_diverging_member_does_not_spoil_others():
    ovs = [tl.Overlaps([[0.5]], [[0.1]], [[1.0]], [1.0], [1.0]) for _ in range(5)]
    lrs = [0.5, 3.0, 1.0, 3.5, 1.2]
    out = tl.ode.integrate_batch(ovs, "linear", lr=lrs, t_max=200.0, method="rk4", dt=0.01, n_threads=2)
    assert [o.status for o in out] == ["completed", "diverged", "completed", "diverged", "completed"]
    for o, _lr in zip(out, lrs, strict=False):
        assert np.all(np.isfinite(o.risk))
        if o.status == "completed":
            assert o.t[-1] == 200.0 and o.risk[-1] < 1e-30 + 1e-12


# --------------------------------------------------------------------------------------------------- relu onl


def test_relu_online_rhs_and_integrators():
    ov = random_overlaps(2, 2, seed=11, a=np.ones(2), v=np.ones(2))
    got = tl.ode.rhs(ov, "relu", lr=0.5, noise=0.1)
    ref = naive_rhs(ov, "relu", "relu", 0.5, 0.0, 0.1, "online")
    for g, r in zip(got, ref, strict=False):
        np.testing.assert_allclose(g, r, rtol=0, atol=1e-10)
    # Short runs: each relu I4 is a one-dimensional quadrature (slower than the closed forms).
    ts = np.linspace(0, 2, 5)
    ad = tl.ode.integrate(ov, "relu", lr=0.5, noise=0.1, times=ts, rtol=1e-8, atol=1e-10)
    rk = tl.ode.integrate(ov, "relu", lr=0.5, noise=0.1, times=ts, method="rk4", dt=0.02)
    assert ad.status == rk.status == "completed"
    np.testing.assert_allclose(ad.risk, rk.risk, rtol=0, atol=1e-6)


def test_online_relu_student_with_erf_teacher_integrates():
    """A relu student with an erf teacher needs I4(relu; relu, erf) (orthant moments, tests/test_kernels_mixed.py)."""
    ov = random_overlaps(2, 2, seed=11)
    assert tl.ode.integrate(ov, "relu", teacher_activation="erf", lr=0.5, t_max=1.0).status == "completed"


# ------------------------------------------------------------------------------------------------- bad input


def test_bad_input():
    ov = random_overlaps(2, 2, seed=0)
    with pytest.raises(ValueError, match="regime"):
        tl.ode.integrate(ov, "erf", lr=1.0, t_max=1.0, regime="offline")
    with pytest.raises(ValueError, match="noise"):
        tl.ode.integrate(ov, "erf", lr=1.0, t_max=1.0, noise=-0.1)
    with pytest.raises(ValueError, match="method"):
        tl.ode.integrate(ov, "erf", lr=1.0, t_max=1.0, method="leapfrog")
    with pytest.raises(ValueError, match="activation"):
        tl.ode.integrate(ov, "swish", lr=1.0, t_max=1.0)
    with pytest.raises(ValueError, match="regime"):
        tl.ode.integrate(ov, "step", lr=1.0, t_max=1.0, regime="online")
    with pytest.raises(ValueError, match="spherical"):
        tl.ode.integrate(ov, "erf", lr=1.0, t_max=1.0, spherical=True)
    with pytest.raises(ValueError, match="times"):
        tl.ode.integrate(ov, "erf", lr=1.0, times=[0.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="t_max"):
        tl.ode.integrate(ov, "erf", lr=1.0)
    with pytest.raises(ValueError, match="lr"):
        tl.ode.integrate(ov, "erf", lr=-1.0, t_max=1.0)
    with pytest.raises(ValueError, match="dt"):
        tl.ode.integrate(ov, "erf", lr=1.0, t_max=1.0, method="euler", dt=0.0)
    with pytest.raises(TypeError, match="overlaps"):
        tl.ode.integrate({"Q": ov.Q}, "erf", lr=1.0, t_max=1.0)
    # Shapes that do not match K and M, and non-PSD overlaps, are refused when the Overlaps are built ...
    with pytest.raises(ValueError, match="M"):
        tl.Overlaps(np.eye(2), np.zeros((3, 2)), np.eye(2), np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="semi-definite"):
        tl.Overlaps(np.eye(2), 2 * np.ones((2, 2)), np.eye(2), np.ones(2), np.ones(2))
    # ... and again by the ODE if they were edited in place afterwards.
    bad = random_overlaps(2, 2, seed=0)
    bad.M[:] = 5.0
    with pytest.raises(ValueError, match="semi-definite"):
        tl.ode.integrate(bad, "erf", lr=1.0, t_max=1.0)
    with pytest.raises(ValueError, match=r"overlaps\[1\].*semi-definite"):
        tl.ode.integrate_batch([ov, bad, ov], "erf", lr=1.0, t_max=1.0)
    with pytest.raises(ValueError, match="lr"):
        tl.ode.integrate_batch([ov, ov], "erf", lr=[1.0, 2.0, 3.0], t_max=1.0)
    with pytest.raises(ValueError, match="noise"):
        tl.ode.integrate_batch([ov, ov], "erf", lr=1.0, noise=[0.0, -1.0], t_max=1.0)


def test_plateau_example_for_the_demo():
    tr = tl.ode.plateau_example(t_max=400.0)
    assert tr.status == "completed" and len(tr) == 400
    assert tr.risk[-1] < 1e-6 < 0.02 < tr.risk[np.searchsorted(tr.t, 50.0)]
    assert math.isfinite(tr.final_risk)
