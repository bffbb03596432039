"""ReLU-student I4 = E[step(l1) step(l2) relu(l3) relu(l4)], l ~ N(0, C) (cpp/include/twolayer/gaussian_relu_i4.hpp).

Checked against
* Monte Carlo: 1e7 Gaussian samples (one shared stream, in chunks), within 5 standard errors of the sample;
* an independent reference written here: Price interpolation along a *different* path, C(s) = (1 - s) C0 + s C
  with C0 keeping the (3, 4) block (so I4(C0) = E[relu relu] / 4 and no orthant probability appears), integrated
  adaptively by scipy.integrate.quad; the C++ code uses the path from the identity and fixed Gauss-Legendre rules.
  Agreement is required to 1e-12 relative (+ 1e-14 sqrt(C33 C44) absolute), at generic and at degenerate
  covariances (aligned and antipodal pairs, zero variances, rank 1 to 3, nearly aligned pairs), plus closed forms
  at factorising or aligned covariances;
* exact identities: invariances under scaling and permutations, and (where the binding provides them) the
  closed-form (relu, linear, relu) and (relu, linear, linear) kernels through I4(C) - I4(C with l4 -> -l4)
  = E[step step relu(l3) l4].

Degenerate inputs use integer Gram matrices (and power-of-two or integer scalings) so that alignment is exact in
floating point: near alignment, I4 moves like sqrt(1 - |rho|), so the rounding of the correlations alone limits any
double-precision evaluation to about 1e-16 / sqrt(1 - |rho|) relative.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import integrate
from twolayer import kernels

# ---------------------------------------------------------------------------------------------------------------
# Independent reference
# ---------------------------------------------------------------------------------------------------------------

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _q(rho: float) -> float:
    """P(x > 0, y > 0) for a standard bivariate normal with correlation rho."""
    return 0.25 + math.asin(min(1.0, max(-1.0, rho))) / (2.0 * math.pi)


def _relu_relu(s33: float, s44: float, s34: float) -> float:
    """E[relu(x) relu(y)] for (x, y) ~ N(0, [[s33, s34], [s34, s44]])."""
    if s33 <= 0.0 or s44 <= 0.0:
        return 0.0
    det = max(s33 * s44 - s34 * s34, 0.0)
    rho = s34 / math.sqrt(s33 * s44)
    return (math.sqrt(det) + (0.5 * math.pi + math.asin(min(1.0, max(-1.0, rho)))) * s34) / (2.0 * math.pi)


def _stein_pair(rho: float, a: list[float], b: list[float]) -> float:
    """[-rho (a1 b1 + a2 b2) + a1 b2 + a2 b1] / sqrt(1 - rho^2), accurate as |rho| -> 1 (where its limit is 0)."""
    sg = -1.0 if rho < 0 else 1.0
    e = 1.0 - abs(rho)
    if e <= 0.0:
        return 0.0
    num = e * (a[0] * b[0] + a[1] * b[1]) - (a[0] - sg * a[1]) * (b[0] - sg * b[1])
    return sg * num / math.sqrt(e * (2.0 - e))


def _route_a_integrand(r: list[list[float]], tau: float) -> float:
    """dI4/ds at s = 1 - tau along C(s) = (1 - s) C0 + s R (R the correlation matrix), where C0 = R with the
    covariances between the groups {1}, {2}, {3, 4} set to 0. Price: dI4/ds = sum over the varied pairs (j, k) of
    R_jk E[d_j d_k f], f = step(l1) step(l2) relu(l3) relu(l4):
      (1, 2): p(l1 = l2 = 0) E[relu relu | l1 = l2 = 0];
      (1, 3) etc.: p(l1 = 0) E[step step relu | l1 = 0], by Stein's lemma on the relu variable."""
    s = 1.0 - tau
    c = [[1.0 if i == j else (r[i][j] if {i, j} == {2, 3} else s * r[i][j]) for j in range(4)] for i in range(4)]

    def om(i: int, j: int) -> float:  # 1 - |c_ij| without cancellation
        return 1.0 - abs(r[i][j]) + (0.0 if {i, j} == {2, 3} else tau * abs(r[i][j]))

    def sg(i: int, j: int) -> float:
        return -1.0 if r[i][j] < 0 else 1.0

    # c12 = sg (1 - e):
    #   c_a. C12^-1 c_.b = [(c_a1 - sg c_a2)(c_b1 - sg c_b2) + sg e (c_a1 c_b2 + c_a2 c_b1)] / (e (2 - e))
    e12, g12 = om(0, 1), sg(0, 1)
    dm = e12 * (2.0 - e12)

    def cond12(a: int, b: int) -> float:
        n = (c[a][0] - g12 * c[a][1]) * (c[b][0] - g12 * c[b][1]) + g12 * e12 * (c[a][0] * c[b][1] + c[a][1] * c[b][0])
        return c[a][b] - n / dm

    t12 = _relu_relu(cond12(2, 2), cond12(3, 3), cond12(2, 3)) / (2.0 * math.pi * math.sqrt(dm))

    def g(k: int, x: int, y: int, z: int) -> float:
        """E[step(l_x) step(l_y) relu(l_z) | l_k = 0], by Stein's lemma on l_z."""

        def S(a: int, b: int) -> float:  # covariance given l_k = 0, written around the one of a, b closer to +-l_k
            if a == b:
                e = om(a, k)
                return e * (2.0 - e)
            m, o = (a, b) if abs(r[a][k]) >= abs(r[b][k]) else (b, a)
            return (c[a][b] - sg(m, k) * c[o][k]) + sg(m, k) * c[o][k] * om(m, k)

        def pc(u: int, v: int, w: int) -> float:  # partial correlation of l_u, l_v given l_w (and l_k)
            sww = S(w, w)
            suv = S(u, v) - S(u, w) * S(v, w) / sww
            den = math.sqrt(max((S(u, u) - S(u, w) ** 2 / sww) * (S(v, v) - S(v, w) ** 2 / sww), 0.0))
            return suv / den if den > 0.0 else 0.0

        return _INV_SQRT_2PI * (S(z, x) / math.sqrt(S(x, x)) * _q(pc(y, z, x))
                                + S(z, y) / math.sqrt(S(y, y)) * _q(pc(x, z, y))
                                + math.sqrt(S(z, z)) * _q(pc(x, y, z)))

    return (r[0][1] * t12 + _INV_SQRT_2PI * (r[0][2] * g(0, 1, 2, 3) + r[0][3] * g(0, 1, 3, 2)
                                             + r[1][2] * g(1, 0, 2, 3) + r[1][3] * g(1, 0, 3, 2)))


