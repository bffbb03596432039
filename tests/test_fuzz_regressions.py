"""Regression tests for the defects the property-based fuzzing (test_fuzz.py) found, one named case each."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl


def test_overflowing_risk_stops_the_integration_as_diverged() -> None:
    # finite overlaps (within the divergence bound, 1e8 x their own scale) whose quadratic-teacher risk overflows:
    # v^2 P^2 ~ 1e360
    ov = tl.Overlaps(np.eye(1), np.zeros((1, 1)), 1e90 * np.eye(1), np.ones(1), 1e90 * np.ones(1))
    for method in ("euler", "adaptive"):
        tr = tl.ode.integrate(ov, "linear", "quadratic", lr=0.1, t_max=1.0, method=method)
        assert tr.status == "diverged" and "excess risk is not finite" in tr.message
        assert tr.stop_time == 0.0 and len(tr) == 0


def test_sigma_keeps_the_shape_of_its_input() -> None:
    assert np.shape(tl.activations.sigma("relu", 2.0)) == ()
    assert tl.activations.sigma("relu", -2.0) == 0.0
    assert tl.activations.derivative("erf", np.zeros((2, 3))).shape == (2, 3)


def test_covariance_overflow_is_refused() -> None:
    with pytest.raises(ValueError, match="rows, scale: the covariance Gram / scale exceeds the double range"):
        tl.kernels.covariance([1e20], scale=1e-300)


def test_network_outputs_that_overflow_are_refused() -> None:
    net = tl.Network(np.array([[1e300]]), np.ones(1), "linear", scaling="none")
    with pytest.raises(ValueError, match="X: the outputs on these inputs exceed the double range"):
        net(np.array([[1e100]]))


def test_teacher_overlaps_that_overflow_are_refused() -> None:
    student = tl.Network(np.ones((1, 1)), np.ones(1), "linear")
    teacher = tl.Network(np.array([[1e160]]), np.ones(1), "linear")
    with pytest.raises(ValueError, match="teacher.W: weights out of range"):
        tl.Overlaps.from_networks(student, teacher)
    with pytest.raises(ValueError, match="teacher.W: weights out of range"):
        tl.sgd.simulate(student, teacher, lr=0.1, t_max=1.0)


def test_procrustes_at_extreme_scales() -> None:
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((3, 2)), rng.standard_normal((3, 2))
    P = tl.landscape.procrustes(A, B)
    np.testing.assert_allclose(tl.landscape.procrustes(1e200 * A, 1e200 * B), P, atol=1e-14)
    d = tl.landscape.procrustes_distance(A, B)
    assert tl.landscape.procrustes_distance(1e160 * A, 1e160 * B) == pytest.approx(1e160 * d, rel=1e-12)


def test_spectrum_symmetry_is_judged_at_the_matrix_scale() -> None:
    with pytest.raises(ValueError, match="H: expected a symmetric matrix"):
        tl.landscape.spectrum(np.array([[0.0, 1e-300], [0.0, 0.0]]))
    assert tl.landscape.spectrum(1e-300 * np.eye(2)) == [(pytest.approx(1e-300, rel=1e-12), 2)]


def test_relu_reference_refuses_zero_rows_and_overflow() -> None:
    with pytest.raises(ValueError, match="W: rows must be non-zero"):
        tl.landscape.numpy_relu_loss_grad(np.zeros((1, 1)), np.ones((1, 1)))
    with pytest.raises(ValueError, match="W, V: the loss or its gradient exceeds the double range"):
        tl.landscape.numpy_relu_loss_grad(np.ones((1, 1)), 1e160 * np.ones((1, 1)))


def test_grid_axes_are_checked_like_per_run_values() -> None:
    with pytest.raises(ValueError, match="lr: expected a 1-d array of grid values"):
        tl.sgd.grid(seeds=1, lr=1.0)
    with pytest.raises(ValueError, match=r"lr\[0\]: expected a finite number > 0"):
        tl.sgd.grid(seeds=1, lr=[0.0])


def test_refine_at_huge_gradients_has_finite_norms() -> None:
    # a gradient of ~1e256: its squared entries overflow, its norm does not
    student = tl.Network(np.array([[1.0]]), np.array([1.46951257e128]), "linear")
    teacher = tl.Network(np.array([[0.0]]), np.array([0.0]), "linear")
    with np.errstate(all="raise"):
        cp = tl.landscape.refine(student, teacher, tol=1.0, train_readout=False, max_iter=0)
    assert np.isfinite(cp.grad_norm) and cp.grad_norm > 1e255
    # with the second layer trained, refine works at the canonical point of the rescaling orbit (|w| = |a| =
    # 1.2e64), where the gradient is ~2.5e192: still finite, and the norm of the gradient there
    with np.errstate(all="raise"):
        cp = tl.landscape.refine(student, teacher, tol=1.0, train_readout=True, max_iter=0)
    g = tl.landscape.critical.flat_gradient(cp.student, teacher, True)
    assert np.isfinite(cp.grad_norm) and cp.grad_norm == pytest.approx(np.max(np.abs(g)) * np.sqrt(2), rel=1e-12)
    assert cp.student.W[0, 0] == pytest.approx(cp.student.a[0], rel=1e-15)
