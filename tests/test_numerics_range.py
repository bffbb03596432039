"""Hardening: every public function returns finite numbers or raises a ValueError naming the input out of range
(population, landscape, ODE right-hand side, kernels at extreme covariance scales)."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer.landscape.multistart import classify_batch


def _pair(act: str, K: int = 2, M: int = 2, d: int = 5, seed: int = 0) -> tuple[tl.Network, tl.Network]:
    rng = np.random.default_rng(seed)
    return (tl.Network(rng.standard_normal((K, d)), rng.standard_normal(K), act),
            tl.Network(rng.standard_normal((M, d)), np.ones(M), act))


@pytest.mark.parametrize("fn", ["risk", "gradient", "hessian"])
def test_population_nan_weights_name_the_argument(fn: str) -> None:
    S, T = _pair("relu")
    S.W[0, 0] = np.nan  # arrays are mutable after construction
    with pytest.raises(ValueError, match=r"student\.W: entries must be finite"):
        getattr(tl.population, fn)(S, T)
    S, T = _pair("erf")
    T.a[1] = np.inf
    with pytest.raises(ValueError, match=r"teacher\.a: entries must be finite"):
        getattr(tl.population, fn)(S, T)


@pytest.mark.parametrize("act, k", [("relu", 1), ("linear", 1), ("quadratic", 2), ("step", 0)])
@pytest.mark.parametrize("s", [2.0**200, 2.0**-200])
def test_population_rescaled_rows_are_exact(act: str, k: int, s: float) -> None:
    """w_0 -> s w_0, a_0 -> a_0 / s^k leaves the network unchanged: the risk equals the unscaled one, the
    gradient is D grad and the Hessian D H D (D = diag(1/s on w_0, s^k on a_0))."""
    S, T = _pair(act)
    W, a = S.W.copy(), S.a.copy()
    W[0] *= s
    a[0] /= s**k
    S2 = tl.Network(W, a, act)
    assert tl.population.risk(S2, T) == pytest.approx(tl.population.risk(S, T), rel=1e-13)
    dW, da = tl.population.gradient(S, T)
    dW2, da2 = tl.population.gradient(S2, T)
    np.testing.assert_allclose(dW2[0] * s, dW[0], rtol=1e-12, atol=1e-14 * np.abs(dW).max())
    np.testing.assert_allclose(dW2[1], dW[1], rtol=1e-12, atol=1e-14 * np.abs(dW).max())
    np.testing.assert_allclose(da2[0] / s**k, da[0], rtol=1e-12)
    if act != "step":
        H = tl.population.hessian(S, T)
        H2 = tl.population.hessian(S2, T)
        D = np.ones(H.shape[0])
        D[:S.d] = 1.0 / s
        D[S.K * S.d] = s**k
        np.testing.assert_allclose(H2 / np.outer(D, D), H, rtol=1e-10, atol=1e-12 * np.abs(H).max())


def test_population_erf_huge_weights_are_finite() -> None:
    """erf at |w| = 1e200 is sign(w . x): the risk is that of the row normalised to a huge finite scale."""
    S, T = _pair("erf")
    W = S.W.copy()
    W[0] *= 1e200
    r = tl.population.risk(tl.Network(W, S.a, "erf"), T)
    W[0] *= 1e-200 * 1e12
    assert r == pytest.approx(tl.population.risk(tl.Network(W, S.a, "erf"), T), rel=1e-9)
    dW, _ = tl.population.gradient(tl.Network(W * 1e150, S.a, "erf"), T)
    assert np.all(np.isfinite(dW))


@pytest.mark.parametrize("fn", ["risk", "gradient", "hessian"])
def test_population_overflowing_weights_raise(fn: str) -> None:
    S, T = _pair("relu")
    W = S.W.copy()
    W[0] *= 1e200  # a relu output ~1e200 |x|: the risk ~1e400
    with pytest.raises(ValueError, match=r"student\.W.*out of range"):
        getattr(tl.population, fn)(tl.Network(W, S.a, "relu"), T)


def test_descend_out_of_range_raises() -> None:
    S, T = _pair("erf")
    with pytest.raises(ValueError, match=r"student\.W.*out of range"):
        tl.population.descend(tl.Network(S.W * 1e100, S.a, "erf"), T, lr=0.1, n_steps=3)


def test_spectrum_huge_matrix() -> None:
    assert tl.landscape.spectrum(1e308 * np.eye(3)) == [(1e308, 3)]
    with pytest.raises(ValueError, match="H: eigenvalues exceed"):
        tl.landscape.spectrum(np.full((3, 3), 1e308))


@pytest.mark.parametrize("times, lr", [([0.0, 1e30], 1e-2), ([0.0, 1.0], 1e-300)])
def test_step_gradient_flow_out_of_range(times: list[float], lr: float) -> None:
    S, T = _pair("step")
    with pytest.raises(ValueError, match=r"times, lr"):
        tl.landscape.step_gradient_flow(S, T, times=times, lr=lr)


def test_step_hessian_raises_at_aligned_units_and_refine_calls_it_global() -> None:
    rng = np.random.default_rng(3)
    Wt = rng.standard_normal((3, 4))
    T = tl.Network(Wt, np.ones(3), "step")
    S = tl.Network(2.0 * Wt, np.ones(3), "step")  # each student unit on its teacher unit: zero loss
    with pytest.raises(ValueError, match=r"student\.W: .*aligned"):
        tl.population.hessian(S, T)
    cp = tl.landscape.refine(S, T)
    assert cp.kind == "global minimum" and cp.index == 0 and cp.risk <= 1e-12
    W = rng.standard_normal((3, 4))
    W[1] = 3.0 * W[0]  # two student units aligned
    with pytest.raises(ValueError, match="student row 0 and student row 1"):
        tl.population.hessian(tl.Network(W, np.ones(3), "step"), T)


def test_multistart_step_global_minimum() -> None:
    rng = np.random.default_rng(4)
    Wt = rng.standard_normal((2, 3))
    T = tl.Network(Wt, np.ones(2), "step")
    W = (Wt * np.array([[1.5], [0.7]]))[None]
    out = classify_batch(W, np.ones((1, 2)), T, activation="step")
    assert out["kind"] == ["global minimum"] and out["index"][0] == 0


def test_relu_zero_student_is_non_differentiable() -> None:
    rng = np.random.default_rng(1)
    T = tl.Network(rng.standard_normal((2, 4)), np.ones(2), "relu")
    S = tl.Network(np.zeros((2, 4)), np.ones(2), "relu")
    cp = tl.landscape.refine(S, T, max_iter=0)
    assert cp.kind == "non-differentiable" and not cp.strict
    assert tl.landscape.classify(S, T)[2] == "non-differentiable"


def test_ode_rhs_huge_overlaps_raise() -> None:
    ov = tl.Overlaps(1e300 * np.eye(2), np.zeros((2, 2)), np.eye(2), 1e200 * np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="overlaps: Q out of range"):
        tl.ode.rhs(ov, "erf", lr=0.1)
    ov = tl.Overlaps(1e90 * np.eye(2), np.zeros((2, 2)), np.eye(2), 1e90 * np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match="overlaps: out of range"):
        tl.ode.rhs(ov, "quadratic", lr=0.1)


_ACTS = ["linear", "erf", "relu", "step", "quadratic"]
_SIGMA = {"linear": 1, "relu": 1, "step": 0, "quadratic": 2}


def _deg(act: str, deriv: bool, huge: bool) -> int:
    """Degree of sigma (or sigma') under l -> c l; erf in its limits (sign for huge, linear for tiny scales)."""
    k = (0 if huge else 1) if act == "erf" else _SIGMA[act]
    return k - 1 if deriv else k


def _kernel_cases() -> list[tuple[str, tuple[str, ...], int]]:
    cases: list[tuple[str, tuple[str, ...], int]] = []
    for a in _ACTS:
        cases.append(("j2", (a,), 2))
        for b in _ACTS:
            cases += [("i2", (a, b), 2), ("i3", (a, b), 3)]
            for c in _ACTS:
                if a != "relu" or (b, c) in (("relu", "relu"), ("linear", "linear"), ("linear", "relu"),
                                             ("relu", "linear")):
                    cases.append(("i4", (a, b, c), 4))
    return cases


def _total_degree(name: str, acts: tuple[str, ...], huge: bool) -> int:
    if name == "i2":
        return _deg(acts[0], False, huge) + _deg(acts[1], False, huge)
    if name == "i3":
        return _deg(acts[0], True, huge) + 1 + _deg(acts[1], False, huge)
    if name == "j2":
        return 2 * _deg(acts[0], True, huge)
    return 2 * _deg(acts[0], True, huge) + _deg(acts[1], False, huge) + _deg(acts[2], False, huge)


@pytest.mark.parametrize("name, acts, n", _kernel_cases())
def test_kernels_at_extreme_scales(name: str, acts: tuple[str, ...], n: int) -> None:
    """K(s C) = (s / s0)^(deg / 2) K(s0 C) at s = 1e+-154, 1e+-300: s0 = 1 for homogeneous activations, s0 =
    1e+-20 where an erf unit is in its sign / linear limit; a value beyond the double range raises ValueError."""
    rng = np.random.default_rng(7)
    A = rng.standard_normal((n, n))
    C = A @ A.T / n + 0.2 * np.eye(n)
    fn = getattr(tl.kernels, name)
    has_erf = "erf" in acts
    for s in (1e-300, 1e-154, 1e154, 1e300):
        huge = s > 1
        s0 = (1e20 if huge else 1e-20) if has_erf else 1.0
        half = _total_degree(name, acts, huge) / 2
        ref = fn(*acts, C * s0)
        log_expected = half * np.log10(s / s0) + np.log10(abs(ref)) if ref != 0 else -np.inf
        if log_expected > 308.5:
            with pytest.raises(ValueError, match=r"C\[0\]: the kernel's value exceeds the double range"):
                fn(*acts, C * s)
            continue
        if log_expected > 307.5:  # at the edge of the double range: either outcome
            continue
        v = fn(*acts, C * s)
        assert np.isfinite(v)
        if log_expected > -290:
            assert v == pytest.approx(ref * (s / s0) ** half, rel=1e-12), (s, v, ref)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("fn", ["gradient", "hessian"])
def test_population_tiny_rows_are_exact_or_raise(fn: str) -> None:
    """A relu row at 1e-280 |w| has the w -> 0 limit of the derivatives (they are degree 0 in w: a 1e-30 row
    agrees to ~1e-30); a subnormal row (1e-315: its rescaled a_i |w_i| would be subnormal, the derivatives
    would lose their bits, and 1 / c overflowed before) raises a ValueError instead of a warning or a NaN."""
    S, T = _pair("relu")
    W = S.W.copy()
    W[0] *= 1e-280
    tiny = getattr(tl.population, fn)(tl.Network(W, S.a, "relu"), T)
    W[0] *= 1e250
    small = getattr(tl.population, fn)(tl.Network(W, S.a, "relu"), T)
    if fn == "gradient":
        tiny, small = tiny[0], small[0]
    else:  # the rows and columns of w_0: the Hessian blows up like 1 / |w_0| there
        keep = np.r_[S.d:S.K * S.d + S.K]
        tiny, small = tiny[np.ix_(keep, keep)], small[np.ix_(keep, keep)]
    np.testing.assert_allclose(tiny, small, rtol=1e-12, atol=1e-14)
    W[0] *= 1e-285  # |w_0| ~ 1e-315
    with pytest.raises(ValueError, match=r"student\.W: weights out of range.*below the normal double range"):
        getattr(tl.population, fn)(tl.Network(W, S.a, "relu"), T)
