"""Hermite activations sigma(s) = sum_k c_k He_k(s) (issue 23): the spelling, sigma against numpy's hermite_e, the
kernels (exact Gaussian moments) against an exact tensor Gauss-Hermite rule and Monte Carlo, the equivalences
hermite(0, 1) = linear and hermite(1, 0, 1) = quadratic through kernels and ODEs, the population gradient and Hessian
against finite differences, the ODE against SGD, and seed 002's staircase in the large-batch map."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import twolayer as tl
from conftest import MonteCarlo, assert_mc, assert_ode_follows_sgd
from numpy.polynomial import hermite_e as He
from twolayer import kernels
from twolayer.activations import derivative, hermite, sigma

H3 = hermite([0.2, 1.0, 0.5, -0.3])          # a generic cubic
H8 = hermite([0.1, 0.7, -0.4, 0.2, 0.1, -0.05, 0.02, 0.01, -0.003])  # degree 8, the largest
STAIR = hermite([0, 1, 1, 1])                # He_1 + He_2 + He_3


def coefs(name: str) -> np.ndarray:
    return tl.activations.hermite_coefficients(name)


def poly(name: str):
    """sigma and sigma' of a polynomial activation as numpy callables."""
    if name == "linear":
        c = np.array([0.0, 1.0])
    elif name == "quadratic":
        c = np.array([1.0, 0.0, 1.0])
    else:
        c = coefs(name)
    return (lambda s: He.hermeval(s, c)), (lambda s: He.hermeval(s, He.hermeder(c)))


def gauss_hermite(f, C: np.ndarray, mu: np.ndarray | None = None, nodes: int = 17) -> float:
    """E[f(l)], l ~ N(mu, C), by the tensor Gauss-Hermite rule (probabilists'), exact for polynomials of degree
    <= 2 nodes - 1 in each variable: an independent exact reference."""
    n = C.shape[0]
    x, w = He.hermegauss(nodes)
    w = w / np.sqrt(2 * np.pi)
    w_, V = np.linalg.eigh(C)
    L = V * np.sqrt(np.clip(w_, 0, None))
    X = np.array(list(itertools.product(x, repeat=n)))
    W = np.prod(np.array(list(itertools.product(w, repeat=n))), axis=1)
    lam = X @ L.T + (0 if mu is None else mu)
    return float(np.sum(W * f(lam)))


# ------------------------------------------------------------------ spelling


def test_spelling_is_canonical_and_validated():
    assert hermite([0, 1, 0.5]) == "hermite(0,1,0.5)"
    assert hermite([0.0, 1.0, 0.0, 0.0]) == "hermite(0,1)"  # trailing zeros dropped
    assert hermite([1e-5, -2.5e20, 1e16, 0.0001, 100]) == "hermite(1e-05,-2.5e+20,1e+16,0.0001,100)"  # Python's repr
    assert tl.activations.check_activation(" hermite( 0 , 1.0,0.5 )".strip()) == "hermite(0,1,0.5)"
    assert tl.activations.check_activation("hermite(-0.0)") == "hermite(0)"
    np.testing.assert_array_equal(coefs("hermite(0, 1, 0.5)"), [0, 1, 0.5])
    for bad, match in [("hermite(1, 2", "expected ',' or '\\)'"), ("hermite()", "expected a number"),
                       ("hermite(a)", "expected a number"), ("hermite(1,2)x", "trailing"),
                       ("hermite(nan)", "not finite"), ("hermite" + str(tuple(range(10))), "more than 9"),
                       ("hermite 1", "expected '\\('")]:
        with pytest.raises(ValueError, match="act_b: .*" + match):
            kernels.i2("erf", bad, np.eye(2))
    with pytest.raises(ValueError, match="coefficients: expected 1 to 9"):
        hermite(np.zeros(10))
    with pytest.raises(ValueError, match="coefficients"):
        hermite([1.0, np.inf])
    with pytest.raises(ValueError, match="activation: expected one of"):
        tl.Network(np.eye(2), [1.0, 1.0], "hermit(1)")


