"""Tabulation of a user function for :func:`twolayer.activations.custom`: piecewise Chebyshev series of sigma and
its first four derivatives, checked, for the core's registry (activation.hpp, ``CustomTable``).

On [-domain, domain], panels of width <= 1 (bisected where the series do not converge) carry, for each order
k = 0..4, the Chebyshev interpolant of degree ``DEGREE`` of sigma^(k) at the first-kind Chebyshev points
(numpy.polynomial.chebyshev). sigma^(k) comes from, in this order of preference:

* the user's ``derivatives[k - 1]``;
* Cauchy's integral formula sigma^(k)(s) = k! / (2 pi i) oint sigma(z) (z - s)^(-k-1) dz on a circle of radius r
  (the trapezoidal rule with ``CAUCHY_NODES`` nodes: error ~ (r / R)^N for the nearest singularity at R), when the
  callable accepts complex arrays (np.tanh, np.exp, scipy.special.erf do); r is half the panel's estimated
  strip of analyticity, at most ``CAUCHY_RADIUS``;
* the derivative of the order k - 1 series (numpy's chebder), kept only when its estimated error (the difference
  between the derivatives of two interpolants of different degree: their rounding noise, amplified ~j^2 per
  order) is below ``DERIVATIVE_TOL`` of the order's scale.

Every order taken from a callable is checked against the derivative of the previous order's series (relative
``CONSISTENCY_TOL``): a wrong derivative is an error. The strip of analyticity passed to the core is the smallest
over panels of the lowest point above the panel, b^2 / a, of the Bernstein ellipse fitted to the decay of the order-0
coefficients (a singularity above a panel's end lies there), times
``STRIP_SAFETY`` (capped at pi); the certified lattices check their 2h rule at run time regardless. Each panel's and
order's trailing coefficients whose magnitudes sum below ``TRIM_TOL`` of that panel's own series are set to 0 (the
core sums each series only up to its last nonzero coefficient: tanh's sigma about 17 of 33 terms, sigma' 31;
relative to the panel, so that a function small on a panel keeps its relative accuracy there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.polynomial.chebyshev as C
from numpy.typing import NDArray

ORDERS = 5  # sigma, sigma', ..., sigma''''
DEGREE = 32
MAX_WIDTH = 1.0
MAX_LEVELS = 8  # bisections of a panel at most (width >= 2^-8)
MAX_PANELS = 20000
MAX_DOMAIN = MAX_PANELS * MAX_WIDTH / 2  # the initial unit panels must fit the budget
CHUNK = 1024  # panels per evaluation: bounds the Cauchy nodes' array (CHUNK x 33 x 96 complex, ~50 MB)
TAIL = 4  # the last TAIL coefficients measure convergence
SMOOTH_TOL = 1e-13  # tail / scale of sigma's series
DERIVED_SMOOTH_TOL = 1e-11  # of the derivatives' (Cauchy's formula: rounding ~ eps k! / r^k)
DERIVATIVE_TOL = 1e-10
CONSISTENCY_TOL = 1e-6
JUMP_TOL = 1e-8  # of any order across a panel edge
EDGE_TOL = 1e-10  # |sigma''(+-domain)| / scale: the tangent-line tails
CAUCHY_NODES = 96
CAUCHY_RADIUS = 0.25  # at most (rounding: eps k! / r^k)
ZERO_TOL = 1e-12  # an order whose scale is below this fraction of the lower orders' is rounding: set to 0
NEGLIGIBLE = 1e-3  # a derivative below this fraction of the lower orders' scale is checked against theirs
CAUCHY_NOISE = 100.0  # the rounding of Cauchy's sums, in units of eps max|sigma| k! / r^k
STRIP_SAFETY = 0.97  # the fit's own error (tanh: b 0.3% wide)
TRIM_TOL = 1e-15  # a series' trailing coefficients summing below this fraction of its own size are dropped
MAX_STRIP = math.pi

_NODES = C.chebpts1(DEGREE + 1)
_VANDER_INV = np.linalg.inv(C.chebvander(_NODES, DEGREE))
_NODES_LOW = C.chebpts1(DEGREE)
_VANDER_INV_LOW = np.linalg.inv(C.chebvander(_NODES_LOW, DEGREE - 1))

Func = Callable[[Any], Any]


def _call(f: Func, x: NDArray[Any], what: str, complex_ok: bool = False) -> NDArray[Any]:
    """f(x) checked: an array of x's shape, real (or complex when asked), finite."""
    try:
        y = f(x)
    except Exception as e:
        raise ValueError(f"{what}: calling it on a float64 array of shape {x.shape} raised "
                         f"{type(e).__name__}: {e}") from e
    arr = np.asarray(y)
    if arr.shape != x.shape:
        raise ValueError(f"{what}: expected a vectorised function returning an array of the input's shape "
                         f"{x.shape}, got shape {arr.shape}")
    if arr.dtype.kind not in "iuf" and not (complex_ok and arr.dtype.kind == "c"):
        raise TypeError(f"{what}: expected real numbers, got an array of dtype {arr.dtype}")
    out = arr.astype(complex if arr.dtype.kind == "c" else float)
    bad = ~np.isfinite(out)
    if bad.any():
        raise ValueError(f"{what}: expected finite values on the domain, got {out[bad][0]} at s = "
                         f"{np.real(x[bad][0]):.6g}")
    return out


