"""Benchmarks for the step-unit gradient flow through alignment (``tl.ode.integrate`` with step units in the
gradient-flow regime: the core's step_flow.cpp), side by side with its NumPy reference (bench/step_flow_reference.py,
the same method with a NumPy right-hand side called once per stage).

Run: python -m pytest bench/test_bench_step_flow.py --benchmark-only -s

One run = Mariantoni & Chizat's Gaussian start (lambda = w.x, rows N(0, I / d), d = 20) integrated to t = 250, where
every student has reached its teacher (risk 0). Both must end at risk <= 1e-9 with the same overlaps to 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
import step_flow_reference as ref
import twolayer as tl

TIMES = np.array([0.0, 5.0, 20.0, 60.0, 250.0])
SEEDS = {2: 0, 4: 3, 6: 0}


def _overlaps(m: int) -> tl.Overlaps:
    rng = np.random.default_rng(SEEDS[m])
    te = tl.Network(rng.standard_normal((m, 20)) / np.sqrt(20), None, "step", scaling="none")
    st = tl.Network(rng.standard_normal((m, 20)) / np.sqrt(20), None, "step", scaling="none")
    return tl.Overlaps.from_networks(st, te)


@pytest.mark.parametrize("m", [2, pytest.param(4, marks=pytest.mark.quick), 6])
def test_step_flow_twolayer(benchmark, record, m):
    benchmark.group = f"step-unit flow m={m} to t=250"
    ov = _overlaps(m)
    traj = benchmark(tl.ode.integrate, ov, lr=1.0, regime="gradient_flow", times=TIMES)
    assert traj.status == "completed" and abs(traj.risk[-1]) <= 1e-9
    record(benchmark, work=1, unit="run", ref=f"test_step_flow_numpy[{m}]")


@pytest.mark.parametrize("m", [2, pytest.param(4, marks=pytest.mark.quick), 6])
def test_step_flow_numpy(benchmark, record, m):
    benchmark.group = f"step-unit flow m={m} to t=250"
    ov = _overlaps(m)
    out = benchmark.pedantic(ref.integrate, (ov, 1.0, 0.0, TIMES, None), rounds=3)
    assert out["status"] == "completed" and abs(out["risk"][-1]) <= 1e-9
    traj = tl.ode.integrate(ov, lr=1.0, regime="gradient_flow", times=TIMES)
    np.testing.assert_allclose(out["Q"][-1], traj.Q[-1], atol=1e-6)
    record(benchmark, work=1, unit="run")
