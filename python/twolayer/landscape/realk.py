"""Families of critical points at real k (the "fractional dimension" of Arjevani & Field 2021).

For the Safran-Shamir problem (teacher W* = I_k, relu, lambda = w.x, unit second layers) restricted to the
fixed-point space of a Young subgroup Δ(S_n1 × ... × S_nr) (consecutive blocks, as in
:class:`~twolayer.landscape.FixedPointSpace`), every overlap is a polynomial in the block sizes, so the
restricted risk is an analytic function of real sizes. Its Hessian in the subspace coordinates x is B^T H B,
whose generalised eigenvalues against the metric G = B^T B (the number of matrix entries carried by each
coordinate) are eigenvalues of the full Hessian at integer sizes.

At a ΔS_{k-1} point, the space of the smaller group Δ(S_{k-2} × S_1 × S_1) carries the 5
trivial-representation eigenvalues and the 5 eigenvalues of the standard representation of S_{k-1}
(multiplicity k - 2 in the full spectrum); continuing both in real k locates where the family turns from
saddle into minimum. (Only this component is continued: it carries the negative eigenvalues below the turn,
index k - 2 = 3 at k = 5; the exterior-square and (n-2, 2) components are not.)
Kernels are tl.kernels.i2; derivatives are central finite differences of the restricted risk (accuracy ~1e-7
for the Hessian, enough to locate sign changes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import kernels
from .._validation import as_float_array, real

__all__ = ["reduced_risk", "reduced_layout", "RealKFamily", "continue_real_k"]


def reduced_layout(sizes: ArrayLike) -> list[tuple[str, int, int]]:
    """The coordinates of the Young fixed-point space with (real) block sizes.

    Parameters
    ----------
    sizes : array_like, shape (r,)
        Block sizes n_b (real allowed).

    Returns
    -------
    list of (str, int, int)
        ("diag", b, b), ("off", b, b) when n_b > 1, ("block", b, c) for
        b != c, in :class:`~twolayer.landscape.FixedPointSpace` order.

    Examples
    --------
    >>> from twolayer.landscape.realk import reduced_layout
    >>> reduced_layout([4.5, 1.0])
    [('diag', 0, 0), ('off', 0, 0), ('diag', 1, 1), ('block', 0, 1), ('block', 1, 0)]
    """
    n = as_float_array(sizes, "sizes", ndim=1)
    out: list[tuple[str, int, int]] = []
    for b in range(n.size):
        out.append(("diag", b, b))
        if n[b] > 1:
            out.append(("off", b, b))
    out += [("block", b, c) for b in range(n.size) for c in range(n.size) if b != c]
    return out


def _unpack(x: NDArray[np.float64], sizes: NDArray[np.float64]):
    r = sizes.size
    diag = np.zeros(r)
    off = np.zeros(r)
    blk = np.zeros((r, r))
    for v, (kind, b, c) in zip(x, reduced_layout(sizes), strict=True):
        if kind == "diag":
            diag[b] = v
        elif kind == "off":
            off[b] = v
        else:
            blk[b, c] = v
    return diag, off, blk


def metric(sizes: ArrayLike) -> NDArray[np.float64]:
    """G = B^T B: the number of matrix entries carried by each coordinate (diagonal)."""
    n = as_float_array(sizes, "sizes", ndim=1)
    w = []
    for kind, b, c in reduced_layout(n):
        w.append(n[b] if kind == "diag" else n[b] * (n[b] - 1) if kind == "off" else n[b] * n[c])
    return np.diag(w)


def reduced_risk(x: ArrayLike, sizes: ArrayLike) -> float:
    """The population risk on a Young fixed-point space, at real block sizes.

    Teacher W* = I_k with k = sum(sizes), relu, lambda = w . x, unit second
    layers; every overlap is a polynomial in the block sizes, so the risk is
    analytic in real sizes.

    Parameters
    ----------
    x : array_like
        Coordinates (see :func:`reduced_layout`).
    sizes : array_like
        Block sizes (real allowed).

    Returns
    -------
    float

    Examples
    --------
    At integer sizes it is the population risk of the matrix:

    >>> x = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]
    >>> print(f"{tl.landscape.reduced_risk(x, [5.0, 1.0]):.6f}")
    0.025081
    >>> W, _ = tl.landscape.FixedPointSpace((5, 1)).matrix(x)
    >>> student = tl.Network(W, None, "relu", scaling="none")
    >>> print(f"{tl.population.risk(student, tl.landscape.identity_teacher(6)):.6f}")
    0.025081
    """
    n = as_float_array(sizes, "sizes", ndim=1)
    x_ = as_float_array(x, "x", ndim=1)
    if x_.size != len(reduced_layout(n)):
        raise ValueError(f"x: expected {len(reduced_layout(n))} coordinates, got {x_.size}")
    al, be, ga = _unpack(x_, n)
    r = n.size
    others = [np.array([c for c in range(r) if c != b], dtype=int) for b in range(r)]
    q = np.array(
        [
            al[b] ** 2 + (n[b] - 1) * be[b] ** 2 + np.sum(n[others[b]] * ga[b, others[b]] ** 2)
            for b in range(r)
        ]
    )
    q_same = np.array(
        [
            2 * al[b] * be[b] + (n[b] - 2) * be[b] ** 2 + np.sum(n[others[b]] * ga[b, others[b]] ** 2)
            for b in range(r)
        ]
    )
    q_cross = np.zeros((r, r))
    for b in range(r):
        for c in range(r):
            if b == c:
                continue
            rest = np.array([e for e in range(r) if e not in (b, c)], dtype=int)
            q_cross[b, c] = (
                ga[c, b] * (al[b] + (n[b] - 1) * be[b])
                + ga[b, c] * (al[c] + (n[c] - 1) * be[c])
                + np.sum(n[rest] * ga[b, rest] * ga[c, rest])
            )
    # pairs (x, y, z, weight) of I2(relu, relu) terms
    terms: list[tuple[float, float, float, float]] = []
    for b in range(r):
        terms.append((q[b], q[b], q[b], 0.5 * n[b]))  # self: E[relu^2] = q / 2 = I2 at C12 = q
        terms.append((q[b], q_same[b], q[b], 0.5 * n[b] * (n[b] - 1)))
        for c in range(r):
            if c != b:
                terms.append((q[b], q_cross[b, c], q[c], 0.5 * n[b] * n[c]))
        terms.append((q[b], al[b], 1.0, -n[b]))  # teacher: own column
        terms.append((q[b], be[b], 1.0, -n[b] * (n[b] - 1)))
        for c in range(r):
            if c != b:
                terms.append((q[b], ga[b, c], 1.0, -n[b] * n[c]))
    T = np.array(terms)
    C = np.stack([np.stack([T[:, 0], T[:, 1]], -1), np.stack([T[:, 1], T[:, 2]], -1)], -2)
    k = float(n.sum())
    return float(T[:, 3] @ kernels.i2("relu", "relu", C)) + 0.5 * (0.5 * k + k * (k - 1) / (2 * np.pi))


def _grad(f, x: NDArray[np.float64], h: float = 1e-6) -> NDArray[np.float64]:
    e = np.eye(x.size) * h
    return np.array([(f(x + e[i]) - f(x - e[i])) / (2 * h) for i in range(x.size)])


def _hess(f, x: NDArray[np.float64], h: float = 1e-4) -> NDArray[np.float64]:
    H = np.array([_grad(f, x + h * ei, 1e-6) - _grad(f, x - h * ei, 1e-6) for ei in np.eye(x.size)]) / (2 * h)
    return 0.5 * (H + H.T)


def _solve(x0: NDArray[np.float64], sizes: NDArray[np.float64], tol: float = 1e-10) -> NDArray[np.float64]:
    from scipy.optimize import root

    def residual(y: NDArray[np.float64]) -> NDArray[np.float64]:
        return _grad(lambda z: reduced_risk(z, sizes), y)

    sol = root(residual, x0, method="hybr", tol=tol)
    # The residual is a finite-difference gradient with noise ~ eps / h ~ 1e-10: hybr may stop on "no good
    # progress" at that noise floor, which is a solution.
    if not sol.success and np.max(np.abs(sol.fun)) <= 1e-8:
        return sol.x
    if not sol.success:
        raise RuntimeError(f"real-k continuation: no critical point found at sizes {sizes} ({sol.message})")
    return sol.x


@dataclass(eq=False)
class RealKFamily:
    """The ΔS_{k-1} family on a grid of real k (what :func:`continue_real_k` returns).

    Attributes
    ----------
    k : ndarray, shape (n,)
        The grid.
    x : ndarray, shape (n, 5)
        Coordinates of the critical point at each k.
    loss : ndarray, shape (n,)
        Its risk.
    trivial, standard : ndarray, shape (n, 5)
        The 5 trivial- and the 5 standard-representation eigenvalues,
        ascending.
    k_turn : float or None
        Where the smallest standard eigenvalue changes sign (None if it does
        not on the grid).

    Examples
    --------
    >>> import dataclasses
    >>> [f.name for f in dataclasses.fields(tl.landscape.RealKFamily)]
    ['k', 'x', 'loss', 'trivial', 'standard', 'k_turn']

    See :func:`continue_real_k` for one computed.
    """

    k: NDArray[np.float64]
    x: NDArray[np.float64]
    loss: NDArray[np.float64]
    trivial: NDArray[np.float64]
    standard: NDArray[np.float64]
    k_turn: float | None


def _split_point(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """ΔS_{k-1} coordinates (5) -> the same matrix in the Δ(S_{k-2} × S_1 × S_1) space (10)."""
    a, b, f, c, e = x
    # blocks 0 (k-2), 1 (1), 2 (1): diag0, off0, diag1, diag2, then blocks (0,1), (0,2), (1,0), (1,2), (2,0),
    # (2,1)
    return np.array([a, b, a, f, b, c, b, c, e, e])


def _eigs(x5: NDArray[np.float64], k: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    from scipy.linalg import eigh

    s2 = np.array([k - 1.0, 1.0])
    s3 = np.array([k - 2.0, 1.0, 1.0])
    triv = eigh(_hess(lambda z: reduced_risk(z, s2), x5), metric(s2), eigvals_only=True)
    both = eigh(_hess(lambda z: reduced_risk(z, s3), _split_point(x5)), metric(s3), eigvals_only=True)
    rest = list(both)
    for t in triv:  # remove the trivial eigenvalues from the larger problem
        rest.pop(int(np.argmin(np.abs(np.array(rest) - t))))
    return np.sort(triv), np.sort(rest)


def continue_real_k(x0: ArrayLike, k0: float, ks: ArrayLike) -> RealKFamily:
    """Continue the ΔS_{k-1} family in real k.

    Solves the restricted system at each k (scipy ``root``), computes the
    trivial and standard-representation eigenvalues, and locates by Brent's
    method the k where the smallest standard eigenvalue changes sign (the
    family turns from saddle into minimum). Needs scipy.

    Parameters
    ----------
    x0 : array_like, shape (5,)
        Coordinates of a critical point at k0 (e.g. from
        :class:`SubspaceProblem`).
    k0 : float
        Its k (> 3).
    ks : array_like
        Real values of k (> 3), monotone from near k0.

    Returns
    -------
    RealKFamily

    Examples
    --------
    The smallest standard-representation eigenvalue at k = 6 is positive
    (a minimum):

    >>> x6 = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]
    >>> fam = tl.landscape.continue_real_k(x6, 6.0, [6.0])
    >>> fam.x.shape, fam.k_turn is None
    ((1, 5), True)
    >>> print(f"{fam.standard[0, 0]:.4f}")
    0.0047
    """
    x0_ = as_float_array(x0, "x0", ndim=1)
    if x0_.shape[0] != 5:
        raise ValueError(f"x0: expected the 5 coordinates of a ΔS_(k-1) point, got {x0_.shape[0]}")
    k0_ = real(k0, "k0")
    ks_ = as_float_array(ks, "ks", ndim=1)
    if ks_.size == 0 or np.any(ks_ <= 3.0) or k0_ <= 3.0:
        raise ValueError(f"k0, ks: expected real k > 3 (the split blocks k - 2, 1, 1 need k - 2 > 1), got k0={k0_}, "
                         f"ks={ks_.tolist()[:8]}")
    x = _solve(x0_, np.array([k0_ - 1.0, 1.0]))
    X, loss, tr, st = [], [], [], []
    for k in ks_:
        x = _solve(x, np.array([k - 1.0, 1.0]))
        t, s = _eigs(x, float(k))
        X.append(x)
        loss.append(reduced_risk(x, [k - 1.0, 1.0]))
        tr.append(t)
        st.append(s)
    st_ = np.array(st)
    smin = st_[:, 0]
    k_turn = None
    idx = np.flatnonzero(np.sign(smin[:-1]) != np.sign(smin[1:]))
    if idx.size:
        from scipy.optimize import brentq

        i = int(idx[0])
        xs = {"x": X[i]}

        def g(k: float) -> float:
            xs["x"] = _solve(xs["x"], np.array([k - 1.0, 1.0]))
            return float(_eigs(xs["x"], k)[1][0])

        k_turn = float(brentq(g, ks_[i], ks_[i + 1], xtol=1e-8))
    return RealKFamily(ks_, np.array(X), np.array(loss), np.array(tr), st_, k_turn)