def _accepts_complex(f: Func) -> bool:
    """Whether f extends to complex arguments consistently with its real values (then Cauchy's formula applies)."""
    x = np.linspace(-1.0, 1.0, 7)
    try:
        with np.errstate(all="ignore"):
            z = np.asarray(f(x + 0j))
            r = np.asarray(f(x), dtype=float)
    except Exception:
        return False
    return (z.shape == x.shape and z.dtype.kind == "c" and bool(np.all(np.isfinite(z)))
            and bool(np.allclose(z.real, r, rtol=1e-13, atol=1e-13 * (1 + np.abs(r).max())))
            and bool(np.all(np.abs(z.imag) <= 1e-13 * (1 + np.abs(r).max()))))


def _coefficients(values: NDArray[np.float64], low: bool = False) -> NDArray[np.float64]:
    """Chebyshev coefficients (..., n + 1) of the interpolant of values (..., n + 1) at the Chebyshev points."""
    return values @ (_VANDER_INV_LOW if low else _VANDER_INV).T


def _points(lo: NDArray[np.float64], hi: NDArray[np.float64], nodes: NDArray[np.float64]) -> NDArray[np.float64]:
    return 0.5 * (lo + hi)[:, None] + 0.5 * (hi - lo)[:, None] * nodes[None, :]


def _strip(c0: NDArray[np.float64], half_width: NDArray[np.float64], lowest: bool = False) -> NDArray[np.float64]:
    """Semi-minor axis b of the Bernstein ellipse fitted to the decay of each panel's coefficients (P, n + 1); with
    ``lowest``, the lowest point of the ellipse above the panel, b^2 / a (a = sqrt(1 + b^2) its semi-major axis, in
    panel units): the height of a singularity on the ellipse above the panel's end."""
    env = np.maximum.accumulate(np.abs(c0)[:, ::-1], axis=1)[:, ::-1]  # max_{i >= j} |c_i|
    top = np.maximum(env[:, 1], 1e-300)  # the non-constant part decays from here
    floor = 1e-13 * np.maximum(np.abs(c0[:, 0]), top)
    below = env[:, 1:] < floor[:, None]
    m = np.where(below.any(axis=1), np.argmax(below, axis=1), DEGREE - 1)  # steps from j = 1 to the floor
    m = np.maximum(m, 1)
    rho = (top / np.maximum(env[np.arange(len(m)), 1 + m], floor)) ** (1.0 / m)
    rho = np.maximum(rho, 1.0 + 1e-12)
    # too little variation to measure a decay (a numerically constant panel): no bound from this panel
    semi = 0.5 * (rho - 1.0 / rho)
    if lowest:
        semi = semi * semi / (0.5 * (rho + 1.0 / rho))
    b = np.where(top <= 1e6 * floor, np.inf, half_width * semi)
    return np.minimum(b, MAX_STRIP)


