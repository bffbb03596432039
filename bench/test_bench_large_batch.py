"""The large-batch regime (First order methods): one iteration of the d -> infinity map against one SGD step at d =
4000, n_b = d, each next to a plain NumPy version, measured in one run.

* map, twolayer: ``tl.ode.integrate(..., regime="large_batch", n_steps=S)``, per iteration (S = 200);
* map, NumPy: the same update with the expectations psi = E[g'(l_i) l_c E] and E[g'g'E^2] estimated by Monte Carlo
  over 10^5 samples of (l, l*) ~ N(0, Omega) (what one writes without the closed forms), with its error against
  the exact map;
* SGD, twolayer: ``tl.sgd.simulate(lr=gamma0 d, batch_size=d)``, per step (one thread);
* SGD, NumPy: X (n_b x d) @ W^T, the batch gradient, W += (lr / sqrt d) a g^T X / n_b;
* map with the staircase target (group "large_batch_target"): the exact map step, relu K = 4, k = 3, against
  the same step with Monte Carlo expectations over 10^5 samples (speed-up and the Monte Carlo error recorded).
K = M = 2 erf units. Run with ``python -m pytest bench/test_bench_large_batch.py --benchmark-only -s``.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
import twolayer as tl
from twolayer.networks import teacher_student

try:
    from scipy.special import erf as sp_erf
except ImportError:  # pragma: no cover
    sp_erf = None

D, GAMMA0, ALPHA = 4000, 1.0, 1.0


def best_time(fn, repeats: int = 3) -> float:
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def numpy_map_step(ov: tl.Overlaps, n: int, rng: np.random.Generator):
    """One map iteration with Monte Carlo expectations (erf units)."""
    K, M = ov.M.shape
    Om = np.block([[ov.Q, ov.M], [ov.M.T, ov.P]])
    L = rng.standard_normal((n, K + M)) @ np.linalg.cholesky(Om + 1e-14 * np.eye(K + M)).T
    lam, lst = L[:, :K], L[:, K:]
    err = sp_erf(lst / math.sqrt(2)) @ ov.v - sp_erf(lam / math.sqrt(2)) @ ov.a
    u = math.sqrt(2 / math.pi) * np.exp(-0.5 * lam**2) * err[:, None]  # g'(l_i) E
    psi = u.T @ L / n  # (K, K + M)
    hd = (u.T @ u) / n
    g = psi @ np.linalg.pinv(Om) @ psi.T
    a = ov.a
    Q = ov.Q + GAMMA0 * (a[:, None] * psi[:, :K] + (a[:, None] * psi[:, :K]).T) + GAMMA0**2 * np.outer(a, a) * (
        g + hd / ALPHA)
    Mn = ov.M + GAMMA0 * a[:, None] * psi[:, K:]
    return Q, Mn


def numpy_sgd_step(W, a, Wt, v, rng):
    d = W.shape[1]
    nb = int(ALPHA * d)
    X = rng.standard_normal((nb, d))
    s = 1 / math.sqrt(d)
    lam = X @ W.T * s
    y = sp_erf(X @ Wt.T * (s / math.sqrt(2))) @ v
    E = y - sp_erf(lam / math.sqrt(2)) @ a
    g = a * math.sqrt(2 / math.pi) * np.exp(-0.5 * lam * lam) * E[:, None]  # (nb, K)
    W += (GAMMA0 * d * s / nb) * (g.T @ X)


@pytest.mark.skipif(sp_erf is None, reason="needs scipy")
def test_large_batch_map_vs_sgd_step(benchmark, record):
    st, te = teacher_student(2, 2, D, "erf", seed=1)
    ov = tl.Overlaps.from_networks(st, te)
    S = 200
    t_map = best_time(lambda: tl.ode.integrate(ov, lr=GAMMA0, regime="large_batch", batch_ratio=ALPHA, n_steps=S,
                                               n_threads=1)) / S
    exact = tl.ode.integrate(ov, lr=GAMMA0, regime="large_batch", batch_ratio=ALPHA, n_steps=1)
    rng = np.random.default_rng(0)
    t_np_map = best_time(lambda: numpy_map_step(ov, 100_000, rng))
    Qmc, Mmc = numpy_map_step(ov, 100_000, rng)
    mc_err = max(np.abs(Qmc - exact.Q[1]).max(), np.abs(Mmc - exact.M[1]).max())
    steps = 5
    t_sgd = best_time(lambda: tl.sgd.simulate(st, te, lr=GAMMA0 * D, batch_size=int(ALPHA * D), t_max=steps / D,
                                              n_records=2, keep_weights=False, n_threads=1), repeats=2) / steps
    W = st.W.copy()
    t_np_sgd = best_time(lambda: numpy_sgd_step(W, st.a, te.W, te.a, rng))
    rows = [("map, twolayer (exact)", t_map), ("map, NumPy Monte Carlo 1e5", t_np_map),
            (f"SGD step, twolayer d={D} n_b=d", t_sgd), (f"SGD step, NumPy d={D} n_b=d", t_np_sgd)]
    print(f"\nlarge batch, K = M = 2 erf, gamma0 = {GAMMA0}, alpha = {ALPHA} (wall time per iteration)")
    for name, t in rows:
        print(f"  {name:<34}{t * 1e6:12.1f} us")
        benchmark.extra_info[name] = t
    print(f"  map vs SGD step (twolayer): x{t_sgd / t_map:.0f};  map vs NumPy MC map: x{t_np_map / t_map:.0f} "
          f"(MC error {mc_err:.2g});  SGD twolayer vs NumPy: x{t_np_sgd / t_sgd:.1f}")
    benchmark.extra_info["mc_map_error"] = mc_err
    benchmark.pedantic(lambda: tl.ode.integrate(ov, lr=GAMMA0, regime="large_batch", batch_ratio=ALPHA, n_steps=S,
                                                n_threads=1), rounds=5, iterations=1)
    record(benchmark, work=S, unit="map step")


# The map with a polynomial target: the staircase z1 + z1 z2 + z1 z2 z3 (k = 3), K = 4 relu student (the system of
# bench/test_bench_targets.py), and a tanh student with biases (0.3, -0.2, 0.1, 0.4: the certified smooth moments and
# the committee's lattices). twolayer: exact expectations (TargetRhs::add_raw + the committee part), per iteration
# over S iterations; NumPy: one iteration with psi and phi^HD by Monte Carlo over 10^5 samples of (l, z) ~ N(0, Omega),
# with its error against the exact map step (extra_info).
S_TARGET = {"relu": 20, "tanh": 2}
TANH_BIAS = np.array([0.3, -0.2, 0.1, 0.4])


def _staircase_map_system(act: str):
    from test_bench_targets import staircase_system

    ov, tgt = staircase_system(act)
    if act == "tanh":
        ov = tl.Overlaps(ov.Q, ov.M, ov.P, ov.a, ov.v, bias=TANH_BIAS, teacher_bias=np.zeros(ov.M.shape[1]))
    return ov, tgt


def numpy_map_step_target(ov: tl.Overlaps, tgt, act: str, n: int = 100_000, seed: int = 0):
    """One map iteration with Monte Carlo expectations (relu student, or tanh with the biases of ``ov``)."""
    K = ov.K
    Om = ov.omega
    X = np.random.default_rng(seed).standard_normal((n, Om.shape[0])) @ np.linalg.cholesky(Om).T
    lam, z = X[:, :K], X[:, K:]
    if act == "relu":
        g, dg = np.maximum(lam, 0), (lam > 0) * 1.0
    else:
        g = np.tanh(lam + ov.bias)
        dg = 1.0 - g**2
    err = tgt.function(z) - g @ ov.a
    u = dg * err[:, None]  # g'(l_i) E
    psi = u.T @ X / n  # (K, K + k)
    hd = u.T @ u / n
    gp = psi @ np.linalg.pinv(Om) @ psi.T
    a = ov.a
    aps = a[:, None] * psi[:, :K]
    Q = ov.Q + GAMMA0 * (aps + aps.T) + GAMMA0**2 * np.outer(a, a) * (gp + hd / ALPHA)
    return Q, ov.M + GAMMA0 * a[:, None] * psi[:, K:]


@pytest.mark.quick
@pytest.mark.benchmark(group="large_batch_target")
@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_bench_large_batch_map_staircase(benchmark, record, act):
    ov, tgt = _staircase_map_system(act)
    steps = S_TARGET[act]
    run = lambda: tl.ode.integrate(ov, act, target=tgt, lr=GAMMA0, regime="large_batch",  # noqa: E731
                                   batch_ratio=ALPHA, n_steps=steps)
    tr = benchmark.pedantic(run, rounds=5, iterations=1)
    assert tr.status == "completed"
    record(benchmark, work=steps, unit="iteration", ref=f"test_bench_large_batch_map_staircase_numpy_mc[{act}]")
    Qmc, Mmc = numpy_map_step_target(ov, tgt, act)
    scale = max(np.abs(tr.Q[1] - ov.Q).max(), np.abs(tr.M[1] - ov.M).max())
    err = max(np.abs(Qmc - tr.Q[1]).max(), np.abs(Mmc - tr.M[1]).max())
    benchmark.extra_info["mc_1e5_max_abs_error"] = float(err)
    benchmark.extra_info["mc_1e5_error_rel_to_step"] = float(err / scale)


@pytest.mark.quick
@pytest.mark.benchmark(group="large_batch_target")
@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_bench_large_batch_map_staircase_numpy_mc(benchmark, record, act):
    ov, tgt = _staircase_map_system(act)
    benchmark.pedantic(numpy_map_step_target, args=(ov, tgt, act), rounds=5, iterations=1)
    record(benchmark, work=1, unit="iteration")
