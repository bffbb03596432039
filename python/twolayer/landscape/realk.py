"""Families of critical points at real k (the "fractional dimension" of Arjevani & Field 2021).

For the Safran-Shamir problem (teacher W* = I_k, lambda = w.x, unit teacher second layer) restricted to the
fixed-point space of a Young subgroup Δ(S_n1 × ... × S_nr) (consecutive blocks, as in
:class:`~twolayer.landscape.FixedPointSpace`), every overlap is a polynomial in the block sizes, so the
restricted risk, its exact gradient and Hessian and the Hessian eigenvalues of every isotypic component are
analytic functions of real sizes (:class:`~twolayer.landscape.YoungProblem`). :func:`continue_real_k`
follows a family of critical points along sizes(k) by pseudo-arclength continuation in log k with Newton
correctors on the exact reduced gradient (so k -> infinity is followed in a few dozen steps, to k ~ 1e8), tracks
the Morse index of every component (across the rescaling orbit, with a trained second layer) and locates each
eigenvalue crossing (where a family turns from saddle into minimum) to about 1e-12 in k.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._deprecation import renamed_attribute
from .._validation import as_float_array, boolean, positive
from ..activations import ActivationName, check_activation
from .young import IsotypicSpectrum, YoungProblem, gauged_solve, newton

__all__ = ["reduced_risk", "reduced_layout", "RealKFamily", "Crossing", "continue_real_k"]


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
    return YoungProblem(max(n.size, 1)).risk(x, n)


@dataclass(frozen=True)
class Crossing:
    """An eigenvalue of one isotypic component crossing zero along a real-k family.

    Attributes
    ----------
    k : float
        Where (the root of the eigenvalue, to about 1e-12).
    component : str
        The isotypic component (see :class:`~twolayer.landscape.YoungProblem`).
    position : int
        Which of the component's eigenvalues (0 = smallest).
    negative_before, negative_after : int
        The component's negative eigenvalues before and after, in the
        direction of continuation.

    Examples
    --------
    >>> c = tl.landscape.Crossing(5.6, "standard[0]", 0, 1, 0)
    >>> c.component, c.negative_after
    ('standard[0]', 0)
    """

    k: float
    component: str
    position: int
    negative_before: int
    negative_after: int


@dataclass(eq=False)
class RealKFamily:
    """A family of critical points on a grid of real k (what :func:`continue_real_k` returns).

    Attributes
    ----------
    k : ndarray, shape (n,)
        The grid points reached.
    sizes : ndarray, shape (n, r)
        The block sizes there.
    x : ndarray, shape (n, dim)
        Coordinates of the critical point (:class:`FixedPointSpace` order).
    risk : ndarray, shape (n,)
        Its excess risk (``loss``: its old spelling, deprecated).
    grad_norm : ndarray, shape (n,)
        Its full-gradient norm.
    eigenvalues : dict of str to ndarray, shape (n, m)
        The Hessian eigenvalues of each isotypic component (ascending);
        with a rescaling orbit (relu with a trained second layer) those
        across the orbit's tangents (:attr:`IsotypicSpectrum.eigenvalues`),
        the ones whose signs and crossings are tracked.
    dimension : dict of str to ndarray, shape (n,)
        The multiplicity of each component's eigenvalues in the full spectrum.
    index : ndarray, shape (n,)
        The Morse index (sum of negative eigenvalues x dimension; real
        between integers).
    crossings : list of Crossing
        Every eigenvalue crossing zero on the path, located by root finding.
    k_turn : float or None
        The first crossing where the index changes between zero and
        non-zero (saddle <-> minimum), or None.
    status : str
        "completed", or why the continuation stopped early: "fold" (the
        branch turns back in k), "step too small" (Newton failed at the
        smallest step) or "layout changed" (a block size crossed 1 or 3).
    message : str
        Details of an early stop.
    n_steps : int
        Accepted continuation steps (``steps``: the former spelling, deprecated).
    flat_eigenvalues : dict of str to ndarray, shape (n, m)
        Each component's eigenvalues along the rescaling orbit's tangents
        (~0; m = 0 without an orbit), kept apart from ``eigenvalues``.

    Examples
    --------
    >>> import dataclasses
    >>> [f.name for f in dataclasses.fields(tl.landscape.RealKFamily)][:6]
    ['k', 'sizes', 'x', 'risk', 'grad_norm', 'eigenvalues']

    See :func:`continue_real_k` for one computed.
    """

    k: NDArray[np.float64]
    sizes: NDArray[np.float64]
    x: NDArray[np.float64]
    risk: NDArray[np.float64]
    grad_norm: NDArray[np.float64]
    eigenvalues: dict[str, NDArray[np.float64]]
    dimension: dict[str, NDArray[np.float64]]
    index: NDArray[np.float64]
    crossings: list[Crossing] = field(default_factory=list)
    k_turn: float | None = None
    status: str = "completed"
    message: str = ""
    n_steps: int = 0
    flat_eigenvalues: dict[str, NDArray[np.float64]] = field(default_factory=dict)

    loss = renamed_attribute("risk")
    steps = renamed_attribute("n_steps")

    @property
    def trivial(self) -> NDArray[np.float64]:
        """The trivial-representation eigenvalues, shape (n, m)."""
        return self.eigenvalues["trivial"]

    @property
    def standard(self) -> NDArray[np.float64]:
        """The standard-representation eigenvalues of the first block, shape (n, m)."""
        return self.eigenvalues["standard[0]"]


def _sizes_at(sizes: Callable[[float], Sequence[float]], k: float) -> NDArray[np.float64]:
    """The block sizes ``sizes(k)``, checked to be integers >= 1 or reals > 3 (so that the refined layouts of
    :meth:`YoungProblem.spectrum` keep their coordinates)."""
    n = as_float_array(sizes(k), "sizes(k)", ndim=1)
    bad = [float(v) for v in n if not (v == round(v) and v >= 1.0) and not v > 3.0]
    if bad:
        raise ValueError(f"sizes: expected block sizes that are integers >= 1 or reals > 3 (so that the refined "
                         f"layouts keep their coordinates), got {n.tolist()} at k = {k}")
    return n


def _negatives(spec: IsotypicSpectrum, tol: float) -> dict[str, int]:
    """The number of eigenvalues below ``-tol`` in each isotypic component."""
    return {c: int(np.sum(v < -tol)) for c, v in spec.eigenvalues.items()}


def _default_sizes(k: float) -> tuple[float, float]:
    """The ΔS_{k-1} family's block sizes (k - 1, 1)."""
    return (k - 1.0, 1.0)


