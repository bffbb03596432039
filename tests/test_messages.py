"""The core's status and error messages (issue 26): exact text, numbers as an ostream's defaults printed them
(printf's "%g": 6 significant digits), the same for a single run and a batch member. They are built without
iostreams (cpp/include/twolayer/format.hpp); .ci/static-libstdcxx runs these paths in a module that carries its own
libstdc++."""

from __future__ import annotations

import pytest
import twolayer as tl

OV = tl.ode.plateau_overlaps(K=2, M=2, seed=3)


def _runs(**kw):
    """The single run and the same system as member 1 of a batch of 3 (one thread, so members run in lanes)."""
    single = tl.ode.integrate(OV, "erf", lr=0.5, **kw)
    batch = tl.ode.integrate_batch([OV, OV, OV], "erf", lr=0.5, n_threads=1, **kw)
    return single, batch[1]


@pytest.mark.parametrize("t_max", [1.23456789e-4, 0.1, 3.0])
def test_completed_message(t_max):
    for tr in _runs(t_max=t_max, method="euler", dt=1e-5 if t_max < 1e-3 else 0.01):
        n_steps, n_rhs = int(tr.meta["n_steps"]), int(tr.meta["n_rhs"])
        assert tr.status == "completed"
        assert tr.message == f"integrated to t = {t_max:g} in {n_steps} steps ({n_rhs} right-hand-side evaluations)"


def test_max_steps_message():
    for tr in _runs(t_max=10.0, method="rk4", dt=0.0123, max_steps=7):
        assert tr.status == "max_steps"
        assert tr.message == f"max_steps = 7 steps taken, stopped at t = {float(tr.stop_time):g}"


def test_converged_message():
    for tr in _runs(t_max=200.0, risk_tol=1.7e-2, risk_rtol=1e-3):
        assert tr.status == "converged"
        rtol_part = "risk_rtol = 0.001 x the initial risk"
        head, _, tail = tr.message.partition(" (risk_tol = 0.017, " + rtol_part + ") at t = ")
        assert head.startswith("excess risk ") and " reached the threshold " in head
        risk, threshold = head.removeprefix("excess risk ").split(" reached the threshold ")
        assert risk == f"{float(tr.risk[-1]):g}" and float(risk) <= float(threshold)
        assert tail == f"{float(tr.stop_time):g}"


def test_dt_message():
    with pytest.raises(ValueError, match=r"^dt: a step of 1e-20 cannot advance the time up to t = 1e\+06 in double "
                                         r"precision$"):
        tl.ode.integrate(OV, "erf", lr=0.5, t_max=1e6, method="euler", dt=1e-20, n_records=2)


def test_small_times_print_in_exponent_form():
    for tr in _runs(t_max=1e-5, method="euler", dt=1e-6):
        assert tr.message.startswith("integrated to t = 1e-05 in ")