def ref_relu_i4(C: np.ndarray) -> float:
    """Reference E[step(l1) step(l2) relu(l3) relu(l4)]. Not meant for nearly aligned (l3, l4), where the path's
    start C0 is nearly singular (exactly aligned or antipodal (l3, l4) is handled in closed form)."""
    C = np.asarray(C, dtype=float)
    v = np.diag(C)
    if np.any(v <= 0.0):
        return 0.0  # a zero-variance unit is identically 0: step(0) = 0, relu(0) = 0
    norm = np.sqrt(np.outer(v, v))  # one rounding: exact alignments give correlations of exactly +-1
    r = np.clip((C + C.T) / 2 / norm, -1.0, 1.0).tolist()
    scale = norm[2, 3]
    if min(r[i][j] for i in range(4) for j in range(i + 1, 4)) <= -1.0:
        return 0.0  # an antipodal pair: step*step, step*relu and relu*relu vanish identically
    if r[2][3] >= 1.0:  # l4 = c l3: sqrt(C33 C44) E[step step relu(l3)^2], Stein's lemma on l3
        rho, a = r[0][1], [r[2][0], r[2][1]]
        p3 = 0.125 + (math.asin(rho) + math.asin(a[0]) + math.asin(a[1])) / (4.0 * math.pi)
        d = a[0] * math.sqrt(max(1.0 - a[0] ** 2, 0.0)) + a[1] * math.sqrt(max(1.0 - a[1] ** 2, 0.0))
        return scale * ((d + _stein_pair(rho, a, a)) / (4.0 * math.pi) + p3)
    start = 0.25 * _relu_relu(1.0, 1.0, r[2][3])
    # s = 1 - t^2 absorbs the sqrt(1 - s) endpoint behaviour of a singular C; a nearly aligned pair (1 - |r| = eta)
    # puts a singularity at t = +-i sqrt(eta / (1 - eta)): break the t-interval geometrically around it
    pts = {0.0, 1e-3, 1e-2, 0.1, 0.5, 1.0}
    for i in range(4):
        for j in range(i + 1, 4):
            eta = 1.0 - abs(r[i][j])
            if 0.0 < eta < 0.5:
                a_ = math.sqrt(eta / (1.0 - eta))
                pts.update(x for x in (a_ / 16, a_ / 4, a_, 4 * a_, 16 * a_) if x < 1.0)
    pts_sorted = sorted(pts)
    val = 0.0
    with warnings.catch_warnings():  # round-off warnings at the 1e-16 level of the requested tolerance
        warnings.simplefilter("ignore", integrate.IntegrationWarning)
        for lo, hi in zip(pts_sorted[:-1], pts_sorted[1:], strict=True):
            val += integrate.quad(lambda t: 2.0 * t * _route_a_integrand(r, t * t), lo, hi,
                                  epsabs=1e-16, epsrel=1e-13, limit=200)[0]
    return float(scale * (start + val))