@dataclass
class _Point:
    """A solved point of the family with what the continuation carries on from it.

    ``t`` is the unit tangent in (x, log k) and ``neg`` the count of negative eigenvalues of each component.
    """

    x: NDArray[np.float64]
    k: float
    grad_norm: float
    t: NDArray[np.float64]
    spec: IsotypicSpectrum
    neg: dict[str, int]


@dataclass
class _Trial:
    """One continuation step's corrected point: ``ok`` if solved, ``landed`` if on the next grid point."""

    x: NDArray[np.float64]
    k: float
    grad_norm: float
    iterations: int
    ok: bool
    landed: bool


@dataclass
class _Path:
    """What the continuation reports: the grid points reached, the crossings found and why it stopped."""

    k: list[float] = field(default_factory=list)
    x: list[NDArray[np.float64]] = field(default_factory=list)
    spec: list[IsotypicSpectrum] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    crossings: list[Crossing] = field(default_factory=list)
    status: str = "completed"
    message: str = ""
    n_steps: int = 0

    def record(self, point: _Point) -> None:
        """Report ``point`` as a grid point."""
        self.k.append(point.k)
        self.x.append(point.x.copy())
        self.spec.append(point.spec)
        self.grad_norm.append(point.grad_norm)

    def stop(self, status: str, message: str) -> None:
        """End the continuation early, saying why."""
        self.status, self.message = status, message


