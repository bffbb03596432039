"""Benchmarks of the order-parameter ODE with a polynomial target (run: python -m pytest
bench/test_bench_targets.py --benchmark-only -s).

Online right-hand side for the staircase z1 + z1 z2 + z1 z2 z3 (k = 3) and a K = 4 relu, erf or tanh student:
the exact core RHS (Gaussian conditioning + closed-form orthant moments, target.hpp) against what peers do
today, a NumPy Monte Carlo estimate of the same right-hand side from 10^5 samples of (l, z) ~ N(0, Omega).
``extra_info`` records RHS/s of each, and the accuracy of the Monte Carlo estimate against the exact RHS
(max |error| over the entries of dQ, dM, relative to max |RHS|); the exact RHS is checked to rounding against the
committee kernels and to 1e-10 against quadrature in tests/test_targets.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from scipy.special import erf
from twolayer import _core

LR = 0.5
N_MC = 100_000


def staircase_system(act: str):
    d = 64
    tgt = tl.targets.staircase(3, d=d, seed=0)
    st = tl.Network.random(4, d, act, init="orthogonal", seed=1)
    st = st.with_weights(0.8 * st.W + 0.3 * tgt.directions[[0, 1, 2, 0]], np.array([0.6, 0.5, -0.4, 0.3]))
    return tl.Overlaps.from_networks(st, tgt), tgt


def numpy_mc_rhs(ov, tgt, act, n=N_MC, seed=0):
    """Online RHS (dQ, dM) by Monte Carlo: samples of (l, z) ~ N(0, Omega), E = f(z) - sum_j a_j g(l_j)."""
    K = ov.K
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, K + tgt.k)) @ np.linalg.cholesky(ov.omega).T
    lam, z = X[:, :K], X[:, K:]
    if act == "relu":
        g, dg = np.maximum(lam, 0), (lam > 0) * 1.0
    elif act == "tanh":
        g = np.tanh(lam)
        dg = 1.0 - g**2
    else:
        g, dg = erf(lam / np.sqrt(2)), np.sqrt(2 / np.pi) * np.exp(-lam**2 / 2)
    E = tgt.function(z) - g @ ov.a
    A = dg * E[:, None] * ov.a[None, :]  # a_i g'(l_i) E
    dM = LR * A.T @ z / n
    psi = A.T @ lam / n
    B = dg * ov.a[None, :] * E[:, None]
    dQ = LR * (psi + psi.T) + LR**2 * (B.T @ B) / n
    return dQ, dM


@pytest.mark.quick
@pytest.mark.benchmark(group="target-rhs")
@pytest.mark.parametrize("act", ["relu", "erf", "tanh"])
def test_bench_target_rhs_exact(benchmark, record, act):
    """The exact core RHS (one unit of work: one RHS), with the Monte Carlo estimate's accuracy against it; tanh by
    the certified quadrature of the smooth moments (one thread)."""
    ov, tgt = staircase_system(act)
    alpha, coef = tgt._arrays()
    evals = 20 if act != "tanh" else 1
    out = benchmark(_core.ode_rhs_target, ov.Q, ov.M, ov.a, alpha, coef, act, "online", False, LR, 0.0, 0.0, evals)
    exact_dQ, exact_dM = out[0], out[1]
    dQ, dM = numpy_mc_rhs(ov, tgt, act)
    err = max(np.max(np.abs(dQ - exact_dQ)), np.max(np.abs(dM - exact_dM)))
    scale = max(np.max(np.abs(exact_dQ)), np.max(np.abs(exact_dM)))
    # the exact RHS's own accuracy: against the committee kernels / quadrature to <= 1e-10 (tests/test_targets.py)
    record(benchmark, work=evals, unit="RHS", ref=f"test_bench_target_rhs_numpy_mc[{act}]",
           exact_rel_error="<= 1e-10 (tests/test_targets.py: quadrature, committee kernels)",
           mc_1e5_max_abs_error=float(err), mc_1e5_rel_error=float(err / scale))


@pytest.mark.quick
@pytest.mark.benchmark(group="target-rhs")
@pytest.mark.parametrize("act", ["relu", "erf", "tanh"])
def test_bench_target_rhs_numpy_mc(benchmark, record, act):
    """What peers do today: a NumPy Monte Carlo estimate of the same RHS from 10^5 samples."""
    ov, tgt = staircase_system(act)
    alpha, coef = tgt._arrays()
    exact = _core.ode_rhs_target(ov.Q, ov.M, ov.a, alpha, coef, act, "online", False, LR, 0.0, 0.0, 1)
    dQ, dM = benchmark(numpy_mc_rhs, ov, tgt, act)
    err = max(np.max(np.abs(dQ - exact[0])), np.max(np.abs(dM - exact[1])))
    record(benchmark, work=1, unit="RHS", mc_1e5_max_abs_error=float(err),
           mc_1e5_rel_error=float(err / max(np.max(np.abs(exact[0])), np.max(np.abs(exact[1])))))
