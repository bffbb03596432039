"""One divergence rule for every engine (docs/conventions.rst, "Divergence"; cpp/include/twolayer/divergence.hpp):
the ODE (single and batched), SGD and the SDE stop a blowing-up run with status "diverged" at the time its state
breaks the rule, keep its finite rows, and leave the other members of a batch or ensemble untouched."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer.networks import teacher_student

GREW = "grew past 1e8 times the scale of the start and the teacher"


def test_exploding_sgd_run_is_diverged_as_its_ode() -> None:
    """Issue 28 item 3: this run ended with risk 2.8e33 and status "completed" while its ODE said "diverged"."""
    st, te = teacher_student(4, 2, 1000, "relu", teacher_activation="quadratic", seed=0)
    sgd = tl.sgd.simulate(st, te, lr=1.0, t_max=20.0)
    ode = tl.ode.integrate(tl.Overlaps.from_networks(st, te), "relu", "quadratic", lr=1.0, t_max=20.0)
    for tr in (sgd, ode):
        assert tr.status == "diverged" and GREW in tr.message
        assert np.isfinite(tr.risk).all() and np.all(tr.t <= tr.stop_time)
    # the same rule on the same problem: the bound 1e8 x max(1, |Omega(0)|, |a|, |v|) is crossed at nearly the same
    # time (SGD checks at its records, every 0.2 here; it follows the ODE with e^{4 t} growth)
    assert 5.0 < ode.stop_time < 6.0 and abs(sgd.stop_time - ode.stop_time) < 0.5
    ov = tl.Overlaps.from_networks(st, te)
    scale = max(1.0, *(np.abs(x).max() for x in (ov.Q, ov.M, ov.P, ov.a, ov.v)))
    for tr in (sgd, ode):  # no row past the bound is recorded
        assert np.abs(tr.Q).max() <= 1e8 * scale < 10 * np.abs(tr.Q).max()


def test_one_diverging_sgd_run_leaves_the_ensemble_alone() -> None:
    st, te = teacher_student(4, 2, 1000, "relu", teacher_activation="quadratic", seed=0)
    kw = dict(t_max=10.0, n_records=11)
    ens = tl.sgd.simulate(st, te, lr=[0.05, 1.0, 0.1], seeds=[0, 1, 2], n_threads=2, **kw)
    assert ens.status == ["completed", "diverged", "completed"]
    assert 4.0 < ens.stop_time[1] < 7.0 and GREW in ens[1].message
    assert np.isfinite(ens[1].risk).all() and ens[1].risk[-1] < 1e10
    for j, lr in ((0, 0.05), (2, 0.1)):
        alone = tl.sgd.simulate(st, te, lr=lr, seeds=[j], **kw)
        np.testing.assert_array_equal(ens[j].Q, alone[0].Q)
        np.testing.assert_array_equal(ens[j].risk, alone[0].risk)


def test_every_engine_diverges_at_the_same_time_on_linear_units() -> None:
    """Linear units at lr = 3 > 2: Q grows like exp(lr (lr - 2) t) = exp(3 t) past the bound 1e8 (the scale of
    this start is 1) at t ~ log(1e8 / 0.5 ...) / 3 ~ 6.1, in every engine."""
    st, te = teacher_student(1, 1, 1000, "linear", seed=0)
    ov = tl.Overlaps.from_networks(st, te)
    times = [tl.ode.integrate(ov, "linear", lr=3.0, t_max=50.0, method=m, dt=0.01).stop_time
             for m in ("euler", "rk4", "adaptive")]
    batch = tl.ode.integrate_batch([ov, ov, ov], "linear", lr=[0.5, 3.0, 1.0], t_max=50.0)
    assert list(batch.status) == ["completed", "diverged", "completed"]
    times.append(float(batch.stop_time[1]))
    sgd = tl.sgd.simulate(st, te, lr=3.0, t_max=50.0, seeds=4, n_records=501)
    sde = tl.sde.simulate(ov, "linear", lr=3.0, d=1000, t_max=50.0, seeds=4)
    for ens in (sgd, sde):
        assert ens.status == ["diverged"] * 4 and all(GREW in r.message for r in ens.runs)
        times.extend(ens.stop_time)
    assert 5.5 < min(times) and max(times) < 7.0, times


def test_one_diverging_sde_path_and_batch_member() -> None:
    """A quadratic student 30x too large blows up at once; its neighbours complete as they would alone."""
    st, te = teacher_student(2, 1, 100, "quadratic", seed=0)
    ovs = [tl.Overlaps.from_networks(s, te) for s in (st, st.with_weights(30 * st.W), st)]
    sde = tl.sde.simulate(ovs, "quadratic", lr=0.05, d=100, t_max=2.0, seeds=3)
    assert sde.status == ["completed", "diverged", "completed"] and sde.stop_time[1] < 0.1
    assert "diverged at t =" in sde[1].message and np.isfinite(sde[1].risk).all()
    alone = tl.sde.simulate([ovs[2]], "quadratic", lr=0.05, d=100, t_max=2.0, seeds=[2])
    np.testing.assert_array_equal(sde[2].Q, alone[0].Q)
    batch = tl.ode.integrate_batch(ovs, "quadratic", lr=0.05, t_max=2.0)
    assert list(batch.status) == ["completed", "diverged", "completed"]


@pytest.mark.slow  # ~10 s: lr = 1e6 is stiff
def test_lane_and_single_ode_apply_each_members_own_bound() -> None:
    """The batched erf ODE (SIMD lanes) checks the rule with each member's own bound, as integrate() does: at
    lr = 1e6 Q passes 1e8 by t ~ 0.86, but a member whose teacher is 10x larger (P x 100) has a 100x larger bound."""
    st, te = teacher_student(2, 2, 1000, "erf", seed=0)
    ov = tl.Overlaps.from_networks(st, te)
    big = tl.Overlaps(ov.Q, 10 * ov.M, 100 * ov.P, ov.a, ov.v)
    ts = np.linspace(0, 1, 11)
    batch = tl.ode.integrate_batch([ov, big, ov], "erf", lr=[1e6, 1e6, 1.0], times=ts)
    assert list(batch.status) == ["diverged", "completed", "completed"] and GREW in batch[0].message
    assert 1e8 < np.abs(batch[1].Q).max() < 1e8 * np.abs(big.P).max()
    for member, b in zip((ov, big), batch, strict=False):
        single = tl.ode.integrate(member, "erf", lr=1e6, times=ts)
        assert b.status == single.status
        np.testing.assert_array_equal(b.Q, single.Q)
    # the one-system integrator (a schedule s = 1 keeps erf off the lanes) applies divergence_code, the scalar form
    # of the lanes' check: the same verdict, at the same time to the adaptive steps' accuracy
    scalar = tl.ode.integrate(ov, "erf", lr=1e6, times=ts, schedule=tl.schedules.step_decay(1.0, 0.5, 100.0))
    assert scalar.status == "diverged" and GREW in scalar.message
    assert abs(scalar.stop_time - batch.stop_time[0]) < 0.02 * batch.stop_time[0]


def test_function_target_sgd_uses_the_same_rule() -> None:
    """The NumPy SGD of a FunctionTarget checks the same rule (through the core's divergence()) every d steps."""
    d = 100
    ft = tl.targets.function(lambda z: z[:, 0] ** 2 + z[:, 1] ** 2, k=2, d=d, seed=0)
    st = tl.Network.random(2, d, "relu", seed=1)
    calm = tl.sgd.simulate(st, ft, lr=0.05, t_max=10.0, n_records=11)
    wild = tl.sgd.simulate(st, ft, lr=3.0, t_max=10.0, n_records=11)
    assert calm.status == "completed" and np.isnan(calm.stop_time)
    assert wild.status == "diverged" and GREW in wild.message and wild.stop_time == 3.0
    assert np.isfinite(wild.risk).all() and len(wild.t) == 3 and np.abs(wild.Q).max() < 1e8
    # the binding itself: a state past 1e8 x the start's scale, and one out of the PSD cone
    Q0, M0, a0, P, v = np.eye(2), np.zeros((2, 2)), np.ones(2), np.eye(2), np.zeros(2)
    assert tl._core.divergence(Q0, M0, a0, P, v, Q0, M0, a0) == ""
    assert GREW in tl._core.divergence(2e8 * Q0, M0, a0, P, v, Q0, M0, a0)
    assert "semi-definite" in tl._core.divergence(Q0, 2 * np.eye(2), a0, P, v, Q0, M0, a0)
    assert "not finite" in tl._core.divergence(np.full((2, 2), np.nan), M0, a0, P, v, Q0, M0, a0)


def test_function_target_run_whose_weights_overflow_in_a_step_reports_divergence():
    # the weights leave the double range inside one NumPy step: the run ends "diverged" with its records before
    # it and no final network (as the core's simulator), instead of a ValueError from building that network
    ft = tl.targets.function(lambda z: np.tanh(z[:, 0] + z[:, 1] ** 3 - 3 * z[:, 1]), k=2, d=12, seed=1)
    st = tl.Network.random(2, 12, "quadratic", seed=3)
    run = tl.sgd.simulate(st, ft, lr=500.0, lr_readout=100.0, t_max=3.0, n_records=5, seed=4)  # no RuntimeWarning
    assert run.status == "diverged" and "not finite" in run.message and run.student is None
    assert 0 < run.stop_time < 3.0 and np.isfinite(run.risk).all()


@pytest.mark.parametrize("factor, valid", [(0.5, True), (3.0, False)])
def test_overlaps_and_the_engines_share_the_psd_tolerance(factor: float, valid: bool) -> None:
    """A student past its teacher by rounding, M = P and Q = P - factor * PSD_TOL * I (Omega's smallest eigenvalue
    about -factor / 2 * PSD_TOL, max diag ~1): a state the engines accept (rule 3, divergence.hpp) is a valid Overlaps
    and one they stop is not (before, Overlaps used 1e-9 and the engines 1e-8: a converged run's rows between the two
    could not be read back with Trajectory.overlaps_at)."""
    P = np.array([[1.0, 0.2], [0.2, 0.9]])
    Q = P - factor * tl._core.PSD_TOL * np.eye(2)
    M0, a0, v = P.copy(), np.ones(2), np.ones(2)
    assert (tl._core.divergence(Q, P, a0, P, v, Q, M0, a0) == "") == valid
    if valid:
        tl.Overlaps(Q, P, P, a0, v)
    else:
        with pytest.raises(ValueError, match="not positive semi-definite"):
            tl.Overlaps(Q, P, P, a0, v)


@pytest.mark.parametrize("act", ["tanh", "erf"])
def test_a_run_that_learns_its_teacher_at_a_loose_tolerance_completes(act: str) -> None:
    """K = M = 2 to t = 1000 at rtol 1e-6, atol 1e-8 (tanh: OdeRhs, erf: the SIMD lanes): the student learns its
    teacher, Omega becomes singular and the accepted states leave the PSD cone by up to the integrator's tolerance
    (measured: eigenvalues to -3e-8). Rule 3 allows that much in an adaptive run (psd_delta); before, the tanh run
    was reported diverged at t = 277 and the erf run's late rows could not be read back (overlaps_at raised)."""
    s, t = teacher_student(K=2, M=2, d=1000, activation=act, seed=2)
    tr = tl.ode.integrate(tl.Overlaps.from_networks(s, t), act, lr=0.5, t_max=1000.0, rtol=1e-6, atol=1e-8)
    assert tr.status == "completed" and tr.t[-1] == 1000.0
    assert tr.risk[0] > 0.5 and np.abs(tr.risk[-20:]).max() < 1e-6
    lowest = min(np.linalg.eigvalsh(tr.overlaps_at(i).omega)[0] for i in range(len(tr.t)))
    assert -2e-6 < lowest < 0.0  # the rows do leave the cone, by less than rtol max diag + atol
    assert tr.overlaps_at(-1).integration_tol == (1e-6, 1e-8)
    # the batch (lanes for erf) and continuing from the last row at the same tolerance
    batch = tl.ode.integrate_batch(tl.BatchOverlaps.stack([tl.Overlaps.from_networks(s, t)] * 2), act, lr=0.5,
                                   t_max=1000.0, rtol=1e-6, atol=1e-8)
    assert list(batch.status) == ["completed"] * 2
    again = tl.ode.integrate(batch.overlaps_at(-1)[0], act, lr=0.5, t_max=50.0, rtol=1e-6, atol=1e-8)
    assert again.status == "completed"


def test_fixed_step_runs_keep_the_fixed_psd_tolerance() -> None:
    """Euler and RK4 have no tolerance: their rule 3 stays 1e-8 max diag (and their rows' integration_tol (0, 0))."""
    s, t = teacher_student(K=2, M=2, d=100, activation="erf", seed=2)
    tr = tl.ode.integrate(tl.Overlaps.from_networks(s, t), "erf", lr=0.5, t_max=5.0, method="rk4", dt=0.1)
    assert tr.status == "completed" and tr.overlaps_at(-1).integration_tol == (0.0, 0.0)
