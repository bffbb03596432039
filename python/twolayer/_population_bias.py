"""Population risk and gradient of committees with biases, lambda_i = w_i . x / sqrt(s) + b_i (issue 23).

With pre-activations lambda ~ N(b, C) the risk is R = 1/2 sum_ik a_i a_k E[s(l_i) s(l_k)] - sum_ir a_i v_r
E[s(l_i) s*(l*_r)] + 1/2 sum_rt v_r v_t E[s*(l*_r) s*(l*_t)] (effective readouts), each term a kernel with means
(:mod:`twolayer.kernels`, ``mean=``). Stein's lemma on x gives the gradient:

    dR/dw_i = a_i / s [E[(f - y) s''(l_i)] w_i + sum_k a_k E[s'(l_i) s'(l_k)] w_k
                       - sum_r v_r E[s'(l_i) s*'(l*_r)] w*_r]
    dR/db_i = a_i E[(f - y) s'(l_i)],        dR/da_i = c E[(f - y) s(l_i)]   (c the readout factor),

every expectation a pair moment E[f^(i)(l1) g^(j)(l2)] of the core (gaussian_mean.hpp; relu'' a delta, integrated
out exactly). Used by :mod:`twolayer.population` when either network has a nonzero bias.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from . import _core
from .networks import Network
from .overlaps import gram


def _blocks(student: Network, teacher: Network) -> tuple[NDArray[np.float64], ...]:
    s = student.scale
    Q = gram(student.W, student.W, s, "student.W")
    R = gram(student.W, teacher.W, s, "student.W, teacher.W")
    T = gram(teacher.W, teacher.W, s, "teacher.W")
    return Q, R, T


def _pairs(d1: NDArray[np.float64], d2: NDArray[np.float64], X: NDArray[np.float64], b1: NDArray[np.float64],
           b2: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Covariances (n1 n2, 2, 2) and means (n1 n2, 2) of the unit pairs (i, k): [[d1_i, X_ik], [X_ik, d2_k]]."""
    n1, n2 = X.shape
    C = np.empty((n1, n2, 2, 2))
    C[..., 0, 0] = d1[:, None]
    C[..., 0, 1] = C[..., 1, 0] = X
    C[..., 1, 1] = d2[None, :]
    mu = np.empty((n1, n2, 2))
    mu[..., 0] = b1[:, None]
    mu[..., 1] = b2[None, :]
    return C.reshape(-1, 2, 2), mu.reshape(-1, 2)


def _moment(act_a: str, i: int, act_b: str, j: int, C: NDArray[np.float64], mu: NDArray[np.float64],
            shape: tuple[int, int]) -> NDArray[np.float64]:
    return np.asarray(_core.pair_moment(act_a, i, act_b, j, mu, C)).reshape(shape)


def _check_activations(student: Network) -> None:
    if student.activation == "step":
        raise NotImplementedError("student.bias: the population gradient of step students with biases is not "
                                  "implemented (E[delta'(l) step(l)] of a unit with itself)")


def risk(student: Network, teacher: Network) -> float:
    """The excess population risk with biases (see the module docstring)."""
    Q, R, T = _blocks(student, teacher)
    q, t = np.diag(Q), np.diag(T)
    ea, v = student.effective_a, teacher.effective_a
    out = 0.0
    for X, d1, d2, b1, b2, w1, w2, s1, s2, sign in (
        (Q, q, q, student.bias, student.bias, ea, ea, student.activation, student.activation, 0.5),
        (R, q, t, student.bias, teacher.bias, ea, v, student.activation, teacher.activation, -1.0),
        (T, t, t, teacher.bias, teacher.bias, v, v, teacher.activation, teacher.activation, 0.5),
    ):
        C, mu = _pairs(d1, d2, X, b1, b2)
        K = np.asarray(_core.i2_mean(s1, s2, C, mu)).reshape(X.shape)
        out += sign * float(w1 @ K @ w2)
    return out


class _Pairs:
    """The pair blocks of a (student, teacher) pair: covariances and means of (student, student) and
    (student, teacher) unit pairs, and their pair moments."""

    def __init__(self, student: Network, teacher: Network) -> None:
        _check_activations(student)
        Q, R, T = _blocks(student, teacher)
        q, t = np.diag(Q), np.diag(T)
        self.sa, self.ta = student.activation, teacher.activation
        self.Cs, self.ms = _pairs(q, q, Q, student.bias, student.bias)
        self.Ct, self.mt = _pairs(q, t, R, student.bias, teacher.bias)
        self.ks, self.kt = Q.shape, R.shape
        self.ea, self.v = student.effective_a, teacher.effective_a

    def residual(self, n: int) -> NDArray[np.float64]:
        """E[(f - y) s^(n)(l_i)] per student unit i."""
        return (_moment(self.sa, n, self.sa, 0, self.Cs, self.ms, self.ks) @ self.ea
                - _moment(self.sa, n, self.ta, 0, self.Ct, self.mt, self.kt) @ self.v)


def bias_gradient(student: Network, teacher: Network) -> NDArray[np.float64]:
    """dR/db (see the module docstring)."""
    return student.effective_a * _Pairs(student, teacher).residual(1)


def gradient(student: Network, teacher: Network) -> tuple[NDArray[np.float64], NDArray[np.float64],
                                                         NDArray[np.float64]]:
    """(dR/dW, dR/da, dR/db) with biases (see the module docstring)."""
    p = _Pairs(student, teacher)
    ea, v, s = p.ea, p.v, student.scale
    D11s = _moment(p.sa, 1, p.sa, 1, p.Cs, p.ms, p.ks)
    D11t = _moment(p.sa, 1, p.ta, 1, p.Ct, p.mt, p.kt)
    dW = ea[:, None] / s * (p.residual(2)[:, None] * student.W + (D11s * ea[None, :]) @ student.W
                            - (D11t * v[None, :]) @ teacher.W)
    return dW, student.readout_factor * p.residual(0), ea * p.residual(1)
