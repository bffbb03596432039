"""Population risk against Monte Carlo; gradient and Hessian against finite differences; the ReLU Hessian at the
global minimum against its analytic spectrum; population gradient descent."""

from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest
import twolayer as tl
from conftest import assert_mc
from twolayer import population
from twolayer.activations import CLOSED_FORM as ACTIVATIONS  # the others: test_activations_smooth.py
from twolayer.activations import sigma


def _pair(s, t, scaling="sqrt_d", readout="sum", seed=0, K=3, M=2, d=5):
    rng = np.random.default_rng(seed)
    student = tl.Network(rng.standard_normal((K, d)), rng.standard_normal(K), s, scaling, readout)
    teacher = tl.Network(rng.standard_normal((M, d)), rng.standard_normal(M), t, scaling, readout)
    return student, teacher


@pytest.mark.parametrize(("s", "t"), [("erf", "erf"), ("relu", "relu"), ("step", "step"), ("relu", "erf"),
                                      ("quadratic", "linear"), ("linear", "step")])
def test_risk_against_monte_carlo(s, t):
    student, teacher = _pair(s, t, readout="mean", d=7)
    rng = np.random.default_rng(99)
    n, chunks, s1, s2 = 1_000_000, 4, 0.0, 0.0
    for _ in range(chunks):
        X = rng.standard_normal((n, student.d))
        loss = 0.5 * (teacher(X) - student(X)) ** 2
        s1, s2 = s1 + loss.sum(), s2 + (loss**2).sum()
    N = n * chunks
    mean = s1 / N
    assert_mc(population.risk(student, teacher), (mean, np.sqrt((s2 / N - mean**2) / N)), what=f"risk {s}/{t}")
    assert population.risk(student, teacher, noise=0.3) == pytest.approx(population.risk(student, teacher) + 0.15)


def _flat(student):
    return np.concatenate([student.W.ravel(), student.a])


def _unflat(student, x):
    n = student.W.size
    return student.with_weights(x[:n].reshape(student.W.shape), x[n:])


def _fd_gradient(student, teacher, h=1e-6):
    x = _flat(student)
    g = np.empty_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        up, down = _unflat(student, x + e), _unflat(student, x - e)
        g[i] = (population.risk(up, teacher) - population.risk(down, teacher)) / (2 * h)
    return g


def _fd_hessian(student, teacher, h=1e-5):
    x = _flat(student)
    H = np.empty((x.size, x.size))

    def grad(y):
        dW, da = population.gradient(_unflat(student, y), teacher)
        return np.concatenate([dW.ravel(), da])

    for i in range(x.size):
        e = np.zeros_like(x)
        e[i] = h
        H[i] = (grad(x + e) - grad(x - e)) / (2 * h)
    return H


CASES = [(s, t, scaling, readout) for s, t in itertools.product(ACTIVATIONS, ACTIVATIONS)
         for scaling, readout in (("sqrt_d", "sum"), ("none", "mean"))]


@pytest.mark.parametrize(("s", "t", "scaling", "readout"), CASES)
def test_gradient_and_hessian_against_finite_differences(s, t, scaling, readout):
    """Central differences: truncation O(h^2) and round-off O(eps/h) put the error near 1e-9 of the scale."""
    student, teacher = _pair(s, t, scaling, readout, seed=zlib.crc32(f"{s}{t}{scaling}".encode()) % 1000)
    dW, da = population.gradient(student, teacher)
    g = np.concatenate([dW.ravel(), da])
    g_fd = _fd_gradient(student, teacher)
    assert np.max(np.abs(g - g_fd)) <= 1e-7 * max(1.0, np.max(np.abs(g_fd)))
    if s == "step":
        return  # the step Hessian is checked separately (it is a distribution at aligned pairs)
    H = population.hessian(student, teacher)
    H_fd = _fd_hessian(student, teacher)
    assert np.max(np.abs(H - H.T)) <= 1e-12 * np.max(np.abs(H))
    assert np.max(np.abs(H - H_fd)) <= 1e-7 * max(1.0, np.max(np.abs(H_fd)))


def test_step_hessian_away_from_alignment():
    student, teacher = _pair("step", "step", seed=5)
    H = population.hessian(student, teacher)
    assert np.max(np.abs(H - _fd_hessian(student, teacher))) <= 1e-7 * np.max(np.abs(H))