class _Continuation:
    """The reduced problem along sizes(k) in (x, log k): sizes, derivatives, tangents and Newton correctors.

    Parameters
    ----------
    prob : YoungProblem
        The problem on the fixed-point space.
    sizes : callable
        Real k -> block sizes.
    tol : float
        Target full-gradient norm.
    direction : float
        +1 or -1: the sign of the change of k along the path.
    """

    def __init__(self, prob: YoungProblem, sizes: Callable[[float], Sequence[float]], tol: float,
                 direction: float) -> None:
        self.prob = prob
        self.sizes = sizes
        self.tol = tol
        self.direction = direction

    def size_vector(self, k: float) -> NDArray[np.float64]:
        """The block sizes at k (checked)."""
        return _sizes_at(self.sizes, k)

    def grad(self, x: NDArray[np.float64], k: float) -> NDArray[np.float64]:
        """The exact reduced gradient at (x, k)."""
        return self.prob.gradient(x, self.size_vector(k))

    def d_ds(self, x: NDArray[np.float64], k: float) -> NDArray[np.float64]:
        """d grad / d log k: central differences, or the one-sided second-order rule where a neighbour k -+ dk
        has sizes outside the allowed ones (a grid point on the edge, e.g. k = 4 of the (k - 1, 1) family)."""
        dk = 1e-5 * k
        if self.allowed(k - dk) and self.allowed(k + dk):
            return k * (self.grad(x, k + dk) - self.grad(x, k - dk)) / (2.0 * dk)
        side = 1.0 if self.allowed(k + 2.0 * dk) else -1.0
        g1, g2 = self.grad(x, k + side * dk), self.grad(x, k + 2.0 * side * dk)
        return side * k * (4.0 * g1 - g2 - 3.0 * self.grad(x, k)) / (2.0 * dk)

    def allowed(self, k: float) -> bool:
        """Whether the block sizes at k are allowed ones (see ``_sizes_at``)."""
        try:
            self.size_vector(k)
        except ValueError:
            return False
        return True

    def solved(self, x: NDArray[np.float64], k: float, gn: float) -> bool:
        """gn <= tol, or at the gradient's rounding level where that is larger (large k)."""
        return bool(gn <= self.tol or gn <= self.prob.gradient_floor(x, self.size_vector(k)))

    def bordered(self, x: NDArray[np.float64], k: float, row: NDArray[np.float64]) -> NDArray[np.float64]:
        """The Jacobian [[H, d grad / d log k], [row]] of (gradient, arclength condition) in (x, log k)."""
        A = np.zeros((x.size + 1, x.size + 1))
        A[:-1, :-1] = self.prob.hessian(x, self.size_vector(k))
        A[:-1, -1] = self.d_ds(x, k)
        A[-1] = row
        return A

    def gauge(self, x: NDArray[np.float64], k: float) -> NDArray[np.float64]:
        """The rescaling orbit's tangents in (x, log k) (rows; none without an orbit): steps are kept normal to them."""
        S = self.prob.symmetry_directions(x, self.size_vector(k))
        return np.hstack([S, np.zeros((S.shape[0], 1))])

    def tangent(self, x: NDArray[np.float64], k: float, prev: NDArray[np.float64]) -> NDArray[np.float64]:
        """The unit tangent of the family in (x, log k) at a solved point, oriented along ``prev``."""
        A = self.bordered(x, k, prev)
        t = gauged_solve(A, np.concatenate([np.zeros(x.size), [1.0]]), self.gauge(x, k))
        return t / np.linalg.norm(t)

    def point(self, x: NDArray[np.float64], k: float, grad_norm: float, prev: NDArray[np.float64],
              zero_tol: float) -> _Point:
        """The solved point (x, k) with its tangent (oriented along ``prev``) and isotypic spectrum."""
        t = self.tangent(x, k, prev)
        spec = self.prob.spectrum(x, self.size_vector(k))
        return _Point(x, k, grad_norm, t, spec, _negatives(spec, zero_tol))

    def step(self, start: _Point, h: float, target: float) -> _Trial | None:
        """An arclength step h from ``start``, or a landing on ``target`` if the step would reach it.

        None where the tangent turns away from the target (a fold, which stops the continuation first).
        """
        z = np.concatenate([start.x, [np.log(start.k)]])
        zp = z + h * start.t
        if self.direction * (zp[-1] - np.log(target)) >= 0.0:
            return self.land(start, target)
        return self.correct_on_arc(zp, start.t, h)

    def land(self, start: _Point, target: float) -> _Trial | None:
        """The tangent predictor at k = ``target`` corrected by Newton at fixed k."""
        t = start.t
        if t[-1] * self.direction <= 0:  # pragma: no cover - folds stop below
            return None
        xp = start.x + t[:-1] * (np.log(target) - np.log(start.k)) / t[-1]
        x_new, gn_new, its = newton(self.prob, xp, self.size_vector(target), self.tol, 12)
        return _Trial(x_new, target, gn_new, its, self.solved(x_new, target, gn_new), True)

    def correct_on_arc(self, zp: NDArray[np.float64], t: NDArray[np.float64], h: float) -> _Trial:
        """Newton on (gradient = 0, t . (z - zp) = 0) from the predictor zp = (x, log k): at most 12 iterations,
        stopped where the sizes leave their range, the gradient is not finite or a correction exceeds 10 h."""
        zc = zp.copy()
        ok = False
        its = 0
        for _ in range(12):
            its += 1
            xc, kc = zc[:-1], float(np.exp(zc[-1]))
            try:
                self.size_vector(kc)
            except ValueError:
                break
            g = self.grad(xc, kc)
            A = self.bordered(xc, kc, t)
            rhs = -np.concatenate([g, [t @ (zc - zp)]])
            dz = gauged_solve(A, rhs, self.gauge(xc, kc))
            zc = zc + dz
            gnc = self.prob.gradient_norm(zc[:-1], self.size_vector(float(np.exp(zc[-1]))))
            if self.solved(zc[:-1], float(np.exp(zc[-1])), gnc):
                ok = True
                break
            if not np.isfinite(gnc) or np.linalg.norm(dz) > 10 * h:
                break
        x_new, k_new = zc[:-1], float(np.exp(zc[-1]))
        gn_new = self.prob.gradient_norm(x_new, self.size_vector(k_new)) if ok else np.inf
        return _Trial(x_new, k_new, gn_new, its, ok, False)

    def eigenvalue_on_chord(self, a: _Point, b: _Point, comp: str, pos: int, k: float) -> float:
        """Eigenvalue ``pos`` of component ``comp`` at k, the point re-solved from the chord between a and b."""
        xg = a.x + (b.x - a.x) * (k - a.k) / (b.k - a.k)
        n = self.size_vector(k)
        xs, _, _ = newton(self.prob, xg, n, 1e-3 * self.tol, 12)  # Newton to its floating-point floor
        return float(self.prob.spectrum(xs, n).eigenvalues[comp][pos])

    def crossings(self, a: _Point, b: _Point) -> list[Crossing]:
        """Every eigenvalue crossing zero between two consecutive points, located by root finding in k."""
        out: list[Crossing] = []
        for comp in a.spec.eigenvalues:
            if b.neg[comp] == a.neg[comp]:
                continue
            pos = min(a.neg[comp], b.neg[comp])
            f = functools.partial(self.eigenvalue_on_chord, a, b, comp, pos)
            kc = _illinois(f, a.k, b.k, float(a.spec.eigenvalues[comp][pos]), float(b.spec.eigenvalues[comp][pos]))
            out.append(Crossing(kc, comp, pos, a.neg[comp], b.neg[comp]))
        return out


