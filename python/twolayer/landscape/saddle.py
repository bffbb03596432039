"""Saddles of a given Morse index by eigenvector following, and the minima an index-1 saddle connects.

:func:`saddle_search` walks uphill along chosen Hessian eigenvectors and downhill along all others
(eigenvector following with partitioned rational-function steps, Cerjan & Miller 1981, Baker 1986), with the
exact population gradient and Hessian of :mod:`twolayer.population`. At a step theta -> theta + s, in the
Hessian's eigenbasis (lambda_i, g_i = v_i . grad R), the followed ("uphill") modes U and the others D take

    s_i = -g_i / (lambda_i - mu_U)  (i in U),    s_i = -g_i / (lambda_i - mu_D)  (i in D),

with mu_U the largest eigenvalue of [[diag(lambda_U), g_U], [g_U^T, 0]] and mu_D the smallest of the same
matrix over D, so that the step maximises the quadratic model along U and minimises it along D whatever the
signs of the eigenvalues; the step is cut to a trust radius that grows when the model predicts the change of
the risk well and shrinks when it does not. From a minimum (g = 0) the first step is a push of one trust
radius along the followed modes. The followed modes are tracked by overlap with the previous ones. Once the
Hessian has the requested number of negative eigenvalues and the gradient is small, :func:`refine` finishes
by Newton's method, and the point is classified from its exact Hessian (its Morse index is ``CriticalPoint.index``).
The flat directions of the rescaling orbit (relu with a trained second layer, step units; trained biases move with
it) are split off: the steps and the count of negative modes use the Hessian across the orbit. Either network may
have biases; ``train_bias`` searches over the student's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from .. import _core, population
from .._validation import INT32_MAX, boolean, integer, positive, real
from ..networks import Network
from ..overlaps import check_pair
from .critical import CriticalPoint, euclidean_norm, flat_gradient, hessian_eigh, pack_weights, refine, unpack_weights
from .orbit import complement, orbit_tangents

__all__ = ["saddle_search", "saddle_connections"]


def _start(start: Network | CriticalPoint, train_readout: bool | None,
           train_bias: bool | None) -> tuple[Network, bool, bool]:
    """The starting network and which parameters are trained (the CriticalPoint's, else False, unless given)."""
    if isinstance(start, CriticalPoint):
        net, tr, tb = start.student, start.train_readout, start.train_bias
    elif isinstance(start, Network):
        net, tr, tb = start, False, False
    else:
        raise TypeError(f"start: expected a Network or a CriticalPoint, got {type(start).__name__}")
    return (net, tr if train_readout is None else boolean(train_readout, "train_readout"),
            tb if train_bias is None else boolean(train_bias, "train_bias"))


def _transverse_eigh(net: Network, teacher: Network, tr: bool,
                     tb: bool) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The Hessian's eigen-decomposition across the rescaling orbit (on the orthogonal complement of its tangents,
    eigenvectors in the full coordinates; the full one without an orbit): away from a critical point the orbit's
    directions have small eigenvalues of either sign, which would otherwise count as negative modes."""
    lam, V = hessian_eigh(net, teacher, tr, tb)
    T = orbit_tangents(net, tr, tb)
    if not (T.shape[1] and lam.size):
        return lam, V
    P = complement(T)
    H = (V * lam) @ V.T
    lam_t, V_t = np.linalg.eigh(P.T @ (0.5 * (H + H.T)) @ P)
    return lam_t, P @ V_t


def _canonical_modes(
    lam: NDArray[np.float64], V: NDArray[np.float64], follow: list[int] | None, index: int
) -> NDArray[np.float64]:
    """The followed directions, platform-independent. ``follow`` holds positions among the distinct eigenvalues
    (a position repeated up to its multiplicity; None: the ``index`` lowest eigenvalues counted with
    multiplicity). Within each eigenspace (minus the directions already taken) the direction is the projection
    of the coordinate axis that projects longest, pointing along it: an eigensolver's basis of a degenerate
    eigenspace, and its signs, are arbitrary."""
    groups = _eigen_groups(lam)
    if follow is None:
        follow = [int(g) for g in groups[:index]]
    if max(follow) > groups[-1]:
        raise ValueError(f"modes: expected positions of distinct eigenvalues up to {int(groups[-1])}, got {follow}")
    out: list[NDArray[np.float64]] = []
    for p in follow:
        S = V[:, groups == p]
        for u in out:
            S = S - np.outer(u, u @ S)
        P = S @ np.linalg.pinv(S, rcond=1e-8)  # projector onto what is left of the eigenspace
        norms = np.diag(P)
        if norms.max() <= 1e-8:
            raise ValueError(f"modes: position {p} is repeated more often than its eigenvalue's multiplicity")
        j = int(np.flatnonzero(norms >= norms.max() - 1e-9)[0])
        out.append(P[:, j] / np.linalg.norm(P[:, j]))
    return np.stack(out, axis=1)


def _eigen_groups(lam: NDArray[np.float64]) -> NDArray[np.int64]:
    """Position of each (ascending) eigenvalue among the distinct ones (equal within 1e-7 of the largest |lam|)."""
    scale = max(1.0, float(np.max(np.abs(lam))))
    return np.concatenate([[0], np.cumsum(np.diff(lam) > 1e-7 * scale)])


def _aligned_basis(lam: NDArray[np.float64], V: NDArray[np.float64], U: NDArray[np.float64]) -> NDArray[np.float64]:
    """V with the basis of each degenerate eigenspace rotated so that its first vectors are the (orthonormalised)
    projections of the followed directions U: the steps then follow U rather than an eigensolver's arbitrary basis
    of the eigenspace, which rounding can turn (e.g. the 4-fold softest mode of the S_5-symmetric minima)."""
    groups = _eigen_groups(lam)
    out = V.copy()
    for g in np.unique(groups):
        cols = np.flatnonzero(groups == g)
        C = V[:, cols].T @ U  # U's projections onto the eigenspace, in its basis
        C = C[:, np.linalg.norm(C, axis=0) > 1e-6]
        if cols.size < 2 or C.shape[1] == 0:
            continue
        R, _ = np.linalg.qr(np.concatenate([C, np.eye(cols.size)], axis=1))  # Gram-Schmidt, C's columns first
        # (signs are immaterial: the push takes its sign from U, the other steps are sign-free)
        out[:, cols] = V[:, cols] @ R
    return out


def _rfo_step(lam: NDArray[np.float64], g: NDArray[np.float64], largest: bool) -> NDArray[np.float64]:
    """-g_i / (lambda_i - mu), mu the largest (smallest) eigenvalue of [[diag(lambda), g], [g^T, 0]]; 0 where
    g_i = 0 (a mode the gradient does not touch, whose denominator may vanish)."""
    n = lam.size
    A = np.zeros((n + 1, n + 1))
    A[:n, :n] = np.diag(lam)
    A[:n, n] = g
    A[n, :n] = g
    ev = np.linalg.eigvalsh(A)
    mu = float(ev[-1] if largest else ev[0])
    den = lam - mu
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((g == 0.0) | (den == 0.0), 0.0, -g / den)


def saddle_search(
    start: Network | CriticalPoint,
    teacher: Network,
    index: int = 1,
    modes: int | Sequence[int] | None = None,
    direction: float = 1.0,
    train_readout: bool | None = None,
    trust_radius: float = 0.05,
    max_iter: int = 1000,
    tol: float = 1e-12,
    switch_tol: float = 1e-5,
    zero_tol: float | None = None,
    global_tol: float = 1e-10,
    train_bias: bool | None = None,
) -> CriticalPoint:
    """Find a critical point of a given Morse index by eigenvector following.

    From ``start`` (typically a minimum), walk uphill along ``index`` Hessian
    eigenvectors and downhill along the others (partitioned
    rational-function steps in a trust region, see the module notes) until
    the Hessian has ``index`` negative eigenvalues and the gradient norm is
    below ``switch_tol``; then Newton's method (:func:`refine`) converges to
    the critical point and classifies it from its exact Hessian.

    Parameters
    ----------
    start : Network or CriticalPoint
        The starting point.
    teacher : Network
        The teacher.
    index : int, default 1
        The Morse index sought (>= 1).
    modes : int or sequence of int, optional
        Which Hessian eigenvectors at ``start`` to follow uphill: positions
        among its distinct eigenvalues (ascending, flat symmetry directions
        left out), ``index`` of them, a position repeated at most its
        multiplicity times (an int m: m repeated). Default: the ``index``
        softest, counted with multiplicity. Within a degenerate eigenspace
        the direction is chosen reproducibly (the projection of the
        coordinate axis that projects longest).
    direction : float, default 1.0
        The sign of the first push along the followed modes (+1 or -1): the
        two directions of one mode usually reach different saddles.
    train_readout : bool, optional
        Search over the second layer too (default: the start's, False for a
        Network).
    trust_radius : float, default 0.05
        Initial (and largest) Euclidean step length in parameter space.
    max_iter : int, default 1000
        Eigenvector-following steps at most.
    tol : float, default 1e-12
        Gradient norm the final Newton refinement aims for.
    switch_tol : float, default 1e-5
        Gradient norm below which Newton takes over.
    zero_tol, global_tol : float, optional
        Classification tolerances, as in :func:`refine`.
    train_bias : bool, optional
        Search over the students' biases too (default: the start's, False
        for a Network); either network may have biases.

    Returns
    -------
    CriticalPoint
        The point reached, classified by its exact Hessian; check ``index``
        and ``converged`` (the search can end at a critical point of another
        index, or fail to converge, and says so there). ``iterations`` counts
        eigenvector-following and Newton steps; ``history`` holds the
        gradient norms.

    Notes
    -----
    Index-1 searches from the k = 6 minima (every softest-mode start) end at index-1 saddles; searches for a
    higher index can wander (e.g. index 2 from the ΔS_5 minimum ends at a minimum after ``max_iter`` steps,
    although a degenerate index-2 point lies nearby): the result's ``index`` is the check.

    Examples
    --------
    An index-1 saddle next to the ΔS_5 spurious minimum at k = 6:

    >>> prob = tl.landscape.SubspaceProblem(tl.landscape.FixedPointSpace((5, 1)))
    >>> x, _, _ = prob.solve([1.0, -0.05, -0.6, 0.3, 0.2])
    >>> saddle = tl.landscape.saddle_search(prob.network(x), prob.teacher, index=1)
    >>> saddle.kind, saddle.index, saddle.grad_norm <= 1e-10
    ('saddle', 1, True)
    """
    student, tr, tb = _start(start, train_readout, train_bias)
    check_pair(student, teacher, biases=True)
    index = integer(index, "index", 1, INT32_MAX)
    direction_ = real(direction, "direction")
    if direction_ == 0.0:
        raise ValueError("direction: expected a non-zero sign, got 0")
    sign = 1.0 if direction_ > 0 else -1.0
    radius_max = positive(trust_radius, "trust_radius")
    max_iter = integer(max_iter, "max_iter", 0)
    tol_ = positive(tol, "tol")
    switch = positive(switch_tol, "switch_tol")
    if modes is None:
        follow: list[int] | None = None
    elif isinstance(modes, (int, np.integer)) and not isinstance(modes, bool):
        follow = [integer(modes, "modes", 0)] * index
    else:
        if not isinstance(modes, Sequence):
            raise TypeError(f"modes: expected an int or a sequence of ints, got {type(modes).__name__}")
        follow = [integer(m, f"modes[{i}]", 0) for i, m in enumerate(modes)]
        if len(follow) != index:
            raise ValueError(f"modes: expected {index} eigenvalue positions (index={index}), got {follow}")

    net = student
    x = pack_weights(net, tr, tb)
    g = flat_gradient(net, teacher, tr, tb)
    lam, V = _transverse_eigh(net, teacher, tr, tb)
    if lam.size == 0:
        raise ValueError("start: the Hessian is undefined there (exactly aligned step units)")
    ztol = 1e-8 * max(1.0, float(np.max(np.abs(lam)))) if zero_tol is None else positive(zero_tol, "zero_tol")
    live = np.flatnonzero(np.abs(lam) > ztol)
    if index > live.size:
        raise ValueError(f"index: expected at most {live.size} (the non-flat Hessian directions), got {index}")
    U = _canonical_modes(lam[live], V[:, live], follow, index)  # the followed directions, tracked by overlap
    radius = radius_max
    history = [euclidean_norm(g)]
    it = 0
    best, stale = np.inf, 0
    while it < max_iter:
        gn = euclidean_norm(g)
        n_neg = int(np.sum(lam < -ztol))
        if gn <= tol_ and (n_neg == index or n_neg > index and it > 0):
            break  # converged (to another index when n_neg > index: the result says so)
        if n_neg == index and gn <= switch:
            # eigenvector following converges by itself near a saddle of the right index: go on while it
            # improves (Newton could slide off a degenerate one), then let refine finish
            stale = stale + 1 if gn >= 0.5 * best else 0
            best = min(best, gn)
            if gn <= tol_ or stale >= 3:
                break
        it += 1
        live = np.flatnonzero(np.abs(lam) > ztol)
        Vl = _aligned_basis(lam[live], V[:, live], U)
        overlap = np.abs(Vl.T @ U)  # (live, followed)
        chosen: list[int] = []
        for j in range(U.shape[1]):
            order = np.argsort(-overlap[:, j])
            pick = next(int(i) for i in order if int(i) not in chosen)
            chosen.append(pick)
        up = np.array(chosen)
        down = np.setdiff1d(np.arange(live.size), up)
        lam_l = lam[live]
        gt = Vl.T @ g
        s = np.zeros(live.size)
        if (it == 1 and gn <= switch) or (n_neg < index and np.linalg.norm(gt[up]) <= 1e-3 * gn):
            # at a stationary point (or no uphill gradient yet): push along the followed modes
            signs = np.sign(Vl[:, up].T @ U).diagonal() * sign
            s[up] = signs * radius / np.sqrt(up.size)
        else:
            s[up] = _rfo_step(lam_l[up], gt[up], largest=True)
        if down.size:
            s[down] = _rfo_step(lam_l[down], gt[down], largest=False)
        norm = float(np.linalg.norm(s))
        if norm > radius:
            s *= radius / norm
        step = Vl @ s
        predicted = float(gt @ s + 0.5 * np.sum(lam_l * s * s))
        x_new = x + step
        net_new = unpack_weights(student, x_new, tr, tb)
        try:  # a point where the risk cannot be evaluated (e.g. a quadrature that does not converge): a shorter step
            g_new = flat_gradient(net_new, teacher, tr, tb)
            actual = population.risk(net_new, teacher) - population.risk(net, teacher)
            lam_new, V_new = _transverse_eigh(net_new, teacher, tr, tb)
        except ValueError:
            radius *= 0.5
            continue
        ratio = actual / predicted if predicted != 0.0 else 1.0
        radius = min(radius_max, 1.5 * radius) if 0.75 < ratio < 1.33 else (
            max(0.5 * radius, 1e-6) if not 0.25 < ratio < 4.0 else radius)
        U = Vl[:, up]
        x, net, g, lam, V = x_new, net_new, g_new, lam_new, V_new
        history.append(euclidean_norm(g))
    cp = refine(net, teacher, tol=tol_, train_readout=tr, zero_tol=zero_tol, global_tol=global_tol, train_bias=tb)
    cp.iterations += it
    cp.history = history + cp.history[1:]
    return cp


def saddle_connections(
    saddle: CriticalPoint,
    teacher: Network,
    step: float = 1e-3,
    max_iter: int = 20000,
    tol: float = 1e-12,
) -> tuple[CriticalPoint, CriticalPoint]:
    """The two critical points reached by descending from an index-1 saddle along ± its unstable direction.

    Starts at theta ± ``step`` v (v the eigenvector of the negative
    eigenvalue), minimises by the core's L-BFGS (the one of
    :func:`multistart`) and refines each end point (:func:`refine`).

    Parameters
    ----------
    saddle : CriticalPoint
        An index-1 saddle (e.g. from :func:`saddle_search`).
    teacher : Network
        The teacher.
    step : float, default 1e-3
        Length of the displacement off the saddle.
    max_iter : int, default 20000
        L-BFGS iterations at most.
    tol : float, default 1e-12
        Gradient norm of the refinement.

    Returns
    -------
    (CriticalPoint, CriticalPoint)
        The ends along +v and -v, classified.

    Examples
    --------
    >>> prob = tl.landscape.SubspaceProblem(tl.landscape.FixedPointSpace((5, 1)))
    >>> x, _, _ = prob.solve([1.0, -0.05, -0.6, 0.3, 0.2])
    >>> saddle = tl.landscape.saddle_search(prob.network(x), prob.teacher)
    >>> ends = tl.landscape.saddle_connections(saddle, prob.teacher)
    >>> sorted(end.kind for end in ends)
    ['global minimum', 'spurious minimum']
    """
    if not isinstance(saddle, CriticalPoint):
        raise TypeError(f"saddle: expected a CriticalPoint, got {type(saddle).__name__}")
    check_pair(saddle.student, teacher, biases=True)
    step_ = positive(step, "step")
    max_iter = integer(max_iter, "max_iter", 1, INT32_MAX)
    tol_ = positive(tol, "tol")
    tr, tb = saddle.train_readout, saddle.train_bias
    lam, V = _transverse_eigh(saddle.student, teacher, tr, tb)
    if lam.size == 0 or int(np.sum(lam < -1e-8 * max(1.0, float(np.max(np.abs(lam)))))) != 1:
        raise ValueError(f"saddle: expected an index-1 saddle, got index {saddle.index}")
    v = V[:, 0]
    x = pack_weights(saddle.student, tr, tb)
    K, d = saddle.student.K, saddle.student.d
    starts = [unpack_weights(saddle.student, x + s * step_ * v, tr, tb) for s in (1.0, -1.0)]
    W0 = np.stack([s.W for s in starts])
    a0 = np.stack([s.effective_a for s in starts])  # the core works on the effective second layer c a
    biased = tb or saddle.student.has_bias or teacher.has_bias
    out = _core.multistart_lbfgs(
        np.ascontiguousarray(W0.reshape(2, K, d)), np.ascontiguousarray(a0), saddle.student.activation,
        np.ascontiguousarray(teacher.W), np.ascontiguousarray(teacher.effective_a), teacher.activation,
        saddle.student.scale, train_readout=tr, max_iter=max_iter, gtol=1e-10, memory=10, n_threads=0,
        progress=None, b=np.stack([s.bias for s in starts]) if biased else None,
        teacher_bias=teacher.bias if biased else None, train_bias=tb)
    ends = []
    for r in range(2):
        net = saddle.student.with_weights(out["W"][r], out["a"][r] / saddle.student.readout_factor if tr else None,
                                          bias=out["b"][r] if biased else None)
        ends.append(refine(net, teacher, tol=tol_, train_readout=tr, train_bias=tb))
    return ends[0], ends[1]