@pytest.mark.parametrize("scaling", ["sqrt_d", "none"])
def test_relu_gradient_at_aligned_antipodal_and_zero_units(scaling):
    """The angle-form rows (relu pairs from per-unit 1/sqrt(variance)) at their edge cases: a student exactly on a
    teacher, one exactly opposite another and two aligned students (the relu risk is C^1 there: central
    differences); a zero-norm student unit contributes nothing, so the other rows equal those of the network
    without it."""
    rng = np.random.default_rng(11)
    d = 6
    V = rng.standard_normal((3, d))
    w = rng.standard_normal(d)
    W = np.vstack([V[0], -V[1], w, 2.0 * w, rng.standard_normal(d)])
    a = rng.standard_normal(5)
    student = tl.Network(W, a, "relu", scaling)
    teacher = tl.Network(V, rng.standard_normal(3), "relu", scaling)
    dW, da = population.gradient(student, teacher)
    g_fd = _fd_gradient(student, teacher)
    assert np.max(np.abs(np.concatenate([dW.ravel(), da]) - g_fd)) <= 1e-7 * max(1.0, np.max(np.abs(g_fd)))

    Z = np.vstack([W, np.zeros(d)])
    with_zero = tl.Network(Z, np.append(a, 0.7), "relu", scaling)
    dWz, daz = population.gradient(with_zero, teacher)
    assert np.all(np.isfinite(dWz)) and np.all(np.isfinite(daz))
    np.testing.assert_allclose(dWz[:5], dW, rtol=1e-13, atol=1e-13 * np.max(np.abs(dW)))
    np.testing.assert_allclose(daz[:5], da, rtol=1e-13, atol=1e-13 * np.max(np.abs(da)))
    np.testing.assert_array_equal(dWz[5], 0.0)


def test_gradient_without_readout_and_hessian_blocks():
    student, teacher = _pair("erf", "erf")
    dW, da = population.gradient(student, teacher, train_readout=False)
    assert da is None and dW.shape == student.W.shape
    H_full = population.hessian(student, teacher)
    H_w = population.hessian(student, teacher, train_readout=False)
    n = student.W.size
    assert np.allclose(H_w, H_full[:n, :n], rtol=0, atol=1e-14)


