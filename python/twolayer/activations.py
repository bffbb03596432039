"""Activation functions sigma and their derivatives.

Names: ``linear`` (s), ``erf`` (erf(s/sqrt 2)), ``relu`` (max(s, 0)), ``step`` (1(s > 0)) and
``quadratic`` (s^2), whose kernels are closed forms; and the smooth ``tanh``, ``sigmoid`` (1/(1 + e^-s)),
``softplus`` (log(1 + e^s)), ``gelu`` (s Phi(s), the exact GELU), ``silu`` (s sigmoid(s)), ``sin`` and ``cos``,
whose kernels come from the generic Gaussian engine (closed forms through the characteristic function for sin and
cos pairs, certified quadrature otherwise; see docs/layers/activations.rst); and ``hermite(c_0, ..., c_n)``,
the polynomial sigma(s) = sum_k c_k He_k(s) in the probabilists' Hermite polynomials (He_0 = 1, He_1 = s,
He_2 = s^2 - 1, ...; n <= 8; build the spelling with :func:`hermite`), whose kernels are exact Gaussian moments
(with linear, quadratic and other hermite units; certified quadrature with the other smooth units); and
``custom(name)``, a user function registered in this process with :func:`custom` (tabulated as Chebyshev series,
kernels by certified quadrature). The derivative
of ``step`` is a Dirac delta: pointwise it is returned as 0, and every expectation involving it is taken in closed
form by the kernels.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal, cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core, _custom
from ._validation import as_float_array, choice, describe, real

ActivationName = Literal[
    "linear", "erf", "relu", "step", "quadratic", "tanh", "sigmoid", "softplus", "gelu", "silu", "sin", "cos"
]
ACTIVATIONS: tuple[str, ...] = (
    "linear", "erf", "relu", "step", "quadratic", "tanh", "sigmoid", "softplus", "gelu", "silu", "sin", "cos"
)
#: The activations whose kernels are closed forms for every pair among them.
CLOSED_FORM: tuple[str, ...] = ("linear", "erf", "relu", "step", "quadratic")
#: The largest degree n of a hermite activation.
MAX_HERMITE_DEGREE = 8


def hermite(coefficients: ArrayLike) -> ActivationName:
    """The activation sigma(s) = sum_k c_k He_k(s) (probabilists' Hermite polynomials), as its canonical spelling.

    Parameters
    ----------
    coefficients : array_like, shape (n + 1,)
        c_0, ..., c_n, finite, 1 <= n + 1 <= 9 (trailing zeros are dropped).

    Returns
    -------
    str
        ``"hermite(c_0,...,c_n)"``, accepted wherever an activation name is (one string: it travels through
        configs, results and files like the names do).

    Raises
    ------
    ValueError
        Not 1 to 9 finite coefficients.

    Examples
    --------
    >>> tl.activations.hermite([0, 1, 0.5])
    'hermite(0,1,0.5)'
    >>> tl.activations.sigma(tl.activations.hermite([1, 0, 1]), [2.0])  # 1 + He_2(s) = s^2
    array([4.])
    """
    c = as_float_array(coefficients, "coefficients", ndim=1)
    if not 1 <= c.size <= MAX_HERMITE_DEGREE + 1:
        raise ValueError(f"coefficients: expected 1 to {MAX_HERMITE_DEGREE + 1} Hermite coefficients "
                         f"(degree <= {MAX_HERMITE_DEGREE}), got {c.size}")
    name = _core.canonical_activation("hermite(" + ",".join(repr(float(v)) for v in c) + ")", "coefficients")
    # typed as an activation name: the spelling goes wherever the Literal names go (user code type-checks)
    return cast(ActivationName, name)


def is_hermite(name: object) -> bool:
    """Whether ``name`` is a hermite spelling (``"hermite(...)"``; not validated: see :func:`check_activation`).

    Parameters
    ----------
    name : object
        An activation (anything else: False).

    Returns
    -------
    bool

    Examples
    --------
    >>> tl.activations.is_hermite("hermite(0,1)"), tl.activations.is_hermite("erf")
    (True, False)
    """
    return isinstance(name, str) and name.startswith("hermite")


def hermite_coefficients(name: str) -> NDArray[np.float64]:
    """The Hermite coefficients c_0, ..., c_n of a hermite activation (ValueError for another name).

    Parameters
    ----------
    name : str
        A hermite activation ``"hermite(c_0, ..., c_n)"``.

    Returns
    -------
    ndarray, shape (n + 1,)
        c_0, ..., c_n (trailing zeros dropped).

    Examples
    --------
    >>> tl.activations.hermite_coefficients("hermite(0, 1, 0.5)")
    array([0. , 1. , 0.5])
    """
    canonical = check_activation(name)
    if not is_hermite(canonical):
        raise ValueError(f"activation: expected a hermite activation 'hermite(c_0, ..., c_n)', got {name!r}")
    return np.array([float(v) for v in canonical[len("hermite("):-1].split(",")])


def custom(name: str, function: Callable[[Any], Any], derivatives: Sequence[Callable[[Any], Any]] | None = None, *,
           domain: float = 30.0) -> ActivationName:
    """Register a user function sigma as the activation ``"custom(name)"`` of this process.

    sigma and its first four derivatives are tabulated on [-domain, domain] as piecewise Chebyshev series (panels of
    width <= 1, degree 32, to rounding) and continue beyond as sigma's tangent lines at +-domain. Every CPU engine
    (kernels, population, ODEs, SGD, SDE, large batch, landscape) then evaluates the tables; Gaussian expectations
    use the certified lattice quadrature with a strip of analyticity estimated from the series (see
    docs/layers/activations.rst, "Custom activations").

    Parameters
    ----------
    name : str
        An identifier (letters, digits, ``_``). Registering the same name again with the same function returns the
        same activation; with another function it is an error.
    function : callable
        Vectorised sigma: float64 array -> real array of the same shape, finite and analytic on the domain.
    derivatives : sequence of 1 to 4 callables, optional
        sigma', sigma'', ... (each checked against the derivative of the previous order). Missing orders come from
        Cauchy's integral formula when ``function`` accepts complex arrays (NumPy ufuncs and scipy.special do),
        otherwise from differentiating the series where that is accurate to 1e-10 (an error asks for them).
    domain : float, default 30.0
        Half-width of the tabulated interval; sigma'' must be negligible (1e-10 of the scale) at its edges.

    Returns
    -------
    str
        ``"custom(name)"``, accepted wherever an activation name is, in this process (a config file or a store
        opened in another process must register it again: a spelling never defines a function).

    Raises
    ------
    TypeError
        ``function`` or a derivative not callable, or returning non-real values.
    ValueError
        A bad name or domain, wrong shapes, NaN or inf on the domain, a function that is not smooth (kinks: use
        ``relu`` or ``step``), a wrong derivative, derivatives that cannot be computed accurately, sigma'' not
        negligible at +-domain, or the name registered with another function.

    Examples
    --------
    >>> act = tl.activations.custom("mytanh", np.tanh)
    >>> act
    'custom(mytanh)'
    >>> C = [[1.0, 0.5], [0.5, 1.0]]
    >>> print(f"{tl.kernels.i2(act, act, C):.10f} {tl.kernels.i2('tanh', 'tanh', C):.10f}")
    0.1863244132 0.1863244132
    """
    if not isinstance(name, str):
        raise TypeError(f"name: expected a str (an identifier), got {describe(name)}")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"name: expected an identifier (letters, digits, '_'; not starting with a digit), "
                         f"got {name!r}")
    if not callable(function):
        raise TypeError(f"function: expected a callable (vectorised sigma), got {describe(function)}")
    if derivatives is None:
        derivatives = ()
    if isinstance(derivatives, (str, bytes)) or not isinstance(derivatives, Sequence):
        raise TypeError(f"derivatives: expected a sequence of 1 to 4 callables, got {describe(derivatives)}")
    derivatives = list(derivatives)
    if len(derivatives) > _custom.ORDERS - 1:
        raise ValueError(f"derivatives: expected 1 to 4 callables (sigma' to sigma''''), got {len(derivatives)}")
    for k, g in enumerate(derivatives):
        if not callable(g):
            raise TypeError(f"derivatives[{k}]: expected a callable, got {describe(g)}")
    span = real(domain, "domain")
    if not (1.0 <= span <= _custom.MAX_DOMAIN) or not math.isfinite(span):
        raise ValueError(f"domain: expected a half-width in [1, {_custom.MAX_DOMAIN:g}] (at most "
                         f"{_custom.MAX_PANELS} panels of width {_custom.MAX_WIDTH:g}), got {span!r}")
    with np.errstate(all="ignore"):
        edges, coefficients, strip = _custom.tabulate(function, derivatives, span)
    return cast(ActivationName, register_table(name, edges, coefficients, strip))


#: The tables registered in this process by spelling (data: what a scan ships to its worker processes).
_TABLES: dict[str, tuple[NDArray[np.float64], NDArray[np.float64], float]] = {}


def register_table(name: str, edges: NDArray[np.float64], coefficients: NDArray[np.float64], strip: float) -> str:
    """Register a custom activation from its table (what :func:`custom` computes; :func:`custom_tables` returns
    them): the same name with the same table is the same activation, another table is a ValueError.

    Parameters
    ----------
    name : str
        The identifier.
    edges : ndarray, shape (P + 1,)
        Increasing panel edges.
    coefficients : ndarray, shape (P, 5, n + 1)
        Chebyshev coefficients of sigma, sigma', ..., sigma^(4) per panel.
    strip : float
        Half-width of the strip of analyticity (> 0).

    Returns
    -------
    str
        ``"custom(name)"``.

    Examples
    --------
    >>> act = tl.activations.custom("doc_tanh", np.tanh)
    >>> tl.activations.register_table("doc_tanh", *tl.activations.custom_tables([act])[act])
    'custom(doc_tanh)'
    """
    spelling = _core.register_custom(name, edges, coefficients, strip)
    _TABLES[spelling] = (np.asarray(edges, dtype=float), np.asarray(coefficients, dtype=float), float(strip))
    return spelling


def custom_tables(names: Any) -> dict[str, tuple[NDArray[np.float64], NDArray[np.float64], float]]:
    """The tables (edges, coefficients, strip) of the custom activations among ``names`` (strings; other values are
    skipped; an unregistered spelling is a ValueError): data that :func:`register_table` registers in another
    process.

    Parameters
    ----------
    names : iterable
        Values, some of them custom spellings.

    Returns
    -------
    dict

    Examples
    --------
    >>> act = tl.activations.custom("doc_tanh", np.tanh)
    >>> list(tl.activations.custom_tables([act, "erf", 2.0]))
    ['custom(doc_tanh)']
    """
    out = {}
    for v in names:
        if is_custom(v):
            key = check_activation(v)
            out[key] = _TABLES[key]
    return out


def is_custom(name: object) -> bool:
    """Whether ``name`` is a custom spelling ``"custom(...)"`` (not checked for registration: see
    :func:`check_activation`).

    Parameters
    ----------
    name : object
        An activation (anything else: False).

    Returns
    -------
    bool

    Examples
    --------
    >>> tl.activations.is_custom("custom(mytanh)"), tl.activations.is_custom("tanh")
    (True, False)
    """
    return isinstance(name, str) and name.startswith("custom(")


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
        ``name``, if it is one of ``ACTIVATIONS``; the canonical spelling of a hermite activation
        ``"hermite(c_0, ..., c_n)"`` (see :func:`hermite`); ``"custom(name)"`` if registered in this process
        (see :func:`custom`; an unregistered one is a ValueError: a spelling never defines a function).

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
    >>> tl.activations.check_activation("hermite(0, 1.0, 0)")
    'hermite(0,1)'
    """
    if isinstance(name, str) and (is_hermite(name) or is_custom(name)):
        return _core.canonical_activation(name, argument)
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
