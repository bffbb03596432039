"""The population gradient, Hessian and descent with biases in the C++ core (issue 23): against central finite
differences of tl.population.risk (K = M = 2), against the former Python path (tests/population_bias_reference.py),
and the zero-bias descent a replay of its own gradient steps."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import twolayer as tl

sys.path.insert(0, str(Path(__file__).parent))
import population_bias_reference as ref  # noqa: E402

ACTS = ["erf", "relu", "tanh", "softplus"]


def _pair(act: str, d: int = 3, seed: int = 0) -> tuple[tl.Network, tl.Network]:
    s, t = tl.networks.teacher_student(2, 2, d, act, seed=seed)
    return (s.with_weights(s.W, a=[0.8, -1.3], bias=[0.4, -0.7]),
            t.with_weights(t.W, a=[1.0, 0.6], bias=[0.9, -0.3]))


def _shifted(s: tl.Network, k: int, x: float) -> tl.Network:
    """The student with parameter k of [vec(W), a, b] moved by x."""
    W, a, b = s.W.copy(), s.a.copy(), s.bias.copy()
    n = s.K * s.d
    if k < n:
        W.flat[k] += x
    elif k < n + s.K:
        a[k - n] += x
    else:
        b[k - n - s.K] += x
    return s.with_weights(W, a=a, bias=b)


@pytest.mark.parametrize("act", ACTS)
def test_gradient_and_hessian_against_finite_differences_of_the_risk(act: str) -> None:
    s, t = _pair(act)
    n = s.K * (s.d + 2)

    def risk(*moves: tuple[int, float]) -> float:
        x = s
        for k, h in moves:
            x = _shifted(x, k, h)
        return tl.population.risk(x, t)

    dW, da, db = tl.population.gradient(s, t, train_bias=True)
    g = np.concatenate([dW.ravel(), da, db])
    h = 1e-5
    fd = np.array([(risk((k, h)) - risk((k, -h))) / (2 * h) for k in range(n)])
    np.testing.assert_allclose(g, fd, rtol=1e-7, atol=1e-9)
    H = tl.population.hessian(s, t, train_bias=True)
    np.testing.assert_array_equal(H, H.T)
    h = 2e-4
    fd2 = np.empty((n, n))
    for k in range(n):
        for j in range(k, n):
            fd2[k, j] = fd2[j, k] = (risk((k, h), (j, h)) - risk((k, h), (j, -h)) - risk((k, -h), (j, h))
                                     + risk((k, -h), (j, -h))) / (4 * h * h)
    np.testing.assert_allclose(H, fd2, rtol=1e-5, atol=1e-6 * np.abs(fd2).max())


@pytest.mark.parametrize("teacher_act", ["step", "erf", "relu", "tanh"])
def test_step_student_against_finite_differences(teacher_act: str) -> None:
    """A step unit with itself through step^2 = step: the gradient against central differences of the risk, the
    Hessian against central differences of the gradient, and a descent that lowers the risk."""
    s, _ = _pair("step")
    _, t = _pair(teacher_act)
    n = s.K * (s.d + 2)

    def grad(x: tl.Network) -> np.ndarray:
        dW, da, db = tl.population.gradient(x, t, train_bias=True)
        return np.concatenate([dW.ravel(), da, db])

    h = 1e-5
    fd = np.array([(tl.population.risk(_shifted(s, k, h), t) - tl.population.risk(_shifted(s, k, -h), t)) / (2 * h)
                   for k in range(n)])
    np.testing.assert_allclose(grad(s), fd, rtol=1e-7, atol=1e-9)
    H = tl.population.hessian(s, t, train_bias=True)
    np.testing.assert_array_equal(H, H.T)
    fd2 = np.array([(grad(_shifted(s, k, h)) - grad(_shifted(s, k, -h))) / (2 * h) for k in range(n)])
    np.testing.assert_allclose(H, fd2, rtol=1e-6, atol=1e-7 * np.abs(fd2).max())
    tr = tl.population.descend(s, t, lr=0.2, n_steps=20, lr_readout=0.1, lr_bias=0.2, n_records=3)
    assert tr.status == "completed" and np.all(np.diff(tr.risk) < 0)


@pytest.mark.parametrize("act", ["erf", "tanh", "softplus"])
def test_hessian_against_a_polynomial_target_with_biases(act: str) -> None:
    """Against a staircase target: H on [vec(W), a, b] against central differences of the exact gradient; without
    train_bias the (W, a) block."""
    s, _ = tl.networks.teacher_student(2, 2, 4, act, seed=0)
    s = s.with_weights(s.W, a=[0.8, -1.3], bias=[0.4, -0.7])
    tgt = tl.targets.staircase(2, d=4, seed=0)

    def grad(x: tl.Network) -> np.ndarray:
        dW, da, db = tl.population.gradient(x, tgt, train_bias=True)
        return np.concatenate([dW.ravel(), da, db])

    H = tl.population.hessian(s, tgt, train_bias=True)
    n = s.K * (s.d + 2)
    assert H.shape == (n, n)
    np.testing.assert_array_equal(H, H.T)
    h = 1e-5
    fd = np.array([(grad(_shifted(s, k, h)) - grad(_shifted(s, k, -h))) / (2 * h) for k in range(n)])
    np.testing.assert_allclose(H, fd, rtol=1e-6, atol=1e-7 * np.abs(fd).max())
    np.testing.assert_allclose(tl.population.hessian(s, tgt), H[:-2, :-2], rtol=1e-13, atol=1e-15)


def test_hessian_against_a_polynomial_target_zero_biases_unchanged() -> None:
    """Zero biases: the (W, a) block of train_bias is the closed-form target Hessian (bitwise the former path)."""
    s, _ = tl.networks.teacher_student(2, 2, 5, "relu", seed=2)
    tgt = tl.targets.staircase(2, d=5, seed=1)
    H0 = tl.population.hessian(s, tgt)
    np.testing.assert_array_equal(tl.population.hessian(s.with_weights(s.W, bias=np.zeros(2)), tgt), H0)
    np.testing.assert_allclose(tl.population.hessian(s, tgt, train_bias=True)[:-2, :-2], H0, rtol=1e-10,
                               atol=1e-12)


def test_pair_moment_third_delta_derivative() -> None:
    """E[step^(4)(l1) b(l2)] = E[delta^(3)(l1) b(l2)] is the mu1-derivative of E[step^(3)(l1) b(l2)]."""
    C = np.array([[[1.3, 0.4], [0.4, 0.8]]])
    h = 1e-4
    for b in ("erf", "relu", "tanh", "step"):
        exact = tl._core.pair_moment("step", 4, b, 0, np.array([[0.3, -0.2]]), C)[0]
        fd = (tl._core.pair_moment("step", 3, b, 0, np.array([[0.3 + h, -0.2]]), C)[0]
              - tl._core.pair_moment("step", 3, b, 0, np.array([[0.3 - h, -0.2]]), C)[0]) / (2 * h)
        assert exact == pytest.approx(fd, rel=1e-6, abs=1e-9), b


@pytest.mark.parametrize("act", ACTS)
def test_gradient_matches_the_former_python_path(act: str) -> None:
    s, t = _pair(act, d=7)
    for x, y in zip(tl.population.gradient(s, t, train_bias=True), ref.gradient(s, t), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_descend_follows_the_former_python_loop(act: str) -> None:
    s, t = _pair(act, d=5)
    kw = {"lr": 0.3, "n_steps": 40, "lr_readout": 0.2, "lr_bias": 0.5}
    core = tl.population.descend(s, t, n_records=5, **kw)  # type: ignore[arg-type]
    loop = ref.descend(s, t, **kw)  # type: ignore[arg-type]
    assert core.status == "completed"
    np.testing.assert_allclose(core.student.W, loop.W, rtol=0, atol=1e-12)
    np.testing.assert_allclose(core.student.a, loop.a, rtol=0, atol=1e-12)
    np.testing.assert_allclose(core.student.bias, loop.bias, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(core.bias[-1], core.student.bias)
    assert core.risk[-1] == tl.population.risk(core.student, t)


def test_descend_follows_finite_difference_descent() -> None:
    """Five steps of descent on central differences of the risk reach the core's state to the differences' error."""
    s, t = _pair("softplus")
    lr, lr_a, lr_b, h = 0.4, 0.3, 0.5, 1e-5
    x = s
    n = s.K * (s.d + 2)
    rates = np.concatenate([np.full(s.K * s.d, lr), np.full(s.K, lr_a), np.full(s.K, lr_b)])
    for _ in range(5):
        g = np.array([(tl.population.risk(_shifted(x, k, h), t) - tl.population.risk(_shifted(x, k, -h), t)) / (2 * h)
                      for k in range(n)])
        step = -rates * g
        W, a, b = x.W + step[: s.K * s.d].reshape(x.W.shape), x.a + step[s.K * s.d: -s.K], x.bias + step[-s.K:]
        x = x.with_weights(W, a=a, bias=b)
    core = tl.population.descend(s, t, lr=lr, n_steps=5, lr_readout=lr_a, lr_bias=lr_b, n_records=2)
    np.testing.assert_allclose(core.student.W, x.W, atol=1e-8)
    np.testing.assert_allclose(core.student.a, x.a, atol=1e-8)
    np.testing.assert_allclose(core.student.bias, x.bias, atol=1e-8)


@pytest.mark.parametrize("act", ["erf", "relu", "step"])
def test_zero_bias_descend_bitwise_its_gradient_steps(act: str) -> None:
    """The shared descent loop: the zero-bias path is W <- W - lr dW, a <- a - lr_readout dR/da (to the rounding of
    the core's fused multiply-adds)."""
    s, t = tl.networks.teacher_student(2, 2, 6, act, seed=4)
    tr = tl.population.descend(s, t, lr=0.2, n_steps=6, lr_readout=0.1, n_records=2)
    W, a = s.W.copy(), s.a.copy()
    for _ in range(6):
        dW, da = tl.population.gradient(s.with_weights(W, a), t)
        W, a = W - 0.2 * dW, a - 0.1 * da
    np.testing.assert_allclose(tr.student.W, W, rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(tr.student.a, a, rtol=1e-14, atol=1e-16)


def test_hessian_at_zero_biases_keeps_the_core() -> None:
    """Zero biases without train_bias stay on the closed-form path (bitwise); with train_bias the (W, a) block of the
    path with means agrees with it."""
    s, t = tl.networks.teacher_student(2, 2, 5, "tanh", seed=1)
    s0, t0 = s.with_weights(s.W, bias=np.zeros(2)), t.with_weights(t.W, bias=np.zeros(2))
    np.testing.assert_array_equal(tl.population.hessian(s0, t0), tl.population.hessian(s, t))
    H = tl.population.hessian(s, t, train_bias=True)
    np.testing.assert_allclose(H[:-2, :-2], tl.population.hessian(s, t), rtol=1e-10, atol=1e-12)


def test_core_rejects_bad_biases() -> None:
    s, t = _pair("erf")
    with pytest.raises(ValueError, match="student.bias"):
        tl._core.population_gradient_mean(s.W, s.effective_a, "erf", t.W, t.effective_a, "erf", s.scale,
                                          np.zeros(3), t.bias)
    with pytest.raises(ValueError, match="teacher.bias: must be finite"):
        tl._core.population_gradient_mean(s.W, s.effective_a, "erf", t.W, t.effective_a, "erf", s.scale, s.bias,
                                          np.array([0.0, np.nan]))


def test_smooth_student_target_hessian_without_trained_biases() -> None:
    """A tanh student against a polynomial target: the Hessian without train_bias exists (it was refused while the
    same point with train_bias=True worked) and is the (W, a) block of the one with it."""
    tgt = tl.targets.staircase(2, d=12, seed=0)
    s = tl.Network.random(2, 12, "tanh", seed=1)
    H = tl.population.hessian(s, tgt)
    Hb = tl.population.hessian(s, tgt, train_bias=True)
    n = H.shape[0]
    np.testing.assert_allclose(H, Hb[:n, :n], rtol=1e-12, atol=1e-15)


def _aligned_step_pair(partner: str, eps: float, seed: int = 1) -> tuple[tl.Network, tl.Network]:
    """Step units with biases, student 0 at angle eps from a partner (teacher 0, student 1, or the antipode of
    teacher 0) and at a threshold b / |w| within ~eps of it: the cusp of the pair's moment."""
    rng = np.random.default_rng(seed)
    d = 4
    W, Wt = rng.standard_normal((2, d)), rng.standard_normal((2, d))
    b, bt = np.array([0.0, 0.3]), np.array([0.2, -0.5])
    to, tb = (W[1], b[1]) if partner == "student" else (Wt[0], bt[0])
    sign = -1.0 if partner == "antipode" else 1.0
    u = rng.standard_normal(d)
    u -= (u @ to) / (to @ to) * to
    u /= np.linalg.norm(u)
    W[0] = 1.3 * sign * (np.cos(eps) * to + np.sin(eps) * np.linalg.norm(to) * u)
    b[0] = 1.3 * sign * tb + 0.4 * eps
    return (tl.Network(W, [0.8, -0.6], "step", bias=b), tl.Network(Wt, [1.0, 0.7], "step", bias=bt))


def _row_gradient_mp(s: tl.Network, t: tl.Network, diff: bool) -> np.ndarray:
    """d/dw_0 and d/db_0 of the population risk at 40 digits from the exact double inputs: E[step step] =
    Phi2(beta_i, beta_k; rho) (beta = b sqrt(d) / |w|) through dPhi2/dbeta_i = phi(beta_i) Phi((beta_k - rho beta_i)
    / sqrt(1 - rho^2)) and Plackett's dPhi2/drho = phi2, or (diff) mpmath's derivative of Phi2 as a quadrature."""
    import mpmath as mp

    mp.mp.dps = 40
    d = s.d
    rows = [[mp.mpf(float(x)) for x in w] for w in np.vstack([s.W, t.W])]
    bias = [mp.mpf(float(x)) for x in np.concatenate([s.bias, t.bias])]
    c = [mp.mpf(float(x)) for x in np.concatenate([s.a, -t.a])]

    def parts(R: list, B: list) -> tuple:
        nrm = [mp.sqrt(mp.fsum(x * x for x in w)) for w in R]
        beta = [B[i] * mp.sqrt(d) / nrm[i] for i in range(len(R))]
        dots = [mp.fsum(x * y for x, y in zip(R[0], w, strict=True)) for w in R]
        rho = [dot / (nrm[0] * nk) for dot, nk in zip(dots, nrm, strict=True)]
        return nrm, beta, rho

    if diff:
        def phi2(h: Any, k: Any, rho: Any) -> Any:
            sd = mp.sqrt(1 - rho ** 2)
            cuts = sorted({x for x in (k / rho - 40 * sd, k / rho, k / rho + 40 * sd) if x < h})
            return mp.quad(lambda x: mp.npdf(x) * mp.ncdf((k - rho * x) / sd), [-mp.inf, *cuts, h])

        def risk0(j: int, x: Any) -> Any:  # the terms of the risk with unit 0
            R, B = [r[:] for r in rows], bias[:]
            if j < d:
                R[0][j] += x
            else:
                B[0] += x
            nrm, beta, rho = parts(R, B)
            r = c[0] ** 2 * mp.ncdf(beta[0]) / 2
            return r + mp.fsum(c[0] * c[k] * phi2(beta[0], beta[k], rho[k]) for k in range(1, len(R)))

        return np.array([float(mp.diff(lambda x, j=j: risk0(j, x), 0, h=mp.mpf(10) ** -20)) for j in range(d + 1)])
    nrm, beta, rho = parts(rows, bias)
    u0 = [x / nrm[0] for x in rows[0]]
    dbeta = [-beta[0] * x / nrm[0] ** 2 for x in rows[0]] + [mp.sqrt(d) / nrm[0]]  # d beta_0 / d(w_0, b_0)
    g = [c[0] ** 2 / 2 * mp.npdf(beta[0]) * x for x in dbeta]
    for k in range(1, len(rows)):
        sd = mp.sqrt(1 - rho[k] ** 2)
        pk = mp.npdf(beta[0]) * mp.ncdf((beta[k] - rho[k] * beta[0]) / sd)
        quad = beta[0] ** 2 - 2 * rho[k] * beta[0] * beta[k] + beta[k] ** 2
        dens = mp.exp(-quad / (2 * sd ** 2)) / (2 * mp.pi * sd)
        drho = [(x / nrm[k] - rho[k] * y) / nrm[0] for x, y in zip(rows[k], u0, strict=True)] + [0]
        g = [gj + c[0] * c[k] * (pk * db + dens * dr) for gj, db, dr in zip(g, dbeta, drho, strict=True)]
    return np.array([float(x) for x in g])


@pytest.mark.parametrize("partner", ["teacher", "student", "antipode"])
@pytest.mark.parametrize("eps", [1e-3, 1e-6, 1e-9, 1e-12])
def test_step_pairs_with_biases_near_alignment(partner: str, eps: float) -> None:
    """A step pair's force from the weights' chords (step_pair_force_mean): within a few eps_mach / eps of the
    gradient where the units (nearly) align or oppose, the conditioning of a force along a difference of nearly
    equal unit vectors (measured: up to 2e-16 / eps, in d/db_0). From the Gram entries the gradient was 1e-4 off at
    eps = 1e-6 and wholly wrong at 1e-8 (the cosine rounds to 1)."""
    s, t = _aligned_step_pair(partner, eps)
    dW, _, db = tl.population.gradient(s, t, train_bias=True)
    got, want = np.r_[dW[0], db[0]], _row_gradient_mp(s, t, diff=False)
    np.testing.assert_allclose(got, want, rtol=0, atol=max(1e-15, 5e-16 / eps) * np.abs(want).max())


@pytest.mark.slow
@pytest.mark.parametrize("partner", ["teacher", "student", "antipode"])
@pytest.mark.parametrize("eps", [1e-3, 1e-9])
def test_step_pairs_with_biases_near_alignment_quadrature(partner: str, eps: float) -> None:
    """The same against mpmath's derivative of the risk with Phi2 as a quadrature (no derivative formula)."""
    s, t = _aligned_step_pair(partner, eps)
    dW, _, db = tl.population.gradient(s, t, train_bias=True)
    got, want = np.r_[dW[0], db[0]], _row_gradient_mp(s, t, diff=True)
    np.testing.assert_allclose(got, want, rtol=0, atol=max(1e-15, 5e-16 / eps) * np.abs(want).max())
