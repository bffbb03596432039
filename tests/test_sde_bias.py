"""The SDE of online SGD with smooth activations and biases (issue 23): the increment's mean against the ODE's
right-hand side (with means), its covariance against one-step SGD and against more quadrature nodes, paths against
the ODE and SGD, and the refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import twolayer as tl
from test_sde import assert_moments, networks_with_overlaps

SMOOTH = ("tanh", "sigmoid", "softplus", "gelu", "silu", "sin", "cos")


def test_smooth_activation_reproducer() -> None:
    """Issue 23's reproducer: a tanh SDE raised a bare KeyError; now it runs and tends to the ODE."""
    ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "tanh", "tanh")
    ens = tl.sde.simulate(ov, lr=0.5, t_max=1.0, d=100, seeds=2, activation="tanh")
    assert ens.meta["diffusion"] == "gauss_hermite" and ens.meta["n_nodes"] == 48
    assert 0 < ens.meta["drift_error"] <= 1e-4 and 0 < ens.meta["diffusion_error"] <= 1e-3
    assert all(r.status == tl.Status.completed for r in ens.runs)
    big = tl.sde.simulate(ov, "tanh", lr=0.5, t_max=1.0, n_records=3, d=10**8, seeds=1)
    ode = tl.ode.integrate(ov, "tanh", lr=0.5, t_max=1.0, n_records=3, method="euler", dt=0.01)
    np.testing.assert_allclose(big.runs[0].M, ode.M, rtol=0, atol=1e-3)  # d = 1e8: noise ~ 1e-4


def _ov(act: str, teacher: str | None = None, bias: bool = False) -> tl.Overlaps:
    kw = {"bias": [0.3, -0.4], "teacher_bias": [0.5]} if bias else {}
    return tl.Overlaps([[1.0, 0.2], [0.2, 0.8]], [[0.3], [0.1]], [[1.0]], [0.7, 0.4], [1.0], act,
                       teacher or act, **kw)


def _rhs_vector(ov: tl.Overlaps, **kw) -> np.ndarray:
    """tl.ode.rhs in the increment's component order: Q (i <= k), M, a (lr_readout > 0), b (lr_bias > 0)."""
    out = tl.ode.rhs(ov, **kw)
    parts = [out[0][np.triu_indices(ov.K)], out[1].ravel()]
    if kw.get("lr_readout", 0.0) > 0:
        parts.append(out[2])
    if kw.get("lr_bias", 0.0) > 0:
        parts.append(out[3])
    return np.concatenate(parts)


@pytest.mark.parametrize("act", SMOOTH)
def test_smooth_increment_mean_is_the_ode_rhs_and_error_estimated(act: str) -> None:
    """48 Gauss-Hermite nodes (K + M = 3, unit variances): the drift is the ODE's right-hand side to the estimated
    error (tanh, the slowest, ~5e-7 relative), the estimate (against 64 nodes) tracks the error against 96
    nodes."""
    ov = _ov(act)
    kw = {"lr": 0.3, "noise": 0.5, "lr_readout": 0.2}
    g = tl.sde.increment_covariance(ov, **kw)
    fine = tl.sde.increment_covariance(ov, n_nodes=96, **kw)
    rhs = _rhs_vector(ov, **kw)
    assert g.mean_error <= 1e-6 and g.cov_error <= 2e-4
    assert np.abs(g.mean - rhs).max() / np.abs(rhs).max() <= 2 * g.mean_error + 1e-12
    assert np.abs(g.cov - fine.cov).max() / np.abs(fine.cov).max() <= 2 * g.cov_error + 1e-12
    assert fine.mean_error < g.mean_error or g.mean_error < 1e-12


def test_unconverged_quadrature_is_refused() -> None:
    """tanh fields of variance 3: 48 nodes are off by ~1e-3 (the poles of tanh at +-i pi/2 approach the real axis
    in units of the field's scale): the SDE refuses to start, naming n_nodes; increment_covariance reports it."""
    ov = tl.Overlaps(3 * np.array([[1.0, 0.2], [0.2, 0.8]]), [[0.9], [0.3]], [[3.0]], [0.7, 0.4], [1.0], "tanh")
    ic = tl.sde.increment_covariance(ov, lr=0.3)
    assert ic.mean_error > 1e-4
    with pytest.raises(ValueError, match=r"n_nodes: the 48-node Gauss-Hermite rule has not converged at the start "
                                         r"for 'tanh' students with 'tanh' teachers: estimated relative errors"):
        tl.sde.simulate(ov, lr=0.3, d=100, t_max=1.0)
    with pytest.raises(ValueError, match=r"n_nodes: expected"):
        tl.sde.increment_covariance(ov, lr=0.3, n_nodes=129)


