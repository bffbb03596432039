"""First-passage times (twolayer.passage) on Trajectory, BatchTrajectory and sgd.Ensemble."""

import math

import numpy as np
import pytest
import twolayer as tl
from twolayer import theory as th
from twolayer.passage import FirstPassage, first_passage_time


def p1_overlaps(m0):
    return tl.Overlaps([[1.0]], [[m0]], [[1.0]], [1.0], [1.0])


def test_interpolation_and_censoring():
    t = np.array([0.0, 1.0, 2.0, 3.0])
    r = np.array([4.0, 3.0, 1.0, 0.5])
    assert first_passage_time(t, r, 0.5) == pytest.approx(1.5)  # level 2 = 0.5 * R(0), between t = 1 and 2
    assert first_passage_time(t, r, 2.0, relative=False) == pytest.approx(1.5)
    assert first_passage_time(t, r, 0.25) == 2.0  # on a record
    assert first_passage_time(t, r, 1.0) == 0.0  # already there
    assert math.isnan(first_passage_time(t, r, 0.1))  # censored
    assert math.isnan(first_passage_time(t[:0], r[:0], 0.1))
    with pytest.raises(ValueError, match="level"):
        first_passage_time(t, r, 0.0)
    with pytest.raises(ValueError, match="risk: expected the shape"):
        first_passage_time(t, r[:2], 0.5)


def test_ode_passage_exact_and_interpolated():
    lr, noise, T, d = 0.05, 0.5, 0.5, 1000
    m0 = 1 / math.sqrt(d)
    exact = th.escape_time(d, lr, noise, T)
    stopped = tl.ode.integrate(p1_overlaps(m0), "quadratic", lr=lr, noise=noise, spherical=True, t_max=100.0,
                               risk_rtol=1 - T, rtol=1e-11, atol=1e-13)
    assert stopped.first_passage(1 - T) == pytest.approx(stopped.stop_time, rel=1e-12)
    assert stopped.first_passage(1 - T) == pytest.approx(exact, rel=1e-8)
    free = tl.ode.integrate(p1_overlaps(m0), "quadratic", lr=lr, noise=noise, spherical=True, t_max=100.0,
                            n_records=2001, rtol=1e-11, atol=1e-13)
    assert free.first_passage(1 - T) == pytest.approx(exact, rel=1e-3)  # chord between records 0.05 apart
    R0 = free.risk[0]
    assert free.first_passage((1 - T) * R0, relative=False) == pytest.approx(free.first_passage(1 - T), rel=1e-12)
    assert math.isnan(free.first_passage(1e-3))  # below the fixed-point risk: never


def test_batch_passage():
    ovs = [p1_overlaps(m) for m in (0.01, 0.03, 0.1)]
    batch = tl.ode.integrate_batch(ovs, "quadratic", lr=0.05, noise=0.5, spherical=True, t_max=200.0,
                                   risk_rtol=0.5, rtol=1e-11, atol=1e-13)
    fp = batch.first_passage(0.5)
    assert isinstance(fp, FirstPassage) and fp.n == 3 and fp.n_censored == 0
    np.testing.assert_allclose(fp.times, th.escape_time_p1([0.01, 0.03, 0.1], 0.05, 0.5, 0.5), rtol=1e-8)
    assert np.all(np.diff(fp.times) < 0)


def test_statistics_with_censoring():
    fp = FirstPassage(times=np.array([1.0, 2.0, np.nan, 3.0, np.nan]),
                      censored=np.array([False, False, True, False, True]), level=0.5, relative=True)
    assert fp.n_crossed == 3 and fp.fraction_censored == 0.4
    assert fp.mean() == 2.0 and fp.std() == 1.0 and fp.sem() == pytest.approx(1 / math.sqrt(3))
    assert fp.quantile(0.0) == 1.0 and fp.quantile(0.25) == 2.0 and fp.quantile(0.5) == 3.0
    assert fp.quantile(0.75) == np.inf  # among the censored runs
    np.testing.assert_array_equal(fp.quantile([0.0, 0.5]), [1.0, 3.0])
    with pytest.raises(ValueError, match="q"):
        fp.quantile(1.5)
    empty = FirstPassage(np.array([np.nan]), np.array([True]), 0.5, True)
    assert math.isnan(empty.mean()) and empty.quantile(0.5) == np.inf


def test_ensemble_passage_matches_early_stop():
    d, lr, noise = 200, 0.05, 0.5
    teacher = tl.Network(np.sqrt(d) * np.eye(1, d), [1.0], "quadratic")
    rng = np.random.default_rng(1)
    students = []
    for _ in range(4):
        w = rng.standard_normal(d)
        students.append(tl.Network(np.sqrt(d) * w[None] / np.linalg.norm(w), [1.0], "quadratic"))
    ens = tl.sgd.simulate(students, teacher, lr=lr, noise=noise, spherical=True, t_max=60.0, seeds=4, n_records=601,
                          risk_rtol=0.5, keep_weights=False)
    fp = ens.first_passage(0.5)
    crossed = ~fp.censored
    assert crossed.sum() >= 3
    np.testing.assert_allclose(fp.times[crossed], ens.stop_time[crossed], rtol=1e-12)
    np.testing.assert_array_equal(fp.censored, np.array(ens.status) != "converged")


def test_first_passage_time_checks_its_records():
    """Decreasing record times were accepted (found by the fuzz suite), NaN records and strings too."""
    fpt = tl.passage.first_passage_time
    with pytest.raises(ValueError, match="t: expected non-decreasing record times"):
        fpt([1.0, 0.5], [0.0, 0.0], level=0.5)
    with pytest.raises(ValueError, match="risk: entries must be finite"):
        fpt([0.0, 1.0], [1.0, float("nan")], level=0.5)
    with pytest.raises(TypeError, match="t: expected an array of real numbers"):
        fpt(["0", "1"], [1.0, 0.2], level=0.5)
    assert fpt([0.0, 1.0, 1.0, 2.0], [1.0, 0.8, 0.8, 0.2], level=0.5) == pytest.approx(1.5)
