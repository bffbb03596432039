"""Smooth activations (tanh, sigmoid, softplus, gelu, silu, sin, cos) through the generic Gaussian engine:
sigma against mpmath, the kernels I2, J2 (and I3, I4) against mpmath quadrature (1e-10 relative) over a grid of
covariances including near-singular ones, I3 and I4 against Monte Carlo (5 standard errors), and the population
risk, gradient and Hessian, the ODEs and SGD with these activations."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
import twolayer as tl
from conftest import MonteCarlo, assert_mc, assert_ode_follows_sgd
from scipy.integrate import quad
from scipy.special import erf, erfc
from twolayer import kernels
from twolayer.activations import derivative, sigma

NEW = ("tanh", "sigmoid", "softplus", "gelu", "silu", "sin", "cos")
SMOOTH = NEW + ("linear", "erf", "quadratic")

MP_SIGMA = {
    "tanh": mp.tanh,
    "sigmoid": lambda s: 1 / (1 + mp.exp(-s)),
    "softplus": lambda s: mp.log1p(mp.exp(s)),
    "gelu": lambda s: s * mp.ncdf(s),
    "silu": lambda s: s / (1 + mp.exp(-s)),
    "sin": mp.sin,
    "cos": mp.cos,
    "linear": lambda s: s,
    "erf": lambda s: mp.erf(s / mp.sqrt(2)),
    "quadratic": lambda s: s * s,
}


def mp_deriv(name: str, k: int):
    f = MP_SIGMA[name]

    def d(s):
        with mp.workdps(60):  # numerical differentiation needs the extra digits
            return +mp.diff(f, mp.mpf(s), k)

    return f if k == 0 else d


def mp_pair(f, g, C) -> float:
    """E[f(l1) g(l2)], (l1, l2) ~ N(0, C), by nested tanh-sinh quadrature (conditioning on l1; 20 digits; ~30 s)."""
    x, y, z = (mp.mpf(float(v)) for v in (C[0][0], C[0][1], C[1][1]))
    with mp.workdps(20):
        if x == 0:
            return float(f(mp.mpf(0)) * mp.quad(lambda u: g(mp.sqrt(z) * u) * mp.npdf(u), [-mp.inf, 0, mp.inf]))
        c = y / mp.sqrt(x)
        s = mp.sqrt(max(z - c * c, mp.mpf(0)))

        def inner(t):
            if s == 0:
                return g(c * t)
            return mp.quad(lambda u: g(c * t + s * u) * mp.npdf(u), [-mp.inf, -c * t / s, mp.inf])

        return float(mp.quad(lambda t: f(mp.sqrt(x) * t) * inner(t) * mp.npdf(t), [-mp.inf, 0, mp.inf]))


SP_SIGMA = {
    "tanh": np.tanh,
    "sigmoid": lambda s: 0.5 * (1 + np.tanh(0.5 * s)),
    "softplus": lambda s: np.logaddexp(0.0, s),
    "gelu": lambda s: s * 0.5 * erfc(-s / np.sqrt(2)),
    "silu": lambda s: s * 0.5 * (1 + np.tanh(0.5 * s)),
    "sin": np.sin,
    "cos": np.cos,
    "linear": lambda s: s,
    "erf": lambda s: erf(s / np.sqrt(2)),
    "quadratic": lambda s: s * s,
}


def sp_pair(f, g, C) -> float:
    """E[f(l1) g(l2)] by nested adaptive Gauss-Kronrod (scipy, epsabs 1e-15): an independent double-precision
    reference, fast enough for the default run (mpmath in the slow grid test)."""
    x, y, z = float(C[0][0]), float(C[0][1]), float(C[1][1])
    phi = lambda t: np.exp(-0.5 * t * t) / np.sqrt(2 * np.pi)  # noqa: E731
    opts = {"epsabs": 1e-15, "epsrel": 1e-14, "limit": 400}
    if x == 0:
        return f(0.0) * quad(lambda u: g(np.sqrt(z) * u) * phi(u), -12, 12, points=[0.0], **opts)[0]
    c = y / np.sqrt(x)
    s = np.sqrt(max(z - c * c, 0.0))

    def inner(t):
        if s == 0:
            return g(c * t)
        p = -c * t / s
        return quad(lambda u: g(c * t + s * u) * phi(u), -12, 12, points=[p] if abs(p) < 12 else None, **opts)[0]

    return quad(lambda t: f(np.sqrt(x) * t) * inner(t) * phi(t), -12, 12, points=[0.0], **opts)[0]


def cov2(x, rho, z):
    return np.array([[x, rho * np.sqrt(x * z)], [rho * np.sqrt(x * z), z]])


# unit, mixed, large and small variances, near-singular (|rho| = 1 - 1e-12) and zero variance
GRID = [cov2(1.0, 0.5, 1.0), cov2(0.3, -0.7, 2.5), cov2(6.0, 0.9, 0.5), cov2(1e-6, 0.3, 1.0),
        cov2(1.5, 1 - 1e-12, 1.5), cov2(2.0, -(1 - 1e-12), 0.7), np.array([[0.0, 0.0], [0.0, 1.3]])]
FAST_GRID = [GRID[1], GRID[4]]


def rel_err(value: float, ref: float, scale: float = 0.0) -> float:
    return abs(value - ref) / max(abs(ref), scale, 1e-300)


def test_sigma_and_derivative_against_mpmath():
    """1e-12 relative (gelu far in the tail: the conditioning of erfc at s / sqrt 2)."""
    s = np.array([-30.0, -3.0, -0.4, 0.0, 0.7, 2.5, 40.0])
    for name in NEW:
        for k, fn in ((0, sigma), (1, derivative)):
            ref = [float(mp_deriv(name, k)(mp.mpf(v))) for v in s]
            np.testing.assert_allclose(fn(name, s), ref, rtol=1e-12, atol=1e-300, err_msg=f"{name}^({k})")


def test_vectorised_tanh_and_exp_against_mpmath():
    """The lattice tables' branch-free tanh, sech^2 and e^-|x| (simd_math.hpp) to a few ulp of mpmath, odd/even, and
    exact at 0 and in the saturated tails."""
    from twolayer import _core
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-30.0, 30.0, 601), rng.normal(0.0, 3.0, 400), [0.625, -0.625, 1e-300, 1e-8]])
    t, u, e = _core.tanh_sech2_simd(x)
    with mp.workdps(40):
        rt = np.array([float(mp.tanh(mp.mpf(v))) for v in x])
        ru = np.array([float(mp.sech(mp.mpf(v)) ** 2) for v in x])
        re = np.array([float(mp.exp(-abs(mp.mpf(v)))) for v in x])
    for got, ref, ulps in ((t, rt, 2.0), (u, ru, 4.0), (e, re, 2.0)):
        nz = ref != 0
        assert np.max(np.abs(got - ref)[nz] / np.spacing(np.abs(ref[nz]))) <= ulps
    t2, u2, e2 = _core.tanh_sech2_simd(-x)
    np.testing.assert_array_equal(t2, -t)
    np.testing.assert_array_equal(u2, u)
    np.testing.assert_array_equal(e2, e)
    t0, u0, e0 = _core.tanh_sech2_simd(np.array([0.0, 800.0]))
    np.testing.assert_array_equal(t0, [0.0, 1.0])
    assert u0[0] == 1.0 and e0[0] == 1.0 and 0.0 <= u0[1] < 1e-300 and 0.0 <= e0[1] < 1e-300


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")  # QUADPACK on the reference side
def test_i2_j2_against_adaptive_quadrature_fast():
    """The default run's sample of the slow test below: two pairs at the near-singular covariance."""
    for a, b in [("tanh", "softplus"), ("silu", "gelu")]:
        C = GRID[4]
        assert rel_err(kernels.i2(a, b, C), sp_pair(SP_SIGMA[a], SP_SIGMA[b], C)) <= 1e-10, (a, b)