# ---------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------


def i4(C: np.ndarray):
    return kernels.i4("relu", "relu", "relu", np.asarray(C, dtype=float))


def gram(*rows) -> np.ndarray:
    V = np.array(rows, dtype=float)
    return V @ V.T


def relu_relu(C2: np.ndarray) -> float:
    return _relu_relu(C2[0, 0], C2[1, 1], C2[0, 1])


def _unit(C: np.ndarray) -> np.ndarray:
    R = C / np.sqrt(np.outer(np.diag(C), np.diag(C)))
    np.fill_diagonal(R, 1.0)
    return R


# integer directions: their Gram matrices, and sums and integer multiples of them, are exact in floating point
_A, _B, _C, _D = (np.array(v, dtype=float) for v in ([3, -1, 2, 0, 1], [1, 2, -2, 1, 0], [-2, 1, 1, 3, -1],
                                                       [0, -1, 3, 1, 2]))
_ZERO = np.zeros(5)
_RNG = np.random.default_rng(20240611)


def _random_cov(k: int = 4, scale: float = 1.0) -> np.ndarray:
    A = _RNG.standard_normal((4, k))
    return scale * A @ A.T


_SCALES = np.diag([0.5, 3.0, 0.2, 7.0])
REFERENCE_CASES = {
    "generic": _random_cov(),
    "generic unequal scales": _SCALES @ _unit(_random_cov(6)) @ _SCALES,
    "generic strong correlations": _unit(_random_cov(2) + 0.05 * _random_cov(4)),
    "generic high dimension": _random_cov(50, 1 / 50),
    "negative correlations": gram(_A, -_B, -_C, _D),
    "aligned l3 = 2 l1": gram(_A, _B, 2 * _A, _D),
    "aligned l4 = 3 l2": gram(_A, _B, _C, 3 * _B),
    "aligned l2 = l1": gram(_A, _A, _C, _D),
    "aligned l3 = l4": gram(_A, _B, _C, _C),
    "aligned l3 = 2 l4": gram(_A, _B, 2 * _C, _C),
    "student = teacher": gram(_A, _B, _A, _B),
    "student = swapped teacher": gram(_A, _B, _B, _A),
    "all aligned": gram(_A, _A, _A, _A),
    "antipodal l4 = -l2": gram(_A, _B, _C, -_B),
    "antipodal l2 = -l1": gram(_A, -_A, _C, _D),
    "antipodal l3 = -l4": gram(_A, _B, _C, -_C),
    "antipodal l3 = -l1": gram(_A, _B, -_A, _D),
    "zero row 1": gram(_ZERO, _B, _C, _D),
    "zero row 2": gram(_A, _ZERO, _C, _D),
    "zero row 3": gram(_A, _B, _ZERO, _D),
    "zero row 4": gram(_A, _B, _C, _ZERO),
    "rank 1": gram([1], [2], [3], [1]),
    "rank 1 with a sign": gram([1], [2], [-3], [1]),
    "rank 2": gram([1, 2], [3, -1], [-1, 1], [2, 1]),
    "rank 2 sums": gram(_A, _B, _A + _B, _A - _B),
    "rank 3 random": _random_cov(3),
    "rank 3 l4 = l1 + l2 - l3": gram(_A, _B, _C, _A + _B - _C),
    "empty orthant cone": gram([1, 0, 0], [0, 1, 0], [-1, -1, 0], [0, 0, 1]),  # l3 = -l1 - l2
    "near aligned l2 ~ l1 (1e-2)": _unit(gram(_A, _A + 1e-2 * _B, _C, _D)),
    "near aligned l3 ~ l1 (1e-3)": _unit(gram(_A, _B, _A + 1e-3 * _D, _D)),
    "near antipodal l4 ~ -l2 (1e-2)": _unit(gram(_A, _B, _C, -_B + 1e-2 * _C)),
    "near aligned l2 ~ l1 (1e-4)": _unit(gram(_A, _A + 1e-4 * _B, _C, _D)),
    "near aligned, two pairs (1e-4)": _unit(gram(_A, _B, _A + 1e-4 * _C, _B - 1e-4 * _D)),
    "near rank 3 (1e-4)": _unit(gram(_A, _B, _C, _A + _B - _C + 1e-4 * _D)),
    "tiny scale": 1e-8 * _random_cov(),
    "huge scale": 1e8 * _random_cov(),
}


