"""A naive reference right-hand side built from the public kernels (tl.kernels.i2/i3/i4/j2), term by term
exactly as in DESIGN.md §3, for checking the C++ assembly (which shares I2 gradients and conditions I4 per
pair)."""

from __future__ import annotations

import numpy as np
import twolayer as tl


def naive_rhs(ov, act, t_act, lr, lr_readout=0.0, noise=0.0, regime="online", spherical=False):
    K, M = ov.K, ov.n_teacher
    u = K + M
    Om = ov.omega
    acts = [act] * K + [t_act] * M
    w = np.concatenate([-ov.a, ov.v])
    a = ov.a

    def sub(idx):
        return Om[np.ix_(idx, idx)]

    def psi(i, c):  # E[g'(l_i) l_c E]
        return sum(w[q] * tl.kernels.i3(act, acts[q], sub([i, c, q])) for q in range(u))

    def quad(i, k):  # E[g'(l_i) g'(l_k) E^2] + noise J2
        s = 0.0
        for j in range(u):
            for l in range(u):
                s += w[j] * w[l] * tl.kernels.i4(act, acts[j], acts[l], sub([i, k, j, l]))
        return s + noise * tl.kernels.j2(act, sub([i, k]))

    dM = np.array([[lr * a[i] * psi(i, K + r) for r in range(M)] for i in range(K)])
    phi = np.zeros((K, K))
    for i in range(K):
        for k in range(K):
            phi[i, k] = lr * (a[i] * psi(i, k) + a[k] * psi(k, i))
            if regime == "online":
                phi[i, k] += lr**2 * a[i] * a[k] * quad(i, k)
    dQ = phi.copy()
    if spherical:
        d = np.diag(phi)
        dQ = phi - 0.5 * ov.Q * (d[:, None] + d[None, :])
        np.fill_diagonal(dQ, 0.0)
        dM = dM - 0.5 * ov.M * d[:, None]
    da = np.array(
        [
            lr_readout * sum(w[q] * tl.kernels.i2(act, acts[q], sub([i, q])) for q in range(u))
            for i in range(K)
        ]
    )
    return dQ, dM, da