def test_sigma_and_derivative_against_numpy():
    s = np.linspace(-4, 4, 41)
    for name in (H3, H8, STAIR):
        f, df = poly(name)
        np.testing.assert_allclose(sigma(name, s), f(s), rtol=1e-13, atol=1e-12)
        np.testing.assert_allclose(derivative(name, s), df(s), rtol=1e-13, atol=1e-12)


def test_gpu_refuses_hermite_by_name():
    with pytest.raises(tl.DeviceUnavailable, match="hermite"):
        kernels.i2(H3, "erf", np.eye(2), device="cuda")
    st, te = tl.networks.teacher_student(1, 1, 20, H3, seed=0)
    with pytest.raises(tl.DeviceUnavailable, match="hermite"):
        tl.sgd.simulate(st, te, lr=0.1, t_max=0.1, device="cuda")


# ------------------------------------------------------------------ kernels


@pytest.fixture(scope="module")
def cov4(random_cov4):
    return random_cov4


def test_kernels_equal_linear_and_quadratic(cov4):
    """hermite(0, 1) is linear and hermite(1, 0, 1) = s^2 is quadratic: every kernel agrees to rounding, with any
    partner (classic closed forms against exact moments, or the smooth engine on both sides)."""
    C4 = cov4
    lin, quad = hermite([0, 1]), hermite([1, 0, 1])
    for h, name in ((lin, "linear"), (quad, "quadratic")):
        for p in ("linear", "erf", "quadratic", "tanh", H3, h):
            p2 = name if p == h else p
            assert kernels.i2(h, p, C4[:2, :2]) == pytest.approx(kernels.i2(name, p2, C4[:2, :2]), rel=1e-12, abs=1e-13)
            assert kernels.i3(h, p, C4[:3, :3]) == pytest.approx(kernels.i3(name, p2, C4[:3, :3]), rel=1e-12, abs=1e-13)
            assert kernels.i3(p, h, C4[:3, :3]) == pytest.approx(kernels.i3(p2, name, C4[:3, :3]), rel=1e-12, abs=1e-13)
            assert kernels.i4(h, p, h, C4) == pytest.approx(kernels.i4(name, p2, name, C4), rel=1e-11, abs=1e-12)
            assert kernels.i4(p, h, h, C4) == pytest.approx(kernels.i4(p2, name, name, C4), rel=1e-11, abs=1e-12)
        assert kernels.j2(h, C4[:2, :2]) == pytest.approx(kernels.j2(name, C4[:2, :2]), rel=1e-12, abs=1e-13)


@pytest.mark.parametrize("mean", [False, True])
def test_kernels_against_exact_gauss_hermite(cov4, mean):
    """Polynomial pairs are exact Gaussian moments: I2, I3, J2, I4 (with and without means) against the tensor
    Gauss-Hermite rule, which is exact for these degrees (relative 1e-11)."""
    rng = np.random.default_rng(5)
    mu4 = rng.normal(0, 0.7, 4) if mean else np.zeros(4)
    kw = (lambda n: {"mean": mu4[:n]}) if mean else (lambda n: {})
    C2, C3 = cov4[:2, :2], cov4[:3, :3]
    mu3 = np.array([mu4[0], 0.0, mu4[2]])  # I3's middle variable is centred
    for a, b in [(H3, H3), (H8, H3), (H8, H8), (H3, "linear"), ("quadratic", H8), (STAIR, H3)]:
        fa, dfa = poly(a)
        fb, _ = poly(b)
        ref = gauss_hermite(lambda L, fa=fa, fb=fb: fa(L[:, 0]) * fb(L[:, 1]), C2, mu4[:2])
        assert kernels.i2(a, b, C2, **kw(2)) == pytest.approx(ref, rel=1e-11, abs=1e-12), (a, b)
        ref = gauss_hermite(lambda L, dfa=dfa, fb=fb: dfa(L[:, 0]) * L[:, 1] * fb(L[:, 2]), C3, mu3, nodes=10)
        got = kernels.i3(a, b, C3, **({"mean": mu3} if mean else {}))
        assert got == pytest.approx(ref, rel=1e-11, abs=1e-12), (a, b)
        ref = gauss_hermite(lambda L, dfa=dfa: dfa(L[:, 0]) * dfa(L[:, 1]), C2, mu4[:2])
        assert kernels.j2(a, C2, **kw(2)) == pytest.approx(ref, rel=1e-11, abs=1e-12), a
    for s, a, b in [(H3, H3, H3), (H8, H3, "linear"), (STAIR, STAIR, H8), ("linear", H8, H3), ("quadratic", H3, H8)]:
        _, ds = poly(s)
        fa, _ = poly(a)
        fb, _ = poly(b)
        ref = gauss_hermite(lambda L, ds=ds, fa=fa, fb=fb: ds(L[:, 0]) * ds(L[:, 1]) * fa(L[:, 2]) * fb(L[:, 3]),
                            cov4, mu4, nodes=16)
        assert kernels.i4(s, a, b, cov4, **kw(4)) == pytest.approx(ref, rel=1e-10, abs=1e-12), (s, a, b)


