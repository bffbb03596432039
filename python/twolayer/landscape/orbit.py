"""The rescaling orbit of positively homogeneous units: canonical representative, flat directions, split spectrum.

For an activation homogeneous of degree p (sigma(c z) = c^p sigma(z) for c > 0: linear and relu p = 1, quadratic
p = 2, step p = 0) the unit output a_i sigma(w_i . x) is unchanged by

    (w_i, b_i, a_i) -> (c w_i, c b_i, c^-p a_i),   c > 0

(with biases, lambda_i = w_i . x / sqrt(s) + b_i scales by c), so the population risk is constant on this orbit
(one dimension per unit) whenever it is a change of the trained parameters: with a trained second layer for
p >= 1, always for step units (p = 0, a_i is untouched); and a unit with a nonzero bias only when the biases are
trained (``train_bias``: a fixed b_i != 0 breaks the rescaling of that unit). Hence

- the orbit's tangent t_i = (w_i, -p a_i, b_i) (on unit i's entries of theta = [vec(W), a, b], zero elsewhere;
  a and b where they are trained) is a flat direction of the Hessian at every critical point (differentiate
  grad R(D theta) = D^-1 grad R(theta) in c);
- the Hessian transforms by congruence, H(D theta) = D^-1 H(theta) D^-1, so index and nullity do not depend on
  the point of the orbit but the eigenvalues and the isotropy (equal rows need equal scales) do.

:func:`canonical` picks one point per orbit, the one of least norm ``||theta||``: c_i with
``||c w_i||^2 + (c b_i)^2 = p (c^-p a_i)^2`` (b_i with trained biases), i.e. ``||w_i||^2 + b_i^2 = a_i^2`` for
relu and linear (the "balanced" point, where the quantity ``||w_i||^2 + b_i^2 - p a_i^2`` that gradient flow
conserves vanishes); unit rows ``||w_i|| = 1`` for step units (their risk depends on directions only). Row and
column permutations map balanced points to balanced points, so the representative of a symmetric orbit is
symmetric: its isotropy is the orbit's. :func:`split_spectrum` separates the Hessian's action on the tangents
(``flat``, ~0 at a critical point) from its action on their orthogonal complement (``transverse``); at a
critical point the tangent span is invariant, so the two together are exactly the spectrum, and at the canonical
point neither depends on where on the orbit one started.

At exactly aligned step units (a kink of the risk) the Hessian is undefined: the classification paths report no
spectrum there. Normalising their rows is harmless: the risk takes the angles of step pairs from chords, exact
at alignment.

Not covered: erf (not homogeneous: no continuous symmetry of this kind); the discrete sign symmetries of linear
(c < 0) and quadratic (w_i -> -w_i) units; the larger continuous symmetry of linear networks (any (W, a) with the
same a^T W is the same function: Kd + K - d flat directions, of which only the K rescalings are split off here).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import population
from .._validation import as_float_array, boolean
from ..activations import ACTIVATIONS, hermite_coefficients, is_custom, is_hermite
from ..networks import Network, check_network

__all__ = ["homogeneity_degree", "orbit_tangents", "canonical", "canonical_weights", "split_spectrum"]

# sigma(c z) = c^p sigma(z) for c > 0 (erf: not homogeneous)
_DEGREE = {"linear": 1, "relu": 1, "quadratic": 2, "step": 0}


def homogeneity_degree(activation: str) -> int | None:
    """The degree p of positive homogeneity, sigma(c z) = c^p sigma(z) for c > 0.

    Parameters
    ----------
    activation : str
        An activation name.

    Returns
    -------
    int or None
        1 for linear and relu, 2 for quadratic, 0 for step, None for erf and the
        smooth activations (tanh, sigmoid, softplus, gelu, silu, sin, cos); for a hermite activation, k when it is
        the monomial c s^k, None otherwise; None for a custom activation (no homogeneity is assumed).

    Examples
    --------
    >>> tl.landscape.homogeneity_degree("relu"), tl.landscape.homogeneity_degree("erf")
    (1, None)
    """
    if isinstance(activation, str) and is_hermite(activation):  # homogeneous when one monomial: sum c_k He_k = c s^k
        p = np.polynomial.hermite_e.herme2poly(hermite_coefficients(activation))
        nonzero = np.flatnonzero(p)
        return int(nonzero[0]) if nonzero.size == 1 else None
    if isinstance(activation, str) and is_custom(activation):  # a user function: no homogeneity assumed
        return None
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"activation: expected one of {list(ACTIVATIONS)}, got {activation!r}")
    return _DEGREE.get(activation)


def has_orbit(activation: str, train_readout: bool) -> bool:
    """Whether the risk has a continuous rescaling orbit (flat Hessian directions) for ``activation``: homogeneous
    units (hermite monomials too) with a trained readout, or units of degree 0 (step)."""
    p = homogeneity_degree(activation)
    return p is not None and (p == 0 or train_readout)


def _row_norms(W: NDArray[np.float64]) -> NDArray[np.float64]:
    """Row norms at the unit scale (no overflow of the squares)."""
    m = np.max(np.abs(W), axis=-1)
    safe = np.where(m > 0, m, 1.0)
    return np.asarray(m * np.linalg.norm(W / safe[..., None], axis=-1), dtype=np.float64)


def orbit_units(bias: ArrayLike | None, train_bias: bool) -> NDArray[np.bool_]:
    """Which units' rescaling is a change of the trained parameters as far as the biases go: all with
    ``train_bias`` (b_i scales with w_i), else those with b_i = 0 (a fixed nonzero bias breaks the rescaling)."""
    b = np.zeros(0) if bias is None else np.asarray(bias, dtype=np.float64)
    return np.ones(b.shape, dtype=bool) if train_bias else np.asarray(b == 0.0)


def canonical_weights(
    W: ArrayLike, a: ArrayLike, activation: str, train_readout: bool, bias: ArrayLike | None = None,
    train_bias: bool = False
) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """The canonical point of the rescaling orbit, for one or a batch of weight sets.

    Parameters
    ----------
    W : array_like, shape (..., K, d)
        First layers.
    a : array_like, shape (..., K)
        Second layers.
    activation : str
        The units' activation.
    train_readout : bool
        Whether the second layer is among the parameters.
    bias : array_like, shape (..., K), optional
        The biases (default zeros). A unit with a nonzero bias that is not
        trained has no orbit (c = 1).
    train_bias : bool, default False
        Whether the biases are among the parameters: they scale with the
        rows, ``b_out = c b``, and enter the balance
        ``||w_i||^2 + b_i^2 = p a_i^2``.

    Returns
    -------
    W, a : ndarray
        The canonical representative (copies; unchanged where there is no
        orbit, and for units with w_i = 0 or, for p >= 1, a_i = 0).
    c : ndarray, shape (..., K)
        The factors: W_out = c W, a_out = c^-p a (and b_out = c b).

    Examples
    --------
    >>> W, a, c = tl.landscape.canonical_weights(np.diag([4.0, 1.0]), [1.0, 4.0], "relu", True)
    >>> W, a, c
    (array([[2., 0.],
           [0., 2.]]), array([2., 2.]), array([0.5, 2. ]))
    """
    W_ = as_float_array(W, "W").copy()
    a_ = as_float_array(a, "a").copy()
    if W_.ndim < 2 or a_.shape != W_.shape[:-1]:
        raise ValueError(f"W, a: expected shapes (..., K, d) and (..., K), got {W_.shape} and {a_.shape}")
    train_readout = boolean(train_readout, "train_readout")
    train_bias = boolean(train_bias, "train_bias")
    b_ = np.zeros(a_.shape) if bias is None else as_float_array(bias, "bias")
    if b_.shape != a_.shape:
        raise ValueError(f"bias: expected shape {a_.shape} like a, got {b_.shape}")
    p = homogeneity_degree(activation)
    c = np.ones(a_.shape)
    if not has_orbit(activation, train_readout):
        return W_, a_, c
    units = orbit_units(b_, train_bias)
    norms = _row_norms(W_)
    if p == 0:
        ok = (norms > 0) & units
        c = np.where(ok, 1.0 / np.where(ok, norms, 1.0), 1.0)
    else:
        assert p is not None
        if train_bias:  # the balance counts the bias with the row: ||(w_i, b_i)||
            norms = _row_norms(np.concatenate([W_, b_[..., None]], axis=-1))
        ok = (norms > 0) & (a_ != 0) & units
        # c^(p+1) = sqrt(p) |a| / |w|: directly where the ratio is a normal number (a few ulps), else in
        # logarithms (norms near the double range)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            r = np.sqrt(p) * np.abs(a_) / norms
            direct = ok & np.isfinite(r) & (r >= np.finfo(np.float64).tiny)
            log_c = (0.5 * np.log(p) + np.log(np.abs(a_)) - np.log(norms)) / (p + 1)
            c_direct = np.sqrt(r) if p == 1 else r ** (1.0 / (p + 1))
        c = np.where(direct, c_direct, np.where(ok, np.exp(np.where(ok, log_c, 0.0)), 1.0))
    W_ *= c[..., None]
    for _ in range(p or 0):  # a / c^p one factor at a time: c^p may overflow where a / c^p does not
        a_ /= c
    return W_, a_, c


def canonical(student: Network, train_readout: bool, train_bias: bool = False) -> Network:
    """The canonical representative of ``student``'s rescaling orbit.

    The point of least norm on the orbit (w_i, b_i, a_i) -> (c w_i, c b_i, c^-p a_i):
    ``||w_i||^2 + b_i^2 = p a_i^2`` (b_i with ``train_bias``), so ``||w_i|| = |a_i|`` for relu and linear without
    biases; ``||w_i|| = 1`` for step units. The same network function, the same risk.

    Parameters
    ----------
    student : Network
        The point.
    train_readout : bool
        Whether the second layer is among the parameters (without it only
        step units have an orbit).
    train_bias : bool, default False
        Whether the biases are among the parameters (units with a fixed
        nonzero bias have no orbit).

    Returns
    -------
    Network
        ``student`` itself where there is no orbit (erf; relu, linear and
        quadratic without ``train_readout``).

    Examples
    --------
    A global minimum away from the balanced point has trivial isotropy until
    it is canonicalised:

    >>> teacher = tl.landscape.identity_teacher(3)
    >>> c = np.array([2.0, 0.5, 3.0])
    >>> student = tl.Network(np.diag(c), 1 / c, "relu", scaling="none")
    >>> tl.landscape.isotropy(student.W, a=student.a).description
    '1'
    >>> can = tl.landscape.canonical(student, train_readout=True)
    >>> tl.landscape.isotropy(can.W, a=can.a).description
    'ΔS_3'
    """
    check_network(student, "student", biases=True)
    train_readout = boolean(train_readout, "train_readout")
    if not has_orbit(student.activation, train_readout):
        return student
    W, a, c = canonical_weights(student.W, student.a, student.activation, train_readout, student.bias, train_bias)
    return student.with_weights(W, a, bias=c * student.bias)


def orbit_tangents(student: Network, train_readout: bool, train_bias: bool = False) -> NDArray[np.float64]:
    """Orthonormal tangents of the rescaling orbit, one per unit.

    t_i = (w_i, -p a_i, b_i) on unit i's entries of theta = [vec(W) row-major, a, b]
    (a with ``train_readout``, b with ``train_bias``; step units: (w_i, 0, b_i)),
    normalised; tangents of different units have disjoint supports.

    Parameters
    ----------
    student : Network
        The point.
    train_readout : bool
        Whether the second layer is among the parameters.
    train_bias : bool, default False
        Whether the biases are among the parameters (a unit with a fixed
        nonzero bias has no orbit).

    Returns
    -------
    ndarray, shape (n_params, m)
        m = K where there is an orbit (units whose tangent vanishes, or
        whose fixed bias is nonzero, are left out), else 0.

    Examples
    --------
    >>> net = tl.Network(np.eye(2), [1.0, 1.0], "relu", scaling="none")
    >>> T = tl.landscape.orbit_tangents(net, train_readout=True)
    >>> T.shape, bool(np.allclose(T.T @ T, np.eye(2)))
    ((6, 2), True)
    """
    check_network(student, "student", biases=True)
    train_readout = boolean(train_readout, "train_readout")
    train_bias = boolean(train_bias, "train_bias")
    K, d = student.K, student.d
    n = K * d + (K if train_readout else 0) + (K if train_bias else 0)
    if not has_orbit(student.activation, train_readout):
        return np.zeros((n, 0))
    p = homogeneity_degree(student.activation)
    assert p is not None  # has_orbit
    T = np.zeros((n, K))
    for i in range(K):
        T[i * d:(i + 1) * d, i] = student.W[i]
        if train_readout:
            T[K * d + i, i] = -p * student.a[i]
        if train_bias:
            T[n - K + i, i] = student.bias[i]
    m = np.max(np.abs(T), axis=0)
    keep = (m > 0) & orbit_units(student.bias, train_bias)
    T = T[:, keep] / m[keep]
    return np.asarray(T / np.linalg.norm(T, axis=0), dtype=np.float64)


def complement(tangents: NDArray[np.float64]) -> NDArray[np.float64]:
    """An orthonormal basis (n, n - m) of the complement of orthonormal columns (n, m) (internal: the directions
    across an orbit)."""
    n, m = tangents.shape
    return np.linalg.qr(tangents, mode="complete")[0][:, m:] if m else np.eye(n)


def split_spectrum(H: ArrayLike, tangents: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The Hessian's eigenvalues across and along given orthonormal directions.

    With T the tangents and P an orthonormal basis of their complement:
    ``transverse`` = eig(P^T H P), ``flat`` = eig(T^T H T). Where H T = 0
    (the tangents of a symmetry orbit at a critical point) the two together
    are the spectrum of H.

    Parameters
    ----------
    H : array_like, shape (n, n)
        A symmetric matrix.
    tangents : array_like, shape (n, m)
        Orthonormal columns.

    Returns
    -------
    transverse : ndarray, shape (n - m,)
    flat : ndarray, shape (m,)
        Both ascending.

    Examples
    --------
    >>> H = np.diag([0.0, 2.0, 3.0])
    >>> tl.landscape.split_spectrum(H, np.array([[1.0], [0.0], [0.0]]))
    (array([2., 3.]), array([0.]))
    """
    H_ = as_float_array(H, "H", ndim=2)
    T = as_float_array(tangents, "tangents", ndim=2)
    n = H_.shape[0]
    if H_.shape != (n, n) or T.shape[0] != n or T.shape[1] > n:
        raise ValueError(f"H, tangents: expected shapes (n, n) and (n, m <= n), got {H_.shape} and {T.shape}")
    if not np.allclose(T.T @ T, np.eye(T.shape[1]), rtol=0.0, atol=1e-10):
        raise ValueError("tangents: expected orthonormal columns")
    # at the unit scale (no overflow in the products for entries near the double range)
    unit = float(np.max(np.abs(H_), initial=0.0)) or 1.0
    Hs = H_ / unit
    if not np.allclose(Hs, Hs.T, rtol=0.0, atol=1e-9):
        raise ValueError("H: expected a symmetric matrix")
    Hs = 0.5 * (Hs + Hs.T)
    P = complement(T)
    with np.errstate(over="ignore"):
        transverse = np.linalg.eigvalsh(P.T @ Hs @ P) * unit
        flat = np.linalg.eigvalsh(T.T @ Hs @ T) * unit if T.shape[1] else np.empty(0)
    if not (np.all(np.isfinite(transverse)) and np.all(np.isfinite(flat))):
        raise ValueError(f"H: eigenvalues exceed the double range (max |H_ij| = {unit:.3g})")
    return np.asarray(transverse, dtype=np.float64), np.asarray(flat, dtype=np.float64)


def orbit_spectrum(
    student: Network, teacher: Network, train_readout: bool, train_bias: bool = False
) -> tuple[Network, NDArray[np.float64], NDArray[np.float64]]:
    """Canonicalise, then split the Hessian spectrum there (internal: the point as it is and empty spectra where
    the Hessian is undefined, i.e. at exactly aligned step units)."""
    if student.activation == "step" and population.aligned_step_units(student, teacher) is not None:
        return student, np.empty(0), np.empty(0)
    can = canonical(student, train_readout, train_bias)
    T = orbit_tangents(can, train_readout, train_bias)
    H = population.hessian(can, teacher, train_readout=train_readout, train_bias=train_bias)
    transverse, flat = split_spectrum(H, T)
    return can, transverse, flat
