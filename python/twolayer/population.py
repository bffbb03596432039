"""Population (infinite-data) risk, gradient, Hessian and gradient descent in weight space.

R = 1/2 E_x[(y(x) - f(x))^2] with x ~ N(0, I_d), computed exactly from the overlaps through the I2 kernels:
R = 1/2 sum_ik a_i a_k I2(Q) - sum_ir a_i v_r I2(Q, M, P) + 1/2 sum_rt v_r v_t I2(P), with effective (readout-scaled)
second layers. The returned risk is the *excess* risk; output noise of variance Delta adds Delta/2 and is
only included when ``noise`` is given. Everything is computed in the C++ core (Gram matrices, kernel Jets,
two GEMM-like contractions for the gradient, rank updates for the Hessian). Conventions: the documentation's
Conventions page.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core, _population_bias
from ._deprecation import renamed
from ._interrupt import partial_result
from ._validation import INT32_MAX, as_float_array, boolean, integer, n_threads_arg, positive
from .activations import CLOSED_FORM
from .networks import Network, check_network
from .overlaps import check_pair, gram
from .results import Status, Trajectory
from .schedules import Schedule, as_schedule, core_arg
from .targets import HermiteTarget, is_target

_CoreArgs = tuple[NDArray[np.float64], NDArray[np.float64], str, NDArray[np.float64], NDArray[np.float64], str, float]

# Rows whose pre-activation standard deviation |w| / sqrt(s) lies outside this range are rescaled (see _unit_scale).
_SD_RANGE = (1e-50, 1e50)
# Degree of homogeneity sigma(c x) = c^k sigma(x) (erf: see _unit_scale).
_DEGREE = {"linear": 1, "relu": 1, "step": 0, "quadratic": 2}


def _unit_scale(net: Network, name: str) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    """(W~, a~, c): rows w~_i = w_i / c_i with a power of two c_i bringing |w~_i| / sqrt(s) into range and the
    effective second layer a~_i = c a_i c_i^k, so that every unit's output a_i sigma(w_i . x) is unchanged.

    Homogeneous activations are exact (k their degree). erf rows go to standard deviation 2^32 (huge: erf is
    then sign, degree 0) or 2^-32 (tiny: erf is then linear, degree 1), exact to ~1e-19 relative. c_i = 1 for
    rows already in range, so ordinary calls see their own weights."""
    W = as_float_array(net.W, f"{name}.W")
    a = as_float_array(net.effective_a, f"{name}.a")
    c = np.ones(net.K)
    m = np.max(np.abs(W), axis=1)
    with np.errstate(over="ignore", under="ignore"):
        sd = m * np.linalg.norm(W / np.where(m > 0, m, 1.0)[:, None], axis=1) / np.sqrt(net.scale)
    out = (sd > 0) & ((sd < _SD_RANGE[0]) | (sd > _SD_RANGE[1]))
    if not np.any(out):
        return W, a, c
    if net.activation == "erf":
        target = np.where(sd > 1.0, 2.0**32, 2.0**-32)
        k = np.where(sd > 1.0, 0, 1)
    else:
        target = np.ones(net.K)
        k = np.full(net.K, _DEGREE[net.activation])
    c[out] = np.exp2(np.round(np.log2(sd[out] / target[out])))
    with np.errstate(over="ignore", under="ignore"):
        scaled = a * c**k
    if not np.all(np.isfinite(scaled)):
        raise ValueError(f"{name}.W: weights out of range: a_i |w_i|^k (k the degree of {net.activation!r}) "
                         f"exceeds the double range (max |w_i| / sqrt(s) = {np.max(sd):.3g})")
    # a subnormal (or underflowed) a~_i would carry too few bits: the gradient a~_i g~ / c_i loses its precision
    if np.any(out & (a != 0) & (np.abs(scaled) < np.finfo(np.float64).tiny)):
        raise ValueError(f"{name}.W: weights out of range: a_i |w_i|^k (k the degree of {net.activation!r}) "
                         f"falls below the normal double range (min |w_i| / sqrt(s) = {np.min(sd[out]):.3g})")
    a = scaled
    return W / c[:, None], a, c


def _args(student: Network, teacher: Network) -> tuple[_CoreArgs, NDArray[np.int64], NDArray[np.int64]]:
    """The core's arguments at rescaled weights (see _unit_scale), and the diagonal D = 2^e of the change of
    variables theta~ = D theta on the student's [vec(W), a] (gradient = D grad~, Hessian = D H~ D), as the
    integer exponents e (eW, ea): applied with np.ldexp, exact and free of intermediate overflow (1 / c
    itself overflows for a subnormal row, c < 2^-1022, although D grad~ is finite)."""
    check_pair(student, teacher)
    Ws, as_, c = _unit_scale(student, "student")
    Wt, at, _ = _unit_scale(teacher, "teacher")
    k = 1 if student.activation == "erf" else _DEGREE.get(student.activation, 0)
    e = np.log2(c).astype(np.int64)  # c is a power of two
    eW = np.repeat(-e, student.d)
    ea = e * np.where((student.activation == "erf") & (c > 1.0), 0, k)
    return (Ws, as_, student.activation, Wt, at, teacher.activation, student.scale), eW, ea


def _finite(x: NDArray[np.float64], what: str) -> NDArray[np.float64]:
    if not np.all(np.isfinite(x)):
        raise ValueError(f"student.W, student.a: weights out of range: the population {what} exceeds the double "
                         "range")
    return x


def aligned_step_units(student: Network, teacher: Network) -> str | None:
    """Which step units are exactly aligned, if any.

    Exactly aligned (1 - cos^2 < 1e-16): two student rows, or a student row
    on a step teacher row. The risk has a kink there and its Hessian is
    undefined. With biases the rows are (w_i / sqrt(s), b_i): aligned when
    one pre-activation is a multiple of the other (a common direction with
    different thresholds is smooth).

    Parameters
    ----------
    student, teacher : Network
        The pair.

    Returns
    -------
    str or None
        What is aligned, or None (always None for non-step students).

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(2, 2, 10, "step", seed=0)
    >>> tl.population.aligned_step_units(s, t) is None
    True
    >>> tl.population.aligned_step_units(s.with_weights([s.W[0], 2 * s.W[0]]), t)
    'student row 0 and student row 1 are exactly aligned (|cos| = 1)'
    """
    check_pair(student, teacher, biases=True)
    if student.activation != "step":
        return None

    def rows_of(net: Network) -> NDArray[np.float64]:
        # with biases the pre-activations w.x / sqrt(s) + b: units are degenerate when (w / sqrt(s), b) are parallel
        # (one pre-activation a multiple of the other, thresholds included; same direction and different thresholds
        # is smooth)
        if not (student.has_bias or teacher.has_bias):
            return net.W
        return np.concatenate([net.W / np.sqrt(net.scale), net.bias[:, None]], axis=1)

    rows = [("student row", student)] + ([("teacher row", teacher)] if teacher.activation == "step" else [])
    m = np.max(np.abs(student.W), axis=1, keepdims=True)
    Su = rows_of(student)
    mu = np.max(np.abs(Su), axis=1, keepdims=True)
    U = np.where(m > 0, Su / np.where(mu > 0, mu, 1.0), 0.0)
    U /= np.where(m > 0, np.linalg.norm(U, axis=1, keepdims=True), 1.0)
    for label, net in rows:
        mx = np.max(np.abs(net.W), axis=1, keepdims=True)
        X = rows_of(net)
        mxa = np.max(np.abs(X), axis=1, keepdims=True)
        V = np.where(mx > 0, X / np.where(mxa > 0, mxa, 1.0), 0.0)
        V /= np.where(mx > 0, np.linalg.norm(V, axis=1, keepdims=True), 1.0)
        if X is net.W:
            cos = U @ V.T
            close = 1.0 - cos * cos < 1e-16
        else:  # by chords (exact for rows that are exact multiples, where 1 - cos^2 rounds to a few ulps)
            chord = np.minimum(np.linalg.norm(U[:, None] - V[None], axis=2), np.linalg.norm(U[:, None] + V[None],
                                                                                              axis=2))
            close = chord < 1e-8
        hit = close & (m > 0) & (mx.T > 0)
        if label == "student row":
            hit &= ~np.eye(student.K, dtype=bool)
        if np.any(hit):
            i, j = map(int, np.argwhere(hit)[0])
            return f"student row {i} and {label} {j} are exactly aligned (|cos| = 1)"
    return None


def _hermite(student: Network, target: Any, what: str, biases: bool = False) -> HermiteTarget:
    """``target`` if it is a polynomial target matching the student (d, scaling; student biases only where the
    caller handles them, ``biases``); a clear error otherwise."""
    check_network(student, "student", biases=biases)
    if not isinstance(target, HermiteTarget):
        raise TypeError(f"teacher: the {what} of a {type(target).__name__} has no closed form (only committee "
                        "Networks and polynomial HermiteTargets); estimate it from samples, e.g. with sgd.simulate")
    if target.d != student.d or target.scaling != student.scaling:
        raise ValueError(f"teacher: the target's d = {target.d}, scaling {target.scaling!r} do not match the "
                         f"student's d = {student.d}, scaling {student.scaling!r}")
    return target


def _target_overlaps(student: Network, target: HermiteTarget) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    return (gram(student.W, student.W, student.scale, "student.W"),
            gram(student.W, target.directions, student.scale, "student.W, teacher.directions"))


def _target_risk(student: Network, target: Any) -> float:
    """Excess risk against a polynomial target (exact: target.hpp; with student biases the committee part through
    the kernels with means, the target part by certified quadrature, or orthant moments with means for relu and
    step)."""
    tgt = _hermite(student, target, "population risk", biases=True)
    Q, M = _target_overlaps(student, tgt)
    bias = student.bias if student.has_bias else None
    return float(_finite(np.asarray(_core.target_risk(*tgt._arrays(), Q, M, student.effective_a,
                                                      student.activation, bias)), "risk"))


def _target_gradient(student: Network, target: Any, train_readout: bool, train_bias: bool) -> tuple[
        NDArray[np.float64], NDArray[np.float64] | None, NDArray[np.float64] | None]:
    """The committee part 1/2 E[f^2] through the core (a zero teacher), plus the target part through the overlaps:
    dR/dw_i = 2 dR/dQ_ii w_i / s + sum_r dR/dM_ir w*_r / s, dR/da_i = -c E[sigma(l_i) f],
    dR/db_i = -a_i E[sigma'(l_i) f] (effective a; l_i with its bias)."""
    tgt = _hermite(student, target, "population gradient", biases=True)
    zero = Network(tgt.directions[:1], np.zeros(1), student.activation, student.scaling)
    if train_bias:
        dW, da, db = gradient(student, zero, train_readout, train_bias=True)
    else:
        dW, da = gradient(student, zero, train_readout)
    Q, M = _target_overlaps(student, tgt)
    alpha, coef = tgt._arrays()
    bias = student.bias if student.has_bias else None
    dQ, dM, sig, db_t = _core.target_cross_grad(alpha, coef, Q, M, student.effective_a, student.activation, bias)
    s = student.scale
    dW = dW + 2.0 * np.diag(dQ)[:, None] * student.W / s + dM @ tgt.directions / s
    if da is not None:
        da = da - student.readout_factor * sig
    return _finite(dW, "gradient"), da, _finite(db + db_t, "gradient") if train_bias else None


def _target_hessian(student: Network, target: Any, train_readout: bool, n_threads: int | None,
                    train_bias: bool = False) -> NDArray[np.float64]:
    """The student-only part through the core (a zero teacher), plus the target's cross term -sum_i c a_i phi_i,
    phi_i(w_i, b_i) = Phi(q_i, m_i, b_i) = E[sigma(b_i + l_i) f] with q_i = |u_i|^2, m_ir = u_i . u*_r,
    u = w / sqrt(s): d2 phi / du2 = 2 Phi_q I + 4 Phi_qq u u^T + 2 sum_r Phi_qr (u u*_r^T + u*_r u^T)
    + sum_rt Phi_rt u*_r u*_t^T (one d x d block per unit; d/dw = d/du / sqrt(s)), the (w_i, a_i) block
    -c d phi_i / dw_i, and with train_bias d2 phi / du db = 2 Phi_bq u + sum_r Phi_br u*_r, d2 phi / db2 = Phi_bb,
    d2 phi / da db = c Phi_b (Phi's b-derivatives are E[sigma^(n)(b + l) .], the core's target_unit_jet)."""
    tgt = _hermite(student, target, "population Hessian", biases=True)
    # the core's jet takes the closed-form five without a bias and every smooth activation through the with-bias
    # form (zeros are fine), so a smooth student goes there whether or not its biases are trained
    biased = train_bias or student.has_bias or student.activation not in CLOSED_FORM
    zero = Network(tgt.directions[:1], np.zeros(1), student.activation, student.scaling)
    H = hessian(student, zero, train_readout, n_threads, train_bias=train_bias)
    Q, M = _target_overlaps(student, tgt)
    alpha, coef = tgt._arrays()
    jet = _core.target_unit_jet(alpha, coef, np.diag(Q).copy(), M, student.activation,
                                student.bias if biased else None)
    _, phi_q, phi_m, phi_qq, phi_qm, phi_mm = jet[:6]
    s, d, c, K = student.scale, student.d, student.readout_factor, student.K
    U, Us = student.W / math.sqrt(s), tgt.directions / math.sqrt(s)
    ea = student.effective_a
    ob = K * d + (K if train_readout else 0)  # the b-block
    for i in range(K):
        u = U[i]
        cross = np.outer(u, phi_qm[i] @ Us)
        Hu = (2.0 * phi_q[i] * np.eye(d) + 4.0 * phi_qq[i] * np.outer(u, u) + 2.0 * (cross + cross.T)
              + Us.T @ phi_mm[i] @ Us)
        blk = slice(i * d, (i + 1) * d)
        H[blk, blk] -= ea[i] * (0.5 * (Hu + Hu.T)) / s  # exactly symmetric
        if train_readout:
            g = (2.0 * phi_q[i] * u + phi_m[i] @ Us) / math.sqrt(s)
            H[blk, K * d + i] -= c * g
            H[K * d + i, blk] -= c * g
        if train_bias:
            phi_b, phi_bb, phi_bq, phi_bm = (x[i] for x in jet[6:])
            gb = ea[i] * (2.0 * phi_bq * u + phi_bm @ Us) / math.sqrt(s)
            H[blk, ob + i] -= gb
            H[ob + i, blk] -= gb
            H[ob + i, ob + i] -= ea[i] * phi_bb
            if train_readout:
                H[K * d + i, ob + i] -= c * phi_b
                H[ob + i, K * d + i] -= c * phi_b
    return _finite(H, "Hessian")


def _with_bias(student: Network, teacher: Any) -> bool:
    """Whether a (student, committee teacher) pair takes the bias path (either has a nonzero bias; checked)."""
    if not isinstance(teacher, Network):
        return False
    check_pair(student, teacher, biases=True)
    return student.has_bias or teacher.has_bias


def risk(student: Network, teacher: Network | HermiteTarget, noise: float = 0.0,
         n_threads: int | None = None) -> float:
    """The population risk 1/2 E[(y - f)^2], exactly (closed-form kernels).

    Parameters
    ----------
    student : Network
    teacher : Network or HermiteTarget
        Same input dimension and scaling. For a polynomial target the risk
        is 1/2 a^T I2(Q) a - sum_i a_i E[sigma(l_i) f] + 1/2 E[f^2], exact.
    noise : float, default 0.0
        Variance Delta of the teacher's output noise: adds Delta / 2.
    n_threads : int, optional
        OpenMP threads (None: the OpenMP default).

    Returns
    -------
    float
        The excess risk (plus ``noise / 2``).

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(2, 2, 10, "erf", seed=0)
    >>> print(f"{tl.population.risk(s, t):.6f}")
    0.520377
    >>> print(f"{tl.population.risk(s, t, noise=0.5):.6f}")
    0.770377
    >>> tl.population.risk(t, t) < 1e-15               # the teacher itself
    True
    """
    noise_ = positive(noise, "noise", allow_zero=True)
    if not isinstance(teacher, Network):
        return _target_risk(student, teacher) + 0.5 * noise_
    if _with_bias(student, teacher):
        r_b = _population_bias.risk(student, teacher, n_threads_arg(n_threads))
        return float(_finite(np.asarray(r_b), "risk")) + 0.5 * noise_
    args, _, _ = _args(student, teacher)
    r = np.asarray(_core.population_risk(*args, n_threads=n_threads_arg(n_threads)))
    return float(_finite(r, "risk")) + 0.5 * noise_


def gradient(
    student: Network,
    teacher: Network | HermiteTarget,
    train_readout: bool = True,
    n_threads: int | None = None,
    train_bias: bool = False,
) -> Any:
    """The gradient of the population risk.

    Non-finite weights raise ValueError; huge or tiny rows are rescaled
    (homogeneity), and a gradient beyond the double range raises ValueError.
    With biases (lambda_i = w_i . x / sqrt(s) + b_i, on either network) the
    risk's expectations are the kernels with means (exact conditioning and
    certified quadrature, see :mod:`twolayer.kernels`); against a polynomial
    target the target's part is, after the exact conditioning, a certified
    quadrature over the student field (smooth students) or orthant moments
    with means (relu and step); rows are not rescaled, and a step unit
    with itself enters through step^2 = step (its deltas combined first).

    Parameters
    ----------
    student : Network
    teacher : Network or HermiteTarget
        Same input dimension and scaling (a polynomial target too).
    train_readout : bool, default True
        Also return dR/da (with respect to the network's ``a``).
    n_threads : int, optional
        OpenMP threads (None: the OpenMP default).
    train_bias : bool, default False
        Also return dR/db (the student's biases), as a third entry.

    Returns
    -------
    dW : ndarray, shape (K, d)
        dR/dW.
    da : ndarray, shape (K,), or None
        dR/da, None when ``train_readout`` is False.
    db : ndarray, shape (K,)
        dR/db, only when ``train_bias`` is True.

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(2, 2, 10, "erf", seed=0)
    >>> dW, da = tl.population.gradient(s, t)
    >>> dW.shape, da.shape
    ((2, 10), (2,))
    >>> float(np.abs(tl.population.gradient(t, t)[0]).max()) < 1e-12
    True

    With trained biases:

    >>> sb = s.with_weights(s.W, bias=[0.5, -0.5])
    >>> dW, da, db = tl.population.gradient(sb, t, train_bias=True)
    >>> db.shape
    (2,)
    """
    train_readout = boolean(train_readout, "train_readout")
    train_bias = boolean(train_bias, "train_bias")
    if _with_bias(student, teacher):
        dW, da, db = (_finite(x, "gradient") for x in _population_bias.gradient(student, cast(Network, teacher),
                                                                                      n_threads_arg(n_threads)))
        out: tuple[Any, ...] = (dW, da if train_readout else None)
        return (*out, db) if train_bias else out
    da_out: NDArray[np.float64] | None
    if is_target(teacher):
        dW, da_out, db_t = _target_gradient(student, teacher, train_readout, train_bias)
        return (dW, da_out, db_t) if train_bias else (dW, da_out)
    args, DW, Da = _args(student, cast(Network, teacher))  # checked there (a TypeError for anything else)
    dW, da = _core.population_gradient(*args, n_threads=n_threads_arg(n_threads))
    with np.errstate(over="ignore", invalid="ignore"):
        dW = _finite(np.ldexp(dW, DW.reshape(dW.shape)), "gradient")
        da = _finite(np.ldexp(da, Da), "gradient")
    da_out = da * student.readout_factor if train_readout else None
    if not train_bias:
        return dW, da_out
    db = _population_bias.gradient(student, cast(Network, teacher), n_threads_arg(n_threads))[2]
    return dW, da_out, _finite(db, "gradient")


def hessian(
    student: Network,
    teacher: Network | HermiteTarget,
    train_readout: bool = True,
    n_threads: int | None = None,
    train_bias: bool = False,
) -> NDArray[np.float64]:
    """The analytic Hessian of the population risk.

    Exactly aligned relu pairs (a student on a teacher, as at the global
    minimum) use the weight-space limit of the angle terms (they vanish like
    sin(theta)); exactly aligned step units make the Hessian undefined
    (ValueError, see :func:`aligned_step_units`). With biases (on either
    network, or ``train_bias``) the second derivatives are pair moments
    E[s^(p)(l_i) s^(q)(l_k)], p + q <= 4, of the kernels with means (Stein's
    lemma in the core; a unit with itself as one unit's expectations
    E[(s^2)^(n)], so that the deltas of relu and step units combine first);
    against a polynomial target the target's part adds its bias derivatives
    E[s^(n)(b + l) f] (every student; relu and step through orthant moments
    with means);
    biases not in ``train_bias`` are held fixed.

    Parameters
    ----------
    student : Network
    teacher : Network or HermiteTarget
        Same input dimension and scaling (a polynomial target too).
    train_readout : bool, default True
        On [vec(W) row-major, a]; False: on vec(W) alone.
    n_threads : int, optional
        OpenMP threads (None: the OpenMP default).
    train_bias : bool, default False
        Also the student's biases b, last: on [vec(W), a, b] (or [vec(W), b]
        without ``train_readout``), the order of :func:`gradient`'s entries.

    Returns
    -------
    ndarray, shape (n, n)
        n = K d, plus K for ``train_readout``, plus K for ``train_bias``.

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(2, 2, 10, "erf", seed=0)
    >>> H = tl.population.hessian(s, t)
    >>> H.shape, bool(np.allclose(H, H.T))
    ((22, 22), True)

    Against a polynomial target (exact: the target's cross term
    -sum_i a_i E[sigma(l_i) f] differentiated twice by Price's theorem):

    >>> tgt = tl.targets.staircase(2, d=10, seed=0)
    >>> tl.population.hessian(s, tgt).shape
    (22, 22)

    With biases, on [vec(W), a, b]:

    >>> sb = s.with_weights(s.W, bias=[0.5, -0.5])
    >>> tl.population.hessian(sb, t, train_bias=True).shape
    (24, 24)
    """
    train_readout = boolean(train_readout, "train_readout")
    train_bias = boolean(train_bias, "train_bias")
    if is_target(teacher):
        return _target_hessian(student, teacher, train_readout, n_threads, train_bias)
    if train_bias or _with_bias(student, teacher):
        check_pair(student, cast(Network, teacher), biases=True)
        H = _population_bias.hessian(student, cast(Network, teacher), train_readout, train_bias,
                                     n_threads_arg(n_threads))
        return _finite(H, "Hessian")
    teacher = cast(Network, teacher)  # checked in _args (a TypeError for anything else)
    args, DW, Da = _args(student, teacher)
    why = aligned_step_units(student, teacher)
    if why is not None:
        raise ValueError(f"student.W: the Hessian of step units is undefined where they are aligned: {why}")
    H = _core.population_hessian(*args, train_readout=train_readout, n_threads=n_threads_arg(n_threads))
    D = np.concatenate([DW, Da]) if train_readout else DW
    if np.any(D != 0):
        with np.errstate(over="ignore", invalid="ignore"):
            H = _finite(np.ldexp(H, D[:, None] + D[None, :]), "Hessian")
    if train_readout:
        c = student.readout_factor
        n = student.K * student.d
        H[n:, :] *= c
        H[:, n:] *= c
    return H


@renamed(steps="n_steps", records="n_records")
def descend(
    student: Network,
    teacher: Network,
    lr: float,
    n_steps: int,
    lr_readout: float = 0.0,
    n_records: int = 101,
    n_threads: int | None = None,
    schedule: Schedule | ArrayLike | Callable[..., Any] | None = None,
    lr_bias: float = 0.0,
) -> Trajectory:
    """Gradient descent on the population risk in weight space.

    W <- W - lr dR/dW, a <- a - lr_readout dR/da (the experiment of
    Mariantoni & Chizat), b <- b - lr_bias dR/db with biases. Ctrl-C raises
    :class:`twolayer.Interrupted` with the records so far as ``partial``
    (``status="interrupted"``).

    Parameters
    ----------
    student, teacher : Network
        The start and the teacher.
    lr : float
        Step on W (> 0).
    n_steps : int
        Iterations.
    lr_readout : float, default 0.0
        Step on a (0: fixed).
    n_records : int, default 101
        Log-spaced iterations recorded (0 and ``n_steps`` included).
    n_threads : int, optional
        OpenMP threads (None: the OpenMP default).
    schedule : Schedule, array or callable, optional
        Learning-rate multiplier s(n) at iteration n
        (:mod:`twolayer.schedules`: iteration n uses lr s(n), lr_readout
        s(n)); an array is one value per iteration, a callable is evaluated
        once at n = 0 .. n_steps - 1. Step units need a decaying one to
        converge below the oscillation floor of fixed steps on the cusp of
        their loss (e.g. ``schedules.geometric(0.5, every=2000,
        start=...)``).
    lr_bias : float, default 0.0
        Step on the student's biases b (0: fixed). A run with biases (either
        network's, or ``lr_bias > 0``) steps with :func:`gradient`'s
        ``train_bias`` in the core (exact gradients with means; the same
        records, plus ``bias`` and ``teacher_bias``).

    Returns
    -------
    Trajectory
        Overlaps and excess risk; ``t`` counts iterations, ``student`` is
        the final network; status "completed" or "diverged".

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(2, 2, 10, "erf", seed=0)
    >>> traj = tl.population.descend(s, t, lr=0.5, n_steps=100, n_records=4)
    >>> traj.t, traj.time_unit
    (array([  0.,   1.,  10., 100.]), 'iterations')
    >>> np.round(traj.risk, 4)
    array([0.5204, 0.4888, 0.2643, 0.0097])
    """
    lr_ = positive(lr, "lr")
    steps = integer(n_steps, "n_steps", 0)
    sched = as_schedule(schedule, n_steps=steps)
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    records = integer(n_records, "n_records", 2, INT32_MAX)
    log_spaced = np.geomspace(1, max(steps, 1), records - 1).round() if records > 2 else np.array([steps])
    record_steps = np.unique(np.concatenate([[0], log_spaced]))
    record_steps = record_steps[record_steps <= steps].astype(np.int64)
    lr_b = positive(lr_bias, "lr_bias", allow_zero=True)
    if lr_b > 0 or _with_bias(student, teacher):
        return _descend_with_bias(student, teacher, lr_, lr_a, lr_b, steps, record_steps, sched, n_threads)
    # The core steps the effective second layer c a; plain descent on a moves it by c^2 lr_readout dR/d(c a).
    args, DW, _ = _args(student, teacher)
    risk(student, teacher)  # raises where the start is out of range
    if np.any(DW < 0):  # the core steps the weights themselves: no rescaling of huge rows
        raise ValueError(f"student.W: weights out of range for gradient descent (a row's |w| / sqrt(s) is above "
                         f"{_SD_RANGE[1]:.0e})")

    meta = {"lr": lr_, "lr_readout": lr_a}

    def result(out: dict[str, Any]) -> Trajectory:
        return _descent_trajectory(out, student, teacher, steps, record_steps, sched, meta)

    with partial_result(result):
        out = _core.population_descend(*args, lr=lr_, lr_readout=lr_a * student.readout_factor**2,
                                       steps=int(steps), record_steps=record_steps.tolist(),
                                       n_threads=n_threads_arg(n_threads), schedule=core_arg(sched))
    return result(out)


def _descent_trajectory(out: dict[str, Any], student: Network, teacher: Network, steps: int,
                        record_steps: NDArray[np.int64], sched: Schedule | None,
                        rates: dict[str, float]) -> Trajectory:
    """The Trajectory of a core descent's output ``out`` (population_descend or, with ``b_final``, its with-means
    twin): rows at ``record_steps``, the final student, status and message."""
    T = out["risk"].shape[0]
    status = out["status"]
    message = {
        "diverged": f"diverged at iteration {out['stop_step']} (non-finite risk or gradient)",
        "interrupted": f"interrupted at iteration {out['stop_step']}",
    }.get(status, f"{steps} iterations of population gradient descent")
    biased = "b_final" in out
    final = student.with_weights(out["W"], out["a_final"] / student.readout_factor,
                                 **({"bias": out["b_final"]} if biased else {}))
    return Trajectory(t=record_steps[:T].astype(np.float64), Q=out["Q"], M=out["M"], a=out["a"], risk=out["risk"],
                      status=Status(status), message=message, time_unit="iterations", student=final,
                      meta={**rates, "activation": student.activation, "teacher_activation": teacher.activation,
                            **({} if sched is None else {"schedule": repr(sched)})},
                      P=gram(teacher.W, teacher.W, teacher.scale, "teacher.W"), v=teacher.effective_a.copy(),
                      **({"bias": out["bias"], "teacher_bias": teacher.bias.copy()} if biased else {}),
                      stop_time=math.nan if status == "completed" else float(out["stop_step"]))


def _descend_with_bias(student: Network, teacher: Network, lr: float, lr_readout: float, lr_bias: float, steps: int,
                       record_steps: NDArray[np.int64], sched: Schedule | None,
                       n_threads: int | None) -> Trajectory:
    """:func:`descend` with biases: W, a, b stepped together on the exact gradient with means by the core
    (population_descend_mean); diverged at the first non-finite gradient or recorded risk."""
    check_pair(student, teacher, biases=True)
    _finite(np.asarray(_population_bias.risk(student, teacher)), "risk")  # raises where the start is out of range
    c = student.readout_factor
    meta = {"lr": lr, "lr_readout": lr_readout, "lr_bias": lr_bias}

    def result(out: dict[str, Any]) -> Trajectory:
        return _descent_trajectory(out, student, teacher, steps, record_steps, sched, meta)

    with partial_result(result):
        out = _core.population_descend_mean(*_population_bias.core_args(student, teacher), lr=lr,
                                            lr_readout=lr_readout * c**2, lr_bias=lr_bias, steps=int(steps),
                                            record_steps=record_steps.tolist(), n_threads=n_threads_arg(n_threads),
                                            schedule=core_arg(sched))
    return result(out)