def _grid_direction(ks: NDArray[np.float64], k0: float) -> float:
    """The direction (+1 or -1) of a strictly monotone grid running away from k0 (checked)."""
    if ks.size == 0:
        raise ValueError("ks: expected at least one value of k")
    d = np.diff(ks)
    if ks.size > 1 and not (np.all(d > 0) or np.all(d < 0)):
        raise ValueError(f"ks: expected a strictly monotone grid, got {ks.tolist()[:8]}")
    direction = float(np.sign(ks[-1] - k0)) if ks.size > 1 or ks[0] != k0 else 1.0
    if ks.size > 1 and np.sign(ks[-1] - ks[0]) != direction or direction * (ks[0] - k0) < 0:
        raise ValueError(f"ks: expected a grid running away from k0 = {k0}, got {ks.tolist()[:8]}")
    return direction


def _adapted_step(h: float, iterations: int, h_min: float, h_max: float) -> float:
    """The next arclength step: doubled after an easy correction (<= 3 Newton iterations), halved after a hard
    one (>= 6)."""
    if iterations <= 3:
        return min(2.0 * h, h_max)
    if iterations >= 6:
        return max(0.5 * h, h_min)
    return h


def _follow(cont: _Continuation, start: _Point, ks: NDArray[np.float64], zero_tol: float, h_max: float,
            h_min: float) -> tuple[_Path, _Point]:
    """Pseudo-arclength continuation from ``start`` through the grid ``ks``; returns the path and its last point."""
    path = _Path()
    layout = cont.prob.layout(cont.size_vector(start.k))
    targets = list(ks)
    if targets and targets[0] == start.k:
        path.record(start)
        targets.pop(0)
    h = min(h_max, 0.1)
    point = start
    while targets:
        trial = cont.step(point, h, targets[0])
        if trial is None:  # pragma: no cover - folds stop below
            break
        if not trial.ok:
            h *= 0.5
            if h < h_min:
                path.stop("step too small", f"Newton failed at k = {point.k:.12g} with step {2 * h:.3g}")
                break
            continue
        if cont.prob.layout(cont.size_vector(trial.k)) != layout:
            path.stop("layout changed", f"the coordinates change between k = {point.k} and k = {trial.k}")
            break
        path.n_steps += 1
        new = cont.point(trial.x, trial.k, trial.grad_norm, point.t, zero_tol)
        if set(new.spec.eigenvalues) != set(point.spec.eigenvalues):
            path.stop("layout changed", f"the isotypic components change between k = {point.k} and k = {trial.k}")
            break
        path.crossings += cont.crossings(point, new)
        point = new
        if point.t[-1] * cont.direction <= 0.0:
            path.stop("fold", f"the branch turns back in k near k = {point.k:.12g}")
            break
        if trial.landed:
            path.record(point)
            targets.pop(0)
        h = _adapted_step(h, trial.iterations, h_min, h_max)
    return path, point


