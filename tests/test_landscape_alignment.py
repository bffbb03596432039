"""tl.landscape seeds 000 (step units, Procrustes) and 004 (alignment determinants, d = 2 alignment)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import twolayer as tl
from twolayer.landscape.alignment import alignment_determinants_direct

L = tl.landscape


# ------------------------------------------------------------------------------------- the alignment paper
def test_alignment_determinants_small_cases_by_hand():
    f = tl.landscape.alignment.ad_function
    # m = 1: M = [f(0)] = [pi], M_1 = [f(theta_10)]
    det_M, min_Mi = L.alignment_determinants([[2.0]])
    assert det_M[0] == pytest.approx(np.pi)
    assert min_Mi[0] == pytest.approx(f(2.0))
    # m = 2 at theta = (1, 5): angular distance 5 -> 2 pi - 5, between students |5 - 1| = 4 -> 2 pi - 4
    th = np.array([1.0, 5.0])
    M = np.array([[np.pi, f(2 * np.pi - 4)], [f(2 * np.pi - 4), np.pi]])
    f0 = np.array([f(1.0), f(2 * np.pi - 5)])
    dets = [np.linalg.det(np.column_stack([f0, M[:, 1]])), np.linalg.det(np.column_stack([M[:, 0], f0]))]
    d1, d2 = L.alignment_determinants(th)
    assert d1 == pytest.approx(np.linalg.det(M), rel=1e-12)
    assert d2 == pytest.approx(min(dets), rel=1e-12)


@pytest.mark.parametrize("m", [3, 6, 9])
def test_alignment_determinants_vectorised_matches_direct_and_conjecture_holds(m):
    rng = np.random.default_rng(m)
    angles = np.sort(rng.uniform(0, 2 * np.pi, (3000, m)), axis=1)
    det_M, min_Mi = L.alignment_determinants(angles)
    ref_M, ref_Mi = alignment_determinants_direct(angles)
    assert det_M.shape == min_Mi.shape == (3000,)
    np.testing.assert_allclose(det_M, ref_M, rtol=1e-9, atol=0)
    # Cramer's rule vs explicit determinants: both lose accuracy like cond(M) eps, and M is ill conditioned
    # for close angles; compare relative to the scale of the determinants of the set
    scale = np.abs(ref_Mi) + np.abs(ref_M) * np.pi
    assert np.all(np.abs(min_Mi - ref_Mi) <= 1e-6 * scale)
    # the alignment paper, Theorem 5.1 / Conjecture 5.5: det M > 0 and min_i det M_i <= 0 for every sampled set
    assert np.all(det_M > 0)
    assert np.all(min_Mi <= 1e-12 * scale)


def test_alignment_determinants_batch_shape_and_bad_input():
    angles = np.sort(np.random.default_rng(0).uniform(0.1, 6.0, (4, 5, 3)), axis=-1)
    d1, d2 = L.alignment_determinants(angles)
    assert d1.shape == d2.shape == (4, 5)
    with pytest.raises(ValueError, match="sorted"):
        L.alignment_determinants([2.0, 1.0, 3.0])
    with pytest.raises(ValueError, match="sorted"):
        L.alignment_determinants([1.0, 1.0, 3.0])
    with pytest.raises(ValueError, match="angles"):
        L.alignment_determinants([0.0, 1.0])
    with pytest.raises(ValueError, match="angles"):
        L.alignment_determinants([1.0, 2 * np.pi])
    with pytest.raises(ValueError, match="angles"):
        L.alignment_determinants([1.0, np.nan])


def test_alignment_flow_d2_students_align_with_teacher():
    teacher = tl.Network(np.array([[1.0, 0.0]]), None, "relu", scaling="none")
    student = tl.Network(0.5 * np.random.default_rng(0).standard_normal((3, 2)), None, "relu", scaling="none")
    path = L.alignment_flow(student, teacher, times=[0, 10, 1000], lr=0.05)
    assert path.status == "completed" and path.W.shape == (3, 3, 2)
    assert np.all(np.diff(path.risk) < 0) and path.risk[-1] < 1e-8
    ang = path.angles[-1]
    # every student with non-negligible norm points at the teacher (angle 0 mod 2 pi), norms add up to |w_0| =
    # 1
    dist = np.minimum(ang, 2 * np.pi - ang)
    norms = np.linalg.norm(path.W[-1], axis=1)
    assert np.all(dist[norms > 1e-2] < 1e-2)
    assert norms.sum() == pytest.approx(1.0, abs=1e-4)
    with pytest.raises(ValueError, match="student"):
        L.alignment_flow(
            tl.Network(np.ones((2, 3)), None, "relu", scaling="none"),
            tl.Network(np.ones((1, 3)), None, "relu", scaling="none"),
            times=[0, 1],
        )


# ------------------------------------------------------------------------------------- Mariantoni & Chizat
def test_step_population_gradient_against_finite_differences():
    student, teacher = tl.networks.teacher_student(3, 2, 6, "step", seed=1, scaling="none")
    g = tl.population.gradient(student, teacher, train_readout=False)[0].ravel()
    W = student.W.ravel()
    h = 1e-6
    fd = np.array(
        [
            (
                tl.population.risk(student.with_weights((W + h * e).reshape(3, 6)), teacher)
                - tl.population.risk(student.with_weights((W - h * e).reshape(3, 6)), teacher)
            )
            / (2 * h)
            for e in np.eye(W.size)
        ]
    )
    np.testing.assert_allclose(g, fd, atol=1e-8)


def test_step_gradient_flow_is_first_order_in_lr_and_descends():
    student, teacher = tl.networks.teacher_student(2, 2, 12, "step", seed=0, scaling="none")
    times = [0.0, 1.0, 5.0]
    p1 = L.step_gradient_flow(student, teacher, times, lr=0.02)
    p2 = L.step_gradient_flow(student, teacher, times, lr=0.01)
    p4 = L.step_gradient_flow(student, teacher, times, lr=0.005)
    np.testing.assert_allclose(p1.tau, times)
    assert np.all(np.diff(p4.risk) < 0)
    e1 = np.abs(p1.W - p4.W).max()
    e2 = np.abs(p2.W - p4.W).max()
    # Euler: error ~ C lr, so (lr=0.02 vs 0.005) / (0.01 vs 0.005) = 3 (exactly for a first-order method)
    assert 2.0 < e1 / e2 < 4.5
    with pytest.raises(ValueError, match="step"):
        L.step_gradient_flow(*tl.networks.teacher_student(2, 2, 4, "relu", seed=0, scaling="none"), times)
    with pytest.raises(ValueError, match="times"):
        L.step_gradient_flow(student, teacher, [1.0, 0.5])


@pytest.mark.skipif(importlib.util.find_spec("twolayer.ode") is None, reason="twolayer.ode not merged yet")
def test_step_weight_space_flow_agrees_with_overlap_ode():
    # Gradient flow is closed on the overlaps (Mariantoni & Chizat's alpha, beta, gamma system = tl.ode
    # "gradient_flow"). Weight-space Euler with lr = 1e-3 up to tau = 2 carries an O(lr) error ~1e-3; rk4 on the ODE is
    # far more accurate. Time mapping: tau = lr * iterations; the ODE is run with lr = 1 so its t is tau (check
    # its docstring's time convention after the merge).
    student, teacher = tl.networks.teacher_student(2, 2, 10, "step", seed=3, scaling="none")
    times = np.array([0.0, 0.5, 1.0, 2.0])
    path = L.step_gradient_flow(student, teacher, times, lr=1e-3)
    traj = tl.ode.integrate(
        tl.Overlaps.from_networks(student, teacher),
        "step",
        regime="gradient_flow",
        lr=1.0,
        t_max=float(times[-1]),
        times=times,
        method="rk4",
    )
    Q = np.einsum("tkd,tld->tkl", path.W, path.W)
    M = np.einsum("tkd,rd->tkr", path.W, teacher.W)
    np.testing.assert_allclose(traj.Q, Q, atol=5e-3 * np.abs(Q).max())
    np.testing.assert_allclose(traj.M, M, atol=5e-3 * np.abs(Q).max())


def test_procrustes_minimises_and_fixes_the_seed_transposition():
    rng = np.random.default_rng(4)
    d, n = 6, 4
    A = rng.standard_normal((d, n))
    B = np.linalg.qr(rng.standard_normal((d, n)))[0]
    P = L.procrustes(A, B)
    np.testing.assert_allclose(P @ P.T, np.eye(d), atol=1e-12)
    best = L.procrustes_distance(A, B)
    for _ in range(200):  # no random orthogonal matrix does better
        Q = np.linalg.qr(rng.standard_normal((d, d)))[0]
        assert np.linalg.norm(A - Q @ B) >= best - 1e-12
    # Mariantoni & Chizat write P = V U^T for theta(0) = U S V^T and theta_O(0) = I (square case): the minimiser is U
    # V^T
    Asq = rng.standard_normal((n, n))
    U, _, Vt = np.linalg.svd(Asq)
    np.testing.assert_allclose(L.procrustes(Asq, np.eye(n)), U @ Vt, atol=1e-12)
    assert np.linalg.norm(Asq - Vt.T @ U.T) > np.linalg.norm(Asq - U @ Vt) + 1e-6


def test_lemma2_procrustes_distance_is_sum_of_squared_singular_value_gaps_and_vanishes_with_d():
    # theta(0): d x 2m Gaussian entries N(0, 1/d); theta_O(0): orthonormal columns. min_P |theta - P
    # theta_O|_F^2 = sum (s_i - 1)^2 exactly, and for fixed n = 2m, d -> inf: E sum (s_i - 1)^2 ~ E|A^T A -
    # I|_F^2 / 4 = (n^2 + n) / (4 d), i.e. d * mean -> 5 for n = 4 (the paper's bound 2m (sqrt(2m/d) + ...)^2 =
    # n^2 / d).
    rng = np.random.default_rng(5)
    n = 4
    means = {}
    for d in (25, 100, 400, 1600):
        vals = []
        for _ in range(60):
            A = rng.standard_normal((d, n)) / np.sqrt(d)
            B = np.eye(d, n)
            s = np.linalg.svd(A, compute_uv=False)
            dist2 = L.procrustes_distance(A, B) ** 2
            if d == 25:  # the thin formula against the explicit minimiser
                assert dist2 == pytest.approx(L.procrustes_distance(A, B, L.procrustes(A, B)) ** 2, rel=1e-9)
            assert dist2 == pytest.approx(np.sum((s - 1) ** 2), rel=1e-9)
            vals.append(dist2)
        means[d] = np.mean(vals)
    assert means[25] > means[100] > means[400] > means[1600]
    # 60 draws: sampling error of the mean ~ 10-15 %; the 1/d correction to the asymptote is ~ n / sqrt(d)
    assert 1600 * means[1600] == pytest.approx((n * n + n) / 4, rel=0.3)
