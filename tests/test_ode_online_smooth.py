"""The online ODE's second-order term of smooth units, E[g'(l_i) g'(l_k) E^2], computed as one nested lattice over all
K + M <= 4 fields (gaussian_error_square.hpp), against the sum of the certified per-I4 kernels
sum_jl w_j w_l I4(g, h_j, h_l) (tl.kernels.i4, with means for biases): every pair within 1e-10 relative."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl

RTOL = 1e-10


def _second_order(ov: tl.Overlaps, g: str, h: str) -> np.ndarray:
    """E[g'g' E^2]_ik from the right-hand side: dQ = lr A + lr^2 a_i a_k E[...] (no noise), two learning rates."""
    d1 = tl.ode.rhs(ov, g, h, lr=1.0)[0]
    d2 = tl.ode.rhs(ov, g, h, lr=2.0)[0]
    return (d2 - 2.0 * d1) / 2.0 / np.outer(ov.a, ov.a)


def _reference(ov: tl.Overlaps, g: str, h: str, biased: bool) -> np.ndarray:
    K, M = ov.M.shape
    u = K + M
    om = np.block([[ov.Q, ov.M], [ov.M.T, ov.P]])
    w = np.concatenate([-ov.a, ov.v])
    acts = [g] * K + [h] * M
    mu = np.concatenate([ov.bias, ov.teacher_bias]) if biased else np.zeros(u)
    out = np.zeros((K, K))
    for i in range(K):
        for k in range(i, K):
            total = 0.0
            for j in range(u):
                for m in range(j, u):
                    idx = [i, k, j, m]
                    value = tl.kernels.i4(g, acts[j], acts[m], om[np.ix_(idx, idx)],
                                          mean=mu[idx] if biased else None, n_threads=1)
                    total += (1.0 if j == m else 2.0) * w[j] * w[m] * float(value)
            out[i, k] = out[k, i] = total
    return out


def _overlaps(K: int, M: int, g: str, seed: int, biased: bool, eps: float | None = None) -> tl.Overlaps:
    """Random overlaps; eps: the first min(K, M) teachers are the students plus eps noise (near-singular Omega)."""
    rng = np.random.default_rng(seed)
    d = 30
    W = rng.standard_normal((K, d))
    if eps is None:
        Wt = rng.standard_normal((M, d)) * rng.uniform(0.6, 1.2, (M, 1))
    else:
        Wt = np.vstack([W, rng.standard_normal((max(M - K, 0), d))])[:M].copy()
        Wt[: min(K, M)] += eps * rng.standard_normal((min(K, M), d))
    kw = {"bias": rng.normal(0.0, 0.7, K), "teacher_bias": rng.normal(0.0, 0.7, M)} if biased else {}
    return tl.Overlaps(W @ W.T / d, W @ Wt.T / d, Wt @ Wt.T / d, rng.normal(0.0, 1.0, K), rng.normal(0.0, 1.0, M),
                       **kw)


def _check(K: int, M: int, g: str, h: str, biased: bool, seed: int = 1, eps: float | None = None) -> None:
    ov = _overlaps(K, M, g, seed, biased, eps)
    got, want = _second_order(ov, g, h), _reference(ov, g, h, biased)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.max(np.abs(want)))


QUICK = [(1, 1, "tanh", "tanh"), (2, 1, "softplus", "softplus"), (1, 2, "gelu", "erf"), (2, 2, "softplus", "softplus"),
         (1, 3, "sin", "erf"), (3, 1, "softplus", "tanh")]


@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("K, M, g, h", QUICK)
def test_one_lattice_matches_the_i4_sum(K: int, M: int, g: str, h: str, biased: bool) -> None:
    _check(K, M, g, h, biased)


@pytest.mark.slow
@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("g, h", [("tanh", "tanh"), ("softplus", "softplus"), ("gelu", "erf"), ("sin", "erf"),
                                  ("silu", "sigmoid")])
@pytest.mark.parametrize("K, M", [(1, 1), (2, 1), (1, 2), (2, 2), (3, 1), (1, 3)])
def test_one_lattice_matches_the_i4_sum_all(K: int, M: int, g: str, h: str, biased: bool) -> None:
    _check(K, M, g, h, biased, seed=K + 3 * M)


@pytest.mark.parametrize("g", ["tanh", "softplus"])
def test_weakly_correlated_fields(g: str) -> None:
    """Initial overlaps at d = 1000 (cross overlaps ~0.03): the last field moves by a small fraction of its grid step
    along a line (the free lines, or a fine aligned grid), and tanh's integrand is even (the half lattice)."""
    s, t = tl.networks.teacher_student(K=2, M=2, d=1000, activation=g, seed=2)
    ov = tl.Overlaps.from_networks(s, t)
    got, want = _second_order(ov, g, g), _reference(ov, g, g, biased=False)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.max(np.abs(want)))