def test_kernels_against_monte_carlo(cov4):
    """Hermite with hermite and with other smooth units (the certified quadrature) against 2e6 samples (5 SE)."""
    C = cov4
    fns = {}
    for a, b in [(H3, H8), (H3, "tanh"), ("gelu", H8)]:
        fns[("i2", a, b)] = lambda X, a=a, b=b: sigma(a, X[:, 0]) * sigma(b, X[:, 1])
        fns[("i3", a, b)] = lambda X, a=a, b=b: derivative(a, X[:, 0]) * X[:, 1] * sigma(b, X[:, 2])
    for s, a, b in [(H3, H3, "tanh"), ("tanh", H3, H8), (H8, "erf", H3)]:
        fns[("i4", s, a, b)] = lambda X, s=s, a=a, b=b: (derivative(s, X[:, 0]) * derivative(s, X[:, 1])
                                                         * sigma(a, X[:, 2]) * sigma(b, X[:, 3]))
    mc = MonteCarlo(C, samples=2_000_000).means(fns)
    for key, ref in mc.items():
        if key[0] == "i2":
            assert_mc(kernels.i2(key[1], key[2], C[:2, :2]), ref, what=str(key))
        elif key[0] == "i3":
            assert_mc(kernels.i3(key[1], key[2], C[:3, :3]), ref, what=str(key))
        else:
            assert_mc(kernels.i4(key[1], key[2], key[3], C), ref, what=str(key))


def test_mixed_smooth_pair_against_gauss_hermite_in_one_variable():
    """A hermite unit with tanh through the certified engine: at C11 = 0 the pair is sigma_h(0) E[tanh(l2)]-like;
    at a generic C, E[h(l1) tanh(l2)] = E[tanh(l2) E[h(l1) | l2]] with the inner expectation exact, the outer a
    1-d Gauss-Hermite rule on tanh times a polynomial (converged at 200 nodes to ~1e-14)."""
    C = np.array([[1.3, 0.6], [0.6, 0.9]])
    x, y, z = C[0, 0], C[0, 1], C[1, 1]
    c = coefs(H8)
    t, w = He.hermegauss(200)
    w = w / np.sqrt(2 * np.pi)
    l2 = np.sqrt(z) * t
    m, v = y / z * l2, x - y * y / z  # l1 | l2 ~ N(m, v)
    u, wu = He.hermegauss(10)
    wu = wu / np.sqrt(2 * np.pi)
    inner = (He.hermeval(m[:, None] + np.sqrt(v) * u[None, :], c) * wu).sum(1)
    ref = float(np.sum(w * np.tanh(l2) * inner))
    assert kernels.i2(H8, "tanh", C) == pytest.approx(ref, rel=1e-10, abs=1e-13)


POLY = ("linear", "quadratic", H3)


