"""The landscape tools with biases (issue 23): refine and classify on theta = [vec(W), a, b], the rescaling orbit
(w_i, b_i, a_i) -> (c w_i, c b_i, a_i / c) of relu units with its flat Hessian direction, multistart, saddle search
and JSON export with biases; the gradient and Hessian they use against finite differences of the population risk."""

from __future__ import annotations

import json

import numpy as np
import pytest
import twolayer as tl
from twolayer.landscape.critical import flat_gradient, hessian_eigh, pack_weights, unpack_weights

L = tl.landscape


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


def _relu_teacher() -> tl.Network:
    """K = M = 2 relu teacher with biases (d = 2, unit second layer)."""
    return tl.Network(np.array([[1.0, 0.2], [-0.3, 0.9]]), [1.0, 1.0], "relu", scaling="none", bias=[0.4, -0.3])


def _fd_hessian(s: tl.Network, t: tl.Network, tr: bool, tb: bool, h: float = 1e-6) -> np.ndarray:
    """Central differences of the analytic gradient, symmetrised."""
    x = pack_weights(s, tr, tb)
    E = np.eye(x.size)
    fd = np.array([(flat_gradient(unpack_weights(s, x + h * e, tr, tb), t, tr, tb)
                    - flat_gradient(unpack_weights(s, x - h * e, tr, tb), t, tr, tb)) / (2 * h) for e in E])
    return (fd + fd.T) / 2


def test_relu_orbit_carries_the_biases() -> None:
    """relu(c (w.x + b)) = c relu(w.x + b): the risk is constant along (c w, c b, a / c), the canonical point is
    balanced (|w_i|^2 + b_i^2 = a_i^2), and the orbit tangent (w_i, -a_i, b_i) is a null vector of the Hessian at a
    critical point (checked against finite differences)."""
    t = _relu_teacher()
    c = np.array([1.7, 0.6])
    s = t.with_weights(c[:, None] * t.W, a=t.a / c, bias=c * t.bias)
    assert tl.population.risk(s, t) < 1e-14
    can = L.canonical(s, train_readout=True, train_bias=True)
    np.testing.assert_allclose(np.sum(can.W**2, axis=1) + can.bias**2, can.a**2, rtol=1e-14)
    np.testing.assert_allclose(can.W * can.a[:, None], t.W * t.a[:, None], rtol=1e-14)  # the invariants
    np.testing.assert_allclose(can.bias * can.a, t.bias * t.a, rtol=1e-14)
    # fixed nonzero biases break the rescaling: no orbit there, the canonical point is the point itself
    assert L.orbit_tangents(s, True).shape == (6, 0)
    assert L.canonical(s, True) is s or np.array_equal(L.canonical(s, True).W, s.W)
    T = L.orbit_tangents(s, True, True)
    assert T.shape == (8, 2)
    for i in range(2):  # t_i = (w_i, -a_i, b_i) on unit i's entries of [vec(W), a, b], normalised
        v = np.zeros(8)
        v[2 * i:2 * i + 2], v[4 + i], v[6 + i] = s.W[i], -s.a[i], s.bias[i]
        np.testing.assert_allclose(T[:, i], v / np.linalg.norm(v), rtol=1e-14)
    H = tl.population.hessian(s, t, train_readout=True, train_bias=True)
    # at exact alignment (the global minimum) the relu risk's third derivative jumps: the difference quotient's
    # error is O(h) there (6.4e-4 h measured), not O(h^2)
    np.testing.assert_allclose(H, _fd_hessian(s, t, True, True, h=1e-7), rtol=1e-6, atol=2e-7)
    scale = np.abs(H).max()
    assert np.abs(H @ T).max() <= 1e-10 * scale  # the orbit's directions are null, the bias component included
    # without the bias component the direction is not null: the biases belong to the orbit
    T_nob = T.copy()
    T_nob[6:] = 0.0
    assert np.abs(H @ T_nob).max() > 1e-3 * scale