# The lattice rule's regimes (gaussian_smooth.hpp): tiles of several k (large variance), steps in a ratio p = 17
# (r = 0.999), windows that do not overlap (r = 1 - 1e-9), windows longer than a tile (variances in the hundreds),
# nearly independent
LATTICE_GRID = [cov2(40.0, 0.3, 0.01), cov2(1.0, 0.999, 1.5), cov2(0.8, 1 - 1e-9, 2.0), cov2(300.0, -0.4, 200.0),
                cov2(1.0, 1e-7, 0.9)]


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")  # QUADPACK on the reference side
@pytest.mark.slow
def test_i2_lattice_regimes_against_adaptive_quadrature():
    """1e-10 relative (~20 s)."""
    for a, b in [("tanh", "gelu"), ("softplus", "silu")]:
        for C in LATTICE_GRID:
            ref = sp_pair(SP_SIGMA[a], SP_SIGMA[b], C)
            scale = sp_pair(lambda s, a=a: abs(SP_SIGMA[a](s)), lambda s, b=b: abs(SP_SIGMA[b](s)), C)
            assert rel_err(kernels.i2(a, b, C), ref, 1e-3 * scale) <= 1e-10, (a, b, C)


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")  # QUADPACK on the reference side
@pytest.mark.slow
@pytest.mark.parametrize(("a", "b"), [(a, a) for a in NEW] + [("tanh", "softplus"), ("gelu", "erf"),
                                                              ("sin", "linear"), ("cos", "quadratic")])
