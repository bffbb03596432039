"""Custom activations at rank-deficient covariances (issue 23): a repeated field (l_i = l_k) in the generic I4 lattice
(K + M > 4) must not leave a spurious conditional variance in the Cholesky factor (smooth::psd_cholesky). Rounding used
to leave l4 | (l1, l2) ~ N(0, 1e-34) with the mean 0 at the lattice's centre, where a custom table's absolute rounding
(~1e-17, tanh's own values are exact there) is the whole integrand: the inner rule could not certify it and the
kernel failed where the built-in 'tanh' gave a result."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
import twolayer as tl
from twolayer import kernels
from twolayer.activations import custom

MYTANH = custom("mytanh", np.tanh)


def _omega(seed: int, K: int = 3, M: int = 2, d: int = 50) -> np.ndarray:
    """The (K + M) x (K + M) covariance of the student and teacher fields of random weights."""
    st, te = tl.networks.teacher_student(K, M, d, activation="tanh", seed=seed)
    o = tl.overlaps.Overlaps.from_networks(st, te)
    return np.block([[o.Q, o.M], [o.M.T, o.P]])


def _rank2(seed: int = 5) -> np.ndarray:
    """C of the fields (l0, l0, l1, l0): rank 2."""
    t = (0, 0, 1, 0)
    return _omega(seed)[np.ix_(t, t)]


def _reference(C: np.ndarray, n: int) -> float:
    """E[tanh'(l1)^2 tanh(l3) tanh(l1)] at the rank-2 C of _rank2 by n x n Gauss-Hermite: l1 = sqrt(a) X,
    l3 = b / sqrt(a) X + sqrt(c - b^2 / a) Y."""
    a, b, c = C[0, 0], C[0, 2], C[2, 2]
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / np.sqrt(2.0 * np.pi)
    X, Y = np.meshgrid(x, x, indexing="ij")
    l1 = np.sqrt(a) * X
    l3 = b / np.sqrt(a) * X + np.sqrt(c - b * b / a) * Y
    return float(np.sum(np.outer(w, w) / np.cosh(l1) ** 4 * np.tanh(l1) * np.tanh(l3)))


def test_i4_at_a_repeated_field_against_gauss_hermite():
    C = _rank2()
    ref, coarser = _reference(C, 300), _reference(C, 240)
    assert abs(ref - coarser) <= 1e-14 * abs(ref)  # the reference's own error (tanh's poles: slow convergence)
    for act in ("tanh", MYTANH):
        assert abs(kernels.i4(act, act, act, C) - ref) <= 1e-12 * abs(ref)


@pytest.mark.slow
def test_i4_at_a_repeated_field_against_mpmath():
    C = _rank2()
    a, b, c = (mp.mpf(float(v)) for v in (C[0, 0], C[0, 2], C[2, 2]))
    with mp.workdps(18):
        sa, s = mp.sqrt(a), mp.sqrt(c - b * b / a)
        pts = mp.linspace(-10, 10, 21)

        def phi(y):
            return mp.exp(-y * y / 2) / mp.sqrt(2 * mp.pi)

        def inner(m):
            return mp.quad(lambda y: mp.tanh(m + s * y) * phi(y), pts, method="gauss-legendre")

        ref = float(mp.quad(lambda x: mp.sech(sa * x) ** 4 * mp.tanh(sa * x) * inner(b / sa * x) * phi(x), pts,
                            method="gauss-legendre"))
    for act in ("tanh", MYTANH):
        assert abs(kernels.i4(act, act, act, C) - ref) <= 1e-12 * abs(ref)


def test_i4_repeated_fields_match_tanh():
    """I4 index tuples of K = 3, M = 2 with repeated fields (the ODE's, seed 5: (i, i, j, i) and others used to
    fail), and the rank-2 C with one entry one ulp off (the rounding of an assembled covariance: it failed whatever
    the build's instruction level)."""
    Om = _omega(5)
    tuples = [(0, 0, 1, 0), (1, 1, 4, 1), (2, 2, 3, 2), (0, 1, 2, 0), (1, 2, 1, 3), (0, 0, 0, 4), (2, 0, 2, 2)]
    Cs = np.array([Om[np.ix_(t, t)] for t in tuples])
    C = _rank2()
    C[3, 2] = C[2, 3] = np.nextafter(C[2, 3], 1.0)
    Cs = np.concatenate([Cs, C[None]])
    ref = kernels.i4("tanh", "tanh", "tanh", Cs)
    np.testing.assert_allclose(kernels.i4(MYTANH, MYTANH, MYTANH, Cs), ref, rtol=1e-12, atol=1e-15 * np.abs(ref).max())


@pytest.mark.slow
@pytest.mark.parametrize("seed", [5, 6])
def test_online_rhs_k3_m2_matches_tanh(seed):
    st, te = tl.networks.teacher_student(3, 2, 50, activation="tanh", seed=seed)
    o = tl.overlaps.Overlaps.from_networks(st, te)
    out = {}
    for act in ("tanh", MYTANH):
        oo = tl.overlaps.Overlaps(o.Q, o.M, o.P, o.a, o.v, act, act)
        out[act] = np.concatenate([np.ravel(x) for x in tl.ode.rhs(oo, lr=0.5)])
    scale = np.abs(out["tanh"]).max()
    np.testing.assert_allclose(out[MYTANH], out["tanh"], rtol=0, atol=1e-12 * scale)


def test_custom_table_rounding_at_a_near_zero_variance_is_a_clear_error() -> None:
    """A covariance given directly with a variance ~1e-34 (no Cholesky in between): the custom table's absolute
    rounding is the whole integrand there, the certificate refuses, and the error says why (not only 'variance too
    large'). Built-in tanh, exact near 0, gives its value."""
    C = np.array([[0.747, -9.45e-18], [-9.45e-18, 1.2e-34]])
    assert abs(kernels.i2("tanh", "tanh", C)) < 1e-17
    with pytest.raises(ValueError, match="custom table's rounding dominating at a variance near 0"):
        kernels.i2(MYTANH, MYTANH, C)
