"""The online ODE's second-order term of smooth units, E[g'(l_i) g'(l_k) E^2], computed as one nested lattice over all
K + M <= 4 fields, or as a Moebius combination of lattices over subsets of at most four fields when K + M > 4
(gaussian_error_square.hpp), against the sum of the certified per-I4 kernels sum_jl w_j w_l I4(g, h_j, h_l)
(tl.kernels.i4, with means for biases): every pair within 1e-10 relative."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer import _core

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


@pytest.mark.parametrize("eps", [None, 1e-3])
@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("K, M, g", [(2, 2, "tanh"), (2, 2, "softplus"), (1, 2, "gelu"), (2, 1, "sin"),
                                     (3, 1, "softplus"), (3, 2, "tanh")])
def test_threads_do_not_change_the_lattice(K: int, M: int, g: str, biased: bool, eps: float | None) -> None:
    """The nodes of the lattice's first variable are tasks on the threads (gaussian_error_square.cpp,
    walk_lattice), each node's sums added in the nodes' order: the right-hand side is bitwise the same on 1, 2 and 3
    threads (with the magnitude pass: a student near its teacher, eps), and within RTOL of the per-I4 sum."""
    ov = _overlaps(K, M, g, seed=7, biased=biased, eps=eps)
    kw = {"lr": 1.0, "lr_bias": 0.5 if biased else 0.0}
    one = tl.ode.rhs(ov, g, **kw, n_threads=1)
    for n in (2, 3):
        for x, y in zip(tl.ode.rhs(ov, g, **kw, n_threads=n), one, strict=True):
            assert np.array_equal(x, y), n
    if K + M <= 4:
        got, want = _second_order(ov, g, g), _reference(ov, g, g, biased)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.max(np.abs(want)))


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
    """Teachers equal to students (eps = 0: exactly singular, the last field fixed by the others, no smoothing) or
    within eps of them."""
    _check(K, M, g, g, biased=False, seed=3, eps=eps)


@pytest.mark.slow
@pytest.mark.parametrize("eps", [0.0, 1e-6, 1e-3])
@pytest.mark.parametrize("biased", [False, True])
def test_near_singular_overlaps_tanh(eps: float, biased: bool) -> None:
    _check(2, 2, "tanh", "tanh", biased=biased, seed=5, eps=eps)


def _learnt(g: str, eps: float, biased: bool, seed: int) -> tl.Overlaps:
    """K = M = 2, a student within eps of its teacher in weights (and biases), the same second layer: the error E is
    ~eps while its terms are ~1."""
    rng = np.random.default_rng(seed)
    d = 30
    W = rng.standard_normal((2, d))
    Wt = W + eps * rng.standard_normal((2, d))
    a, b = rng.normal(0.0, 1.0, 2), rng.normal(0.0, 0.7, 2)
    kw = {"bias": b, "teacher_bias": b + eps * rng.standard_normal(2)} if biased else {}
    return tl.Overlaps(W @ W.T / d, W @ Wt.T / d, Wt @ Wt.T / d, a, a.copy(), **kw)


def _reference_with_magnitude(ov: tl.Overlaps, g: str, biased: bool) -> tuple[np.ndarray, np.ndarray]:
    """The per-I4 sum and the magnitude of its terms, sum_jl |w_j w_l I4_jl| (its own accuracy: 1e-10 of that)."""
    K, M = ov.M.shape
    om = np.block([[ov.Q, ov.M], [ov.M.T, ov.P]])
    w = np.concatenate([-ov.a, ov.v])
    mu = np.concatenate([ov.bias, ov.teacher_bias]) if biased else np.zeros(K + M)
    out, mag = np.zeros((K, K)), np.zeros((K, K))
    for i in range(K):
        for k in range(i, K):
            for j in range(K + M):
                for m in range(j, K + M):
                    idx = [i, k, j, m]
                    term = (1.0 if j == m else 2.0) * w[j] * w[m] * float(
                        tl.kernels.i4(g, g, g, om[np.ix_(idx, idx)], mean=mu[idx] if biased else None, n_threads=1))
                    out[i, k] += term
                    mag[i, k] += abs(term)
            out[k, i], mag[k, i] = out[i, k], mag[i, k]
    return out, mag


@pytest.mark.parametrize("eps", [1e-2, 1e-4, 1e-6])
@pytest.mark.parametrize("g, biased", [("tanh", False), ("softplus", True)])
def test_nearly_learnt_teacher(g: str, biased: bool, eps: float) -> None:
    """A student within eps of its teacher: E[g'g' E^2] ~ eps^2 cancels from terms ~1, and the tables' rounding caps
    its relative accuracy; the lattice is then certified against the magnitude of its terms (the cancellation floor,
    gaussian_error_square.hpp) instead of falling back to the per-I4 sum (0.3-0.6 s per right-hand side, the same
    accuracy): within 1e-10 of the terms' magnitude of that sum (measured: ~1e-15)."""
    ov = _learnt(g, eps, biased, seed=7)
    got = _second_order(ov, g, g)
    want, mag = _reference_with_magnitude(ov, g, biased)
    assert np.all(np.abs(got - want) <= 1e-10 * mag)