def test_i2_j2_against_adaptive_quadrature(a, b):
    """1e-10 relative over the whole covariance grid (30-120 s per pair)."""
    for C in GRID:
        ref = sp_pair(SP_SIGMA[a], SP_SIGMA[b], C)
        scale = sp_pair(lambda s: abs(SP_SIGMA[a](s)), lambda s: abs(SP_SIGMA[b](s)), C)
        assert rel_err(kernels.i2(a, b, C), ref, 1e-3 * scale) <= 1e-10, (a, b, C)
    C = FAST_GRID[0]
    da = lambda s: derivative(a, s)  # noqa: E731
    assert rel_err(kernels.j2(a, C), sp_pair(da, da, C)) <= 1e-10


@pytest.mark.slow
@pytest.mark.parametrize(("a", "b"), [(a, a) for a in NEW] + [("tanh", "softplus"), ("gelu", "silu")])
def test_i2_grid_against_mpmath(a, b):
    """Pairs of new activations over the covariance grid against mpmath, 1e-10 relative (the scale of |a b|
    guards values that vanish by symmetry). Minutes per pair."""
    for C in GRID[:4]:
        ref = mp_pair(MP_SIGMA[a], MP_SIGMA[b], C)
        scale = mp_pair(lambda s: abs(MP_SIGMA[a](s)), lambda s: abs(MP_SIGMA[b](s)), C)
        assert rel_err(kernels.i2(a, b, C), ref, 1e-3 * scale) <= 1e-10, (a, b, C)


