"""SDE of online SGD (``tl.sde.simulate``): paths to the escape of Arnaboldi et al.'s p = 1 system, against a vectorised
NumPy Euler-Maruyama of the same equations, and against SGD itself at d = 1000 (4000 with
``TWOLAYER_BENCH_FULL=1``) for the same number of escapes.

Run with ``python -m pytest bench/test_bench_sde.py --benchmark-only -s`` (the SDE benchmarks before their
references, in file order, so that the CPU-time ratios land in ``extra_info``). The system: spherical online SGD,
quadratic student and teacher, K = M = 1, lr = 0.05, Delta = 0.5, start m0 = 1/sqrt(d), escape at T = 0.5
(risk <= R(0) / 2). Both SDE implementations: Euler-Maruyama with the same dt, drift gamma m (A - B m^2) (the p = 1
ODE), diffusion Var(xi_m - m xi_Q / 2) / d by the same 7 x 7 Gauss-Hermite rule. Timings are wall clock and
process CPU time (median of the rounds, all threads); the CPU ratios and the mean escape times are printed
and stored in ``extra_info``.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import twolayer as tl
from sizes import size

LR, NOISE, T = 0.05, 0.5, 0.5
N_PATHS, DT = size(2000, 10_000), 0.05


def p1(m0: float) -> tl.Overlaps:
    return tl.Overlaps([[1.0]], [[m0]], [[1.0]], [1.0], [1.0])


def sde_twolayer(d: int, n: int, n_threads: int | None = None) -> tl.passage.FirstPassage:
    e = tl.sde.simulate(p1(1 / math.sqrt(d)), "quadratic", lr=LR, noise=NOISE, d=d, spherical=True, t_max=300.0,
                        n_records=2, seeds=n, dt=DT, risk_rtol=1 - T, n_threads=n_threads)
    return e.first_passage(1 - T)


def sde_numpy(d: int, n: int, seed: int = 0) -> np.ndarray:
    """The same Euler-Maruyama, vectorised over paths in NumPy."""
    rng = np.random.default_rng(seed)
    A, B = 4 * (1 - 6 * LR) - 2 * LR * NOISE, 4 * (1 - 6 * LR)
    x, w = np.polynomial.hermite_e.hermegauss(7)
    w = w / w.sum()
    u1, u2 = (a.ravel() for a in np.meshgrid(x, x, indexing="ij"))
    wt = np.outer(w, w).ravel()
    s = math.sqrt(NOISE)
    m = np.full(n, 1 / math.sqrt(d))
    thr = (1 - T) * 2 * (1 - m[0] ** 2)
    alive = np.arange(n)
    t_exit = np.full(n, np.nan)
    r_prev = 2 * (1 - m**2)
    t = 0.0
    while alive.size and t < 300.0:
        mm = m[alive, None]
        lam, lst = u1[None, :], mm * u1[None, :] + np.sqrt(1 - mm * mm) * u2[None, :]
        e = lst * lst - lam * lam
        f1q, f2q = 4 * LR * lam * lam, 4 * LR * LR * lam * lam
        f1m = 2 * LR * lam * lst
        # projected increment xi = c0 + c1 zeta + c2 zeta^2
        c0 = f1m * e - 0.5 * mm * (f1q * e + f2q * e * e)
        c1 = (f1m - 0.5 * mm * (f1q + 2 * f2q * e)) * s
        c2 = -0.5 * mm * f2q * s * s
        mean = (wt * (c0 + c2)).sum(axis=1)
        second = (wt * (c0 * c0 + c1 * c1 + 2 * c0 * c2 + 3 * c2 * c2)).sum(axis=1)
        var = np.maximum(second - mean * mean, 0.0)
        drift = LR * m[alive] * (A - B * m[alive] ** 2)
        m[alive] += drift * DT + np.sqrt(DT * var / d) * rng.standard_normal(alive.size)
        t += DT
        r = 2 * (1 - m[alive] ** 2)
        hit = r <= thr
        if hit.any():
            idx = alive[hit]
            t_exit[idx] = t - DT * (thr - r[hit]) / (r_prev[idx] - r[hit])
        r_prev[alive] = r
        alive = alive[~hit]
    return t_exit


def cpu_rounds(benchmark, fn, rounds=3):
    """Times ``fn`` over ``rounds`` rounds (wall clock, by pytest-benchmark) and returns its last result and the
    median process CPU time of a round (all threads: the machine is shared, so CPU time is the fair measure)."""
    cpu: list[float] = []
    out: list = []

    def run():
        c0 = time.process_time()
        out.append(fn())
        cpu.append(time.process_time() - c0)

    benchmark.pedantic(run, rounds=rounds, iterations=1)
    return out[-1], float(np.median(cpu))


_CPU: dict[str, float] = {}


@pytest.mark.quick
@pytest.mark.benchmark(group="sde-p1-escape")
def test_sde_escape_twolayer(benchmark, record):
    """N_PATHS SDE paths (2000; 10^4 with TWOLAYER_BENCH_FULL=1) of the p = 1 system to the escape: C++ (paths in
    SIMD lanes, OpenMP)."""
    fp, cpu = cpu_rounds(benchmark, lambda: sde_twolayer(1000, N_PATHS))
    assert fp.n_censored == 0
    _CPU["twolayer"] = cpu
    record(benchmark, work=N_PATHS, unit="path", ref="test_sde_escape_numpy", cpu_s=cpu,
           mean_escape=fp.mean(), sem=fp.sem())


@pytest.mark.quick
@pytest.mark.benchmark(group="sde-p1-escape")
def test_sde_escape_numpy(benchmark, record):
    """The same Euler-Maruyama vectorised over paths in NumPy (same drift, same 7 x 7 Gauss-Hermite diffusion)."""
    t_exit, cpu = cpu_rounds(benchmark, lambda: sde_numpy(1000, N_PATHS))
    assert not np.isnan(t_exit).any()
    extra = {"cpu_speedup_twolayer": cpu / _CPU["twolayer"]} if "twolayer" in _CPU else {}
    record(benchmark, work=N_PATHS, unit="path", cpu_s=cpu, mean_escape=float(np.mean(t_exit)),
           sem=float(np.std(t_exit) / math.sqrt(N_PATHS)), **extra)
    print(f"\nSDE escape, {N_PATHS} paths: CPU s twolayer", _CPU.get("twolayer"), "numpy", cpu, extra)


N_ESCAPES = size(8, 16)
D_ESCAPE = size(1000, 4000)  # SGD costs ~ d^2 per unit time, the SDE ~ nothing more


@pytest.mark.benchmark(group="sde-vs-sgd")
def test_sde_escapes_vs_sgd(benchmark, record):
    """The SDE at d = D_ESCAPE (1000; 4000 with TWOLAYER_BENCH_FULL=1), N_ESCAPES paths to the escape (the SGD
    benchmark below does the same escapes)."""
    fp, cpu = cpu_rounds(benchmark, lambda: sde_twolayer(D_ESCAPE, N_ESCAPES))
    assert fp.n_censored == 0
    _CPU["sde_escapes"] = cpu
    record(benchmark, work=N_ESCAPES, unit="escape", ref="test_sgd_escapes_vs_sde", cpu_s=cpu, mean_escape=fp.mean(),
           sem=fp.sem())


@pytest.mark.benchmark(group="sde-vs-sgd")
def test_sgd_escapes_vs_sde(benchmark, record):
    """Spherical SGD at d = D_ESCAPE from m0 = 1/sqrt(d), N_ESCAPES runs to the escape (the reference the SDE
    replaces)."""
    d = D_ESCAPE
    teacher = tl.Network(math.sqrt(d) * np.eye(1, d), [1.0], "quadratic")
    m0 = 1 / math.sqrt(d)
    student = tl.Network(math.sqrt(d) * np.array([[m0, math.sqrt(1 - m0 * m0)] + [0.0] * (d - 2)]), [1.0],
                         "quadratic")
    fp, cpu = cpu_rounds(benchmark, lambda: tl.sgd.simulate(
        student, teacher, lr=LR, noise=NOISE, spherical=True, t_max=300.0, n_records=6001, seeds=N_ESCAPES,
        risk_rtol=1 - T, keep_weights=False).first_passage(1 - T))
    assert fp.n_censored == 0
    extra = {"cpu_sgd_over_sde": cpu / _CPU["sde_escapes"]} if "sde_escapes" in _CPU else {}
    record(benchmark, work=N_ESCAPES, unit="escape", cpu_s=cpu, d=d,
           mean_escape=fp.mean(), sem=fp.sem(), **extra)
    print(f"\nSDE vs SGD at d = {d},", N_ESCAPES, "escapes: CPU s SDE", _CPU.get("sde_escapes"), "SGD", cpu, extra)
