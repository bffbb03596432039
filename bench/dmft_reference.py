"""Straightforward NumPy DMFT of full-batch GD (the reference of bench/test_bench_dmft.py and the prototype the
equations were first checked with). Same equations and algorithm as twolayer.dmft.solve (docs/layers/dmft.rst),
vectorised over the S samples with NumPy, Python loops over the (t, s) blocks.

Inputs: fixed readout a (p,), activation, z (S, k) and y (S,) training draws (labels with noise), test draws
z_test (S, k), y_test (S,), zeta_test (S, p), M0 (p, k), C0 = Q0 - M0 M0^T, lr, ridge, alpha, n_steps, rng.
Returns dict of M (T+1, p, k), Q, train_risk, test_risk, Ctheta, Rtheta, Cg, Rg.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from twolayer.activations import derivative as dsigma
from twolayer.activations import sigma


def _psd_sqrt(A: np.ndarray) -> np.ndarray:
    w, V = np.linalg.eigh(0.5 * (A + A.T))
    return np.asarray(V * np.sqrt(np.clip(w, 0.0, None)))


def dmft_numpy(a: np.ndarray, act: str, z: np.ndarray, y: np.ndarray, z_test: np.ndarray, y_test: np.ndarray,
               zeta_test: np.ndarray, M0: np.ndarray, C0: np.ndarray, lr: float, ridge: float, alpha: float,
               n_steps: int, rng: np.random.Generator) -> dict[str, Any]:
    S, p = z.shape[0], len(a)
    T = n_steps
    eta, lam = lr, ridge
    I = np.eye(p)
    K = np.zeros((T + 2, T + 2, p, p))  # K[t, s]: d theta^t / d theta^s (propagator), s <= t
    Ct = np.zeros((T + 1, T + 1, p, p))  # C_theta
    Cg = np.zeros((T + 1, T + 1, p, p))
    Rg = np.zeros((T + 1, T + 1, p, p))
    L = np.zeros((T + 1, T + 1, p, p))  # Cholesky blocks of C_theta
    zeta = np.zeros((T + 1, S, p))
    g = np.zeros((T + 1, S, p))
    M = np.zeros((T + 1, p, M0.shape[1]))
    Q = np.zeros((T + 1, p, p))
    tr = np.zeros(T + 1)
    te = np.zeros(T + 1)
    M[0] = M0
    K[0, 0] = I
    Ct[0, 0] = C0
    for t in range(T + 1):
        # Cholesky row t of C_theta(0..t, 0..t)
        for s in range(t):
            acc = Ct[t, s] - sum(L[t, u] @ L[s, u].T for u in range(s))
            L[t, s] = acc @ np.linalg.pinv(L[s, s].T)
        L[t, t] = _psd_sqrt(Ct[t, t] - sum(L[t, u] @ L[t, u].T for u in range(t)))
        zeta[t] = rng.standard_normal((S, p))
        h = z @ M[t].T
        for s in range(t + 1):
            h = h + zeta[s] @ L[t, s].T
        for s in range(t):
            h = h + g[s] @ ((eta / alpha) * K[t, s + 1]).T
        E = y - sigma(act, h) @ a
        g[t] = a * dsigma(act, h) * E[:, None]
        tr[t] = 0.5 * np.mean(E * E)
        Q[t] = M[t] @ M[t].T + Ct[t, t]
        ht = z_test @ M[t].T + zeta_test @ _psd_sqrt(Ct[t, t]).T
        te[t] = 0.5 * np.mean((y_test - sigma(act, ht) @ a) ** 2)
        if t == T:
            break
        for s in range(t + 1):
            Cg[t, s] = g[t].T @ g[s] / S
            Cg[s, t] = Cg[t, s].T
        Eg = [g[t].T @ zeta[s] / S for s in range(t + 1)]  # E[g^t zeta^s^T] = sum_u Rg(t,u) L(u,s)
        for s in range(t, -1, -1):
            acc = Eg[s] - sum(Rg[t, u] @ L[u, s] for u in range(s + 1, t + 1))
            Rg[t, s] = acc @ np.linalg.pinv(L[s, s])
        M[t + 1] = (1 - eta * lam) * M[t] + eta * (g[t].T @ z) / S
        K[t + 1, t + 1] = I
        for s in range(t + 1):
            K[t + 1, s] = (1 - eta * lam) * K[t, s] + eta * sum(Rg[t, u] @ K[u, s] for u in range(s, t + 1))
        for tp in range(t + 1):
            Ct[t + 1, tp] = ((1 - eta * lam) * Ct[t, tp] + eta * sum(Rg[t, u] @ Ct[u, tp] for u in range(t + 1))
                             + eta * eta / alpha
                             * sum((Cg[t, s] @ K[tp, s + 1].T for s in range(tp)), np.zeros((p, p))))
            Ct[tp, t + 1] = Ct[t + 1, tp].T
        Ct[t + 1, t + 1] = ((1 - eta * lam) * Ct[t, t + 1] + eta * sum(Rg[t, u] @ Ct[u, t + 1] for u in range(t + 1))
                            + eta * eta / alpha * sum(Cg[t, s] @ K[t + 1, s + 1].T for s in range(t + 1)))
        Ct[t + 1, t + 1] = 0.5 * (Ct[t + 1, t + 1] + Ct[t + 1, t + 1].T)
    Rt = np.zeros((T + 1, T + 1, p, p))
    for t in range(T + 1):
        for s in range(t):
            Rt[t, s] = (eta / alpha) * K[t, s + 1]
    return {"M": M, "Q": Q, "train_risk": tr, "test_risk": te, "Ctheta": Ct, "Rtheta": Rt, "Cg": Cg, "Rg": Rg}