def test_refine_and_classify_count_the_orbit_with_biases() -> None:
    """relu, trained readout and biases: refine converges (on the orbit's canonical point), the two orbit
    directions are split off as flat eigenvalues ~0, the transverse spectrum is positive, and classify counts the
    nullity as the symmetry's (a "spurious minimum" at global_tol=0 rather than "degenerate")."""
    t = _relu_teacher()
    rng = np.random.default_rng(3)
    start = t.with_weights(t.W * [[1.5], [0.7]] + 0.02 * rng.standard_normal((2, 2)), a=t.a / [1.5, 0.7],
                           bias=t.bias * [1.5, 0.7] + 0.02)
    cp = L.refine(start, t, train_readout=True, train_bias=True)
    assert cp.converged and cp.grad_norm <= 1e-12 and cp.kind == "global minimum" and cp.train_bias
    assert cp.risk < 1e-15
    s = cp.student
    np.testing.assert_allclose(np.sum(s.W**2, axis=1) + s.bias**2, s.a**2, rtol=1e-12)  # canonical
    np.testing.assert_allclose(s.W * s.a[:, None], t.W, atol=1e-8)  # w_i a_i, b_i a_i: the orbit's invariants
    np.testing.assert_allclose(s.bias * s.a, t.bias, atol=1e-8)
    assert cp.flat_eigenvalues.shape == (2,) and np.abs(cp.flat_eigenvalues).max() <= 1e-10
    assert cp.eigenvalues.shape == (6,) and cp.eigenvalues[0] > 1e-3
    assert (cp.index, cp.nullity) == (0, 2)
    assert L.critical.symmetry_nullity(s, True, True) == 2
    assert L.classify(s, t, train_readout=True, train_bias=True, global_tol=0.0)[:2] == (0, 2)
    assert L.classify(s, t, train_readout=True, train_bias=True, global_tol=0.0)[2] in ("spurious minimum",
                                                                                       "global minimum")
    # the full Hessian there: two eigenvalues ~0 (the orbit), the rest the transverse spectrum
    lam = np.linalg.eigvalsh(tl.population.hessian(s, t, train_readout=True, train_bias=True))
    np.testing.assert_allclose(np.sort(lam)[2:], cp.eigenvalues, rtol=1e-8, atol=1e-10)
    assert np.abs(np.sort(lam)[:2]).max() <= 1e-10


def test_multistart_with_trained_biases_recovers_the_teacher() -> None:
    """relu teacher with biases, K = M = 2: L-BFGS over (W, b) from zero biases (the core's search with biases),
    refined by Newton: the global minimum has risk < 1e-10, gradient ~0 and the teacher's weights and biases (up
    to the order of the units)."""
    t = _relu_teacher()
    res = L.multistart(2, runs=6, seed=0, teacher=t, train_bias=True)
    assert res.bias is not None and res.bias.shape == (6, 2) and res.meta["train_bias"] is True
    found = [r for r in range(res.runs) if res.kind[r] == "global minimum"]
    assert found, res.table()
    for r in found:
        assert res.risk[r] < 1e-10 and res.grad_norm[r] <= 1e-10
        order = np.argsort(res.W[r][:, 0])[::-1]  # the teacher's rows: first w_11 = 1, then w_21 = -0.3
        np.testing.assert_allclose(res.W[r][order], t.W, atol=1e-7)
        np.testing.assert_allclose(res.bias[r][order], t.bias, atol=1e-7)
        s = tl.Network(res.W[r], res.a[r], "relu", scaling="none", bias=res.bias[r])
        assert np.linalg.norm(flat_gradient(s, t, False, True)) <= 1e-10
    # with a trained readout the end points sit at the canonical point of the orbit with biases
    res2 = L.multistart(2, runs=4, seed=1, teacher=t, train_bias=True, train_readout=True)
    found2 = [r for r in range(res2.runs) if res2.kind[r] == "global minimum"]
    assert found2, res2.table()
    for r in found2:
        W, a, b = res2.W[r], res2.a[r], res2.bias[r]
        np.testing.assert_allclose(np.sum(W**2, axis=1) + b**2, a**2, rtol=1e-10)
        order = np.argsort((W * a[:, None])[:, 0])[::-1]
        np.testing.assert_allclose((W * a[:, None])[order], t.W, atol=1e-7)
        np.testing.assert_allclose((b * a)[order], t.bias, atol=1e-7)
        assert res2.risk[r] < 1e-10


