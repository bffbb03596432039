"""Polynomial (Hermite) targets against biased and smooth students: the exact expectations
E[prod_s F_s(b_s + l_s) p(z)] against an independent quadrature (scipy's adaptive quad over the student fields, the
target given them by exact Gauss-Hermite) and Monte Carlo, and the large-batch map with fixed student biases
(continuity with the unbiased path, finite-d SGD)."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from scipy import integrate
from scipy.special import erf, expit
from twolayer import _core

STAIR = (np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1]]), np.array([1.0, 1.0, 1.0]))


def stair3(z):
    return z[..., 0] + z[..., 0] * z[..., 1] + z[..., 0] * z[..., 1] * z[..., 2]


def sig(act, x):
    return {"tanh": np.tanh(x), "softplus": np.logaddexp(0.0, x), "sigmoid": expit(x),
            "erf": erf(x / np.sqrt(2)), "linear": x, "quadratic": x * x}[act]


def dsig(act, x):
    return {"tanh": 1.0 / np.cosh(x) ** 2, "softplus": expit(x), "sigmoid": expit(x) * expit(-x),
            "erf": np.sqrt(2 / np.pi) * np.exp(-x * x / 2), "linear": np.ones_like(x), "quadratic": 2 * x}[act]


def joint_cov(seed=0, n=2, k=3):
    """A covariance of (l_1..l_n, z_1..z_k) with Cov(z) = I."""
    rng = np.random.default_rng(seed)
    L = rng.standard_normal((n, k)) * 0.4
    Qs = 0.8 * np.eye(n) + 0.2 * np.ones((n, n)) + L @ L.T
    return Qs, L, np.block([[Qs, L], [L.T, np.eye(k)]])


def field_factor(act, fac, mu, ls):
    """prod_s sigma'(b_s + l_s)^nd sigma(b_s + l_s)^ns l_s^pw at the points ls (..., n)."""
    v = np.ones(ls.shape[:-1])
    for s, (nd, ns, pw) in enumerate(fac):
        x = mu[s] + ls[..., s]
        v = v * dsig(act, x) ** nd * sig(act, x) ** ns * ls[..., s] ** pw
    return v


def reference(act, fac, Qs, Ms, mu, fn=stair3):
    """E[prod_s F_s(mu_s + l_s) fn(z)] by scipy's adaptive quadrature over the n <= 2 fields l (their Gaussian
    density), with E[fn(z) | l] by tensor Gauss-Hermite (exact for the polynomial: z = A l + R xi)."""
    n, k = Ms.shape
    A = np.linalg.solve(Qs, Ms).T
    R = np.linalg.cholesky(np.eye(k) - A @ Ms + 1e-300 * np.eye(k))
    x, w = np.polynomial.hermite_e.hermegauss(8)
    Xi = np.array(np.meshgrid(*[x] * k, indexing="ij")).reshape(k, -1).T
    W = np.prod(np.array(np.meshgrid(*[w / w.sum()] * k, indexing="ij")).reshape(k, -1), axis=0)
    Qi = np.linalg.inv(Qs)
    norm = 1.0 / np.sqrt((2 * np.pi) ** n * np.linalg.det(Qs))

    def g(*l):
        lv = np.array(l)
        h = W @ fn(lv @ A.T + Xi @ R.T)
        return field_factor(act, fac, mu, lv[None])[0] * h * norm * np.exp(-0.5 * lv @ Qi @ lv)

    lim = 12.0 * np.sqrt(np.diag(Qs))
    opts = {"epsabs": 1e-14, "epsrel": 1e-13, "limit": 200}
    if n == 1:
        return integrate.quad(g, -lim[0], lim[0], **opts)[0]
    return integrate.nquad(lambda a, b: g(a, b), [[-lim[0], lim[0]], [-lim[1], lim[1]]],
                           opts=[{**opts, "epsabs": 1e-13}, opts])[0]


