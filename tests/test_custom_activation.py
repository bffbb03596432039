"""User-function activations (tl.activations.custom): custom versions of built-ins reproduce them in every engine
(kernels, population, ODEs, SGD, SDE, large batch, landscape), a new function against mpmath and Monte Carlo, and
every bad input gives a clear error."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
import twolayer as tl
from conftest import MonteCarlo, assert_mc, assert_ode_follows_sgd
from twolayer import kernels
from twolayer.activations import custom


def _tanh_derivatives():
    def d1(s):
        return 1.0 / np.cosh(s) ** 2

    def d2(s):
        return -2.0 * np.tanh(s) * d1(s)

    def d3(s):
        t = np.tanh(s)
        return d1(s) * (6.0 * t * t - 2.0)

    def d4(s):
        t = np.tanh(s)
        return d1(s) * t * (16.0 - 24.0 * t * t)

    return [d1, d2, d3, d4]


def _softplus(s):
    return np.log1p(np.exp(s))  # accepts complex arrays (Cauchy's formula gives its derivatives)


AUTO = custom("mytanh", np.tanh)
EXPLICIT = custom("mytanh_d", np.tanh, _tanh_derivatives())
SOFTPLUS = custom("mysoftplus", _softplus)
CASES = [(AUTO, "tanh"), (EXPLICIT, "tanh"), (SOFTPLUS, "softplus")]


def _close(a, b, rel=1e-10, abs_=1e-13):
    np.testing.assert_allclose(a, b, rtol=rel, atol=abs_)


def test_pointwise_tables_reproduce_the_builtins():
    x = np.linspace(-30.0, 30.0, 20001)
    y = np.linspace(30.0, 45.0, 101)  # beyond the domain: the tangent-line tails (softplus: e^-30 ~ 1e-13 off)
    y = np.concatenate([-y, y])
    for c, name in CASES:
        _close(tl.activations.sigma(c, x), tl.activations.sigma(name, x), 1e-13, 1e-13)
        _close(tl.activations.derivative(c, x), tl.activations.derivative(name, x), 1e-12, 1e-13)
        _close(tl.activations.sigma(c, y), tl.activations.sigma(name, y), 1e-13, 2e-12)
        _close(tl.activations.derivative(c, y), tl.activations.derivative(name, y), 1e-12, 2e-13)


@pytest.mark.parametrize(("c", "name"), CASES)
@pytest.mark.parametrize("mean", [False, True])
def test_kernels_reproduce_the_builtins(random_cov4, c, name, mean, slow=False):
    C4 = random_cov4
    rng = np.random.default_rng(7)
    mu = rng.normal(0, 0.6, 4) if mean else None
    kw = (lambda n: {"mean": mu[:n]}) if mean else (lambda n: {})
    mu3 = None if mu is None else np.array([mu[0], 0.0, mu[2]])
    for p, pn in ((c, name), ("erf", "erf"), ("relu", "relu")):
        _close(kernels.i2(c, p, C4[:2, :2], **kw(2)), kernels.i2(name, pn, C4[:2, :2], **kw(2)))
        kw3 = {"mean": mu3} if mean else {}
        _close(kernels.i3(c, p, C4[:3, :3], **kw3), kernels.i3(name, pn, C4[:3, :3], **kw3))
        if p != "relu" or slow:  # the nested kinked I4 takes seconds
            _close(kernels.i4(c, p, c, C4, **kw(4)), kernels.i4(name, pn, name, C4, **kw(4)))
    _close(kernels.j2(c, C4[:2, :2]), kernels.j2(name, C4[:2, :2]))


@pytest.mark.slow
@pytest.mark.parametrize("mean", [False, True])
def test_kernels_with_relu_partners_reproduce_the_builtins(random_cov4, mean):
    test_kernels_reproduce_the_builtins(random_cov4, AUTO, "tanh", mean, slow=True)


@pytest.mark.parametrize(("c", "name"), CASES)
def test_population_reproduces_the_builtins(c, name):
    rng = np.random.default_rng(3)
    W, Wt = rng.standard_normal((2, 5)), rng.standard_normal((2, 5))
    for bias in (None, [0.3, -0.4]):
        s = tl.Network(W, [0.7, -0.4], c, bias=bias)
        s0 = tl.Network(W, [0.7, -0.4], name, bias=bias)
        t = tl.Network(Wt, [1.0, 0.5], c, bias=bias)
        t0 = tl.Network(Wt, [1.0, 0.5], name, bias=bias)
        _close(tl.population.risk(s, t), tl.population.risk(s0, t0))
        for g, g0 in zip(tl.population.gradient(s, t), tl.population.gradient(s0, t0), strict=True):
            _close(g, g0, 1e-10, 1e-12)
        _close(tl.population.hessian(s, t), tl.population.hessian(s0, t0), 1e-9, 1e-11)


@pytest.mark.parametrize(("c", "name"), CASES)
@pytest.mark.parametrize("regime", ["online", "gradient_flow"])
def test_ode_reproduces_the_builtins(c, name, regime):
    st, te = tl.networks.teacher_student(2, 2, 30, name, seed=3)
    ov = tl.Overlaps.from_networks(st, te)
    kw = dict(lr=0.3, lr_readout=0.1, regime=regime, t_max=1.0, n_records=3, method="rk4", dt=0.05)
    a, b = tl.ode.integrate(ov, c, **kw), tl.ode.integrate(ov, name, **kw)
    assert a.status == b.status == "completed"
    for f in ("Q", "M", "a", "risk"):
        _close(getattr(a, f), getattr(b, f), 1e-10, 1e-12)


@pytest.mark.parametrize(("c", "name"), CASES)
def test_sgd_same_seed_same_trajectory(c, name):
    st, te = tl.networks.teacher_student(2, 2, 100, name, seed=1)
    kw = dict(lr=0.5, lr_readout=0.1, t_max=1.0, n_records=3, seed=4)
    a = tl.sgd.simulate(tl.Network(st.W, st.a, c), tl.Network(te.W, te.a, c), **kw)
    b = tl.sgd.simulate(st, te, **kw)
    for f in ("Q", "M", "a", "risk"):
        _close(getattr(a, f), getattr(b, f), 1e-11, 1e-13)


def test_sde_and_large_batch_reproduce_the_builtins():
    st, te = tl.networks.teacher_student(2, 1, 30, "tanh", seed=2)
    ov = tl.Overlaps.from_networks(st, te)
    a = tl.sde.increment_covariance(ov, AUTO, lr=0.3)
    b = tl.sde.increment_covariance(ov, "tanh", lr=0.3)
    _close(a.cov, b.cov, 1e-10, 1e-13)
    _close(a.mean, b.mean, 1e-10, 1e-13)
    a = tl.sde.increment_covariance(ov, AUTO, "relu", lr=0.3)  # Gauss-Hermite beside exact orthant moments
    b = tl.sde.increment_covariance(ov, "tanh", "relu", lr=0.3)
    _close(a.cov, b.cov, 1e-10, 1e-13)
    kw = dict(lr=0.5, batch_ratio=2.0, n_steps=3)
    x = tl.large_batch.iterate(ov, AUTO, AUTO, **kw)
    y = tl.large_batch.iterate(ov, "tanh", "tanh", **kw)
    for f in ("Q", "M", "risk"):
        _close(getattr(x, f), getattr(y, f), 1e-10, 1e-12)


def test_landscape_reproduces_the_builtins():
    rng = np.random.default_rng(5)
    Wt = rng.standard_normal((2, 4))
    W = Wt + 0.05 * rng.standard_normal((2, 4))
    a = tl.landscape.refine(tl.Network(W, [1.0, 1.0], AUTO), tl.Network(Wt, [1.0, 1.0], AUTO), tol=1e-11)
    b = tl.landscape.refine(tl.Network(W, [1.0, 1.0], "tanh"), tl.Network(Wt, [1.0, 1.0], "tanh"), tol=1e-11)
    _close(a.student.W, b.student.W, 1e-8, 1e-9)
    _close(a.eigenvalues, b.eigenvalues, 1e-8, 1e-10)
    assert a.kind == b.kind


# ------------------------------------------------------------------ a new function


def _new(s):
    return np.tanh(s) + 0.1 * s


def dsig(s):
    return 1.0 / np.cosh(s) ** 2 + 0.1


def phi(u):
    return np.exp(-0.5 * u * u) / np.sqrt(2 * np.pi)


NEW = custom("tanh_plus_linear", _new)


def _mp_pair(f, g, C) -> float:
    """E[f(l1) g(l2)], (l1, l2) ~ N(0, C), by nested tanh-sinh quadrature (20 digits)."""
    x, y, z = (mp.mpf(float(v)) for v in (C[0][0], C[0][1], C[1][1]))
    with mp.workdps(20):
        c = y / mp.sqrt(x)
        s = mp.sqrt(z - c * c)

        def inner(t):
            return mp.quad(lambda u: g(c * t + s * u) * mp.npdf(u), [-mp.inf, -c * t / s, mp.inf])

        return float(mp.quad(lambda t: f(mp.sqrt(x) * t) * inner(t) * mp.npdf(t), [-mp.inf, 0, mp.inf]))


def test_new_function_i2_against_adaptive_quadrature():
    """I2 against nested scipy adaptive quadrature (the inner conditional expectation by quad): 1e-10."""
    from scipy.integrate import quad

    C = np.array([[1.3, 0.6], [0.6, 0.8]])
    c = C[0, 1] / np.sqrt(C[0, 0])
    s = np.sqrt(C[1, 1] - c * c)

    def pair(f, g):
        def inner(t):
            return quad(lambda u: g(c * t + s * u) * phi(u), -12, 12, epsabs=1e-14, epsrel=1e-12, limit=200)[0]

        return quad(lambda t: f(np.sqrt(C[0, 0]) * t) * inner(t) * phi(t), -12, 12, epsabs=1e-14, epsrel=1e-12,
                    limit=200)[0]

    assert kernels.i2(NEW, NEW, C) == pytest.approx(pair(_new, _new), rel=1e-10, abs=1e-14)


@pytest.mark.slow
def test_new_function_i2_against_mpmath():
    def f(s):
        return mp.tanh(s) + s / 10

    C = np.array([[1.3, 0.6], [0.6, 0.8]])
    ref = _mp_pair(f, f, C)
    assert kernels.i2(NEW, NEW, C) == pytest.approx(ref, rel=1e-10, abs=1e-14)


def test_new_function_i3_i4_against_monte_carlo(random_cov4):
    mc = MonteCarlo(random_cov4, samples=2_000_000)
    ref = mc.means({"i3": lambda L: dsig(L[:, 0]) * L[:, 1] * _new(L[:, 2]),
                    "i4": lambda L: dsig(L[:, 0]) * dsig(L[:, 1]) * _new(L[:, 2]) * _new(L[:, 3])})
    i3, i4 = ref["i3"], ref["i4"]
    assert_mc(kernels.i3(NEW, NEW, random_cov4[:3, :3]), i3, what="I3")
    assert_mc(kernels.i4(NEW, NEW, NEW, random_cov4), i4, what="I4")


def test_new_function_gradient_against_finite_differences():
    rng = np.random.default_rng(8)
    W, Wt = rng.standard_normal((2, 4)), rng.standard_normal((2, 4))
    teacher = tl.Network(Wt, [1.0, 0.5], NEW)

    def net(th):
        return tl.Network(th[:8].reshape(2, 4), th[8:], NEW)

    theta = np.concatenate([W.ravel(), [0.7, -0.4]])
    dW, da = tl.population.gradient(net(theta), teacher)
    eps = 1e-5
    g_fd = np.array([(tl.population.risk(net(theta + eps * e), teacher)
                      - tl.population.risk(net(theta - eps * e), teacher)) / (2 * eps) for e in np.eye(10)])
    np.testing.assert_allclose(np.concatenate([dW.ravel(), da]), g_fd, rtol=1e-7, atol=1e-8)


@pytest.mark.slow
def test_new_function_online_ode_against_sgd():
    """Online SGD at d = 2000 (10 seeds) against the online ODE: within 4 standard errors plus 0.2 / sqrt(d)."""
    d = 2000
    st, te = tl.networks.teacher_student(2, 2, d, NEW, seed=4)
    lr, lr_readout, t_max = 0.5, 0.1, 2.0
    ens = tl.sgd.simulate(st, te, lr=lr, lr_readout=lr_readout, t_max=t_max, n_records=5, seed=1, seeds=10)
    ref = tl.ode.integrate(tl.Overlaps.from_networks(st, te), NEW, lr=lr, lr_readout=lr_readout, times=ens.t,
                           method="rk4", dt=0.05)
    assert ref.status == "completed"
    assert_ode_follows_sgd(ens, ref, d)


# ------------------------------------------------------------------ bad input


def test_registration_is_idempotent_and_names_are_unique():
    assert custom("mytanh", np.tanh) == AUTO == "custom(mytanh)"
    with pytest.raises(ValueError, match="already registered with another function"):
        custom("mytanh", lambda s: 0.5 * np.tanh(s))
    assert tl.activations.is_custom(AUTO) and not tl.activations.is_custom("tanh")
    assert tl.activations.check_activation(AUTO) == AUTO


def test_unregistered_spelling_is_a_clear_error():
    with pytest.raises(ValueError, match=r"custom\(nowhere\)' is not registered in this process"):
        tl.activations.check_activation("custom(nowhere)")
    with pytest.raises(ValueError, match="not registered"):
        kernels.i2("custom(nowhere)", "erf", np.eye(2))
    with pytest.raises(ValueError, match="not registered"):  # a config names a function, never defines one
        tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "lr": 0.5, "activation": "custom(nowhere)"})


@pytest.mark.parametrize(("args", "kwargs", "err", "match"), [
    (("1bad", np.tanh), {}, ValueError, "name: expected an identifier"),
    ((3, np.tanh), {}, TypeError, "name: expected a str"),
    (("f", 3.0), {}, TypeError, "function: expected a callable"),
    (("f", lambda s: np.tanh(s)[:-1]), {}, ValueError, "function: expected a vectorised function"),
    (("f", lambda s: np.tanh(s) + 0j), {}, TypeError, "function: expected real numbers"),
    (("f", lambda s: np.where(np.abs(s - 0.3) < 1e-2, np.nan, s)), {}, ValueError, "function: expected finite"),
    (("f", np.abs), {}, ValueError, "function: not smooth at s = 0"),
    (("f", lambda s: np.maximum(s - 0.3, 0.0)), {}, ValueError, "not smooth enough near s in"),
    (("f", np.tanh, [np.tanh]), {}, ValueError, r"derivatives\[0\]: expected sigma's derivative of order 1"),
    (("f", np.tanh, [1.0]), {}, TypeError, r"derivatives\[0\]: expected a callable"),
    (("f", np.tanh, [np.tanh] * 5), {}, ValueError, "derivatives: expected 1 to 4"),
    (("f", lambda s: np.logaddexp(0.0, s)), {}, ValueError, "derivatives: sigma's derivative of order 2 cannot"),
    (("f", lambda s: s / np.sqrt(1 + s * s)), {}, ValueError, "domain: beyond s = -30"),
    (("f", np.tanh), {"domain": 0.1}, ValueError, "domain: expected a half-width"),
])
def test_bad_input_is_named(args, kwargs, err, match):
    with pytest.raises(err, match=match):
        custom(*args, **kwargs)


def test_domain_beyond_the_panel_budget_is_named_before_tabulating():
    """A domain of more than MAX_PANELS unit panels (documented range [1, 1e6] before) allocated the Cauchy nodes of
    all of them at once (domain 1e5: 9.4 GiB) before the panel budget was checked: now a ValueError up front."""
    from twolayer import _custom
    calls = []

    def f(s):
        calls.append(s.size)
        return np.tanh(s)

    with pytest.raises(ValueError, match=r"domain: expected a half-width in \[1, 10000\]"):
        custom("too_wide", f, domain=1e5)
    assert calls == []  # refused before evaluating anything
    assert _custom.MAX_DOMAIN * 2 / _custom.MAX_WIDTH <= _custom.MAX_PANELS


def test_large_domain_tabulates_in_chunks(monkeypatch):
    """The panels are evaluated in chunks of CHUNK (bounded memory), with the same table as one evaluation."""
    from twolayer import _custom
    sizes = []

    def f(s):
        sizes.append(s.shape[0])
        return np.tanh(s)

    edges, coef, strip = _custom.tabulate(f, [], 600.0)
    assert max(sizes) <= _custom.CHUNK < len(edges) - 1
    monkeypatch.setattr(_custom, "CHUNK", 10**6)
    e1, c1, s1 = _custom.tabulate(np.tanh, [], 600.0)
    np.testing.assert_array_equal(edges, e1)
    np.testing.assert_array_equal(coef, c1)
    assert strip == s1


@pytest.mark.parametrize(("bad", "match"), [
    ({"edges": np.array([1.0, 0.0, -1.0])}, r"edges: .*increasing"),
    ({"coefficients": np.full((2, 5, 3), np.nan)}, r"coefficients: .*finite"),
    ({"strip": -1.0}, r"strip: expected a positive"),
    ({"strip": np.nan}, r"strip: expected a positive"),
])
def test_register_table_names_the_bad_argument(bad, match):
    """A bad table names its own argument (it named 'name' for every one)."""
    args = {"edges": np.array([-1.0, 0.0, 1.0]), "coefficients": np.zeros((2, 5, 3)), "strip": 1.0, **bad}
    with pytest.raises(ValueError, match=match):
        tl.activations.register_table("bad_table", **args)


def test_gpu_refuses_custom_by_name():
    with pytest.raises(tl.DeviceUnavailable, match="custom"):
        kernels.i2(AUTO, "erf", np.eye(2), device="cuda")
    st, te = tl.networks.teacher_student(1, 1, 20, AUTO, seed=0)
    with pytest.raises(tl.DeviceUnavailable, match="custom"):
        tl.sgd.simulate(st, te, lr=0.1, t_max=0.1, device="cuda")


# ------------------------------------------------------------------ scans


def _scan(act):
    return tl.scan.Scan("ode", constants={"K": 2, "M": 2, "d": 20, "t_max": 0.5, "n_records": 3, "activation": act,
                                          "method": "rk4", "dt": 0.05}, axes={"lr": [0.3, 0.6]})


def test_scan_in_process_equals_the_builtin():
    _close(tl.scan.run(_scan(AUTO)).risk.values, tl.scan.run(_scan("tanh")).risk.values, 1e-10, 1e-13)


@pytest.mark.slow
def test_scan_on_a_fresh_worker_process(tmp_path):
    """A spawned worker (which never ran ``custom``) registers the tables shipped with its task and writes the same
    numbers as the scan in process (~8 s: the worker's interpreter start-up)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    here = tl.scan.run(_scan(AUTO))
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        tl.scan.run(_scan(AUTO), store=tmp_path / "s.zarr", executor=pool, load_result=False)
    np.testing.assert_array_equal(tl.scan.open_dataset(tmp_path / "s.zarr").risk.values, here.risk.values)


def test_sharp_function_gets_bisected_panels():
    """tanh(4 s) (poles at +-i pi / 8) needs panels narrower than 1 near 0 (unequal panels: the binary-search
    lookup); its kernels are tanh's at the covariance 16 C."""
    sharp = custom("tanh4", lambda s: np.tanh(4.0 * s))
    x = np.linspace(-35.0, 35.0, 7001)
    _close(tl.activations.sigma(sharp, x), np.tanh(4.0 * x), 1e-13, 2e-13)
    _close(tl.activations.derivative(sharp, x), 4.0 / np.cosh(4.0 * x) ** 2, 1e-11, 1e-11)
    edges, _, strip = tl.activations.custom_tables([sharp])[sharp]
    assert np.diff(edges).min() < 1.0 and strip < np.pi / 8
    C = np.array([[0.3, 0.1], [0.1, 0.2]])
    _close(kernels.i2(sharp, sharp, C), kernels.i2("tanh", "tanh", 16.0 * C), 1e-10, 1e-14)
    C3, D = np.eye(3) * 0.5 + 0.1, np.diag([4.0, 1.0, 1.0])  # sigma'(l1) = 4 tanh'(4 l1)
    _close(kernels.i3(sharp, AUTO, C3), 4.0 * kernels.i3("tanh", "tanh", D @ C3 @ D), 1e-10, 1e-13)


def test_affine_and_nearly_linear_functions_register_and_match_exact_moments():
    """sigma'' of an affine function is 0 (Cauchy's formula gives rounding: it was taken for a kink); sigma = 2s + 1
    reproduces the exact moments I2 = 4 C12 + 1, I3 = 4 C23, I4 = 4 (4 C34 + 1), and s + 1e-3 tanh(s) registers and
    matches a 2-D Gauss-Hermite rule."""
    aff = tl.activations.custom("affine_2s_1", lambda s: 2 * s + 1)
    C3 = np.array([[1.0, 0.3, 0.2], [0.3, 1.2, 0.1], [0.2, 0.1, 0.9]])
    C4 = np.eye(4) + 0.2
    assert tl.kernels.i2(aff, aff, C3[:2, :2]) == pytest.approx(4 * 0.3 + 1, abs=1e-12)
    assert tl.kernels.i3(aff, aff, C3) == pytest.approx(4 * 0.1, abs=1e-12)
    assert tl.kernels.i4(aff, aff, aff, C4) == pytest.approx(4 * (4 * 0.2 + 1), abs=1e-11)
    near = tl.activations.custom("nearly_linear", lambda s: s + 1e-3 * np.tanh(s))
    x, w = np.polynomial.hermite_e.hermegauss(120)
    w = w / w.sum()
    L = np.linalg.cholesky(C3[:2, :2])
    u, v = np.meshgrid(x, x, indexing="ij")
    f = lambda s: s + 1e-3 * np.tanh(s)  # noqa: E731
    ref = np.sum(np.outer(w, w) * f(L[0, 0] * u) * f(L[1, 0] * u + L[1, 1] * v))
    assert tl.kernels.i2(near, near, C3[:2, :2]) == pytest.approx(ref, rel=1e-10)