@pytest.mark.slow
def test_i4_linear_units_against_pair_integrals():
    """I4(s, linear, linear) by Stein's lemma reduces to pair expectations:
    E[s'(l1) s'(l2) l3 l4] = C34 E[s's'] + C13 C14 E[s''' s'] + (C13 C24 + C14 C23) E[s'' s''] + C23 C24 E[s' s''']
    (adaptive quadrature, derivatives written out here), which checks the generic I4 engine (outer quadrature,
    conditional moments with means)."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal((4, 4))
    C = A @ A.T / 4 + 0.1 * np.eye(4)
    phi = lambda v: np.exp(-0.5 * v * v) / np.sqrt(2 * np.pi)  # noqa: E731
    logistic = lambda v: 0.5 * (1 + np.tanh(0.5 * v))  # noqa: E731
    higher = {  # second and third derivatives, independent of the C++ core
        "tanh": (lambda v: -2 * np.tanh(v) / np.cosh(v) ** 2,
                 lambda v: (6 * np.tanh(v) ** 2 - 2) / np.cosh(v) ** 2),
        "softplus": (lambda v: logistic(v) * logistic(-v),
                     lambda v: logistic(v) * logistic(-v) * (logistic(-v) - logistic(v))),
        "gelu": (lambda v: (2 - v * v) * phi(v), lambda v: (v**3 - 4 * v) * phi(v)),
    }
    for s in ("tanh", "softplus", "gelu"):
        d = [None, lambda v, s=s: float(derivative(s, v)), *higher[s]]
        B = C[:2, :2]
        ref = (C[2, 3] * sp_pair(d[1], d[1], B) + C[0, 2] * C[0, 3] * sp_pair(d[3], d[1], B)
               + (C[0, 2] * C[1, 3] + C[0, 3] * C[1, 2]) * sp_pair(d[2], d[2], B)
               + C[1, 2] * C[1, 3] * sp_pair(d[1], d[3], B))
        assert rel_err(kernels.i4(s, "linear", "linear", C), ref) <= 1e-10, s


@pytest.fixture(scope="module")
def mc_smooth(random_cov4):
    C = random_cov4
    fns = {}
    for s, b in [("tanh", "tanh"), ("softplus", "sigmoid"), ("gelu", "silu"), ("sin", "cos"), ("tanh", "erf")]:
        fns[("i3", s, b)] = lambda X, s=s, b=b: derivative(s, X[:, 0]) * X[:, 1] * sigma(b, X[:, 2])
    for s, a, b in [("tanh", "tanh", "tanh"), ("softplus", "softplus", "linear"),
                    ("silu", "gelu", "sigmoid"), ("sin", "cos", "sin"), ("cos", "cos", "cos"),
                    ("erf", "tanh", "softplus"), ("tanh", "sin", "erf")]:
        fns[("i4", s, a, b)] = lambda X, s=s, a=a, b=b: (derivative(s, X[:, 0]) * derivative(s, X[:, 1])
                                                         * sigma(a, X[:, 2]) * sigma(b, X[:, 3]))
    return C, MonteCarlo(C, samples=2_000_000).means(fns)


def test_i3_i4_against_monte_carlo(mc_smooth):
    C, mc = mc_smooth
    for key, ref in mc.items():
        if key[0] == "i3":
            assert_mc(kernels.i3(key[1], key[2], C[:3, :3]), ref, what=str(key))
        else:
            assert_mc(kernels.i4(key[1], key[2], key[3], C), ref, what=str(key))


def test_relu_with_smooth_unit_runs_the_engine_with_means_at_zero_mean():
    """No zero-mean kernel pairs a relu or step unit with a smooth one: the CPU runs the with-means engine at mean 0
    (issue 23); the GPU still refuses."""
    C = np.array([[1.0, 0.3], [0.3, 0.8]])
    assert kernels.i2("relu", "tanh", C) == kernels.i2("relu", "tanh", C, mean=np.zeros(2))
    assert kernels.i2("relu", "tanh", C) == pytest.approx(kernels.i2("relu", "tanh", C, mean=[1e-9, 0.0]), rel=1e-7)
    C4 = np.eye(4) + 0.2
    assert kernels.i4("tanh", "relu", "tanh", C4) == kernels.i4("tanh", "relu", "tanh", C4, mean=np.zeros(4))
    assert kernels.i4("relu", "tanh", "relu", C4) == pytest.approx(
        kernels.i4("relu", "tanh", "relu", C4, mean=[0.0, 0.0, 1e-9, 0.0]), rel=1e-7)


def test_huge_variance_is_a_clear_error():
    with pytest.raises(ValueError, match="certified accuracy"):
        kernels.i2("tanh", "tanh", np.eye(2) * 1e7)


def test_i2_derivatives_against_finite_differences():
    """The jets of the generic engine (Price moments up to fourth order) through the Hessian of the population risk."""
    rng = np.random.default_rng(3)
    for act in ("tanh", "softplus", "sin"):
        W = rng.standard_normal((2, 4))
        Wt = rng.standard_normal((2, 4))
        student = tl.Network(W, [0.7, -0.4], act)
        teacher = tl.Network(Wt, [1.0, 0.5], act)
        dW, da = tl.population.gradient(student, teacher)
        H = tl.population.hessian(student, teacher)
        theta = np.concatenate([W.ravel(), [0.7, -0.4]])

        def risk(th, act=act, Wt=Wt):
            return tl.population.risk(tl.Network(th[:8].reshape(2, 4), th[8:], act), tl.Network(Wt, [1.0, 0.5], act))

        def grad(th, act=act, Wt=Wt):
            g = tl.population.gradient(tl.Network(th[:8].reshape(2, 4), th[8:], act), tl.Network(Wt, [1.0, 0.5], act))
            return np.concatenate([g[0].ravel(), g[1]])

        eps = 1e-5
        E = np.eye(theta.size)
        g_fd = np.array([(risk(theta + eps * e) - risk(theta - eps * e)) / (2 * eps) for e in E])
        np.testing.assert_allclose(np.concatenate([dW.ravel(), da]), g_fd, atol=1e-8, err_msg=act)
        H_fd = np.array([(grad(theta + eps * e) - grad(theta - eps * e)) / (2 * eps) for e in E])
        np.testing.assert_allclose(H, H_fd, atol=1e-7, err_msg=act)


def test_population_risk_against_monte_carlo():
    rng = np.random.default_rng(11)
    d = 6
    student = tl.Network(rng.standard_normal((2, d)), [0.8, -0.3], "softplus")
    teacher = tl.Network(rng.standard_normal((3, d)), [1.0, 0.4, -0.6], "tanh")
    risk = tl.population.risk(student, teacher)
    X = np.random.default_rng(1).standard_normal((1_000_000, d))
    f = sigma("softplus", X @ student.W.T / np.sqrt(d)) @ student.a
    y = sigma("tanh", X @ teacher.W.T / np.sqrt(d)) @ teacher.a
    e = 0.5 * (y - f) ** 2
    assert_mc(risk, (e.mean(), e.std() / np.sqrt(e.size)))


def test_gradient_flow_ode_matches_weight_space_flow():
    """Overlap-space gradient flow is exact at finite d: it must agree with the weight-space flow of the population
    gradient (RK4 in both at the same step, compared at the same time)."""
    rng = np.random.default_rng(7)
    d = 5
    student = tl.Network(rng.standard_normal((2, d)), [0.5, 0.5], "tanh")
    teacher = tl.Network(rng.standard_normal((2, d)), [1.0, 1.0], "tanh")
    ov = tl.Overlaps.from_networks(student, teacher)
    lr, t_max = 1.0, 2.0
    traj = tl.ode.integrate(ov, "tanh", lr=lr, regime="gradient_flow", t_max=t_max, method="rk4", dt=1e-2,
                            n_records=3)
    # weight space: dW/dt = -lr d * grad_W R (t = steps / d with per-step rate lr / d on the d-scaled gradient)
    W = student.W.copy()
    a = student.a.copy()
    n = 200
    h = t_max / n

    def f(W):
        return -lr * d * tl.population.gradient(tl.Network(W, a, "tanh"), teacher, train_readout=False)[0]

    for _ in range(n):  # RK4
        k1 = f(W)
        k2 = f(W + 0.5 * h * k1)
        k3 = f(W + 0.5 * h * k2)
        k4 = f(W + h * k3)
        W = W + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    np.testing.assert_allclose(traj.Q[-1], W @ W.T / d, atol=1e-8)
    np.testing.assert_allclose(traj.M[-1], W @ teacher.W.T / d, atol=1e-8)


@pytest.mark.slow
@pytest.mark.parametrize(("act", "spherical"), [("tanh", False), ("softplus", False), ("tanh", True)])
def test_online_ode_against_sgd(act, spherical):
    """Online SGD at d = 2000 (K = M = 1: the generic online I4 costs ~0.1 s a table; 10 seeds, trained readout)
    against the online ODE from the same overlaps: the mean
    of Q, M and the risk within 4 standard errors plus 0.2 / sqrt(d) (test_sgd_ode.py's allowance)."""
    d, K, M = 2000, 1, 1
    st, te = tl.networks.teacher_student(K, M, d, act, seed=4)
    W = np.random.default_rng(9).standard_normal((K, d)) * 0.5
    if spherical:
        W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    st = st.with_weights(W)
    lr, lr_readout, t_max = 0.5, 0.2 if not spherical else 0.0, 3.0
    ens = tl.sgd.simulate(st, te, lr=lr, lr_readout=lr_readout, spherical=spherical, t_max=t_max, n_records=7, seed=1,
                          seeds=10)
    ref = tl.ode.integrate(tl.Overlaps.from_networks(st, te), act, lr=lr, lr_readout=lr_readout, spherical=spherical,
                           times=ens.t, method="rk4", dt=0.05)
    assert ref.status == "completed"
    assert_ode_follows_sgd(ens, ref, d)
    assert abs(ref.risk[-1] - ref.risk[0]) > 10 * (0.2 / np.sqrt(d))  # the dynamics moved measurably