def _family(cont: _Continuation, path: _Path, first: _Point, last: _Point, zero_tol: float) -> RealKFamily:
    """The :class:`RealKFamily` of a continuation path (``first``, ``last``: its first and last points)."""
    path.crossings.sort(key=lambda c: cont.direction * c.k)
    comps = list(last.spec.eigenvalues)
    n_out = len(path.k)
    S = np.array([cont.size_vector(kk) for kk in path.k]).reshape(n_out, cont.prob.r)
    eig = {c: np.array([s.eigenvalues[c] for s in path.spec]).reshape(n_out, last.spec.eigenvalues[c].size)
           for c in comps}
    flat = {c: np.array([s.flat[c] for s in path.spec]).reshape(n_out, last.spec.flat[c].size) for c in comps}
    dims = {c: np.array([s.dimension[c] for s in path.spec]) for c in comps}
    index = np.array([s.index(zero_tol) for s in path.spec])
    k_turn = _turn(path.crossings, first.spec, zero_tol)
    risk = np.array([cont.prob.risk(xx, S[i]) for i, xx in enumerate(path.x)])
    X = np.array(path.x).reshape(n_out, first.x.size)
    return RealKFamily(np.array(path.k), S, X, risk, np.array(path.grad_norm), eig, dims, index, path.crossings,
                       k_turn, path.status, path.message, path.n_steps, flat)


