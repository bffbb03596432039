"""Targets: what the labels y are a function of.

A target is one of

* a committee :class:`~twolayer.Network` (today's teacher, y = sum_r v_r sigma*(w*_r . x / sqrt(s))): committee
  targets *are* Networks (:func:`committee` builds one), so every engine treats them exactly as before;
* a :class:`HermiteTarget`: a polynomial multi-index function of k orthonormal projections,

      y = f(z) + sqrt(Delta) xi,   f(z) = sum_alpha c_alpha prod_r He_{alpha_r}(z_r),   z = W* x / sqrt(s),

  with He_n the probabilists' Hermite polynomials (He_0 = 1, He_1 = z, He_2 = z^2 - 1, He_3 = z^3 - 3z, ...) and
  W* (k, d) with orthonormal rows in the package's scaling (W* W*^T / s = I_k, s = d for ``"sqrt_d"``), so that
  z ~ N(0, I_k). Every engine takes it: population risk and gradient, SGD, and the order-parameter ODEs (online
  and gradient flow, spherical too), whose expectations are exact (Gaussian conditioning on the student fields,
  then closed-form orthant moments; see ``cpp/include/twolayer/target.hpp``). The overlaps are then Q (K, K),
  M (K, k) and P = I_k;
* a :class:`FunctionTarget`: any vectorised NumPy function of the k projections, for SGD only (labels are
  computed in Python, so it is slower; the ODE and the exact population risk refuse it).

Hermite structure (reported by :class:`HermiteTarget`): the *information exponent* is the smallest degree ``|alpha|``
>= 1 of a nonzero coefficient (for a single-index He_n it is n); the *leap* is the smallest L such that the terms
can be ordered so that each adds degree at most L in directions no earlier term touched (Abbe, Boix-Adsera &
Misiakiewicz 2023: Leap(S) = min over orderings max_i sum_{r not in supp(alpha_1..alpha_{i-1})} alpha_{i,r}). The
staircase z1 + z1 z2 + z1 z2 z3 has leap 1, z1 z2 leap 2, He_n(z1) leap n.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._validation import INT32_MAX, as_float_array, boolean, choice, describe, integer, real, seed_arg
from .activations import ActivationName
from .networks import Network, random_weights

Scaling = Literal["sqrt_d", "none"]

__all__ = ["FunctionTarget", "HermiteTarget", "Target", "committee", "function", "hermite", "hermite_single",
           "is_target", "staircase"]

# Orthonormality tolerance of given directions: max |W* W*^T / s - I| (relative).
_ORTHO_TOL = 1e-8


def _directions(directions: ArrayLike | None, k: int | None, d: int | None, seed: int | None, scaling: str,
                name: str = "directions") -> NDArray[np.float64]:
    """The (k, d) directions: given (checked orthonormal in the scaling), or Haar-random from ``d`` and ``seed``."""
    s_ok = choice(scaling, "scaling", ("sqrt_d", "none"))
    if directions is None:
        if d is None:
            raise TypeError("d: give the input dimension d (and seed) or the directions W* (k, d)")
        d_ = integer(d, "d", 1, INT32_MAX)
        assert k is not None
        if k > d_:
            raise ValueError(f"d: the target has k = {k} directions, more than the input dimension d = {d_}")
        return random_weights(k, d_, "orthogonal", np.random.default_rng(seed_arg(seed, allow_none=True)), s_ok)
    if seed is not None:
        raise ValueError(f"seed: draws random directions, but {name} are given (the seed would be ignored), got seed = "
                         f"{describe(seed)}; give either d and seed, or {name}")
    W = as_float_array(directions, name, ndim=2)
    if k is not None and W.shape[0] != k:
        raise ValueError(f"{name}: the coefficients use k = {k} directions, but {name} has {W.shape[0]} rows "
                         f"(shape {W.shape})")
    if d is not None and W.shape[1] != integer(d, "d", 1, INT32_MAX):
        raise ValueError(f"{name}: expected d = {d} columns, got {W.shape[1]}")
    s = float(W.shape[1]) if s_ok == "sqrt_d" else 1.0
    err = float(np.max(np.abs(W @ W.T / s - np.eye(W.shape[0]))))
    if not err <= _ORTHO_TOL:
        norm = "sqrt(d)" if s_ok == "sqrt_d" else "1"
        raise ValueError(f"{name}: expected orthonormal rows in the {s_ok!r} scaling (W* W*^T / s = I_k, rows of norm "
                         f"{norm}, mutually orthogonal), got max |W* W*^T / s - I| = {err:.3g}")
    return W


@dataclass(frozen=True, eq=False)
class _Projected:
    """Common part of targets that depend on x through z = W* x / sqrt(s)."""

    directions: NDArray[np.float64]
    scaling: Scaling

    @property
    def k(self) -> int:
        """Number of directions."""
        return int(self.directions.shape[0])

    @property
    def d(self) -> int:
        """Input dimension."""
        return int(self.directions.shape[1])

    @property
    def scale(self) -> float:
        """s in z = W* x / sqrt(s)."""
        return float(self.d) if self.scaling == "sqrt_d" else 1.0

    def projections(self, X: ArrayLike) -> NDArray[np.float64]:
        """z = W* x / sqrt(s) of inputs X (n, d) -> (n, k)."""
        X_ = as_float_array(X, "X", ndim=2)
        if X_.shape[1] != self.d:
            raise ValueError(f"X: expected {self.d} columns, got {X_.shape[1]}")
        return np.asarray(X_ @ self.directions.T / math.sqrt(self.scale))

    def __call__(self, X: ArrayLike) -> NDArray[np.float64]:
        """Noiseless labels f(z) on inputs X (n, d)."""
        return self.function(self.projections(X))

    def function(self, z: ArrayLike) -> NDArray[np.float64]:  # pragma: no cover - overridden
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class HermiteTarget(_Projected):
    """f(z) = sum_alpha c_alpha prod_r He_{alpha_r}(z_r) over k orthonormal directions (module docstring).

    ``coefficients`` maps exponent tuples (length k) to coefficients (zero terms dropped). Build one with
    :func:`hermite`, :func:`staircase` or :func:`hermite_single`.

    Attributes
    ----------
    directions : ndarray, shape (k, d)
        W*, orthonormal rows in the scaling (W* W*^T / s = I_k).
    scaling : {"sqrt_d", "none"}
        s = d (``"sqrt_d"``) or 1 in z = W* x / sqrt(s).
    coefficients : dict of tuple of int to float
        {alpha: c_alpha}.

    Examples
    --------
    >>> tgt = tl.targets.staircase(3, d=20, seed=0)
    >>> tgt
    HermiteTarget(k=3, d=20, f = 1 He(1, 0, 0) + 1 He(1, 1, 0) + 1 He(1, 1, 1))
    >>> tgt.degree, tgt.leap, tgt.information_exponent, tgt.mean, tgt.variance
    (3, 1, 1, 0.0, 3.0)
    >>> X = np.random.default_rng(0).standard_normal((4, 20))
    >>> tgt.projections(X).shape, tgt(X).shape
    ((4, 3), (4,))
    """

    coefficients: dict[tuple[int, ...], float]

    def _arrays(self) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """(exponents (n_terms, k), coefficients (n_terms,)) for the core."""
        if not self.coefficients:
            return np.zeros((1, self.k), dtype=np.int64), np.zeros(1)
        alpha = np.array(list(self.coefficients), dtype=np.int64).reshape(-1, self.k)
        return alpha, np.array(list(self.coefficients.values()), dtype=np.float64)

    def function(self, z: ArrayLike) -> NDArray[np.float64]:
        """f at projections z (n, k) -> (n,)."""
        z_ = as_float_array(z, "z", ndim=2)
        if z_.shape[1] != self.k:
            raise ValueError(f"z: expected {self.k} columns, got {z_.shape[1]}")
        return np.asarray(_core.target_eval(*self._arrays(), z_))

    @property
    def degree(self) -> int:
        """The largest ``|alpha|`` of a nonzero term."""
        return max((sum(a) for a in self.coefficients), default=0)

    @property
    def mean(self) -> float:
        """E[f] = c_0 (the constant term)."""
        return float(self.coefficients.get((0,) * self.k, 0.0))

    @property
    def second_moment(self) -> float:
        """E[f^2] = sum_alpha c_alpha^2 alpha! (alpha! = prod_r alpha_r!)."""
        return float(sum(c * c * math.prod(math.factorial(e) for e in a) for a, c in self.coefficients.items()))

    @property
    def variance(self) -> float:
        """Var f = sum_{alpha != 0} c_alpha^2 alpha!."""
        return self.second_moment - self.mean**2

    @property
    def information_exponent(self) -> int:
        """Smallest ``|alpha| >= 1`` with c_alpha != 0 (0 for a constant target)."""
        return min((sum(a) for a in self.coefficients if sum(a) > 0), default=0)

    @property
    def leap(self) -> int:
        """The leap complexity (module docstring): staircases 1, z1 z2 2, He_n(z1) n."""
        terms = [a for a in self.coefficients if sum(a) > 0]
        for L in range(0, self.degree + 1):
            covered: set[int] = set()
            left = list(terms)
            progress = True
            while left and progress:
                progress = False
                for a in list(left):
                    if sum(e for r, e in enumerate(a) if r not in covered) <= L:
                        covered |= {r for r, e in enumerate(a) if e > 0}
                        left.remove(a)
                        progress = True
            if not left:
                return L
        return self.degree  # pragma: no cover - L = degree always succeeds

    def __repr__(self) -> str:
        terms = " + ".join(f"{c:g} He{a}" for a, c in self.coefficients.items()) or "0"
        return f"HermiteTarget(k={self.k}, d={self.d}, f = {terms})"


@dataclass(frozen=True, eq=False)
class FunctionTarget(_Projected):
    """y = fn(z) for a vectorised NumPy function ``fn``: (n, k) array -> (n,) array. SGD only (labels computed in
    Python: slower than polynomial targets); the ODE and the exact population quantities refuse it. Build one
    with :func:`function`.

    Attributes
    ----------
    directions : ndarray, shape (k, d)
        W*, orthonormal rows in the scaling.
    scaling : {"sqrt_d", "none"}
        s = d (``"sqrt_d"``) or 1 in z = W* x / sqrt(s).
    fn : callable
        (n, k) array -> (n,) array.

    Examples
    --------
    >>> tgt = tl.targets.function(lambda z: np.tanh(z[:, 0] * z[:, 1]), k=2, d=10, seed=0)
    >>> tgt.k, tgt.d, tgt(np.ones((3, 10))).shape
    (2, 10, (3,))
    """

    fn: Callable[[NDArray[np.float64]], Any]

    def function(self, z: ArrayLike) -> NDArray[np.float64]:
        """fn at projections z (n, k) -> (n,), checked."""
        z_ = as_float_array(z, "z", ndim=2)
        y = np.asarray(self.fn(z_), dtype=np.float64)
        if y.shape != (z_.shape[0],):
            raise ValueError(f"fn: expected the target function to return shape ({z_.shape[0]},) for z of shape "
                             f"{z_.shape}, got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("fn: the target function returned non-finite values")
        return y


Target = Network | HermiteTarget | FunctionTarget


def is_target(x: Any) -> bool:
    """Whether ``x`` is a non-committee target (HermiteTarget or FunctionTarget).

    Parameters
    ----------
    x : object
        Anything.

    Returns
    -------
    bool
        False for a committee :class:`~twolayer.Network` (the engines' teacher path) and for anything else.

    Examples
    --------
    >>> tl.targets.is_target(tl.targets.hermite_single(2, d=10, seed=0))
    True
    >>> tl.targets.is_target(tl.targets.committee(np.eye(2, 10) * np.sqrt(10)))
    False
    """
    return isinstance(x, _Projected)


def _coefficients(coefficients: Any) -> tuple[dict[tuple[int, ...], float], int]:
    if not isinstance(coefficients, Mapping):
        raise TypeError(f"coefficients: expected a dict {{(alpha_1, ..., alpha_k): c}}, got "
                        f"{type(coefficients).__name__}")
    if not coefficients:
        raise ValueError("coefficients: expected at least one term")
    out: dict[tuple[int, ...], float] = {}
    k = None
    for key, c in coefficients.items():
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            key = (key,)
        if not isinstance(key, tuple) or not key:
            raise TypeError(f"coefficients: keys must be non-empty tuples of exponents, got {key!r}")
        alpha = tuple(integer(e, f"coefficients key {key!r}", 0, 60) for e in key)
        if k is None:
            k = len(alpha)
        elif len(alpha) != k:
            raise ValueError(f"coefficients: every key must have the same length k, got {k} and {len(alpha)} "
                             f"({key!r})")
        value = real(c, f"coefficients[{key!r}]")
        if value != 0.0:
            out[alpha] = out.get(alpha, 0.0) + value
    assert k is not None
    return out, k


def hermite(
    coefficients: Mapping[tuple[int, ...], float],
    d: int | None = None,
    seed: int | None = None,
    *,
    directions: ArrayLike | None = None,
    scaling: Scaling = "sqrt_d",
) -> HermiteTarget:
    """A polynomial multi-index target from its Hermite coefficients {alpha: c_alpha} (module docstring).

    The number of directions k is the length of the keys. ``directions`` (k, d): W* with orthonormal rows in the
    ``scaling`` (ValueError otherwise, or when its row count differs from k); without it, Haar-random orthonormal
    directions in dimension ``d`` from ``seed``.

    Parameters
    ----------
    coefficients : dict of tuple of int to float
        {(alpha_1, ..., alpha_k): c_alpha}, every key of the same length k (an int key is a 1-tuple).
    d : int, optional
        Input dimension of random directions (needed without ``directions``).
    seed : int, optional
        Seed of the random directions.
    directions : array_like, shape (k, d), optional
        W*, orthonormal rows in the ``scaling``.
    scaling : {"sqrt_d", "none"}, default "sqrt_d"
        z = W* x / sqrt(d) (``"sqrt_d"``) or W* x.

    Returns
    -------
    HermiteTarget

    Examples
    --------
    >>> tgt = tl.targets.hermite({(1, 0, 0): 1.0, (1, 1, 0): 1.0, (1, 1, 1): 1.0}, d=100, seed=0)
    >>> tgt.k, tgt.leap, tgt.information_exponent, tgt.variance
    (3, 1, 1, 3.0)
    """
    coefs, k = _coefficients(coefficients)
    if directions is not None:
        W = as_float_array(directions, "directions", ndim=2)
        if k > W.shape[0]:
            raise ValueError(f"coefficients: the keys have k = {k} exponents (directions), but directions has only "
                             f"{W.shape[0]} rows")
    W = _directions(directions, k, d, seed, scaling)
    return HermiteTarget(directions=W, scaling=scaling, coefficients=coefs)


def staircase(k: int, d: int | None = None, seed: int | None = None, *, directions: ArrayLike | None = None,
              scaling: Scaling = "sqrt_d") -> HermiteTarget:
    """The staircase z1 + z1 z2 + ... + z1 z2 ... zk (leap 1, variance k).

    Parameters
    ----------
    k : int
        Number of directions (steps of the staircase).
    d, seed, directions, scaling
        As in :func:`hermite`.

    Returns
    -------
    HermiteTarget

    Examples
    --------
    >>> tgt = tl.targets.staircase(3, d=20, seed=0)
    >>> tgt.k, tgt.leap, tgt.variance
    (3, 1, 3.0)
    """
    k = integer(k, "k", 1, 60)
    coefs = {tuple(1 if r <= j else 0 for r in range(k)): 1.0 for j in range(k)}
    return hermite(coefs, d, seed, directions=directions, scaling=scaling)


def hermite_single(degree: int, d: int | None = None, seed: int | None = None, *, normalized: bool = True,
                   directions: ArrayLike | None = None, scaling: Scaling = "sqrt_d") -> HermiteTarget:
    """The single-index target He_n(z1) (information exponent and leap n), divided by sqrt(n!) so that its
    variance is 1 unless ``normalized=False``.

    Parameters
    ----------
    degree : int
        n >= 1.
    d, seed, directions, scaling
        As in :func:`hermite` (one direction).
    normalized : bool, default True
        Divide by sqrt(n!) (unit variance).

    Returns
    -------
    HermiteTarget

    Examples
    --------
    >>> tgt = tl.targets.hermite_single(2, d=10, seed=0)
    >>> tgt.information_exponent, tgt.leap, round(tgt.variance, 12)
    (2, 2, 1.0)
    >>> tgt.function(np.array([[0.0], [1.0]])).round(6).tolist()
    [-0.707107, 0.0]
    """
    n = integer(degree, "degree", 1, 60)
    c = 1.0 / math.sqrt(math.factorial(n)) if boolean(normalized, "normalized") else 1.0
    return hermite({(n,): c}, d, seed, directions=directions, scaling=scaling)


def function(fn: Callable[[NDArray[np.float64]], Any], k: int | None = None, d: int | None = None,
             seed: int | None = None, *, directions: ArrayLike | None = None,
             scaling: Scaling = "sqrt_d") -> FunctionTarget:
    """y = fn(z) for a vectorised NumPy function of the k projections (SGD only, slower).

    Parameters
    ----------
    fn : callable
        (n, k) array -> (n,) array of finite values.
    k : int, optional
        Number of directions (needed without ``directions``).
    d, seed, directions, scaling
        As in :func:`hermite`.

    Returns
    -------
    FunctionTarget

    Examples
    --------
    >>> tgt = tl.targets.function(lambda z: z[:, 0] * z[:, 1], k=2, d=10, seed=0)
    >>> tgt.function(np.array([[2.0, 3.0]])).tolist()
    [6.0]
    """
    if not callable(fn):
        raise TypeError(f"fn: expected a callable (n, k) -> (n,), got {type(fn).__name__}")
    k_ = None if k is None else integer(k, "k", 1, INT32_MAX)
    if k_ is None and directions is None:
        raise TypeError("k: give the number of directions k (or the directions W*)")
    W = _directions(directions, k_, d, seed, scaling)
    return FunctionTarget(directions=W, scaling=scaling, fn=fn)


def committee(W: ArrayLike, v: ArrayLike | None = None, activation: ActivationName = "erf",
              scaling: Scaling = "sqrt_d", readout: Literal["sum", "mean"] = "sum") -> Network:
    """A committee target y = c sum_r v_r sigma*(w*_r . x / sqrt(s)): a :class:`~twolayer.Network`, the teacher
    every engine has always taken (results are bitwise those of the same Network).

    Parameters
    ----------
    W : array_like, shape (M, d)
        Teacher weights w*_r.
    v : array_like, shape (M,), optional
        Second layer (default ones).
    activation : str, default "erf"
        sigma*.
    scaling : {"sqrt_d", "none"}, default "sqrt_d"
        Pre-activation scaling.
    readout : {"sum", "mean"}, default "sum"
        c = 1 or 1 / M.

    Returns
    -------
    Network

    Examples
    --------
    >>> tgt = tl.targets.committee(np.eye(2, 10) * np.sqrt(10), activation="relu")
    >>> tgt.K, tgt.activation
    (2, 'relu')
    """
    return Network(W, v, activation, scaling, readout)