@pytest.mark.parametrize("act", ["tanh", "softplus", "erf", "quadratic"])
def test_biased_expectations_against_quadrature_one_field(act):
    """One field, a bias b = 0.7: every one-unit pattern of the large-batch map agrees with scipy's quad to 1e-10."""
    Qs, Ms, _ = joint_cov(2, n=1)
    mu = np.array([0.7])
    for fac in ([[1, 0, 0]], [[1, 0, 1]], [[0, 1, 0]], [[2, 0, 0]], [[2, 1, 0]]):
        ex = _core.target_expectation(act, Qs, Ms, np.array(fac), *STAIR, mu=mu)
        assert ex == pytest.approx(reference(act, fac, Qs, Ms, mu), abs=1e-10), fac


@pytest.mark.slow
@pytest.mark.parametrize("act", ["tanh", "softplus"])
def test_biased_expectations_against_quadrature_two_fields(act):
    """Two fields with biases (0.7, -0.4): the pair patterns agree with scipy's nested quad to 1e-10."""
    Qs, Ms, _ = joint_cov(3, n=2)
    mu = np.array([0.7, -0.4])
    for fac in ([[1, 0, 0], [0, 0, 1]], [[1, 0, 0], [1, 0, 0]], [[1, 1, 0], [1, 0, 0]]):
        ex = _core.target_expectation(act, Qs, Ms, np.array(fac), *STAIR, mu=mu)
        assert ex == pytest.approx(reference(act, fac, Qs, Ms, mu), abs=1e-10), fac


@pytest.mark.slow
def test_zero_bias_smooth_and_tiny_bias_classic():
    """tanh at zero bias goes through the same quadrature (against quad); erf and quadratic with a bias of 1e-13 go
    through the quadrature and agree with their closed forms at zero bias to 1e-11."""
    Qs, Ms, _ = joint_cov(4, n=2)
    fac = [[1, 0, 0], [0, 1, 1]]
    ex = _core.target_expectation("tanh", Qs, Ms, np.array(fac), *STAIR)
    assert ex == pytest.approx(reference("tanh", fac, Qs, Ms, np.zeros(2)), abs=1e-10)
    for act in ("erf", "quadratic", "linear"):
        closed = _core.target_expectation(act, Qs, Ms, np.array(fac), *STAIR)
        quad = _core.target_expectation(act, Qs, Ms, np.array(fac), *STAIR, mu=np.array([1e-13, 0.0]))
        assert quad == pytest.approx(closed, abs=1e-11), act