def continue_real_k(
    x0: ArrayLike,
    k0: float,
    ks: ArrayLike,
    sizes: Callable[[float], Sequence[float]] | None = None,
    train_readout: bool = False,
    activation: ActivationName = "relu",
    tol: float = 1e-12,
    max_step: float = 0.5,
    min_step: float = 1e-7,
) -> RealKFamily:
    """Continue a family of critical points of a Young fixed-point space in real k.

    Pseudo-arclength continuation in (x, log k) along the block sizes
    ``sizes(k)`` (default (k - 1, 1): the ΔS_{k-1} family of Arjevani & Field): a
    tangent predictor, a Newton corrector on the exact reduced gradient
    bordered by the arclength condition, the step halved when Newton fails
    and doubled after easy steps; the grid points ``ks`` are landed on
    exactly (Newton at fixed k). In log k the steps grow with k, so large k
    is reached in a few dozen steps (k = 1e8 from k = 6 in ~40). At every
    step the Hessian spectrum of every isotypic component is evaluated
    exactly (:meth:`YoungProblem.spectrum`); where a component's count of
    negative eigenvalues changes, the crossing eigenvalue's root in k is
    located by the Illinois method with the point re-solved at each trial
    k. With a trained second layer the eigenvalues tracked are those across
    the rescaling orbit (:attr:`IsotypicSpectrum.eigenvalues`; the flat
    ones, ~0, are kept apart), so trained and fixed second layers give the
    same crossings (the two Hessians are congruent across the orbit).

    Accuracy: points are solved to full-gradient norm ``tol``, or to the
    gradient's rounding level (:meth:`YoungProblem.gradient_floor`) where
    that is larger: the gradient is a sum of ~k^2 cancelling terms, so the
    level grows like k^1.5 eps (2e-12 at k = 1e3, 2e-9 at k = 1e5, 7e-5
    at k = 1e8 on the ΔS_{k-1} family, where the point is still right to
    ~1e-7); ``grad_norm`` reports what was reached. Eigenvalues are those
    of the exact Hessian (they equal the integer-k full Hessian's to
    ~1e-14); crossings are located to within 1e-13 max(1, k) in k. The
    loss (relu) is evaluated without that cancellation
    (:meth:`YoungProblem.risk`): a few ulps at any k (along ΔS_{k-1},
    k loss -> 1/2 - 2/pi^2 = 0.2973576 as c/sqrt(k), 0.2973467 at k = 1e8).

    Parameters
    ----------
    x0 : array_like
        Coordinates of a critical point (or a close guess) at k0, in the
        order of ``FixedPointSpace(sizes(k0), train_readout)``.
    k0 : float
        Its k (positive).
    ks : array_like
        Grid points to report (positive), strictly monotone, starting on one
        side of k0 (the continuation runs from k0 towards them).
    sizes : callable, optional
        Real k -> block sizes (default ``lambda k: (k - 1, 1)``); e.g.
        ``lambda k: (k - 2, 2)`` or ``lambda k: (k / 2, k / 2)``. Each size
        must stay an integer or stay above 3 along the path.
    train_readout : bool, default False
        Include one second-layer coordinate per block.
    activation : str, default "relu"
        Student and teacher activation.
    tol : float, default 1e-12
        Target full-gradient norm of every point (or the gradient's rounding
        level, where that is larger).
    max_step, min_step : float, default 0.5, 1e-7
        Largest and smallest arclength steps in (x, log k).

    Returns
    -------
    RealKFamily

    Examples
    --------
    The ΔS_{k-1} family from its spurious minimum at k = 6 down to k = 5:
    it turns from minimum into saddle in between.

    >>> x6 = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]
    >>> fam = tl.landscape.continue_real_k(x6, 6.0, [6.0, 5.5, 5.0])
    >>> fam.status, fam.index.tolist()
    ('completed', [0.0, 3.5, 3.0])
    >>> print(f"{fam.k_turn:.10f}")
    5.5855052474
    """
    x_ = as_float_array(x0, "x0", ndim=1)
    k0_ = positive(k0, "k0")
    ks_ = as_float_array(ks, "ks", ndim=1)
    if np.any(ks_ <= 0.0):
        raise ValueError(f"ks: expected positive k (the continuation runs in log k), got {ks_.tolist()[:8]}")
    sizes_ = _default_sizes if sizes is None else sizes
    if not callable(sizes_):
        raise TypeError(f"sizes: expected a function k -> block sizes, got {type(sizes_).__name__}")
    train_readout = boolean(train_readout, "train_readout")
    check_activation(activation)
    tol_ = positive(tol, "tol")
    h_max = positive(max_step, "max_step")
    h_min = positive(min_step, "min_step")
    if h_min > h_max:
        raise ValueError(f"min_step: expected at most max_step = {h_max}, got {h_min}")
    direction = _grid_direction(ks_, k0_)
    n0 = _sizes_at(sizes_, k0_)
    for k in ks_:
        _sizes_at(sizes_, float(k))
    prob = YoungProblem(n0.size, train_readout, activation)
    layout = prob.layout(n0)
    if x_.size != len(layout):
        raise ValueError(f"x0: expected {len(layout)} coordinates for sizes {n0.tolist()}, got {x_.size}")
    cont = _Continuation(prob, sizes_, tol_, direction)
    x, gn, _ = newton(prob, x_, n0, tol_, 50)
    if not cont.solved(x, k0_, gn):
        raise ValueError(f"x0: no critical point found near x0 at k0 = {k0_} (gradient norm {gn:.3g} > tol)")
    t = cont.tangent(x, k0_, np.concatenate([np.zeros(x.size), [direction]]))
    spec = prob.spectrum(x, cont.size_vector(k0_))
    zero_tol = spec._zero_tol(None)
    first = _Point(x, k0_, gn, t, spec, _negatives(spec, zero_tol))
    path, last = _follow(cont, first, ks_, zero_tol, h_max, h_min)
    return _family(cont, path, first, last, zero_tol)


def _turn(crossings: list[Crossing], first: IsotypicSpectrum, ztol: float) -> float | None:
    """The first crossing where the count of negative eigenvalues over all components goes to or from zero."""
    neg = _negatives(first, ztol)
    for c in crossings:
        before = sum(neg.values())
        neg[c.component] = c.negative_after
        if (before == 0) != (sum(neg.values()) == 0):
            return c.k
    return None


def _illinois(f: Callable[[float], float], a: float, b: float, fa: float, fb: float) -> float:
    """A root of f in [a, b] (f(a) f(b) <= 0) by the Illinois variant of regula falsi, to 1e-13 max(1, |k|)."""
    if fa == 0.0:
        return a
    if fb == 0.0:
        return b
    c = b
    for _ in range(100):
        c = b - fb * (b - a) / (fb - fa)
        fc = f(c)
        if fc == 0.0:
            return c
        if fc * fb < 0:
            a, fa = b, fb
        else:
            fa *= 0.5
        b, fb = c, fc
        if abs(b - a) <= 1e-13 * max(1.0, abs(c)):
            break
    return c
