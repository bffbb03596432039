"""Critical points of the population risk: Newton refinement, classification, Hessian spectra.

The parameters are theta = [vec(W) row-major, a, b] (``a`` only with ``train_readout=True``, the biases ``b`` only
with ``train_bias=True``), as in :func:`twolayer.population.hessian`. Networks with biases, fixed or trained, are
handled for every activation: where the model has a rescaling orbit (relu, linear, quadratic with a trained
readout; step units) the orbit (w_i, b_i, a_i) -> (c w_i, c b_i, c^-p a_i) carries trained biases, and a unit
with a fixed nonzero bias has none (see :mod:`twolayer.landscape.orbit`).
:func:`refine` solves grad R(theta) = 0 by Levenberg-Marquardt on the
gradient map with the analytic Hessian as its Jacobian (a trust-region Newton method): the step is
-V diag(l / (l^2 + mu)) V^T g from the eigendecomposition H = V diag(l) V^T, trying the pure Newton step
(mu = 0) first and growing mu until |grad R| decreases, so near a non-degenerate critical point it is
Newton's method and converges quadratically. The merit function is |grad R|, so saddles are found as well
as minima; start close to the point you want (e.g. from :func:`twolayer.landscape.multistart` or a
fixed-point-subspace solution).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import population
from .._deprecation import renamed_attribute
from .._validation import as_float_array, boolean, integer, positive
from ..networks import Network
from ..overlaps import check_pair
from .orbit import canonical, orbit_spectrum, orbit_tangents

__all__ = [
    "CriticalPoint", "refine", "spectrum", "classify", "symmetry_nullity", "flat_gradient", "non_differentiable"
]


@dataclass(eq=False)
class CriticalPoint:
    """A refined critical point (what :func:`refine` returns).

    Attributes
    ----------
    student : Network
        The network at the point.
    risk : float
        Its excess population risk (``loss``: its old spelling, deprecated).
    grad_norm : float
        Euclidean norm of the gradient on the trained parameters.
    eigenvalues : ndarray
        The Hessian spectrum, ascending; where the model has a rescaling
        orbit (relu, linear, quadratic with a trained second layer; step
        units) the spectrum across it, at the orbit's canonical point (see
        :mod:`twolayer.landscape.orbit`), which does not depend on where on
        the orbit the point was found.
    flat_eigenvalues : ndarray
        The Hessian on the orbit's tangents, one per unit (~0 at a critical
        point; empty without an orbit).
    index, nullity : int
        Eigenvalues below -``zero_tol``, and with ``abs(lambda) <= zero_tol``
        (flat ones included).
    kind : str
        The classification (below).
    converged : bool
        Whether ``grad_norm <= tol`` was reached.
    iterations : int
        Newton iterations taken.
    history : list of float
        The gradient norm at every iteration (for convergence-rate checks).
    train_readout : bool
        Whether the second layer is among the parameters.
    train_bias : bool
        Whether the student's biases are among the parameters.
    student
        With an orbit, its canonical point (``||w_i|| = |a_i|`` for relu).

    Notes
    -----
    ``kind`` is one of ``"global minimum"`` (risk <= ``global_tol``: the risk is non-negative, so no Hessian is needed),
    ``"spurious minimum"`` (index 0, no unexpected flat directions, a larger risk), ``"saddle"`` (index > 0),
    ``"degenerate"`` (index 0 but more flat directions than the continuous symmetries of the model explain:
    second order cannot decide) or ``"non-differentiable"`` (a relu or step student with a zero-norm row, or
    step units exactly aligned, at a risk above ``global_tol``: the risk has a kink there, so neither the
    gradient nor the Hessian classifies the point). ``eigenvalues`` is empty where the Hessian is undefined
    (exactly aligned step units). ``strict`` is True for the two minimum
    kinds.

    Examples
    --------
    >>> teacher = tl.landscape.identity_teacher(3)
    >>> cp = tl.landscape.refine(teacher.with_weights(np.eye(3) + 1e-3), teacher)
    >>> cp.kind, cp.strict, cp.spurious, cp.converged
    ('global minimum', True, False, True)
    """

    student: Network
    risk: float
    grad_norm: float
    eigenvalues: NDArray[np.float64]
    index: int
    nullity: int
    kind: str
    converged: bool
    iterations: int
    history: list[float] = field(default_factory=list)
    train_readout: bool = False
    flat_eigenvalues: NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    train_bias: bool = False

    loss = renamed_attribute("risk")

    @property
    def strict(self) -> bool:
        """True for a strict local minimum (modulo the model's continuous symmetries)."""
        return self.kind in ("global minimum", "spurious minimum")

    @property
    def is_minimum(self) -> bool:
        """Same as :attr:`strict`."""
        return self.strict

    @property
    def spurious(self) -> bool:
        """True for a spurious (non-global) strict minimum."""
        return self.kind == "spurious minimum"

    def spectrum(self, tol: float = 1e-7) -> list[tuple[float, int]]:
        """Distinct Hessian eigenvalues with multiplicities (see :func:`spectrum`).

        Parameters
        ----------
        tol : float, default 1e-7
            Relative gap below which sorted eigenvalues are one.

        Returns
        -------
        list of (float, int)
        """
        return group_eigenvalues(self.eigenvalues, positive(tol, "tol"))

    @classmethod
    def classified(
        cls,
        student: Network,
        teacher: Network,
        eigenvalues: NDArray[np.float64],
        grad_norm: float,
        train_readout: bool,
        zero_tol: float | None = None,
        global_tol: float = 1e-10,
        converged: bool = True,
        iterations: int = 0,
        history: list[float] | None = None,
        train_bias: bool = False,
    ) -> CriticalPoint:
        """The point ``student`` with its risk and the classification of its
        Hessian ``eigenvalues`` (the other arguments as in :func:`refine`).

        Where the model has a rescaling orbit the point is first moved to the
        orbit's canonical point, where the spectrum (split into transverse and
        flat parts) and the gradient norm are recomputed; ``eigenvalues`` is
        then not used.

        Returns
        -------
        CriticalPoint
        """
        check_pair(student, teacher, biases=True)
        train_readout, train_bias = boolean(train_readout, "train_readout"), boolean(train_bias, "train_bias")
        flat = np.empty(0)
        if orbit_tangents(student, train_readout, train_bias).shape[1]:
            student, eigenvalues, flat = orbit_spectrum(student, teacher, train_readout, train_bias)
            grad_norm = euclidean_norm(flat_gradient(student, teacher, train_readout, train_bias))
        risk = population.risk(student, teacher)
        index, nullity, kind = classify_spectrum(
            np.concatenate([flat, eigenvalues]), risk, symmetry_nullity(student, train_readout, train_bias),
            zero_tol, global_tol, non_differentiable(student, teacher)
        )
        return cls(student=student, risk=risk, grad_norm=grad_norm, eigenvalues=eigenvalues, index=index,
                   nullity=nullity, kind=kind, converged=converged, iterations=iterations,
                   history=[grad_norm] if history is None else history, train_readout=bool(train_readout),
                   flat_eigenvalues=flat, train_bias=bool(train_bias))

    def __repr__(self) -> str:
        return (
            f"CriticalPoint(kind={self.kind!r}, risk={self.risk:.6g}, grad_norm={self.grad_norm:.2e}, "
            f"index={self.index}, nullity={self.nullity}, K={self.student.K}, d={self.student.d})"
        )


def symmetry_nullity(student: Network, train_readout: bool, train_bias: bool = False) -> int:
    """Flat Hessian directions forced by continuous symmetries.

    Positive homogeneity of degree p gives one per unit, the rescaling
    (w_i, b_i, a_i) -> (c w_i, c b_i, c^-p a_i): for relu, linear (p = 1) and quadratic
    (p = 2) units with a trained second layer, and for step units (p = 0,
    (w_i, b_i) -> c (w_i, b_i)) always (see :mod:`twolayer.landscape.orbit`; units whose
    orbit is a point, or whose fixed bias is nonzero, are not counted). Linear networks have more (any
    (W, a) with the same a^T W): their critical points classify as
    "degenerate".

    Parameters
    ----------
    student : Network
        The student.
    train_readout : bool
        Whether the second layer is among the parameters.
    train_bias : bool, default False
        Whether the biases are among the parameters.

    Returns
    -------
    int

    Examples
    --------
    >>> net = tl.Network(np.eye(2), None, "relu")
    >>> tl.landscape.critical.symmetry_nullity(net, train_readout=True)
    2
    """
    return int(orbit_tangents(student, train_readout, train_bias).shape[1])


def non_differentiable(student: Network, teacher: Network) -> bool:
    """Whether the risk has a kink at ``student``.

    True for a relu or step student with a zero-norm row (its unit's angles
    are undefined), or step units exactly aligned with each other or with a
    step teacher unit (the Hessian is undefined there, see
    :func:`twolayer.population.hessian`).

    Parameters
    ----------
    student, teacher : Network
        The pair.

    Returns
    -------
    bool

    Examples
    --------
    >>> teacher = tl.landscape.identity_teacher(3)
    >>> zero_row = tl.Network(np.zeros((1, 3)), None, "relu", scaling="none")
    >>> tl.landscape.critical.non_differentiable(zero_row, teacher)
    True
    """
    if student.activation not in ("relu", "step"):
        return False
    if np.any(np.all(student.W == 0.0, axis=1)):
        return True
    return student.activation == "step" and population.aligned_step_units(student, teacher) is not None


def hessian_eigh(student: Network, teacher: Network, train_readout: bool,
                 train_bias: bool = False) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Eigen-decomposition of the Hessian; empty where it is undefined (exactly aligned step units)."""
    if student.activation == "step" and population.aligned_step_units(student, teacher) is not None:
        n = student.K * (student.d + (1 if train_readout else 0) + (1 if train_bias else 0))
        return np.empty(0), np.empty((n, 0))
    lam, V = np.linalg.eigh(population.hessian(student, teacher, train_readout=train_readout, train_bias=train_bias))
    return lam, V


def group_eigenvalues(eigenvalues: ArrayLike, tol: float) -> list[tuple[float, int]]:
    """(eigenvalue, multiplicity), ascending: sorted eigenvalues closer than ``tol * max(1, max |lambda|)`` to their
    neighbour are one (their mean), as :func:`spectrum` reports them."""
    lam = np.sort(np.asarray(eigenvalues, dtype=np.float64))
    if lam.size == 0:
        return []
    scale = max(1.0, float(np.max(np.abs(lam))))
    breaks = np.flatnonzero(np.diff(lam) > tol * scale) + 1
    return [(float(np.mean(g / scale) * scale), int(g.size)) for g in np.split(lam, breaks)]  # no overflow


def spectrum(H: ArrayLike, tol: float = 1e-7) -> list[tuple[float, int]]:
    """Distinct eigenvalues of a symmetric matrix with their multiplicities.

    Sorted eigenvalues closer than ``tol * max(1, max abs(lambda))`` to their
    neighbour are one eigenvalue (reported as the group mean).

    Parameters
    ----------
    H : array_like, shape (n, n)
        A symmetric matrix.
    tol : float, default 1e-7
        The relative gap (> 0).

    Returns
    -------
    list of (float, int)
        (eigenvalue, multiplicity), ascending.

    Examples
    --------
    >>> tl.landscape.spectrum(np.diag([1.0, 1.0, 2.0]))
    [(1.0, 2), (2.0, 1)]
    """
    H_ = as_float_array(H, "H", ndim=2)
    if H_.shape[0] != H_.shape[1]:
        raise ValueError(f"H: expected a square matrix, got shape {H_.shape}")
    tol_ = positive(tol, "tol")
    scale = float(np.max(np.abs(H_))) if H_.size else 0.0
    if not np.allclose(H_, H_.T, rtol=0.0, atol=1e-9 * scale):  # relative to the matrix's own scale
        raise ValueError("H: expected a symmetric matrix")
    # eigvalsh at the unit scale: LAPACK's internal norms overflow for entries near the double range
    norm = float(np.max(np.abs(H_))) if H_.size else 0.0
    unit = 1.0 if norm == 0.0 else norm
    with np.errstate(over="ignore"):
        lam = np.linalg.eigvalsh(0.5 * (H_ / unit + H_.T / unit)) * unit
    if not np.all(np.isfinite(lam)):
        raise ValueError(f"H: eigenvalues exceed the double range (max |H_ij| = {norm:.3g})")
    return group_eigenvalues(lam, tol_)


def unpack_weights(student: Network, x: NDArray[np.float64], train_readout: bool,
                   train_bias: bool = False) -> Network:
    """``student`` with the weights of the flat vector ``x`` (the inverse of :func:`pack_weights`)."""
    K, n = student.K, student.K * student.d
    W = x[:n].reshape(K, student.d)
    a = x[n:n + K] if train_readout else student.a
    bias = x[len(x) - K:] if train_bias else student.bias
    return student.with_weights(W, a, bias=bias)


def pack_weights(student: Network, train_readout: bool, train_bias: bool = False) -> NDArray[np.float64]:
    """The trained weights as one flat vector: [vec(W) row-major, a, b] (``a`` with ``train_readout``, ``b`` with
    ``train_bias``)."""
    return np.concatenate([student.W.ravel()] + ([student.a] if train_readout else [])
                          + ([student.bias] if train_bias else []))


def flat_gradient(student: Network, teacher: Network, train_readout: bool,
                  train_bias: bool = False) -> NDArray[np.float64]:
    """The population gradient on [vec(W), a, b] (``a`` with ``train_readout``, ``b`` with ``train_bias``) as one
    vector.

    Parameters
    ----------
    student, teacher : Network
        The pair.
    train_readout : bool
        Include dR/da.
    train_bias : bool, default False
        Include dR/db.

    Returns
    -------
    ndarray, shape (K d,), (K d + K,) or (K d + 2 K,)

    Examples
    --------
    >>> teacher = tl.landscape.identity_teacher(3)
    >>> g = tl.landscape.critical.flat_gradient(teacher, teacher, False)
    >>> g.shape, float(np.abs(g).max())
    ((9,), 0.0)
    """
    train_readout = boolean(train_readout, "train_readout")
    if boolean(train_bias, "train_bias"):
        dW, da, db = population.gradient(student, teacher, train_readout=train_readout, train_bias=True)
        return np.concatenate([dW.ravel()] + ([da] if train_readout else []) + [db])
    dW, da = population.gradient(student, teacher, train_readout=train_readout)
    return np.concatenate([dW.ravel(), da]) if train_readout else dW.ravel()


def classify(
    student: Network,
    teacher: Network,
    train_readout: bool = False,
    eigenvalues: NDArray[np.float64] | None = None,
    zero_tol: float | None = None,
    global_tol: float = 1e-10,
    train_bias: bool = False,
) -> tuple[int, int, str]:
    """Classify a critical point by its Hessian eigenvalues.

    Parameters
    ----------
    student, teacher : Network
        The point and the teacher.
    train_readout : bool, default False
        Whether the second layer is among the parameters.
    eigenvalues : ndarray, optional
        The Hessian spectrum (computed when not given, at the canonical
        point of the rescaling orbit; index and nullity do not depend on the
        point of the orbit, the Hessian changing by a congruence along it).
    zero_tol : float, optional
        Eigenvalues with ``abs(lambda) <= zero_tol`` count as zero (default
        1e-8 * max(1, max abs(lambda))).
    global_tol : float, default 1e-10
        Loss at or below which a point is a global minimum.
    train_bias : bool, default False
        Whether the student's biases are among the parameters (their orbit: see the module docstring).

    Returns
    -------
    index, nullity : int
    kind : str
        As in :class:`CriticalPoint`.

    Examples
    --------
    >>> teacher = tl.landscape.identity_teacher(3)
    >>> tl.landscape.classify(teacher, teacher)
    (0, 0, 'global minimum')
    """
    check_pair(student, teacher, biases=True)
    train_readout, train_bias = boolean(train_readout, "train_readout"), boolean(train_bias, "train_bias")
    zero_tol, global_tol = _tolerances(zero_tol, global_tol)
    if eigenvalues is not None:
        lam = as_float_array(eigenvalues, "eigenvalues", ndim=1)
    elif orbit_tangents(student, train_readout, train_bias).shape[1]:
        student, transverse, flat = orbit_spectrum(student, teacher, train_readout, train_bias)
        lam = np.concatenate([flat, transverse])
    else:
        lam = hessian_eigh(student, teacher, train_readout, train_bias)[0]
    return classify_spectrum(
        lam, population.risk(student, teacher), symmetry_nullity(student, train_readout, train_bias), zero_tol,
        global_tol, non_differentiable(student, teacher)
    )


def euclidean_norm(g: NDArray[np.float64]) -> float:
    """The Euclidean norm of ``g`` at the unit scale (no overflow of the squares for entries above 1e154)."""
    m = float(np.max(np.abs(g), initial=0.0))
    return m * float(np.linalg.norm(g / m)) if 0.0 < m < np.inf else m


def _tolerances(zero_tol: Any, global_tol: Any) -> tuple[float | None, float]:
    """``zero_tol`` (None or > 0) and ``global_tol`` (>= 0), checked."""
    return (None if zero_tol is None else positive(zero_tol, "zero_tol")), positive(
        global_tol, "global_tol", allow_zero=True)


def classify_spectrum(
    lam: NDArray[np.floating[Any]],
    risk: float,
    expected_null: int,
    zero_tol: float | None,
    global_tol: float,
    kink: bool = False,
) -> tuple[int, int, str]:
    """(index, nullity, kind) of a critical point from its Hessian eigenvalues ``lam`` and risk ``risk``: the
    counts below -ztol and within ztol (ztol = ``zero_tol``, else 1e-8 max(1, max |lam|)), and the kind
    ("global minimum", "non-differentiable", "saddle", "degenerate" or "spurious minimum")."""
    scale = max(1.0, float(np.max(np.abs(lam)))) if lam.size else 1.0
    ztol = 1e-8 * scale if zero_tol is None else zero_tol
    index = int(np.sum(lam < -ztol))
    nullity = int(np.sum(np.abs(lam) <= ztol))
    if risk <= global_tol:  # the risk is >= 0: zero risk is a global minimum whatever the Hessian says
        kind = "global minimum"
    elif kink:
        kind = "non-differentiable"
    elif index > 0:
        kind = "saddle"
    elif nullity > expected_null:
        kind = "degenerate"
    else:
        kind = "spurious minimum"
    return index, nullity, kind


def refine(
    student: Network,
    teacher: Network,
    tol: float = 1e-12,
    train_readout: bool = False,
    max_iter: int = 100,
    zero_tol: float | None = None,
    global_tol: float = 1e-10,
    train_bias: bool = False,
) -> CriticalPoint:
    """Refine ``student`` to a nearby critical point and classify it.

    Newton's method (Levenberg-Marquardt on grad R = 0 with the analytic
    Hessian), until the gradient norm is at most ``tol``. Where the model has
    a rescaling orbit (see :mod:`twolayer.landscape.orbit`) every iterate is
    moved to the orbit's canonical point, so the result is canonical.

    Parameters
    ----------
    student, teacher : Network
        The starting point and the teacher.
    tol : float, default 1e-12
        Target gradient norm (> 0). If it cannot be reached (floating-point
        floor, or no critical point nearby) the best point found is returned
        with ``converged=False``.
    train_readout : bool, default False
        Include the second layer in the parameters (and the Hessian).
    max_iter : int, default 100
        Newton iterations at most.
    zero_tol : float, optional
        Separates zero from non-zero eigenvalues (default
        1e-8 max abs(lambda)).
    global_tol : float, default 1e-10
        Loss below which a minimum counts as global.
    train_bias : bool, default False
        Include the student's biases in the parameters (and the Hessian); with a rescaling orbit they move
        with it (see the module docstring).

    Returns
    -------
    CriticalPoint
        The point, classified by its Hessian spectrum.

    Examples
    --------
    >>> teacher = tl.landscape.identity_teacher(3)
    >>> cp = tl.landscape.refine(teacher.with_weights(np.eye(3) + 1e-3), teacher)
    >>> cp.kind, cp.grad_norm < 1e-12
    ('global minimum', True)
    """
    check_pair(student, teacher, biases=True)
    tol_ = positive(tol, "tol")
    train_readout, tb = boolean(train_readout, "train_readout"), boolean(train_bias, "train_bias")
    max_iter = integer(max_iter, "max_iter", 0)
    zero_tol, global_tol = _tolerances(zero_tol, global_tol)

    def canon(net: Network) -> Network:  # iterates stay at the canonical point of their orbit
        return canonical(net, train_readout, tb)

    net = canon(student)
    x = pack_weights(net, train_readout, tb)
    g = flat_gradient(net, teacher, train_readout, tb)
    gn = euclidean_norm(g)
    history = [gn]
    lam, V = hessian_eigh(net, teacher, train_readout, tb)
    it = 0
    while it < max_iter and gn > tol_ and lam.size:
        it += 1
        gt = V.T @ g
        scale = max(1.0, float(np.max(np.abs(lam))))
        ztol = 1e-10 * scale
        # the pure Newton step first (pseudo-inverse: flat directions of continuous symmetries dropped), then
        # Levenberg-Marquardt damping mu = 1e-8, 1e-7, ... (relative to max |lambda|^2) until |grad| decreases
        accepted = False
        for mu in [0.0] + [10.0**e for e in range(-8, 8)]:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                inv = np.where(np.abs(lam) > ztol, lam / (lam * lam + mu * scale * scale), 0.0)
            x_new = x - V @ (inv * gt)
            try:
                net_new = canon(unpack_weights(student, x_new, train_readout, tb))
                x_new = pack_weights(net_new, train_readout, tb)
                g_new = flat_gradient(net_new, teacher, train_readout, tb)
            except ValueError:
                continue
            gn_new = euclidean_norm(g_new)
            if np.isfinite(gn_new) and gn_new < gn:
                accepted = True
                break
        if not accepted:
            break
        x, net, g, gn = x_new, net_new, g_new, gn_new
        history.append(gn)
        lam, V = hessian_eigh(net, teacher, train_readout, tb)
    return CriticalPoint.classified(net, teacher, lam, gn, train_readout, zero_tol, global_tol,
                                    converged=gn <= tol_, iterations=it, history=history, train_bias=tb)
