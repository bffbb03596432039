"""Population risk, gradient, Hessian and descent with student and teacher biases (issue 23): the risk against Monte
Carlo (tolerance from the standard error), the gradient (W, a and b) against central finite differences of the risk,
the Hessian against central finite differences of the gradient, zero biases bitwise unchanged."""

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


def _flat_gradient(s: tl.Network, t: tl.Network, train_readout: bool) -> np.ndarray:
    dW, da, db = tl.population.gradient(s, t, train_readout=train_readout, train_bias=True)
    return np.concatenate([dW.ravel(), *([da] if train_readout else []), db])


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("train_readout", [True, False])
def test_hessian_with_biases_against_finite_differences(act: str, train_readout: bool) -> None:
    """H on [vec(W), a, b] (a only with train_readout) against central differences of the exact gradient."""
    s, t = _pair(act, d=5)
    s = s.with_weights(s.W, a=[0.8, -1.3], bias=s.bias)
    H = tl.population.hessian(s, t, train_readout=train_readout, train_bias=True)
    K, d = s.K, s.d
    n = K * d + K * (2 if train_readout else 1)
    assert H.shape == (n, n)
    np.testing.assert_array_equal(H, H.T)
    h = 1e-5

    def shifted(k: int, x: float) -> tl.Network:
        W, a, b = s.W.copy(), s.a.copy(), s.bias.copy()
        if k < K * d:
            W.flat[k] += x
        elif train_readout and k < K * d + K:
            a[k - K * d] += x
        else:
            b[k - n + K] += x
        return s.with_weights(W, a=a, bias=b)

    fd = np.array([(_flat_gradient(shifted(k, h), t, train_readout) - _flat_gradient(shifted(k, -h), t,
                                                                                     train_readout)) / (2 * h)
                   for k in range(n)])
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())
    # the (W, a) block is the zero-bias-layout Hessian's: without train_bias the b rows are dropped
    H2 = tl.population.hessian(s, t, train_readout=train_readout)
    np.testing.assert_allclose(H2, H[: n - K, : n - K], rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("act", ["erf", "relu"])
def test_hessian_train_bias_at_zero_biases_matches_the_core(act: str) -> None:
    """At zero biases, the with-means Hessian's [vec(W), a] block equals the core's closed-form Hessian."""
    s, t = tl.networks.teacher_student(2, 2, 6, act, seed=5)
    H = tl.population.hessian(s, t, train_bias=True)
    np.testing.assert_allclose(H[:-2, :-2], tl.population.hessian(s, t), rtol=1e-10, atol=1e-12)


def test_descend_with_zero_biases_follows_the_core() -> None:
    """erf with zero biases: dR/db = 0 (E[(f - y) erf'] of an odd residual), so the loop with lr_bias > 0 follows the
    core's descent."""
    s, t = tl.networks.teacher_student(2, 2, 8, "erf", seed=1)
    core = tl.population.descend(s, t, lr=0.5, n_steps=20, lr_readout=0.3, n_records=5)
    loop = tl.population.descend(s, t, lr=0.5, n_steps=20, lr_readout=0.3, n_records=5, lr_bias=1.0)
    np.testing.assert_array_equal(loop.t, core.t)
    np.testing.assert_allclose(loop.risk, core.risk, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(loop.Q, core.Q, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(loop.a, core.a, rtol=1e-10, atol=1e-13)
    assert np.abs(loop.bias).max() < 1e-13 and loop.meta["lr_bias"] == 1.0


@pytest.mark.parametrize("lr_bias", [0.0, 0.5])
def test_descend_with_biases(lr_bias: float) -> None:
    """Fixed or trained biases: the recorded risk is the risk of the recorded state and decreases; fixed biases
    stay, trained ones move along -dR/db."""
    s, t = _pair("tanh", d=6)
    tr = tl.population.descend(s, t, lr=0.3, n_steps=30, lr_readout=0.2, n_records=4, lr_bias=lr_bias)
    assert tr.status == "completed" and tr.bias.shape == (tr.t.size, s.K)
    np.testing.assert_array_equal(tr.teacher_bias, t.bias)
    assert np.all(np.diff(tr.risk) < 0)
    assert tr.risk[-1] == tl.population.risk(tr.student, t)
    np.testing.assert_array_equal(tr.bias[-1], tr.student.bias)
    if lr_bias == 0:
        np.testing.assert_array_equal(tr.bias, np.broadcast_to(s.bias, tr.bias.shape))
    else:
        db = tl.population.gradient(s, t, train_bias=True)[2]
        one = tl.population.descend(s, t, lr=0.3, n_steps=1, lr_readout=0.2, n_records=2, lr_bias=lr_bias)
        np.testing.assert_allclose(one.bias[1], s.bias - lr_bias * db, rtol=1e-14)


def test_descend_with_biases_diverges_cleanly() -> None:
    """A step far too large: status diverged with the records before it (not an exception)."""
    s, t = tl.networks.teacher_student(2, 2, 6, "quadratic", seed=0)
    s = s.with_weights(s.W, bias=[0.3, -0.2])
    tr = tl.population.descend(s, t, lr=1e3, n_steps=200, lr_readout=1e3, lr_bias=1e3, n_records=5)
    assert tr.status == "diverged" and "diverged at iteration" in tr.message
    assert np.all(np.isfinite(tr.risk)) and tr.risk.size >= 1 and tr.stop_time >= 1