@pytest.mark.parametrize("name", list(REFERENCE_CASES))
def test_relu_i4_against_reference(name):
    C = REFERENCE_CASES[name]
    ref = ref_relu_i4(C)
    got = float(i4(C))
    scale = math.sqrt(max(C[2, 2] * C[3, 3], 0.0))
    assert math.isfinite(got)
    assert abs(got - ref) <= 1e-12 * abs(ref) + 1e-14 * scale, (name, got, ref, (got - ref) / max(abs(ref), 1e-300))


def test_reference_itself_against_closed_forms():
    """The reference reproduces factorised and fully aligned cases known in closed form."""
    R = _unit(_random_cov())
    block = R.copy()
    block[:2, 2:] = block[2:, :2] = 0.0  # (l1, l2) independent of (l3, l4)
    expected = _q(block[0, 1]) * relu_relu(block[2:, 2:])
    assert abs(ref_relu_i4(block) - expected) <= 1e-12 * expected
    C = gram(_A, _B, _A, _B)  # l3 = l1, l4 = l2: step(l1) step(l2) relu(l1) relu(l2) = relu(l1) relu(l2)
    assert abs(ref_relu_i4(C) - relu_relu(C[:2, :2])) <= 1e-12 * relu_relu(C[:2, :2])


# ---------------------------------------------------------------------------------------------------------------
# Closed forms at special covariances, exact zeros, invariances, batching
# ---------------------------------------------------------------------------------------------------------------


def test_factorised_blocks():
    """(l1, l2) independent of (l3, l4): I4 = P(l1 > 0, l2 > 0) E[relu(l3) relu(l4)]."""
    for _ in range(5):
        C = _random_cov()
        C[:2, 2:] = C[2:, :2] = 0.0
        expected = _q(C[0, 1] / math.sqrt(C[0, 0] * C[1, 1])) * relu_relu(C[2:, 2:])
        assert abs(float(i4(C)) - expected) <= 1e-12 * expected


def test_student_equals_teacher():
    """l3 = a l1, l4 = b l2 (a, b > 0): I4 = a b E[relu(l1) relu(l2)]."""
    for a, b in ((1.0, 1.0), (2.0, 0.5), (3.0, 7.0)):
        C = gram(_A, _B, a * _A, b * _B)
        expected = a * b * relu_relu(C[:2, :2])
        assert abs(float(i4(C)) - expected) <= 1e-12 * expected