CUSTOM_TANH = tl.activations.custom("online_smooth_tanh", np.tanh)


@pytest.mark.parametrize("shift", [0.0, -1e-12])
@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("g", ["tanh", "softplus", "gelu", CUSTOM_TANH])
def test_student_equal_to_its_teacher(g: str, biased: bool, shift: float) -> None:
    """Q = M = P and a = v (and equal biases): the error vanishes, every field of a teacher is its student's (zero
    pivots: the last field fixed by the others, S_q = a^q), and the online right-hand side is 0 (to rounding). With
    Q = P - 1e-12 I (Omega indefinite within the engines' tolerance, a converged run's rounding) it stays at the
    rounding of that shift. Before, the per-I4 sum took over (30-60 ms; the custom tanh raised at the shifted state)."""
    P = np.array([[1.0, 0.3], [0.3, 0.8]])
    kw = {"bias": np.array([0.2, -0.4]), "teacher_bias": np.array([0.2, -0.4])} if biased else {}
    ov = tl.Overlaps(P + shift * np.eye(2), P.copy(), P, np.ones(2), np.ones(2), **kw)
    out = tl.ode.rhs(ov, g, lr=0.5, **({"lr_bias": 0.5} if biased else {}))
    for block in out:
        assert np.all(np.abs(block) <= 1e-15 + 10.0 * abs(shift))


@pytest.mark.parametrize("K, M, g, h, biased", [(3, 2, "tanh", "tanh", False), (3, 2, "softplus", "softplus", True),
                                                 (4, 1, "softplus", "tanh", False), (2, 3, "gelu", "erf", True),
                                                 (3, 3, "softplus", "softplus", False)])
def test_more_than_four_fields(K: int, M: int, g: str, h: str, biased: bool) -> None:
    """K + M > 4: the lattices over the subsets {i, k} + A, |A| <= 2, combined by Moebius inversion (four students
    with one teacher: subsets of students only, split so that each lattice keeps a field outside its pairs; {i, k}
    and {i} padded with a field of weight 0). Before, the per-I4 sum (K = 3, M = 2 tanh: 2.1 s per right-hand side,
    now 11 ms; measured agreement ~1e-14)."""
    _check(K, M, g, h, biased)


@pytest.mark.parametrize("eps", [1e-6, 0.0])
def test_more_than_four_fields_nearly_learnt(eps: float) -> None:
    """K = M = 3 softplus with biases, a student within eps of its teacher: each subset's lattice certified against
    its own terms (the cancellation floor), the combination within 1e-10 of the terms' magnitude of the I4 sum."""
    rng = np.random.default_rng(7)
    d = 30
    W = rng.standard_normal((3, d))
    Wt = W + eps * rng.standard_normal((3, d))
    a, b = rng.normal(0.0, 1.0, 3), rng.normal(0.0, 0.7, 3)
    ov = tl.Overlaps(W @ W.T / d, W @ Wt.T / d, Wt @ Wt.T / d, a, a.copy(), bias=b,
                     teacher_bias=b + eps * rng.standard_normal(3))
    got = _second_order(ov, "softplus", "softplus")
    want, mag = _reference_with_magnitude(ov, "softplus", biased=True)
    assert np.all(np.abs(got - want) <= 1e-10 * mag)


