"""Gaussian angle kernels, batched over any leading shape and computed in the C++ core.

With (l1, ..., ln) ~ N(0, C) and activations named as in :mod:`twolayer.activations`:

* ``i2(a, b, C)``    = E[a(l1) b(l2)],                      C of shape (..., 2, 2)
* ``i3(s, b, C)``    = E[s'(l1) l2 b(l3)],                  C of shape (..., 3, 3)
* ``j2(s, C)``       = E[s'(l1) s'(l2)],                    C of shape (..., 2, 2)
* ``i4(s, a, b, C)`` = E[s'(l1) s'(l2) a(l3) b(l4)],        C of shape (..., 4, 4)

``erf`` is erf(s/sqrt 2). Every I2 pair is in closed form; I3 and J2 follow from I2 by Stein's lemma and Price's
theorem (so they exist for every pair, including ``step``, whose derivative is a delta); I4 is closed form for
``linear``, ``quadratic``, ``erf`` and ``step`` units with any (a, b); for ``relu`` units, (relu, relu) by Price
interpolation (one-dimensional Gauss-Legendre / sinh quadrature, ~1e-13 relative) and (linear, relu),
(linear, linear) in closed form, every other pair by orthant moments (Stein's lemma down to closed-form orthant
probabilities of up to three variables, the four-variable one by the same Price quadrature; erf through
erf(l/sqrt 2) = 2 P(l - w > 0) - 1, w ~ N(0, 1) independent): no pair is missing. For ``step`` students the
online ODE's E[s'(l_i)^2 ...] (a squared delta) is infinite: online SGD does not apply to them (gradient flow
does), and the ODE refuses it with a ValueError. Zero-variance entries mean the unit is
identically 0 (step(0) = 0). Each C must be finite, symmetric and positive semi-definite (ValueError otherwise).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._validation import as_float_array, n_threads_arg, positive
from .activations import ActivationName, check_activation


def _batched(fn: Any, C: ArrayLike, n: int, n_threads: int | None, *acts: str) -> Any:
    arr = as_float_array(C, "C", finite=False)
    if arr.ndim < 2 or arr.shape[-2:] != (n, n):
        raise ValueError(f"C: expected shape (..., {n}, {n}), got {arr.shape}")
    batch = arr.shape[:-2]
    out = fn(*acts, arr.reshape(-1, n, n), n_threads=n_threads_arg(n_threads))
    return out.reshape(batch)[()]


def i2(act_a: ActivationName, act_b: ActivationName, C: ArrayLike, n_threads: int | None = None) -> Any:
    """E[a(l1) b(l2)] for (l1, l2) ~ N(0, C); C (..., 2, 2) -> (...)."""
    return _batched(_core.i2, C, 2, n_threads, check_activation(act_a, "act_a"), check_activation(act_b, "act_b"))


def i3(act: ActivationName, act_b: ActivationName, C: ArrayLike, n_threads: int | None = None) -> Any:
    """E[s'(l1) l2 b(l3)] for (l1, l2, l3) ~ N(0, C); C (..., 3, 3) -> (...)."""
    return _batched(_core.i3, C, 3, n_threads, check_activation(act, "act"), check_activation(act_b, "act_b"))


def j2(act: ActivationName, C: ArrayLike, n_threads: int | None = None) -> Any:
    """E[s'(l1) s'(l2)] for (l1, l2) ~ N(0, C); C (..., 2, 2) -> (...)."""
    return _batched(_core.j2, C, 2, n_threads, check_activation(act, "act"))


def i4(
    act: ActivationName,
    act_a: ActivationName,
    act_b: ActivationName,
    C: ArrayLike,
    n_threads: int | None = None,
) -> Any:
    """E[s'(l1) s'(l2) a(l3) b(l4)] for l ~ N(0, C); C (..., 4, 4) -> (...)."""
    return _batched(
        _core.i4,
        C,
        4,
        n_threads,
        check_activation(act, "act"),
        check_activation(act_a, "act_a"),
        check_activation(act_b, "act_b"),
    )


def covariance(*rows: ArrayLike, scale: float = 1.0) -> NDArray[np.float64]:
    """The covariance of the pre-activations w_k . x / sqrt(scale) for weight vectors ``rows``: Gram / scale."""
    vs = [as_float_array(r, f"rows[{i}]", ndim=1) for i, r in enumerate(rows)]
    if not vs or any(v.shape != vs[0].shape for v in vs):
        raise ValueError(f"rows: expected one or more vectors of equal length, got shapes {[v.shape for v in vs]}")
    W = np.stack(vs)
    s = positive(scale, "scale")
    with np.errstate(over="ignore", invalid="ignore"):
        C = W @ W.T / s
    if not np.all(np.isfinite(C)):
        raise ValueError(f"rows, scale: the covariance Gram / scale exceeds the double range (scale = {s:g})")
    return C
