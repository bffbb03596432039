"""The ODE batch a GPU user would write in JAX (``vmap`` + ``jit``, float64): the side-by-side reference of the GPU
benchmarks. Saad and Solla's online-SGD equations for erf committees (student a fixed, no output noise):

    dM_ir = lr a_i sum_c w_c I3(i, r, c),    w = (-a, v), E = sum_c w_c g(l_c),
    dQ_ik = lr [a_i sum_c w_c I3(i, k, c) + a_k sum_c w_c I3(k, i, c)] + lr^2 a_i a_k sum_cd w_c w_d I4(i, k, c, d),
    I3(i, j, c) = (2/pi) (C_jc (1 + C_ii) - C_ij C_ic) / ((1 + C_ii) sqrt(L3)), L3 = (1 + C_ii)(1 + C_cc) - C_ic^2,
    I4 = (4/pi^2) asin(l0 / sqrt(l1 l2)) / sqrt(L4)   (bench/references.py erf_i4_numpy),

explicit Euler with records every ``every`` steps. Checked against twolayer's own batch on the CPU in
tests/test_gpu_ode.py.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np


@functools.cache
def _compiled(lr: float, dt: float, steps: int, every: int) -> Any:
    """The jitted ``vmap`` of one member's run, built once per (lr, dt, steps, every): a new closure per call would
    be traced and compiled by XLA again at every call (seconds), which the benchmark would then time."""
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)

    def rhs(Qm: Any, Mm: Any, am: Any, Pj: Any, vj: Any) -> tuple[Any, Any]:
        K = Qm.shape[0]
        C = jnp.block([[Qm, Mm], [Mm.T, Pj]])
        w = jnp.concatenate([-am, vj])
        d = 1.0 + jnp.diag(C)
        Ci = C[:K]                                                    # (K, u): C_ij, i student
        L3 = d[:K, None] * d[None, :] - Ci**2                         # (K, u) over (i, c)
        i3 = (2 / jnp.pi) * (C[None, :, :] * d[:K, None, None] - Ci[:, :, None] * Ci[:, None, :]) / (
            d[:K, None, None] * jnp.sqrt(L3)[:, None, :])             # (i, j, c)
        psi = i3 @ w                                                  # (K, u): E[g'(l_i) l_j E]
        L4 = d[:K, None] * d[None, :K] - Ci[:, :K] ** 2               # (i, k)
        Cik = Ci[:, :K][:, :, None, None]
        Cic, Ckc = Ci[:, None, :, None], Ci[None, :, :, None]
        Cid, Ckd = Ci[:, None, None, :], Ci[None, :, None, :]
        di, dk = d[:K, None, None, None], d[None, :K, None, None]
        L4e = L4[:, :, None, None]
        l0 = L4e * C[None, None] - Ckc * Ckd * di - Cic * Cid * dk + Cik * Cic * Ckd + Cik * Ckc * Cid
        l1 = L4e * d[None, None, :, None] - Ckc**2 * di - Cic**2 * dk + 2 * Cik * Cic * Ckc
        l2 = L4e * d[None, None, None, :] - Ckd**2 * di - Cid**2 * dk + 2 * Cik * Cid * Ckd
        i4 = 4 / jnp.pi**2 / jnp.sqrt(L4e) * jnp.arcsin(l0 / jnp.sqrt(l1 * l2))
        quad = jnp.einsum("ikcd,c,d->ik", i4, w, w)
        first = am[:, None] * psi[:, :K]
        dQ = lr * (first + first.T) + lr**2 * am[:, None] * am[None, :] * quad
        dM = lr * am[:, None] * psi[:, K:]
        return dQ, dM

    def run(Qm: Any, Mm: Any, am: Any, Pj: Any, vj: Any) -> tuple[Any, Any]:
        def block(carry: Any, _: Any) -> tuple[Any, Any]:
            def step(_: int, s: Any) -> Any:
                dQ, dM = rhs(s[0], s[1], am, Pj, vj)
                return s[0] + dt * dQ, s[1] + dt * dM
            out = jax.lax.fori_loop(0, every, step, carry)
            return out, out
        _, recs = jax.lax.scan(block, (Qm, Mm), None, length=steps // every)
        return jnp.concatenate([Qm[None], recs[0]]), jnp.concatenate([Mm[None], recs[1]])

    return jax.jit(jax.vmap(run, in_axes=(0, 0, 0, None, None)))


def erf_euler_batch(Q: np.ndarray, M: np.ndarray, a: np.ndarray, P: np.ndarray, v: np.ndarray, lr: float,
                    dt: float, steps: int, every: int) -> tuple[Any, Any]:
    """(Q, M) records at steps 0, every, 2 every, ... of B members (Q (B, K, K), M (B, K, M), a (B, K), shared
    P (M, M) and v (M,)), computed with JAX on its default device in float64; returns JAX arrays. The first call
    of a shape compiles; later ones reuse the compiled function (as a user's script would)."""
    import jax.numpy as jnp

    fn = _compiled(float(lr), float(dt), int(steps), int(every))
    return fn(jnp.asarray(Q), jnp.asarray(M), jnp.asarray(a), jnp.asarray(P), jnp.asarray(v))
