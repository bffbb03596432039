"""The SDE of online SGD with relu students and biases (issue 23): the exact orthant moments with means
(gaussian_orthant.hpp) against the zero-mean moments at vanishing biases, against the linear units they equal far
from the kinks, the drift against the ODE's with-means right-hand side, the covariance against one-step SGD, and
paths against SGD."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from test_sde import assert_moments, networks_with_overlaps
from test_sde_bias import _rhs_vector
from test_sde_bias import _sde_vs_sgd as sde_vs_sgd

Q2, M22, P2 = np.array([[1.0, 0.2], [0.2, 0.8]]), np.array([[0.3, 0.2], [0.1, -0.25]]), np.array([[1.0, 0.1],
                                                                                                    [0.1, 0.9]])
A2, V2 = np.array([0.7, 0.4]), np.array([1.0, 0.6])
KW = {"lr": 0.3, "noise": 0.5, "lr_readout": 0.2}
SHAPES = [(1, 1), (2, 1), (1, 2), (2, 2)]


def _ov(K: int, M: int, act: str, teacher: str, bias=None, teacher_bias=None) -> tl.Overlaps:
    return tl.Overlaps(Q2[:K, :K], M22[:K, :M], P2[:M, :M], A2[:K], V2[:M], act, teacher,
                       bias=None if bias is None else np.broadcast_to(bias, (K,)).copy(),
                       teacher_bias=None if teacher_bias is None else np.broadcast_to(teacher_bias, (M,)).copy())


def _rel(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.abs(x - y).max() / np.abs(y).max())


def test_relu_biases_reproducer() -> None:
    """Issue 23: relu units with biases raised NotImplementedError ("the orthant moments have no means"); now the
    moments and paths exist, with the b components."""
    ov = _ov(2, 1, "relu", "relu", [0.3, -0.4], 0.5)
    ic = tl.sde.increment_covariance(ov, lr=0.3, lr_bias=0.7)
    assert ic.labels[-2:] == ("b[0]", "b[1]") and np.all(np.isfinite(ic.cov))
    ens = tl.sde.simulate(ov, lr=0.3, lr_bias=0.7, d=1000, t_max=0.5, n_records=3, seeds=2)
    assert ens.meta["diffusion"] == "exact" and ens.runs[0].bias.shape == (3, 2)
    assert ens.runs[0].bias[0, 0] == 0.3 and np.all(ens.runs[0].bias[-1] != ens.runs[1].bias[-1])


@pytest.mark.parametrize("K,M", SHAPES)
@pytest.mark.parametrize("teacher", ["relu", "step", "linear", "quadratic"])
def test_vanishing_biases_give_the_zero_mean_moments(K: int, M: int, teacher: str) -> None:
    """Biases 1e-200 go through the moments with means (orthant probabilities by Phi, the bivariate orthant and
    quadrature); they equal the zero-mean closed forms to 1e-12 relative (measured: <= 2e-16), and exactly 0 biases
    with lr_bias > 0 (means exactly 0 in the new path) leave the other components bitwise as without biases."""
    plain = tl.sde.increment_covariance(_ov(K, M, "relu", teacher), **KW)
    tiny = tl.sde.increment_covariance(_ov(K, M, "relu", teacher, 1e-200, 1e-200), **KW)
    assert _rel(tiny.mean, plain.mean) <= 1e-12 and _rel(tiny.cov, plain.cov) <= 1e-12
    zero = tl.sde.increment_covariance(_ov(K, M, "relu", teacher, 0.0, 0.0), lr_bias=0.5, **KW)
    n = len(plain.labels)
    assert zero.labels[n:] == tuple(f"b[{i}]" for i in range(K))
    np.testing.assert_array_equal(zero.mean[:n], plain.mean)
    np.testing.assert_array_equal(zero.cov[:n, :n], plain.cov)


@pytest.mark.parametrize("K,M", SHAPES)
@pytest.mark.parametrize("teacher", ["relu", "step", "linear", "quadratic"])
def test_biased_drift_is_the_ode_rhs(K: int, M: int, teacher: str) -> None:
    """E[xi] from the orthant moments with means equals the ODE's with-means right-hand side (pair moments and the
    nested relu I4, computed independently) to 1e-10 relative (measured: <= 2e-15), spherical too."""
    ov = _ov(K, M, "relu", teacher, [0.3, -0.4][:K], [0.5, -0.2][:M])
    kw = {**KW, "lr_bias": 0.7}
    assert _rel(tl.sde.increment_covariance(ov, **kw).mean, _rhs_vector(ov, **kw)) <= 1e-10
    if K == 2:
        ovs = tl.Overlaps([[1.0, 0.2], [0.2, 1.0]], ov.M, ov.P, ov.a, ov.v, "relu", teacher, bias=ov.bias,
                          teacher_bias=ov.teacher_bias)
        kws = {**kw, "spherical": True}
        assert _rel(tl.sde.increment_covariance(ovs, **kws).mean, _rhs_vector(ovs, **kws)) <= 1e-10


@pytest.mark.parametrize("K,M", [(1, 1), (2, 1), (2, 2)])
def test_far_from_the_kinks_relu_is_linear(K: int, M: int) -> None:
    """Every field 9 standard deviations above its kink: relu = identity and relu' = 1 up to Phi(-9) ~ 1e-19, so the
    relu moments (four indicators with means at K = M = 2) equal the linear units' (Gauss-Hermite, exact) to 1e-11
    relative (measured: <= 1.4e-13, the cancellation of the large means)."""
    kw = {**KW, "lr_bias": 0.7}
    relu = tl.sde.increment_covariance(_ov(K, M, "relu", "relu", 9.0, 9.0), **kw)
    lin = tl.sde.increment_covariance(_ov(K, M, "linear", "linear", 9.0, 9.0), **kw)
    assert _rel(relu.mean, lin.mean) <= 1e-11 and _rel(relu.cov, lin.cov) <= 1e-11


@pytest.mark.parametrize("teacher,K,M,n", [
    ("relu", 2, 1, 5000),
    pytest.param("relu", 2, 2, 20_000, marks=pytest.mark.slow),
    pytest.param("step", 2, 2, 20_000, marks=pytest.mark.slow)])
def test_biased_relu_increment_covariance_against_one_step_sgd(teacher: str, K: int, M: int, n: int) -> None:
    """The covariance with means (readout and biases trained) against the increments of one SGD step."""
    Q, Mo, P = [[1.0, 0.3], [0.3, 0.8]], [[0.4, 0.1], [-0.2, 0.5]], [[1.0, 0.2], [0.2, 0.9]]
    a, v, d, lr, lr_a, lr_b, noise = [0.7, 0.5], [1.0, -0.6][:M], 1000, 0.2, 0.3, 0.6, 0.5
    s, t = networks_with_overlaps(Q[:K], [r[:M] for r in Mo], a, d, "relu", [r[:M] for r in P[:M]], v, teacher)
    s, t = s.with_weights(s.W, bias=[0.4, -0.3]), t.with_weights(t.W, bias=[0.2, -0.5][:M])
    ov = tl.Overlaps.from_networks(s, t)
    ic = tl.sde.increment_covariance(ov, lr=lr, noise=noise, lr_readout=lr_a, lr_bias=lr_b)
    ens = tl.sgd.simulate(s, t, lr=lr, lr_readout=lr_a, noise=noise, lr_bias=lr_b, times=[0.0, 1.0 / d], seeds=n,
                          keep_weights=False)
    Qs, Ms, As, bs = ens.stack("Q"), ens.stack("M"), ens.stack("a"), ens.stack("bias")
    xi = d * np.concatenate([(Qs[:, 1] - Qs[:, 0])[:, [0, 0, 1], [0, 1, 1]], (Ms[:, 1] - Ms[:, 0]).reshape(n, -1),
                             As[:, 1] - As[:, 0], bs[:, 1] - bs[:, 0]], axis=1)
    assert_moments(xi, ic)


def test_biased_relu_paths_follow_the_ode_at_large_d() -> None:
    """d = 1e8: the SDE paths (drift = the ODE's right-hand side, Euler-Maruyama) follow the Euler ODE, biases
    included; bitwise reproducible for any thread count."""
    ov = _ov(1, 1, "relu", "relu", 0.3, -0.5)
    kw = {"lr": 0.5, "lr_readout": 0.3, "lr_bias": 0.8, "t_max": 2.0, "n_records": 5}
    ens = tl.sde.simulate(ov, d=10**8, seeds=2, n_threads=1, **kw)
    again = tl.sde.simulate(ov, d=10**8, seeds=2, n_threads=2, **kw)
    ode = tl.ode.integrate(ov, method="euler", dt=0.01, **kw)
    for name in ("Q", "M", "a", "bias", "risk"):
        np.testing.assert_allclose(getattr(ens.runs[0], name), getattr(ode, name), rtol=0, atol=2e-3)
        np.testing.assert_array_equal(getattr(ens.runs[1], name), getattr(again.runs[1], name))
    assert abs(ens.runs[0].bias[-1, 0] - 0.3) > 0.05  # the bias moved


def _sde_vs_sgd(teacher: str, d: int, n: int, t_max: float) -> dict[str, float]:
    """test_sde_bias's comparison for a relu student (Q included)."""
    return sde_vs_sgd(d, n, t_max, act="relu", teacher=teacher, names=("Q", "M", "a", "bias", "risk"))


def test_biased_relu_sde_ensemble_against_sgd() -> None:
    """300 SDE paths against 300 SGD runs at d = 200, relu student and teacher with biases: means and spreads
    within 4 standard errors."""
    z = _sde_vs_sgd("relu", d=200, n=300, t_max=2.0)
    assert max(z.values()) < 4.0, z


@pytest.mark.parametrize("K,M", [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("biased", [False, True])
def test_relu_students_with_erf_teachers_drift_is_the_ode_rhs(K: int, M: int, biased: bool) -> None:
    """Relu students with erf teachers (once refused): 48 Gauss-Hermite nodes over the teachers' fields and the
    orthant moments with the conditioned means over the students'; the drift is the ODE's right-hand side (relu I4
    with erf units in closed form, or with means) to 1e-10 relative (measured: <= 2e-15), and the estimate against
    64 nodes says so too."""
    ov = _ov(K, M, "relu", "erf", *(([0.3, -0.4][:K], [0.5, -0.2][:M]) if biased else (None, None)))
    kw = {**KW, "lr_bias": 0.7} if biased else KW
    ic = tl.sde.increment_covariance(ov, **kw)
    assert _rel(ic.mean, _rhs_vector(ov, **kw)) <= 1e-10
    assert ic.mean_error <= 1e-10 and ic.cov_error <= 1e-10


@pytest.mark.parametrize("act,teacher", [("erf", "relu"), ("gelu", "step"), ("hermite", "relu"), ("relu", "hermite")])
def test_smooth_students_with_relu_teachers_drift_is_the_ode_rhs(act: str, teacher: str) -> None:
    """The other way round and more pairs: smooth students (Gauss-Hermite over theirs) with relu or step teachers
    (exact given them), a hermite unit on either side, with biases: the drift is the ODE's to the estimated error
    (measured 2e-11 erf, 5e-10 gelu, 2e-15 hermite), the estimate below 1e-9."""
    h = tl.activations.hermite([0.1, 1.0, 0.5])
    ov = _ov(2, 1, h if act == "hermite" else act, h if teacher == "hermite" else teacher, [0.3, -0.4], 0.5)
    kw = {**KW, "lr_bias": 0.7}
    ic = tl.sde.increment_covariance(ov, **kw)
    err = _rel(ic.mean, _rhs_vector(ov, **kw))
    assert ic.mean_error <= 1e-9 and err <= 2 * ic.mean_error + 1e-13, (err, ic.mean_error)


def test_relu_students_with_erf_teachers_covariance_against_one_step_sgd() -> None:
    """The mixed covariance with biases (readout and biases trained) against one SGD step's increments."""
    Q, Mo, a, d, n = [[1.0, 0.3], [0.3, 0.8]], [[0.4], [-0.2]], [0.7, 0.5], 1000, 5000
    s, t = networks_with_overlaps(Q, Mo, a, d, "relu", teacher_act="erf")
    s, t = s.with_weights(s.W, bias=[0.4, -0.3]), t.with_weights(t.W, bias=[0.2])
    ov = tl.Overlaps.from_networks(s, t)
    kw = {"lr": 0.2, "lr_readout": 0.3, "noise": 0.5, "lr_bias": 0.6}
    ic = tl.sde.increment_covariance(ov, **kw)
    ens = tl.sgd.simulate(s, t, times=[0.0, 1.0 / d], seeds=n, keep_weights=False, **kw)
    Qs, Ms, As, bs = ens.stack("Q"), ens.stack("M"), ens.stack("a"), ens.stack("bias")
    xi = d * np.concatenate([(Qs[:, 1] - Qs[:, 0])[:, [0, 0, 1], [0, 1, 1]], (Ms[:, 1] - Ms[:, 0]).reshape(n, -1),
                             As[:, 1] - As[:, 0], bs[:, 1] - bs[:, 0]], axis=1)
    assert_moments(xi, ic)


@pytest.mark.slow
def test_biased_relu_erf_sde_ensemble_against_sgd() -> None:
    """300 SDE paths against 300 SGD runs at d = 200, relu student, erf teacher, trained biases and readout."""
    z = _sde_vs_sgd("erf", d=200, n=300, t_max=2.0)
    assert max(z.values()) < 4.0, z


@pytest.mark.parametrize("teacher_bias", [0.5, 0.3])
def test_aligned_fields_with_means_are_continuous(teacher_bias: float) -> None:
    """A student exactly aligned with the teacher (Omega singular), with a different bias (the pair kept, the
    conditioning making one a constant of definite sign) or the same one (merged): the moments are the limit of the
    nearly aligned ones (measured: <= 6e-9 relative at 1 - r = 1e-9); two identical students with different biases
    likewise, and their drift is the ODE's."""
    kw = {"lr": 0.3, "lr_bias": 0.5, "noise": 0.1}

    def inc(r: float) -> tl.sde.IncrementCovariance:
        ov = tl.Overlaps([[1.0]], [[r]], [[1.0]], [0.8], [1.0], "relu", "relu", bias=[0.3],
                         teacher_bias=[teacher_bias])
        return tl.sde.increment_covariance(ov, **kw)

    exact, near = inc(1.0), inc(1.0 - 1e-9)
    assert _rel(exact.mean, near.mean) <= 1e-7 and _rel(exact.cov, near.cov) <= 1e-7

    def twins(q: float) -> tl.Overlaps:
        return tl.Overlaps([[1.0, q], [q, 1.0]], [[0.5], [0.5]], [[1.0]], [0.8, 0.3], [1.0], "relu", "relu",
                           bias=[0.3, -0.2], teacher_bias=[teacher_bias])

    same, close = tl.sde.increment_covariance(twins(1.0), **kw), tl.sde.increment_covariance(twins(1 - 1e-9), **kw)
    assert _rel(same.mean, close.mean) <= 1e-6 and _rel(same.cov, close.cov) <= 1e-6
    assert _rel(same.mean, _rhs_vector(twins(1.0), **kw)) <= 1e-8


def test_mixed_paths_record_the_risk_of_pairs_without_zero_mean_kernels() -> None:
    """sigmoid students with a step teacher have no zero-mean kernels: the SDE records the risk through the pair
    moments at mean 0 (it used to fail building the path); it equals the population risk with biases 1e-200 to
    1e-12 relative."""
    s, t = networks_with_overlaps([[1.0, 0.3], [0.3, 0.8]], [[0.4], [-0.2]], [0.7, 0.5], 50, "sigmoid",
                                  teacher_act="step")
    ens = tl.sde.simulate(tl.Overlaps.from_networks(s, t), lr=0.1, d=100, t_max=0.1, n_records=2, seeds=1)
    ref = tl.population.risk(s.with_weights(s.W, bias=[1e-200, 1e-200]), t)
    assert ens.meta["diffusion"] == "exact_gauss_hermite"
    assert abs(ens.runs[0].risk[0] - ref) <= 1e-12 * ref
