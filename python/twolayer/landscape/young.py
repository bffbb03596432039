"""The population risk on a Young fixed-point space at real block sizes, with exact derivatives and the Hessian
spectrum by isotypic component (Arjevani & Field 2021).

Setting: teacher W* = I_k (unit second layer, lambda = w . x, the Safran-Shamir problem), student of k units
fixed by the diagonal action of G = S_{n_1} x ... x S_{n_r} on consecutive blocks (coordinates as in
:class:`~twolayer.landscape.FixedPointSpace`). Rows of one block share a norm q_b, pairs of rows share an inner
product, and each such Gram entry is a quadratic form in the coordinates x whose coefficients are polynomials
in the sizes n_b; the risk is a sum over row pairs, teacher pairs and cross pairs of I2 kernels of these
forms, weighted by the numbers of pairs (n_b, n_b (n_b - 1), n_b n_c):

    R(x; n) = sum_t w_t(n) m_t(a) I2(C_t(x; n)) + R_teacher(n),

so R, its gradient and its Hessian in x are analytic in real n (I2's exact first and second covariance
derivatives are the core's jets; the chain rule through the quadratic forms is exact).

The Hessian spectrum. At a G-fixed point the full Hessian H commutes with G, so it preserves the isotypic
components of R^{k x k} (+ R^k for a trained second layer). The irreducible G-representations that occur are
the trivial one, the standard representation of each S_{n_b} ("standard[b]", dimension n_b - 1), its
exterior square ("exterior[b]", partition (n_b - 2, 1, 1), dimension (n_b - 1)(n_b - 2)/2), the (n_b - 2, 2)
representation ("symmetric[b]", dimension n_b (n_b - 3)/2) and the products of two standard representations
("standard[b,c]", dimension (n_b - 1)(n_c - 1)). Each is read off a finer fixed-point space: refining block b
into (n_b - 1, 1) adds one copy of every standard[b] eigenvalue to the trivial ones, so standard[b] is the
pencil (P^T H P, P^T P) on the metric-orthogonal complement P of the coarse space in the fine one; refining into
(n_b - 2, 1, 1) adds exterior[b] (odd under the swap of the two singletons) and symmetric[b] (even) on the
complement of the two (n_b - 1, 1) spaces; refining two blocks gives standard[b,c]. Each pencil is a few
coordinates whatever k is, analytic in real sizes, and at integer sizes its eigenvalues are eigenvalues of the
full Hessian with multiplicity the dimension of the representation (tested to 1e-10 against
:func:`twolayer.population.hessian`).

Real sizes: a block has an off-diagonal coordinate iff its size exceeds 1; continue sizes that stay integer
(e.g. the singleton of ΔS_{k-1}) or stay above 3 (then every refined layout keeps its coordinates).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _core
from .._validation import as_float_array, boolean, choice
from ..activations import ActivationName, check_activation
from .orbit import has_orbit, homogeneity_degree, split_spectrum

__all__ = ["YoungProblem", "IsotypicSpectrum", "irrep_dimension"]

_Label = tuple[int, int]  # (original block, part)


def _layout(sizes: Sequence[float], train_readout: bool) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for b, n in enumerate(sizes):
        out.append(("diag", b, b))
        if n > 1.0:
            out.append(("off", b, b))
    out += [("block", b, c) for b, c in itertools.permutations(range(len(sizes)), 2)]
    if train_readout:
        out += [("a", b, b) for b in range(len(sizes))]
    return out


def irrep_dimension(component: str, sizes: ArrayLike) -> float:
    """The dimension of an isotypic component's irreducible representation at (real) block sizes.

    Parameters
    ----------
    component : str
        ``"trivial"``, ``"standard[b]"``, ``"exterior[b]"``, ``"symmetric[b]"`` or ``"standard[b,c]"``.
    sizes : array_like
        Block sizes n_b.

    Returns
    -------
    float
        1, n_b - 1, (n_b - 1)(n_b - 2)/2, n_b (n_b - 3)/2 or (n_b - 1)(n_c - 1): the multiplicity of each of
        the component's eigenvalues in the full Hessian spectrum.

    Examples
    --------
    >>> from twolayer.landscape.young import irrep_dimension
    >>> irrep_dimension("standard[0]", [5, 1]), irrep_dimension("symmetric[0]", [5, 1])
    (4.0, 5.0)
    """
    n = as_float_array(sizes, "sizes", ndim=1)
    if component == "trivial":
        return 1.0
    name, _, rest = component.partition("[")
    try:
        idx = [int(v) for v in rest.rstrip("]").split(",")]
    except ValueError:
        raise ValueError(f"component: expected e.g. 'standard[0]', got {component!r}") from None
    if any(not 0 <= i < n.size for i in idx):
        raise ValueError(f"component: block index out of range for {n.size} blocks in {component!r}")
    nb = float(n[idx[0]])
    if name == "standard" and len(idx) == 1:
        return nb - 1.0
    if name == "standard" and len(idx) == 2:
        return (nb - 1.0) * (float(n[idx[1]]) - 1.0)
    if name == "exterior" and len(idx) == 1:
        return (nb - 1.0) * (nb - 2.0) / 2.0
    if name == "symmetric" and len(idx) == 1:
        return nb * (nb - 3.0) / 2.0
    raise ValueError(f"component: unknown isotypic component {component!r}")


def _phi_tilde(rho: NDArray[np.float64]) -> NDArray[np.float64]:
    """sqrt(1 - rho^2) - 1 + rho arcsin(rho) = rho^2/2 + rho^4/24 + ..., without cancellation at small rho."""
    rho = np.clip(rho, -1.0, 1.0)
    return rho * np.arcsin(rho) - rho * rho / (1.0 + np.sqrt(1.0 - rho * rho))


def _line_gap(theta: NDArray[np.float64]) -> NDArray[np.float64]:
    """g(t) = pi/2 - sin t - (pi/2 - t) cos t for the angle t in [0, pi/2] between two lines (g ~ pi t^2/4):
    pi sin^2(t/2) - (sin t - t cos t), the bracket by its series sum_m (-1)^(m+1) 2m t^(2m+1)/(2m+1)! below 0.5."""
    t = np.asarray(theta, dtype=np.float64)
    small = t < 0.5
    ts = np.where(small, t, 0.0)
    series = np.zeros_like(t)
    term = ts.copy()  # t^(2m+1)/(2m+1)!
    for m in range(1, 12):
        term = term * ts * ts / ((2 * m) * (2 * m + 1))
        series += (-1) ** (m + 1) * 2 * m * term
    bracket = np.where(small, series, np.sin(t) - t * np.cos(t))
    return np.pi * np.sin(0.5 * t) ** 2 - bracket


_Term = tuple[int, int, int, float, int, int, bool]
"""An I2 term of the risk: forms (f11, f12, f22) of its covariance, weight, readout indices (u, v) of its
second-layer factor a_u a_v (v = -1: a_u alone) and whether it is a one-unit kernel (I2 of a single norm)."""


class _GramForms:
    """The Gram entries of a Young fixed-point space as quadratic forms x^T A x + l . x + c0 in the W coordinates.

    Rows of block b have coordinates alpha_b (diagonal), beta_b (off-diagonal of its own columns) and gamma_bc
    (columns of block c); each form is appended to a list and referred to by its position.

    Parameters
    ----------
    n : ndarray
        Block sizes.
    """

    def __init__(self, n: NDArray[np.float64]) -> None:
        self.n = n
        self.r = n.size
        lay = _layout(n.tolist(), False)
        self.idx = {(kind, b, c): i for i, (kind, b, c) in enumerate(lay)}
        self.dw = len(lay)
        self.forms: list[tuple[NDArray[np.float64], NDArray[np.float64], float]] = []

    def new(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """A zero form (A, l)."""
        return np.zeros((self.dw, self.dw)), np.zeros(self.dw)

    @staticmethod
    def quad(A: NDArray[np.float64], i: int | None, j: int | None, coef: float) -> None:
        """Add coef x_i x_j to the form A (nothing where a coordinate is absent or coef is 0)."""
        if i is None or j is None or coef == 0.0:
            return
        A[i, j] += 0.5 * coef
        A[j, i] += 0.5 * coef

    def alpha(self, b: int) -> int:
        """The diagonal coordinate of block b."""
        return self.idx[("diag", b, b)]

    def beta(self, b: int) -> int | None:
        """The off-diagonal coordinate of block b (None for a single row)."""
        return self.idx.get(("off", b, b))

    def gamma(self, b: int, c: int) -> int:
        """The coordinate of block b's rows in block c's columns."""
        return self.idx[("block", b, c)]

    def add(self, A: NDArray[np.float64], lin: NDArray[np.float64], c0: float = 0.0) -> int:
        """Append the form (A, lin, c0); returns its position."""
        self.forms.append((A, lin, c0))
        return len(self.forms) - 1

    def linear(self, i: int) -> int:
        """Append the form x_i; returns its position."""
        A, lin = self.new()
        lin[i] = 1.0
        return self.add(A, lin)

    def quad_other_columns(self, A: NDArray[np.float64], b: int) -> None:
        """Add sum_{c != b} n_c gamma_bc^2 (a row of block b squared over the other blocks' columns) to A."""
        for c in range(self.r):
            if c != b:
                self.quad(A, self.gamma(b, c), self.gamma(b, c), self.n[c])

    def row_norms(self) -> list[int]:
        """q_b = |w_i|^2 for a row i of block b: alpha_b^2 + (n_b - 1) beta_b^2 + sum_c n_c gamma_bc^2."""
        n, r = self.n, self.r
        q = []
        for b in range(r):
            A, lin = self.new()
            self.quad(A, self.alpha(b), self.alpha(b), 1.0)
            self.quad(A, self.beta(b), self.beta(b), n[b] - 1.0)
            self.quad_other_columns(A, b)
            q.append(self.add(A, lin))
        return q

    def same_block_products(self) -> list[int]:
        """w_i . w_j for two rows of block b: 2 alpha_b beta_b + (n_b - 2) beta_b^2 + sum_c n_c gamma_bc^2."""
        n, r = self.n, self.r
        same = []
        for b in range(r):
            A, lin = self.new()
            self.quad(A, self.alpha(b), self.beta(b), 2.0)
            self.quad(A, self.beta(b), self.beta(b), n[b] - 2.0)
            self.quad_other_columns(A, b)
            same.append(self.add(A, lin))
        return same

    def cross_block_products(self) -> dict[tuple[int, int], int]:
        """w_i . w_j for rows of blocks b != c: (alpha_b + (n_b - 1) beta_b) gamma_cb + gamma_bc (alpha_c +
        (n_c - 1) beta_c) + sum_e n_e gamma_be gamma_ce over the other blocks e."""
        n, r = self.n, self.r
        cross: dict[tuple[int, int], int] = {}
        for b, c in itertools.permutations(range(r), 2):
            A, lin = self.new()
            self.quad(A, self.gamma(c, b), self.alpha(b), 1.0)
            self.quad(A, self.gamma(c, b), self.beta(b), n[b] - 1.0)
            self.quad(A, self.gamma(b, c), self.alpha(c), 1.0)
            self.quad(A, self.gamma(b, c), self.beta(c), n[c] - 1.0)
            for e in range(r):
                if e not in (b, c):
                    self.quad(A, self.gamma(b, e), self.gamma(c, e), n[e])
            cross[(b, c)] = self.add(A, lin)
        return cross

    def terms(self, q: list[int], same: list[int], cross: dict[tuple[int, int], int]) -> list[_Term]:
        """The I2 terms of the risk, weighted by the numbers of row pairs: student-student pairs (one unit, same
        block, blocks b != c: n_b/2, n_b (n_b - 1)/2, n_b n_c/2) and student-teacher pairs (-n_b, -n_b (n_b - 1),
        -n_b n_c, against the unit norm: the form 1, appended here with the linear forms of the entries)."""
        n, r = self.n, self.r
        one = self.add(*self.new(), 1.0)
        out: list[_Term] = []
        for b in range(r):
            beta = self.beta(b)
            out.append((q[b], q[b], q[b], 0.5 * n[b], b, b, True))
            if beta is not None:
                out.append((q[b], same[b], q[b], 0.5 * n[b] * (n[b] - 1.0), b, b, False))
            for c in range(r):
                if c != b:
                    out.append((q[b], cross[(b, c)], q[c], 0.5 * n[b] * n[c], b, c, False))
            out.append((q[b], self.linear(self.alpha(b)), one, -n[b], b, -1, False))
            if beta is not None:
                out.append((q[b], self.linear(beta), one, -n[b] * (n[b] - 1.0), b, -1, False))
            for c in range(r):
                if c != b:
                    out.append((q[b], self.linear(self.gamma(b, c)), one, -n[b] * n[c], b, -1, False))
        return out

    def stacked(self) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """The forms as arrays A (forms, dw, dw), L (forms, dw) and c0 (forms,)."""
        A = np.stack([f[0] for f in self.forms])
        L = np.stack([f[1] for f in self.forms])
        c0 = np.array([f[2] for f in self.forms])
        return A, L, c0


@dataclass(eq=False)
class IsotypicSpectrum:
    """The Hessian spectrum of a point of a Young fixed-point space, by isotypic component.

    Attributes
    ----------
    sizes : ndarray
        The block sizes.
    eigenvalues : dict of str to ndarray
        Each component's distinct eigenvalues (ascending), one per copy of
        its representation; where the model has a rescaling orbit (relu
        with a trained second layer) the eigenvalues across the orbit's
        tangents, as :attr:`CriticalPoint.eigenvalues
        <twolayer.landscape.CriticalPoint>` (see
        :func:`~twolayer.landscape.split_spectrum`).
    dimension : dict of str to float
        The dimension of each component's representation (the multiplicity
        of its eigenvalues in the full spectrum).
    flat : dict of str to ndarray
        Each component's eigenvalues along the orbit's tangents (~0 at a
        critical point; one in ``trivial`` and one in ``standard[b]`` per
        block b; empty without an orbit), as
        :attr:`CriticalPoint.flat_eigenvalues
        <twolayer.landscape.CriticalPoint>`.

    Examples
    --------
    >>> prob = tl.landscape.YoungProblem(2)
    >>> spec = prob.spectrum([0.986704, -0.050413, -0.601512, 0.308011, 0.224516], [5, 1])
    >>> list(spec.eigenvalues), spec.dimension["exterior[0]"]
    (['trivial', 'standard[0]', 'exterior[0]', 'symmetric[0]'], 6.0)
    """

    sizes: NDArray[np.float64]
    eigenvalues: dict[str, NDArray[np.float64]]
    dimension: dict[str, float]
    flat: dict[str, NDArray[np.float64]] = field(default_factory=dict)

    def index(self, zero_tol: float | None = None) -> float:
        """The Morse index: sum over components of (negative eigenvalues) x dimension.

        Parameters
        ----------
        zero_tol : float, optional
            Eigenvalues above ``-zero_tol`` count as non-negative (default
            1e-8 max(1, max abs(lambda)), as :func:`twolayer.landscape.classify`).

        Returns
        -------
        float
            An integer at integer sizes; real (polynomial in the sizes) otherwise.
        """
        tol = self._zero_tol(zero_tol)
        return float(sum(np.sum(v < -tol) * self.dimension[c] for c, v in self.eigenvalues.items()))

    def _zero_tol(self, zero_tol: float | None) -> float:
        if zero_tol is not None:
            return float(zero_tol)
        top = max((float(np.max(np.abs(v))) for v in self.eigenvalues.values() if v.size), default=0.0)
        return 1e-8 * max(1.0, top)

    def full(self, part: str = "all") -> NDArray[np.float64]:
        """The full Hessian spectrum (integer sizes): each eigenvalue repeated by its dimension, ascending.

        Parameters
        ----------
        part : {"all", "transverse", "flat"}, default "all"
            Which eigenvalues: ``eigenvalues``, ``flat`` or both (at a
            critical point, where the orbit's tangents are invariant, both
            together are the spectrum of the full Hessian).

        Returns
        -------
        ndarray
        """
        choice(part, "part", ("all", "transverse", "flat"))
        parts = [d for name, d in (("transverse", self.eigenvalues), ("flat", self.flat)) if part in (name, "all")]
        out: list[float] = []
        for values in parts:
            for c, v in values.items():
                m = self.dimension[c]
                if abs(m - round(m)) > 1e-9:
                    raise ValueError(f"full: the sizes {self.sizes.tolist()} are not integers")
                out += list(np.repeat(v, int(round(m))))
        return np.sort(np.array(out))


class YoungProblem:
    """The risk on the fixed-point space of Δ(S_{n_1} × ... × S_{n_r}) with teacher I_k, at real sizes.

    Exact value, gradient and Hessian in the coordinates of
    :class:`~twolayer.landscape.FixedPointSpace` (whose order they follow),
    analytic in the block sizes, and the Hessian spectrum by isotypic
    component (see the module notes). Conventions: lambda = w . x, unit
    teacher second layer, excess risk ½E[(f - y)^2] (docs/conventions).

    Parameters
    ----------
    blocks : int
        Number of blocks r (or a sequence of sizes, whose length is used).
    train_readout : bool, default False
        Add one second-layer coordinate per block.
    activation : str, default "relu"
        Student and teacher activation.

    Examples
    --------
    At integer sizes the risk is the population risk of the matrix:

    >>> prob = tl.landscape.YoungProblem(2)
    >>> x = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]
    >>> print(f"{prob.risk(x, [5, 1]):.6f}")
    0.025081
    >>> print(f"{prob.risk(x, [5.5, 1]):.6f}")  # and analytic in the sizes
    0.027644
    """

    def __init__(
        self, blocks: int | Sequence[float], train_readout: bool = False, activation: ActivationName = "relu"
    ) -> None:
        r = blocks if isinstance(blocks, (int, np.integer)) and not isinstance(blocks, bool) else None
        if r is None:
            r = len(as_float_array(blocks, "blocks", ndim=1))
        if int(r) < 1:
            raise ValueError(f"blocks: expected at least one block, got {r}")
        self.r = int(r)
        self.train_readout = boolean(train_readout, "train_readout")
        check_activation(activation)
        self.activation = activation

    # ----- layout -------------------------------------------------------------------------------------------
    def _sizes(self, sizes: ArrayLike) -> NDArray[np.float64]:
        n = as_float_array(sizes, "sizes", ndim=1)
        if n.size != self.r:
            raise ValueError(f"sizes: expected {self.r} block sizes, got {n.size}")
        if np.any(n < 1.0):
            raise ValueError(f"sizes: expected block sizes >= 1, got {n.tolist()}")
        return n

    def layout(self, sizes: ArrayLike) -> list[tuple[str, int, int]]:
        """The coordinates at these sizes: ("diag", b, b), ("off", b, b) if n_b > 1, ("block", b, c), ("a", b, b).

        Parameters
        ----------
        sizes : array_like
            Block sizes.

        Returns
        -------
        list of (str, int, int)
        """
        return _layout(self._sizes(sizes).tolist(), self.train_readout)

    def metric(self, sizes: ArrayLike) -> NDArray[np.float64]:
        """G = B^T B: the number of entries each coordinate carries (n_b, n_b(n_b-1), n_b n_c, n_b).

        Parameters
        ----------
        sizes : array_like
            Block sizes.

        Returns
        -------
        ndarray, shape (dim,)
            The diagonal of G.
        """
        n = self._sizes(sizes)
        w = {"diag": lambda b, c: n[b], "off": lambda b, c: n[b] * (n[b] - 1), "block": lambda b, c: n[b] * n[c],
             "a": lambda b, c: n[b]}
        return np.array([w[kind](b, c) for kind, b, c in self.layout(n)])

    # ----- risk, gradient, Hessian ----------------------------------------------------------------------------
    def _forms(
        self, n: NDArray[np.float64]
    ) -> tuple[int, NDArray[np.float64], NDArray[np.float64], NDArray[np.float64], list[_Term]]:
        """The Gram quadratic forms (A, l, c0) in the W coordinates and the weighted I2 terms over them."""
        forms = _GramForms(n)
        q, same, cross = forms.row_norms(), forms.same_block_products(), forms.cross_block_products()
        terms = forms.terms(q, same, cross)
        A, L, c0 = forms.stacked()
        return forms.dw, A, L, c0, terms

    def _teacher(self, n: NDArray[np.float64]) -> float:
        k = float(n.sum())
        act = self.activation
        s = float(_core.i2_self_jet(act, act, np.array([1.0]))[0][0])
        c = float(_core.i2(act, act, np.array([[[1.0, 0.0], [0.0, 1.0]]]))[0])
        return 0.5 * (k * s + k * (k - 1.0) * c)

    def _evaluate(
        self, x: ArrayLike, sizes: ArrayLike, order: int
    ) -> tuple[float, NDArray[np.float64] | None, NDArray[np.float64] | None, NDArray[np.float64] | None]:
        """(risk, gradient, Hessian, gradient's absolute terms) to the requested order (the rest None)."""
        n = self._sizes(sizes)
        dw, A, L, c0, terms = self._forms(n)
        dim = dw + (self.r if self.train_readout else 0)
        x_ = as_float_array(x, "x", ndim=1)
        if x_.size != dim:
            raise ValueError(f"x: expected {dim} coordinates at sizes {n.tolist()}, got {x_.size}")
        xw = x_[:dw]
        a = x_[dw:] if self.train_readout else np.ones(self.r)
        val = np.einsum("fij,i,j->f", A, xw, xw) + L @ xw + c0
        grd = 2.0 * np.einsum("fij,j->fi", A, xw) + L
        T = np.array([t[:3] for t in terms], dtype=np.int64)
        w = np.array([t[3] for t in terms])
        u = np.array([t[4] for t in terms])
        v = np.array([t[5] for t in terms])
        is_self = np.array([t[6] for t in terms])
        act = self.activation
        K = np.empty(len(terms))
        g = np.zeros((len(terms), 3))
        h = np.zeros((len(terms), 3, 3))
        pair = ~is_self
        c11, c12, c22 = val[T[pair, 0]], val[T[pair, 1]], val[T[pair, 2]]
        C = np.stack([np.stack([c11, c12], -1), np.stack([c12, c22], -1)], -2)
        K[pair], g[pair], h[pair] = _core.i2_jet(act, act, np.ascontiguousarray(C))
        ks, d1, d2 = _core.i2_self_jet(act, act, np.ascontiguousarray(val[T[is_self, 0]]))
        K[is_self] = ks
        g[is_self, 0] = d1
        h[is_self, 0, 0] = d2
        au = a[u]
        av = np.where(v >= 0, a[np.maximum(v, 0)], 1.0)
        m = au * av
        risk = float(np.sum(w * m * K)) + self._teacher(n)
        if order == 0:
            return risk, None, None, None
        J = grd[T]  # (terms, 3, dw)
        dK = np.einsum("tp,tpi->ti", g, J)
        grad = np.zeros(dim)
        grad[:dw] = (w * m) @ dK
        size = np.zeros(dim)  # sum of the absolute values of the terms (their rounding sets the gradient's)
        size[:dw] = np.abs(w * m) @ np.einsum("tp,tpi->ti", np.abs(g), np.abs(J))
        if self.train_readout:
            # dm/da_u = a_v (a_u a_v terms; 2 a_u when u = v), dm/da_u = 1 (a_u terms)
            for t in range(len(terms)):
                grad[dw + u[t]] += w[t] * av[t] * K[t]
                size[dw + u[t]] += abs(w[t] * av[t] * K[t])
                if v[t] >= 0:
                    grad[dw + v[t]] += w[t] * au[t] * K[t]
                    size[dw + v[t]] += abs(w[t] * au[t] * K[t])
        if order == 1:
            return risk, grad, None, size
        hess = np.zeros((dim, dim))
        d2K = np.einsum("tpi,tpq,tqj->tij", J, h, J) + 2.0 * np.einsum("tp,tpij->tij", g, A[T])
        hess[:dw, :dw] = np.einsum("t,tij->ij", w * m, d2K)
        if self.train_readout:
            for t in range(len(terms)):
                hess[:dw, dw + u[t]] += w[t] * av[t] * dK[t]
                if v[t] >= 0:
                    hess[:dw, dw + v[t]] += w[t] * au[t] * dK[t]
                    hess[dw + u[t], dw + v[t]] += w[t] * K[t]
                    hess[dw + v[t], dw + u[t]] += w[t] * K[t]
            hess[dw:, :dw] = hess[:dw, dw:].T
        return risk, grad, 0.5 * (hess + hess.T), size

    def _relu_risk(self, x: NDArray[np.float64], n: NDArray[np.float64]) -> float:
        """The relu risk grouped so that nothing cancels at large k (see :meth:`risk`)."""
        lay = _layout(n.tolist(), False)
        dw = len(lay)
        idx = {key: i for i, key in enumerate(lay)}
        r = self.r
        a = x[dw:] if self.train_readout else np.ones(r)

        def ga(b: int, c: int) -> float:
            return float(x[idx[("block", b, c)]])

        al = np.array([x[idx[("diag", b, b)]] for b in range(r)])
        be = np.array([x[idx[("off", b, b)]] if ("off", b, b) in idx else 0.0 for b in range(r)])
        perp2 = np.array([(n[b] - 1.0) * be[b] ** 2 + sum(n[c] * ga(b, c) ** 2 for c in range(r) if c != b)
                          for b in range(r)])  # |w_b|^2 off its own column
        q = al * al + perp2
        norm = np.sqrt(q)
        inv = np.divide(1.0, norm, out=np.zeros(r), where=norm > 0.0)  # a zero row (m = 0) has no angle terms
        m = a * norm
        nu = a * ((al - 1.0) * (al + 1.0) + perp2) / (norm + 1.0) + (a - 1.0)  # a |w| - 1
        gap = _line_gap(np.arctan2(np.sqrt(perp2), np.abs(al)))
        cols = a * (al - 1.0) + (a - 1.0) + (n - 1.0) * a * be  # column sums of diag(a) W - I
        for c in range(r):
            cols[c] += sum(n[b] * a[b] * ga(b, c) for b in range(r) if b != c)
        phi = 0.0  # sum over row pairs i != j of the mixed difference of m_i m_j phi~(rho_ij)
        for b in range(r):
            if n[b] > 1.0:
                same = 2.0 * al[b] * be[b] + (n[b] - 2.0) * be[b] ** 2 + sum(
                    n[c] * ga(b, c) ** 2 for c in range(r) if c != b)
                phi += n[b] * (n[b] - 1.0) * (m[b] * m[b] * _phi_tilde(same * inv[b] * inv[b])
                                              - 2.0 * m[b] * _phi_tilde(be[b] * inv[b]))
            for c in range(r):
                if c == b:
                    continue
                cross = (al[b] + (n[b] - 1.0) * be[b]) * ga(c, b) + ga(b, c) * (al[c] + (n[c] - 1.0) * be[c]) + sum(
                    n[e] * ga(b, e) * ga(c, e) for e in range(r) if e not in (b, c))
                phi += n[b] * n[c] * (m[b] * m[c] * _phi_tilde(cross * inv[b] * inv[c])
                                      - m[b] * _phi_tilde(ga(b, c) * inv[b]) - m[c] * _phi_tilde(ga(c, b) * inv[c]))
        linear = float(n @ (cols * cols)) / 4.0
        even = float(n @ ((1.0 - 2.0 / np.pi) * nu * nu + (4.0 / np.pi) * m * gap)) / 4.0
        return 0.5 * (linear + even + (float(n @ nu) ** 2 + float(phi)) / (2.0 * np.pi))

    def risk(self, x: ArrayLike, sizes: ArrayLike) -> float:
        """The excess population risk at coordinates ``x`` and block sizes ``sizes`` (real allowed).

        For relu it is evaluated without cancellation (to a few ulps of the
        risk itself at any k: 1e-15 relative at k = 1e8 on the ΔS_{k-1}
        family, where the plain sum over ~k^2 row pairs has no digit left).
        With ``u_i = a_i w_i``, ``relu(z) = z/2 + abs(z)/2`` splits f - y
        into a linear and an even part that are uncorrelated, so::

            2R = |s|^2/4 + sum_i [(1 - 2/pi) nu_i^2 + (4/pi) m_i g(t_i)]/4
                 + [(sum_i nu_i)^2 + sum_{i != j} Phi_ij] / (2 pi)

        with ``s = sum_i (u_i - e_i)`` (column sums of diag(a) W - I),
        ``m_i = a_i |w_i|``, ``nu_i = m_i - 1``, ``t_i`` the angle between
        the lines of w_i and e_i, ``g(t) = pi/2 - sin t - (pi/2 - t) cos t``,
        and ``Phi_ij`` the mixed difference over (w_i, w_j) -> (e_i, e_j) of
        ``m_i m_j phi(rho_ij)``, ``phi(rho) = sqrt(1 - rho^2) - 1 + rho arcsin rho``
        (``E[|u.x| |v.x|] = (2/pi) |u| |v| (1 + phi(rho))``). Each group is
        computed from small quantities (off-column entries, nu, sin t, a
        series at small t); sums over rows are weighted by the block sizes.
        With a trained second layer along the rescaling orbit (a_b and
        ``|w_b|`` away from 1, their product close to it) the error stays
        below the change of the risk under a one-ulp change of the
        coordinates (4e-11 relative at k = 1e8). Other activations: the
        plain sum.

        Parameters
        ----------
        x : array_like
            Coordinates (:meth:`layout`).
        sizes : array_like
            Block sizes.

        Returns
        -------
        float
        """
        if self.activation == "relu":
            n = self._sizes(sizes)
            x_ = as_float_array(x, "x", ndim=1)
            dim = len(_layout(n.tolist(), self.train_readout))
            if x_.size != dim:
                raise ValueError(f"x: expected {dim} coordinates at sizes {n.tolist()}, got {x_.size}")
            return self._relu_risk(x_, n)
        return self._evaluate(x, sizes, 0)[0]

    def gradient(self, x: ArrayLike, sizes: ArrayLike) -> NDArray[np.float64]:
        """The exact gradient of x -> R(x; sizes) (B^T grad R at integer sizes).

        Parameters
        ----------
        x : array_like
            Coordinates.
        sizes : array_like
            Block sizes.

        Returns
        -------
        ndarray, shape (dim,)
        """
        g = self._evaluate(x, sizes, 1)[1]
        assert g is not None
        return g

    def hessian(self, x: ArrayLike, sizes: ArrayLike) -> NDArray[np.float64]:
        """The exact Hessian of x -> R(x; sizes) (B^T H B at integer sizes).

        Parameters
        ----------
        x : array_like
            Coordinates.
        sizes : array_like
            Block sizes.

        Returns
        -------
        ndarray, shape (dim, dim)
        """
        h = self._evaluate(x, sizes, 2)[2]
        assert h is not None
        return h

    def gradient_norm(self, x: ArrayLike, sizes: ArrayLike) -> float:
        """The Euclidean norm of the full gradient, sqrt(g^T G^-1 g) (the full gradient lies in the space).

        Parameters
        ----------
        x : array_like
            Coordinates.
        sizes : array_like
            Block sizes.

        Returns
        -------
        float
        """
        return self._metric_norm(self.gradient(x, sizes), sizes)

    def gradient_floor(self, x: ArrayLike, sizes: ArrayLike) -> float:
        """The rounding level of :meth:`gradient_norm`: below it a gradient norm is noise.

        The gradient is a sum of terms weighted by the numbers of row pairs
        (up to ~k^2) that cancel at a critical point, so its rounding error is
        about eps times the sum of their absolute values s:
        ``eps sqrt(s^T G^-1 s)`` (it grows about like k^1.5 eps along the
        ΔS_{k-1} family: 2e-12 at k = 1e3, 2e-9 at k = 1e5).

        Parameters
        ----------
        x : array_like
            Coordinates.
        sizes : array_like
            Block sizes.

        Returns
        -------
        float

        Examples
        --------
        >>> prob = tl.landscape.YoungProblem(2)
        >>> x = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]
        >>> bool(1e-16 < prob.gradient_floor(x, [5, 1]) < 1e-14)
        True
        """
        size = self._evaluate(x, sizes, 1)[3]
        assert size is not None
        return float(np.finfo(np.float64).eps) * self._metric_norm(size, sizes)

    def _metric_norm(self, v: NDArray[np.float64], sizes: ArrayLike) -> float:
        """sqrt(v^T G^-1 v): the Euclidean norm of the full-space vector whose coordinates' gradient is v."""
        return float(np.sqrt(v @ (v / self.metric(sizes))))

    def symmetry_directions(self, x: ArrayLike, sizes: ArrayLike) -> NDArray[np.float64]:
        """The flat directions of the rescaling symmetry inside the space, one row per block.

        Units homogeneous of degree p (:mod:`twolayer.landscape.orbit`):
        (w_i, a_i) -> (c w_i, c^-p a_i) for the rows of block b moves the
        coordinates of those rows along x and a_b along -p a_b, the orbit
        tangent (w_i, -p a_i) summed over the block. Where that is a change
        of the parameters (a trained second layer for relu, linear and
        quadratic; step units always); otherwise none (shape (0, dim)).

        Parameters
        ----------
        x : array_like
            Coordinates.
        sizes : array_like
            Block sizes.

        Returns
        -------
        ndarray, shape (m, dim)
        """
        lay = self.layout(sizes)
        x_ = as_float_array(x, "x", ndim=1)
        if x_.size != len(lay):
            raise ValueError(f"x: expected {len(lay)} coordinates, got {x_.size}")
        if not has_orbit(self.activation, self.train_readout):
            return np.zeros((0, len(lay)))
        p = homogeneity_degree(self.activation)
        assert p is not None
        S = np.zeros((self.r, len(lay)))
        for i, (kind, b, _) in enumerate(lay):
            S[b, i] = -p * x_[i] if kind == "a" else x_[i]
        return S

    # ----- isotypic spectrum --------------------------------------------------------------------------------
    def _refined(
        self, n: NDArray[np.float64], splits: dict[int, tuple[float, ...]]
    ) -> tuple[YoungProblem, NDArray[np.float64], list[_Label]]:
        labels: list[_Label] = []
        sizes: list[float] = []
        for b in range(self.r):
            parts = splits.get(b, (float(n[b]),))
            for j, s in enumerate(parts):
                labels.append((b, j))
                sizes.append(s)
        return YoungProblem(len(sizes), self.train_readout, self.activation), np.array(sizes), labels

    def _embedding(
        self, fine: list[_Label], fine_n: NDArray[np.float64], coarse: list[_Label], coarse_n: NDArray[np.float64],
        parent: dict[_Label, _Label]
    ) -> NDArray[np.float64]:
        """E with x_fine = E x_coarse for the same matrix: each fine coordinate copies the coarse one covering it."""
        lf = _layout(fine_n.tolist(), self.train_readout)
        lc = _layout(coarse_n.tolist(), self.train_readout)
        ci = {c: i for i, c in enumerate(lc)}
        P = [coarse.index(parent[lab]) for lab in fine]
        E = np.zeros((len(lf), len(lc)))
        for i, (kind, p, q) in enumerate(lf):
            P1, Q1 = P[p], P[q]
            if kind == "block" and P1 == Q1:
                key = ("off", P1, P1)
            elif kind == "off":
                key = ("off", P1, P1)
            else:
                key = (kind, P1, Q1)
            E[i, ci[key]] = 1.0
        return E

    @staticmethod
    def _complement(E: NDArray[np.float64], G: NDArray[np.float64]) -> NDArray[np.float64]:
        """A G-orthonormal basis P (P^T G P = I) of the G-orthogonal complement of range(E).

        Worked in the full space's Euclidean coordinates G^1/2 y, where the columns of E (normalised) are unit
        vectors: the rank is then found without the spread ~k^2 of the weights G.
        """
        r = np.sqrt(G)
        B = r[:, None] * E
        norms = np.linalg.norm(B, axis=0)
        B = B[:, norms > 0] / norms[norms > 0]
        U, s, _ = np.linalg.svd(B)
        rank = int(np.sum(s > 1e-10 * max(1.0, float(s[0]) if s.size else 1.0)))
        return np.asarray(U[:, rank:] / r[:, None])

    @staticmethod
    def _pencil(
        H: NDArray[np.float64], G: NDArray[np.float64], P: NDArray[np.float64], S: NDArray[np.float64]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Eigenvalues of (P^T H P, P^T G P) across and along the G-projections of the rows of S onto range(P).

        Cholesky reduction P^T G P = L L^T: Z = L^-1 P^T H P L^-T acts on coordinates u = L^T y that are
        Euclidean in the full space, where the projection of a tangent s is L^-1 P^T G s; the orthonormalised
        projections are the flat directions of :func:`~twolayer.landscape.split_spectrum`.
        Returns (transverse, flat), each ascending.
        """
        if P.shape[1] == 0:
            return np.empty(0), np.empty(0)
        M = P.T @ (G[:, None] * P)
        L = np.linalg.cholesky(0.5 * (M + M.T))
        Y = np.linalg.solve(L, P.T @ H @ P)
        Z = np.linalg.solve(L, Y.T)
        U = np.linalg.solve(L, P.T @ (G[:, None] * S.T))
        size = np.sqrt(np.sum(G * S * S, axis=1))  # each tangent's full-space norm
        U = U[:, size > 0] / size[size > 0]
        T = YoungProblem._span(U, 1e-8)  # projections below 1e-8 |s| are rounding (components without tangents)
        return split_spectrum(0.5 * (Z + Z.T), T)

    @staticmethod
    def _span(P: NDArray[np.float64], tol: float = 1e-10) -> NDArray[np.float64]:
        if P.shape[1] == 0:
            return P
        U, s, _ = np.linalg.svd(P, full_matrices=False)
        return np.asarray(U[:, s > tol * max(1.0, float(s[0]))])

    def spectrum(self, x: ArrayLike, sizes: ArrayLike) -> IsotypicSpectrum:
        """The Hessian spectrum by isotypic component at a G-fixed point.

        Exact (the analytic Hessian on small refined fixed-point spaces);
        at integer sizes, each eigenvalue is an eigenvalue of the full
        Hessian with multiplicity ``dimension[component]``.

        Parameters
        ----------
        x : array_like
            Coordinates of the point (need not be critical: the Hessian of a
            G-invariant function at a G-fixed point is G-equivariant).
        sizes : array_like
            Block sizes (real allowed).

        Returns
        -------
        IsotypicSpectrum

        Examples
        --------
        The ΔS_5 spurious minimum at k = 6 (Arjevani & Field's type-A family):

        >>> prob = tl.landscape.YoungProblem(2)
        >>> x = prob.solve([1.0, -0.05, -0.6, 0.3, 0.2], [5, 1])[0]
        >>> spec = prob.spectrum(x, [5, 1])
        >>> np.round(spec.eigenvalues["standard[0]"], 4)
        array([0.0047, 0.0773, 0.2383, 0.3389, 1.672 ])
        >>> spec.index()
        0.0
        """
        n = self._sizes(sizes)
        x_ = as_float_array(x, "x", ndim=1)
        base = [(b, 0) for b in range(self.r)]
        eig: dict[str, NDArray[np.float64]] = {}
        flat: dict[str, NDArray[np.float64]] = {}
        dims: dict[str, float] = {}
        H = self.hessian(x_, n)
        eig["trivial"], flat["trivial"] = self._pencil(H, self.metric(n), np.eye(H.shape[0]),
                                                       self.symmetry_directions(x_, n))
        dims["trivial"] = 1.0

        def fine_problem(splits: dict[int, tuple[float, ...]]):
            prob, fn, lab = self._refined(n, splits)
            E = self._embedding(lab, fn, base, n, {lb: (lb[0], 0) for lb in lab})
            xf = E @ x_
            return prob, fn, lab, prob.hessian(xf, fn), prob.metric(fn), prob.symmetry_directions(xf, fn)

        for b in range(self.r):
            if n[b] <= 1.0:
                continue
            prob, fn, lab, Hf, Gf, Sf = fine_problem({b: (n[b] - 1.0, 1.0)})
            E = self._embedding(lab, fn, base, n, {lb: (lb[0], 0) for lb in lab})
            name = f"standard[{b}]"
            eig[name], flat[name] = self._pencil(Hf, Gf, self._complement(E, Gf), Sf)
            dims[name] = irrep_dimension(name, n)
            if n[b] < 3.0:
                continue
            prob, fn, lab, Hf, Gf, Sf = fine_problem({b: (n[b] - 2.0, 1.0, 1.0)})
            mid, mid_n, mid_lab = self._refined(n, {b: (n[b] - 1.0, 1.0)})
            maps = []
            for single in (1, 2):  # which fine singleton stays the (n_b - 1, 1) space's singleton
                par = {lb: (lb if lb[0] != b else (b, 1 if lb[1] == single else 0)) for lb in lab}
                maps.append(self._embedding(lab, fn, mid_lab, mid_n, par))
            P0 = self._complement(np.hstack(maps), Gf)
            lf = _layout(fn.tolist(), self.train_readout)
            fi = lab.index((b, 1))
            fj = lab.index((b, 2))
            swap = {fi: fj, fj: fi}
            pos = {c: i for i, c in enumerate(lf)}
            T = np.zeros((len(lf), len(lf)))
            for i, (kind, p, q) in enumerate(lf):
                T[pos[(kind, swap.get(p, p), swap.get(q, q))], i] = 1.0
            I = np.eye(len(lf))
            r = np.sqrt(Gf)  # T permutes coordinates of equal weight: it commutes with G
            for name, S in ((f"exterior[{b}]", I - T), (f"symmetric[{b}]", I + T)):
                P = self._span(S @ (r[:, None] * P0)) / r[:, None]
                if P.shape[1]:
                    eig[name], flat[name] = self._pencil(Hf, Gf, P, Sf)
                    dims[name] = irrep_dimension(name, n)
        for b, c in itertools.combinations(range(self.r), 2):
            if n[b] <= 1.0 or n[c] <= 1.0:
                continue
            prob, fn, lab, Hf, Gf, Sf = fine_problem({b: (n[b] - 1.0, 1.0), c: (n[c] - 1.0, 1.0)})
            maps = []
            for keep in (b, c):
                mid, mid_n, mid_lab = self._refined(n, {keep: (n[keep] - 1.0, 1.0)})
                par = {lb: (lb if lb[0] == keep else (lb[0], 0)) for lb in lab}
                maps.append(self._embedding(lab, fn, mid_lab, mid_n, par))
            name = f"standard[{b},{c}]"
            eig[name], flat[name] = self._pencil(Hf, Gf, self._complement(np.hstack(maps), Gf), Sf)
            dims[name] = irrep_dimension(name, n)
        return IsotypicSpectrum(n.copy(), eig, dims, flat)

    # ----- Newton ------------------------------------------------------------------------------------------
    def solve(
        self, x0: ArrayLike, sizes: ArrayLike, tol: float = 1e-12, max_iter: int = 50
    ) -> tuple[NDArray[np.float64], float, bool]:
        """Newton's method on the exact reduced gradient at fixed sizes.

        Parameters
        ----------
        x0 : array_like
            Starting coordinates.
        sizes : array_like
            Block sizes (real allowed).
        tol : float, default 1e-12
            Target full-gradient norm (:meth:`gradient_norm`).
        max_iter : int, default 50
            Iterations at most.

        Returns
        -------
        x : ndarray
            The point reached.
        grad_norm : float
            Its full-gradient norm.
        converged : bool
            Whether ``grad_norm <= tol``.

        Examples
        --------
        >>> prob = tl.landscape.YoungProblem(2)
        >>> x, gn, ok = prob.solve([1.0, -0.05, -0.6, 0.3, 0.2], [5.5, 1.0])
        >>> ok, gn < 1e-12, np.round(x, 4)
        (True, True, array([ 0.9929, -0.0417, -0.618 ,  0.2828,  0.2032]))
        """
        x, gn, _ = newton(self, as_float_array(x0, "x0", ndim=1), self._sizes(sizes), tol, max_iter)
        return x, gn, gn <= tol


def newton(
    prob: YoungProblem, x0: NDArray[np.float64], n: NDArray[np.float64], tol: float, max_iter: int
) -> tuple[NDArray[np.float64], float, int]:
    """Newton with backtracking on the full-gradient norm; returns (x, norm, iterations)."""
    G = prob.metric(n)
    x = x0.copy()
    g, H = _derivatives(prob, x, n)

    def norm(gr: NDArray[np.float64]) -> float:
        return float(np.sqrt(gr @ (gr / G)))

    gn = norm(g)
    it = 0
    while it < max_iter and gn > tol:
        it += 1
        step = gauged_solve(H, g, prob.symmetry_directions(x, n))
        t = 1.0
        accepted = False
        for _ in range(30):
            x_new = x - t * step
            try:
                g_new, H_new = _derivatives(prob, x_new, n)
            except ValueError:
                t *= 0.5
                continue
            gn_new = norm(g_new)
            if np.isfinite(gn_new) and gn_new < gn:
                accepted = True
                break
            t *= 0.5
        if not accepted:
            break
        x, g, H, gn = x_new, g_new, H_new, gn_new
    return x, gn, it


def _derivatives(
    prob: YoungProblem, x: NDArray[np.float64], n: NDArray[np.float64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    _, g, H, _ = prob._evaluate(x, n, 2)
    assert g is not None and H is not None
    return g, H


def gauged_solve(
    A: NDArray[np.float64], b: NDArray[np.float64], S: NDArray[np.float64]
) -> NDArray[np.float64]:
    """The solution y of A y = b with S y = 0 (rows of S: flat symmetry directions, none for most problems):
    the bordered system [[A, S^T], [S, 0]] [y; l] = [b; 0], least squares if it is singular."""
    m = S.shape[0]
    if m:
        n = A.shape[0]
        K = np.zeros((n + m, n + m))
        K[:n, :n] = A
        K[:n, n:] = S.T
        K[n:, :n] = S
        rhs = np.concatenate([b, np.zeros(m)])
    else:
        K, rhs = A, b
    try:
        y = np.linalg.solve(K, rhs)
    except np.linalg.LinAlgError:
        y = np.linalg.lstsq(K, rhs, rcond=None)[0]
    return np.asarray(y[: A.shape[0]])
