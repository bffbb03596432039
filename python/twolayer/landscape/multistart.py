"""Many local searches from random starts, each refined to a critical point and classified (Arjevani & Field).

The searches are L-BFGS runs on the population risk in the C++ core (OpenMP across runs, one
``population_gradient`` per iteration); the end points are then refined by batched Newton steps (stacked
analytic Hessians, one batched eigendecomposition) and classified by loss, Hessian index and isotropy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypedDict

import numpy as np
from numpy.typing import NDArray

from .. import _core, population
from .._deprecation import renamed, renamed_attribute
from .._interrupt import keep_partial, partial_result
from .._progress import progress_bar
from .._validation import (
    INT32_MAX,
    as_float_array,
    boolean,
    choice,
    integer,
    n_threads_arg,
    positive,
    seed_arg,
)
from ..activations import ActivationName, check_activation
from ..networks import Network, check_network
from .critical import classify_spectrum, euclidean_norm, non_differentiable, symmetry_nullity
from .orbit import canonical_weights
from .subspace import identity_teacher
from .symmetry import isotropy

__all__ = ["MultistartResult", "multistart", "random_starts", "classify_batch", "numpy_relu_loss_grad"]

STATUS = {0: "converged", 1: "max_iter", 2: "stalled", 3: "diverged", 4: "interrupted"}


class ClassifiedBatch(TypedDict):
    """What :func:`classify_batch` returns (the fields of :class:`MultistartResult` it fills)."""

    W: NDArray[np.float64]
    a: NDArray[np.float64]
    risk: NDArray[np.float64]
    grad_norm: NDArray[np.float64]
    index: NDArray[np.int64]
    kind: list[str]
    isotropy: list[str]
    bias: NDArray[np.float64] | None


@dataclass(eq=False)
class MultistartResult:
    """Per-run end points of :func:`multistart` and their classification.

    Attributes
    ----------
    W, a : ndarray, shapes (runs, n, d) and (runs, n)
        The refined end points (at the canonical point of their rescaling
        orbit where there is one, see :mod:`twolayer.landscape.orbit`).
    risk, grad_norm : ndarray, shape (runs,)
        Their excess risk (``loss``: its old spelling, deprecated) and gradient norm.
    index : ndarray of int, shape (runs,)
        Hessian index (-1 where not classified).
    kind, isotropy : list of str
        Classification (as :class:`CriticalPoint`'s kind) and isotropy group.
    status : list of str
        Why each run stopped: "converged" (the search reached ``gtol``),
        "converged after refinement" (the search stopped on "max_iter" or
        "stalled" -- no resolvable decrease left in double precision -- and
        the Newton refinement then reached ``tol``), else the search's own
        "max_iter", "stalled", "diverged".
    iterations : ndarray of int
        L-BFGS iterations.
    meta : dict
        The call's parameters.
    bias : ndarray, shape (runs, n), or None
        The students' biases at the end points (with biases: a teacher with
        biases or ``train_bias``; None without).

    Notes
    -----
    :meth:`table` summarises how often each family is reached. The partial
    result of :class:`twolayer.Interrupted` holds the search's end points as
    they are, not refined or classified (kind "unclassified", index -1;
    :func:`classify_batch` does the rest); runs cut short have status and
    kind "interrupted" and keep their last iterate (NaN risk if never
    started).

    Examples
    --------
    >>> res = tl.landscape.multistart(3, runs=4, seed=0)
    >>> res.runs, res.status
    (4, ['converged', 'converged', 'converged', 'converged'])
    >>> print(res.table())
     count fraction  kind                      risk index  isotropy
         4    1.000  global minimum ...0.000000     0  ΔS_3
    """

    W: NDArray[np.float64]
    a: NDArray[np.float64]
    risk: NDArray[np.float64]
    grad_norm: NDArray[np.float64]
    index: NDArray[np.int64]
    kind: list[str]
    isotropy: list[str]
    status: list[str]
    iterations: NDArray[np.int64]
    meta: dict[str, object] = field(default_factory=dict)
    bias: NDArray[np.float64] | None = None

    loss = renamed_attribute("risk")

    @property
    def runs(self) -> int:
        """Number of runs."""
        return int(self.risk.shape[0])

    def fraction(self, kind: str | tuple[str, ...]) -> float:
        """The fraction of runs classified as ``kind`` (or as any of a tuple of kinds), e.g.
        ``"spurious minimum"``, ``"global minimum"``, ``"saddle"``, ``"degenerate"``."""
        kinds = (kind,) if isinstance(kind, str) else tuple(kind) if isinstance(kind, (tuple, list)) else ()
        if not kinds or not all(isinstance(x, str) for x in kinds):
            raise TypeError(f"kind: expected a kind name or a tuple of them, got {kind!r}")
        return sum(k in kinds for k in self.kind) / self.runs

    def families(self, decimals: int = 6) -> Counter[tuple[str, float, int, str]]:
        """Counts of (kind, risk rounded to ``decimals``, index, isotropy).

        Parameters
        ----------
        decimals : int, default 6
            Rounding of the loss.

        Returns
        -------
        collections.Counter
        """
        decimals = integer(decimals, "decimals", 0, 17)
        return Counter(
            (k, float(np.round(lo, decimals)), int(i), iso)
            for k, lo, i, iso in zip(self.kind, self.risk, self.index, self.isotropy, strict=True)
        )

    def table(self, decimals: int = 6) -> str:
        """A text table of the families reached, most frequent first.

        Parameters
        ----------
        decimals : int, default 6
            Rounding of the loss.

        Returns
        -------
        str
        """
        decimals = integer(decimals, "decimals", 0, 17)
        lines = [f"{'count':>6} {'fraction':>8}  {'kind':<17} {'risk':>12} {'index':>5}  isotropy"]
        for (kind, risk, index, iso), n in self.families(decimals).most_common():
            lines.append(f"{n:>6} {n / self.runs:>8.3f}  {kind:<17} {risk:>12.{decimals}f} {index:>5}  {iso}")
        return "\n".join(lines)


def random_starts(runs: int, k: int, d: int, init: str, seed: int) -> NDArray[np.float64]:
    """Random starting weights, one stream per run.

    Run r uses its own stream keyed by (seed, r), so results do not depend
    on how runs are batched.

    Parameters
    ----------
    runs, k, d : int
        Number of starts and their shape.
    init : {"xavier", "gaussian", "orthogonal"}
        N(0, 1/d) entries (Safran-Shamir), N(0, 1) entries, or orthonormal
        rows (k <= d).
    seed : int
        In [0, 2**64-1].

    Returns
    -------
    ndarray, shape (runs, k, d)

    Examples
    --------
    >>> tl.landscape.random_starts(2, 3, 4, "orthogonal", seed=0).shape
    (2, 3, 4)
    """
    runs = integer(runs, "runs", 1, INT32_MAX)
    k, d = integer(k, "k", 1, INT32_MAX), integer(d, "d", 1, INT32_MAX)
    choice(init, "init", ("xavier", "gaussian", "orthogonal"))
    seed = seed_arg(seed)
    if init == "orthogonal" and k > d:
        raise ValueError(f"init: 'orthogonal' needs k <= d, got k={k}, d={d}")
    out = np.empty((runs, k, d))
    for r in range(runs):
        rng = np.random.default_rng(np.random.SeedSequence([seed, r]))
        if init == "orthogonal":
            q, rr = np.linalg.qr(rng.standard_normal((d, k)))
            out[r] = (q * np.sign(np.diag(rr))).T
        else:
            out[r] = rng.standard_normal((k, d)) * (1.0 / np.sqrt(d) if init == "xavier" else 1.0)
    return out


def _in_blocks(f: Any, *arrays: NDArray[np.float64], block: int = 8) -> Any:
    """``f(*arrays)`` for a batched (gufunc) linear-algebra call, in blocks of ``block`` matrices: the same
    numbers, and a Ctrl-C between two blocks is seen at once rather than after the whole batch."""
    n = arrays[0].shape[0]
    if n <= block:
        return f(*arrays)
    parts = [f(*(a[i:i + block] for a in arrays)) for i in range(0, n, block)]
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(p) for p in zip(*parts, strict=True))
    return np.concatenate(parts)


class _EndPoints:
    """A batch of end points being refined in place, with the model they belong to.

    Parameters
    ----------
    W, a, b : ndarray, shapes (runs, k, d), (runs, k) and (runs, k)
        The points and their biases (modified in place by the Newton steps and the canonicalisation).
    teacher : Network
        The teacher.
    activation : str
        The students' activation.
    train_readout, train_bias : bool
        Whether the second layer and the biases are among the parameters.
    """

    def __init__(self, W: NDArray[np.float64], a: NDArray[np.float64], b: NDArray[np.float64], teacher: Network,
                 activation: ActivationName, train_readout: bool, train_bias: bool = False) -> None:
        self.W, self.a, self.b, self.teacher = W, a, b, teacher
        self.activation, self.train_readout, self.train_bias = activation, train_readout, train_bias
        runs, k, d = W.shape
        self.runs, self.n_weights = runs, k * d
        self.n_params = k * d + (k if train_readout else 0) + (k if train_bias else 0)

    def net(self, r: int) -> Network:
        """Run r's student."""
        return Network(self.W[r], self.a[r], self.activation, scaling=self.teacher.scaling, bias=self.b[r])

    def gradient(self, r: int) -> NDArray[np.float64]:
        """The population-risk gradient of run r, flattened (W, then a and b where trained)."""
        g = population.gradient(self.net(r), self.teacher, train_readout=self.train_readout, n_threads=1,
                                train_bias=self.train_bias)
        return np.concatenate([g[0].ravel()] + ([g[1]] if self.train_readout else [])
                              + ([g[2]] if self.train_bias else []))

    def hessians(self, rows: NDArray[np.int64]) -> NDArray[np.float64]:
        """The analytic population-risk Hessians of the given runs, shape (len(rows), n_params, n_params)."""
        H = np.empty((len(rows), self.n_params, self.n_params))
        for j, r in enumerate(rows):
            H[j] = population.hessian(self.net(r), self.teacher, train_readout=self.train_readout, n_threads=1,
                                      train_bias=self.train_bias)
        return H

    def canonicalise(self, rows: NDArray[np.bool_]) -> None:
        """Move the chosen runs to the canonical point of their rescaling orbit (a no-op without one)."""
        self.W[rows], self.a[rows], c = canonical_weights(self.W[rows], self.a[rows], self.activation,
                                                          self.train_readout, self.b[rows], self.train_bias)
        self.b[rows] *= c

    def symmetry_nullity(self) -> int:
        """The flat Hessian directions of the continuous symmetries (:func:`symmetry_nullity` at run 0)."""
        return symmetry_nullity(self.net(0), self.train_readout, self.train_bias)

    def finite(self) -> NDArray[np.bool_]:
        """Which runs have finite W, a and b."""
        return np.array([bool(np.all(np.isfinite(self.W[r])) and np.all(np.isfinite(self.a[r]))
                              and np.all(np.isfinite(self.b[r]))) for r in range(self.runs)])

    def aligned_step_units(self, finite: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """Which finite runs have step units exactly aligned with the teacher's."""
        return np.array([bool(finite[r]) and self.activation == "step"
                         and population.aligned_step_units(self.net(r), self.teacher) is not None
                         for r in range(self.runs)])

    def kinks(self, finite: NDArray[np.bool_]) -> NDArray[np.bool_]:
        """Which finite runs sit where the risk is not differentiable (no Hessian there)."""
        return np.array([bool(finite[r]) and non_differentiable(self.net(r), self.teacher) for r in range(self.runs)])

    def gradients(self, finite: NDArray[np.bool_]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The gradients (zero elsewhere) and their norms (NaN elsewhere) of the finite runs; a run whose gradient
        cannot be evaluated is marked not finite (``finite`` is updated)."""
        G = np.zeros((self.runs, self.n_params))
        gn = np.full(self.runs, np.nan)
        for r in map(int, np.flatnonzero(finite)):
            try:
                G[r] = self.gradient(r)
                gn[r] = euclidean_norm(G[r])
            except ValueError:
                finite[r] = False
        return G, gn


def _newton_directions(H: NDArray[np.float64], G: NDArray[np.float64], flat_modes: bool) -> NDArray[np.float64]:
    """The Newton steps -H^-1 g of a batch: with continuous symmetries (``flat_modes``) by the pseudo-inverse
    (flat directions dropped), else by batched solves, least squares if one Hessian is singular."""
    if flat_modes:
        ev, V = _in_blocks(np.linalg.eigh, H)
        ztol = 1e-8 * np.maximum(1.0, np.max(np.abs(ev), axis=1, keepdims=True))
        inv = np.where(np.abs(ev) > ztol, 1.0 / np.where(ev == 0, 1.0, ev), 0.0)
        return -np.einsum("rij,rj->ri", V, inv * np.einsum("rji,rj->ri", V, G))
    try:
        return -_in_blocks(np.linalg.solve, H, G[..., None])[..., 0]
    except np.linalg.LinAlgError:  # a singular Hessian in the batch: least-squares steps
        return -np.stack([np.linalg.lstsq(h, g, rcond=1e-10)[0] for h, g in zip(H, G, strict=True)])


def _take_steps(
    pts: _EndPoints, todo: NDArray[np.int64], dx: NDArray[np.float64], G: NDArray[np.float64],
    gn: NDArray[np.float64], tol: float
) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
    """Apply the steps ``dx`` to the runs ``todo``, keeping each only if it lowers the gradient norm (``G``, ``gn``
    updated); returns the runs still above ``tol`` after a kept step and the mask of the runs stepped."""
    k, d = pts.W.shape[1:]
    moved: list[int] = []
    stepped = np.zeros(pts.runs, dtype=bool)
    for j, r in enumerate(map(int, todo)):
        W_old, a_old, b_old = pts.W[r].copy(), pts.a[r].copy(), pts.b[r].copy()
        pts.W[r] += dx[j, :pts.n_weights].reshape(k, d)
        if pts.train_readout:
            pts.a[r] += dx[j, pts.n_weights:pts.n_weights + k]
        if pts.train_bias:
            pts.b[r] += dx[j, pts.n_params - k:]
        try:
            g_new = pts.gradient(r)
            gn_new = euclidean_norm(g_new)
        except ValueError:
            gn_new = np.inf
        if gn_new < gn[r]:
            G[r], gn[r] = g_new, gn_new
            stepped[r] = True
            if gn_new > tol:
                moved.append(r)
        else:
            pts.W[r], pts.a[r], pts.b[r] = W_old, a_old, b_old
    return np.array(moved, dtype=np.int64), stepped


def _refine(
    pts: _EndPoints, G: NDArray[np.float64], gn: NDArray[np.float64], todo: NDArray[np.int64],
    H_first: NDArray[np.float64], newton_steps: int, tol: float
) -> None:
    """Up to ``newton_steps`` batched Newton steps on the runs ``todo`` (``H_first``: their Hessians for the first
    step), back to the canonical point after each where there are flat modes; ``G`` and ``gn`` updated."""
    flat_modes = pts.symmetry_nullity() > 0
    for step in range(newton_steps):
        if todo.size == 0:
            break
        H = H_first if step == 0 else pts.hessians(todo)
        dx = _newton_directions(H, G[todo], flat_modes)
        todo, stepped = _take_steps(pts, todo, dx, G, gn, tol)
        if flat_modes and stepped.any():  # back to the canonical point (moves it by O(|step|^2))
            pts.canonicalise(stepped)
            for r in map(int, np.flatnonzero(stepped)):
                G[r] = pts.gradient(r)
                gn[r] = euclidean_norm(G[r])


def _classify(
    pts: _EndPoints, finite: NDArray[np.bool_], kink: NDArray[np.bool_], lam: NDArray[np.float64],
    risk: NDArray[np.float64], iso_tol: float, global_tol: float
) -> tuple[NDArray[np.int64], list[str], list[str]]:
    """Index, kind and isotropy of each run from its Hessian eigenvalues ``lam`` and risk ("failed" where not
    finite; kinks by risk alone)."""
    nullity = pts.symmetry_nullity()
    index = np.full(pts.runs, -1, dtype=np.int64)
    kinds: list[str] = []
    isos: list[str] = []
    for r in range(pts.runs):
        if not finite[r]:
            kinds.append("failed")
            isos.append("?")
            continue
        ind, _, kind = classify_spectrum(lam[r][:0] if kink[r] else lam[r], float(risk[r]), nullity, None, global_tol,
                                         bool(kink[r]))
        index[r] = ind
        kinds.append(kind)
        isos.append(isotropy(pts.W[r], tol=iso_tol, a=pts.a[r] if pts.train_readout else None,
                             bias=pts.b[r] if pts.b.any() or pts.train_bias else None).description)
    return index, kinds, isos


def classify_batch(
    W: NDArray[np.float64],
    a: NDArray[np.float64],
    teacher: Network,
    activation: ActivationName = "relu",
    train_readout: bool = False,
    newton_steps: int = 3,
    tol: float = 1e-12,
    iso_tol: float = 1e-6,
    global_tol: float = 1e-10,
    bias: NDArray[np.float64] | None = None,
    train_bias: bool = False,
) -> ClassifiedBatch:
    """Refine and classify a batch of search end points.

    Where the model has a rescaling orbit (relu with ``train_readout``, step
    units; see :mod:`twolayer.landscape.orbit`) the points are moved to the
    orbit's canonical point first and after the Newton steps, so that the
    isotropy is the orbit's (a global minimum found at W = diag(c),
    a = 1/c is reported at W = I, a = 1 with isotropy ΔS_k).

    Up to ``newton_steps`` batched Newton steps (batched solves with the
    analytic Hessian; least squares where it is singular), a step being kept
    only if it lowers the gradient norm; then classification by the Hessian
    spectrum at the refined points.

    Parameters
    ----------
    W : ndarray, shape (runs, k, d)
        End points (non-finite ones are classified "failed").
    a : ndarray, shape (runs, k)
        Their second layers.
    teacher : Network
        The teacher.
    activation : str, default "relu"
        The students' activation.
    train_readout : bool, default False
        Whether the second layer is among the parameters.
    newton_steps : int, default 3
        Newton steps at most.
    tol : float, default 1e-12
        Gradient norm at which a point needs no more steps.
    iso_tol : float, default 1e-6
        Tolerance of the isotropy.
    global_tol : float, default 1e-10
        Loss at or below which a point is a global minimum.
    bias : ndarray, shape (runs, k), optional
        The students' biases (default zeros; the teacher may have biases).
    train_bias : bool, default False
        Whether the biases are among the parameters (refined with W and a;
        their rescaling orbit, see :mod:`twolayer.landscape.orbit`).

    Returns
    -------
    dict
        ``W``, ``a``, ``risk``, ``grad_norm``, ``index``, ``kind``,
        ``isotropy``, ``bias`` (see :class:`MultistartResult`; ``bias``
        None for a model without biases).

    Examples
    --------
    >>> from twolayer.landscape.multistart import classify_batch
    >>> out = classify_batch(np.stack([np.eye(3)] * 2) + 1e-9, np.ones((2, 3)),
    ...                      tl.landscape.identity_teacher(3))
    >>> out["kind"], out["isotropy"]
    (['global minimum', 'global minimum'], ['ΔS_3', 'ΔS_3'])
    """
    W = as_float_array(W, "W", ndim=3, finite=False).copy()  # non-finite end points are classified "failed"
    a = as_float_array(a, "a", ndim=2, finite=False).copy()
    runs, k, d = W.shape
    if a.shape != (runs, k):
        raise ValueError(f"a: expected shape {(runs, k)} to match W, got {a.shape}")
    b = np.zeros((runs, k)) if bias is None else as_float_array(bias, "bias", ndim=2, finite=False).copy()
    if b.shape != (runs, k):
        raise ValueError(f"bias: expected shape {(runs, k)} to match W, got {b.shape}")
    train_bias = boolean(train_bias, "train_bias")
    check_network(teacher, "teacher", biases=True)
    if teacher.d != d:
        raise ValueError(f"teacher: expected input dimension d={d} (W's last axis), got {teacher.d}")
    check_activation(activation)
    train_readout = boolean(train_readout, "train_readout")
    newton_steps = integer(newton_steps, "newton_steps", 0)
    tol = positive(tol, "tol")
    iso_tol = positive(iso_tol, "iso_tol")
    global_tol = positive(global_tol, "global_tol", allow_zero=True)
    pts = _EndPoints(W, a, b, teacher, activation, train_readout, train_bias)
    finite = pts.finite()
    # exactly aligned step units stay as they are (normalising their rows would open the alignment by ~1e-8 rad)
    pts.canonicalise(finite & ~pts.aligned_step_units(finite))
    G, gn = pts.gradients(finite)
    # One batch of analytic Hessians at the search end points serves both the Newton steps and the spectrum:
    # the steps move the points by |H^-1 grad| (~1e-7 for a search stopped at |grad| <= 1e-8), which shifts
    # the eigenvalues by O(1e-7), far below the gaps the classification looks at. Runs that still need steps
    # after the first one get a fresh Hessian.
    lam = np.full((runs, pts.n_params), np.nan)
    # kinks (zero-norm relu/step rows, aligned step units): no Hessian, no Newton steps; classified by loss
    kink = pts.kinks(finite)
    ok = np.flatnonzero(finite & ~kink)
    H_all = pts.hessians(ok)
    if ok.size:
        lam[ok] = _in_blocks(np.linalg.eigvalsh, H_all)
    todo = np.flatnonzero(finite & ~kink & (gn > tol))
    pos = {int(r): j for j, r in enumerate(ok)}
    _refine(pts, G, gn, todo, H_all[[pos[int(r)] for r in todo]], newton_steps, tol)
    risk = np.array([population.risk(pts.net(r), teacher) if finite[r] else np.nan for r in range(runs)])
    index, kinds, isos = _classify(pts, finite, kink, lam, risk, iso_tol, global_tol)
    biased = train_bias or teacher.has_bias or bool(np.any(b != 0.0))
    return {"W": W, "a": a, "risk": risk, "grad_norm": gn, "index": index, "kind": kinds, "isotropy": isos,
            "bias": b if biased else None}


@renamed(k="M", n_students="K")
def multistart(
    M: int,
    runs: int,
    init: str = "xavier",
    seed: int = 0,
    d: int | None = None,
    train_readout: bool = False,
    activation: ActivationName = "relu",
    max_iter: int = 5000,
    gtol: float = 1e-8,
    memory: int = 10,
    tol: float = 1e-12,
    n_threads: int | None = None,
    progress: bool = False,
    K: int | None = None,
    teacher: Network | None = None,
    train_bias: bool = False,
) -> MultistartResult:
    """Many L-BFGS searches on the Safran-Shamir problem, refined and classified.

    Teacher W* = I_M by default, lambda = w . x, unit second layers (with
    ``train_readout`` the student's second layer is trained too). The
    searches run in parallel in C++ until the gradient norm is at most
    ``gtol``, then are refined by batched Newton steps to ``tol`` and
    classified by risk, index and isotropy (see
    :meth:`MultistartResult.table`). Ctrl-C raises
    :class:`twolayer.Interrupted` with the searches' end points so far as
    ``partial``.

    Parameters
    ----------
    M : int
        Units of the teacher (and of the student unless ``K``; old spelling ``k``).
    runs : int
        Number of searches.
    init : {"xavier", "gaussian", "orthogonal"}
        Random starts (see :func:`random_starts`).
    seed : int, default 0
        Run r's start uses the stream (seed, r).
    d : int, optional
        Input dimension >= M (default max(M, K); the teacher is padded with zeros).
    train_readout : bool, default False
        Train the second layer too.
    activation : str, default "relu"
        Activation of student and teacher.
    max_iter : int, default 5000
        L-BFGS iterations per search at most.
    gtol : float, default 1e-8
        Gradient norm at which a search stops.
    memory : int, default 10
        L-BFGS memory.
    tol : float, default 1e-12
        Gradient norm the Newton refinement aims at.
    n_threads : int, optional
        OpenMP threads across searches (None: the OpenMP default).
    progress : bool, default False
        A tqdm bar of the searches finished.
    K : int, optional
        The student width (default M; K = M + 1, M + 2 is mild
        over-parameterisation; old spelling ``n_students``).
    teacher : Network, optional
        Any teacher Network with M units, ``scaling="none"`` and the
        student's activation (e.g. an orthonormal one, or one with biases);
        default the identity I_M (zero-padded to d columns). The input
        dimension d then defaults to the teacher's.
    train_bias : bool, default False
        Train the students' biases too (they start at zero; with the
        rescaling orbit (w_i, b_i, a_i) -> (c w_i, c b_i, a_i / c) of relu
        units the end points are reported at its canonical point).

    Returns
    -------
    MultistartResult

    Examples
    --------
    >>> res = tl.landscape.multistart(4, runs=8, seed=0)
    >>> sorted(set(res.kind)), sorted(set(res.isotropy))
    (['global minimum'], ['ΔS_4'])
    """
    k = integer(M, "M", 1, INT32_MAX)
    runs = integer(runs, "runs", 1, INT32_MAX)
    n = k if K is None else integer(K, "K", 1, INT32_MAX)
    if teacher is not None:
        check_network(teacher, "teacher", biases=True)
        if teacher.K != k:
            raise ValueError(f"teacher: expected M = {k} units, got {teacher.K}")
        if teacher.scaling != "none" or teacher.activation != activation:
            raise ValueError(f"teacher: expected scaling='none' and activation {activation!r}, got "
                             f"{teacher.scaling!r}, {teacher.activation!r}")
        if d is not None and integer(d, "d", 1, INT32_MAX) != teacher.d:
            raise ValueError(f"d: expected the teacher's input dimension {teacher.d}, got {d}")
        d = teacher.d
    d_ = max(k, n) if d is None else integer(d, "d", 1 if teacher is not None else k, INT32_MAX)
    choice(init, "init", ("xavier", "gaussian", "orthogonal"))
    seed = seed_arg(seed)
    train_readout = boolean(train_readout, "train_readout")
    train_bias = boolean(train_bias, "train_bias")
    progress = boolean(progress, "progress")
    max_iter = integer(max_iter, "max_iter", 0, INT32_MAX)
    memory = integer(memory, "memory", 1, INT32_MAX)
    gtol = positive(gtol, "gtol", allow_zero=True)
    if teacher is None:
        teacher = identity_teacher(k, activation)
        if d_ > k:
            teacher = Network(np.eye(k, d_), None, activation, scaling="none")
    with keep_partial(lambda: None):  # nothing finished yet
        W0 = random_starts(int(runs), int(n), int(d_), init, seed)
    a0 = np.ones((runs, n))
    meta: dict[str, object] = {"M": k, "K": n, "d": d_, "init": init, "seed": seed,
                               "train_readout": train_readout}
    tol_ = positive(tol, "tol")
    teacher_: Network = teacher
    biased = train_bias or teacher.has_bias  # the core's search with biases (population_gradient_mean)
    if biased:  # as elsewhere, bias entries only for a model with biases
        meta["train_bias"] = train_bias

    def result(out: dict[str, NDArray[Any]]) -> MultistartResult:
        status = [STATUS[int(s)] for s in out["status"]]
        cls = classify_batch(out["W"], out["a"], teacher_, activation, train_readout, tol=tol_,
                             bias=out.get("b"), train_bias=train_bias)
        status = ["converged after refinement" if s in ("stalled", "max_iter") and g <= tol_ else s
                  for s, g in zip(status, cls["grad_norm"], strict=True)]
        return MultistartResult(**cls, status=status, iterations=np.asarray(out["iterations"], dtype=np.int64),
                                meta=meta)

    def partial(out: dict[str, NDArray[Any]]) -> MultistartResult:
        """The search's end points as they are, so that Ctrl-C returns at once (classify_batch refines them)."""
        status = [STATUS[int(s)] for s in out["status"]]
        return MultistartResult(
            W=out["W"], a=out["a"], bias=out.get("b"), risk=np.asarray(out["loss"], dtype=np.float64),
            grad_norm=np.asarray(out["grad_norm"], dtype=np.float64), index=np.full(len(status), -1, dtype=np.int64),
            kind=["interrupted" if s == "interrupted" else "unclassified" for s in status],
            isotropy=[""] * len(status), status=status, iterations=np.asarray(out["iterations"], dtype=np.int64),
            meta=meta)

    out: dict[str, NDArray[Any]] | None = None
    # A Ctrl-C in the Python phases (the progress bar, the refinement and classification) keeps the searches
    # that had finished, as one in the core does.
    with keep_partial(lambda: None if out is None else partial(out)):
        with partial_result(partial), progress_bar(progress, int(runs), "run", "L-BFGS") as update:
            out = _core.multistart_lbfgs(
                W0,
                a0,
                activation,
                teacher.W,
                teacher.a,
                teacher.activation,
                1.0,
                train_readout=bool(train_readout),
                max_iter=int(max_iter),
                gtol=float(gtol),
                memory=int(memory),
                n_threads=n_threads_arg(n_threads),
                progress=update,
                b=np.zeros((runs, n)) if biased else None,
                teacher_bias=teacher.bias if biased else None,
                train_bias=train_bias,
            )
        return result(out)


def numpy_relu_loss_grad(W: NDArray[np.float64], V: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
    """Closed-form NumPy population loss and gradient (relu, lambda = w . x).

    Unit second layers; the reference the C++ search is tested and
    benchmarked against::

        L = 1/2 sum_ij f(w_i, w_j) - sum_ij f(w_i, v_j) + 1/2 sum_ij f(v_i, v_j)
        f(u, v) = |u| |v| (sin t + (pi - t) cos t) / (2 pi)
        dL/dw_i = w_i / 2 + sum_{j != i} g(w_i, w_j) - sum_j g(w_i, v_j)
        g(u, v) = ((pi - t) v + |v| sin t u / |u|) / (2 pi)

    with t the angle between u and v.

    Parameters
    ----------
    W : ndarray, shape (k, d)
        Student weights (non-zero rows).
    V : ndarray, shape (m, d)
        Teacher weights (non-zero rows).

    Returns
    -------
    loss : float
    grad : ndarray, shape (k, d)

    Examples
    --------
    >>> W = np.eye(3) + 0.1
    >>> loss, grad = tl.landscape.numpy_relu_loss_grad(W, np.eye(3))
    >>> student = tl.Network(W, None, "relu", scaling="none")
    >>> bool(np.isclose(loss, tl.population.risk(student, tl.landscape.identity_teacher(3))))
    True
    """
    W = as_float_array(W, "W", ndim=2)
    V = as_float_array(V, "V", ndim=2)
    if V.shape[1] != W.shape[1]:
        raise ValueError(f"V: expected {W.shape[1]} columns like W, got {V.shape[1]}")
    for name, X in (("W", W), ("V", V)):
        if np.any(np.all(X == 0, axis=1)):
            raise ValueError(f"{name}: rows must be non-zero (the closed form divides by the row norms)")
    with np.errstate(over="ignore", invalid="ignore"):
        loss, grad = _relu_loss_grad(W, V)
    if not (np.isfinite(loss) and np.all(np.isfinite(grad))):
        raise ValueError("W, V: the loss or its gradient exceeds the double range")
    return loss, grad


def _relu_loss_grad(W: NDArray[np.float64], V: NDArray[np.float64]) -> tuple[float, NDArray[np.float64]]:
    """:func:`numpy_relu_loss_grad` without the argument checks, as a user's NumPy loop would call it (bench/)."""

    def parts(A: NDArray[np.float64], B: NDArray[np.float64]) -> tuple[NDArray[np.float64], ...]:
        na = np.linalg.norm(A, axis=1)
        nb = np.linalg.norm(B, axis=1)
        c = np.clip((A @ B.T) / np.outer(na, nb), -1.0, 1.0)
        t = np.arccos(c)
        s = np.sqrt(1.0 - c * c)
        return na, nb, c, t, s

    na, _, c, t, s = parts(W, W)
    f_ww = np.outer(na, na) * (s + (np.pi - t) * c) / (2 * np.pi)
    _, nv, c2, t2, s2 = parts(W, V)
    f_wv = np.outer(na, nv) * (s2 + (np.pi - t2) * c2) / (2 * np.pi)
    nvv = np.linalg.norm(V, axis=1)
    cv = np.clip((V @ V.T) / np.outer(nvv, nvv), -1.0, 1.0)
    tv = np.arccos(cv)
    f_vv = np.outer(nvv, nvv) * (np.sqrt(1 - cv * cv) + (np.pi - tv) * cv) / (2 * np.pi)
    loss = 0.5 * f_ww.sum() - f_wv.sum() + 0.5 * f_vv.sum()
    u = W / na[:, None]
    np.fill_diagonal(t, 0.0)
    np.fill_diagonal(s, 0.0)
    g_self = ((np.pi - t) @ W + (s @ na)[:, None] * u) / (2 * np.pi)
    g_self -= (np.pi * W) / (2 * np.pi)  # remove the j = i term of (pi - t) w_j (t_ii = 0)
    g_teach = ((np.pi - t2) @ V + (s2 @ nv)[:, None] * u) / (2 * np.pi)
    grad = 0.5 * W + g_self - g_teach
    return float(loss), grad
