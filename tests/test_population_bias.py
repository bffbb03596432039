"""Population risk and gradient with student and teacher biases (issue 23): the risk against Monte Carlo (tolerance
from the standard error), the gradient (W, a and b) against central finite differences of the risk, zero biases
bitwise unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl

ACTS = ["erf", "relu", "tanh", "softplus"]


def _pair(act: str, d: int = 30, seed: int = 0) -> tuple[tl.Network, tl.Network]:
    s, t = tl.networks.teacher_student(2, 3, d, act, seed=seed)
    return s.with_weights(s.W, bias=[0.4, -0.7]), t.with_weights(t.W, bias=[0.0, 1.1, -0.3])


@pytest.mark.parametrize("act", ACTS)
def test_risk_with_biases_against_monte_carlo(act: str) -> None:
    s, t = _pair(act)
    X = np.random.default_rng(1).normal(size=(400_000, s.d))
    e = 0.5 * (s(X) - t(X)) ** 2
    est, se = e.mean(), e.std() / np.sqrt(len(e))
    r = tl.population.risk(s, t)
    assert abs(r - est) < 5 * se, (act, r, est, se)


@pytest.mark.parametrize("act", ACTS)
def test_gradient_with_biases_against_finite_differences(act: str) -> None:
    s, t = _pair(act, d=6)
    dW, da, db = tl.population.gradient(s, t, train_bias=True)
    h = 1e-5

    def fd(make: object) -> float:
        return (tl.population.risk(make(h), t) - tl.population.risk(make(-h), t)) / (2 * h)  # type: ignore[operator]

    for i in range(s.K):
        e = np.zeros(s.K)
        e[i] = 1.0
        assert db[i] == pytest.approx(fd(lambda x, e=e: s.with_weights(s.W, bias=s.bias + x * e)), rel=1e-6, abs=1e-9)
        assert da[i] == pytest.approx(fd(lambda x, e=e: s.with_weights(s.W, a=s.a + x * e, bias=s.bias)), rel=1e-6,
                                      abs=1e-9)
        for j in (0, 3):
            E = np.zeros_like(s.W)
            E[i, j] = 1.0
            assert dW[i, j] == pytest.approx(fd(lambda x, E=E: s.with_weights(s.W + x * E, bias=s.bias)), rel=1e-6,
                                             abs=1e-9)


def test_bias_gradient_at_zero_biases() -> None:
    """train_bias at zero biases: dW, da bitwise the zero-bias path; db against finite differences."""
    s, t = tl.networks.teacher_student(2, 2, 8, "relu", seed=2)
    dW0, da0 = tl.population.gradient(s, t)
    dW, da, db = tl.population.gradient(s, t, train_bias=True)
    np.testing.assert_array_equal(dW, dW0)
    np.testing.assert_array_equal(da, da0)
    h = 1e-5
    for i in range(2):
        e = np.zeros(2)
        e[i] = h
        fd = (tl.population.risk(s.with_weights(s.W, bias=e), t)
              - tl.population.risk(s.with_weights(s.W, bias=-e), t)) / (2 * h)
        assert db[i] == pytest.approx(fd, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("act", ["erf", "relu", "step", "quadratic"])
def test_zero_biases_bitwise_unchanged(act: str) -> None:
    s, t = tl.networks.teacher_student(2, 2, 10, act, seed=3)
    s0, t0 = s.with_weights(s.W, bias=np.zeros(2)), t.with_weights(t.W, bias=np.zeros(2))
    assert tl.population.risk(s0, t0) == tl.population.risk(s, t)
    for x, y in zip(tl.population.gradient(s0, t0), tl.population.gradient(s, t), strict=True):
        np.testing.assert_array_equal(x, y)


def test_bias_refusals() -> None:
    s, t = _pair("step", d=5)
    with pytest.raises(NotImplementedError, match="step students with biases"):
        tl.population.gradient(s, t)
    s, t = _pair("erf", d=5)
    with pytest.raises(NotImplementedError, match="does not handle biases yet"):
        tl.population.hessian(s, t)
    tgt = tl.targets.staircase(2, d=5, seed=0)
    with pytest.raises(NotImplementedError, match="does not handle biases yet"):
        tl.population.hessian(s, tgt)  # the risk and gradient against a target take biases (test_targets_bias.py)