@pytest.mark.parametrize("n_fields", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_biased_expectations_against_monte_carlo(n_fields):
    """Up to three fields with biases, the patterns of the map for tanh and softplus (2 * 10^5 samples, 5 SEM)."""
    Qs, Ms, Om = joint_cov(5, n=3)
    mu = np.array([0.6, -0.3, 1.1])
    X = np.random.default_rng(11).standard_normal((200_000, 6)) @ np.linalg.cholesky(Om).T
    pats = [p for p in ([[1, 0, 0]], [[1, 0, 1]], [[2, 1, 0]], [[1, 0, 0], [0, 0, 1]],
                        [[1, 0, 0], [1, 0, 0], [0, 1, 0]]) if len(p) <= n_fields]
    for act in ("tanh", "softplus"):
        for fac in pats:
            n = len(fac)
            ex = _core.target_expectation(act, Qs[:n, :n], Ms[:n], np.array(fac), *STAIR, mu=mu[:n])
            v = field_factor(act, fac, mu, X[:, :n]) * stair3(X[:, 3:])
            sem = v.std() / np.sqrt(len(v))
            assert abs(ex - v.mean()) < 5 * sem, (act, fac, ex, v.mean(), sem)


# ------------------------------------------------------------------ the large-batch map with fixed biases


def _overlaps(act, K=2, bias=None, seed=0, scale=0.3):
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((K, K + 3))
    M = scale * rng.standard_normal((K, 3)) / np.sqrt(3)
    Q = 0.5 * W @ W.T / (K + 3) + 0.5 * np.eye(K) + M @ M.T
    return tl.Overlaps(Q, M, np.eye(3), rng.uniform(0.5, 1.0, K), np.zeros(3), activation=act, bias=bias)


@pytest.mark.parametrize("act", ["erf", "linear", "quadratic"])
def test_map_with_tiny_bias_matches_the_unbiased_map(act):
    """Biases of 1e-12 take the biased path (committee parts from the kernels with means, target parts by
    quadrature); it agrees with the unbiased path (OdeRhs committee, closed-form target parts) to 1e-9 + 1e-11
    relative."""
    tgt = tl.targets.staircase(3, d=10, seed=0)
    kw = dict(target=tgt, lr=0.5, regime="large_batch", batch_ratio=2.0, n_steps=3, noise=0.1)
    plain = tl.ode.integrate(_overlaps(act), act, **kw)
    biased = tl.ode.integrate(_overlaps(act, bias=[1e-12, -1e-12]), act, **kw)
    np.testing.assert_allclose(biased.Q, plain.Q, atol=1e-9, rtol=1e-11)
    np.testing.assert_allclose(biased.M, plain.M, atol=1e-9, rtol=1e-11)
    np.testing.assert_allclose(biased.risk, plain.risk, atol=1e-9, rtol=1e-11)
    assert biased.status == plain.status and biased.bias is not None and biased.bias.shape == (len(plain), 2)


@pytest.mark.parametrize("act", ["tanh", "softplus", "erf", "relu"])
def test_map_bias_step_is_minus_the_population_bias_gradient(act):
    """With lr = 0 the map's bias step is b <- b - lr_bias dR/db (dR/db_i = -a_i E[sigma'(l_i + b_i) E]); checked
    against population.gradient's bias gradient of the same network (kernels with means + target_cross_grad)."""
    st = _biased_student(act)
    tgt = tl.targets.staircase(3, d=st.d, seed=1)
    db = tl.population.gradient(st, tgt, train_bias=True)[2]
    tr = tl.large_batch.iterate(tl.Overlaps.from_networks(st, tgt), act, "target", target=tgt, lr=0.0,
                                batch_ratio=1.0, n_steps=1, lr_bias=0.3)
    np.testing.assert_allclose(tr.bias[1], st.bias - 0.3 * db, rtol=0, atol=1e-10)
    np.testing.assert_array_equal(tr.M[1], tr.M[0])
    assert tr.risk[0] == pytest.approx(tl.population.risk(st, tgt), abs=1e-10)


def test_map_bias_errors():
    tgt = tl.targets.staircase(3, d=10, seed=0)
    ov = tl.Overlaps(np.eye(1), np.zeros((1, 3)), np.eye(3), [1.0], np.zeros(3), teacher_bias=[0.0, 0.1, 0.0])
    with pytest.raises(ValueError, match="no teacher biases"):
        tl.ode.integrate(ov, "tanh", target=tgt, lr=0.5, regime="large_batch", batch_ratio=2.0, n_steps=1)
    ov = _overlaps("tanh", bias=[0.5, 0.0])
    with pytest.raises(ValueError, match="lr_bias"):
        tl.large_batch.iterate(ov, "tanh", "target", target=tgt, lr=0.5, batch_ratio=2.0, n_steps=1, lr_bias=-1.0)
    # a committee teacher's map trains biases too (test_bias_targets_maps.py); a NaN bias is refused there as well
    with pytest.raises(ValueError, match="bias"):
        _core.large_batch_iterate(np.eye(1), np.eye(1), np.ones(1), np.eye(1), np.ones(1), "erf", "erf", 0.5, 2.0, 1,
                                  0.0, False, 1, np.array([np.nan]), np.zeros(1), 1.0)
    with pytest.raises(ValueError, match="bias"):
        _core.large_batch_iterate_target(ov.Q, ov.M, ov.a, *tgt._arrays(), "tanh", 0.5, 2.0, 1, 0.0, False,
                                         np.array([np.nan, 0.0]))


@pytest.mark.slow
@pytest.mark.parametrize(("act", "bias", "lr_bias"), [("tanh", [0.5, -0.3], 0.0), ("tanh", [0.5, -0.3], 1.0),
                                                      ("softplus", [0.0, 0.0], 1.0)])
def test_map_with_biases_against_sgd_d4000(act, bias, lr_bias):
    """Fixed or trained biases, K = 2, z1 + z1 z2 + z1 z2 z3: the map against the mean of 16 SGD runs
    (lr = gamma0 d, batch_size = alpha d, lr_bias = beta0 d) at d = 4000 over 3 iterations, within 4 standard
    errors + 2/d (~20 s each)."""
    d, T, g0, K, runs = 4000, 3, 1.0, 2, 16
    tgt = tl.targets.staircase(3, d=d, seed=1)
    W = np.random.default_rng(0).standard_normal((K, d))
    W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    st = tl.Network(W, np.ones(K), act, readout="mean", bias=bias)
    tr = tl.large_batch.iterate(tl.Overlaps.from_networks(st, tgt), act, "target", target=tgt, lr=g0,
                                batch_ratio=1.0, n_steps=T, lr_bias=lr_bias)
    ens = tl.sgd.simulate(st, tgt, lr=g0 * d, batch_size=d, t_max=T / d, n_records=T + 1, seeds=runs,
                          keep_weights=False, lr_bias=lr_bias * d)
    if lr_bias:
        assert np.abs(tr.bias[-1] - tr.bias[0]).max() > 0.05  # the biases moved (tanh 0.052, softplus 0.52)
    for name in ("M", "Q", "bias"):
        x = getattr(ens, name)
        sem = x.std(0) / np.sqrt(runs)
        assert np.all(np.abs(getattr(tr, name) - x.mean(0)) <= 4 * sem + 2 / d), name
    assert np.abs(tr.M[-1]).max() > 0.5  # the map moved


# ------------------------------------------------------------------ the staircase's parities (seed 002's example)


def _example():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "first_order_methods_staircase_large_batch.py"
    spec = importlib.util.spec_from_file_location("first_order_methods_staircase_large_batch", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# the first iteration at which max_i |M_ir| > 1e-4 for r = z1, z2, z3 (None: <= 1e-15 through all 6 iterations)
CLIMB = {("relu", 0.0): (1, 2, None), ("erf", 0.0): (1, None, None), ("softplus", 0.0): (1, 2, None),
         ("tanh", 0.0): (1, None, None), ("softplus", -1.0): (1, 2, 3), ("tanh", 0.5): (1, 2, 3)}


@pytest.mark.parametrize(("act", "bias"), list(CLIMB))
def test_staircase_parity_climb(act, bias):
    """From M = 0 the map climbs z1 + z1 z2 + z1 z2 z3 one direction per iteration where the activation's parity
    allows it: the odd units (erf, tanh) never leave z1, relu and softplus (x/2 + even) never reach z3, while a bias
    breaks the parity (softplus b = -1, tanh b = 0.5 reach z3 at iteration 3). Before its iteration a direction's
    overlap is exactly 0; a parity-killed one stays exactly 0 (closed forms) or at round-off (quadrature)."""
    ex = _example()
    assert (act, bias) in ex.PARITY
    m = np.abs(ex.parity_climb(act, bias).M).max(axis=1)  # (7, 3)
    for r, first in enumerate(CLIMB[act, bias]):
        if first is None:
            exact_zero = act in ("relu", "erf")
            assert np.all(m[:, r] == 0.0) if exact_zero else np.all(m[:, r] < 1e-15), (r, m[:, r])
        else:
            assert np.all(m[:first, r] == 0.0), (r, m[:, r])
            assert np.all(m[first:, r] > 1e-4), (r, m[:, r])


# ------------------------------------------------------------------ population risk and gradient with biases


def _biased_student(act, d=6, K=2, seed=0):
    rng = np.random.default_rng(seed)
    return tl.Network(rng.standard_normal((K, d)), rng.uniform(0.5, 1.5, K), act, bias=rng.uniform(-1, 1, K))


@pytest.mark.parametrize("act", ["tanh", "softplus", "erf"])
def test_population_risk_with_biases_against_monte_carlo(act):
    """1/2 E[(f(z) - sum_i a_i sigma(w_i.x/sqrt d + b_i))^2] against 4 * 10^5 samples (5 SEM)."""
    st = _biased_student(act)
    tgt = tl.targets.staircase(3, d=st.d, seed=1)
    X = np.random.default_rng(3).standard_normal((400_000, st.d))
    err = 0.5 * (tgt(X) - st(X)) ** 2
    r = tl.population.risk(st, tgt)
    assert abs(r - err.mean()) < 5 * err.std() / np.sqrt(len(err))


@pytest.mark.parametrize("act", ["tanh", "softplus"])
def test_population_gradient_with_biases_against_finite_differences(act):
    """dR/dW, dR/da, dR/db against central differences of the exact risk (step 1e-5, to 1e-7)."""
    st = _biased_student(act)
    tgt = tl.targets.staircase(3, d=st.d, seed=1)
    dW, da, db = tl.population.gradient(st, tgt, train_bias=True)
    h = 1e-5

    def fd(make):
        return (tl.population.risk(make(h), tgt) - tl.population.risk(make(-h), tgt)) / (2 * h)

    for i in range(st.K):
        e = np.zeros(st.K)
        e[i] = 1.0
        assert fd(lambda s, e=e: st.with_weights(st.W, bias=st.bias + s * e)) == pytest.approx(db[i], abs=1e-7)
        assert fd(lambda s, e=e: tl.Network(st.W, st.a + s * e, act, bias=st.bias)) == pytest.approx(da[i], abs=1e-7)
        for j in (0, 3):
            E = np.zeros_like(st.W)
            E[i, j] = 1.0
            assert fd(lambda s, E=E: st.with_weights(st.W + s * E, bias=st.bias)) == pytest.approx(dW[i, j], abs=1e-7)
    # without biases the bias gradient is still E[sigma'(l_i) (fhat - f)] a_i (softplus: nonzero at b = 0)
    s0 = tl.Network(st.W, st.a, act)
    db0 = tl.population.gradient(s0, tgt, train_bias=True)[2]
    assert abs(db0[0]) > 1e-3
    assert fd(lambda s: tl.Network(st.W, st.a, act, bias=[s, 0.0])) == pytest.approx(db0[0], abs=1e-7)


@pytest.mark.parametrize("regime", ["online", "gradient_flow"])
def test_target_ode_of_hermite_students_matches_the_closed_forms(regime):
    """The target ODE's quadrature path (every non-classic student) against the closed forms: hermite(0, 1) is the
    linear unit and hermite(1, 0, 1) the quadratic one, the online lr^2 terms included."""
    tgt = tl.targets.staircase(3, d=100, seed=0)
    st = tl.Network.random(2, 100, "linear", seed=1)
    ov = tl.Overlaps.from_networks(st.with_weights(0.6 * st.W + 0.4 * tgt.directions[[0, 1]]), tgt)
    for poly, classic in ((tl.activations.hermite([0, 1]), "linear"), (tl.activations.hermite([1, 0, 1]), "quadratic")):
        got = tl.ode.rhs(ov, poly, target=tgt, lr=0.5, regime=regime, lr_readout=0.3)
        want = tl.ode.rhs(ov, classic, target=tgt, lr=0.5, regime=regime, lr_readout=0.3)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-12)


def test_ode_integrate_large_batch_forwards_lr_bias() -> None:
    """``ode.integrate(regime="large_batch", lr_bias=)`` is the map with trained biases (it used to refuse lr_bias)."""
    tgt = tl.targets.staircase(2, d=100, seed=0)
    ov = tl.Overlaps.from_networks(tl.Network.random(2, 100, "tanh", seed=1, bias=[0.5, 0.5]), tgt)
    via_ode = tl.ode.integrate(ov, "tanh", target=tgt, lr=1.0, regime="large_batch", batch_ratio=1.0, n_steps=2,
                               lr_bias=0.5)
    direct = tl.large_batch.iterate(ov, "tanh", "target", lr=1.0, batch_ratio=1.0, n_steps=2, target=tgt, lr_bias=0.5)
    np.testing.assert_array_equal(via_ode.bias, direct.bias)
    np.testing.assert_array_equal(via_ode.M, direct.M)
    assert np.abs(via_ode.bias[-1] - 0.5).max() > 1e-3  # trained


def test_threads_do_not_change_the_target_terms():
    """A target's tuples of student fields (units, pairs, triples) run on threads and are summed in
    one fixed order: the online right-hand side and the large-batch map are bitwise the same on 1 and 3 threads."""
    tgt = tl.targets.staircase(3, d=50, seed=1)
    W = np.random.default_rng(0).standard_normal((4, 50))
    ov = tl.Overlaps(W @ W.T / 50, np.full((4, 3), 0.05), np.eye(3), np.full(4, 0.25), np.zeros(3),
                     bias=np.array([0.3, -0.2, 0.1, 0.4]))
    one = tl.ode.rhs(ov, "softplus", target=tgt, lr=0.5, lr_bias=0.5, n_threads=1)
    three = tl.ode.rhs(ov, "softplus", target=tgt, lr=0.5, lr_bias=0.5, n_threads=3)
    for x, y in zip(one, three, strict=True):
        assert np.array_equal(x, y)
    maps = [tl.large_batch.iterate(ov, "softplus", "target", target=tgt, lr=0.5, batch_ratio=2.0, n_steps=2,
                                   n_threads=n) for n in (1, 3)]
    assert np.array_equal(maps[0].Q, maps[1].Q) and np.array_equal(maps[0].M, maps[1].M)


# a pair's patterns of the online term (sigma'sigma', sigma'sigma sigma', sigma'^2 sigma: two share a lattice, and some
# refuse the first step) and a triple's three sigma'sigma'sigma patterns, as the ODE's tuples take them
PAIR_PATTERNS = [[[1, 0, 0], [1, 0, 0]], [[1, 1, 0], [1, 0, 0]], [[1, 0, 0], [1, 1, 0]], [[2, 0, 0], [0, 1, 0]],
                 [[0, 1, 0], [2, 0, 0]], [[1, 0, 0], [0, 0, 1]], [[0, 0, 1], [1, 0, 0]]]
TRIPLE_PATTERNS = [[[1, 0, 0], [1, 0, 0], [0, 1, 0]], [[1, 0, 0], [0, 1, 0], [1, 0, 0]],
                   [[0, 1, 0], [1, 0, 0], [1, 0, 0]]]


@pytest.mark.parametrize("which, biased", [("tanh", False), ("tanh", True), ("softplus", True), ("custom", True)])
@pytest.mark.parametrize("patterns", [PAIR_PATTERNS, TRIPLE_PATTERNS], ids=["pair", "triple"])
def test_patterns_taken_together_equal_each_alone(which, biased, patterns):
    """The factor patterns of a tuple share one lattice where they start from the same step (FieldTuple::prepare):
    each value is bitwise the one its pattern gives alone, and every value agrees with Monte Carlo."""
    act = tl.activations.custom("patterns_tanh", np.tanh) if which == "custom" else which
    n = len(patterns[0])
    Qs, Ms, C = joint_cov(seed=3, n=n)
    mu = np.array([0.3, -0.2, 0.5])[:n] if biased else None
    together = _core.target_expectation(act, Qs, Ms, np.array(patterns), *STAIR, mu=mu)
    alone = [_core.target_expectation(act, Qs, Ms, np.array(p), *STAIR, mu=mu) for p in patterns]
    assert np.array_equal(together, np.array(alone))
    x = np.random.default_rng(4).standard_normal((400_000, n + 3)) @ np.linalg.cholesky(C).T
    ls, z = x[:, :n], x[:, n:]
    name = "tanh" if which == "custom" else which
    for value, pat in zip(together, patterns, strict=True):
        v = field_factor(name, pat, np.zeros(n) if mu is None else mu, ls) * stair3(z)
        assert abs(value - v.mean()) < 5 * v.std() / np.sqrt(len(v))


def test_patterns_argument_errors():
    Qs, Ms, _ = joint_cov(seed=3, n=2)
    with pytest.raises(ValueError, match=r"factors: expected shape \(n, 3\) or \(P, n, 3\)"):
        _core.target_expectation("tanh", Qs, Ms, np.zeros((17, 2, 3), int), *STAIR)
    with pytest.raises(ValueError, match="factors: expected shape"):
        _core.target_expectation("tanh", Qs, Ms, np.zeros((2, 3, 3), int), *STAIR)