def _cauchy(f: Func, s: NDArray[np.float64], r: NDArray[np.float64], what: str) -> NDArray[np.float64]:
    """sigma^(k)(s), k = 1..4, (4, *s.shape) by Cauchy's formula on circles of radius r (broadcast with s)."""
    theta = 2.0 * np.pi * np.arange(CAUCHY_NODES) / CAUCHY_NODES
    z = s[..., None] + r[..., None] * np.exp(1j * theta)
    fz = _call(f, z, what, complex_ok=True)
    coef = np.fft.fft(fz, axis=-1) / CAUCHY_NODES  # coef[k] = sigma^(k)(s) r^k / k!
    return np.stack([math.factorial(k) * coef[..., k].real / r ** k for k in range(1, ORDERS)])


class _Tabulator:
    def __init__(self, f: Func, derivatives: Sequence[Func], domain: float) -> None:
        self.f = f
        self.derivatives = list(derivatives)
        self.domain = domain
        self.complex = len(self.derivatives) < ORDERS - 1 and _accepts_complex(f)
        # the rounding level of each panel's Cauchy derivatives in the last `values` call (P, ORDERS)
        self.noise: NDArray[np.float64] = np.zeros((0, ORDERS))

    def _callable_name(self, k: int) -> str:
        return "function" if k == 0 else f"derivatives[{k - 1}]"

    def values(self, lo: NDArray[np.float64], hi: NDArray[np.float64]) -> tuple[
            NDArray[np.float64], list[str]]:
        """Coefficients (P, ORDERS, n + 1) on the panels [lo, hi], and each order's source (CHUNK panels at a
        time)."""
        if len(lo) > CHUNK:
            parts, noise = [], []
            for i in range(0, len(lo), CHUNK):
                parts.append(self.values(lo[i:i + CHUNK], hi[i:i + CHUNK]))
                noise.append(self.noise)
            self.noise = np.concatenate(noise)
            return np.concatenate([c for c, _ in parts]), parts[0][1]
        x = _points(lo, hi, _NODES)
        c = np.zeros((len(lo), ORDERS, DEGREE + 1))
        f0 = _call(self.f, x, "function")
        c[:, 0] = _coefficients(f0)
        sources = ["function"]
        cauchy = None
        # the rounding of Cauchy's formula, eps max|sigma| k! / r^k per panel and order (0 for the other sources):
        # a derivative at that level is noise, not a failure to converge
        self.noise = np.zeros((len(lo), ORDERS))
        for k in range(1, ORDERS):
            if k <= len(self.derivatives):
                c[:, k] = _coefficients(_call(self.derivatives[k - 1], x, f"derivatives[{k - 1}]"))
                sources.append(f"derivatives[{k - 1}]")
            elif self.complex:
                if cauchy is None:
                    r = np.minimum(0.5 * _strip(c[:, 0], 0.5 * (hi - lo)), CAUCHY_RADIUS)
                    cauchy = _cauchy(self.f, x, np.broadcast_to(r[:, None], x.shape), "function")
                c[:, k] = _coefficients(cauchy[k - 1])
                self.noise[:, k] = (CAUCHY_NOISE * np.finfo(float).eps * math.factorial(k) / r ** k
                                    * np.abs(f0).max(axis=1))
                sources.append("cauchy")
            else:
                c[:, k] = self._chebder(c[:, k - 1], lo, hi)
                sources.append("chebder")
        return c, sources

    @staticmethod
    def _chebder(c: NDArray[np.float64], lo: NDArray[np.float64], hi: NDArray[np.float64]) -> NDArray[np.float64]:
        d = C.chebder(c, axis=-1) * (2.0 / (hi - lo))[:, None]
        return np.concatenate([d, np.zeros((len(lo), 1))], axis=-1)


