"""Nearly parallel and identical student units against a polynomial target (target.cpp): the conditioning
E[p(z) | l_S] is taken in the Cholesky coordinates u of the student fields (l_S = L u), whose correlations with the
target stay bounded however close to parallel the students are, and exactly aligned indicators are merged. Checked:
the ODE's right-hand side against the SDE's drift (an independent implementation: orthant moments of the joint
(l, z)) and continuity in eps for w2 = w1 + eps g (the limit eps -> 0 is the identical pair). Relu and step units
with biases take the same coordinates (orthant moments with means on a square-root factor, u as extra variables):
exact down to the rounding of the overlaps, where they were refused before; the SDE's drift, whose orthant moments
now also condition by projecting a square-root factor, is continuous too."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import twolayer as tl
from twolayer import _core

D = 20
EPS = [1e-1, 1e-2, 1e-3, 1e-4, 1e-5, 1e-6, 1e-7, 1e-8]


def _overlaps(act, eps, bias=None, third=False):
    # with a third unit, a single-index cubic (the SDE's relu drift is exact for K + M <= 4)
    tgt = (tl.targets.hermite({(3,): 1.0, (2,): 0.5, (1,): -1.0}, d=D, seed=0) if third
           else tl.targets.staircase(2, d=D, seed=0))
    w = np.random.default_rng(0).standard_normal(D)
    g = np.random.default_rng(1).standard_normal(D)
    W = [w, w + eps * g] + ([w + 0.5 * np.random.default_rng(2).standard_normal(D)] if third else [])
    a = [0.7, 0.9, -0.4][: len(W)]
    kw = {} if bias is None else {"bias": bias}
    return tl.Overlaps.from_networks(tl.Network(np.stack(W), a, act, **kw), tgt), tgt


def _dq(act, eps, bias=None, third=False):
    ov, tgt = _overlaps(act, eps, bias, third)
    return tl.ode.rhs(ov, act, target=tgt, lr=0.5)[0]


def _drift(act, eps, bias=None, third=False):
    ov, tgt = _overlaps(act, eps, bias, third)
    K = 3 if third else 2
    return tl.sde.increment_covariance(ov, lr=0.5, target=tgt).mean[: K * (K + 1) // 2]


SDE_ACTS = ["relu", pytest.param("erf", marks=pytest.mark.slow), "linear", "quadratic"]  # the SDE's erf: ~4 s a drift


@pytest.mark.parametrize("third", [False, True])
@pytest.mark.parametrize("act", SDE_ACTS)
def test_identical_students_ode_rhs_is_the_sde_drift(act, third):
    """eps = 0 exactly (relu: the aligned indicators merged; before: off by 1.2e-2), with a third generic unit
    (the SDE's erf drift is itself accurate to about 6e-13)."""
    dq = _dq(act, 0.0, third=third)
    K = dq.shape[0]
    np.testing.assert_allclose(dq[np.triu_indices(K)], _drift(act, 0.0, third=third), rtol=1e-12, atol=2e-12)


@pytest.mark.parametrize("act", SDE_ACTS)
def test_nearly_parallel_sweep_against_the_sde_drift(act):
    """eps = 1e-1 ... 1e-3, where the SDE's drift is itself accurate: within 1e-10 (before: 2e-7 at 1e-3)."""
    for eps in EPS[:3]:
        dq = _dq(act, eps, third=True)
        np.testing.assert_allclose(dq[np.triu_indices(3)], _drift(act, eps, third=True), rtol=0, atol=1e-10,
                                   err_msg=f"eps = {eps}")


@pytest.mark.parametrize(("act", "bias"), [("relu", None), ("erf", None), ("tanh", None), ("linear", None),
                                         ("quadratic", None), ("tanh", (0.3, -0.2)), ("erf", (0.3, -0.2))])
def test_nearly_parallel_sweep_is_continuous(act, bias):
    """eps = 1e-3 ... 1e-8 against the quartic through eps = 0, 2e-4, ..., 8e-4 (the right-hand side is smooth in
    eps): within 1e-10 plus the floor of the rounded overlaps (1 - cos^2 is known to 1e-16 absolute, and a remainder
    below 1e-15 of a field's variance is an exact combination: 1e-17 / eps relative). Measured: <= 5e-12 down to
    eps = 1e-6, 1.4e-10 (relu) at 1e-7, 1e-9 at 1e-8 (before: 5.8e4 at 1e-5; the SDE's drift, whose Stein recursion
    conditioned by Schur complements, was off by 4.5e-9 at 1e-5). Smooth units with biases take the same coordinates;
    relu with biases: test_biased_nearly_parallel_relu_sweep_is_continuous."""
    xs = np.arange(5) * 2e-4
    coef = np.polyfit(xs, np.array([_dq(act, x, bias) for x in xs]).reshape(5, -1), 4)
    scale = max(1.0, np.abs(coef[-1]).max())
    for eps in EPS[2:]:
        ref = (coef * eps ** np.arange(4, -1, -1)[:, None]).sum(axis=0).reshape(2, 2)
        np.testing.assert_allclose(_dq(act, eps, bias), ref, rtol=0, atol=(1e-10 + 1e-17 / eps) * scale,
                                   err_msg=f"eps = {eps}")


def test_direct_expectation_of_identical_relu_pair_is_the_single_unit():
    """E[1(l1 > 0) 1(l2 > 0) l1 p(z)] with l2 = l1 is E[1(l1 > 0) l1 p(z)] (the merge), and 1(l1 > 0) 1(-l1 > 0) = 0."""
    terms = (np.array([[1, 0], [1, 1], [2, 0]]), np.array([1.0, 1.0, -0.5]))
    q, m = 1.3, np.array([0.4, -0.3])
    one = _core.target_expectation("relu", np.array([[q]]), m[None, :], np.array([[1, 0, 1]]), *terms)
    two = _core.target_expectation("relu", np.full((2, 2), q), np.stack([m, m]), np.array([[1, 0, 1], [1, 0, 0]]),
                                   *terms)
    assert two == pytest.approx(one, rel=1e-14, abs=1e-15)
    opp = _core.target_expectation("relu", np.array([[q, -q], [-q, q]]), np.stack([m, -m]),
                                   np.array([[1, 0, 1], [1, 0, 0]]), *terms)
    assert opp == 0.0


def test_biased_relu_identical_and_well_separated_units_are_exact():
    for eps in [0.0, 1e-1]:
        dq = _dq("relu", eps, bias=[0.3, -0.2])
        np.testing.assert_allclose(dq[np.triu_indices(2)], _drift("relu", eps, bias=[0.3, -0.2]), rtol=0,
                                   atol=1e-13)


def _flat_rhs(act, eps, bias, third=False):
    ov, tgt = _overlaps(act, eps, bias, third)
    return np.concatenate([np.ravel(x) for x in tl.ode.rhs(ov, act, target=tgt, lr=0.5) if x is not None])


def _continuation_errors(fn, eps_list):
    """|fn(eps) - quartic through eps = 0, 2e-4, ..., 8e-4| / max(1, |fn(0)|) for each eps."""
    xs = np.arange(5) * 2e-4
    coef = np.polyfit(xs, np.array([fn(x) for x in xs]), 4)
    scale = max(1.0, np.abs(coef[-1]).max())
    return [np.abs(fn(e) - (coef * e ** np.arange(4, -1, -1)[:, None]).sum(axis=0)).max() / scale for e in eps_list]


@pytest.mark.parametrize("third", [False, True])
@pytest.mark.parametrize("bias", [(0.3, -0.2, 0.5), (0.3, 0.3, 0.3), (-1.5, 0.8, 0.1)])
def test_biased_nearly_parallel_relu_sweep_is_continuous(bias, third):
    """Relu students with biases, w2 = w1 + eps g (cos = 1 - 2e-6 ... 1 - 2e-16), alone and with a third unit (the
    online lr^2 term's triples): the whole right-hand side (dQ, dM, da) within 1e-10 plus the floor of the rounded
    overlaps of its smooth continuation. Measured <= 5e-12 down to eps = 1e-6, 1.2e-10 at 1e-7 (equal biases with a
    third unit), 3.8e-10 at 1e-8. Before: refused (ValueError) from eps = 1e-2 (cos = 1 - 2e-5); the conditioning in
    the fields was wrong by 2e-10 there, 80 at cos = 1 - 2e-11."""
    b = list(bias[: 3 if third else 2])
    errs = _continuation_errors(lambda e: _flat_rhs("relu", e, b, third), EPS[2:])
    for eps, err in zip(EPS[2:], errs, strict=True):
        assert err <= 1e-10 + 1e-17 / eps, (eps, err)


@pytest.mark.parametrize("bias", [(0.3, -0.2), (0.3, 0.3), (-1.5, 0.8)])
def test_biased_identical_and_nearly_parallel_relu_is_the_sde_drift(bias):
    """Identical units (eps = 0) with equal or different biases and nearly parallel ones against the SDE's drift (an
    independent implementation): within 1e-13 at eps = 0 and 1e-3, 1e-11 at 1e-5 (measured 2e-16 and 2.3e-13). The
    ODE runs through where it stopped 'diverged' before."""
    for eps, tol in [(0.0, 1e-13), (1e-3, 1e-13), (1e-5, 1e-11)]:
        dq = _dq("relu", eps, bias=list(bias))
        np.testing.assert_allclose(dq[np.triu_indices(2)], _drift("relu", eps, bias=list(bias)), rtol=0, atol=tol,
                                   err_msg=f"eps = {eps}")
    ov, tgt = _overlaps("relu", 1e-5, bias=list(bias))
    res = tl.ode.integrate(ov, "relu", target=tgt, lr=0.5, t_max=0.5)
    assert res.status == "completed", res.message
    assert np.isfinite(res.risk).all()


@pytest.mark.parametrize("third", [False, True])
@pytest.mark.parametrize("bias", [None, (0.3, 0.3, 0.3)])
def test_sde_drift_nearly_parallel_sweep_is_continuous(bias, third):
    """The SDE's drift (orthant moments of the joint (l, z), gaussian_orthant.hpp) for relu students w2 = w1 + eps g:
    within 1e-10 plus the overlaps' floor of its smooth continuation (measured <= 5e-11 down to eps = 1e-7). Before,
    its Stein recursion conditioned by Schur complements (eps_mach / (1 - cos^2) of a conditional variance lost):
    off by 5e-9 at eps = 1e-5."""
    K = 3 if third else 2
    b = None if bias is None else list(bias[:K])
    errs = _continuation_errors(lambda e: _drift("relu", e, b, third), EPS[2:])
    for eps, err in zip(EPS[2:], errs, strict=True):
        assert err <= 1e-10 + 1e-17 / eps, (eps, err)


@pytest.mark.parametrize("act", ["relu", "linear", "quadratic"])
def test_antiparallel_students_ode_rhs_is_the_sde_drift(act):
    """w2 = -w1 (+ 1e-3 g): 1(l > 0) 1(-l > 0) = 0 merged exactly; measured 4e-17 (eps = 0), 1.5e-12 (1e-3)."""
    tgt = tl.targets.staircase(2, d=D, seed=0)
    w = np.random.default_rng(0).standard_normal(D)
    g = np.random.default_rng(1).standard_normal(D)
    for eps in [0.0, 1e-3]:
        ov = tl.Overlaps.from_networks(tl.Network(np.stack([w, -w + eps * g]), [0.7, 0.9], act), tgt)
        dq = tl.ode.rhs(ov, act, target=tgt, lr=0.5)[0]
        drift = tl.sde.increment_covariance(ov, lr=0.5, target=tgt).mean[:3]
        np.testing.assert_allclose(dq[np.triu_indices(2)], drift, rtol=0, atol=1e-11, err_msg=f"eps = {eps}")


@pytest.mark.parametrize("bias", [(0.3, -0.2), (0.3, 0.3), (0.3, -0.3)])
def test_biased_antiparallel_relu_is_the_sde_drift(bias):
    """w2 = -w1 (+ eps g) with biases: opposite aligned indicators are an interval (b1 + b2 > 0) or empty; measured
    <= 5e-16, 1.8e-12 where the interval closes (b2 = -b1, eps = 1e-7). Before: refused from eps = 1e-3 on."""
    tgt = tl.targets.staircase(2, d=D, seed=0)
    w = np.random.default_rng(0).standard_normal(D)
    g = np.random.default_rng(1).standard_normal(D)
    for eps in [0.0, 1e-7, 1e-5, 1e-3]:
        ov = tl.Overlaps.from_networks(tl.Network(np.stack([w, -w + eps * g]), [0.7, 0.9], "relu", bias=list(bias)),
                                       tgt)
        dq = tl.ode.rhs(ov, "relu", target=tgt, lr=0.5)[0]
        drift = tl.sde.increment_covariance(ov, lr=0.5, target=tgt).mean[:3]
        np.testing.assert_allclose(dq[np.triu_indices(2)], drift, rtol=0, atol=1e-11, err_msg=f"eps = {eps}")


def test_biased_nearly_parallel_relu_large_batch_map_runs_through():
    """The large-batch map at a nearly parallel biased relu state (cos = 1 - 2e-7) runs all its steps (before: it
    stopped 'diverged' at iteration 0 with the refusal's message)."""
    ov, tgt = _overlaps("relu", 1e-3, bias=[0.3, -0.2])
    res = tl.large_batch.iterate(ov, "relu", "relu", target=tgt, lr=0.5, batch_ratio=2.0, n_steps=3)
    assert res.status == "completed", res.message
    assert len(res.t) == 4
    assert np.isfinite(res.risk).all()


# ------------------------------------------------------------------ direct expectations against mpmath


def _dfact(n):
    """(n - 1)!! for even n (E[V^n] of a standard normal V)."""
    r = mp.mpf(1)
    for j in range(n - 1, 0, -2):
        r *= j
    return r


def _mp_reference(Q, m, mu, fac, n_he):
    """E[F_0(x_0) F_1(x_1) He_n(z)] for two relu fields x = mu + l (F = relu'^nd relu^ns l^pw), k = 1, with the
    double inputs exact: l = L u in 40-digit Cholesky coordinates, E[He_n(z) | u] = sum_j C(n, 2j) (-|a|^2)^j
    (2j - 1)!! (a.u)^(n - 2j) (a = Cov(z, u)), the integral over u_1 in closed form (truncated normal moments) and
    over u_0 by tanh-sinh split at the kink and across the layer of width L_11 / L_10 where x_1's kink sweeps by."""
    with mp.workdps(40):
        Q = [[mp.mpf(float(x)) for x in row] for row in Q]
        m = [mp.mpf(float(x)) for x in m]
        mu = [mp.mpf(float(x)) for x in mu]
        L00 = mp.sqrt(Q[0][0])
        L10 = Q[0][1] / L00
        L11 = mp.sqrt(Q[1][1] - L10**2)
        a0 = m[0] / L00
        a1 = (m[1] - L10 * a0) / L11
        (nd0, ns0, pw0), (nd1, ns1, pw1) = fac

        def mul(P, R):
            out = [mp.mpf(0)] * (len(P) + len(R) - 1)
            for i, p in enumerate(P):
                for j, r in enumerate(R):
                    out[i + j] += p * r
            return out

        def tail(j, t):  # int_t^inf u^j phi(u) du
            if j < 2:
                return mp.ncdf(-t) if j == 0 else mp.npdf(t)
            return t ** (j - 1) * mp.npdf(t) + (j - 1) * tail(j - 2, t)

        def f(u0):
            x0 = mu[0] + L00 * u0
            if nd0 + ns0 > 0 and x0 <= 0:
                return mp.mpf(0)
            P = [mp.mpf(0)] * (n_he + 1)  # E[He_n(z) | u] in powers of u1
            for j in range(n_he // 2 + 1):
                cj = math.comb(n_he, 2 * j) * (-(a0**2 + a1**2)) ** j * _dfact(2 * j)
                e = n_he - 2 * j
                for i in range(e + 1):
                    P[i] += cj * math.comb(e, i) * a1**i * (a0 * u0) ** (e - i)
            if ns1:
                P = mul(P, [mu[1] + L10 * u0, L11])
            for _ in range(pw1):
                P = mul(P, [L10 * u0, L11])
            if nd1 + ns1 > 0:
                inner = mp.fsum(p * tail(j, -(mu[1] + L10 * u0) / L11) for j, p in enumerate(P))
            else:
                inner = mp.fsum(p * _dfact(j) for j, p in enumerate(P) if j % 2 == 0)
            return mp.npdf(u0) * (x0 if ns0 else 1) * (L00 * u0) ** pw0 * inner

        centre, width = -mu[1] / L10, L11 / abs(L10)
        pts = {-mu[0] / L00} | {centre + s * k * width for k in (0, 1, 4, 16, 64, 256) for s in (-1, 1)}
        return float(mp.quad(f, [-mp.inf, *sorted(p for p in pts if abs(p) < 40), mp.inf]))


def _near_pair(one_minus_cos):
    rng = np.random.default_rng(3)
    w, g, v = rng.standard_normal((3, 6))
    g -= (g @ w) / (w @ w) * w
    v /= np.linalg.norm(v)
    eps = np.sqrt(2 * one_minus_cos) * np.linalg.norm(w) / np.linalg.norm(g)
    W = np.stack([w, w + eps * g]) / np.sqrt(6)
    return W @ W.T, 0.8 * (W @ v) / np.abs(W @ v).max()


def _against_mpmath(cases):
    for one_minus_cos, mu, fac in cases:
        Q, m = _near_pair(one_minus_cos)
        ex = _core.target_expectation("relu", Q, m[:, None], np.array(fac), np.array([[3]]), np.array([1.0]),
                                      mu=np.array(mu))
        ref = _mp_reference(Q, m, mu, fac, 3)
        assert abs(ex - ref) <= 1e-11, (one_minus_cos, mu, fac, ex, ref)


def test_biased_nearly_parallel_pair_against_mpmath():
    """E[relu'(x0) l0 relu'(x1) He_3(z)] and E[relu(x0) relu(x1) He_3(z)] at cos = 1 - 1e-14 with equal and different
    biases against 40-digit mpmath with the double inputs exact: within 1e-11 absolute (values 1e-3 to 0.3). Measured
    over the slow grid: <= 4e-16 with different biases; with equal biases the conditioned mean mu (1 - C01 / C11) of
    one field given the other is a cancellation of the rounded rows, eps mu / sqrt(1 - cos^2) of its small standard
    deviation: 2e-16 at cos = 1 - 1e-6, 4e-13 at 1 - 1e-10, 4e-12 at 1 - 1e-12, 3e-12 at 1 - 1e-14 (on a value
    1e-3). Before: refused (ValueError)."""
    _against_mpmath([(1e-14, (0.3, 0.3), [[1, 0, 1], [1, 0, 0]]), (1e-14, (0.3, -0.2), [[0, 1, 0], [0, 1, 0]])])


@pytest.mark.slow
def test_biased_nearly_parallel_pairs_against_mpmath_grid():
    """The same over cos = 1 - 1e-6 ... 1 - 1e-14, three bias pairs and three patterns (about 60 s)."""
    _against_mpmath([(c, mu, fac) for c in [1e-6, 1e-8, 1e-10, 1e-12, 1e-14]
                     for mu in [(0.3, 0.3), (0.3, -0.2), (-1.0, -0.9)]
                     for fac in [[[1, 0, 0], [0, 1, 0]], [[0, 1, 0], [0, 1, 0]], [[1, 0, 1], [1, 0, 0]]]])
