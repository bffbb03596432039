"""Activation functions sigma and their derivatives.

Names: ``linear`` (s), ``erf`` (erf(s/sqrt 2)), ``relu`` (max(s, 0)), ``step`` (1(s > 0)) and
``quadratic`` (s^2), whose kernels are closed forms; and the smooth ``tanh``, ``sigmoid`` (1/(1 + e^-s)),
``softplus`` (log(1 + e^s)), ``gelu`` (s Phi(s), the exact GELU), ``silu`` (s sigmoid(s)), ``sin`` and ``cos``,
whose kernels come from the generic Gaussian engine (closed forms through the characteristic function for sin and
cos pairs, certified quadrature otherwise; see docs/layers/activations.rst). The derivative of ``step`` is a Dirac
delta: pointwise it is returned as 0, and every expectation involving it is taken in closed form by the kernels.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._validation import as_float_array, choice

ActivationName = Literal[
    "linear", "erf", "relu", "step", "quadratic", "tanh", "sigmoid", "softplus", "gelu", "silu", "sin", "cos"
]
ACTIVATIONS: tuple[str, ...] = (
    "linear", "erf", "relu", "step", "quadratic", "tanh", "sigmoid", "softplus", "gelu", "silu", "sin", "cos"
)
#: The activations whose kernels are closed forms for every pair among them.
CLOSED_FORM: tuple[str, ...] = ("linear", "erf", "relu", "step", "quadratic")


def check_activation(name: object, argument: str = "activation") -> str:
    """Check an activation name.

    Parameters
    ----------
    name : object
        The name to check.
    argument : str, default "activation"
        The argument name the error message names.

    Returns
    -------
    str
        ``name``, if it is one of ``ACTIVATIONS``.

    Raises
    ------
    TypeError
        ``name`` is not a str.
    ValueError
        ``name`` is not a known activation.

    Examples
    --------
    >>> tl.activations.check_activation("relu")
    'relu'
    >>> tl.activations.check_activation("swish", "act_b")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: act_b: expected one of ...
    """
    return choice(name, argument, ACTIVATIONS)


def sigma(name: ActivationName, x: ArrayLike) -> NDArray[np.float64]:
    """sigma(x), elementwise.

    Parameters
    ----------
    name : str
        The activation (see the module docstring).
    x : array_like
        Inputs (NaN in, NaN out).

    Returns
    -------
    ndarray
        sigma(x) in the shape of ``x``.

    Examples
    --------
    >>> tl.activations.sigma("relu", [-1.0, 2.0])
    array([0., 2.])
    """
    arr = as_float_array(x, "x", finite=False)
    return _core.sigma(check_activation(name), arr).reshape(np.shape(x))


def derivative(name: ActivationName, x: ArrayLike) -> NDArray[np.float64]:
    """sigma'(x), elementwise (0 for ``step``, whose derivative is a delta).

    Parameters
    ----------
    name : str
        The activation (see the module docstring).
    x : array_like
        Inputs.

    Returns
    -------
    ndarray
        sigma'(x) in the shape of ``x``.

    Examples
    --------
    erf(s / sqrt 2) has slope sqrt(2 / pi) at 0:

    >>> print(f"{tl.activations.derivative('erf', 0.0):.6f}")
    0.797885
    """
    arr = as_float_array(x, "x", finite=False)
    return _core.dsigma(check_activation(name), arr).reshape(np.shape(x))