def tabulate(f: Func, derivatives: Sequence[Func], domain: float) -> tuple[
        NDArray[np.float64], NDArray[np.float64], float]:
    """(edges, coefficients (P, 5, n + 1), strip) of f on [-domain, domain]; ValueError/TypeError on bad input."""
    tab = _Tabulator(f, derivatives, domain)
    n0 = max(1, math.ceil(2.0 * domain / MAX_WIDTH))
    edges0 = np.linspace(-domain, domain, n0 + 1)
    todo_lo, todo_hi = edges0[:-1], edges0[1:]
    done: list[tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]] = []
    scale, noise = np.zeros(ORDERS), np.zeros(ORDERS)
    sources: list[str] = []
    for level in range(MAX_LEVELS + 1):
        c, sources = tab.values(todo_lo, todo_hi)
        noise = np.maximum(noise, tab.noise.max(axis=0))
        # the scale of each order: its largest value on the domain (from the first pass: every panel)
        vals = np.abs(c).sum(axis=-1).max(axis=0)
        scale = np.maximum(scale, vals)
        tail = np.abs(c[:, :, -TAIL:]).max(axis=-1)  # (P, ORDERS)
        checked = np.array([src != "chebder" for src in sources])  # chebder orders: by their error estimate
        tol = np.where(np.arange(ORDERS) == 0, SMOOTH_TOL, DERIVED_SMOOTH_TOL) * np.maximum(scale, 1e-300)
        ok = (tail <= np.maximum(tol[None, :], tab.noise))[:, checked].all(axis=1)
        done.append((todo_lo[ok], todo_hi[ok], c[ok]))
        if ok.all():
            break
        if level == MAX_LEVELS or 2 * (~ok).sum() + sum(len(d[0]) for d in done) > MAX_PANELS:
            bad = np.flatnonzero(~ok)[0]
            k = int(np.argmax(np.where(checked, tail[bad] / np.maximum(scale, 1e-300), -1.0)))
            raise ValueError(
                f"function: not smooth enough near s in [{todo_lo[bad]:.6g}, {todo_hi[bad]:.6g}]: the Chebyshev "
                f"series of {'sigma' if k == 0 else 'its derivative of order ' + str(k)} ({sources[k]}) decays only "
                f"to {tail[bad, k] / max(scale[k], 1e-300):.2g} of its scale on a panel of width "
                f"{todo_hi[bad] - todo_lo[bad]:.3g}; custom activations must be analytic on the domain (kinked or "
                f"discontinuous functions are not supported: use 'relu' or 'step')")
        mid = 0.5 * (todo_lo[~ok] + todo_hi[~ok])
        todo_lo = np.concatenate([todo_lo[~ok], mid])
        todo_hi = np.concatenate([mid, todo_hi[~ok]])
    lo = np.concatenate([d[0] for d in done])
    hi = np.concatenate([d[1] for d in done])
    coef = np.concatenate([d[2] for d in done])
    order = np.argsort(lo)
    lo, hi, coef = lo[order], hi[order], coef[order]
    _check_orders(tab, coef, lo, hi, sources, scale, noise)
    _check_tails(coef, domain, scale)
    # an order at the rounding level of the lower ones is zero (sigma'' of a linear function): exactly 0 in the
    # table, so that the certified quadratures do not chase its noise
    for k in range(1, ORDERS):
        if scale[k] <= ZERO_TOL * scale[:k].max():
            coef[:, k:] = 0.0
            break
    strip = float(STRIP_SAFETY * _strip(coef[:, 0], 0.5 * (hi - lo), lowest=True).min())
    # each panel's and order's trailing coefficients whose magnitudes sum below rounding *of that panel's own series*
    # change nothing: 0 (the core skips a series' trailing zeros; relative to the panel, not to the order's scale,
    # so that a function small on a panel, e.g. a Gaussian bump's tails, keeps its relative accuracy there), and the
    # columns that are 0 everywhere are dropped
    tail_sum = np.cumsum(np.abs(coef[..., ::-1]), axis=-1)[..., ::-1]  # sum_{i >= j} |c_i|
    coef[tail_sum <= TRIM_TOL * np.maximum(tail_sum[..., :1], 1e-300)] = 0.0
    small = (coef == 0.0).all(axis=(0, 1))
    keep = DEGREE + 1 - int(np.argmin(small[::-1])) if not small.all() else 1
    return np.append(lo, hi[-1]), np.ascontiguousarray(coef[:, :, :keep]), strip


