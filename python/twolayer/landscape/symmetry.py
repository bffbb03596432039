"""Symmetry of weight matrices: isotropy groups and fixed-point subspaces (seed 001, Arjevani-Field).

The population risk with teacher W* = I (k = d, lambda = w.x) is invariant under W -> P_pi W P_rho^T for row and
column permutations; the global minimum W = I is fixed by the diagonal subgroup Delta S_k (pi = rho), and critical
points found by gradient methods are fixed by large subgroups of it (ΔS_{k-1}, Δ(S_2 x S_{k-2}), ...).

Isotropy is computed exactly for the diagonal action: two indices i, j are *twins* when the transposition (i j)
fixes W (and a); twins form classes, and the isotropy group is the product of the symmetric groups of the classes
extended by the automorphisms of the (small) quotient matrix between classes, found by backtracking.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._validation import as_float_array, positive

__all__ = ["Isotropy", "isotropy", "FixedPointSpace"]


@dataclass(eq=False)
class Isotropy:
    """The isotropy group of a weight matrix under the diagonal permutation action.

    ``order`` the group order; ``description`` e.g. "ΔS_5", "Δ(S_2 × S_4)" or "1" (trivial); a factor "⋊ m" marks
    extra automorphisms of order-m group permuting whole classes; ``classes`` the twin classes (tuples of indices,
    largest first); ``generators`` permutations (arrays p with p[i] the image of index i) generating the group.
    """

    order: int
    description: str
    classes: list[tuple[int, ...]]
    generators: list[NDArray[np.int64]] = field(default_factory=list)

    @property
    def class_sizes(self) -> tuple[int, ...]:
        return tuple(len(c) for c in self.classes)

    def __repr__(self) -> str:
        return f"Isotropy({self.description}, order={self.order})"


def _padded(W: NDArray[np.float64]) -> NDArray[np.float64]:
    k, d = W.shape
    n = max(k, d)
    out = np.zeros((n, n))
    out[:k, :d] = W
    return out


def _fixes(W: NDArray[np.float64], a: NDArray[np.float64] | None, perm: NDArray[np.int64], tol: float) -> bool:
    if not np.all(np.abs(W[np.ix_(perm, perm)] - W) <= tol):
        return False
    return a is None or bool(np.all(np.abs(a[perm] - a) <= tol))


def _describe(sizes: list[int], extra: int) -> str:
    parts = [f"S_{s}" for s in sorted(sizes, reverse=True) if s >= 2]
    if not parts:
        base = "1"
    elif len(parts) == 1:
        base = "Δ" + parts[0]
    else:
        base = "Δ(" + " × ".join(parts) + ")"
    return base if extra == 1 else f"{base} ⋊ {extra}" if base != "1" else f"order-{extra} group"


def isotropy(W: ArrayLike, tol: float = 1e-8, a: ArrayLike | None = None, max_search: int = 200000) -> Isotropy:
    """The largest group of simultaneous row/column permutations P W P^T = W (up to ``tol`` entrywise), and, when a
    trained second layer ``a`` is given, a[p] = a as well.

    ``W`` must be 2-d; a non-square (k, d) matrix is padded with zeros to max(k, d) square (so permutations may
    also move the zero rows/columns). ``tol`` is absolute and must be positive. ``max_search`` bounds the
    backtracking over the quotient of twin classes (ValueError if exceeded).
    """
    W_ = as_float_array(W, "W", ndim=2)
    tol_ = positive(tol, "tol")
    A = _padded(W_)
    n = A.shape[0]
    a_ = None
    if a is not None:
        a_ = as_float_array(a, "a", ndim=1)
        if a_.shape[0] != W_.shape[0]:
            raise ValueError(f"a: expected length {W_.shape[0]} (rows of W), got {a_.shape[0]}")
        a_ = np.concatenate([a_, np.zeros(n - a_.shape[0])])
    # twin classes: (i j) fixes W  <=>  rows/cols agree off {i, j} and the 2x2 block is symmetric under the swap
    ident = np.arange(n)
    cls_of = -np.ones(n, dtype=np.int64)
    classes: list[list[int]] = []
    for i in range(n):
        if cls_of[i] >= 0:
            continue
        cls_of[i] = len(classes)
        members = [i]
        for j in range(i + 1, n):
            if cls_of[j] >= 0:
                continue
            p = ident.copy()
            p[i], p[j] = j, i
            if _fixes(A, a_, p, tol_):
                cls_of[j] = len(classes)
                members.append(j)
        classes.append(members)
    # quotient: class c is coloured by (size, diagonal value, within-class value, a value); edges by block values
    r = len(classes)
    rep = [c[0] for c in classes]
    size = [len(c) for c in classes]

    def compatible(c: int, e: int) -> bool:
        if size[c] != size[e]:
            return False
        if abs(A[rep[c], rep[c]] - A[rep[e], rep[e]]) > tol_:
            return False
        if size[c] >= 2 and abs(A[classes[c][0], classes[c][1]] - A[classes[e][0], classes[e][1]]) > tol_:
            return False
        return a_ is None or abs(a_[rep[c]] - a_[rep[e]]) <= tol_

    autos: list[list[int]] = []
    budget = [max_search]

    def extend(assign: list[int], used: set[int]) -> None:
        c = len(assign)
        if c == r:
            autos.append(list(assign))
            return
        for e in range(r):
            budget[0] -= 1
            if budget[0] < 0:
                raise ValueError("max_search: the quotient automorphism search exceeded its budget")
            if e in used or not compatible(c, e):
                continue
            ok = all(abs(A[rep[c], rep[b]] - A[rep[e], rep[assign[b]]]) <= tol_
                     and abs(A[rep[b], rep[c]] - A[rep[assign[b]], rep[e]]) <= tol_ for b in range(c))
            if ok:
                assign.append(e)
                used.add(e)
                extend(assign, used)
                assign.pop()
                used.discard(e)

    extend([], set())
    extra = len(autos)
    order = extra * math.prod(math.factorial(s) for s in size)
    generators: list[NDArray[np.int64]] = []
    for c in classes:
        if len(c) >= 2:
            t = ident.copy()
            t[c[0]], t[c[1]] = c[1], c[0]
            generators.append(t)
            if len(c) >= 3:
                cyc = ident.copy()
                cyc[c] = np.roll(c, -1)
                generators.append(cyc)
    for auto in autos:
        if auto == list(range(r)):
            continue
        p = ident.copy()
        for c, e in enumerate(auto):
            p[classes[c]] = classes[e]
        generators.append(p)
    order_classes = sorted((tuple(c) for c in classes), key=lambda c: (-len(c), c))
    return Isotropy(order=order, description=_describe(size, extra), classes=order_classes, generators=generators)


class FixedPointSpace:
    """The k x k matrices (and second layers) fixed by the diagonal action of a Young subgroup
    Δ(S_{n_1} × ... × S_{n_r}) acting on consecutive index blocks of sizes ``sizes`` (sum k).

    Coordinates, in order: for each block its diagonal value and (if its size >= 2) its off-diagonal value; for
    each ordered pair of different blocks (A, B) the value of the A-rows/B-columns block; then, with
    ``train_readout``, one second-layer value per block. E.g. ``FixedPointSpace((k-1, 1))`` is the 5-dimensional
    ΔS_{k-1} space [[x0 I + x1 (J - I), x2 1], [x3 1^T, x4]].
    """

    def __init__(self, sizes: tuple[int, ...] | list[int], train_readout: bool = False) -> None:
        sizes_ = tuple(int(s) for s in sizes)
        if not sizes_ or any(s < 1 for s in sizes_):
            raise ValueError(f"sizes: expected positive block sizes, got {sizes!r}")
        self.sizes = sizes_
        self.k = sum(sizes_)
        self.train_readout = bool(train_readout)
        starts = np.concatenate([[0], np.cumsum(sizes_)])
        self.blocks = [np.arange(starts[b], starts[b + 1]) for b in range(len(sizes_))]
        basis: list[NDArray[np.float64]] = []
        labels: list[str] = []
        k = self.k
        for b, idx in enumerate(self.blocks):
            E = np.zeros((k, k))
            E[idx, idx] = 1.0
            basis.append(E)
            labels.append(f"diag[{b}]")
            if len(idx) >= 2:
                E = np.zeros((k, k))
                E[np.ix_(idx, idx)] = 1.0
                E[idx, idx] = 0.0
                basis.append(E)
                labels.append(f"off[{b}]")
        for b, c in itertools.permutations(range(len(sizes_)), 2):
            E = np.zeros((k, k))
            E[np.ix_(self.blocks[b], self.blocks[c])] = 1.0
            basis.append(E)
            labels.append(f"block[{b},{c}]")
        self.n_W = len(basis)
        B = np.stack([E.ravel() for E in basis], axis=1)  # (k*k, n_W)
        if self.train_readout:
            Ba = np.zeros((k, len(sizes_)))
            for b, idx in enumerate(self.blocks):
                Ba[idx, b] = 1.0
                labels.append(f"a[{b}]")
            B = np.block([[B, np.zeros((k * k, len(sizes_)))], [np.zeros((k, self.n_W)), Ba]])
        self.basis = B  # columns span the fixed space inside [vec(W), a]
        self.labels = labels
        self.dim = B.shape[1]

    def matrix(self, x: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
        """(W, a) for coordinates ``x`` (a is None without ``train_readout``)."""
        x_ = as_float_array(x, "x", ndim=1)
        if x_.shape[0] != self.dim:
            raise ValueError(f"x: expected {self.dim} coordinates, got {x_.shape[0]}")
        v = self.basis @ x_
        kk = self.k * self.k
        return v[:kk].reshape(self.k, self.k), (v[kk:] if self.train_readout else None)

    def coordinates(self, W: ArrayLike, a: ArrayLike | None = None) -> NDArray[np.float64]:
        """Least-squares coordinates of (W, a) (exact when (W, a) lies in the space)."""
        W_ = as_float_array(W, "W", ndim=2)
        if W_.shape != (self.k, self.k):
            raise ValueError(f"W: expected shape ({self.k}, {self.k}), got {W_.shape}")
        v = W_.ravel()
        if self.train_readout:
            v = np.concatenate([v, np.ones(self.k) if a is None else as_float_array(a, "a", ndim=1)])
        return np.linalg.lstsq(self.basis, v, rcond=None)[0]
