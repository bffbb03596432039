"""Biases in the data model (issue 23): Network.bias, Overlaps.bias/teacher_bias, and the rule that a function
which does not handle biases refuses nonzero ones with NotImplementedError naming the argument (never drops them)."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl


@pytest.fixture
def pair() -> tuple[tl.Network, tl.Network]:
    s, t = tl.networks.teacher_student(2, 2, 40, "erf", seed=0)
    return s.with_weights(s.W, bias=[0.3, -0.2]), t


def test_network_bias_enters_the_output() -> None:
    net = tl.Network([[1.0, 0.0], [0.0, 2.0]], [1.0, -1.0], "relu", scaling="none", bias=[0.5, -1.0])
    X = np.array([[1.0, 2.0], [-3.0, 0.25]])
    expected = np.maximum(X @ net.W.T + net.bias, 0.0) @ net.a
    np.testing.assert_array_equal(net(X), expected)
    assert net.has_bias
    assert not tl.Network(net.W).has_bias
    np.testing.assert_array_equal(tl.Network(net.W).bias, np.zeros(2))


def test_network_bias_validation() -> None:
    with pytest.raises(ValueError, match=r"bias: expected shape \(2,\)"):
        tl.Network(np.eye(2), bias=[1.0])
    with pytest.raises(ValueError, match="bias: entries must be finite"):
        tl.Network(np.eye(2), bias=[1.0, np.nan])
    net = tl.Network(np.eye(2), bias=[1.0, 0.0])
    net.bias[0] = np.inf  # arrays are mutable: the engines re-check
    with pytest.raises(ValueError, match=r"student\.bias: entries must be finite"):
        tl.networks.check_network(net, "student", biases=True)


def test_with_weights_and_random_keep_the_bias() -> None:
    net = tl.Network.random(3, 7, "tanh", seed=1, bias=[0.1, 0.2, 0.3])
    np.testing.assert_array_equal(net.with_weights(2 * net.W).bias, [0.1, 0.2, 0.3])
    assert not net.with_weights(net.W[:2], a=[1.0, 1.0]).has_bias  # other K: zeros unless given
    np.testing.assert_array_equal(net.with_weights(net.W, bias=[0.0, 0.0, 1.0]).bias, [0.0, 0.0, 1.0])


def test_overlaps_carry_the_biases(pair: tuple[tl.Network, tl.Network]) -> None:
    s, t = pair
    t = t.with_weights(t.W, bias=[0.0, 0.7])
    ov = tl.Overlaps.from_networks(s, t)
    np.testing.assert_array_equal(ov.bias, s.bias)
    np.testing.assert_array_equal(ov.teacher_bias, t.bias)
    assert ov.has_bias
    plain = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v)
    np.testing.assert_array_equal(plain.bias, np.zeros(2))
    assert not plain.has_bias
    with pytest.raises(ValueError, match=r"teacher_bias: expected shape \(2,\)"):
        tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, teacher_bias=[1.0])


def test_zero_biases_change_nothing() -> None:
    s, t = tl.networks.teacher_student(2, 2, 40, "erf", seed=3)
    s0 = s.with_weights(s.W, bias=np.zeros(2))
    assert tl.population.risk(s0, t) == tl.population.risk(s, t)
    a = tl.ode.integrate(tl.Overlaps.from_networks(s0, t), lr=0.5, t_max=2.0, n_records=5)
    b = tl.ode.integrate(tl.Overlaps.from_networks(s, t), lr=0.5, t_max=2.0, n_records=5)
    np.testing.assert_array_equal(a.risk, b.risk)


def test_landscape_entry_points_take_biases() -> None:
    """The landscape tools (critical points, orbits, saddles, flows, multistart, fixed-point subspaces) take networks
    with biases (issue 23; the numbers are checked in test_landscape_bias.py): the rescaling orbit carries trained
    biases and leaves out units with a fixed nonzero bias; a fixed-point subspace refuses a teacher with unequal
    biases by name (they break its permutation symmetry)."""
    s, t = tl.networks.teacher_student(2, 2, 2, "relu", seed=0)
    sb, tb = s.with_weights(s.W, bias=[0.3, -0.2]), t.with_weights(t.W, bias=[0.5, 0.0])
    step_s = tl.Network(s.W, s.a, "step")
    step_tb = tl.Network(t.W, t.a, "step", bias=[0.5, 0.0])
    L = tl.landscape
    assert L.classify(sb, t, train_readout=True)[2] in ("saddle", "spurious minimum", "degenerate")
    assert L.classify(s, tb, train_readout=True)[2] in ("saddle", "spurious minimum", "degenerate")
    assert isinstance(L.refine(s, tb, train_readout=True, max_iter=3), L.CriticalPoint)
    assert isinstance(L.saddle_search(s, tb, max_iter=3), L.CriticalPoint)
    assert L.step_gradient_flow(step_s, step_tb, [0.0, 1.0]).bias is not None
    assert L.alignment_flow(s, tb, [0.0, 1.0]).bias is not None
    tb_none = tl.Network(t.W, None, "relu", scaling="none", bias=[0.5, 0.0])
    assert L.multistart(2, 1, teacher=tb_none).bias.shape == (1, 2)
    assert L.canonical(sb, False) is sb  # relu without a trained readout: no orbit
    assert L.orbit_tangents(sb, True).shape == (6, 0)  # fixed nonzero biases: no orbit
    assert L.orbit_tangents(sb, True, True).shape == (8, 2)
    with pytest.raises(ValueError, match="teacher.bias: expected equal biases"):
        L.SubspaceProblem(L.FixedPointSpace((2,)), teacher=L.identity_teacher(2).with_weights(np.eye(2),
                                                                                            bias=[0.5, 0.0]))
    equal = L.identity_teacher(2).with_weights(np.eye(2), bias=[0.2, 0.2])
    assert L.SubspaceProblem(L.FixedPointSpace((2,)), teacher=equal).teacher is equal
    assert L.CriticalPoint.classified(s, tb, np.ones(6), 0.0, True).kind in ("saddle", "spurious minimum",
                                                                              "degenerate")


def test_ode_with_biases_every_student_but_step() -> None:
    """The ODE with biases: online and gradient flow for every student and teacher but step students (issue 23: the
    relu student and relu/step teachers of smooth students take I4 with means)."""
    s, t = tl.networks.teacher_student(1, 1, 8, "relu", seed=0)
    ov = tl.Overlaps.from_networks(s.with_weights(s.W, bias=[0.3]), t.with_weights(t.W, bias=[-0.2]))
    for student, teacher in [("relu", "relu"), ("relu", "tanh"), ("tanh", "relu"), ("softplus", "step")]:
        for regime in ("online", "gradient_flow"):
            out = tl.ode.rhs(ov, student, teacher, lr=0.5, lr_bias=0.5, regime=regime)
            assert len(out) == 4 and all(np.all(np.isfinite(x)) for x in out), (student, teacher, regime)
    with pytest.raises(NotImplementedError, match="step students with biases"):
        tl.ode.rhs(ov, "step", "relu", lr=0.5, regime="gradient_flow")
