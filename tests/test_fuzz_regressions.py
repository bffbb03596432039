"""Regression tests for the defects the property-based fuzzing (test_fuzz.py) found, one named case each."""

from __future__ import annotations

from typing import Any

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


def test_from_function_checks_n_also_with_dt() -> None:
    # n = 1 was accepted whenever dt was given (n then sets nothing, but a bad value is still a bad argument)
    with pytest.raises(ValueError, match="n: expected an integer"):
        tl.schedules.from_function(lambda t: 1.0 / (1.0 + t), t_max=1.0, dt=0.5, n=1)
    with pytest.raises(TypeError, match="n: expected an integer"):
        tl.schedules.from_function(lambda t: 1.0 / (1.0 + t), t_max=1.0, dt=0.5, n="5")  # type: ignore[arg-type]
    assert tl.schedules.from_function(lambda t: 1.0 / (1.0 + t), t_max=1.0, dt=0.5).values.size == 3


def test_canonical_quadratic_rescaling_does_not_overflow() -> None:
    # c ~ 1.1e200 on the orbit (w, a) -> (c w, a / c^2): c^2 overflows, a / c^2 ~ 7.9e-101 does not
    with np.errstate(all="raise"):
        net = tl.landscape.canonical(tl.Network(np.array([[1e-300, 0.0]]), np.array([1e300]), "quadratic"), True)
    c = net.W[0, 0] / 1e-300
    assert c == pytest.approx(2 ** (1 / 6) * 1e200, rel=1e-12)  # computed in logarithms
    assert net.a[0] * c * c == pytest.approx(1e300, rel=1e-14) and net.W[0, 0] / net.a[0] == pytest.approx(2**0.5)


def test_large_batch_map_stops_where_the_risk_overflows() -> None:
    # a_i a_k = 1e600 overflows against the zero kernels of Q = 0 (inf * 0); with a = 1e150 the same state is fine
    Z = np.zeros((1, 1))
    for act in ("erf", "relu", "linear"):
        tr = tl.large_batch.iterate(tl.Overlaps(Z, Z, Z, np.array([1e300]), np.zeros(1)), act, act, lr=1.0,
                                    batch_ratio=1.0, n_steps=1)
        assert tr.status == "diverged" and "excess risk is not finite" in tr.message
        assert len(tr) == 0 and tr.stop_time == 0.0
        tr = tl.large_batch.iterate(tl.Overlaps(Z, Z, Z, np.array([1e150]), np.zeros(1)), act, act, lr=1.0,
                                    batch_ratio=1.0, n_steps=1)
        assert tr.status == "completed" and tr.risk.tolist() == [0.0, 0.0]


def test_layerwise_after_a_diverged_first_phase() -> None:
    Z = np.zeros((1, 1))
    with pytest.raises(ValueError, match="overlaps: the first phase diverged at its start"):
        tl.large_batch.layerwise(tl.Overlaps(Z, Z, Z, np.array([1e300]), np.zeros(1)), "erf", "erf", lr=1.0,
                                 batch_ratio=1.0, n_steps=1)
    # a first phase that grows past the divergence bound: no readout, the last recorded state
    ov = tl.Overlaps(np.eye(1), np.zeros((1, 1)), np.eye(1), np.ones(1), np.ones(1))
    res = tl.large_batch.layerwise(ov, "linear", "linear", lr=50.0, batch_ratio=1.0, n_steps=50)
    assert res.first.status == "diverged" and 1 <= len(res.first) < 51
    np.testing.assert_array_equal(res.a, res.first.a[-1])
    np.testing.assert_array_equal(res.overlaps.Q, res.first.Q[-1])
    assert res.risk == res.first.risk[-1] and np.isfinite(res.risk)


def test_simulate_layerwise_reports_a_diverged_sgd_phase() -> None:
    student = tl.Network(np.array([[1.0, 0.0]]), np.ones(1), "linear")
    teacher = tl.Network(np.array([[0.0, 1.0]]), np.ones(1), "linear")
    res = tl.large_batch.simulate_layerwise(student, teacher, lr=100.0, batch_size=1, n_steps=50, seed=0)
    assert res.first.status == "diverged" and len(res.first) >= 1
    np.testing.assert_array_equal(res.a, res.first.a[-1])
    assert res.risk == res.first.risk[-1] and np.isfinite(res.risk)
    with pytest.raises(ValueError, match="student: the first phase diverged at its start"):
        tl.large_batch.simulate_layerwise(tl.Network(np.array([[1e160]]), np.zeros(1), "linear"),
                                          tl.Network(np.zeros((1, 1)), np.zeros(1), "linear"), lr=1.0,
                                          batch_size=1, n_steps=1)


def test_ridge_readout_rechecks_the_overlaps() -> None:
    ov = tl.Overlaps(2 * np.eye(1), 2 * np.eye(1), 2 * np.eye(1), np.zeros(1), np.ones(1))
    ov.v[0] = np.inf
    with pytest.raises(ValueError, match="overlaps: v"):
        tl.large_batch.ridge_readout(ov, "linear", "linear")
    with pytest.raises(TypeError, match="overlaps: expected a twolayer.Overlaps, got NoneType"):
        tl.large_batch.ridge_readout(None, "linear", "linear")  # type: ignore[arg-type]


def test_scan_load_refuses_an_empty_path_and_a_directory(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="path: expected the path of a TOML file, got an empty string"):
        tl.scan.load("")
    with pytest.raises(ValueError, match="path: expected a TOML file, got the directory"):
        tl.scan.load(tmp_path)


def test_scan_initial_conditions_check_their_config() -> None:
    with pytest.raises(ValueError, match=r"config.K: expected an integer in \[1"):
        tl.scan.initial_overlaps({"K": 0, "M": 1, "d": 10, "seed": 0})
    with pytest.raises(ValueError, match=r"config.K: expected an integer in \[1"):
        tl.scan.initial_networks({"K": -1, "M": 1, "d": 10, "seed": 0})
    for fn in (tl.scan.initial_overlaps, tl.scan.initial_networks):
        with pytest.raises(TypeError, match="config: expected a dict of parameters, got NoneType"):
            fn(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="config.init"):
        tl.scan.initial_networks({"init": "plateau"})
