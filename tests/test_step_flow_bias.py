"""Step units with trained biases in the ODE (issue 23): the step flow in the augmented space (x, b / kappa), kappa =
sqrt(lr_bias / lr), in which gradient flow is Euclidean and each row's norm is conserved, so that half-spaces meet
as directions do and the flow merges them (step_flow.hpp, "Biases"), against weight-space descent with biases
(population.descend, whose step pairs take their forces from the chords: test_population_bias_core.py).

Before a meeting the overlaps and thresholds b / |w| agree with descent of step 0.01 to its Euler error; through the
meetings both reach the same half-spaces (thresholds within 1e-8, cosines within 1e-9), the flow exactly (risk at
rounding), descent with a decaying step."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer import schedules as S

ETA = 0.01  # descent's step


def _pair(m: int, d: int, seed: int) -> tuple[tl.Network, tl.Network]:
    rng = np.random.default_rng(seed)
    te = tl.Network(rng.standard_normal((m, d)) / np.sqrt(d), None, "step", scaling="none",
                    bias=rng.normal(0.0, 0.3, m))
    st = tl.Network(rng.standard_normal((m, d)) / np.sqrt(d), None, "step", scaling="none",
                    bias=rng.normal(0.0, 0.3, m))
    return st, te


def _geometry(Q: np.ndarray, M: np.ndarray, b: np.ndarray, te: tl.Network) -> tuple[np.ndarray, np.ndarray]:
    """Cosines to the teachers and thresholds b / |w| of the students."""
    q = np.sqrt(np.diag(Q))
    return M / q[:, None] / np.linalg.norm(te.W, axis=1)[None, :], b / q


def _descend(st: tl.Network, te: tl.Network, t: float, lr_bias: float, decay: bool = False) -> tl.Trajectory:
    n = round(t / ETA)
    if not decay:
        return tl.population.descend(st, te, lr=ETA, lr_bias=ETA * lr_bias, n_steps=n, n_records=2)
    return tl.population.descend(st, te, lr=ETA, lr_bias=ETA * lr_bias, n_steps=n + 20_000, n_records=2,
                                 schedule=S.step_decay(0.5, every=1000, start=n))


@pytest.mark.parametrize("m, d, seed, lr_bias", [(2, 10, 0, 1.0), (2, 10, 1, 0.3),
                                                 (2, 10, 1, 3.0),
                                                 (3, 20, 3, 1.0)])
def test_flow_and_weight_descent_meet_the_same_half_spaces(m: int, d: int, seed: int, lr_bias: float) -> None:
    st, te = _pair(m, d, seed)
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, lr_bias=lr_bias, regime="gradient_flow",
                            times=[0.0, 5.0, 250.0])
    assert flow.status == "completed" and flow.meta["method"] == "step_events"
    assert f"{m} of {m} students on a teacher" in flow.message
    assert abs(flow.risk[-1]) <= 1e-14 and np.all(np.diff(flow.risk) < 0)
    early, late = _descend(st, te, 5.0, lr_bias), _descend(st, te, 250.0, lr_bias, decay=True)
    for j, run, atol_cos, atol_thr in [(1, early, 3e-3, 3e-3), (2, late, 1e-9, 1e-8)]:
        cos_f, thr_f = _geometry(flow.Q[j], flow.M[j], flow.bias[j], te)
        cos_d, thr_d = _geometry(run.Q[-1], run.M[-1], run.bias[-1], te)
        np.testing.assert_allclose(cos_f, cos_d, atol=atol_cos)
        np.testing.assert_allclose(thr_f, thr_d, atol=atol_thr)
    assert late.risk[-1] <= 1e-8
    # every student on a teacher's half-space: its direction and threshold
    cos, thr = _geometry(flow.Q[-1], flow.M[-1], flow.bias[-1], te)
    on = np.argmax(cos, axis=1)
    np.testing.assert_allclose(cos[np.arange(m), on], 1.0, atol=1e-14)
    np.testing.assert_allclose(thr, (te.bias / np.linalg.norm(te.W, axis=1))[on], atol=1e-13)


def test_the_augmented_norms_are_conserved() -> None:
    """|w_i|^2 / lr + b_i^2 / lr_bias is constant along the flow (the homogeneity of step units), at every lr_bias."""
    st, te = _pair(2, 10, 0)
    for lr_bias in (0.3, 1.0, 3.0):
        flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=0.7, lr_bias=lr_bias, regime="gradient_flow",
                                t_max=100.0, n_records=21)
        kept = np.diagonal(flow.Q, axis1=1, axis2=2) / 0.7 + flow.bias ** 2 / lr_bias
        np.testing.assert_allclose(kept, np.broadcast_to(kept[0], kept.shape), rtol=1e-14)
        assert flow.bias.shape == (21, 2) and flow.to_xarray()["bias"].dims == ("t", "student")


def test_trained_readout_and_students_that_meet_each_other() -> None:
    """A trained readout (lr_readout), and equal readouts that pin two students at complementary half-spaces (a
    constant function, as without biases at antipodes): the flow reaches the risk descent reaches."""
    st, te = _pair(2, 10, 1)
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, lr_bias=1.0, lr_readout=0.5,
                            regime="gradient_flow", times=[0.0, 250.0])
    late = tl.population.descend(st, te, lr=ETA, lr_bias=ETA, lr_readout=0.5 * ETA, n_steps=45_000, n_records=2,
                                 schedule=S.step_decay(0.5, every=1000, start=25_000))
    assert "2 of 2 students on a teacher" in flow.message and abs(flow.risk[-1]) <= 1e-14
    np.testing.assert_allclose(flow.a[-1], 1.0, atol=1e-7)  # the teacher's readout (v = 1)
    np.testing.assert_allclose(late.a[-1], flow.a[-1], atol=1e-3)  # descent's readout steps decay with the rest
    rng = np.random.default_rng(0)
    te = tl.Network(rng.standard_normal((2, 10)) / np.sqrt(10), None, "step", scaling="none", bias=[0.3, -0.2])
    st = tl.Network(rng.standard_normal((2, 10)) / np.sqrt(10), None, "step", scaling="none", bias=[0.0, 0.1])
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, lr_bias=1.0, regime="gradient_flow",
                            times=[0.0, 250.0])
    assert "2 in clusters of students" in flow.message
    Q, b = flow.Q[-1], flow.bias[-1]
    assert Q[0, 1] / np.sqrt(Q[0, 0] * Q[1, 1]) == pytest.approx(-1.0, abs=1e-14)
    assert b[0] / np.sqrt(Q[0, 0]) == pytest.approx(-b[1] / np.sqrt(Q[1, 1]), abs=1e-14)
    late = tl.population.descend(st, te, lr=ETA, lr_bias=ETA, n_steps=45_000, n_records=2,
                                 schedule=S.step_decay(0.5, every=1000, start=25_000))
    assert late.risk[-1] == pytest.approx(flow.risk[-1], abs=1e-6)


def test_refusals_name_what_runs() -> None:
    st, te = _pair(2, 10, 0)
    ov = tl.Overlaps.from_networks(st, te)
    with pytest.raises(NotImplementedError, match="step flow only"):  # fixed biases
        tl.ode.integrate(ov, lr=1.0, regime="gradient_flow", t_max=1.0)
    with pytest.raises(NotImplementedError, match="step flow only"):  # a relu teacher
        tl.ode.integrate(ov, "step", "relu", lr=1.0, lr_bias=1.0, regime="gradient_flow", t_max=1.0)
    with pytest.raises(NotImplementedError, match="not defined where two units meet"):
        tl.ode.rhs(ov, lr=1.0, lr_bias=1.0, regime="gradient_flow")


@pytest.mark.parametrize("m, K, seed", [(1, 3, 3), (3, 3, 4)])
def test_mixed_readouts_with_a_release(m: int, K: int, seed: int) -> None:
    """Readouts of both signs, trained (lr_readout): these starts release a student from a teacher it met (its
    constraint force beyond the cusp's dual norm) on their way; the risk follows descent's (step 0.01 to t = 50,
    0.3% apart there, then decaying) to a fit at rounding in the flow. (A merged pair's thresholds equal up to
    rounding used to pick one side of the cusp: 7 of 48 such starts cycled between leaving and meeting.)"""
    rng = np.random.default_rng(seed)
    te = tl.Network(rng.standard_normal((m, 12)) / np.sqrt(12), rng.uniform(0.5, 1.5, m), "step", scaling="none",
                    bias=rng.normal(0.0, 0.3, m))
    st = tl.Network(rng.standard_normal((K, 12)) / np.sqrt(12), rng.uniform(-1.0, 1.5, K), "step", scaling="none",
                    bias=rng.normal(0.0, 0.3, K))
    flow = tl.ode.integrate(tl.Overlaps.from_networks(st, te), lr=1.0, lr_bias=1.0, lr_readout=0.3,
                            regime="gradient_flow", times=[0.0, 50.0, 300.0], max_steps=20_000)
    assert flow.status == "completed" and flow.meta["n_steps"] < 5000
    kw = {"lr": ETA, "lr_bias": ETA, "lr_readout": 0.3 * ETA, "n_records": 2}
    mid = tl.population.descend(st, te, n_steps=5000, **kw)
    late = tl.population.descend(st, te, n_steps=50_000, schedule=S.step_decay(0.5, every=1000, start=30_000), **kw)
    assert flow.risk[1] == pytest.approx(mid.risk[-1], rel=1e-2)
    assert abs(flow.risk[-1]) <= 1e-5 and late.risk[-1] <= 1e-5


def test_batch_runs_the_same_flows() -> None:
    """integrate_batch (and so the scans) hands each member to the step flow: bitwise the single runs, per-member
    lr_bias."""
    ovs = [tl.Overlaps.from_networks(*_pair(2, 10, seed)) for seed in range(3)]
    times, rates = [0.0, 5.0, 50.0, 250.0], [1.0, 0.3, 3.0]
    batch = tl.ode.integrate_batch(ovs, lr=1.0, lr_bias=rates, regime="gradient_flow", times=times, n_threads=2)
    for ov, rate, member in zip(ovs, rates, batch, strict=True):
        one = tl.ode.integrate(ov, lr=1.0, lr_bias=rate, regime="gradient_flow", times=times)
        assert member.status == one.status == "completed" and member.meta["method"] == "step_events"
        for name in ("Q", "M", "a", "bias", "risk"):
            np.testing.assert_array_equal(getattr(member, name), getattr(one, name))


def test_a_zero_weight_vector_is_refused_with_biases_too() -> None:
    """A student with w = 0 is a constant whatever its bias: no direction, refused as without biases."""
    st, te = _pair(2, 10, 0)
    ov = tl.Overlaps.from_networks(st.with_weights(np.vstack([np.zeros(10), st.W[1]]), bias=st.bias), te)
    with pytest.raises(ValueError, match="Q_ii > 0"):
        tl.ode.integrate(ov, lr=1.0, lr_bias=1.0, regime="gradient_flow", t_max=1.0)