@pytest.mark.parametrize("act,teacher,n", [
    ("tanh", "tanh", 5000),
    pytest.param("softplus", "gelu", 20_000, marks=pytest.mark.slow)])
def test_smooth_increment_covariance_against_one_step_sgd(act: str, teacher: str, n: int) -> None:
    Q, M, a = [[1.0, 0.3], [0.3, 0.8]], [[0.4], [-0.2]], [0.7, 0.5]
    d, lr, noise = 1000, 0.2, 0.5
    student, teacher_net = networks_with_overlaps(Q, M, a, d, act, teacher_act=teacher)
    ov = tl.Overlaps.from_networks(student, teacher_net)
    ic = tl.sde.increment_covariance(ov, lr=lr, noise=noise)
    ens = tl.sgd.simulate(student, teacher_net, lr=lr, noise=noise, times=[0.0, 1.0 / d], seeds=n,
                          keep_weights=False)
    Qs, Ms = ens.stack("Q"), ens.stack("M")
    xi = d * np.concatenate([(Qs[:, 1] - Qs[:, 0])[:, [0, 0, 1], [0, 1, 1]], (Ms[:, 1] - Ms[:, 0]).reshape(n, -1)],
                            axis=1)
    assert_moments(xi, ic)


def test_refusals_name_the_arguments() -> None:
    ov = _ov("tanh")
    # relu or step units beside smooth ones (once refused): quadrature over the smooth block, exact over the others
    assert tl.sde.increment_covariance(ov, "relu", "tanh", lr=0.1).mean_error < 1e-6
    assert tl.sde.simulate(ov, "sigmoid", "step", lr=0.1, d=100, t_max=0.1).meta["diffusion"] == "exact_gauss_hermite"
    with pytest.raises(ValueError, match="activation"):
        tl.sde.increment_covariance(ov, "swish", lr=0.1)
    biased = _ov("relu", bias=True)  # relu with biases: exact moments with means (tests/test_sde_relu_bias.py)
    with pytest.raises(ValueError, match=r"activation: no diffusion term for 'step' students"):
        tl.sde.increment_covariance(biased, "step", lr=0.1, lr_bias=0.5)
    # a polynomial target takes biases with smooth and relu students (test_bias_targets_maps.py,
    # test_targets_relu_bias.py), not with step ones (no diffusion)
    tgt = tl.targets.hermite({(1,): 1.0}, d=10, seed=0)
    ovt = tl.Overlaps([[1.0]], [[0.1]], [[1.0]], [1.0], [0.0], "step")
    with pytest.raises(ValueError, match=r"activation: no diffusion term for 'step' students"):
        tl.sde.increment_covariance(ovt, lr=0.1, target=tgt, lr_bias=0.5)
    with pytest.raises(ValueError, match="lr_bias"):
        tl.sde.increment_covariance(biased, "tanh", lr=0.1, lr_bias=-1.0)


@pytest.mark.parametrize("act,teacher", [("erf", "tanh"), ("erf", "softplus"), ("quadratic", "linear"),
                                         ("tanh", "tanh")])
def test_biased_increment_mean_is_the_ode_rhs_with_means(act: str, teacher: str) -> None:
    """The drift with means is the ODE's with-means right-hand side, to the quadrature's estimated error (tanh:
    ~7e-7 relative at 48 nodes; the others below 1e-9)."""
    ov = _ov(act, teacher, bias=True)
    kw = {"lr": 0.3, "noise": 0.5, "lr_readout": 0.2, "lr_bias": 0.7}
    ic = tl.sde.increment_covariance(ov, **kw)
    assert ic.labels[-4:] == ("a[0]", "a[1]", "b[0]", "b[1]")
    rhs = _rhs_vector(ov, **kw)
    err = np.abs(ic.mean - rhs).max() / np.abs(rhs).max()
    assert err <= 2 * ic.mean_error + 1e-12 and err < (1e-6 if act == "tanh" else 1e-9), (err, ic.mean_error)
    fixed = tl.sde.increment_covariance(ov, lr=0.3, noise=0.5)  # biases present, not trained: no b components
    assert fixed.labels[-1] == "M[1,0]"
    rhs = _rhs_vector(ov, lr=0.3, noise=0.5)
    assert np.abs(fixed.mean - rhs).max() / np.abs(rhs).max() <= 2 * fixed.mean_error + 1e-12
    if act == "quadratic":  # polynomial: exact, whatever the node count above the degree
        np.testing.assert_allclose(ic.cov, tl.sde.increment_covariance(ov, n_nodes=12, **kw).cov, rtol=1e-11,
                                   atol=1e-12)


