"""tl.landscape: critical points, spectra, isotropy, fixed-point subspaces, multistart (Arjevani & Field)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import twolayer as tl
from twolayer.landscape import FixedPointSpace, SubspaceProblem

L = tl.landscape

# A point of the k = 6 ΔS_5 spurious family (coordinates of FixedPointSpace((5, 1)): diagonal and off-diagonal
# of the 5-block, the lone diagonal entry, the last column, the last row), rounded to 4-5 digits: Newton
# finishes it.
X6 = np.array([0.9867, -0.05041, -0.60151, 0.30801, 0.22452])


def relu_pair(W: np.ndarray, a: np.ndarray | None = None) -> tuple[tl.Network, tl.Network]:
    k = W.shape[0]
    return tl.Network(W, a, "relu", scaling="none"), L.identity_teacher(k)


def fd_gradient(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    g = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


@pytest.fixture(scope="module")
def spurious6():
    prob = SubspaceProblem(FixedPointSpace((5, 1)))
    x, gn, ok = prob.solve(X6)
    assert ok and gn <= 1e-12
    return prob, x


# ---------------------------------------------------------------------------------------------- spectra
def test_spectrum_at_identity_matches_analytic_relu_values():
    # Hessian of the Safran-Shamir loss at W = I (unit second layer fixed): 1/4 -+ 1/(2 pi) with
    # multiplicities k(k-1)/2 and k(k-3)/2 (Arjevani-Field); the rest are the trivial/standard-rep
    # eigenvalues.
    k = 6
    s, t = relu_pair(np.eye(k))
    spec = L.spectrum(tl.population.hessian(s, t, train_readout=False), tol=1e-9)
    values = {round(v, 10): m for v, m in spec}
    assert values[round(0.25 - 1 / (2 * np.pi), 10)] == k * (k - 1) // 2
    assert values[round(0.25 + 1 / (2 * np.pi), 10)] == k * (k - 3) // 2
    assert sum(m for _, m in spec) == k * k


def test_spectrum_groups_and_validates():
    H = np.diag([1.0, 1.0 + 1e-10, 2.0, 3.0, 3.0, 3.0])
    assert L.spectrum(H) == [(pytest.approx(1.0), 2), (pytest.approx(2.0), 1), (pytest.approx(3.0), 3)]
    with pytest.raises(ValueError, match="tol"):
        L.spectrum(H, tol=0.0)
    with pytest.raises(ValueError, match="H"):
        L.spectrum(np.ones((2, 3)))
    with pytest.raises(ValueError, match="H"):
        L.spectrum(np.array([[1.0, 2.0], [0.0, 1.0]]))


# ---------------------------------------------------------------------------------------------- refine
def test_refine_finds_global_minimum_and_converges_quadratically():
    k = 5
    rng = np.random.default_rng(3)
    s, t = relu_pair(np.eye(k) + 0.03 * rng.standard_normal((k, k)))
    cp = L.refine(s, t)
    assert cp.converged and cp.grad_norm <= 1e-12
    assert cp.kind == "global minimum" and cp.index == 0 and cp.strict
    assert abs(cp.risk) < 1e-12
    np.testing.assert_allclose(cp.student.W, np.eye(k), atol=1e-10)
    h = np.array(cp.history)
    # quadratic convergence: e_{n+1} <= C e_n^2 once in the Newton regime (checked on steps with e_n < 1e-2,
    # e_{n+1} above the 1e-13 floating-point floor); C bounded by |H^-1| |D^3 R| / 2 ~ O(10) here
    pairs = [(a, b) for a, b in zip(h[:-1], h[1:], strict=False) if a < 1e-2 and b > 1e-13]
    assert pairs, h
    for a, b in pairs:
        assert b <= 50.0 * a * a, h


def test_refine_spurious_minimum_k6(spurious6):
    prob, x = spurious6
    W, _ = prob.space.matrix(x)
    rng = np.random.default_rng(0)
    s, t = relu_pair(W + 1e-3 * rng.standard_normal(W.shape))  # leave the subspace: refine must come back
    cp = L.refine(s, t)
    assert cp.converged and cp.grad_norm <= 1e-12
    assert cp.kind == "spurious minimum" and cp.strict and cp.index == 0
    assert cp.risk == pytest.approx(0.02508058, abs=1e-8)
    assert cp.eigenvalues[0] > 1e-3  # strictly positive spectrum (smallest ~4.7e-3, multiplicity 4)
    np.testing.assert_allclose(cp.student.W, W, atol=1e-9)
    iso = L.isotropy(cp.student.W, tol=1e-8)
    assert iso.description == "ΔS_5" and iso.order == math.factorial(5)
    h = np.array(cp.history)  # quadratic convergence here too (|H^-1| ~ 1/4.7e-3 makes C larger)
    for e0, e1 in zip(h[:-1], h[1:], strict=False):
        if e0 < 1e-3 and e1 > 1e-13:
            assert e1 <= 1e4 * e0 * e0, h
    # isotypic decomposition of R^{k x k} under ΔS_{k-1} (n = k - 1 = 5): R^k = 2 triv + std, so
    # R^k (x) R^k = 5 triv + 5 std + Λ^2 std + Y with dims 1, n - 1 = 4, (n-1)(n-2)/2 = 6, n(n-3)/2 = 5:
    # 12 distinct eigenvalues with multiplicities 1 (x5), 4 (x5), 6, 5
    mults = sorted(m for _, m in cp.spectrum(1e-7))
    assert mults == [1] * 5 + [4] * 5 + [5, 6]


def test_refine_trainable_readout_counts_homogeneity_directions(spurious6):
    prob, x = spurious6
    W, _ = prob.space.matrix(x)
    s, t = relu_pair(W)
    cp = L.refine(s, t, train_readout=True)
    assert cp.converged
    # relu homogeneity (w_i, a_i) -> (c w_i, a_i / c) gives exactly k flat directions at any critical point
    assert cp.nullity >= 6
    assert cp.kind in ("spurious minimum", "saddle", "global minimum")


def test_refine_bad_input():
    s, t = relu_pair(np.eye(3))
    with pytest.raises(ValueError, match="tol"):
        L.refine(s, t, tol=0.0)
    with pytest.raises(ValueError, match="tol"):
        L.refine(s, t, tol=-1e-3)
    with pytest.raises(ValueError, match="teacher"):
        L.refine(s, L.identity_teacher(4))
    with pytest.raises(ValueError, match="W"):
        tl.Network(np.ones(3), None, "relu")


# ---------------------------------------------------------------------------------------------- derivatives
@pytest.mark.parametrize("train_readout", [False, True])
def test_subspace_gradient_and_hessian_against_finite_differences(train_readout):
    prob = SubspaceProblem(FixedPointSpace((5, 1), train_readout=train_readout))
    x = np.concatenate([X6, [1.1, 0.9]]) if train_readout else X6 + 0.01
    # central differences: truncation O(h^2 |R'''|) ~ 1e-12, rounding O(eps |R| / h) ~ 1e-10
    np.testing.assert_allclose(prob.gradient(x), fd_gradient(prob.risk, x), atol=1e-8)
    H_fd = np.stack([fd_gradient(lambda y, i=i: prob.gradient(y)[i], x) for i in range(x.size)])
    np.testing.assert_allclose(prob.hessian(x), H_fd, atol=1e-7)


def test_full_hessian_at_spurious_minimum_against_finite_differences(spurious6):
    prob, x = spurious6
    W, _ = prob.space.matrix(x)
    s, t = relu_pair(W)

    def grad(v):
        return tl.population.gradient(s.with_weights(v.reshape(W.shape)), t, train_readout=False)[0].ravel()

    H_fd = np.stack([fd_gradient(lambda v, i=i: grad(v)[i], W.ravel()) for i in range(W.size)])
    np.testing.assert_allclose(tl.population.hessian(s, t, train_readout=False), H_fd, atol=1e-7)


def test_numpy_reference_loss_and_gradient():
    rng = np.random.default_rng(1)
    W = rng.standard_normal((7, 7)) / np.sqrt(7)
    s, t = relu_pair(W)
    loss, g = L.numpy_relu_loss_grad(W, np.eye(7))
    assert loss == pytest.approx(tl.population.risk(s, t), abs=1e-14)
    np.testing.assert_allclose(g, tl.population.gradient(s, t, train_readout=False)[0], atol=1e-13)
    np.testing.assert_allclose(
        g.ravel(),
        fd_gradient(lambda v: L.numpy_relu_loss_grad(v.reshape(7, 7), np.eye(7))[0], W.ravel()),
        atol=1e-8,
    )


# ---------------------------------------------------------------------------------------------- isotropy
def test_isotropy_examples():
    k = 5
    iso = L.isotropy(np.eye(k))
    assert iso.description == "ΔS_5" and iso.order == 120
    rng = np.random.default_rng(2)
    p, q = rng.permutation(k), rng.permutation(k)
    assert L.isotropy(np.eye(k)[p][:, q]).order == 120  # conjugates are detected too
    W = 0.9 * np.eye(6) + 0.1 * (1 - np.eye(6))
    W[-1, :] = 0.3
    W[:, -1] = 0.2
    W[-1, -1] = -0.6
    iso = L.isotropy(W)
    assert iso.description == "ΔS_5" and iso.order == 120
    perm = rng.permutation(6)
    assert L.isotropy(W[perm][:, rng.permutation(6)]).description == "ΔS_5"
    W2 = W.copy()
    W2[:2, 2:5] += 0.05  # split the 5-block into 2 + 3 (rows 0,1 and columns 2..4 are modified alike)
    W2[2:5, :2] += 0.07
    assert L.isotropy(W2).description == "Δ(S_3 × S_2)"
    assert L.isotropy(W2).order == 12
    assert L.isotropy(rng.standard_normal((4, 4))).order == 1
    assert L.isotropy(np.ones((3, 4))).order == math.factorial(3) * math.factorial(4)
    # a trained second layer must be fixed too
    assert L.isotropy(np.eye(4), a=[1.0, 1.0, 2.0, 2.0]).description == "Δ(S_2 × S_2)"
    # generators fix W
    for pr, pc in L.isotropy(W).generators:
        np.testing.assert_allclose(W[np.argsort(pr)][:, np.argsort(pc)], W)


def test_isotropy_bad_input():
    with pytest.raises(ValueError, match="tol"):
        L.isotropy(np.eye(3), tol=0.0)
    with pytest.raises(ValueError, match="W"):
        L.isotropy(np.ones(3))
    with pytest.raises(ValueError, match="a"):
        L.isotropy(np.eye(3), a=np.ones(4))


# ---------------------------------------------------------------------------------------------- families
def test_delta_s_k_minus_1_family_is_spurious_from_k6_and_a_saddle_at_k5():
    fam = L.continue_family(lambda k: (k - 1, 1), range(6, 9), X6)
    assert [p.k for p in fam] == [6, 7, 8]
    for p in fam:
        assert p.point.kind == "spurious minimum" and p.isotropy == f"ΔS_{p.k - 1}"
        assert p.point.grad_norm <= 1e-12
    losses = [p.risk for p in fam]
    assert losses[0] == pytest.approx(0.02508058, abs=1e-8)
    assert losses == sorted(losses, reverse=True)  # the loss decreases with k along the family
    below = L.continue_family(lambda k: (k - 1, 1), [6, 5], X6)
    assert below[1].point.kind == "saddle" and below[1].point.index > 0


def test_fixed_point_space_parametrisation():
    sp = FixedPointSpace((3, 1))
    assert sp.dim == 5
    W, a = sp.matrix([1.0, 2.0, 3.0, 4.0, 5.0])
    expected = np.array([[1, 2, 2, 4], [2, 1, 2, 4], [2, 2, 1, 4], [5, 5, 5, 3]], dtype=float)
    np.testing.assert_array_equal(W, expected)
    assert a is None
    np.testing.assert_allclose(sp.coordinates(W), [1, 2, 3, 4, 5])
    assert FixedPointSpace((2, 2)).dim == 6 and FixedPointSpace((2, 2), train_readout=True).dim == 8
    with pytest.raises(ValueError, match="W"):
        sp.coordinates(np.eye(3))
    with pytest.raises(ValueError, match="sizes"):
        FixedPointSpace((0, 2))


# ---------------------------------------------------------------------------------------------- multistart
def test_multistart_small_is_reproducible_and_classified():
    r1 = L.multistart(6, 24, seed=5, n_threads=1)
    r2 = L.multistart(6, 24, seed=5, n_threads=2)
    np.testing.assert_array_equal(
        r1.W, r2.W
    )  # per-run streams and per-run searches: thread-count independent
    assert r1.kind == r2.kind
    assert np.all(r1.grad_norm <= 1e-12)
    assert set(r1.kind) <= {"global minimum", "spurious minimum"}
    for kind, loss, iso in zip(r1.kind, r1.risk, r1.isotropy, strict=True):
        if kind == "global minimum":
            assert iso == "ΔS_6" and abs(loss) < 1e-10
    assert "fraction" in r1.table()
    with pytest.raises(ValueError, match="runs"):
        L.multistart(6, 0)
    with pytest.raises(ValueError, match="init"):
        L.multistart(6, 2, init="uniform")
    with pytest.raises(ValueError, match="d"):
        L.multistart(6, 2, d=5)


def test_multistart_agrees_with_scipy_reference():
    so = pytest.importorskip("scipy.optimize")
    k, runs = 8, 6
    res = L.multistart(k, runs, seed=11)
    W0 = L.random_starts(runs, k, k, "xavier", 11)
    for r in range(runs):
        out = so.minimize(
            lambda v: tuple(
                np.ravel(z) if i else z
                for i, z in enumerate(L.numpy_relu_loss_grad(v.reshape(k, k), np.eye(k)))
            ),
            W0[r].ravel(),
            jac=True,
            method="L-BFGS-B",
            options={"gtol": 1e-10, "ftol": 0.0, "maxiter": 5000},
        )
        # the two searches may separate near a basin boundary; the reached loss levels must be the same set
        assert min(abs(out.fun - lo) for lo in res.risk) < 1e-6


# ------------------------------------------------------------------------------------------- C++ search path
@pytest.mark.parametrize("act", ["linear", "erf", "relu", "step", "quadratic"])
def test_first_order_jet_gradient_against_finite_differences(act):
    # population_gradient evaluates the kernels with first-order Jets (value + gradient): check it, dW and da,
    # against central differences of the risk (truncation ~h^2 |R'''| ~1e-12, rounding ~eps |R| / h ~1e-10)
    student, teacher = tl.networks.teacher_student(3, 2, 5, act, seed=7)
    student = student.with_weights(student.W, [0.7, -1.2, 1.5])
    dW, da = tl.population.gradient(student, teacher, train_readout=True)
    x = np.concatenate([student.W.ravel(), student.a])

    def risk(v):
        return tl.population.risk(student.with_weights(v[:15].reshape(3, 5), v[15:]), teacher)

    np.testing.assert_allclose(np.concatenate([dW.ravel(), da]), fd_gradient(risk, x), atol=2e-8)


def test_cpp_search_reports_the_population_risk_at_its_end_points():
    k = 5
    W0 = L.random_starts(4, k, k, "xavier", 2)
    for train in (False, True):
        out = tl._core.multistart_lbfgs(
            W0,
            np.ones((4, k)),
            "relu",
            np.eye(k),
            np.ones(k),
            "relu",
            1.0,
            train_readout=train,
            max_iter=30,
            gtol=0.0,
            memory=5,
        )
        for r in range(4):
            s = tl.Network(out["W"][r], out["a"][r], "relu", scaling="none")
            assert out["loss"][r] == pytest.approx(tl.population.risk(s, L.identity_teacher(k)), abs=1e-14)


# ------------------------------------------------------------------------------------------------ real k
@pytest.mark.parametrize("sizes", [(5, 1), (4, 1, 1), (3, 2), (2, 2, 2)])
def test_reduced_risk_at_integer_sizes_is_the_population_risk(sizes):
    sp = FixedPointSpace(sizes)
    x = 0.5 * np.random.default_rng(len(sizes)).standard_normal(sp.dim)
    s, t = relu_pair(sp.matrix(x)[0])
    assert L.reduced_risk(x, np.array(sizes, float)) == pytest.approx(tl.population.risk(s, t), abs=1e-13)


@pytest.mark.slow
def test_real_k_family_turns_into_a_minimum_between_5_and_6(spurious6):
    _, x = spurious6
    fam = L.continue_real_k(x, 6.0, [6.0, 5.5, 5.0])
    assert fam.standard[0, 0] > 0 > fam.standard[-1, 0]
    assert fam.k_turn is not None and 5.5 < fam.k_turn < 5.7


def test_multistart_with_trained_readout_refines_despite_flat_directions():
    # relu homogeneity leaves k flat Hessian directions; the batched Newton steps use the pseudo-inverse
    res = L.multistart(5, 12, seed=3, train_readout=True)
    assert np.all(res.grad_norm <= 1e-12)
    assert set(res.kind) <= {"global minimum", "spurious minimum"}


def test_fixed_point_space_containing_a_permuted_critical_point(spurious6):
    prob, x = spurious6
    W, _ = prob.space.matrix(x)
    rng = np.random.default_rng(8)
    p, q = rng.permutation(6), rng.permutation(6)
    Wp = W[np.ix_(p, q)]
    space, rows, cols, xs = FixedPointSpace.containing(Wp, tol=1e-9)
    assert space.sizes == (5, 1)
    np.testing.assert_allclose(space.matrix(xs)[0], Wp[np.ix_(rows, cols)], atol=1e-12)
    np.testing.assert_allclose(xs, x, atol=1e-12)  # the same coordinates as the unpermuted family member
    with pytest.raises(ValueError, match="W"):
        FixedPointSpace.containing(np.ones((3, 4)))


def test_reduced_risk_at_tiny_weights_is_the_risk_at_zero() -> None:
    """Rows of norm 1e-160 once overflowed (inv**2) in the relu grouping; the risk must tend to its value at 0."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny = tl.landscape.reduced_risk(np.full(5, 1e-160), [1, 2])
    at_zero = tl.landscape.reduced_risk(np.zeros(5), [1, 2])
    assert np.isfinite(tiny)
    assert tiny == pytest.approx(at_zero, rel=1e-12)
