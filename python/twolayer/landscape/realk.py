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


def _check_sizes(n: NDArray[np.float64], k: float) -> None:
    bad = [float(v) for v in n if not (v == round(v) and v >= 1.0) and not v > 3.0]
    if bad:
        raise ValueError(f"sizes: expected block sizes that are integers >= 1 or reals > 3 (so that the refined "
                         f"layouts keep their coordinates), got {n.tolist()} at k = {k}")


def _negatives(spec: IsotypicSpectrum, tol: float) -> dict[str, int]:
    return {c: int(np.sum(v < -tol)) for c, v in spec.eigenvalues.items()}


def continue_real_k(  # noqa: C901 (39)
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
    if sizes is None:
        def sizes(k: float) -> tuple[float, float]:
            return (k - 1.0, 1.0)
    if not callable(sizes):
        raise TypeError(f"sizes: expected a function k -> block sizes, got {type(sizes).__name__}")
    train_readout = boolean(train_readout, "train_readout")
    check_activation(activation)
    tol_ = positive(tol, "tol")
    h_max = positive(max_step, "max_step")
    h_min = positive(min_step, "min_step")
    if h_min > h_max:
        raise ValueError(f"min_step: expected at most max_step = {h_max}, got {h_min}")
    if ks_.size == 0:
        raise ValueError("ks: expected at least one value of k")
    d = np.diff(ks_)
    if ks_.size > 1 and not (np.all(d > 0) or np.all(d < 0)):
        raise ValueError(f"ks: expected a strictly monotone grid, got {ks_.tolist()[:8]}")
    direction = float(np.sign(ks_[-1] - k0_)) if ks_.size > 1 or ks_[0] != k0_ else 1.0
    if ks_.size > 1 and np.sign(ks_[-1] - ks_[0]) != direction or direction * (ks_[0] - k0_) < 0:
        raise ValueError(f"ks: expected a grid running away from k0 = {k0_}, got {ks_.tolist()[:8]}")

    def size_vector(k: float) -> NDArray[np.float64]:
        n = as_float_array(sizes(k), "sizes(k)", ndim=1)
        _check_sizes(n, k)
        return n

    n0 = size_vector(k0_)
    for k in ks_:
        size_vector(float(k))
    prob = YoungProblem(n0.size, train_readout, activation)
    layout = prob.layout(n0)
    if x_.size != len(layout):
        raise ValueError(f"x0: expected {len(layout)} coordinates for sizes {n0.tolist()}, got {x_.size}")

    def grad(x: NDArray[np.float64], k: float) -> NDArray[np.float64]:
        return prob.gradient(x, size_vector(k))

    def d_ds(x: NDArray[np.float64], k: float) -> NDArray[np.float64]:
        """d grad / d log k (central differences)."""
        dk = 1e-5 * k
        return k * (grad(x, k + dk) - grad(x, k - dk)) / (2.0 * dk)

    def correct_at(x: NDArray[np.float64], k: float) -> tuple[NDArray[np.float64], float, int]:
        return newton(prob, x, size_vector(k), tol_, 12)

    def solved(x: NDArray[np.float64], k: float, gn: float) -> bool:
        """gn <= tol, or at the gradient's rounding level where that is larger (large k)."""
        return bool(gn <= tol_ or gn <= prob.gradient_floor(x, size_vector(k)))

    x, gn, _ = newton(prob, x_, n0, tol_, 50)
    if not solved(x, k0_, gn):
        raise ValueError(f"x0: no critical point found near x0 at k0 = {k0_} (gradient norm {gn:.3g} > tol)")
    k = k0_

    def tangent(x: NDArray[np.float64], k: float, prev: NDArray[np.float64]) -> NDArray[np.float64]:
        A = np.zeros((x.size + 1, x.size + 1))
        A[:-1, :-1] = prob.hessian(x, size_vector(k))
        A[:-1, -1] = d_ds(x, k)
        A[-1] = prev
        t = gauged_solve(A, np.concatenate([np.zeros(x.size), [1.0]]), gauge(x, k))
        return t / np.linalg.norm(t)

    def gauge(x: NDArray[np.float64], k: float) -> NDArray[np.float64]:
        S = prob.symmetry_directions(x, size_vector(k))
        return np.hstack([S, np.zeros((S.shape[0], 1))])

    t = tangent(x, k, np.concatenate([np.zeros(x.size), [direction]]))
    spec = prob.spectrum(x, size_vector(k))
    ztol = spec._zero_tol(None)
    neg = _negatives(spec, ztol)
    spec0 = spec

    out_k: list[float] = []
    out_x: list[NDArray[np.float64]] = []
    out_spec: list[IsotypicSpectrum] = []
    out_gn: list[float] = []
    crossings: list[Crossing] = []
    status, message = "completed", ""
    targets = list(ks_)
    if targets and targets[0] == k:
        out_k.append(k)
        out_x.append(x.copy())
        out_spec.append(spec)
        out_gn.append(gn)
        targets.pop(0)
    h = min(h_max, 0.1)
    steps = 0

    def eig_at(kk: float, xg: NDArray[np.float64], comp: str, pos: int) -> tuple[float, NDArray[np.float64]]:
        xs, _, _ = newton(prob, xg, size_vector(kk), 1e-3 * tol_, 12)  # Newton to its floating-point floor
        return float(prob.spectrum(xs, size_vector(kk)).eigenvalues[comp][pos]), xs

    while targets:
        kt = targets[0]
        z = np.concatenate([x, [np.log(k)]])
        zp = z + h * t
        land = direction * (zp[-1] - np.log(kt)) >= 0.0
        if land:
            if t[-1] * direction <= 0:  # pragma: no cover - folds stop below
                break
            xp = x + t[:-1] * (np.log(kt) - np.log(k)) / t[-1]
            x_new, gn_new, its = correct_at(xp, kt)
            k_new = kt
            ok = solved(x_new, kt, gn_new)
        else:
            zc = zp.copy()
            ok = False
            its = 0
            for _ in range(12):
                its += 1
                xc, kc = zc[:-1], float(np.exp(zc[-1]))
                try:
                    _check_sizes(as_float_array(sizes(kc), "sizes(k)", ndim=1), kc)
                except ValueError:
                    break
                g = grad(xc, kc)
                A = np.zeros((xc.size + 1, xc.size + 1))
                A[:-1, :-1] = prob.hessian(xc, size_vector(kc))
                A[:-1, -1] = d_ds(xc, kc)
                A[-1] = t
                rhs = -np.concatenate([g, [t @ (zc - zp)]])
                dz = gauged_solve(A, rhs, gauge(xc, kc))
                zc = zc + dz
                gnc = prob.gradient_norm(zc[:-1], size_vector(float(np.exp(zc[-1]))))
                if solved(zc[:-1], float(np.exp(zc[-1])), gnc):
                    ok = True
                    break
                if not np.isfinite(gnc) or np.linalg.norm(dz) > 10 * h:
                    break
            x_new, k_new = zc[:-1], float(np.exp(zc[-1]))
            gn_new = prob.gradient_norm(x_new, size_vector(k_new)) if ok else np.inf
        if not ok:
            h *= 0.5
            if h < h_min:
                status, message = "step too small", f"Newton failed at k = {k:.12g} with step {2 * h:.3g}"
                break
            continue
        if prob.layout(size_vector(k_new)) != layout:
            status, message = "layout changed", f"the coordinates change between k = {k} and k = {k_new}"
            break
        steps += 1
        t_new = tangent(x_new, k_new, t)
        spec_new = prob.spectrum(x_new, size_vector(k_new))
        if set(spec_new.eigenvalues) != set(spec.eigenvalues):
            status, message = "layout changed", f"the isotypic components change between k = {k} and k = {k_new}"
            break
        neg_new = _negatives(spec_new, ztol)
        for comp in spec.eigenvalues:
            if neg_new[comp] == neg[comp]:
                continue
            pos = min(neg[comp], neg_new[comp])
            def f(kk: float, xa: NDArray[np.float64] = x, xb: NDArray[np.float64] = x_new, ka: float = k,
                  kb: float = k_new, comp: str = comp, pos: int = pos) -> float:
                return eig_at(kk, xa + (xb - xa) * (kk - ka) / (kb - ka), comp, pos)[0]

            kc = _illinois(f, k, k_new, float(spec.eigenvalues[comp][pos]), float(spec_new.eigenvalues[comp][pos]))
            crossings.append(Crossing(kc, comp, pos, neg[comp], neg_new[comp]))
        if t_new[-1] * direction <= 0.0:
            status, message = "fold", f"the branch turns back in k near k = {k_new:.12g}"
            x, k, spec, neg, t = x_new, k_new, spec_new, neg_new, t_new
            break
        x, k, spec, neg, t = x_new, k_new, spec_new, neg_new, t_new
        if land:
            out_k.append(k)
            out_x.append(x.copy())
            out_spec.append(spec)
            out_gn.append(gn_new)
            targets.pop(0)
        if its <= 3:
            h = min(2.0 * h, h_max)
        elif its >= 6:
            h = max(0.5 * h, h_min)

    crossings.sort(key=lambda c: direction * c.k)
    comps = list(spec.eigenvalues)
    n_out = len(out_k)
    S = np.array([size_vector(kk) for kk in out_k]).reshape(n_out, n0.size)
    eig = {c: np.array([s.eigenvalues[c] for s in out_spec]).reshape(n_out, spec.eigenvalues[c].size)
           for c in comps}
    flat = {c: np.array([s.flat[c] for s in out_spec]).reshape(n_out, spec.flat[c].size) for c in comps}
    dims = {c: np.array([s.dimension[c] for s in out_spec]) for c in comps}
    index = np.array([s.index(ztol) for s in out_spec])
    k_turn = _turn(crossings, spec0, ztol)
    loss = np.array([prob.risk(xx, S[i]) for i, xx in enumerate(out_x)])
    X = np.array(out_x).reshape(n_out, len(layout))
    return RealKFamily(np.array(out_k), S, X, loss, np.array(out_gn), eig, dims, index, crossings, k_turn, status,
                       message, steps, flat)


def _turn(crossings: list[Crossing], first: IsotypicSpectrum, ztol: float) -> float | None:
    """The first crossing where the count of negative eigenvalues over all components goes to or from zero."""
    neg = {c: int(np.sum(v < -ztol)) for c, v in first.eigenvalues.items()}
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