def test_zero_biases_give_the_moments_without() -> None:
    """lr_bias > 0 at zero biases adds the b components and leaves the others as they were (bitwise)."""
    ov = _ov("tanh")
    plain = tl.sde.increment_covariance(ov, lr=0.3, noise=0.5, lr_readout=0.2)
    with_b = tl.sde.increment_covariance(ov, lr=0.3, noise=0.5, lr_readout=0.2, lr_bias=0.5)
    n = len(plain.labels)
    np.testing.assert_array_equal(with_b.mean[:n], plain.mean)
    np.testing.assert_array_equal(with_b.cov[:n, :n], plain.cov)


@pytest.mark.parametrize("act,n", [("tanh", 5000), pytest.param("softplus", 20_000, marks=pytest.mark.slow)])
def test_biased_increment_covariance_against_one_step_sgd(act: str, n: int) -> None:
    """The covariance with means (and the b components) against the increments of one SGD step with biases."""
    Q, M, a = [[1.0, 0.3], [0.3, 0.8]], [[0.4], [-0.2]], [0.7, 0.5]
    d, lr, lr_b, noise = 1000, 0.2, 0.6, 0.5
    s, t = networks_with_overlaps(Q, M, a, d, act)
    s, t = s.with_weights(s.W, bias=[0.4, -0.3]), t.with_weights(t.W, bias=[0.6])
    ov = tl.Overlaps.from_networks(s, t)
    ic = tl.sde.increment_covariance(ov, lr=lr, noise=noise, lr_bias=lr_b)
    ens = tl.sgd.simulate(s, t, lr=lr, noise=noise, lr_bias=lr_b, times=[0.0, 1.0 / d], seeds=n,
                          keep_weights=False)
    Qs, Ms, bs = ens.stack("Q"), ens.stack("M"), ens.stack("bias")
    xi = d * np.concatenate([(Qs[:, 1] - Qs[:, 0])[:, [0, 0, 1], [0, 1, 1]], (Ms[:, 1] - Ms[:, 0]).reshape(n, -1),
                             bs[:, 1] - bs[:, 0]], axis=1)
    assert_moments(xi, ic)


def test_biased_paths_record_the_biases_and_tend_to_the_ode() -> None:
    ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [0.8], [1.0], "erf", "tanh", bias=[0.3], teacher_bias=[-0.5])
    kw = {"lr": 0.5, "lr_readout": 0.3, "lr_bias": 0.8, "t_max": 2.0, "n_records": 5}
    ens = tl.sde.simulate(ov, d=10**8, seeds=2, **kw)
    ode = tl.ode.integrate(ov, method="euler", dt=0.01, **kw)
    run = ens.runs[0]
    assert run.bias.shape == (5, 1) and run.bias[0, 0] == 0.3
    np.testing.assert_array_equal(run.teacher_bias, [-0.5])
    assert ens.meta["lr_bias"] == 0.8 and "bias" in ens.runs[1].to_xarray()
    for name in ("Q", "M", "a", "bias", "risk"):  # d = 1e8: the noise is ~ 1e-4 of the drift
        np.testing.assert_allclose(getattr(run, name), getattr(ode, name), rtol=0, atol=2e-3)
    assert abs(run.bias[-1, 0] - 0.3) > 0.05  # the biases moved
    # paths are bitwise reproducible, alone or in a batch
    alone = tl.sde.simulate(ov, d=10**8, seeds=[1], **kw)
    np.testing.assert_array_equal(alone.runs[0].bias, ens.runs[1].bias)
    # starts given as a sequence carry their own biases
    ov2 = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, "erf", "tanh", bias=[-0.2], teacher_bias=[-0.5])
    seq = tl.sde.simulate([ov, ov2], d=1000, seeds=2, **kw)
    assert seq.runs[1].bias[0, 0] == -0.2
    ov3 = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, "erf", "tanh", bias=[-0.2], teacher_bias=[0.5])
    with pytest.raises(ValueError, match=r"overlaps\[1\]: teacher_bias .* differs"):
        tl.sde.simulate([ov, ov3], d=1000, seeds=2, **kw)
    # a BatchOverlaps start carries its members' biases too (it used to start every path at b = 0)
    stacked = tl.sde.simulate(tl.BatchOverlaps.stack([ov, ov2]), d=1000, seeds=2, **kw)
    for name in ("Q", "bias", "risk"):
        np.testing.assert_array_equal(getattr(stacked.runs[1], name), getattr(seq.runs[1], name))
    with pytest.raises(ValueError, match=r"overlaps\[1\]: teacher_bias .* differs"):
        tl.sde.simulate(tl.BatchOverlaps.stack([ov, ov3]), d=1000, seeds=2, **kw)


