"""The diffusion approximation of online SGD at finite d: the ODE plus the first correction (Arnaboldi et al., "does
stochasticity help?").

One online SGD step (one fresh sample, conventions of :mod:`twolayer.sgd`, t = steps / d) moves the order
parameters y = (Q, M, a) by xi / d, with the per-sample increment (E = y - f including the label noise)

* ``xi_M_ir = lr a_i g'(l_i) l*_r E``, ``xi_a_i = lr_readout g(l_i) E`` (effective units, as in the ODE),
* ``xi_Q_ik = lr (a_i g'(l_i) l_k + a_k g'(l_k) l_i) E + lr^2 a_i a_k g'(l_i) g'(l_k) E^2`` (``|x|^2 / d -> 1``),

with biases (the overlaps' ``bias`` b and ``teacher_bias`` b*: l_i = w_i . x / sqrt(d) + b_i, l*_r = w*_r . x /
sqrt(d) + b*_r; the fields (w . x, w* . x) / sqrt(d) = (c, c*) ~ N(0, Omega) stay centred and every l_k, l*_r in
xi_Q and xi_M above is the centred c_k, c*_r, while g, g' and E see the means) and ``lr_bias > 0`` also

* ``xi_b_i = lr_bias a_i g'(l_i) E``,

and spherical SGD projects it linearly (``xi_M_ir - M_ir xi_Q_ii / 2``, ``xi_Q_ik - Q_ik (xi_Q_ii + xi_Q_kk) / 2``,
Q_ii fixed) as the ODE does. Over dt = 1/d the mean of xi is the ODE's right-hand side and its covariance
contributes Cov(xi) / d per unit time, so

    dy = F(y) dt + sqrt(Cov(xi)(y) / d) dB_t,

with F the ODE's online right-hand side. This is the paper's SDE
``dm = (Psi - m Phi / 2) dt + sqrt(gamma / d) (sigma_m - m sigma_Q / 2) . dB`` written for every order parameter and
the full covariance. :func:`increment_covariance` gives Cov(xi) and E[xi] (= F: a test), with the label noise
integrated exactly and, over the pre-activations,

* smooth units (``linear``, ``quadratic``, and the smooth non-polynomial ``erf``, ``tanh``, ``sigmoid``,
  ``softplus``, ``gelu``, ``silu``, ``sin``, ``cos``; also a polynomial target of :mod:`twolayer.targets`, given as
  ``target=`` or remembered by ``Overlaps.from_networks(student, target)``), with or without biases: Gauss-Hermite
  product quadrature over l = L u + (b, b*) (Omega = L L^T), exact for polynomial units and targets (the default
  node count is the smallest exact one: 3 for linear, 7 for quadratic, more for higher-degree targets) for any K,
  M (cost n^(K+M)), converged spectrally for the smooth non-polynomial units (default 48 nodes; the accuracy
  against 64 nodes, per activation, is in docs/layers/sde.rst; the cost 48^(K+M) limits them to K + M <= 3 in
  practice);
* any ``relu`` unit (relu students with linear, quadratic, relu or step teachers or a polynomial target, or relu
  teachers with linear or quadratic students), K + M <= 4, with or without biases: exactly, writing relu =
  l 1(l > 0) and relu' = 1(l > 0) so that every moment is a sum of Gaussian orthant moments E[poly(l) 1(l_S > 0)],
  l ~ N((b, b*), Omega) (Stein's lemma down to orthant probabilities: closed forms without biases, and a
  one-dimensional Price-path integral where four indicators meet; with biases Phi, the bivariate normal orthant,
  and certified Gauss-Legendre over it for three and four indicators). The kinks make Gauss-Hermite rules converge
  only algebraically, hence no quadrature there, and the drift is E[xi] from these moments (the ODE's right-hand
  side to rounding);
* ``relu`` or ``step`` units beside a smooth non-polynomial block (relu students with ``erf``, ``tanh``, ...
  teachers, or smooth students with relu or step teachers; at most 4 relu, step, linear or quadratic units), with
  or without biases: Gauss-Hermite over the smooth block's fields (default 48 nodes per field, checked at run time
  as for the smooth units) and, given them, the exact orthant moments with the conditioned means and covariance
  over the others (``meta["diffusion"] == "exact_gauss_hermite"``).

``step`` students have no diffusion term (ValueError): sigma' = 0 almost everywhere, so online SGD never moves
them, while the ODE's drift comes from the delta and its covariance would need E[delta(l)^2] = infinity (step
teachers, with biases too, are fine). A polynomial target takes student biases with every student but step (its
drift the ODE's with a target and biases; relu students through the exact orthant moments with means above).

:func:`simulate` integrates the SDE by Euler-Maruyama (strong order 1/2, weak order 1 in dt) over many paths in one
C++ call (OpenMP across threads, paths in SIMD lanes within a thread for the quadrature moments; GIL released,
Ctrl-C stops it), with Brownian increments from counter-based Philox streams keyed by (seed, path id):
bit-identical for any thread count, path j equal to the path run alone. It returns a :class:`twolayer.Ensemble`, as
:func:`twolayer.sgd.simulate` does, so ``first_passage``, ``mean``, ``std`` work as for SGD. See docs/conventions
for the clock (t = steps / d) and the effective second layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._deprecation import renamed
from ._interrupt import keep_partial, partial_result
from ._overlap_args import check_overlaps, check_target_overlaps, resolve_activations, resolve_target
from ._progress import progress_bar
from ._validation import (
    INT32_MAX,
    allocating,
    as_float_array,
    boolean,
    describe,
    integer,
    n_threads_arg,
    positive,
    run_indices,
    seed_arg,
)
from .activations import ActivationName, hermite_coefficients, is_custom, is_hermite
from .ode._bias import bias_kwargs
from .overlaps import BatchOverlaps, Overlaps
from .results import SIMULATION_STATUS, SIMULATION_TIME_UNIT, Ensemble, Status, Trajectory
from .sgd import converged_message

__all__ = ["IncrementCovariance", "increment_covariance", "simulate"]

@dataclass(frozen=True)
class IncrementCovariance:
    """Moments of the one-sample increment xi = d * (one SGD step's change of the order parameters).

    ``labels`` name the components: ``Q[i,k]`` (i <= k), ``M[i,r]``, then ``a[i]`` when the readout is trained.
    ``mean`` (n,) is E[xi] (= the ODE right-hand side), ``cov`` (n, n) is Cov(xi); the SDE's diffusion matrix is
    ``cov / d``.

    Attributes
    ----------
    labels : tuple of str
        Component names.
    mean : ndarray, shape (n,)
        E[xi].
    cov : ndarray, shape (n, n)
        Cov(xi).
    mean_error, cov_error : float
        The quadrature's estimated relative error with smooth non-polynomial units: the largest absolute
        difference to the rule with 16 more nodes over the largest absolute value, of ``mean`` and ``cov`` (0 for
        exact moments).

    Examples
    --------
    >>> ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    >>> inc = tl.sde.increment_covariance(ov, lr=0.5)
    >>> inc.labels, inc.cov.shape
    (('Q[0,0]', 'M[0,0]'), (2, 2))
    """

    labels: tuple[str, ...]
    mean: NDArray[np.float64]
    cov: NDArray[np.float64]
    mean_error: float = 0.0
    cov_error: float = 0.0


def _labels(K: int, M: int, readout: bool, bias: bool = False) -> tuple[str, ...]:
    out = [f"Q[{i},{k}]" for i in range(K) for k in range(i, K)]
    out += [f"M[{i},{r}]" for i in range(K) for r in range(M)]
    if readout:
        out += [f"a[{i}]" for i in range(K)]
    if bias:
        out += [f"b[{i}]" for i in range(K)]
    return tuple(out)


def _state(ov: Overlaps, biased: bool = False) -> NDArray[np.float64]:
    """The core's state [Q, M, a], then the student biases b in a run with biases."""
    parts = [ov.Q.ravel(), ov.M.ravel(), ov.a.ravel()] + ([ov.bias] if biased else [])
    return np.concatenate(parts)


_DEGREE = {"linear": 1, "quadratic": 2}
_EXACT = ("relu", "step")
# Smooth non-polynomial units: Gauss-Hermite converges spectrally (entire functions, or analytic in a strip), with
# _SMOOTH_NODES nodes by default (accuracy: docs/layers/sde.rst).
_SMOOTH = ("erf", "tanh", "sigmoid", "softplus", "gelu", "silu", "sin", "cos")
_SMOOTH_NODES = 48


def _smooth_unit(act: str) -> bool:
    """A smooth non-polynomial unit: one of _SMOOTH or a custom activation."""
    return act in _SMOOTH or is_custom(act)

_MAX_NODES = 128
# The run-time convergence check of the smooth rules: the relative difference to the rule with _CHECK_EXTRA more
# nodes, at most _MEAN_RTOL for the drift E[xi] and _COV_RTOL for the diffusion Cov(xi) at a run's start (both far
# below the Euler-Maruyama bias, O(dt), and the diffusion's own O(1/sqrt(d)) correction at any practical d). Runs of
# erf units alone keep their behaviour from before the check (fixed 48 nodes, accuracy documented; no extra cost).
_CHECK_EXTRA = 16
_MEAN_RTOL, _COV_RTOL = 1e-4, 1e-3


def _degree(act: str) -> int:
    """The degree of a polynomial activation (linear, quadratic, hermite)."""
    return len(hermite_coefficients(act)) - 1 if is_hermite(act) else _DEGREE[act]


def _rule(act: str, t_act: str, n_nodes: int | None,
          target_degree: int | None = None) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Gauss-Hermite rule for N(0, 1) (probabilists' Hermite polynomials), weights summing to 1: exact for
    polynomial units and targets, 48 nodes for the smooth non-polynomial units (erf, tanh, sigmoid, softplus, gelu,
    silu, sin, cos), also over a smooth block beside relu or step units; a placeholder one-node rule when relu or
    step units make the moments exact piecewise-polynomial expectations (then ``n_nodes`` is not used)."""
    if act == "step":
        raise ValueError("activation: no diffusion term for 'step' students: sigma' = 0 almost everywhere, so online "
                         "SGD never moves them (the ODE's drift comes from the delta sigma', and the covariance "
                         "would need E[delta(l)^2] = infinity); use regime='gradient_flow' in twolayer.ode")
    teacher = "linear" if target_degree is not None else t_act
    for name, value in (("activation", act), ("teacher_activation", teacher)):
        if value not in _EXACT and not _smooth_unit(value) and value not in _DEGREE and not is_hermite(value):
            raise ValueError(f"{name}: the SDE supports {', '.join(map(repr, (*_DEGREE, *_SMOOTH, *_EXACT)))}, "
                             f"hermite and custom activations, got {value!r}")
    if (act in _EXACT or teacher in _EXACT) and not _mixed(act, teacher):
        return np.zeros(1), np.ones(1)
    if n_nodes is not None:
        n = integer(n_nodes, "n_nodes", 1, _MAX_NODES)
    elif _smooth_unit(act) or _smooth_unit(teacher) or _mixed(act, teacher):
        n = _SMOOTH_NODES
    else:  # exact: 2n - 1 >= deg(xi_alpha xi_beta) = 2 max(ds + de, 2 (ds - 1) + 2 de)
        ds = _degree(act)
        de = max(ds, _degree(teacher) if target_degree is None else target_degree)
        n = max(ds + de, 2 * (ds - 1) + 2 * de) + 1
    return _gauss_hermite(n)


def _gauss_hermite(n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The n-node Gauss-Hermite rule for N(0, 1), weights summing to 1."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return np.ascontiguousarray(x), np.ascontiguousarray(w / w.sum())


def _quadrature_error(moments: Any, n: int, mean: NDArray[np.float64],
                      cov: NDArray[np.float64]) -> tuple[float, float]:
    """Relative errors of the n-node moments (mean, cov), estimated against the rule with _CHECK_EXTRA more nodes;
    ``moments(x, w)`` evaluates them with a rule."""
    fine_mean, fine_cov = moments(*_gauss_hermite(n + _CHECK_EXTRA))

    def rel(a: NDArray[np.float64], b: NDArray[np.float64]) -> float:
        scale = float(np.max(np.abs(b), initial=0.0))
        return float(np.max(np.abs(a - b), initial=0.0)) / scale if scale > 0 else 0.0

    return rel(mean, fine_mean), rel(cov, fine_cov)


def _smooth(act: str, t_act: str) -> bool:
    """Whether the moments are quadrature of a smooth non-polynomial unit (only converged, not exact)."""
    return (_smooth_unit(act) or _smooth_unit(t_act)) and act not in _EXACT and t_act not in _EXACT


def _mixed(act: str, t_act: str) -> bool:
    """Whether a relu or step unit sits beside a smooth non-polynomial one (or a hermite unit): Gauss-Hermite over
    the smooth block's fields, exact orthant moments over the others given them (converged, not exact)."""
    def smooth(a: str) -> bool:
        return _smooth_unit(a) or is_hermite(a)
    return (act in _EXACT and smooth(t_act)) or (t_act in _EXACT and smooth(act))


def _diffusion(act: str, t_act: str) -> str:
    """The method of the moments (``meta["diffusion"]``)."""
    if _mixed(act, t_act):
        return "exact_gauss_hermite"
    return "exact" if act in _EXACT or t_act in _EXACT else "gauss_hermite"


def _model(overlaps: Any, activation: Any, teacher_activation: Any, target: Any, spherical: bool,
           lr_bias: float = 0.0) -> tuple[Overlaps, str, str, Any, dict[str, Any]]:
    """(checked overlaps, student and teacher activation, polynomial target or None, the core's target and bias
    keywords: ``teacher_bias`` and ``lr_bias`` in a run with biases, whose state ends with the student's b)."""
    tgt = resolve_target(target, overlaps)
    if tgt is None:
        act, t_act = resolve_activations(activation, teacher_activation, overlaps)
        ov = check_overlaps(overlaps, spherical=spherical)
        bias = bias_kwargs(ov, lr_bias)
        return ov, act, t_act, None, {k: bias[k] for k in ("teacher_bias", "lr_bias")} if bias else {}
    if teacher_activation is not None:
        raise ValueError("teacher_activation: not used with a polynomial target (the target is the teacher)")
    ov, act = check_target_overlaps(overlaps, activation, tgt, spherical)
    bias = bias_kwargs(ov, lr_bias)
    alpha, coef = tgt._arrays()
    return ov, act, "target", tgt, {"target_alpha": alpha, "target_coef": coef,
                                    **({k: bias[k] for k in ("teacher_bias", "lr_bias")} if bias else {})}


def increment_covariance(
    overlaps: Overlaps,
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    noise: float = 0.0,
    lr_readout: float = 0.0,
    spherical: bool = False,
    n_nodes: int | None = None,
    target: Any = None,
    lr_bias: float = 0.0,
) -> IncrementCovariance:
    """Mean and covariance of the one-sample increment xi of online SGD at ``overlaps`` (see the module
    docstring). ``n_nodes``: Gauss-Hermite nodes per unit (default: exact for linear/quadratic, 48 for erf).

    Parameters
    ----------
    overlaps : Overlaps
        The state y.
    activation, teacher_activation : str, optional
        ``"linear"``, ``"quadratic"``, the smooth ``"erf"``, ``"tanh"``, ``"sigmoid"``, ``"softplus"``,
        ``"gelu"``, ``"silu"``, ``"sin"``, ``"cos"`` (Gauss-Hermite), ``"relu"`` (exact, K + M <= 4, with linear,
        quadratic, relu or step units; beside a smooth block: Gauss-Hermite over it, exact given it), or a
        ``"step"`` teacher (default: those of ``overlaps``).
    lr, noise, lr_readout, spherical
        As in :func:`twolayer.ode.integrate` (online regime).
    n_nodes : int, optional
        Gauss-Hermite nodes per unit (1..128; default: exact for linear/quadratic, 48 for the smooth
        non-polynomial units, also beside relu or step units); not used by the exact relu moments alone.
    target : HermiteTarget, optional
        A polynomial target instead of the committee teacher (default: the one ``overlaps`` remembers); then M is
        (K, k) and P = I_k, as in :func:`twolayer.ode.integrate`.
    lr_bias : float, default 0.0
        Learning rate of the student biases: with the overlaps' ``bias`` b and ``teacher_bias`` b* the units see
        l_i = w_i . x / sqrt(d) + b_i, and ``b[i]`` components xi_b_i = lr_bias a_i g'(l_i) E join when
        ``lr_bias > 0`` (every unit but step students, against a polynomial target too).

    Returns
    -------
    IncrementCovariance

    Examples
    --------
    Linear units, K = M = 1: the mean is the ODE's right-hand side (dQ/dt = 2 lr (M - Q) + lr^2 (Q - 2M + P),
    dM/dt = lr (P - M)):

    >>> ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    >>> inc = tl.sde.increment_covariance(ov, lr=0.5)
    >>> print(np.round(inc.mean, 6), np.round(tl.ode.rhs(ov, lr=0.5)[0].ravel(), 6))
    [-0.4  0.4] [-0.4]
    >>> print(np.round(inc.cov, 6))
    [[1.28 0.16]
     [0.16 0.56]]
    """
    sph = boolean(spherical, "spherical")
    ov, act, t_act, tgt, tkw = _model(overlaps, activation, teacher_activation, target, sph, lr_bias)
    lr_ = positive(lr, "lr")
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    x, w = _rule(act, t_act, n_nodes, None if tgt is None else tgt.degree)
    biased = "teacher_bias" in tkw
    moments = _moment_function(ov, act, t_act, tgt, sph, lr_, lr_a, noise_, tkw)
    mean, cov = moments(x, w)
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(cov))):
        raise ValueError(f"lr, noise, lr_readout: the increment's moments exceed the double range at lr = {lr_:g}, "
                         f"noise = {noise_:g}, lr_readout = {lr_a:g}: expected smaller values "
                         "(the covariance grows as lr^4 and noise^2)")
    err = _quadrature_error(moments, x.size, mean, cov) if _smooth(act, t_act) or _mixed(act, t_act) else (0.0, 0.0)
    return IncrementCovariance(_labels(ov.K, ov.n_teacher, lr_a > 0, biased and tkw["lr_bias"] > 0), mean, cov,
                               *err)