@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("K, M, g", [(2, 2, "tanh"), (1, 2, "softplus")])
def test_students_orthogonal_to_the_teachers(K: int, M: int, g: str, biased: bool) -> None:
    """M = 0 exactly (the usual start, P diagonal): the last field does not move along a line (its step 0, an aligned
    grid of stride 0). Each point of the line reads the same stencil; before, an integer division by the stride
    killed the process (SIGFPE)."""
    rng = np.random.default_rng(4)
    kw = {"bias": rng.normal(0.0, 0.7, K), "teacher_bias": rng.normal(0.0, 0.7, M)} if biased else {}
    ov = tl.Overlaps(np.eye(K) * 0.8, np.zeros((K, M)), np.eye(M), rng.normal(0.0, 1.0, K), rng.normal(0.0, 1.0, M),
                     **kw)
    got, want = _second_order(ov, g, g), _reference(ov, g, g, biased)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.max(np.abs(want)))


@pytest.mark.parametrize("eps", [0.0, 1e-6, 1e-3])
@pytest.mark.parametrize("K, M, g", [(2, 1, "tanh"), (1, 1, "softplus"), (2, 2, "softplus")])
def test_near_singular_overlaps(K: int, M: int, g: str, eps: float) -> None:
    """Teachers equal to students (eps = 0: exactly singular, the per-I4 path takes over) or within eps of them."""
    _check(K, M, g, g, biased=False, seed=3, eps=eps)


@pytest.mark.slow
@pytest.mark.parametrize("eps", [0.0, 1e-6, 1e-3])
@pytest.mark.parametrize("biased", [False, True])
def test_near_singular_overlaps_tanh(eps: float, biased: bool) -> None:
    _check(2, 2, "tanh", "tanh", biased=biased, seed=5, eps=eps)


@pytest.mark.slow
def test_three_students_three_teachers_unchanged_path() -> None:
    """K + M > 4 keeps the per-I4 contraction: the right-hand side is the I4 sum."""
    _check(3, 3, "softplus", "softplus", biased=False, seed=2)


@pytest.mark.slow
def test_tanh_ode_against_sgd_k2_m2() -> None:
    """The one-lattice term in a run: K = M = 2 tanh with trained biases (a per-I4 run took minutes), ODE against the
    mean of 10 SGD runs at d = 2000, within 4 standard errors plus 1/d."""
    d, n_seeds = 2000, 10
    s, t = tl.networks.teacher_student(2, 2, d, "tanh", seed=7)
    rng = np.random.default_rng(107)
    s = s.with_weights(s.W, a=rng.uniform(0.5, 1.2, 2), bias=rng.uniform(-0.6, 0.6, 2))
    t = t.with_weights(t.W, bias=rng.uniform(-0.6, 0.6, 2))
    ode = tl.ode.integrate(tl.Overlaps.from_networks(s, t), lr=0.6, lr_bias=0.6, t_max=2.0, n_records=5)
    ens = tl.sgd.simulate(s, t, lr=0.6, lr_bias=0.6, t_max=2.0, n_records=5, seeds=list(range(n_seeds)))
    for name in ("Q", "M", "bias", "risk"):
        runs = np.stack([getattr(r, name) for r in ens.runs])
        mean, se = runs.mean(0), runs.std(0, ddof=1) / np.sqrt(n_seeds)
        assert np.max(np.abs(mean - getattr(ode, name)) / (se + 1.0 / d)) < 4.0, name