def test_all_aligned():
    """l_i = c_i z with c_i > 0: I4 = c3 c4 E[step(z) z^2] = c3 c4 / 2."""
    C = gram([1.0], [0.5], [2.0], [3.0])
    assert abs(float(i4(C)) - 3.0) <= 1e-13 * 3.0


@pytest.mark.parametrize(("i", "j"), [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)])
def test_antipodal_pairs_vanish(i, j):
    rows = [_A, _B, _C, _D]
    rows[j] = -2.0 * rows[i]
    assert float(i4(gram(*rows))) == 0.0


@pytest.mark.parametrize("k", range(4))
def test_zero_variance_vanishes(k):
    rows = [_A, _B, _C, _D]
    rows[k] = _ZERO
    assert float(i4(gram(*rows))) == 0.0


def test_scaling_and_permutations():
    for _ in range(5):
        C = _random_cov()
        base = float(i4(C))
        D = np.diag([0.25, 4.0, 2.0, 0.5])  # steps are scale free, relus are homogeneous
        assert abs(float(i4(D @ C @ D)) - base) <= 1e-12 * base
        for perm in ([1, 0, 2, 3], [0, 1, 3, 2], [1, 0, 3, 2]):
            P = np.eye(4)[perm]
            assert abs(float(i4(P @ C @ P.T)) - base) <= 1e-12 * base


def test_bounds_and_finiteness_on_random_degenerate_covariances():
    """0 <= I4 <= sqrt(C33 C44) / 2 and finite, for random ranks, alignments and signs."""
    rng = np.random.default_rng(7)
    evaluated = 0
    for _ in range(200):
        V = rng.standard_normal((4, int(rng.integers(1, 5))))
        if rng.random() < 0.5:
            i, j = rng.choice(4, 2, replace=False)
            V[j] = rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 2.0) * V[i] + rng.choice([0.0, 1e-9, 1e-3]) * V[j]
        C = V @ V.T
        try:
            got = float(i4(C))
        except ValueError:  # the covariance check may reject some nearly singular inputs; not this kernel's concern
            continue
        evaluated += 1
        assert math.isfinite(got)
        assert -1e-15 <= got <= 0.5 * math.sqrt(C[2, 2] * C[3, 3]) * (1 + 1e-12)
    assert evaluated >= 150


def test_batched_shapes():
    Cs = np.stack([REFERENCE_CASES[k] for k in ("generic", "aligned l3 = 2 l1", "rank 2", "zero row 3",
                                               "antipodal l4 = -l2", "student = teacher")])
    single = np.array([float(i4(C)) for C in Cs])
    out = i4(Cs.reshape(2, 3, 4, 4))
    assert out.shape == (2, 3)
    np.testing.assert_array_equal(out.reshape(-1), single)


def test_continuity_towards_alignment():
    """Nearly aligned pairs converge to the aligned value, at the sqrt(1 - |rho|) rate of the kernel."""
    for i, j in ((0, 1), (0, 2), (2, 3)):
        rows = [_A, _B, _C, _D]
        rows[j] = 2.0 * rows[i]
        aligned = float(i4(gram(*rows)))
        noise = np.array([1.0, -2.0, 0.5, 1.0, -1.0])
        for eps in (1e-2, 1e-3, 3e-4):
            rows_e = list(rows)
            rows_e[j] = rows[j] + eps * noise
            near = float(i4(gram(*rows_e)))
            assert abs(near - aligned) <= 20 * eps * math.sqrt(gram(*rows)[2, 2] * gram(*rows)[3, 3])


# ---------------------------------------------------------------------------------------------------------------
# Monte Carlo (1e7 samples, one shared Gaussian stream, generated in chunks)
# ---------------------------------------------------------------------------------------------------------------

MC_SAMPLES = 10_000_000
MC_CHUNK = 500_000
MC_COVS = {
    "generic": _random_cov(),
    "unequal scales": np.diag([2.0, 0.3, 1.5, 0.7]) @ _unit(_random_cov(5)) @ np.diag([2.0, 0.3, 1.5, 0.7]),
    "correlated": _unit(_random_cov(2) + 0.1 * _random_cov(4)),
    "rank 3, l3 = 2 l1": gram(_A[:3], _B[:3], 2 * _A[:3], _D[:3]),
}


