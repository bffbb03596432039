"""Population risk, gradient and Hessian of committees with biases, lambda_i = w_i . x / sqrt(s) + b_i (issue 23).

With pre-activations lambda ~ N(b, C) the risk is R = 1/2 sum_ik a_i a_k E[s(l_i) s(l_k)] - sum_ir a_i v_r
E[s(l_i) s*(l*_r)] + 1/2 sum_rt v_r v_t E[s*(l*_r) s*(l*_t)] (effective readouts), each term a kernel with means
(the core's overlap_risk_mean, which SGD records too). Stein's lemma on x gives the gradient:

    dR/dw_i = a_i / s [E[(f - y) s''(l_i)] w_i + sum_k a_k E[s'(l_i) s'(l_k)] w_k
                       - sum_r v_r E[s'(l_i) s*'(l*_r)] w*_r]
    dR/db_i = a_i E[(f - y) s'(l_i)],        dR/da_i = c E[(f - y) s(l_i)]   (c the readout factor),

every expectation a pair moment E[f^(i)(l1) g^(j)(l2)] of the core (gaussian_mean.hpp; relu'' a delta, integrated
out exactly), and the Hessian (:func:`hessian`) likewise with orders i + j <= 4. Used by :mod:`twolayer.population`
when either network has a nonzero bias (or ``train_bias``).
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
    """The excess population risk with biases (see the module docstring; the core's overlap_risk_mean, which SGD
    records)."""
    Q, R, T = _blocks(student, teacher)
    return float(_core.overlap_risk_mean(Q, R, T, student.effective_a, teacher.effective_a, student.bias,
                                         teacher.bias, student.activation, teacher.activation))


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


def _self_moments(act: str, q: NDArray[np.float64], b: NDArray[np.float64]) -> dict[str, NDArray[np.float64]]:
    """The one-unit expectations of the Hessian's self pairs (i, i), l ~ N(b_i, q_i), products combined first:
    d1 = E[(s'^2)'], d2 = E[(s'^2)''], r1 = E[(s s'')'], r2 = E[(s s'')'']. Smooth s: pair moments at the singular
    covariance; relu: s'^2 = step and s s'' = relu delta = 0, so d1 = E[delta(l)], d2 = E[delta'(l)] (pair moments
    against a linear unit's derivative 1) and r1 = r2 = 0."""
    K = q.size
    if act == "relu":
        C = np.zeros((K, 2, 2))
        C[:, 0, 0], C[:, 1, 1] = q, 1.0
        mu = np.stack([b, np.zeros(K)], axis=1)
        zero = np.zeros(K)
        return {"d1": np.asarray(_core.pair_moment("relu", 2, "linear", 1, mu, C)),
                "d2": np.asarray(_core.pair_moment("relu", 3, "linear", 1, mu, C)), "r1": zero, "r2": zero}
    C = np.broadcast_to(q[:, None, None], (K, 2, 2)).copy()
    mu = np.stack([b, b], axis=1)

    def m(i: int, j: int) -> NDArray[np.float64]:
        return np.asarray(_core.pair_moment(act, i, act, j, mu, C))

    m21, m22, m31 = m(2, 1), m(2, 2), m(3, 1)
    return {"d1": 2.0 * m21, "d2": 2.0 * (m22 + m31), "r1": m21 + m(3, 0), "r2": m22 + 2.0 * m31 + m(4, 0)}


def hessian(student: Network, teacher: Network, train_readout: bool, train_bias: bool) -> NDArray[np.float64]:
    """The Hessian with biases on [vec(W) row-major, a (train_readout), b (train_bias)].

    With u_i = w_i / sqrt(s), E = f - y, rho_n_i = E[E s^(n)(l_i)], S_pq[i, k] = E[s^(p)(l_i) s^(q)(l_k)] and
    T_pq[i, r] = E[s^(p)(l_i) s*^(q)(l*_r)] (pair moments, p + q <= 4), H = E[grad f grad f^T] + E[E hess f] with
    E[g x] = sum_p E[d_p g] u_p and E[g x x^T] = E[g] I + sum_pq E[d_p d_q g] u_p u_q^T (Stein):

        H_{w_i w_k} = ea_i ea_k / s (S11 I + S31 u_i u_i^T + S22 (u_i u_k^T + u_k u_i^T) + S13 u_k u_k^T)[i, k]
                      + delta_ik ea_i / s (rho2_i I + U^T diag(ea S22[i]) U - U*^T diag(v T22[i]) U*
                                           + z_i u_i^T + u_i z_i^T + rho4_i u_i u_i^T),
            z_i = U^T (ea S31[i]) - U*^T (v T31[i]),
        H_{b_i w_k} = ea_i ea_k / sqrt(s) (S21 u_i + S12 u_k)[i, k]
                      + delta_ik ea_i / sqrt(s) (U^T (ea S21[i]) - U*^T (v T21[i]) + rho3_i u_i),
        H_{a_i w_k} = c ea_k / sqrt(s) (S11 u_i + S02 u_k)[i, k]
                      + delta_ik c / sqrt(s) (U^T (ea S11[i]) - U*^T (v T11[i]) + rho2_i u_i),
        H_{b_i b_k} = ea_i ea_k S11[i, k] + delta_ik ea_i rho2_i,    H_{a_i b_k} = c ea_k S01[i, k] + delta_ik c rho1_i,
        H_{a_i a_k} = c^2 S00[i, k].

    In the W and b rows the self pairs (i, i) of the moments of order 3 and 4 are taken together as one unit's
    expectations (:func:`_self_moments`: relu's deltas at one variable are then well defined); step students (a
    delta' at one variable) are refused."""
    if student.activation == "step":
        raise NotImplementedError("student.bias: the population Hessian of step students with biases is not "
                                  "implemented (products of deltas of a unit with itself)")
    p = _Pairs(student, teacher)
    K, d, s, c = student.K, student.d, student.scale, student.readout_factor
    ea, v = p.ea, p.v
    U, Us = student.W / np.sqrt(s), teacher.W / np.sqrt(s)
    q = np.einsum("ij,ij->i", U, U)
    # the student pairs with each self pair (i, i) decoupled (its entries are replaced below): S*off are off-diagonal
    Cd = p.Cs.reshape(K, K, 2, 2).copy()
    Cd[np.arange(K), np.arange(K), 0, 1] = Cd[np.arange(K), np.arange(K), 1, 0] = 0.0
    Cd = Cd.reshape(-1, 2, 2)

    def S(i: int, j: int) -> NDArray[np.float64]:
        return _moment(p.sa, i, p.sa, j, p.Cs, p.ms, p.ks)

    def Soff(i: int, j: int) -> NDArray[np.float64]:
        out = _moment(p.sa, i, p.sa, j, Cd, p.ms, p.ks)
        np.fill_diagonal(out, 0.0)
        return out

    def T(i: int, j: int) -> NDArray[np.float64]:
        return _moment(p.sa, i, p.ta, j, p.Ct, p.mt, p.kt)

    def field(Ss: NDArray[np.float64], Tt: NDArray[np.float64]) -> NDArray[np.float64]:
        """Rows i: U^T (ea Ss[i]) - U*^T (v Tt[i])."""
        return (Ss * ea[None, :]) @ U - (Tt * v[None, :]) @ Us

    own = _self_moments(p.sa, q, student.bias)
    rho1, rho2 = p.residual(1), p.residual(2)
    S11, S02, S00 = S(1, 1), S(0, 2), S(0, 0)
    S21, S31, S22 = Soff(2, 1), Soff(3, 1), Soff(2, 2)
    rho3 = Soff(3, 0) @ ea - T(3, 0) @ v  # without the self pair (in own["r1"], own["r2"])
    rho4 = Soff(4, 0) @ ea - T(4, 0) @ v
    z = field(S31, T(3, 1))
    T22 = T(2, 2)
    HW = np.zeros((K, d, K, d))
    for i in range(K):
        for k in range(K):
            ui, uk = U[i], U[k]
            blk = (S11[i, k] * np.eye(d) + S31[i, k] * np.outer(ui, ui) + S31[k, i] * np.outer(uk, uk)
                   + S22[i, k] * (np.outer(ui, uk) + np.outer(uk, ui)))
            HW[i, :, k, :] = ea[i] * ea[k] / s * blk
    for i in range(K):
        ui = U[i]
        res = (rho2[i] * np.eye(d) + (U.T * (ea * S22[i])) @ U - (Us.T * (v * T22[i])) @ Us
               + np.outer(z[i], ui) + np.outer(ui, z[i]) + (rho4[i] + ea[i] * own["r2"][i]) * np.outer(ui, ui))
        HW[i, :, i, :] += ea[i] / s * (res + ea[i] * own["d2"][i] * np.outer(ui, ui))
    rows: list[tuple[str, NDArray[np.float64]]] = []  # (name, cross block with W: (K, K d))
    diag = np.arange(K)
    if train_readout:
        AW = (c * ea[None, :, None] / np.sqrt(s)) * (S11[:, :, None] * U[:, None, :] + S02[:, :, None] * U[None, :, :])
        AW[diag, diag] += c / np.sqrt(s) * (field(S11, T(1, 1)) + rho2[:, None] * U)
        rows.append(("a", AW.reshape(K, K * d)))
    if train_bias:
        BW = (ea[:, None, None] * ea[None, :, None] / np.sqrt(s)) * (S21[:, :, None] * U[:, None, :]
                                                                    + S21.T[:, :, None] * U[None, :, :])
        BW[diag, diag] += ea[:, None] / np.sqrt(s) * (field(S21, T(2, 1)) + (rho3 + ea * own["r1"])[:, None] * U
                                                      + (ea * own["d1"])[:, None] * U)
        rows.append(("b", BW.reshape(K, K * d)))
    small = {
        ("a", "a"): c * c * S00,
        ("a", "b"): c * ea[None, :] * S(0, 1) + np.diag(c * rho1),
        ("b", "b"): ea[:, None] * ea[None, :] * S11 + np.diag(ea * rho2),
    }
    n = K * d + K * len(rows)
    H = np.empty((n, n))
    H[: K * d, : K * d] = HW.reshape(K * d, K * d)
    for j, (name, cross) in enumerate(rows):
        sl = slice(K * d + j * K, K * d + (j + 1) * K)
        H[sl, : K * d] = cross
        H[: K * d, sl] = cross.T
        for jj, (other, _) in enumerate(rows):
            key = (name, other)
            H[sl, K * d + jj * K: K * d + (jj + 1) * K] = small[key] if key in small else small[(other, name)].T
    return 0.5 * (H + H.T)