@pytest.mark.parametrize("k", [4, 6, 9])
def test_relu_hessian_at_global_minimum_has_the_analytic_spectrum(k):
    """W = W* = I, lambda = w.x, unit second layer (Safran-Shamir): eigenvalues 1/4 - 1/(2 pi) with multiplicity
    k(k-1)/2 and 1/4 + 1/(2 pi) with multiplicity k(k-3)/2, among others."""
    teacher = tl.Network(np.eye(k), None, "relu", "none")
    student = tl.Network(np.eye(k), None, "relu", "none")
    assert abs(population.risk(student, teacher)) < 1e-14
    dW, _ = population.gradient(student, teacher)
    assert np.max(np.abs(dW)) < 1e-14
    ev = np.linalg.eigvalsh(population.hessian(student, teacher, train_readout=False))
    assert ev[0] > 0
    for value, mult in ((0.25 - 1 / (2 * np.pi), k * (k - 1) // 2), (0.25 + 1 / (2 * np.pi), k * (k - 3) // 2)):
        assert np.sum(np.abs(ev - value) < 1e-10) == mult


def test_relu_hessian_is_continuous_at_alignment():
    """A student 1e-6 away from the teacher gives a Hessian within O(1e-6) of the one at exact alignment."""
    k = 5
    teacher = tl.Network(np.eye(k), None, "relu", "none")
    H0 = population.hessian(tl.Network(np.eye(k), None, "relu", "none"), teacher)
    W = np.eye(k) + 1e-6 * np.random.default_rng(1).standard_normal((k, k))
    H1 = population.hessian(tl.Network(W, None, "relu", "none"), teacher)
    assert np.max(np.abs(H1 - H0)) < 1e-5


def test_descend_decreases_risk_and_matches_manual_steps():
    student, teacher = tl.networks.teacher_student(3, 2, 10, "erf", seed=4)
    lr = 0.5
    traj = population.descend(student, teacher, lr=lr, n_steps=5, lr_readout=0.1, n_records=6)
    W, a = student.W.copy(), student.a.copy()
    for _ in range(5):
        dW, da = population.gradient(student.with_weights(W, a), teacher)
        W, a = W - lr * dW, a - 0.1 * da
    assert np.allclose(traj.student.W, W, rtol=0, atol=1e-13)
    assert np.allclose(traj.student.a, a, rtol=0, atol=1e-13)
    assert traj.status == "completed" and traj.time_unit == "iterations"
    assert np.all(np.diff(traj.risk) < 0)
    assert traj.Q.shape == (len(traj), 3, 3) and traj.M.shape == (len(traj), 3, 2) and traj.a.shape == (len(traj), 3)
    assert traj.risk[-1] == pytest.approx(population.risk(traj.student, teacher), rel=1e-12)
    ov = tl.Overlaps.from_networks(traj.student, teacher)
    assert np.allclose(traj.Q[-1], ov.Q) and np.allclose(traj.M[-1], ov.M)
    ds = traj.to_xarray()
    assert ds["Q"].dims == ("t", "student", "student2") and ds.attrs["status"] == "completed"
    np.testing.assert_allclose(ds["P"].values, ov.P) and np.testing.assert_array_equal(ds["v"].values, ov.v)


def test_descend_trains_the_raw_second_layer_with_mean_readout():
    """Plain descent on a (not on c a) when the readout prefactor c = 1/K; n_records=2 keeps 0 and the last step."""
    student, teacher = tl.networks.teacher_student(4, 2, 6, "relu", seed=1, readout="mean")
    traj = population.descend(student, teacher, lr=0.3, n_steps=3, lr_readout=0.7, n_records=2)
    W, a = student.W.copy(), student.a.copy()
    for _ in range(3):
        dW, da = population.gradient(student.with_weights(W, a), teacher)
        W, a = W - 0.3 * dW, a - 0.7 * da
    assert np.allclose(traj.student.a, a, rtol=0, atol=1e-13) and np.allclose(traj.student.W, W, rtol=0, atol=1e-13)
    assert traj.t.tolist() == [0.0, 3.0]


def test_descend_reports_divergence():
    student, teacher = tl.networks.teacher_student(2, 2, 5, "quadratic", seed=0)
    traj = population.descend(student, teacher, lr=50.0, n_steps=200, n_records=50)
    assert traj.status == "diverged" and "diverged at iteration" in traj.message
    assert np.all(np.isfinite(traj.risk))


def test_network_and_overlaps():
    net = tl.Network.random(4, 30, "relu", init="orthogonal", seed=1)
    assert np.allclose(net.W @ net.W.T / 30, np.eye(4), atol=1e-12)
    student, teacher = tl.networks.teacher_student(3, 2, 8, "erf", init="orthogonal", seed=2, scaling="none")
    ov = tl.Overlaps.from_networks(student, teacher)
    assert np.allclose(ov.omega, np.eye(5), atol=1e-12)
    mean = tl.Network(np.ones((2, 3)), [1.0, 3.0], "linear", readout="mean")
    assert np.allclose(mean.effective_a, [0.5, 1.5])
    X = np.random.default_rng(0).standard_normal((4, 3))
    assert np.allclose(mean(X), 0.5 * sigma("linear", X @ np.ones(3) / np.sqrt(3)) * 4)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: tl.Network(np.ones((2, 3)), np.ones(3)), "a: expected shape"),
    (lambda: tl.Network(np.ones(3)), "W: expected a 2-d array"),
    (lambda: tl.Network(np.ones((2, 3)), activation="swish"), "activation"),
    (lambda: tl.Network(np.ones((2, 3)), scaling="d"), "scaling"),
    (lambda: tl.Network([[np.nan, 1.0]]), "W: entries must be finite"),
    (lambda: tl.Network.random(5, 3, init="orthogonal"), "K <= d"),
    (lambda: population.risk(tl.Network(np.ones((2, 3))), tl.Network(np.ones((2, 4)))), "teacher: input dimension"),
    (lambda: population.descend(tl.Network(np.ones((2, 3))), tl.Network(np.ones((2, 3))), lr=-1, n_steps=3), "lr"),
    (lambda: tl.Overlaps(np.eye(2), np.zeros((2, 1)), [[1.0]], [1, 1], [1, 1]), "M: expected shape"),
    (lambda: tl.Overlaps([[1.0, 2.0], [2.0, 1.0]], np.zeros((2, 1)), [[1.0]], [1, 1], [1]), "positive semi-definite"),
])
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_population_kernels_agree_with_overlap_kernels():
    """R = 1/2 sum a a I2(Q) - sum a v I2(Q, M, P) + 1/2 sum v v I2(P), assembled here from tl.kernels."""
    student, teacher = _pair("relu", "erf", seed=7)
    ov = tl.Overlaps.from_networks(student, teacher)
    O = ov.omega
    K, M = student.K, teacher.K
    acts = ["relu"] * K + ["erf"] * M
    c = np.concatenate([ov.a, -ov.v])
    R = sum(0.5 * c[i] * c[j] * tl.kernels.i2(acts[i], acts[j], O[np.ix_([i, j], [i, j])])
            for i in range(K + M) for j in range(K + M))
    assert population.risk(student, teacher) == pytest.approx(R, rel=1e-12)