def test_multistart_without_biases_is_unchanged() -> None:
    res = L.multistart(3, runs=3, seed=0)
    assert res.bias is None and "train_bias" not in res.meta
    out = tl._core.multistart_lbfgs(np.eye(2)[None] + 0.1, np.ones((1, 2)), "relu", np.eye(2), np.ones(2), "relu",
                                    1.0, False, 100, 1e-10, 10)
    out_b = tl._core.multistart_lbfgs(np.eye(2)[None] + 0.1, np.ones((1, 2)), "relu", np.eye(2), np.ones(2),
                                      "relu", 1.0, False, 100, 1e-10, 10, b=np.zeros((1, 2)),
                                      teacher_bias=np.zeros(2))
    assert "b" not in out and out_b["b"].shape == (1, 2)
    np.testing.assert_allclose(out_b["W"], out["W"], atol=1e-8)  # the with-means engine at zero means
    with pytest.raises(ValueError, match="train_bias needs the students' biases"):
        tl._core.multistart_lbfgs(np.eye(2)[None], np.ones((1, 2)), "relu", np.eye(2), np.ones(2), "relu", 1.0,
                                  False, 10, 1e-10, 10, train_bias=True)


def test_saddle_search_with_biases() -> None:
    """relu teacher with biases: from the global minimum, eigenvector following over (W, b) reaches an index-1
    saddle whose gradient vanishes; its Hessian agrees with finite differences of the gradient and has exactly one
    negative eigenvalue; descending off it along +-v reaches points of lower risk."""
    t = _relu_teacher()
    sad = L.saddle_search(t, t, index=1, modes=2, train_bias=True)
    assert sad.train_bias and sad.kind == "saddle" and sad.index == 1 and sad.nullity == 0, sad
    assert sad.converged and sad.grad_norm <= 1e-12 and sad.risk > 1e-2
    s = sad.student
    assert np.linalg.norm(flat_gradient(s, t, False, True)) <= 1e-12
    H = tl.population.hessian(s, t, train_readout=False, train_bias=True)
    np.testing.assert_allclose(H, _fd_hessian(s, t, False, True), rtol=1e-6, atol=1e-6)
    lam = np.linalg.eigvalsh(H)
    assert int(np.sum(lam < -1e-8 * np.abs(lam).max())) == 1 and lam[0] < -1e-4 and lam[1] > 1e-4
    ends = L.saddle_connections(sad, t)
    assert all(e.train_bias and e.converged for e in ends)
    assert max(e.risk for e in ends) < sad.risk


def test_saddle_with_biases_and_readout_counts_the_orbit() -> None:
    """relu with trained readout and biases: an index-1 saddle whose two zero Hessian eigenvalues are the orbit's
    (w_i, -a_i, b_i) directions (flat_eigenvalues ~0, nullity = symmetry_nullity = 2), so it classifies as a saddle
    and its transverse spectrum has one negative eigenvalue."""
    t = _relu_teacher()
    sad = L.saddle_search(t, t, index=1, modes=1, direction=-1.0, train_readout=True, train_bias=True)
    assert sad.kind == "saddle" and sad.index == 1 and sad.converged and sad.grad_norm <= 1e-12, sad
    s = sad.student
    assert (sad.nullity, L.critical.symmetry_nullity(s, True, True)) == (2, 2)
    assert sad.flat_eigenvalues.shape == (2,) and np.abs(sad.flat_eigenvalues).max() <= 1e-10
    assert sad.eigenvalues[0] < -1e-4 and sad.eigenvalues[1] > 1e-4
    H = tl.population.hessian(s, t, train_readout=True, train_bias=True)
    np.testing.assert_allclose(H, _fd_hessian(s, t, True, True), rtol=1e-6, atol=1e-6)
    T = L.orbit_tangents(s, True, True)
    assert np.abs(H @ T).max() <= 1e-9 * np.abs(H).max()


def test_export_round_trips_biases_and_reads_the_old_format() -> None:
    t = _relu_teacher()
    cp = L.refine(t.with_weights(t.W + 1e-3, bias=t.bias + 1e-3), t, train_bias=True)
    back = L.from_json(L.to_json(cp))
    assert back.train_bias and back.kind == cp.kind
    np.testing.assert_array_equal(back.student.bias, cp.student.bias)  # bit for bit
    np.testing.assert_array_equal(back.student.W, cp.student.W)
    res = L.multistart(2, runs=2, seed=0, teacher=t, train_bias=True)
    back_res = L.from_json(L.to_json(res))
    np.testing.assert_array_equal(back_res.bias, res.bias)
    assert back_res.meta == res.meta
    assert json.loads(L.to_json(cp))["format"] == "twolayer.landscape/2"
    # a version-1 document (no biases anywhere) still loads, with zero biases
    plain = L.refine(L.identity_teacher(3).with_weights(np.eye(3) + 1e-3), L.identity_teacher(3))
    doc = json.loads(L.to_json(plain))
    doc["format"] = "twolayer.landscape/1"
    del doc["result"]["fields"]["student"]["__network__"]["bias"]
    old = L.from_json(json.dumps(doc))
    assert not old.student.has_bias and np.array_equal(old.student.W, plain.student.W)
    ms = json.loads(L.to_json(L.multistart(2, runs=2, seed=0)))
    ms["format"] = "twolayer.landscape/1"
    del ms["result"]["fields"]["bias"]
    assert L.from_json(json.dumps(ms)).bias is None
    # a bias of the wrong length is refused, naming the field
    bad = json.loads(L.to_json(cp))
    bad["result"]["fields"]["student"]["__network__"]["bias"] = [0.1]
    with pytest.raises(ValueError, match="bias"):
        L.from_json(json.dumps(bad))
    xr = pytest.importorskip("xarray")
    assert isinstance(L.to_xarray(res), xr.Dataset) and "bias" in L.to_xarray(res)


