"""Gaussian kernels: closed forms against Monte Carlo (1e7 samples, 5 standard errors), against finite differences
through Price's theorem, against the reference formulas of DESIGN.md section 4, and at degenerate covariances."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import twolayer as tl
from conftest import MonteCarlo, assert_mc
from twolayer import kernels
from twolayer.activations import (
    CLOSED_FORM as ACTIVATIONS,  # the pairs with closed forms (the others: test_activations_smooth.py)
)
from twolayer.activations import derivative, sigma

SMOOTH_DERIVATIVE = ("linear", "erf", "relu", "quadratic")  # sigma' is a function (step's is a delta)


I4_OUTER = ("linear", "erf", "quadratic")  # closed-form I4 for every (a, b); relu's only for (relu, relu)


def _kernel_sums(X: np.ndarray) -> dict:
    """Sums of every I2, J2, I3 and I4 integrand and of their squares over the rows of X, as tables from GEMMs:
    sum_n f(X_n) g(Y_n) for all pairs of columns of F and G is F^T G."""
    S = [np.stack([sigma(a, X[:, k]) for a in ACTIVATIONS], axis=1) for k in range(4)]  # (n, acts) per column
    D0 = np.stack([derivative(s, X[:, 0]) for s in SMOOTH_DERIVATIVE], axis=1)
    D1 = np.stack([derivative(s, X[:, 1]) for s in SMOOTH_DERIVATIVE], axis=1)
    DD = D0 * D1
    U = D0 * X[:, 1:2]  # sigma'(l1) l2, one column per s
    V = np.concatenate([DD[:, [SMOOTH_DERIVATIVE.index(s)]] * S[2] for s in I4_OUTER], axis=1)

    def table(F: np.ndarray, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return F.T @ G, (F * F).T @ (G * G)

    relu = ACTIVATIONS.index("relu")
    w = DD[:, SMOOTH_DERIVATIVE.index("relu")] * S[2][:, relu] * S[3][:, relu]
    return {"i2": table(S[0], S[1]), "j2": (DD.sum(axis=0), (DD * DD).sum(axis=0)), "i3": table(U, S[2]),
            "i4": table(V, S[3]), "i4relu": (w.sum(), w @ w)}


@pytest.fixture(scope="module")
def mc_results(random_cov4):
    """One 1e7-sample Monte Carlo run shared by every pair: I2, I3, J2 and I4 integrands. About 4 s of CPU with one
    BLAS thread (the former fixture, one integrand at a time: 21 s on the same machine): each activation is evaluated
    once per sample and the sums are GEMMs; chunks of 1e5 rows stay in the allocator's heap (chunks of 1e6 spent
    seconds in page faults)."""
    C = random_cov4
    t = MonteCarlo(C, chunk=100_000).sums(_kernel_sums)
    mc = {}
    for i, a in enumerate(ACTIVATIONS):
        for j, b in enumerate(ACTIVATIONS):
            mc[("i2", a, b)] = (t["i2"][0][i, j], t["i2"][1][i, j])
            for k, s in enumerate(I4_OUTER):
                row = k * len(ACTIVATIONS) + i
                mc[("i4", s, a, b)] = (t["i4"][0][row, j], t["i4"][1][row, j])
    for k, s in enumerate(SMOOTH_DERIVATIVE):
        mc[("j2", s)] = (t["j2"][0][k], t["j2"][1][k])
        for j, b in enumerate(ACTIVATIONS):
            mc[("i3", s, b)] = (t["i3"][0][k, j], t["i3"][1][k, j])
    mc[("i4", "relu", "relu", "relu")] = t["i4relu"]
    return C, {key: (float(m), float(se)) for key, (m, se) in mc.items()}


@pytest.mark.parametrize(("a", "b"), list(itertools.product(ACTIVATIONS, ACTIVATIONS)))
def test_i2_against_monte_carlo(mc_results, a, b):
    C, mc = mc_results
    assert_mc(kernels.i2(a, b, C[:2, :2]), mc[("i2", a, b)], what=f"I2({a}, {b})")


@pytest.mark.parametrize(("s", "b"), list(itertools.product(SMOOTH_DERIVATIVE, ACTIVATIONS)))
def test_i3_against_monte_carlo(mc_results, s, b):
    C, mc = mc_results
    assert_mc(kernels.i3(s, b, C[:3, :3]), mc[("i3", s, b)], what=f"I3({s}, {b})")


@pytest.mark.parametrize("s", SMOOTH_DERIVATIVE)
def test_j2_against_monte_carlo(mc_results, s):
    C, mc = mc_results
    assert_mc(kernels.j2(s, C[:2, :2]), mc[("j2", s)], what=f"J2({s})")


@pytest.mark.parametrize(("s", "a", "b"), [(s, a, b) for s in ("linear", "erf", "quadratic")
                                           for a, b in itertools.product(ACTIVATIONS, ACTIVATIONS)])
def test_i4_closed_forms_against_monte_carlo(mc_results, s, a, b):
    C, mc = mc_results
    assert_mc(kernels.i4(s, a, b, C), mc[("i4", s, a, b)], what=f"I4({s}, {a}, {b})")


def test_relu_i4_against_monte_carlo(mc_results):
    C, mc = mc_results
    assert_mc(kernels.i4("relu", "relu", "relu", C), mc[("i4", "relu", "relu", "relu")], what="I4(relu)")


def _conditional_on_first(C: np.ndarray, k: int) -> np.ndarray:
    """Covariance of the remaining variables given the first k are 0."""
    A, B, Cab = C[:k, :k], C[k:, k:], C[:k, k:]
    return B - Cab.T @ np.linalg.solve(A, Cab)


@pytest.mark.parametrize("b", ACTIVATIONS)
def test_step_i3_is_density_times_conditional_expectation(random_cov4, b):
    """E[delta(l1) l2 b(l3)] = p(l1 = 0) E[l2 b(l3) | l1 = 0], the conditional expectation by Monte Carlo."""
    C = random_cov4[:3, :3]
    cond = _conditional_on_first(C, 1)
    mc = MonteCarlo(cond, samples=4_000_000).means({"f": lambda X: X[:, 0] * sigma(b, X[:, 1])})["f"]
    density = 1.0 / np.sqrt(2 * np.pi * C[0, 0])
    assert_mc(kernels.i3("step", b, C), (density * mc[0], density * mc[1]), what=f"I3(step, {b})")


@pytest.mark.parametrize(("a", "b"), [("relu", "relu"), ("erf", "step"), ("quadratic", "linear")])
def test_step_i4_is_density_times_conditional_expectation(random_cov4, a, b):
    C = random_cov4
    cond = _conditional_on_first(C, 2)
    mc = MonteCarlo(cond, samples=4_000_000).means({"f": lambda X: sigma(a, X[:, 0]) * sigma(b, X[:, 1])})["f"]
    density = 1.0 / (2 * np.pi * np.sqrt(np.linalg.det(C[:2, :2])))
    assert_mc(kernels.i4("step", a, b, C), (density * mc[0], density * mc[1]), what=f"I4(step, {a}, {b})")


def _bump(C: np.ndarray, i: int, j: int, h: float) -> np.ndarray:
    D = C.copy()
    D[i, j] += h
    if i != j:
        D[j, i] += h
    return D


@pytest.mark.parametrize(("a", "b"), list(itertools.product(ACTIVATIONS, ACTIVATIONS)))
def test_price_theorem_finite_differences(random_cov4, a, b):
    """dI2/dC12 = E[a'(l1) b'(l2)] and I3(s, b) = 2 C12 dI2/dC11 + C23 dI2/dC13 (Stein + Price), by central
    differences (step h = 1e-5, truncation error O(h^2) ~ 1e-10)."""
    C3 = random_cov4[:3, :3]
    h = 1e-5
    C2 = C3[np.ix_([0, 2], [0, 2])]
    d11 = (kernels.i2(a, b, _bump(C2, 0, 0, h)) - kernels.i2(a, b, _bump(C2, 0, 0, -h))) / (2 * h)
    d12 = (kernels.i2(a, b, _bump(C2, 0, 1, h)) - kernels.i2(a, b, _bump(C2, 0, 1, -h))) / (2 * h)
    expected = 2 * C3[0, 1] * d11 + C3[1, 2] * d12
    assert kernels.i3(a, b, C3) == pytest.approx(expected, rel=1e-7, abs=1e-9)
    if a == b:
        assert kernels.j2(a, C2) == pytest.approx(d12, rel=1e-7, abs=1e-9)


def test_erf_reference_formulas(random_cov4):
    """The erf closed forms of DESIGN.md section 4, written out independently."""
    C = random_cov4
    c = lambda i, j: C[i - 1, j - 1]  # noqa: E731  (1-based, as in the formulas)
    i2 = 2 / np.pi * np.arcsin(c(1, 2) / np.sqrt((1 + c(1, 1)) * (1 + c(2, 2))))
    lam3 = (1 + c(1, 1)) * (1 + c(3, 3)) - c(1, 3) ** 2
    i3 = 2 / np.pi * (c(2, 3) * (1 + c(1, 1)) - c(1, 2) * c(1, 3)) / ((1 + c(1, 1)) * np.sqrt(lam3))
    lam4 = (1 + c(1, 1)) * (1 + c(2, 2)) - c(1, 2) ** 2
    lam0 = (lam4 * c(3, 4) - c(2, 3) * c(2, 4) * (1 + c(1, 1)) - c(1, 3) * c(1, 4) * (1 + c(2, 2))
            + c(1, 2) * c(1, 3) * c(2, 4) + c(1, 2) * c(1, 4) * c(2, 3))
    lam1 = (lam4 * (1 + c(3, 3)) - c(2, 3) ** 2 * (1 + c(1, 1)) - c(1, 3) ** 2 * (1 + c(2, 2))
            + 2 * c(1, 2) * c(1, 3) * c(2, 3))
    lam2 = (lam4 * (1 + c(4, 4)) - c(2, 4) ** 2 * (1 + c(1, 1)) - c(1, 4) ** 2 * (1 + c(2, 2))
            + 2 * c(1, 2) * c(1, 4) * c(2, 4))
    i4 = 4 / np.pi**2 / np.sqrt(lam4) * np.arcsin(lam0 / np.sqrt(lam1 * lam2))
    j2 = 2 / np.pi / np.sqrt(1 + c(1, 1) + c(2, 2) + c(1, 1) * c(2, 2) - c(1, 2) ** 2)
    assert kernels.i2("erf", "erf", C[:2, :2]) == pytest.approx(i2, rel=1e-13)
    assert kernels.i3("erf", "erf", C[:3, :3]) == pytest.approx(i3, rel=1e-12)
    assert kernels.i4("erf", "erf", "erf", C) == pytest.approx(i4, rel=1e-12)
    assert kernels.j2("erf", C[:2, :2]) == pytest.approx(j2, rel=1e-13)


def test_relu_reference_formulas(random_cov4):
    C = random_cov4
    th = np.arccos(C[0, 1] / np.sqrt(C[0, 0] * C[1, 1]))
    i2 = np.sqrt(C[0, 0] * C[1, 1]) / (2 * np.pi) * (np.sin(th) + (np.pi - th) * np.cos(th))
    i3 = (C[0, 1] * np.sqrt(C[0, 0] * C[2, 2] - C[0, 2] ** 2) / (2 * np.pi * C[0, 0])
          + C[1, 2] * np.arcsin(C[0, 2] / np.sqrt(C[0, 0] * C[2, 2])) / (2 * np.pi) + C[1, 2] / 4)
    assert kernels.i2("relu", "relu", C[:2, :2]) == pytest.approx(i2, rel=1e-13)
    assert kernels.i3("relu", "relu", C[:3, :3]) == pytest.approx(i3, rel=1e-12)
    step = (np.pi - th) / (2 * np.pi)
    assert kernels.i2("step", "step", C[:2, :2]) == pytest.approx(step, rel=1e-13)


# Degenerate covariances: exact values where the Gaussian is singular.
q = 1.7


@pytest.mark.parametrize(("a", "b", "C", "expected"), [
    ("relu", "relu", [[q, q], [q, q]], q / 2),                     # aligned: E[relu^2]
    ("relu", "relu", [[q, -q], [-q, q]], 0.0),                     # antipodal
    ("step", "step", [[q, q], [q, q]], 0.5),
    ("step", "step", [[q, -q], [-q, q]], 0.0),
    ("erf", "erf", [[q, q], [q, q]], 2 / np.pi * np.arcsin(q / (1 + q))),
    ("relu", "quadratic", [[q, q], [q, q]], np.sqrt(2 / np.pi) * q**1.5),
    ("relu", "step", [[q, q], [q, q]], np.sqrt(q / (2 * np.pi))),
    ("linear", "step", [[q, -q], [-q, q]], -np.sqrt(q / (2 * np.pi))),
    ("quadratic", "quadratic", [[q, q], [q, q]], 3 * q**2),
])
def test_i2_degenerate_values(a, b, C, expected):
    assert kernels.i2(a, b, np.array(C)) == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(("a", "b"), list(itertools.product(ACTIVATIONS, ACTIVATIONS)))
def test_zero_norm_rows_and_aligned_inputs_are_finite(a, b):
    """A zero-variance unit is identically 0 (step(0) = 0); aligned inputs give finite values equal to the
    Monte Carlo of the degenerate Gaussian."""
    zero = np.array([[0.0, 0.0], [0.0, 1.3]])
    assert kernels.i2(a, b, zero) == pytest.approx(0.0 if b != "linear" or a != "linear" else 0.0, abs=1e-15)
    aligned = np.array([[1.0, 1.2], [1.2, 1.44]])
    mc = MonteCarlo(aligned, samples=1_000_000).means({"f": lambda X: sigma(a, X[:, 0]) * sigma(b, X[:, 1])})["f"]
    assert_mc(kernels.i2(a, b, aligned), mc, what=f"aligned I2({a}, {b})")


@pytest.mark.parametrize("s", ["linear", "erf", "relu", "quadratic"])
def test_i3_i4_degenerate_are_finite(s):
    """Rank-deficient covariances (l3 = l1, l4 = -l2, and a zero row) give finite kernels."""
    w = np.array([[1.0, 0.2, 0.0], [0.1, 1.0, 0.3], [1.0, 0.2, 0.0], [-0.1, -1.0, -0.3]])
    C = w @ w.T
    vals = [kernels.i3(s, "relu", C[:3, :3]), kernels.i3(s, "erf", C[np.ix_([0, 1, 3], [0, 1, 3])])]
    pairs = [("relu", "relu")] if s == "relu" else [("relu", "relu"), ("erf", "erf"), ("linear", "quadratic")]
    vals += [kernels.i4(s, a, b, C) for a, b in pairs]
    Z = C.copy()
    Z[2, :] = Z[:, 2] = 0.0
    vals += [kernels.i4(s, a, b, Z) for a, b in pairs]
    assert np.all(np.isfinite(vals))


def test_batched_shapes_and_values():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((3, 5, 2, 2))
    C = A @ np.swapaxes(A, -1, -2)
    out = kernels.i2("erf", "relu", C)
    assert out.shape == (3, 5)
    assert out[2, 4] == pytest.approx(kernels.i2("erf", "relu", C[2, 4]), rel=1e-15)
    assert isinstance(kernels.i2("erf", "relu", C[0, 0]), float)
    assert np.array_equal(kernels.i2("erf", "relu", C, n_threads=1), kernels.i2("erf", "relu", C, n_threads=2))


@pytest.mark.parametrize(("C", "message"), [
    (np.array([[1.0, 0.5], [0.4, 1.0]]), "symmetric"),
    (np.array([[1.0, 2.0], [2.0, 1.0]]), "positive semi-definite"),
    (np.array([[np.nan, 0.0], [0.0, 1.0]]), "finite"),
    (np.array([[-1.0, 0.0], [0.0, 1.0]]), "positive semi-definite"),
    (np.eye(3), r"\(\.\.\., 2, 2\)"),
])
def test_bad_covariances_raise(C, message):
    with pytest.raises(ValueError, match=message) as info:
        kernels.i2("relu", "relu", C)
    assert "C" in str(info.value)


def test_bad_activation_names_and_missing_pairs():
    with pytest.raises(ValueError, match="act_a"):
        kernels.i2("swish", "relu", np.eye(2))
    with pytest.raises(ValueError, match="act_b"):
        kernels.i3("relu", "mish", np.eye(3))
    with pytest.raises(ValueError, match="non-singular"):
        kernels.j2("step", np.ones((2, 2)))


def test_pointwise_activations():
    x = np.linspace(-2, 2, 9)
    assert np.allclose(tl.activations.sigma("relu", x), np.maximum(x, 0))
    assert np.allclose(tl.activations.derivative("quadratic", x), 2 * x)
    from scipy.special import erf
    assert np.allclose(tl.activations.sigma("erf", x), erf(x / np.sqrt(2)), atol=1e-15)


def test_branch_free_arcsine_accuracy():
    """The kernels' vectorised arcsine (one rational approximation on |x| <= 1/2, the half-angle identity
    above) is within 3 ulp of the C library's arcsine (itself within 1 ulp) over [-1, 1], is odd, exact at 0 and
    +-1, and keeps tiny arguments."""
    from twolayer import _core

    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            np.linspace(-1.0, 1.0, 200_001),
            rng.uniform(-1.0, 1.0, 1_000_000),
            0.5 + rng.uniform(-1e-3, 1e-3, 100_000),  # the switch between the two halves
            1.0 - 10.0 ** rng.uniform(-16, -1, 100_000),  # near the square-root singularity
            10.0 ** rng.uniform(-300, -1, 10_000),
        ]
    )
    got = _core.asin_simd(x)
    ref = np.arcsin(x)
    ulps = np.abs(got - ref) / np.spacing(np.abs(ref))
    assert np.max(ulps[ref != 0]) <= 3.0
    np.testing.assert_array_equal(_core.asin_simd(-x), -got)
    special = np.array([0.0, 1.0, -1.0, 1e-300])
    np.testing.assert_array_equal(_core.asin_simd(special), [0.0, np.pi / 2, -np.pi / 2, 1e-300])


def test_branch_free_exp_and_sine_accuracy():
    """The lanes' vectorised exponential (Cephes' Pade form, the scale 2^n from the exponent bits) and sine (Cephes'
    sine and cosine polynomials on |x| <= 3 pi / 4) are within 2 ulp of the C library's over their ranges; the
    exponential is 0 below -746, exp(0) = 1, inf above 710, NaN for NaN; the sine is odd."""
    from twolayer import _core

    rng = np.random.default_rng(1)
    x = np.concatenate([np.linspace(-708.0, 709.0, 200_001), rng.uniform(-50.0, 1.0, 1_000_000),
                        -(10.0 ** rng.uniform(-300, 0, 10_000))])
    got, ref = _core.exp_simd(x), np.exp(x)
    assert np.max(np.abs(got - ref) / np.spacing(ref)) <= 2.0
    sub = np.linspace(-745.0, -708.5, 10_001)  # subnormal results: to the spacing of the smallest normal
    assert np.max(np.abs(_core.exp_simd(sub) - np.exp(sub))) <= 2 * np.spacing(np.finfo(float).tiny)
    np.testing.assert_array_equal(_core.exp_simd(np.array([0.0, -746.0, -1e300, 710.0, np.inf])),
                                  [1.0, 0.0, 0.0, np.inf, np.inf])
    assert np.isnan(_core.exp_simd(np.array([np.nan])))[0]
    s = np.concatenate([np.linspace(-3 * np.pi / 4, 3 * np.pi / 4, 200_001), rng.uniform(0.0, 2.4, 1_000_000),
                        np.pi / 4 + rng.uniform(-1e-6, 1e-6, 10_000), 10.0 ** rng.uniform(-300, -1, 10_000)])
    got, ref = _core.sin_simd(s), np.sin(s)
    assert np.max((np.abs(got - ref) / np.spacing(np.abs(ref)))[ref != 0]) <= 2.0
    np.testing.assert_array_equal(_core.sin_simd(-s), -got)


def test_zero_variance_relu_unit_beside_step_is_zero() -> None:
    # relu(l) = 0 identically when Var(l) = 0: I3 and the quadratic I4 of a relu-step pair are then 0, not NaN (the
    # Price derivative of sqrt(C11) is infinite there, times C12 = 0)
    C3 = np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 0.3], [0.0, 0.3, 2.0]])
    assert tl.kernels.i3("relu", "step", C3) == 0.0
    assert tl.kernels.i3("step", "relu", C3[::-1, ::-1]) == 0.0
    C4 = np.eye(4) + 0.2 * (np.ones((4, 4)) - np.eye(4))
    C4[2, :] = C4[:, 2] = 0.0
    assert tl.kernels.i4("quadratic", "relu", "step", C4) == 0.0
    assert tl.kernels.i4("quadratic", "step", "relu", C4[[0, 1, 3, 2]][:, [0, 1, 3, 2]]) == 0.0