def _check_orders(tab: _Tabulator, coef: NDArray[np.float64], lo: NDArray[np.float64], hi: NDArray[np.float64],
                  sources: list[str], scale: NDArray[np.float64], noise: NDArray[np.float64]) -> None:
    """Orders from a callable against the derivative of the previous order's series (a wrong derivative is an
    error); orders from chebder by their estimated error: the same derivative of an interpolant of lower degree of
    the last order taken from a callable (their difference is the rounding noise amplified by differentiation)."""
    left, right = C.chebval(1.0, coef[:-1].transpose(2, 0, 1)), C.chebval(-1.0, coef[1:].transpose(2, 0, 1))
    # (P - 1, ORDERS) at the interior edges; an order differentiated twice or more by chebder is judged by its
    # error estimate below (its noise jumps)
    judged = [k == 0 or sources[k] != "chebder" or sources[k - 1] != "chebder" for k in range(ORDERS)]
    # (a jump within Cauchy's rounding, ``noise``, is that rounding: e.g. sigma'' of a linear function)
    jump = np.abs(left - right) / np.maximum(np.maximum(scale, noise / JUMP_TOL), 1e-300) * np.array(judged)
    if jump.size and jump.max() > JUMP_TOL:
        i, o = (int(v) for v in np.unravel_index(int(np.argmax(jump)), jump.shape))
        raise ValueError(f"function: not smooth at s = {hi[i]:.6g} (its derivative of order {o} jumps by "
                         f"{jump[i, o]:.2g} of its scale); custom activations must be analytic on the domain "
                         f"(kinked or discontinuous functions are not supported: use 'relu' or 'step')")
    for k in range(1, ORDERS):
        own = C.chebval(_NODES, coef[:, k].T)  # (n + 1, P) at the nodes
        if sources[k] == "chebder":
            j = k
            while sources[j] == "chebder":
                j -= 1
            g = tab.f if j == 0 else tab.derivatives[j - 1]
            low = _coefficients(_call(g, _points(lo, hi, _NODES_LOW), sources[j]), low=True)
            for _ in range(k - j):
                low = np.concatenate([C.chebder(low, axis=-1) * (2.0 / (hi - lo))[:, None],
                                      np.zeros((len(lo), 1))], axis=-1)
            est = np.abs(C.chebval(_NODES, low.T) - own).max() / max(scale[k], 1e-300)
            if est > DERIVATIVE_TOL:
                raise ValueError(
                    f"derivatives: sigma's derivative of order {k} cannot be computed to {DERIVATIVE_TOL:g} by "
                    f"differentiating a Chebyshev series (estimated relative error {est:.2g}) and the function does "
                    f"not accept complex arrays (for Cauchy's formula); pass derivatives=[sigma', ..., sigma''''] "
                    f"(at least the first {k})")
            continue
        derived = C.chebval(_NODES, _Tabulator._chebder(coef[:, k - 1], lo, hi).T)
        # relative to the order's scale, floored at NEGLIGIBLE of the lower orders' (sigma'' of a nearly linear
        # function is ~0: its differentiated neighbour is rounding amplified by the differentiation)
        err = np.abs(own - derived).max() / max(scale[k], NEGLIGIBLE * scale[:k].max(), 1e-300)
        if err > CONSISTENCY_TOL:
            what = sources[k] if sources[k] != "cauchy" else "function (its derivatives by Cauchy's formula)"
            raise ValueError(f"{what}: expected sigma's derivative of order {k}, but it differs from the derivative "
                             f"of order {k - 1} differentiated by {err:.2g} of its scale (> {CONSISTENCY_TOL:g})")


def _check_tails(coef: NDArray[np.float64], domain: float, scale: NDArray[np.float64]) -> None:
    """sigma continues as its tangent lines beyond +-domain: sigma'' must vanish there (relative EDGE_TOL)."""
    for side, c in ((-1.0, coef[0, 2]), (1.0, coef[-1, 2])):
        v = abs(float(C.chebval(side, c)))
        if v > EDGE_TOL * max(scale[0], scale[1], 1.0):
            raise ValueError(f"domain: beyond s = {side * domain:g} a custom activation continues as its tangent "
                             f"line, but sigma''({side * domain:g}) = {v:.2g} is not negligible; pass a wider "
                             f"domain (expected |sigma''| <= {EDGE_TOL:g} of the scale at the edges)")