def test_flows_with_biases() -> None:
    """The weight-space flows take biases (fixed, or trained with lr_bias) and record them: the path is population
    gradient descent with biases (the same end point as descend), and the risk decreases."""
    t = tl.Network([[1.0, 0.0]], None, "relu", scaling="none", bias=[0.3])
    s = tl.Network([[0.6, 0.8]], None, "relu", scaling="none", bias=[-0.2])
    path = L.alignment_flow(s, t, [0.0, 2.0, 5.0], lr=0.1, lr_bias=0.1)
    assert path.bias is not None and path.bias.shape == (3, 1) and path.bias[0, 0] == -0.2
    assert path.status == "completed" and np.all(np.diff(path.risk) < 0)
    ref = tl.population.descend(s, t, lr=0.1, n_steps=50, lr_bias=0.1).student
    np.testing.assert_allclose(path.W[-1], ref.W, rtol=1e-12)
    np.testing.assert_allclose(path.bias[-1], ref.bias, rtol=1e-12)
    fixed = L.alignment_flow(s, t, [0.0, 5.0], lr=0.1)  # biases fixed: recorded, unchanged
    assert fixed.bias is not None and np.all(fixed.bias == -0.2)
    plain = tl.Network([[1.0, 0.0]], None, "relu", scaling="none")
    assert L.alignment_flow(s.with_weights(s.W, bias=[0.0]), plain, [0.0, 1.0]).bias is None


def test_step_units_with_biases() -> None:
    """Step units with trained biases: (w_i, b_i) -> c (w_i, b_i) leaves the risk unchanged, the canonical point has
    unit rows, and the classification does not depend on the point of the orbit. Units are degenerate (a kink, no
    Hessian) only when one pre-activation is a multiple of the other, thresholds included: a common direction with
    different thresholds is smooth (the Hessian there against finite differences)."""
    t = tl.Network(np.array([[1.0, 0.0]]), None, "step", scaling="none", bias=[0.3])
    s = tl.Network(np.array([[0.8, 0.6], [0.1, 1.0]]), None, "step", scaling="none", bias=[0.2, -0.1])
    s2 = s.with_weights(s.W * [[3.0], [0.5]], bias=s.bias * [3.0, 0.5])
    assert abs(tl.population.risk(s2, t) - tl.population.risk(s, t)) <= 1e-15
    can = L.canonical(s2, False, True)
    np.testing.assert_allclose(np.linalg.norm(can.W, axis=1), 1.0, rtol=1e-15)
    np.testing.assert_allclose(can.bias, s.bias / np.linalg.norm(s.W, axis=1), rtol=1e-14)
    assert L.classify(s2, t, train_bias=True) == L.classify(s, t, train_bias=True)
    assert L.critical.symmetry_nullity(s, False, True) == 2 and L.critical.symmetry_nullity(s, False, False) == 0
    aligned = s.with_weights(np.array([[2.0, 0.0], [0.1, 1.0]]), bias=[0.6, -0.1])  # 2 (w*, b*)
    assert tl.population.aligned_step_units(aligned, t) == "student row 0 and teacher row 0 are exactly aligned " \
                                                           "(|cos| = 1)"
    assert L.classify(aligned, t, train_bias=True)[2] == "non-differentiable"
    smooth = aligned.with_weights(aligned.W, bias=[0.2, -0.1])  # the teacher's direction, another threshold
    assert tl.population.aligned_step_units(smooth, t) is None
    H = tl.population.hessian(smooth, t, train_readout=False, train_bias=True)
    np.testing.assert_allclose(H, _fd_hessian(smooth, t, False, True), rtol=1e-6, atol=1e-9)