def _factor(C: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh(C)
    return V * np.sqrt(np.clip(w, 0.0, None))  # valid for singular C too


@pytest.fixture(scope="module")
def monte_carlo():
    """Sample means and standard errors of step step relu3 relu4, step step l3 relu4 and step step l3 l4, for every
    covariance of MC_COVS from one stream of standard normals (generated in chunks of MC_CHUNK)."""
    factors = {k: _factor(C) for k, C in MC_COVS.items()}
    sums = {k: np.zeros((2, 3)) for k in MC_COVS}
    rng = np.random.default_rng(98765)
    for _ in range(MC_SAMPLES // MC_CHUNK):
        Z = rng.standard_normal((4, MC_CHUNK))
        for k, L in factors.items():
            x1, x2, x3, x4 = L @ Z
            lin = np.where((x1 > 0) & (x2 > 0), x3, 0.0)  # step step l3
            for m, v in enumerate((np.maximum(lin, 0.0) * np.maximum(x4, 0.0), lin * np.maximum(x4, 0.0), lin * x4)):
                sums[k][0, m] += v.sum()
                sums[k][1, m] += v @ v
    out = {}
    for k, s in sums.items():
        mean = s[0] / MC_SAMPLES
        se = np.sqrt(np.maximum(s[1] / MC_SAMPLES - mean**2, 0.0) / MC_SAMPLES)
        out[k] = (mean, se)
    return out


def _assert_mc(value: float, mean: float, se: float, what: str) -> None:
    assert abs(value - mean) <= 5.0 * se + 1e-12 * (1.0 + abs(mean)), (
        f"{what}: {value!r} vs Monte Carlo {mean!r} +- {se!r} ({(value - mean) / max(se, 1e-300):.1f} SE)")


@pytest.mark.parametrize("name", list(MC_COVS))
def test_relu_i4_against_monte_carlo(monte_carlo, name):
    mean, se = monte_carlo[name]
    _assert_mc(float(i4(MC_COVS[name])), mean[0], se[0], f"I4(relu) {name}")


def _optional(act_a: str, act_b: str, C: np.ndarray):
    try:
        return kernels.i4("relu", act_a, act_b, np.asarray(C, dtype=float))
    except NotImplementedError:
        pytest.skip(f"i4('relu', {act_a!r}, {act_b!r}) is not provided")


@pytest.mark.parametrize("name", list(MC_COVS))
def test_linear_teacher_kernels_against_monte_carlo(monte_carlo, name):
    """E[step step l3 relu(l4)] and E[step step l3 l4] (relu student, linear teacher), closed forms."""
    mean, se = monte_carlo[name]
    _assert_mc(float(_optional("linear", "relu", MC_COVS[name])), mean[1], se[1], f"I4(relu; linear, relu) {name}")
    _assert_mc(float(_optional("linear", "linear", MC_COVS[name])), mean[2], se[2], f"I4(relu; linear, linear) {name}")


@pytest.mark.parametrize("name", list(REFERENCE_CASES))
def test_relu_i4_odd_part_is_the_linear_kernel(name):
    """relu(x) - relu(-x) = x: I4(C) - I4(C with l4 -> -l4) = E[step step relu(l3) l4] (a closed form), which ties the
    quadrature to Stein's lemma; and likewise E[step step l3 relu(l4)] minus its flip = E[step step l3 l4]."""
    C = REFERENCE_CASES[name]
    F = np.diag([1.0, 1.0, 1.0, -1.0])
    scale = math.sqrt(C[2, 2] * C[3, 3])
    odd = float(i4(C)) - float(i4(F @ C @ F))
    assert abs(odd - float(_optional("relu", "linear", C))) <= 1e-12 * scale
    odd_lin = float(_optional("linear", "relu", C)) - float(_optional("linear", "relu", F @ C @ F))
    assert abs(odd_lin - float(_optional("linear", "linear", C))) <= 1e-12 * scale
