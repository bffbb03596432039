"""The Python path that the C++ core replaced for the population gradient and descent with biases (issue 23):
Stein's lemma over the core's pair moments (``_core.pair_moment``), vectorised with NumPy, and its per-step loop.
A reference for tests and benchmarks only."""

from __future__ import annotations

import numpy as np
import twolayer as tl
from numpy.typing import NDArray
from twolayer import _core

_F = NDArray[np.float64]


def _pairs(d1: _F, d2: _F, X: _F, b1: _F, b2: _F) -> tuple[_F, _F]:
    n1, n2 = X.shape
    C = np.empty((n1, n2, 2, 2))
    C[..., 0, 0] = d1[:, None]
    C[..., 0, 1] = C[..., 1, 0] = X
    C[..., 1, 1] = d2[None, :]
    mu = np.empty((n1, n2, 2))
    mu[..., 0] = b1[:, None]
    mu[..., 1] = b2[None, :]
    return C.reshape(-1, 2, 2), mu.reshape(-1, 2)


def gradient(student: tl.Network, teacher: tl.Network) -> tuple[_F, _F, _F]:
    """(dR/dW, dR/da, dR/db) with biases: dR/dw_i = a_i / s [rho2_i w_i + sum_k a_k S11[i, k] w_k
    - sum_r v_r T11[i, r] w*_r], dR/da_i = c rho0_i, dR/db_i = a_i rho1_i (effective readouts)."""
    s = student.scale
    Q, R = student.W @ student.W.T / s, student.W @ teacher.W.T / s
    q, t = np.diag(Q), np.einsum("ij,ij->i", teacher.W, teacher.W) / s
    Cs, ms = _pairs(q, q, Q, student.bias, student.bias)
    Ct, mt = _pairs(q, t, R, student.bias, teacher.bias)
    sa, ta, ea, v = student.activation, teacher.activation, student.effective_a, teacher.effective_a

    def mom(b: str, i: int, j: int, C: _F, mu: _F, shape: tuple[int, int]) -> _F:
        return np.asarray(_core.pair_moment(sa, i, b, j, mu, C)).reshape(shape)

    def residual(n: int) -> _F:
        return mom(sa, n, 0, Cs, ms, Q.shape) @ ea - mom(ta, n, 0, Ct, mt, R.shape) @ v

    D11s, D11t = mom(sa, 1, 1, Cs, ms, Q.shape), mom(ta, 1, 1, Ct, mt, R.shape)
    dW = ea[:, None] / s * (residual(2)[:, None] * student.W + (D11s * ea[None, :]) @ student.W
                            - (D11t * v[None, :]) @ teacher.W)
    return dW, student.readout_factor * residual(0), ea * residual(1)


def descend(student: tl.Network, teacher: tl.Network, lr: float, n_steps: int, lr_readout: float,
            lr_bias: float) -> tl.Network:
    """The former Python loop of ``population.descend(lr_bias > 0)``: W, a, b stepped together; the final student."""
    W, a, b = student.W.copy(), student.a.copy(), student.bias.copy()
    for _ in range(n_steps):
        dW, da, db = gradient(student.with_weights(W, a, bias=b), teacher)
        W, a, b = W - lr * dW, a - lr_readout * da, b - lr_bias * db
    return student.with_weights(W, a, bias=b)
