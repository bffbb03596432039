"""Benchmarks for the step-unit gradient flow through alignment (``tl.ode.integrate`` with step units in the
gradient-flow regime: the core's step_flow.cpp), side by side with its NumPy reference (bench/step_flow_reference.py,
the same method with a NumPy right-hand side called once per stage).

Run: python -m pytest bench/test_bench_step_flow.py --benchmark-only -s

With trained biases, the flow against weight-space descent with biases (the core's, step 0.01 then decaying).

One run = Mariantoni & Chizat's Gaussian start (lambda = w.x, rows N(0, I / d), d = 20) integrated to t = 250, where
every student has reached its teacher (risk 0). Both must end at risk <= 1e-9 with the same overlaps to 1e-6.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import step_flow_reference as ref
import twolayer as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import test_step_flow_bias as flow_bias  # noqa: E402

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


def _biased(m: int) -> tuple[tl.Network, tl.Network]:
    """The starts of tests/test_step_flow_bias.py with trained biases (every student reaches its teacher)."""
    seed, d = {2: (0, 10), 3: (3, 20)}[m]
    return flow_bias._pair(m, d, seed)


@pytest.mark.parametrize("m", [2, 3])
def test_step_flow_biased_twolayer(benchmark, record, m):
    """With trained biases (lr_bias = lr): the flow through the meetings to t = 250, risk at rounding."""
    benchmark.group = f"step-unit flow with biases m={m} to t=250"
    st, te = _biased(m)
    traj = benchmark(tl.ode.integrate, tl.Overlaps.from_networks(st, te), lr=1.0, lr_bias=1.0,
                     regime="gradient_flow", times=TIMES)
    assert traj.status == "completed" and abs(traj.risk[-1]) <= 1e-14
    record(benchmark, work=1, unit="run", ref=f"test_step_flow_biased_descent[{m}]")


@pytest.mark.parametrize("m", [2, 3])
def test_step_flow_biased_descent(benchmark, record, m):
    """What one would run without the flow: weight-space descent with biases (the core's population.descend, step
    0.01 to t = 250, then 20000 decaying steps), which ends within 1e-8 of the risk the flow reaches."""
    benchmark.group = f"step-unit flow with biases m={m} to t=250"
    st, te = _biased(m)
    sched = tl.schedules.step_decay(0.5, every=1000, start=25_000)
    run = benchmark.pedantic(tl.population.descend, (st, te), {"lr": 0.01, "lr_bias": 0.01, "n_steps": 45_000,
                                                             "n_records": 2, "schedule": sched}, rounds=3)
    assert run.risk[-1] <= 1e-8
    record(benchmark, work=1, unit="run")
