"""tl.landscape.orbit: the rescaling orbit of homogeneous units (canonical point, flat directions, split spectra)
and its use in refine / classify / classify_batch / continue_family."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer.landscape import FixedPointSpace, SubspaceProblem
from twolayer.landscape.critical import CriticalPoint, flat_gradient
from twolayer.landscape.multistart import classify_batch

L = tl.landscape
X6 = np.array([0.9867, -0.05041, -0.60151, 0.30801, 0.22452, 1.0, 1.0])  # ΔS_5 at k = 6, with a (see test_landscape)


@pytest.fixture(scope="module")
def spurious6_readout() -> CriticalPoint:
    """The k = 6 ΔS_5 spurious minimum with the second layer trained (canonical)."""
    prob = SubspaceProblem(FixedPointSpace((5, 1), train_readout=True))
    x, gn, ok = prob.solve(X6)
    assert ok
    return prob.critical_point(x)


def orbit_point(net: tl.Network, c: np.ndarray, p: int = 1) -> tl.Network:
    return net.with_weights(net.W * c[:, None], net.a / c**p)


def test_canonical_is_the_balanced_least_norm_point_with_the_same_risk():
    rng = np.random.default_rng(0)
    for act, p in (("relu", 1), ("linear", 1), ("quadratic", 2)):
        net = tl.Network(rng.standard_normal((4, 4)), rng.standard_normal(4), act, scaling="none")
        can = L.canonical(net, train_readout=True)
        np.testing.assert_allclose(np.sum(can.W**2, axis=1), p * can.a**2, rtol=1e-14)
        assert np.all(np.sign(can.a) == np.sign(net.a))
        # on the orbit: w_i / |w_i| and a_i |w_i|^p are unchanged
        np.testing.assert_allclose(can.W / np.linalg.norm(can.W, axis=1)[:, None],
                                   net.W / np.linalg.norm(net.W, axis=1)[:, None], rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(can.a * np.linalg.norm(can.W, axis=1) ** p,
                                   net.a * np.linalg.norm(net.W, axis=1) ** p, rtol=1e-14)
        t = tl.Network(np.eye(4), None, act, scaling="none")
        assert tl.population.risk(can, t) == pytest.approx(tl.population.risk(net, t), rel=1e-13)
        # least norm on the orbit: every other point of it is longer
        for c in (0.9, 1.1):
            other = orbit_point(can, np.full(4, c), p)
            assert np.sum(other.W**2) + np.sum(other.a**2) > np.sum(can.W**2) + np.sum(can.a**2)
        # the same canonical point from anywhere on the orbit
        again = L.canonical(orbit_point(net, rng.uniform(0.2, 5.0, 4), p), train_readout=True)
        np.testing.assert_allclose(again.W, can.W, rtol=1e-14, atol=1e-15)
        np.testing.assert_allclose(again.a, can.a, rtol=1e-14)


def test_canonical_step_units_have_unit_rows_and_no_orbit_is_a_no_op():
    W = np.array([[3.0, 4.0], [0.0, 0.5]])
    step = tl.Network(W, None, "step", scaling="none")
    can = L.canonical(step, train_readout=False)
    np.testing.assert_allclose(np.linalg.norm(can.W, axis=1), 1.0, rtol=1e-15)
    np.testing.assert_array_equal(can.a, step.a)
    for act, tr in (("erf", True), ("relu", False), ("linear", False)):
        net = tl.Network(W, None, act, scaling="none")
        assert L.canonical(net, train_readout=tr) is net
        assert L.orbit_tangents(net, train_readout=tr).shape == (6 if tr else 4, 0)
    assert L.homogeneity_degree("step") == 0 and L.homogeneity_degree("quadratic") == 2
    with pytest.raises(ValueError, match="activation"):
        L.homogeneity_degree("swish")


def test_canonical_weights_leave_degenerate_units_and_batches_alone():
    W = np.array([[[0.0, 0.0], [2.0, 0.0]], [[1.0, 1.0], [8.0, 0.0]]])
    a = np.array([[1.0, 0.0], [2.0, 2.0]])
    Wc, ac, c = L.canonical_weights(W, a, "relu", True)
    np.testing.assert_array_equal(c[0], [1.0, 1.0])  # w = 0 and a = 0: the orbit has no least-norm point
    np.testing.assert_allclose(np.linalg.norm(Wc[1], axis=1), np.abs(ac[1]), rtol=1e-15)
    with pytest.raises(ValueError, match="W, a"):
        L.canonical_weights(W, a[:, :1], "relu", True)
    # |a| / |w| beyond the double range: the factors in logarithms
    Wc, ac, c = L.canonical_weights(np.array([[1e-300, 0.0], [0.0, 1e300]]), np.array([1e300, -1e-300]), "relu",
                                    True)
    np.testing.assert_allclose(np.abs(Wc).max(axis=1), [1.0, 1.0], rtol=1e-12)
    np.testing.assert_allclose(ac, [1.0, -1.0], rtol=1e-12)


def test_tangents_are_flat_directions_of_the_hessian_at_a_critical_point(spurious6_readout):
    cp = spurious6_readout
    teacher = L.identity_teacher(6)
    T = L.orbit_tangents(cp.student, train_readout=True)
    assert T.shape == (42, 6)
    np.testing.assert_allclose(T.T @ T, np.eye(6), atol=1e-15)
    H = tl.population.hessian(cp.student, teacher, train_readout=True)
    assert np.max(np.abs(H @ T)) < 1e-11  # analytic: H t_i = -(gradient terms) = 0 at a critical point
    # the risk is constant along the orbit (finite differences of the flat direction vanish to rounding)
    r0 = tl.population.risk(cp.student, teacher)
    for i in range(6):
        c = np.ones(6)
        c[i] = 1.3
        assert tl.population.risk(orbit_point(cp.student, c), teacher) == pytest.approx(r0, rel=1e-13)
    # flat + transverse together are the full spectrum
    transverse, flat = L.split_spectrum(H, T)
    np.testing.assert_allclose(np.sort(np.concatenate([flat, transverse])), np.linalg.eigvalsh(H), atol=1e-12)
    np.testing.assert_allclose(flat, cp.flat_eigenvalues, atol=1e-15)
    np.testing.assert_allclose(transverse, cp.eigenvalues, atol=1e-15)


def test_spectrum_is_orbit_independent_after_canonicalisation(spurious6_readout):
    cp = spurious6_readout
    teacher = L.identity_teacher(6)
    assert cp.kind == "spurious minimum" and cp.eigenvalues.size == 36
    assert np.max(np.abs(cp.flat_eigenvalues)) < 1e-11
    assert L.isotropy(cp.student.W, a=cp.student.a).description == "ΔS_5"
    rng = np.random.default_rng(1)
    raw_spectra = []
    for _ in range(2):
        moved = orbit_point(cp.student, rng.uniform(0.3, 3.0, 6))
        raw_spectra.append(np.linalg.eigvalsh(tl.population.hessian(moved, teacher, train_readout=True)))
        assert L.isotropy(moved.W, a=moved.a).description == "1"  # what the raw point reports
        gn = float(np.linalg.norm(flat_gradient(moved, teacher, True)))
        other = CriticalPoint.classified(moved, teacher, raw_spectra[-1], gn, True)
        np.testing.assert_allclose(other.eigenvalues, cp.eigenvalues, rtol=0, atol=1e-10)
        assert np.max(np.abs(other.flat_eigenvalues)) < 1e-10
        assert (other.kind, other.index, other.nullity) == (cp.kind, cp.index, cp.nullity)
        assert L.isotropy(other.student.W, a=other.student.a).description == "ΔS_5"
        assert L.classify(moved, teacher, train_readout=True) == (cp.index, cp.nullity, cp.kind)
        refined = L.refine(moved, teacher, train_readout=True)
        np.testing.assert_allclose(refined.eigenvalues, cp.eigenvalues, rtol=0, atol=1e-10)
    assert np.max(np.abs(raw_spectra[0] - raw_spectra[1])) > 1e-2  # the raw spectra do depend on the point


def test_global_minimum_off_the_balanced_point_gets_full_isotropy():
    k = 5
    teacher = L.identity_teacher(k)
    c = np.array([2.0, 0.5, 3.0, 0.7, 1.6])
    student = tl.Network(np.diag(c) + 1e-6, 1 / c, "relu", scaling="none")
    cp = L.refine(student, teacher, train_readout=True)
    assert cp.kind == "global minimum" and cp.converged
    np.testing.assert_allclose(cp.student.W, np.eye(k), atol=1e-12)
    np.testing.assert_allclose(cp.student.a, np.ones(k), atol=1e-12)
    assert L.isotropy(cp.student.W, a=cp.student.a).description == f"ΔS_{k}"
    assert np.max(np.abs(cp.flat_eigenvalues)) < 1e-12 and cp.eigenvalues.size == k * k
    out = classify_batch(np.stack([np.diag(c), np.diag(c[::-1])]), np.stack([1 / c, 1 / c[::-1]]), teacher,
                         train_readout=True)
    assert out["isotropy"] == [f"ΔS_{k}"] * 2 and out["kind"] == ["global minimum"] * 2
    np.testing.assert_allclose(out["W"], np.stack([np.eye(k)] * 2), atol=1e-14)


def test_isotropy_of_the_orbit_with_an_activation():
    c = np.array([2.0, 0.5, 3.0])
    W, a = np.diag(c), 1 / c
    assert L.isotropy(W, a=a).description == "1"
    assert L.isotropy(W, a=a, activation="relu").description == "ΔS_3"
    assert L.isotropy(W, a=a, activation="erf").description == "1"  # no orbit: as it is
    assert L.isotropy(W, activation="step").description == "ΔS_3"  # step units: rows rescale alone
    assert L.isotropy(W, activation="relu").description == "1"  # a fixed: no orbit
    with pytest.raises(ValueError, match="activation"):
        L.isotropy(W, a=a, activation="swish")


def test_multistart_and_families_with_trained_readout_report_the_orbits_isotropy(spurious6_readout):
    res = L.multistart(4, 6, seed=0, train_readout=True)
    assert res.isotropy == ["ΔS_4"] * 6
    np.testing.assert_allclose(np.sum(res.W**2, axis=2), res.a**2, rtol=1e-12)
    x6 = FixedPointSpace((5, 1), True).coordinates(spurious6_readout.student.W, spurious6_readout.student.a)
    fam = L.continue_family(lambda k: (k - 1, 1), [6, 7], x6 * np.r_[np.full(5, 2.0), 0.5, 0.5], train_readout=True)
    assert [p.isotropy for p in fam] == ["ΔS_5", "ΔS_6"]
    np.testing.assert_allclose(fam[0].point.eigenvalues, spurious6_readout.eigenvalues, rtol=0, atol=1e-10)
    W, a = FixedPointSpace((5, 1), True).matrix(fam[0].x)
    np.testing.assert_allclose(W, fam[0].point.student.W, atol=1e-15)


def test_step_units_split_off_one_flat_direction_per_unit():
    rng = np.random.default_rng(3)
    teacher = tl.Network(np.eye(3), None, "step", scaling="none")
    student = tl.Network(np.eye(3) + 0.3 * rng.standard_normal((3, 3)), None, "step", scaling="none")
    can, transverse, flat = L.orbit.orbit_spectrum(student, teacher, False)
    H = tl.population.hessian(can, teacher, train_readout=False)
    T = L.orbit_tangents(can, False)
    # away from a critical point H t_i = -g_i (degree 0): the flat block is t^T H t = -t . g_i / |w_i|
    g = flat_gradient(can, teacher, False)
    np.testing.assert_allclose(np.diag(T.T @ H @ T), -(T * g[:, None]).sum(axis=0), atol=1e-12)
    assert transverse.size == 6 and flat.size == 3
    assert L.critical.symmetry_nullity(student, False) == 3


def test_split_spectrum_validates():
    with pytest.raises(ValueError, match="orthonormal"):
        L.split_spectrum(np.eye(2), np.ones((2, 1)))
    with pytest.raises(ValueError, match="H, tangents"):
        L.split_spectrum(np.eye(2), np.ones((3, 1)))