def _random_cases(n: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """(C, mu) pairs of 4 fields: generic, near-singular (l4 ~ l1) and an exactly repeated unit (l2 = l1, the
    self pair i = k of the ODE), variances 0.2 to 3, means up to 2."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        A = rng.normal(size=(4, 4))
        if k % 4 == 1:
            A[3] = A[0] + 1e-4 * rng.normal(size=4)
        if k % 4 == 2:
            A[1] = A[0]
        out.append((A @ A.T / 4 * rng.uniform(0.2, 3.0), rng.normal(size=4) * rng.uniform(0.1, 2.0)))
    return out


def test_polynomial_i4_with_means_is_exact():
    """I4 = E[s'(l1) s'(l2) a(l3) b(l4)] with means of three polynomial units (linear, quadratic, hermite) is the
    exact Gaussian moment (gaussian_smooth.hpp poly_product4), not the trapezoidal rule: against the tensor
    Gauss-Hermite rule (exact for these degrees) to 1e-12 relative over random covariances and means; and the
    classic quadratic is bitwise its hermite spelling hermite(1, 0, 1) = s^2 (the same monomials, the same path)."""
    quad = hermite([1, 0, 1])
    for C, mu in _random_cases(12, seed=9):
        for s, a, b in itertools.product(POLY, repeat=3):
            _, ds = poly(s)
            fa, _ = poly(a)
            fb, _ = poly(b)
            ref = gauss_hermite(lambda L, ds=ds, fa=fa, fb=fb: ds(L[:, 0]) * ds(L[:, 1]) * fa(L[:, 2]) * fb(L[:, 3]),
                                C, mu, nodes=6)
            got = kernels.i4(s, a, b, C, mean=mu)
            assert got == pytest.approx(ref, rel=1e-12, abs=1e-13 * (1 + abs(ref))), (s, a, b, got, ref)
        for a, b in [("quadratic", "quadratic"), ("linear", "quadratic"), ("quadratic", H3)]:
            spelt = [quad if x == "quadratic" else x for x in (a, b)]
            assert kernels.i4("quadratic", a, b, C, mean=mu) == kernels.i4(quad, *spelt, C, mean=mu), (a, b)


def test_polynomial_i4_with_means_against_monte_carlo(cov4):
    """The quadratic student's I4 with means (and a hermite one) against 2e6 samples (5 SE)."""
    mu = np.array([0.4, -0.7, 0.9, -0.3])
    fns = {}
    for s, a, b in [("quadratic", "quadratic", "quadratic"), ("quadratic", "linear", H3), (H3, "quadratic", "linear")]:
        fns[(s, a, b)] = lambda X, s=s, a=a, b=b: (derivative(s, X[:, 0] + mu[0]) * derivative(s, X[:, 1] + mu[1])
                                                   * sigma(a, X[:, 2] + mu[2]) * sigma(b, X[:, 3] + mu[3]))
    for key, ref in MonteCarlo(cov4, samples=2_000_000).means(fns).items():
        assert_mc(kernels.i4(*key, cov4, mean=mu), ref, what=str(key))


# ------------------------------------------------------------------ population, ODEs, SGD


def test_population_gradient_and_hessian_against_finite_differences():
    rng = np.random.default_rng(3)
    W, Wt = rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    a0 = np.array([0.7, -0.4])
    teacher = tl.Network(Wt, [1.0, 0.5], H8)

    def net(th):
        return tl.Network(th[:8].reshape(2, 4), th[8:], H3)

    theta = np.concatenate([W.ravel(), a0])
    dW, da = tl.population.gradient(net(theta), teacher)
    H = tl.population.hessian(net(theta), teacher)

    def grad(th):
        g = tl.population.gradient(net(th), teacher)
        return np.concatenate([g[0].ravel(), g[1]])

    eps = 1e-5
    E = np.eye(theta.size)
    g_fd = np.array([(tl.population.risk(net(theta + eps * e), teacher)
                      - tl.population.risk(net(theta - eps * e), teacher)) / (2 * eps) for e in E])
    np.testing.assert_allclose(np.concatenate([dW.ravel(), da]), g_fd, rtol=1e-7, atol=1e-7)
    H_fd = np.array([(grad(theta + eps * e) - grad(theta - eps * e)) / (2 * eps) for e in E])
    np.testing.assert_allclose(H, H_fd, rtol=1e-6, atol=1e-6)


def test_population_risk_with_biases_against_monte_carlo():
    rng = np.random.default_rng(11)
    d = 6
    student = tl.Network(rng.standard_normal((2, d)), [0.8, -0.3], H3, bias=[0.3, -0.5])
    teacher = tl.Network(rng.standard_normal((2, d)), [1.0, 0.4], STAIR, bias=[0.2, 0.1])
    risk = tl.population.risk(student, teacher)
    X = np.random.default_rng(1).standard_normal((1_000_000, d))
    e = 0.5 * (teacher(X) - student(X)) ** 2
    assert_mc(risk, (e.mean(), e.std() / np.sqrt(e.size)))


@pytest.mark.parametrize(("h", "name"), [(hermite([0, 1]), "linear"), (hermite([1, 0, 1]), "quadratic")])
@pytest.mark.parametrize("regime", ["online", "gradient_flow"])
def test_ode_equals_classic(h, name, regime):
    st, te = tl.networks.teacher_student(2, 2, 30, name, seed=3)
    ov = tl.Overlaps.from_networks(st, te)
    kw = dict(lr=0.3, regime=regime, t_max=2.0, n_records=5, method="rk4", dt=0.01)
    a = tl.ode.integrate(ov, h, **kw)
    b = tl.ode.integrate(ov, name, **kw)
    for f in ("Q", "M", "risk"):
        np.testing.assert_allclose(getattr(a, f), getattr(b, f), rtol=1e-10, atol=1e-12, err_msg=f)


def test_online_ode_against_sgd():
    """Online SGD at d = 2000 with a cubic hermite student and teacher (K = M = 1, trained readout, 10 seeds) against
    the online ODE: mean Q, M and risk within 4 standard errors plus 0.2 / sqrt(d) (test_sgd_ode.py's allowance)."""
    d, K, M = 2000, 1, 1
    act = hermite([0, 1, 0.3, -0.2])
    st, te = tl.networks.teacher_student(K, M, d, act, seed=4)
    st = st.with_weights(np.random.default_rng(9).standard_normal((K, d)) * 0.5)
    lr, lr_readout, t_max = 0.3, 0.1, 3.0
    ens = tl.sgd.simulate(st, te, lr=lr, lr_readout=lr_readout, t_max=t_max, n_records=7, seed=1, seeds=10)
    ref = tl.ode.integrate(tl.Overlaps.from_networks(st, te), act, lr=lr, lr_readout=lr_readout, times=ens.t,
                           method="rk4", dt=0.05)
    assert ref.status == "completed"
    assert_ode_follows_sgd(ens, ref, d)
    assert abs(ref.risk[-1] - ref.risk[0]) > 10 * (0.2 / np.sqrt(d))


@pytest.mark.parametrize(("act", "climb"), [(STAIR, (1, 2, 3)), (hermite([0, 1, 0, 1]), (1, None, None)),
                                           (hermite([0, 1, 1]), (1, 2, None))])
def test_staircase_large_batch_parity(act, climb):
    """Seed 002: from M = 0 the large-batch map's pull on z_r of z1 + z1 z2 + z1 z2 z3 is E[sigma^(r)] times the
    earlier overlaps, and E[sigma^(r)(l)] at l ~ N(0, 1) is r! c_r: the student He_1 + He_2 + He_3 picks up z1, z2,
    z3 at iterations 1, 2, 3 (where erf misses z2 and relu z3: tests/test_targets_bias.py), He_1 + He_3 (odd) never
    leaves z1 and He_1 + He_2 never reaches z3 (0 to round-off: the target's moments go through the certified
    quadrature of smooth students). The example's figure shows the first beside relu and erf."""
    from test_targets_bias import _example

    ex = _example()
    assert (STAIR, 0.0) in ex.PARITY
    m = np.abs(ex.parity_climb(act, 0.0).M).max(axis=1)  # (7, 3)
    for r, first in enumerate(climb):
        if first is None:
            assert np.all(m[:, r] < 1e-15), (r, m[:, r])
        else:
            assert np.all(m[:first, r] == 0.0), (r, m[:, r])
            assert np.all(m[first:, r] > 1e-8), (r, m[:, r])  # 7 orders above round-off


def test_sde_increment_covariance():
    """The SDE's Gauss-Hermite rule is exact for hermite units at its default node count: hermite(1, 0, 1) gives
    quadratic's increment moments, and a cubic's do not move with more nodes."""
    st, te = tl.networks.teacher_student(2, 1, 30, "quadratic", seed=2)
    ov = tl.Overlaps.from_networks(st, te)
    a = tl.sde.increment_covariance(ov, hermite([1, 0, 1]), lr=0.3)
    b = tl.sde.increment_covariance(ov, "quadratic", lr=0.3)
    np.testing.assert_allclose(a.cov, b.cov, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(a.mean, b.mean, rtol=1e-11, atol=1e-13)
    c = tl.sde.increment_covariance(ov, H3, lr=0.3)
    d = tl.sde.increment_covariance(ov, H3, lr=0.3, n_nodes=40)
    np.testing.assert_allclose(c.cov, d.cov, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize(("h", "name"), [(hermite([0, 1]), "linear"), (hermite([1, 0, 1]), "quadratic")])
def test_dmft_equals_classic(h, name):
    """The DMFT solver evaluates any activation pointwise (smooth and hermite ones were silently left at zero
    error before): hermite(0, 1) and hermite(1, 0, 1) give linear's and quadratic's results."""
    tgt = tl.targets.hermite({(1,): 1.0, (2,): 0.5}, d=20, seed=0)
    kw = dict(a=[1.0], alpha=2.0, lr=0.3, n_steps=3, n_mc=2000)
    r_h, r_c = tl.dmft.solve(tgt, activation=h, **kw), tl.dmft.solve(tgt, activation=name, **kw)
    for f in ("train_risk", "test_risk", "Q", "M"):
        np.testing.assert_allclose(getattr(r_h, f), getattr(r_c, f), rtol=1e-12, atol=1e-14, err_msg=f)
    assert np.all(np.asarray(r_h.test_risk) > 0)


@pytest.mark.parametrize("name, coefficients", [("linear", [0, 1]), ("quadratic", [1, 0, 1])])
def test_hermite_monomials_have_the_rescaling_orbit(name: str, coefficients: list[float]) -> None:
    """He_1 = s and 1 + He_2 = s^2 are homogeneous: with a trained readout the landscape tools see the same
    rescaling orbit (flat directions) as for linear and quadratic units (a KeyError before)."""
    h = tl.activations.hermite(coefficients)
    assert tl.landscape.homogeneity_degree(h) == tl.landscape.homogeneity_degree(name)
    s, t = tl.networks.teacher_student(2, 2, 6, "linear", seed=1)
    plain = tl.landscape.refine(tl.Network(s.W, s.a, name), tl.Network(t.W, t.a, name), train_readout=True)
    herm = tl.landscape.refine(tl.Network(s.W, s.a, h), tl.Network(t.W, t.a, h), train_readout=True)
    assert (herm.kind, herm.index, herm.nullity) == (plain.kind, plain.index, plain.nullity)
    np.testing.assert_allclose(herm.risk, plain.risk, rtol=1e-8, atol=1e-14)
    assert tl.landscape.orbit_tangents(herm.student, True).shape[1] == 2


def test_spelling_does_not_depend_on_the_locale() -> None:
    """A program that set a locale with a decimal comma (setlocale) still reads and writes "0.5" (strtod and printf
    follow the locale: the parser translates the point)."""
    import locale

    old = locale.setlocale(locale.LC_NUMERIC)
    for name in ("de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8"):
        try:
            locale.setlocale(locale.LC_NUMERIC, name)
            break
        except locale.Error:
            continue
    else:
        pytest.skip("no locale with a decimal comma installed")
    try:
        assert hermite([0, 0.5, 1e-5, -2.25]) == "hermite(0,0.5,1e-05,-2.25)"
        assert tl.activations.check_activation("hermite(0.25, 1.5)") == "hermite(0.25,1.5)"
        np.testing.assert_allclose(sigma("hermite(0.25,1.5)", [2.0]), [3.25])
        assert tl.activations.hermite_coefficients("hermite(0,5)").tolist() == [0.0, 5.0]  # a comma separates
    finally:
        locale.setlocale(locale.LC_NUMERIC, old)
