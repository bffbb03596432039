"""Closed forms of Arnaboldi, Krzakala, Loureiro and Stephan, "Escaping mediocrity": spherical online SGD
of a square-activation student f = (1/p) sum_j (w_j . x)^2 on a square-activation teacher y = (w* . x)^2 +
sqrt(Delta) xi, every ``|w|^2 = d``, learning rate gamma.

**Time.** Every function here returns times on the package's clock, t = steps / d (``tl.ode`` and ``tl.sgd``).
The seed writes the p = 1 ODE on the clock tau = gamma t and the wide-p formulas on tau = (gamma / p) t (its
increments carry gamma / (p d)); the conversion is done here (checked against the package's ODE in
tests/test_theory.py). In package units the student is ``Overlaps(Q, M, [[1]], a=[1/p]*p, v=[1])`` with
activation ``"quadratic"``, ``lr=gamma``, ``noise=Delta``, ``spherical=True``.

**p = 1** (one overlap m = w . w* / d, u = m^2). With A = 4 (1 - 6 gamma) - 2 gamma Delta and B = 4 (1 - 6 gamma),
the package ODE is exactly du/dt = 2 gamma u (A - B u) (the paper's dm/dtau = m [4 (1 - 6 gamma)(1 - m^2) -
2 gamma Delta]), solved by

    u(t) = A u0 e^{2 A gamma t} / (A + B u0 (e^{2 A gamma t} - 1)),

and the excess risk is R = 2 (1 - u). The escape (the paper's Eq. EXT) is the first t with R(t) = (1 - T) R(0), i.e.
u = u* = T + (1 - T) u0, reached at

    t_exit(u0) = [log(u* / u0) + log((A - B u0) / (A - B u*))] / (2 A gamma).            (exact)

The seed prints t = log(T d + 1 - T) / (8 (1 - 6 gamma) - 4 gamma Delta) (clock tau; annealed u0 = E[m0^2] =
1/d), which is the first logarithm only: it drops log((A - B u0) / (A - B u*)), a term that vanishes as T -> 0
(u* -> u0) but not otherwise (at gamma = 0.05, Delta = 0.5, T = 0.5 the printed time is 10.3 % short at d = 1000,
7.7 % at d = 1e4: an O(T) absolute gap, B T / (2 A^2 gamma) to first order).
``formula="printed"`` gives the paper's expressions, ``"exact"`` (the default at p = 1) the exact ones.

**Initial overlaps.** w_0 and w* are independent and uniform on their spheres, so m0 is the cosine of two random
unit vectors in R^d: u0 = m0^2 ~ Beta(1/2, (d - 1)/2), E[u0] = 1/d (d u0 -> chi^2(1) as d -> infinity, the paper's
law). ``average="annealed"`` puts u0 = E[u0] into the solution ("before solving"); ``"quenched"`` averages the
solution over u0 ("after solving"): exactly, by Gauss-Jacobi quadrature for the Beta law (the log u0 singularity
integrated in closed form, E[log u0] = psi(1/2) - psi(d/2)). ``"printed"`` quenched uses the paper's chi^2(1).

**Wide p** (the paper's formulas, an approximation; no closed form exists): with kappa = 1 - (gamma / p)(1 + 1/p +
4/p^2 + Delta / 2), mu0 = d sum_j m_j0^2, tau0 = 2 d sum_{j<l} Q_jl0^2,

    t_exit = (p / gamma) log[(T p (p + 1) d + (2 p mu0 - tau0)(1 - T)) / (2 p mu0)] / (8 kappa),

annealed with mu0 = p, tau0 = p (p - 1). At p = 1 it is the printed p = 1 formula. Quenched: the expectation over
the paper's d -> infinity law of (mu0, tau0), mu0 ~ chi^2(p) and tau0 ~ 2 chi^2(p (p - 1) / 2) independent, by
generalised Gauss-Laguerre quadrature (E[log mu0] = log 2 + psi(p / 2) in closed form). Measured against the ODE
(tests/test_theory.py, the example escaping_mediocrity_escape_times.py; one random start each, d = 1e4, T = 0.5, Delta =
0.5): the formula underestimates the ODE's escape time by 10 % (p = 2), 11-25 % (p = 4) and 21-37 % (p = 8) for gamma =
gamma_opt / 5 .. gamma_opt / 2; part of it (8-9 % at p = 1) is the dropped finite-T term above. At the formula's
gamma_opt(p) itself the ODE does not escape at all for p = 4 and 8 (d = 1e4, Delta = 0.5: the risk stays at or above
R(0)), so for p > 2 ``optimal_lr`` is the paper's value, not a safe learning rate.

**Domains** (ValueError outside, naming the bound). p = 1: lr < 2 / (12 + Delta) (<= 1/6) and T in (0, 1); the exact
time is positive for every start 0 < abs(m0) below the fixed point (+inf at m0 = 0); at Delta = 0 the fixed point is m^2
= 1, every start but abs(m0) = 1 escapes and the quenched mean is finite. Wide p: in package units the excess risk is
R = [p (p + 1) d - 2 p mu + tau] / (p^2 d) (mu, tau as mu0, tau0 at time t), and the formula is the first passage of
this risk with mu = mu0 e^{8 kappa gamma t / p} and tau already decayed to 0, so its time is >= 0 only for T >= tau0 /
(p (p + 1) d - 2 p mu0 + tau0) ((p - 1) / ((p + 1)(d - 1)) at the mean start). Below it the decay of the initial tau0
alone lowers the risk by T R(0), within the initial transient: the ODE escapes there at a small positive time
(p = 2, d = 1000, gamma = 0.05, Delta = 0, one random start: t = 0.032 at T = 1e-5 and 0.32 at T = 1e-4) where the
formula gives negative ones (-1.03 at the mean start, T = 1e-4): refused. A quenched mean is refused where starts
outside the domain carry probability above 1e-12, and where the threshold is so far below the initial law's scale
(T << 1/d) that doubling the quadrature nodes changes it by more than 1e-9.

``optimal_lr(p, Delta)`` minimises the wide-p annealed escape time: gamma_opt = p / (2 + 2/p + 8/p^2 + Delta)
(= 1 / (12 + Delta) at p = 1, exact there since the p = 1 rate 2 A gamma is maximal at it); ``gain_factor(Delta) =
(12 + Delta) / (2 + Delta)``, the ratio of the optimal escape rates at p = 1 and p -> infinity.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import as_float_array, choice, describe, integer, positive, real

__all__ = ["escape_time", "escape_time_p1", "escape_time_wide", "fixed_point_risk", "gain_factor", "optimal_lr",
           "overlap_p1", "risk_p1"]

Average = Literal["annealed", "quenched"]
Formula = Literal["exact", "printed"]

_N_NODES = 96  # quadrature nodes (converged to ~1e-13 relative for d >= 2; tests compare with twice as many)
_QUAD_RTOL = 1e-9  # quenched means: the largest relative change from doubling the nodes
_OUTSIDE_MASS = 1e-12  # the largest probability of starts outside the wide-p formula's domain a quenched mean ignores


def _lr(lr: Any) -> float:
    g = positive(lr, "lr")
    if g >= 1.0 / 6.0:
        raise ValueError(
            f"lr: expected lr < 1/6, got {describe(lr)}: the m^3 coefficient 4 (1 - 6 lr) of the p = 1 ODE (the lr^2 "
            "term of spherical SGD) must be positive for an informative fixed point m != 0 to exist")
    return g


def _rates(lr: Any, noise: Any) -> tuple[float, float, float]:
    """gamma, A, B of the p = 1 ODE du/dt = 2 gamma u (A - B u); needs A > 0 (the origin unstable)."""
    g = _lr(lr)
    delta = positive(noise, "noise", allow_zero=True)
    A, B = 4.0 * (1.0 - 6.0 * g) - 2.0 * g * delta, 4.0 * (1.0 - 6.0 * g)
    if A <= 0.0:
        raise ValueError(
            f"lr: expected lr < 2 / (12 + noise) = {2.0 / (12.0 + delta):.6g}, got {describe(lr)}: above it the "
            "noise term 2 lr noise outweighs 4 (1 - 6 lr), m = 0 is stable and the student never escapes")
    return g, A, B


def _threshold(threshold: Any) -> float:
    T = real(threshold, "threshold")
    if not 0.0 < T < 1.0:
        raise ValueError(f"threshold: expected T in (0, 1) (the escape is at risk (1 - T) R(0)), got "
                         f"{describe(threshold)}")
    return T


def _dimension(d: Any) -> int:
    return integer(d, "d", 2)


def _p(p: Any) -> int:
    return integer(p, "p", 1)


def _cosines(m: Any, name: str) -> NDArray[np.float64]:
    """Overlaps m = w . w* / d of unit-norm (|w|^2 = d) weights: finite cosines in [-1, 1]."""
    arr = as_float_array(m, name)
    if np.any(np.abs(arr) > 1.0):
        raise ValueError(f"{name}: expected cosines in [-1, 1] (the overlap of weights with |w|^2 = d), got "
                         f"{describe(float(arr.flat[int(np.argmax(np.abs(arr)))]))}")
    return arr.reshape(np.shape(m))


def overlap_p1(t: ArrayLike, m0: float, lr: float, noise: float = 0.0) -> NDArray[np.float64]:
    """m(t) of the p = 1 ODE at package times ``t`` (steps / d), from m(0) = ``m0`` (sign kept):
    u = m^2 = A u0 e^{2 A gamma t} / (A + B u0 (e^{2 A gamma t} - 1)), A = 4 (1 - 6 gamma) - 2 gamma Delta,
    B = 4 (1 - 6 gamma). Needs lr < 1/6; A <= 0 is allowed here (m then decays).

    Parameters
    ----------
    t : array_like
        Package times.
    m0 : float
        Initial overlap (a cosine in [-1, 1]).
    lr : float
        gamma, in (0, 1/6).
    noise : float, default 0.0
        Delta.

    Returns
    -------
    ndarray
        m(t), the shape of ``t``.

    Examples
    --------
    >>> print(np.round(tl.theory.overlap_p1([0.0, 10.0, 100.0], m0=0.1, lr=0.05, noise=0.5), 6))
    [0.1      0.368959 0.991031]
    """
    g = _lr(lr)
    delta = positive(noise, "noise", allow_zero=True)
    m0_ = real(m0, "m0")
    if not -1.0 <= m0_ <= 1.0:
        raise ValueError(f"m0: expected a cosine in [-1, 1], got {describe(m0)}")
    ts = as_float_array(t, "t").reshape(np.shape(t))
    A, B = 4.0 * (1.0 - 6.0 * g) - 2.0 * g * delta, 4.0 * (1.0 - 6.0 * g)
    if np.any(ts < 0):
        raise ValueError(f"t: expected package times >= 0, got {describe(float(np.min(ts)))}")
    u0 = m0_ * m0_
    with np.errstate(over="ignore", divide="ignore"):  # |x| = inf at huge noise or t: the limits below
        x = 2.0 * A * g * ts
        if m0_ == 0.0:  # m = 0 is a fixed point
            m = np.zeros_like(ts)
        elif A > 0.0:
            # log m = log|m0| + x/2 - log(1 + (B/A) u0 expm1(x)) / 2, with u0 expm1(x) = exp(2 log|m0| + x +
            # log(-expm1(-x))): no overflow, and no underflow of u0 = m0^2 (|m0| < 1e-162). Beyond x = 1500 -
            # 2 log|m0| the solution is m = sqrt(A/B) to double precision: x is capped there.
            lm0 = math.log(abs(m0_))
            xc = np.minimum(x, 1500.0 - 2.0 * lm0)
            y = math.log(B / A) + 2.0 * lm0 + xc + np.log(-np.expm1(-xc))
            m = np.exp(lm0 + 0.5 * xc - 0.5 * np.logaddexp(0.0, y))
        elif A < 0.0:
            m = np.sqrt(A * u0 * np.exp(x) / (A + B * u0 * np.expm1(x)))
        else:
            m = np.sqrt(u0 / (1.0 + 2.0 * g * B * u0 * ts))
    return np.asarray(math.copysign(1.0, m0_) * m, dtype=np.float64)


def risk_p1(m: ArrayLike) -> NDArray[np.float64]:
    """Excess population risk of p = 1 at overlap m: R = 2 (1 - m^2) (the paper's R minus Delta / 2).

    Parameters
    ----------
    m : array_like
        Overlap(s) m = w . w* / d.

    Returns
    -------
    ndarray

    Examples
    --------
    >>> tl.theory.risk_p1([0.0, 0.5, 1.0]).tolist()
    [2.0, 1.5, 0.0]
    """
    return np.asarray(2.0 * (1.0 - np.square(_cosines(m, "m"))), dtype=np.float64)


def fixed_point_risk(lr: float, noise: float) -> float:
    """The excess risk the p = 1 dynamics converges to: gamma Delta / (1 - 6 gamma) (at m_inf^2 = A / B).

    Needs lr < 1/6 (else no fixed point m != 0 exists) and lr < 2 / (12 + noise) (else m = 0 is the attractor and
    the risk stays 2): ValueError otherwise, saying which.

    Parameters
    ----------
    lr : float
        gamma.
    noise : float
        Delta.

    Returns
    -------
    float

    Examples
    --------
    >>> print(f"{tl.theory.fixed_point_risk(0.05, 0.5):.6f}")   # 0.05 * 0.5 / 0.7
    0.035714
    """
    g, A, B = _rates(lr, noise)
    return float(2.0 * (1.0 - A / B))


def optimal_lr(p: int, noise: float) -> float:
    """gamma_opt(p, Delta) = p / (2 + 2/p + 8/p^2 + Delta), the learning rate minimising the (annealed) escape time
    in package time; 1 / (12 + Delta) at p = 1 (exact there), -> p / (2 + Delta) for large p.

    For p > 2 it is the paper's value, not a safe learning rate (see the module docstring).

    Parameters
    ----------
    p : int
        Student width (>= 1).
    noise : float
        Delta.

    Returns
    -------
    float

    Examples
    --------
    >>> print(f"{tl.theory.optimal_lr(1, 0.5):.6f} {tl.theory.optimal_lr(4, 0.5):.6f}")
    0.080000 1.142857
    """
    p_ = _p(p)
    delta = positive(noise, "noise", allow_zero=True)
    return p_ / (2.0 + 2.0 / p_ + 8.0 / p_**2 + delta)


def gain_factor(noise: float) -> float:
    """(12 + Delta) / (2 + Delta): SGD steps to escape at p = 1 over those at p -> infinity, each at its gamma_opt
    (the ratio of the optimal escape rates 8 kappa gamma / p, 4 / (12 + Delta) and 4 / (2 + Delta)).

    Parameters
    ----------
    noise : float
        Delta.

    Returns
    -------
    float

    Examples
    --------
    >>> tl.theory.gain_factor(0.5)
    5.0
    """
    delta = positive(noise, "noise", allow_zero=True)
    return (12.0 + delta) / (2.0 + delta)


def escape_time_p1(m0: ArrayLike, lr: float, noise: float, threshold: float) -> NDArray[np.float64]:
    """The exact p = 1 escape time (package clock) from initial overlap(s) ``m0``: t_exit(u0), u0 = m0^2 (see the
    module docstring). +inf where m0 = 0; ValueError where the threshold u* = T + (1 - T) u0 lies at or above the
    fixed point A / B (the risk never falls that far).

    Parameters
    ----------
    m0 : array_like
        Initial overlap(s).
    lr, noise : float
        gamma and Delta (gamma < 2 / (12 + Delta)).
    threshold : float
        T in (0, 1).

    Returns
    -------
    ndarray
        Escape times, the shape of ``m0``.

    Examples
    --------
    >>> th = tl.theory
    >>> t_exit = th.escape_time_p1([0.01, 0.1], lr=0.05, noise=0.5, threshold=0.5)
    >>> print(np.round(t_exit, 6))
    [33.559241 16.849673]

    At that time the closed-form risk is (1 - T) R(0):

    >>> m = th.overlap_p1(t_exit[1], 0.1, lr=0.05, noise=0.5)
    >>> print(f"{float(th.risk_p1(m) / th.risk_p1(0.1)):.6f}")
    0.500000
    """
    g, A, B = _rates(lr, noise)
    T = _threshold(threshold)
    m = _cosines(m0, "m0")
    u0 = np.square(m)
    us = T + (1.0 - T) * u0
    if np.any(B * us >= A):
        raise ValueError(f"threshold: the risk never falls to (1 - T) R(0) = {2 * (1 - float(np.max(us))):.6g} from "
                         f"m0 = {math.sqrt(float(np.max(u0))):.6g}: the fixed-point risk at lr = {g}, noise = {noise} "
                         f"is {2 * (1 - A / B):.6g}")
    du = T * (1.0 - u0)  # u* - u0 >= 0: both logarithms as log1p of ratios >= 0, so no rounding makes t < 0
    with np.errstate(divide="ignore", over="ignore"):
        ratio = du / u0
        # log(u* / u0); where u0 = m0^2 underflows (|m0| < 1e-162) as log u* - 2 log|m0| (+inf at m0 = 0)
        first = np.where(np.isfinite(ratio), np.log1p(ratio), np.log(us) - 2.0 * np.log(np.abs(m)))
        out = (first + np.log1p(B * du / (A - B * us))) / (2.0 * A * g)
    return _finite_times(out, m != 0)


def _finite_times(out: Any, defined: Any) -> NDArray[np.float64]:
    """Escape times that must be finite where ``defined``: beyond the double range only for absurdly small lr."""
    out = np.asarray(out, dtype=np.float64)
    if not np.all(np.isfinite(out) | ~np.asarray(defined)):
        raise ValueError("lr: the escape time exceeds the double range (it scales as 1 / lr); expected a larger lr")
    return out


def escape_time_wide(mu0: ArrayLike, tau0: ArrayLike, d: int, p: int, lr: float, noise: float,
                     threshold: float) -> NDArray[np.float64]:
    """The paper's wide-p escape time (an approximation; see the module docstring) from mu0 = d sum_j m_j0^2 and
    tau0 = 2 d sum_{j<l} Q_jl0^2, converted to package time (times p / gamma).

    Parameters
    ----------
    mu0, tau0 : array_like
        The paper's initial statistics (annealed: p and p (p - 1)).
    d : int
        Dimension (>= 2).
    p : int
        Student width.
    lr, noise : float
        gamma and Delta.
    threshold : float
        T in (0, 1).

    Returns
    -------
    ndarray

    Examples
    --------
    >>> print(f"{float(tl.theory.escape_time_wide(2, 2, d=1000, p=2, lr=0.1, noise=0.5, threshold=0.5)):.6f}")
    17.182393
    """
    d_, p_ = _dimension(d), _p(p)
    g, kappa = _wide_rate(lr, noise, p_)
    T = _threshold(threshold)
    mu, tau = np.broadcast_arrays(_nonnegative(mu0, "mu0"), _nonnegative(tau0, "tau0"))
    arg = T * p_ * (p_ + 1) * d_ + (2.0 * p_ * mu - tau) * (1.0 - T)
    bad = np.flatnonzero(arg < 2.0 * p_ * mu)
    if bad.size:
        i = int(bad[0])
        mu_i, tau_i = float(mu.flat[i]), float(tau.flat[i])
        raise ValueError(_below_domain(T, d_, p_, f"here {_t_min(mu_i, tau_i, d_, p_):.6g} (at mu0 = {mu_i:.6g}, "
                                                  f"tau0 = {tau_i:.6g})"))
    with np.errstate(divide="ignore", over="ignore"):
        return _finite_times(np.log(arg / (2.0 * p_ * mu)) / (8.0 * kappa) * p_ / g, mu > 0)


def _nonnegative(x: Any, name: str) -> NDArray[np.float64]:
    arr = as_float_array(x, name)
    if np.any(arr < 0):
        raise ValueError(f"{name}: expected finite values >= 0 (a sum of squared overlaps times d), got "
                         f"{describe(float(np.min(arr)))}")
    return arr.reshape(np.shape(x))


def _t_min(mu0: float, tau0: float, d: int, p: int) -> float:
    """The smallest threshold at which the wide-p formula's time is >= 0 from (mu0, tau0)."""
    den = p * (p + 1) * d - 2.0 * p * mu0 + tau0
    return tau0 / den if den > 0 else math.inf


def _below_domain(T: float, d: int, p: int, where: str) -> str:
    return (f"threshold: T = {T:g} is outside the wide-p formula's domain (d = {d}, p = {p}): it needs T >= tau0 / "
            f"(p (p + 1) d - 2 p mu0 + tau0), {where}. Below, the decay of the students' initial mutual overlaps "
            "(tau0) alone lowers the risk by T R(0), within the initial transient that the formula does not describe "
            "(it gives a negative time); integrate the ODE (tl.ode.integrate with risk_rtol) for such thresholds")


def _wide_rate(lr: Any, noise: Any, p: int) -> tuple[float, float]:
    g = positive(lr, "lr")
    delta = positive(noise, "noise", allow_zero=True)
    kappa = 1.0 - g / p * (1.0 + 1.0 / p + 4.0 / p**2 + delta / 2.0)
    if kappa <= 0.0:
        raise ValueError(f"lr: expected lr < p / (1 + 1/p + 4/p^2 + noise/2) = {g / (1.0 - kappa):.6g} at p = {p}, "
                         f"got {describe(lr)}: the paper's escape rate 8 (1 - (lr/p)(1 + 1/p + 4/p^2 + noise/2)) must "
                         "be positive")
    return g, kappa


def escape_time(
    d: int,
    lr: float,
    noise: float,
    threshold: float,
    p: int = 1,
    average: Average = "annealed",
    formula: Formula | None = None,
) -> float:
    """Escape time of Arnaboldi et al. in package time t = steps / d: the first time the excess risk falls to
    (1 - ``threshold``) R(0), from a random start at dimension ``d``.

    Parameters
    ----------
    d : int >= 2
        Dimension (fixes the law of the initial overlaps).
    lr, noise : float
        gamma and Delta (p = 1 needs gamma < 2 / (12 + Delta) <= 1/6).
    threshold : float in (0, 1)
        The paper's T.
    p : int
        Student width.
    average : "annealed" or "quenched"
        Initial overlaps replaced by their mean before solving, or the solution averaged over their law (exact
        quadrature, never sampling).
    formula : "exact", "printed" or None
        "exact": the exact solution of the p = 1 ODE (p = 1 only); "printed": the paper's expressions, converted to
        package time (they drop a term that vanishes as T -> 0; for p > 1 they are the paper's approximation).
        None: "exact" at p = 1, "printed" otherwise.

    Returns
    -------
    float

    Examples
    --------
    >>> for average in ("annealed", "quenched"):
    ...     for formula in ("exact", "printed"):
    ...         t = tl.theory.escape_time(1000, lr=0.05, noise=0.5, threshold=0.5, average=average, formula=formula)
    ...         print(average, formula, f"{t:.6f}")
    annealed exact 25.189537
    annealed printed 22.602209
    quenched exact 29.805398
    quenched printed 27.221707
    >>> print(f"{tl.theory.escape_time(1000, lr=0.1, noise=0.5, threshold=0.5, p=2):.6f}")
    17.182393
    """
    d_, p_ = _dimension(d), _p(p)
    avg = choice(average, "average", ("annealed", "quenched"))
    form = choice(formula if formula is not None else ("exact" if p_ == 1 else "printed"), "formula",
                  ("exact", "printed"))
    T = _threshold(threshold)
    if form == "exact":
        if p_ != 1:
            raise ValueError(f"formula: 'exact' exists for p = 1 only (got p = {p_}); the wide-p escape time has no "
                             "closed form: use formula='printed' (the paper's approximation) or integrate the ODE")
        g, A, B = _rates(lr, noise)
        if avg == "annealed":
            return float(escape_time_p1(math.sqrt(1.0 / d_), lr, noise, T))
        return _quenched_p1_exact(d_, g, A, B, T)
    if p_ == 1:
        _rates(lr, noise)  # the same domain as the exact form
    g, kappa = _wide_rate(lr, noise, p_)
    c0 = T * p_ * (p_ + 1) * d_
    scale = p_ / (8.0 * kappa * g)
    if avg == "annealed":
        return float(escape_time_wide(p_, p_ * (p_ - 1), d_, p_, lr, noise, T))
    # E log(c0 + (2 p mu - tau)(1 - T)) - log(2 p) - E log mu, mu ~ chi^2(p), tau ~ 2 chi^2(p (p - 1) / 2).
    n_pairs = p_ * (p_ - 1) // 2

    def mean(n: int) -> float:
        xm, wm = _gen_laguerre(p_ / 2.0 - 1.0, n)
        mu = 2.0 * xm
        if n_pairs:
            xt, wt = _gen_laguerre(n_pairs / 2.0 - 1.0, n)
            tau = 4.0 * xt
        else:
            tau, wt = np.zeros(1), np.ones(1)
        arg = c0 + (2.0 * p_ * mu[:, None] - tau[None, :]) * (1.0 - T)
        outside = arg < 2.0 * p_ * mu[:, None]  # starts whose time would be negative (or undefined: arg <= 0)
        mass = float(wm @ outside @ wt)
        if mass > _OUTSIDE_MASS:
            raise ValueError(_below_domain(T, d_, p_, f"and the random starts that violate it have probability "
                                                      f"~{mass:.2g} here (at most {_OUTSIDE_MASS:g} is ignored); "
                                                      f"{_t_min(p_, p_ * (p_ - 1), d_, p_):.6g} at the mean start"))
        arg = np.where(outside, 2.0 * p_ * mu[:, None], arg)  # a negligible mass: the time there taken as 0
        first = float(wm @ np.log(arg) @ wt)
        e_log_mu = math.log(2.0) + _digamma(p_ / 2.0)
        return float(_finite_times(scale * (first - math.log(2.0 * p_) - e_log_mu), True))

    return _resolved(mean, T, d_)


def _resolved(mean: Callable[[int], float], T: float, d: int) -> float:
    """A quenched mean by quadrature, checked by doubling the nodes: at thresholds far below the scale of the initial
    law the time varies on a scale the rule does not resolve (log(T + u0) for u0 ~ 1/d), refused then."""
    q1, q2 = mean(_N_NODES), mean(2 * _N_NODES)
    if not abs(q1 - q2) <= _QUAD_RTOL * abs(q2):
        raise ValueError(f"threshold: T = {T:g} is too small for the quenched average at d = {d}: the escape time "
                         f"varies on the scale of T, far below that of the initial law (rules of {_N_NODES} and "
                         f"{2 * _N_NODES} nodes give {q1:.6g} and {q2:.6g}); use average='annealed', a larger "
                         "threshold, or average escape_time_p1 over sampled starts")
    return q2


def _quenched_p1_exact(d: int, g: float, A: float, B: float, T: float) -> float:
    """E over u0 ~ Beta(1/2, (d - 1)/2) of the exact t_exit(u0)."""
    u_c = (A / B - T) / (1.0 - T)  # u0 above it never escapes (u_c = 1 without noise: only u0 = 1, of measure 0)
    if T * B >= A:
        raise ValueError(f"threshold: T = {T} is beyond the fixed point: the risk never falls to (1 - T) R(0)")
    if u_c < 1.0:
        # Initial overlaps u0 >= u_c (rare) never escape; their probability must be negligible for the mean to be
        # finite in double precision: bound P(u0 >= u_c) <= 2 (1 - u_c)^{(d-1)/2} / ((d - 1) B(1/2, (d-1)/2) sqrt(u_c)).
        log_tail = (math.log(2.0) + 0.5 * (d - 1) * math.log1p(-u_c) - math.log(d - 1) - 0.5 * math.log(u_c)
                    - (math.lgamma(0.5) + math.lgamma(0.5 * (d - 1)) - math.lgamma(0.5 * d)))
        if log_tail > math.log(1e-15):
            raise ValueError(f"d: at d = {d} a non-negligible fraction (up to {math.exp(log_tail):.3g}) of random "
                             "starts lies beyond the fixed point and never escapes, so the quenched mean is infinite")
    e_log_u0 = _digamma(0.5) - _digamma(0.5 * d)

    def mean(n: int) -> float:
        x, w = _jacobi_01(-0.5, 0.5 * (d - 3), n)  # weight u^{-1/2} (1 - u)^{(d-3)/2} on [0, 1]
        us = T + (1.0 - T) * x
        ok = B * us < A  # nodes beyond u_c carry weights below the bound above (and would give log of a negative)
        with np.errstate(invalid="ignore", divide="ignore"):
            smooth = np.where(ok, np.log(us) + np.log((A - B * x) / (A - B * us)), 0.0)
        with np.errstate(over="ignore"):
            return float(_finite_times((w @ smooth - e_log_u0) / (2.0 * A * g), True))

    return _resolved(mean, T, d)


# ------------------------------------------------------------------------------------------- quadrature helpers


def _golub_welsch(diag: NDArray[np.float64], off: NDArray[np.float64]) -> tuple[NDArray[np.float64],
                                                                                  NDArray[np.float64]]:
    """Nodes and probability weights (summing to 1) of the Gauss rule of a Jacobi matrix."""
    J = np.diag(diag) + np.diag(off, 1) + np.diag(off, -1)
    x, V = np.linalg.eigh(J)
    w = V[0] ** 2
    return x, w / w.sum()


def _gen_laguerre(alpha: float, n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Gauss rule for x ~ Gamma(alpha + 1, 1) (weight x^alpha e^-x): E f(x) ~ sum w_i f(x_i)."""
    k = np.arange(n, dtype=np.float64)
    return _golub_welsch(2.0 * k + alpha + 1.0, np.sqrt(k[1:] * (k[1:] + alpha)))


def _jacobi_01(a: float, b: float, n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Gauss rule for the weight u^a (1 - u)^b on [0, 1] (a, b > -1), i.e. u ~ Beta(a + 1, b + 1).

    Built from the monic Jacobi recurrence for the weight (1 - x)^a (1 + x)^b on [-1, 1] mapped by u = (1 - x)/2
    (Golub-Welsch)."""
    k = np.arange(n, dtype=np.float64)
    s = 2.0 * k + a + b
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.where(np.abs(s * (s + 2.0)) > 0, (b * b - a * a) / (s * (s + 2.0)), (b - a) / (a + b + 2.0))
    alpha[0] = (b - a) / (a + b + 2.0)
    kk = k[1:]
    s1 = 2.0 * kk + a + b
    with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 at k = 1 when a + b = -1 (d = 2): replaced below
        beta = 4.0 * kk * (kk + a) * (kk + b) * (kk + a + b) / (s1 * s1 * (s1 + 1.0) * (s1 - 1.0))
    beta[0] = 4.0 * (1.0 + a) * (1.0 + b) / ((2.0 + a + b) ** 2 * (3.0 + a + b))  # k = 1, the (k + a + b) cancelled
    x, w = _golub_welsch((1.0 - alpha) / 2.0, np.sqrt(beta) / 2.0)
    return np.clip(x, 0.0, 1.0), w


def _digamma(x: float) -> float:
    """psi(x) for x > 0: recurrence up to x >= 16, then the asymptotic series (error < 1e-15)."""
    acc = 0.0
    while x < 16.0:
        acc -= 1.0 / x
        x += 1.0
    inv = 1.0 / (x * x)
    series = inv * (1 / 12 - inv * (1 / 120 - inv * (1 / 252 - inv * (1 / 240 - inv * (1 / 132)))))
    return acc + math.log(x) - 0.5 / x - series