def _moment_function(ov: Overlaps, act: str, t_act: str, tgt: Any, sph: bool, lr_: float, lr_a: float,
                     noise_: float, tkw: dict[str, Any]) -> Any:
    """``(x, w) -> (E[xi], Cov(xi))`` at ``ov`` with the Gauss-Hermite rule (x, w)."""
    state = _state(ov, "teacher_bias" in tkw)

    def moments(x: NDArray[np.float64], w: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        return _core.sde_increment_moments(state, ov.K, ov.P, ov.v, act, "linear" if tgt else t_act, sph, lr_, lr_a,
                                           noise_, x, w, **tkw)

    return moments


def _start_overlaps(ov: Overlaps, y: NDArray[np.float64], biased: bool) -> Overlaps:
    """The overlaps of the core state ``y`` ([Q, M, a], then b when ``biased``) with ``ov``'s teacher."""
    K, M = ov.K, ov.n_teacher
    Q, Mo, a = y[: K * K].reshape(K, K), y[K * K: K * K + K * M].reshape(K, M), y[K * K + K * M: K * K + K * M + K]
    bias = y[K * K + K * M + K:] if biased else None
    return Overlaps(Q, Mo, ov.P, a, ov.v, bias=bias, teacher_bias=ov.teacher_bias if biased else None)


def _starts(overlaps: Any) -> tuple[Overlaps, NDArray[np.float64] | None]:
    """(the start that sets the model, the per-path core states or None for one start). A sequence's states carry
    the biases (dropped by the caller when the run has none) and its starts must share the teacher's biases."""
    if isinstance(overlaps, Overlaps):
        return overlaps, None
    if isinstance(overlaps, BatchOverlaps):  # its members, with their biases, as a sequence
        return _starts([overlaps[b] for b in range(len(overlaps))])
    if isinstance(overlaps, Sequence) and not isinstance(overlaps, str) and len(overlaps) > 0:
        starts = [check_overlaps(o, f"overlaps[{j}]") for j, o in enumerate(overlaps)]
        first = starts[0]
        for j, o in enumerate(starts):
            if not np.array_equal(o.teacher_bias, first.teacher_bias):
                raise ValueError(f"overlaps[{j}]: teacher_bias {o.teacher_bias} differs from overlaps[0]'s "
                                 f"{first.teacher_bias}: the paths of one call share the teacher")
        # a run with biases when any start has one (or lr_bias > 0): every path's state then carries b
        first = next((o for o in starts if o.has_bias), first)
        return first, np.stack([_state(o, True) for o in starts])
    raise TypeError(f"overlaps: expected a twolayer.Overlaps, BatchOverlaps or a non-empty sequence of Overlaps, "
                    f"got {type(overlaps).__name__}")

def _check_converged(moments: Any, x: NDArray[np.float64], w: NDArray[np.float64], what: str) -> tuple[float, float]:
    """The estimated relative errors (drift, diffusion) of the rule (x, w) at a start; ValueError naming
    ``n_nodes`` above _MEAN_RTOL or _COV_RTOL."""
    err = _quadrature_error(moments, x.size, *moments(x, w))
    if not (err[0] <= _MEAN_RTOL and err[1] <= _COV_RTOL):
        raise ValueError(
            f"n_nodes: the {x.size}-node Gauss-Hermite rule has not converged at the start for {what}: estimated "
            f"relative errors {err[0]:.2g} (drift) and {err[1]:.2g} (diffusion) against {x.size + _CHECK_EXTRA} "
            f"nodes, expected <= {_MEAN_RTOL:g} and {_COV_RTOL:g}; use more n_nodes (<= {_MAX_NODES}; cost "
            "n_nodes^(K + M) per step): the fields' variances (Q, P) are large for the activation's scale")
    return err


def _check_steps(n: float, names: str) -> None:
    """The Euler-Maruyama step count (the run's end over dt) must be an int64 count."""
    if not n < 2.0**62:
        raise ValueError(f"{names}: the run needs {n:.3g} steps of dt, more than 2**62; expected a larger dt or a "
                         "shorter run")


@renamed(records="n_records")
def simulate(
    overlaps: Overlaps | BatchOverlaps | Sequence[Overlaps],
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    lr_readout: float = 0.0,
    noise: float = 0.0,
    spherical: bool = False,
    t_max: float | None = None,
    times: ArrayLike | None = None,
    seed: int = 0,
    seeds: int | Sequence[int] = 1,
    n_records: int = 101,
    risk_tol: float | None = None,
    risk_rtol: float | None = None,
    n_threads: int | None = None,
    progress: bool = False,
    d: int,
    dt: float = 0.01,
    n_nodes: int | None = None,
    target: Any = None,
    lr_bias: float = 0.0,
) -> Ensemble:
    """Paths of the SGD diffusion approximation at dimension ``d`` (Euler-Maruyama, step ``dt`` in t = steps / d).

    Parameters
    ----------
    overlaps : Overlaps, BatchOverlaps or sequence of Overlaps
        One start for every path, or one per path (as many as ``seeds`` gives).
    activation, teacher_activation : str, optional
        As in :func:`increment_covariance` (default: those of ``overlaps``).
    lr, lr_readout, noise, spherical
        As in :func:`twolayer.ode.integrate` (online regime; effective second layers).
    t_max, times, n_records
        Record at ``n_records`` equal steps up to ``t_max`` or at ``times`` (each moved to the nearest multiple of
        ``dt``); the returned ``t`` holds the times used.
    seed, seeds
        The master seed and the path ids (an int n: 0..n-1; or a sequence of ids < 2^32): path j draws its
        Brownian increments from the stream (seed, j).
    risk_tol, risk_rtol
        Stop a path, status ``"converged"``, at the first step whose excess risk is <= max(risk_tol, risk_rtol *
        R(0)); its last row is that step's state and ``stop_time`` the crossing interpolated linearly between the
        last two steps.
    n_threads : int, optional
        OpenMP threads (paths are bitwise the same for any number).
    progress : bool, default False
        A tqdm bar over steps.
    d : int
        Dimension: the diffusion is Cov(xi) / d.
    dt : float, default 0.01
        Euler-Maruyama step. With quadrature moments the drift is E[xi] from the same rule (the ODE's right-hand
        side: exactly for polynomial units, to the rule's accuracy for erf); with exact relu moments, their E[xi]
        (the ODE's right-hand side to rounding).
    n_nodes
        Gauss-Hermite nodes per unit for the covariance (see :func:`increment_covariance`).
    target : HermiteTarget, optional
        A polynomial target (see :func:`increment_covariance`).
    lr_bias : float, default 0.0
        Learning rate of the student biases (see :func:`increment_covariance`); a run with biases (a nonzero
        ``bias`` or ``teacher_bias`` of the overlaps, or ``lr_bias > 0``) records ``bias`` (T, K) and
        ``teacher_bias`` in every trajectory. Starts given as a sequence share the teacher's biases.

    The arguments shared with :func:`twolayer.sgd.simulate` come in its order (``lr``, ``lr_readout``,
    ``noise``, ``spherical``, ``t_max``, ``times``, ``seed``, then ``seeds``, ``n_records``, ``risk_tol``,
    ``risk_rtol``, ``n_threads``, ``progress``), all by keyword here.

    Returns
    -------
    twolayer.Ensemble
        Statuses: completed, converged, diverged (by the rule every engine shares, checked at every step: the
        state not finite, grown past 1e8 times the scale of its start and teacher, or out of the positive
        semi-definite cone; docs: conventions, "Divergence"; the message says which), interrupted.

    Examples
    --------
    >>> ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    >>> ens = tl.sde.simulate(ov, lr=0.5, d=100, t_max=1.0, n_records=3, seeds=4, seed=0)
    >>> ens, ens.t.tolist()
    (Ensemble(runs=4, T=3, diverged=0, converged=0, seed=0), [0.0, 0.5, 1.0])
    >>> print(np.round(ens.mean().risk, 6))
    [0.8      0.542449 0.378277]
    >>> print(np.round(tl.ode.integrate(ov, lr=0.5, t_max=1.0, n_records=3).risk, 6))
    [0.8      0.549831 0.377893]
    """
    first, y0 = _starts(overlaps)
    sph = boolean(spherical, "spherical")
    ov, act, t_act, tgt, tkw = _model(first, activation, teacher_activation, target, sph, lr_bias)
    biased = "teacher_bias" in tkw
    if y0 is not None and not biased:  # all biases 0: drop them
        y0 = y0[:, : y0.shape[1] - ov.K]
    if y0 is not None and sph and np.any(np.abs(y0[:, : ov.K * ov.K : ov.K + 1] - 1.0) > 1e-10):
        raise ValueError("overlaps: spherical=True needs diag(Q) = 1 for every path")
    lr_ = positive(lr, "lr")
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    d_ = integer(d, "d", 1, INT32_MAX)
    dt_ = positive(dt, "dt")
    x, w = _rule(act, t_act, n_nodes, None if tgt is None else tgt.degree)
    quad_err: tuple[float, float] | None = None  # (erf alone: not checked, see _MEAN_RTOL; polynomial: exact)
    if (_smooth(act, t_act) and {act, t_act} != {"erf"}) or _mixed(act, t_act):  # converged at the (first) start
        start = ov if y0 is None else _start_overlaps(ov, y0[0], biased)
        teacher = "a polynomial target" if tgt else f"{t_act!r} teachers"
        quad_err = _check_converged(_moment_function(start, act, t_act, tgt, sph, lr_, lr_a, noise_, tkw), x, w,
                                    f"{act!r} students with {teacher}")
    run_ids = run_indices(seeds)
    if y0 is not None and y0.shape[0] != run_ids.size:
        raise ValueError(f"overlaps: got {y0.shape[0]} starts for {run_ids.size} paths (seeds)")
    keys = run_ids[:, None].astype(np.float64) if y0 is None else np.column_stack([run_ids, y0])
    if np.unique(keys, axis=0).shape[0] != keys.shape[0]:
        raise ValueError("seeds: path ids must be distinct (an id may repeat only with a different start): two "
                         f"paths with the same id and start are the same path, got {describe(seeds)}")
    if times is not None:
        tt = as_float_array(times, "times", ndim=1)
        if tt.size == 0 or np.any(tt < 0) or np.any(np.diff(tt) <= 0):
            raise ValueError("times: expected a non-empty, strictly increasing array of times >= 0")
        _check_steps(float(tt[-1]) / dt_, "times, dt")
        steps_rec = np.round(tt / dt_).astype(np.int64)
        if np.any(np.diff(steps_rec) <= 0):
            raise ValueError(f"times: two requested times fall on the same step (spacing below dt = {dt_:g})")
    else:
        if t_max is None:
            raise ValueError("t_max: give t_max or times")
        tm = positive(t_max, "t_max")
        n_rec = integer(n_records, "n_records", 2, INT32_MAX)
        _check_steps(tm / dt_, "t_max, dt")
        with allocating("n_records", n_rec):
            steps_rec = np.unique(np.round(np.linspace(0.0, tm, n_rec) / dt_).astype(np.int64))
    n_steps = int(steps_rec[-1])
    t_rec = np.asarray(steps_rec * dt_, dtype=np.float64)
    tol = -1.0 if risk_tol is None else positive(risk_tol, "risk_tol")
    rtol = -1.0 if risk_rtol is None else positive(risk_rtol, "risk_rtol")
    seed_ = seed_arg(seed)
    meta: dict[str, Any] = {"activation": act, "teacher_activation": t_act, "spherical": sph, "d": d_, "dt": dt_,
                            "seed": seed_, "integrator": "euler_maruyama", "regime": "online",
                            "diffusion": _diffusion(act, t_act),
                            "n_nodes": 0 if _diffusion(act, t_act) == "exact" else int(x.size)}
    if quad_err is not None:  # the start's estimated relative quadrature errors
        meta.update(drift_error=quad_err[0], diffusion_error=quad_err[1])
    if tgt is not None:
        meta["target"] = repr(tgt)
    if biased:
        meta["lr_bias"] = float(tkw["lr_bias"])
    params = {"lr": np.full(run_ids.size, lr_), "lr_readout": np.full(run_ids.size, lr_a),
              "noise": np.full(run_ids.size, noise_), "risk_tol": np.full(run_ids.size, tol if tol > 0 else np.nan),
              "risk_rtol": np.full(run_ids.size, rtol if rtol > 0 else np.nan)}

    def results(out: dict[str, Any]) -> Ensemble:
        runs = []
        for j, rid in enumerate(run_ids):
            T = int(out["recorded"][j])
            status = SIMULATION_STATUS[int(out["status"][j])]
            stop_time = float(out["stop_time"][j])
            t = t_rec[:T].copy()
            if status == Status.converged and T > 0:  # the last row is the step at which the path crossed
                t[-1] = math.ceil(stop_time / dt_ - 1e-9) * dt_
            if status == Status.converged:
                msg = converged_message(out["risk"][j, :T], params, j, stop_time)
            elif status == Status.diverged:
                msg = _core.diverged_message(stop_time, str(out["reason"][j]))
            elif status == Status.interrupted:
                msg = _core.interrupted_message(stop_time, round(stop_time / dt_))
            else:
                msg = _core.sde_completed_message(n_steps, dt_)
            runs.append(Trajectory(t=t, Q=out["Q"][j, :T].copy(), M=out["M"][j, :T].copy(),
                                   a=out["a"][j, :T].copy(), risk=out["risk"][j, :T].copy(), status=status,
                                   message=msg, time_unit=SIMULATION_TIME_UNIT,
                                   meta={**meta, "lr": lr_, "lr_readout": lr_a, "noise": noise_, "run": int(rid),
                                         "risk_tol": tol if tol > 0 else math.nan,
                                         "risk_rtol": rtol if rtol > 0 else math.nan},
                                   P=ov.P.copy(), v=ov.v.copy(), stop_time=stop_time,
                                   bias=out["bias"][j, :T].copy() if biased else None,
                                   teacher_bias=ov.teacher_bias.copy() if biased else None))
        return Ensemble(runs=runs, run_ids=run_ids, t=t_rec, seed=seed_, meta=meta, params=params)

    state = _state(ov, biased) if y0 is None else np.ascontiguousarray(y0)
    out: dict[str, Any] | None = None
    with keep_partial(lambda: None if out is None else results(out)):  # a Ctrl-C in the bar or the conversion
        with partial_result(results), progress_bar(progress, n_steps * run_ids.size, "step", "SDE", True) as update:
            out = _core.sde_simulate(state, ov.K, ov.P, ov.v, act, "linear" if tgt else t_act, sph, lr_, lr_a,
                                     noise_, d_, dt_, n_steps, steps_rec, x, w, seed_, run_ids.astype(np.uint32), tol,
                                     rtol, n_threads_arg(n_threads), progress=update, **tkw)
        return results(out)

