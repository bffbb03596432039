"""multistart with n students != k teachers and a general teacher; honest stop reasons; fraction(kind)."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl

L = tl.landscape


def test_fraction_and_honest_status():
    r = L.multistart(4, 8, seed=3)
    assert r.fraction("global minimum") + r.fraction("spurious minimum") + r.fraction("saddle") \
        + r.fraction("degenerate") + r.fraction("non-differentiable") + r.fraction("failed") == pytest.approx(1.0)
    assert r.fraction(("global minimum", "spurious minimum")) == pytest.approx(
        r.fraction("global minimum") + r.fraction("spurious minimum"))
    for s, g in zip(r.status, r.grad_norm, strict=True):
        assert s != "stalled" or g > 1e-12  # a stalled search refined to tol is reported as such
        assert s in ("converged", "converged after refinement", "max_iter", "stalled", "diverged")
    with pytest.raises(TypeError, match="kind"):
        r.fraction(3)  # type: ignore[arg-type]


def test_over_parameterised_and_general_teacher():
    k = 3
    r = L.multistart(k, 4, seed=1, K=k + 1)
    assert r.W.shape == (4, k + 1, k + 1) and r.meta["K"] == k + 1
    # a rotated orthonormal teacher: the same problem up to a rotation of the inputs, so the same losses
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((k, k)))
    teacher = tl.Network(q, None, "relu", scaling="none")
    rot = L.multistart(k, 4, seed=2, teacher=teacher)
    ref = L.multistart(k, 4, seed=2)
    assert rot.fraction("global minimum") >= 0.0 and rot.W.shape == ref.W.shape
    assert np.all(np.isfinite(rot.risk))
    with pytest.raises(ValueError, match="teacher"):
        L.multistart(k, 2, teacher=tl.Network(q[:2], None, "relu", scaling="none"))
    with pytest.raises(ValueError, match="^K: "):
        L.multistart(k, 2, K=0)
