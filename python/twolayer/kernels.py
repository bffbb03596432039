"""Gaussian angle kernels, batched over any leading shape and computed in the C++ core.

With (l1, ..., ln) ~ N(0, C) and activations named as in :mod:`twolayer.activations`:

* ``i2(a, b, C)``    = E[a(l1) b(l2)],                      C of shape (..., 2, 2)
* ``i3(s, b, C)``    = E[s'(l1) l2 b(l3)],                  C of shape (..., 3, 3)
* ``j2(s, C)``       = E[s'(l1) s'(l2)],                    C of shape (..., 2, 2)
* ``i4(s, a, b, C)`` = E[s'(l1) s'(l2) a(l3) b(l4)],        C of shape (..., 4, 4)

``erf`` is erf(s/sqrt 2). The smooth activations without a closed-form pair (``tanh``, ``sigmoid``, ``softplus``,
``gelu``, ``silu``, and ``custom`` ones) go through a certified lattice quadrature (1e-10 relative, checked at run
time; ``sin`` and ``cos`` with each other are in closed form, ``hermite`` units with polynomial partners exact; the
activations page of the documentation gives method and accuracy per activation). Among the classic five
(``linear``, ``erf``, ``relu``, ``step``, ``quadratic``) every I2 pair is in closed form; I3 and J2 follow from I2
by Stein's lemma and Price's theorem (so they exist for every pair, including ``step``, whose derivative is a
delta); I4 is closed form for
``linear``, ``quadratic``, ``erf`` and ``step`` units with any (a, b); for ``relu`` units, (relu, relu) by Price
interpolation (one-dimensional Gauss-Legendre / sinh quadrature, ~1e-13 relative) and (linear, relu),
(linear, linear) in closed form, every other pair by orthant moments (Stein's lemma down to closed-form orthant
probabilities of up to three variables, the four-variable one by the same Price quadrature; erf through
erf(l/sqrt 2) = 2 P(l - w > 0) - 1, w ~ N(0, 1) independent): no pair is missing. For ``step`` students the
online ODE's E[s'(l_i)^2 ...] (a squared delta) is infinite: online SGD does not apply to them (gradient flow
does), and the ODE refuses it with a ValueError. Zero-variance entries mean the unit is
identically 0 (step(0) = 0). Each C must be finite, symmetric and positive semi-definite (ValueError otherwise).

``device="cuda"`` evaluates the same formulas on the GPU (a CUDA build with a GPU; otherwise
:class:`twolayer.DeviceUnavailable`), one thread per covariance, with the same checks and errors. Every kernel is
there except the relu student's I4 with a teacher pair other than linear and relu units (orthant moments, CPU only:
:class:`twolayer.DeviceUnavailable` names the combination). The GPU pays when the batch is large (10^6 covariances
and more) and the kernel costs more than copying its matrix to the device.

**Means (biases).** Every kernel takes ``mean=`` (shape (..., n)): the pre-activations are then lambda ~ N(mu, C),
e.g. ``i3`` = E[s'(lambda1) lambda2 b(lambda3)] (give mu2 = 0 for the centred l2 of the ODE's dQ/dt). None or all
zeros runs the zero-mean kernels above, bitwise. Nonzero means (CPU only, gaussian_mean.hpp): I2 and J2 of two
smooth units by the certified engine of the smooth activations, which takes means; every pair with a relu or step
unit by conditioning on one variable, the other's Gaussian smoothing in closed form (relu: m Phi(m/s) + s phi(m/s),
step: Phi(m/s), erf: erf(m / sqrt(2 (1 + s^2))), polynomials) and adaptive Gauss-Legendre split at every kink
(a delta, relu'' or step', integrated out exactly); I3 by Stein's lemma from three such pair moments; I4 for linear,
step and erf students by exact conditioning on (lambda1, lambda2), for smooth students with smooth (a, b) by the
smooth engine with means; the relu student's I4 = E[step step a b] for every (a, b), and a smooth student's I4
with relu or step units among (a, b), by nested adaptive Gauss-Legendre over (lambda3, lambda4) (split at the kinks
and the boundary layers of near-singular covariances) with the student pair in closed form given them (relu: the
bivariate orthant probability, Drezner-Wesolowsky / Plackett, 1e-16 absolute; smooth: the certified pair moment),
certified to 1e-12 of the integral of the envelope (measured: <= 1e-12 against the zero-mean closed forms on their
degenerate grid, 1e-15 against the smooth engine through relu(x) - relu(-x) = x). Cost: about 1 ms (relu student,
ODE-like covariances) to 15 ms (random ones), up to 0.3 s near rank-deficient ones; 4 ms to 1.2 s with a smooth
student. A relu or step unit with a smooth non-classic one has no zero-mean kernel: with ``mean`` None (or zero)
such kernels run the with-means engines at mean 0 (CPU only). Measured accuracy: see the activations page of the
documentation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._validation import Device, as_float_array, device_arg, n_threads_arg, positive
from .activations import ActivationName, check_activation


def _batched(
    fn: Any, C: ArrayLike, n: int, n_threads: int | None, device: Device, *acts: str, mean: ArrayLike | None = None
) -> Any:
    dev = device_arg(device)
    arr = as_float_array(C, "C", finite=False)
    if arr.ndim < 2 or arr.shape[-2:] != (n, n):
        raise ValueError(f"C: expected shape (..., {n}, {n}), got {arr.shape}")
    batch = arr.shape[:-2]
    if mean is not None:
        mu = as_float_array(mean, "mean", finite=False)
        if mu.shape != batch + (n,):
            raise ValueError(f"mean: expected shape {batch + (n,)} (C's leading shape, then {n}), got {mu.shape}")
        if not np.all(np.isfinite(mu)):
            raise ValueError("mean: entries must be finite")
        if np.any(mu != 0.0):
            if dev != "cpu":
                raise NotImplementedError("mean: kernels with nonzero means run on the CPU only (device='cpu')")
            core = getattr(_core, fn.__name__ + "_mean")
            out = core(*acts, arr.reshape(-1, n, n), mu.reshape(-1, n), n_threads=n_threads_arg(n_threads))
            return out.reshape(batch)[()]
    # (a pair without a zero-mean kernel, relu or step with a smooth unit, runs the with-means engine at mean 0: core)
    out = fn(*acts, arr.reshape(-1, n, n), n_threads=n_threads_arg(n_threads), device=dev)
    return out.reshape(batch)[()]


def i2(
    act_a: ActivationName,
    act_b: ActivationName,
    C: ArrayLike,
    n_threads: int | None = None,
    device: Device = "cpu",
    mean: ArrayLike | None = None,
) -> Any:
    """E[a(l1) b(l2)] for (l1, l2) ~ N(0, C): closed form for the classic pairs.

    Parameters
    ----------
    act_a, act_b : str
        Activations a and b, any of :mod:`twolayer.activations`: closed form
        for ``"linear"``, ``"erf"``, ``"relu"``, ``"step"``,
        ``"quadratic"`` (and sin/cos pairs), certified quadrature (1e-10)
        for the other smooth ones (module docstring).
    C : array_like, shape (..., 2, 2)
        Covariances: finite, symmetric, positive semi-definite.
    n_threads : int, optional
        OpenMP threads (None: the OpenMP default).
    device : {"cpu", "cuda"}, default "cpu"
        Where to compute: ``"cuda"`` runs one GPU thread per covariance
        (the same formulas; :class:`twolayer.DeviceUnavailable` without a
        CUDA build or GPU).

    mean : array_like, shape (..., 2), optional
        Means mu of the pre-activations, lambda ~ N(mu, C) (the biases;
        None or all zeros: the zero-mean kernel, bitwise). Nonzero means run
        on the CPU (see the module docstring for the method and accuracy).

    Returns
    -------
    float or ndarray, shape (...)
        One value per covariance.

    Examples
    --------
    Step units: (pi - theta) / (2 pi) with cos(theta) = C12 / sqrt(C11 C22).

    >>> C = np.array([[1.0, 0.5], [0.5, 1.0]])
    >>> print(f"{tl.kernels.i2('step', 'step', C):.6f}")
    0.333333
    >>> tl.kernels.i2("relu", "erf", np.stack([C, C])).shape
    (2,)
    """
    return _batched(
        _core.i2, C, 2, n_threads, device, check_activation(act_a, "act_a"), check_activation(act_b, "act_b"),
        mean=mean,
    )


def i3(
    act: ActivationName,
    act_b: ActivationName,
    C: ArrayLike,
    n_threads: int | None = None,
    device: Device = "cpu",
    mean: ArrayLike | None = None,
) -> Any:
    """E[s'(l1) l2 b(l3)] for (l1, l2, l3) ~ N(0, C).

    The first-order term of the ODE (see the documentation's Conventions
    page); from I2 by Stein's lemma, so it exists for every pair.

    Parameters
    ----------
    act : str
        Activation s whose derivative is taken.
    act_b : str
        Activation b.
    C : array_like, shape (..., 3, 3)
        Covariances: finite, symmetric, positive semi-definite.
    n_threads : int, optional
        OpenMP threads (None: the OpenMP default).
    device : {"cpu", "cuda"}, default "cpu"
        Where to compute: ``"cuda"`` runs one GPU thread per covariance
        (the same formulas; :class:`twolayer.DeviceUnavailable` without a
        CUDA build or GPU).

    mean : array_like, shape (..., 3), optional
        Means mu of the pre-activations, lambda ~ N(mu, C) (the biases;
        None or all zeros: the zero-mean kernel, bitwise). Nonzero means run
        on the CPU (see the module docstring for the method and accuracy).

    Returns
    -------
    float or ndarray, shape (...)
        One value per covariance.

    Examples
    --------
    >>> C = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.3], [0.2, 0.3, 1.0]])
    >>> print(f"{tl.kernels.i3('erf', 'erf', C):.6f}")
    0.079978
    """
    return _batched(
        _core.i3, C, 3, n_threads, device, check_activation(act, "act"), check_activation(act_b, "act_b"), mean=mean
    )


def j2(
    act: ActivationName,
    C: ArrayLike,
    n_threads: int | None = None,
    device: Device = "cpu",
    mean: ArrayLike | None = None,
) -> Any:
    """E[s'(l1) s'(l2)] for (l1, l2) ~ N(0, C): the label-noise term of the ODE.

    Parameters
    ----------
    act : str
        Activation s.
    C : array_like, shape (..., 2, 2)
        Covariances: finite, symmetric, positive semi-definite.
    n_threads : int, optional
        OpenMP threads (None: the OpenMP default).
    device : {"cpu", "cuda"}, default "cpu"
        Where to compute: ``"cuda"`` runs one GPU thread per covariance
        (the same formulas; :class:`twolayer.DeviceUnavailable` without a
        CUDA build or GPU).

    mean : array_like, shape (..., 2), optional
        Means mu of the pre-activations, lambda ~ N(mu, C) (the biases;
        None or all zeros: the zero-mean kernel, bitwise). Nonzero means run
        on the CPU (see the module docstring for the method and accuracy).

    Returns
    -------
    float or ndarray, shape (...)
        One value per covariance.

    Examples
    --------
    erf: (2 / pi) (1 + C11 + C22 + C11 C22 - C12^2)^(-1/2).

    >>> C = np.array([[1.0, 0.5], [0.5, 1.0]])
    >>> print(f"{tl.kernels.j2('erf', C):.6f}")
    0.328749
    """
    return _batched(_core.j2, C, 2, n_threads, device, check_activation(act, "act"), mean=mean)


def i4(
    act: ActivationName,
    act_a: ActivationName,
    act_b: ActivationName,
    C: ArrayLike,
    n_threads: int | None = None,
    device: Device = "cpu",
    mean: ArrayLike | None = None,
) -> Any:
    """E[s'(l1) s'(l2) a(l3) b(l4)] for l ~ N(0, C): the eta^2 term of the ODE.

    Closed form for ``linear``, ``quadratic``, ``erf`` and ``step`` units s
    with any (a, b); for ``relu`` units, (relu, relu) by Price interpolation
    (one-dimensional quadrature, ~1e-13 relative) and (linear, relu),
    (linear, linear) in closed form, other relu pairs by orthant moments
    (CPU only: with ``device="cuda"`` they raise
    :class:`twolayer.DeviceUnavailable`).

    Parameters
    ----------
    act : str
        Activation s whose derivative is taken (twice).
    act_a, act_b : str
        Activations a and b.
    C : array_like, shape (..., 4, 4)
        Covariances: finite, symmetric, positive semi-definite.
    n_threads : int, optional
        OpenMP threads (None: the OpenMP default).
    device : {"cpu", "cuda"}, default "cpu"
        Where to compute: ``"cuda"`` runs one GPU thread per covariance
        (the same formulas; :class:`twolayer.DeviceUnavailable` without a
        CUDA build or GPU).

    mean : array_like, shape (..., 4), optional
        Means mu of the pre-activations, lambda ~ N(mu, C) (the biases;
        None or all zeros: the zero-mean kernel, bitwise). Nonzero means run
        on the CPU (see the module docstring for the method and accuracy).

    Returns
    -------
    float or ndarray, shape (...)
        One value per covariance.

    Examples
    --------
    For linear units it is C34:

    >>> C = np.eye(4) + 0.25 * (np.ones((4, 4)) - np.eye(4))
    >>> float(tl.kernels.i4("linear", "linear", "linear", C))
    0.25
    >>> print(f"{tl.kernels.i4('erf', 'erf', 'erf', C):.6f}")
    0.020459
    """
    return _batched(
        _core.i4,
        C,
        4,
        n_threads,
        device,
        check_activation(act, "act"),
        check_activation(act_a, "act_a"),
        check_activation(act_b, "act_b"),
        mean=mean,
    )


def covariance(*rows: ArrayLike, scale: float = 1.0) -> NDArray[np.float64]:
    """The covariance of the pre-activations w_k . x / sqrt(scale).

    For x ~ N(0, I) this is the Gram matrix of the weight vectors over
    ``scale``.

    Parameters
    ----------
    *rows : array_like, shape (d,)
        One or more weight vectors of equal length.
    scale : float, default 1.0
        s in lambda = w . x / sqrt(s) (> 0): d for the ``"sqrt_d"`` scaling.

    Returns
    -------
    ndarray, shape (n, n)
        W W^T / scale for the n rows.

    Examples
    --------
    >>> tl.kernels.covariance([1.0, 0.0, 1.0], [0.0, 2.0, 0.0], scale=2.0)
    array([[1., 0.],
           [0., 2.]])
    """
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
