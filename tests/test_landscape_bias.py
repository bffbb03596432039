"""Critical points with biases (issue 23): refine and classify on theta = [vec(W), a, b] where the model has no
rescaling orbit, the gradient and Hessian they use against finite differences of the population risk."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer.landscape.critical import flat_gradient, hessian_eigh, pack_weights, unpack_weights


def _teacher(act: str = "tanh") -> tl.Network:
    W = np.array([[1.0, 0.3, -0.2], [-0.4, 0.9, 0.5]])
    return tl.Network(W, [1.0, 0.8], act, scaling="none", bias=[0.5, -0.3])


@pytest.mark.parametrize("train_readout", [False, True])
def test_flat_gradient_and_hessian_with_biases_against_finite_differences(train_readout: bool) -> None:
    t = _teacher()
    rng = np.random.default_rng(0)
    s = t.with_weights(t.W + 0.3 * rng.standard_normal(t.W.shape), a=[0.7, 1.1], bias=[0.1, 0.2])
    x = pack_weights(s, train_readout, True)
    assert x.size == 6 + (2 if train_readout else 0) + 2
    g = flat_gradient(s, t, train_readout, True)
    h = 1e-5

    def risk(y: np.ndarray) -> float:
        return tl.population.risk(unpack_weights(s, y, train_readout, True), t)

    E = np.eye(x.size)
    fd = np.array([(risk(x + h * e) - risk(x - h * e)) / (2 * h) for e in E])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9)
    lam, V = hessian_eigh(s, t, train_readout, True)
    H = (V * lam) @ V.T
    fdH = np.array([(flat_gradient(unpack_weights(s, x + h * e, train_readout, True), t, train_readout, True)
                     - flat_gradient(unpack_weights(s, x - h * e, train_readout, True), t, train_readout, True))
                    / (2 * h) for e in E])
    np.testing.assert_allclose(H, (fdH + fdH.T) / 2, rtol=1e-6, atol=1e-8)


def test_refine_with_trained_biases_finds_the_teacher() -> None:
    t = _teacher()
    rng = np.random.default_rng(1)
    start = t.with_weights(t.W + 0.05 * rng.standard_normal(t.W.shape), a=t.a, bias=t.bias + [0.05, -0.04])
    cp = tl.landscape.refine(start, t, train_bias=True, train_readout=True)
    assert cp.converged and cp.kind == "global minimum" and cp.train_bias, cp
    # the risk at the gradient's zero: the gradient is certified to ~1e-10 relative (its own quadrature), so its zero
    # sits ~1e-10 / lambda_min from the risk's minimum, a risk of ~1e-17 here; the weights below are the real check
    assert cp.risk < 1e-15 and cp.grad_norm <= 1e-12
    np.testing.assert_allclose(cp.student.bias, t.bias, atol=1e-8)
    np.testing.assert_allclose(cp.student.W, t.W, atol=1e-8)
    assert cp.eigenvalues.shape == (10,) and cp.eigenvalues[0] > 0  # strict: smooth units have no orbit
    assert tl.landscape.classify(cp.student, t, train_readout=True, train_bias=True) == (0, 0, "global minimum")


def test_refine_with_fixed_biases_finds_a_classified_critical_point() -> None:
    """Biases fixed at the wrong values (student 0, teacher nonzero): a spurious critical point in W, where the
    gradient in W vanishes, and the index is the Hessian's count of negative eigenvalues."""
    t = _teacher()
    start = t.with_weights(t.W, a=t.a, bias=[0.0, 0.0])
    cp = tl.landscape.refine(start, t)
    assert cp.converged and not cp.train_bias
    np.testing.assert_array_equal(cp.student.bias, [0.0, 0.0])
    assert cp.risk > 1e-4 and cp.kind in ("spurious minimum", "saddle")
    assert np.linalg.norm(flat_gradient(cp.student, t, False)) <= 1e-12
    lam = hessian_eigh(cp.student, t, False)[0]
    assert cp.index == int(np.sum(lam < -1e-8 * np.abs(lam).max()))
    # trained, the biases leave that point: the gradient in b is not zero there
    assert np.abs(flat_gradient(cp.student, t, False, True)[-2:]).max() > 1e-3


def test_orbit_models_refuse_biases() -> None:
    t = _teacher("relu")
    with pytest.raises(NotImplementedError, match=r"bias: refine does not handle biases yet for 'relu' students "
                                                  r"with a trained readout"):
        tl.landscape.refine(t, t, train_readout=True)
    with pytest.raises(NotImplementedError, match="classify does not handle biases yet"):
        tl.landscape.classify(tl.Network(t.W, t.a, "relu", scaling="none"), t, train_readout=True, train_bias=True)
    with pytest.raises(TypeError, match="train_bias: expected True or False"):
        tl.landscape.refine(t, t, train_bias="yes")
    # relu without a trained readout has no orbit: biases are handled
    cp = tl.landscape.refine(t.with_weights(t.W + 1e-3, bias=t.bias), t, train_bias=True)
    assert cp.kind == "global minimum" and cp.converged