def _tanh_ode_against_sgd(K: int, M: int, seed: int) -> None:
    """tanh with trained biases, ODE against the mean of 10 SGD runs at d = 2000, within 4 standard errors plus 1/d."""
    d, n_seeds = 2000, 10
    s, t = tl.networks.teacher_student(K, M, d, "tanh", seed=seed)
    rng = np.random.default_rng(100 + seed)
    s = s.with_weights(s.W, a=rng.uniform(0.5, 1.2, K), bias=rng.uniform(-0.6, 0.6, K))
    t = t.with_weights(t.W, bias=rng.uniform(-0.6, 0.6, M))
    ode = tl.ode.integrate(tl.Overlaps.from_networks(s, t), lr=0.6, lr_bias=0.6, t_max=2.0, n_records=5)
    ens = tl.sgd.simulate(s, t, lr=0.6, lr_bias=0.6, t_max=2.0, n_records=5, seeds=list(range(n_seeds)))
    for name in ("Q", "M", "bias", "risk"):
        runs = np.stack([getattr(r, name) for r in ens.runs])
        mean, se = runs.mean(0), runs.std(0, ddof=1) / np.sqrt(n_seeds)
        assert np.max(np.abs(mean - getattr(ode, name)) / (se + 1.0 / d)) < 4.0, name


@pytest.mark.slow
def test_tanh_ode_against_sgd_k2_m2() -> None:
    """The one-lattice term in a run: K = M = 2 (a per-I4 run took minutes)."""
    _tanh_ode_against_sgd(2, 2, seed=7)


def test_tanh_ode_against_sgd_k3_m2() -> None:
    """Five fields (the subsets' lattices in a run): K = 3, M = 2 (measured: at most 2.6 standard errors; gradient
    flow, without the lr^2 term, is 84 off in Q)."""
    _tanh_ode_against_sgd(3, 2, seed=8)


@pytest.mark.slow
def test_tanh_student_learns_its_teacher() -> None:
    """The whole run of the near-singular cases above: K = M = 2 tanh from d = 1000's initial overlaps (lr = 0.5) to
    t = 600, through the plateau to a risk at the integrator's resolution (rtol 1e-8: ~1e-8 of the overlaps; Omega
    singular to within it at the end): completed, no false divergence, every row a valid Overlaps (measured: 5 s,
    before 305 s, the near-singular lattices failing to the per-I4 sum at 0.3-0.6 s per right-hand side)."""
    s, t = tl.networks.teacher_student(K=2, M=2, d=1000, activation="tanh", seed=2)
    tr = tl.ode.integrate(tl.Overlaps.from_networks(s, t), "tanh", lr=0.5, t_max=600.0, n_records=61)
    assert tr.status == "completed"
    assert tr.risk[0] > 0.5 and np.abs(tr.risk[-10:]).max() < 1e-8
    for i in range(len(tr.t)):
        tr.overlaps_at(i)


def _i4_sum(g: str, acts: list[str], C: np.ndarray, mu: np.ndarray, w: np.ndarray, i: int, k: int) -> float:
    """sum_jl w_j w_l I4(g, h_j, h_l) with means over the fields (i, k, j, l)."""
    total = 0.0
    for j in range(len(acts)):
        for m in range(j, len(acts)):
            idx = [i, k, j, m]
            value = tl.kernels.i4(g, acts[j], acts[m], C[np.ix_(idx, idx)], mean=mu[idx], n_threads=1)
            total += (1.0 if j == m else 2.0) * w[j] * w[m] * float(value)
    return total


@pytest.mark.parametrize("K, g", [(2, "tanh"), (3, "softplus"), (4, "tanh")])
def test_students_alone(K: int, g: str) -> None:
    """Every field in a pair (the large-batch map's committee term, students only): no field is left to sum last, so
    the subsets' lattices take a padding field of variance 0 and weight 0 ({i, k} and {i}); against the I4 sum."""
    rng = np.random.default_rng(11 + K)
    W = rng.standard_normal((K, 30))
    C = W @ W.T / 30
    mu, w = rng.normal(0.0, 0.6, K), rng.normal(0.0, 1.0, K)
    pairs = [(i, k) for i in range(K) for k in range(i, K)]
    got = _core.error_square_moments(g, [g] * K, C, mu, w, pairs)
    assert got is not None
    want = np.array([_i4_sum(g, [g] * K, C, mu, w, i, k) for i, k in pairs])
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * np.max(np.abs(want)))


def test_error_square_moments_bad_pairs() -> None:
    C = np.eye(3)
    with pytest.raises(ValueError, match="pairs: expected fields of the activation act"):
        _core.error_square_moments("tanh", ["tanh", "tanh", "erf"], C, np.zeros(3), np.ones(3), [(0, 2)])
    with pytest.raises(ValueError, match="pairs: expected at least one pair"):
        _core.error_square_moments("tanh", ["tanh"] * 3, C, np.zeros(3), np.ones(3), [])