def _sde_vs_sgd(d: int, n: int, t_max: float, act: str = "tanh", teacher: str | None = None,
                names: tuple[str, ...] = ("M", "a", "bias", "risk")) -> dict[str, float]:
    """|mean SGD - mean SDE| / SE over the records (and the standard deviations' difference over its SE, ``_std``),
    K = M = 1 ``act`` student (``teacher``: the teacher's, default the same) with trained biases and readout."""
    Q, M, a = [[1.0]], [[0.2]], [0.8]
    s, t = networks_with_overlaps(Q, M, a, d, act, teacher_act=teacher or act)
    s, t = s.with_weights(s.W, bias=[0.3]), t.with_weights(t.W, bias=[-0.5])
    kw = {"lr": 0.5, "lr_readout": 0.3, "lr_bias": 0.8, "noise": 0.2, "t_max": t_max, "n_records": 4}
    sgd = tl.sgd.simulate(s, t, seeds=n, keep_weights=False, **kw)
    sde = tl.sde.simulate(tl.Overlaps.from_networks(s, t), d=d, seeds=n, dt=0.02, **kw)
    out = {}
    for name in names:
        x, y = sgd.stack(name).reshape(n, 4, -1), sde.stack(name).reshape(n, 4, -1)
        se = np.sqrt(x.var(0, ddof=1) / n + y.var(0, ddof=1) / n) + 1e-12
        out[name] = float(np.max(np.abs(x.mean(0) - y.mean(0)) / se))
        # and the spread: the SDE's standard deviation is SGD's (the fluctuations at finite d)
        sx, sy = x.std(0, ddof=1)[1:], y.std(0, ddof=1)[1:]
        out[name + "_std"] = float(np.max(np.abs(sx - sy) / (math.sqrt(2 / (n - 1)) * np.hypot(sx, sy))))
    return out


@pytest.mark.slow
def test_biased_sde_ensemble_against_sgd() -> None:
    z = _sde_vs_sgd(d=200, n=400, t_max=2.0)
    assert max(z.values()) < 4.0, z


def test_spherical_biased_increment_mean_is_the_projected_ode() -> None:
    """Spherical with biases: the increment's mean is the spherical ODE's with-means right-hand side (Q_ii fixed, the
    biases not projected)."""
    ov = tl.Overlaps([[1.0, 0.2], [0.2, 1.0]], [[0.3], [0.1]], [[1.0]], [0.7, 0.4], [1.0], "erf", "tanh",
                     bias=[0.3, -0.4], teacher_bias=[0.5])
    kw = {"lr": 0.3, "noise": 0.5, "lr_bias": 0.7, "spherical": True}
    ic = tl.sde.increment_covariance(ov, **kw)
    rhs = _rhs_vector(ov, **kw)
    assert np.abs(ic.mean - rhs).max() / np.abs(rhs).max() <= 2 * ic.mean_error + 1e-12
    assert ic.mean[0] == 0.0 and np.all(ic.cov[0] == 0.0)  # Q[0,0] fixed
    free = tl.sde.increment_covariance(ov, **{**kw, "spherical": False})
    np.testing.assert_array_equal(ic.mean[-2:], free.mean[-2:])  # the biases' drift is not projected
    ens = tl.sde.simulate(ov, d=1000, seeds=2, t_max=0.1, n_records=3, **kw)
    np.testing.assert_allclose(np.diagonal(ens.stack("Q"), axis1=2, axis2=3), 1.0, atol=1e-12)
    assert np.all(ens.stack("bias")[:, -1] != ens.stack("bias")[:, 0])


def test_runs_without_biases_are_bitwise_as_before() -> None:
    """An erf SDE path (readout trained, label noise) as main computed it before biases and smooth units existed
    (the values are main's, measured on the v3 build; FMA contraction is off in sde.cpp, but other instruction
    levels may round erf's lanes differently, hence 1e-12), and bitwise the same with zero biases given."""
    ov = tl.Overlaps([[1.0, 0.2], [0.2, 0.8]], [[0.3], [0.1]], [[1.0]], [0.7, 0.4], [1.0], "erf", "erf")
    kw = {"lr": 0.3, "lr_readout": 0.2, "noise": 0.1, "d": 1000, "t_max": 0.05, "n_records": 2, "seeds": 2}
    run = tl.sde.simulate(ov, **kw).runs[1]
    np.testing.assert_allclose(run.Q[-1], [[0.9966903524338312, 0.19879861504772425],
                                           [0.19879861504772425, 0.800143707890082]], rtol=1e-12)
    np.testing.assert_allclose(run.M[-1], [[0.302577688828212], [0.10124900915534192]], rtol=1e-12)
    np.testing.assert_allclose(run.a[-1], [0.6968087682561414, 0.39985347025772094], rtol=1e-12)
    zero = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, "erf", "erf", bias=[0.0, 0.0], teacher_bias=[0.0])
    again = tl.sde.simulate(zero, **kw).runs[1]
    np.testing.assert_array_equal(again.Q, run.Q)
    assert again.bias is None
