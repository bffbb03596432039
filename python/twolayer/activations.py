"""Activation functions sigma and their derivatives.

Names: ``linear`` (s), ``erf`` (erf(s/sqrt 2)), ``relu`` (max(s, 0)), ``step`` (1(s > 0)) and
``quadratic`` (s^2). The derivative of ``step`` is a Dirac delta: pointwise it is returned as 0, and every
expectation involving it is taken in closed form by the kernels.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._validation import as_float_array, choice

ActivationName = Literal["linear", "erf", "relu", "step", "quadratic"]
ACTIVATIONS: tuple[str, ...] = ("linear", "erf", "relu", "step", "quadratic")


def check_activation(name: object, argument: str = "activation") -> str:
    """Return ``name`` if it is a known activation: TypeError (not a str) or ValueError (unknown name) naming
    ``argument`` otherwise."""
    return choice(name, argument, ACTIVATIONS)


def sigma(name: ActivationName, x: ArrayLike) -> NDArray[np.float64]:
    """sigma(x), elementwise, in the shape of ``x`` (NaN in, NaN out)."""
    arr = as_float_array(x, "x", finite=False)
    return _core.sigma(check_activation(name), arr).reshape(np.shape(x))


def derivative(name: ActivationName, x: ArrayLike) -> NDArray[np.float64]:
    """sigma'(x), elementwise, in the shape of ``x`` (0 for ``step``, whose derivative is a delta)."""
    arr = as_float_array(x, "x", finite=False)
    return _core.dsigma(check_activation(name), arr).reshape(np.shape(x))
