"""SDE of online SGD (``tl.sde.simulate``): paths to the escape of the seed-003 p = 1 system, against a vectorised
NumPy Euler-Maruyama of the same equations, and against SGD itself at d = 4000 for the same number of escapes.

Run with ``python -m pytest bench/test_bench_sde.py --benchmark-only -s``. The system: spherical online SGD,
quadratic student and teacher, K = M = 1, lr = 0.05, Delta = 0.5, start m0 = 1/sqrt(d), escape at T = 0.5
(risk <= R(0) / 2). Both SDE implementations: Euler-Maruyama with the same dt, drift gamma m (A - B m^2) (the p = 1
ODE), diffusion Var(xi_m - m xi_Q / 2) / d by the same 7 x 7 Gauss-Hermite rule. Timings are wall clock and
process CPU time; the ratio and the mean escape times are printed and stored in ``extra_info``.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import twolayer as tl

LR, NOISE, T = 0.05, 0.5, 0.5
N_PATHS, DT = 10_000, 0.05


def p1(m0: float) -> tl.Overlaps:
    return tl.Overlaps([[1.0]], [[m0]], [[1.0]], [1.0], [1.0])


def sde_twolayer(d: int, n: int, n_threads: int | None = None) -> tl.passage.FirstPassage:
    e = tl.sde.simulate(p1(1 / math.sqrt(d)), "quadratic", lr=LR, noise=NOISE, d=d, spherical=True, t_max=300.0,
                        records=2, seeds=n, dt=DT, risk_rtol=1 - T, n_threads=n_threads)
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


def timed(fn, *args):
    c0, w0 = time.process_time(), time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - w0, time.process_time() - c0


@pytest.mark.benchmark(group="sde-p1-escape")
def test_sde_twolayer_vs_numpy(benchmark):
    d = 1000
    res = {}

    def both():
        res["tl"] = timed(sde_twolayer, d, N_PATHS)
        res["np"] = timed(sde_numpy, d, N_PATHS)

    benchmark.pedantic(both, rounds=1, iterations=1)
    fp, w_tl, c_tl = res["tl"]
    t_np, w_np, c_np = res["np"]
    info = {"paths": N_PATHS, "d": d, "dt": DT, "twolayer_wall_s": w_tl, "twolayer_cpu_s": c_tl, "numpy_wall_s": w_np,
            "numpy_cpu_s": c_np, "speedup_wall": w_np / w_tl, "speedup_cpu": c_np / c_tl,
            "mean_escape_twolayer": fp.mean(), "sem_twolayer": fp.sem(),
            "mean_escape_numpy": float(np.nanmean(t_np)), "sem_numpy": float(np.nanstd(t_np) / math.sqrt(N_PATHS))}
    benchmark.extra_info.update(info)
    print("\n", info)
    assert fp.n_censored == 0 and not np.isnan(t_np).any()


@pytest.mark.benchmark(group="sde-vs-sgd")
def test_sde_vs_sgd_same_escapes(benchmark):
    d, n = 4000, 32
    teacher = tl.Network(math.sqrt(d) * np.eye(1, d), [1.0], "quadratic")
    m0 = 1 / math.sqrt(d)
    student = tl.Network(math.sqrt(d) * np.array([[m0, math.sqrt(1 - m0 * m0)] + [0.0] * (d - 2)]), [1.0],
                         "quadratic")
    res = {}

    def both():
        res["sde"] = timed(sde_twolayer, d, n)
        res["sgd"] = timed(lambda: tl.sgd.simulate(student, teacher, lr=LR, noise=NOISE, spherical=True,
                                                   t_max=300.0, records=6001, seeds=n, risk_rtol=1 - T,
                                                   keep_weights=False).first_passage(1 - T))

    benchmark.pedantic(both, rounds=1, iterations=1)
    fp_sde, w_sde, c_sde = res["sde"]
    fp_sgd, w_sgd, c_sgd = res["sgd"]
    info = {"escapes": n, "d": d, "sde_wall_s": w_sde, "sgd_wall_s": w_sgd, "sde_cpu_s": c_sde, "sgd_cpu_s": c_sgd,
            "sgd_over_sde_wall": w_sgd / w_sde, "sgd_over_sde_cpu": c_sgd / c_sde,
            "mean_escape_sde": fp_sde.mean(), "sem_sde": fp_sde.sem(), "mean_escape_sgd": fp_sgd.mean(),
            "sem_sgd": fp_sgd.sem()}
    benchmark.extra_info.update(info)
    print("\n", info)
    assert fp_sde.n_censored == 0 and fp_sgd.n_censored == 0
