"""The right-hand side of the ODE at one state: :func:`rhs`."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import _core
from .._overlap_args import check_overlaps, resolve_activations, resolve_target
from .._validation import boolean, n_threads_arg, positive
from ..activations import ActivationName
from ..overlaps import Overlaps
from ._bias import bias_kwargs
from ._solver import Readout, Regime, check_choices
from ._target import rhs_target

# |overlaps| above which rhs() refuses to evaluate (the kernels' range; integrate() stops far earlier, at the
# divergence rule's bound: docs/conventions.rst, "Divergence").
_OVERFLOW = 1e100


def rhs(
    overlaps: Overlaps,
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    lr_readout: float = 0.0,
    noise: float = 0.0,
    regime: Regime = "online",
    spherical: bool = False,
    readout: Readout = "sum",
    n_threads: int | None = None,
    target: Any = None,
    lr_bias: float = 0.0,
) -> tuple[NDArray[np.float64], ...]:
    """The right-hand side of the ODE at ``overlaps``.

    Same conventions and arguments as :func:`integrate` (activations from
    the overlaps when ``activation`` is not given). Overlaps above 1e100 in
    magnitude (beyond the kernels' range; :func:`integrate` stops a run long
    before, at 1e8 times the scale of its start), or a right-hand side beyond
    the double range, raise ValueError.

    Parameters
    ----------
    overlaps : Overlaps
        Where to evaluate.
    activation, teacher_activation : str, optional
        As in :func:`integrate`.
    lr, lr_readout, noise : float
        Learning rates and label-noise variance.
    regime : {"online", "gradient_flow"}
        As in :func:`integrate`.
    spherical : bool, default False
        Projected SGD.
    readout : {"sum", "mean"}
        The readout factor of the trained second layer.
    n_threads : int, optional
        Threads: the committee's kernels at K >= 8, the smooth units' online
        lattices (their first variable's nodes at K + M <= 4, the lattices
        over subsets of the fields at K + M > 4), a target's tuples of student
        fields (default None: the OpenMP default). The result is bitwise the
        same on any number of threads.
    target : HermiteTarget, optional
        A polynomial target of :mod:`twolayer.targets` instead of the
        committee teacher (default: the one ``Overlaps.from_networks(student,
        target)`` remembers). Then M is (K, k), P = I_k, v = 0, the error is
        E = f(z) - sum_j a_j g(l_j), and every expectation with the target is
        exact (Gaussian conditioning on the student fields, closed-form
        orthant moments); ``teacher_activation`` is unused. A
        :class:`~twolayer.targets.FunctionTarget` has no ODE (TypeError).
    lr_bias : float, default 0.0
        Learning rate of the student's biases (as in :func:`integrate`).

    Returns
    -------
    dQ, dM, da : ndarray
        Shapes (K, K), (K, M), (K,); with biases (a nonzero ``bias`` or
        ``teacher_bias`` of the overlaps, or ``lr_bias > 0``) a fourth entry
        db, shape (K,).

    Examples
    --------
    Gradient flow is the online ODE without the eta^2 terms, so the two
    differ in dQ only:

    >>> ov = tl.ode.plateau_overlaps()
    >>> dQ, dM, da = tl.ode.rhs(ov, "erf", lr=1.0)
    >>> dQg, dMg, dag = tl.ode.rhs(ov, "erf", lr=1.0, regime="gradient_flow")
    >>> bool(np.allclose(dM, dMg)), bool(np.allclose(dQ, dQg))
    (True, False)
    """
    tgt = resolve_target(target, overlaps)
    if tgt is not None:
        return rhs_target(overlaps, activation, tgt, lr=lr, lr_readout=lr_readout, noise=noise, regime=regime,
                          spherical=spherical, readout=readout, lr_bias=lr_bias, n_threads=n_threads_arg(n_threads))
    act, t_act = resolve_activations(activation, teacher_activation, overlaps)
    reg, _, ro = check_choices(act, regime, "adaptive", readout)
    spherical = boolean(spherical, "spherical")
    ov = check_overlaps(overlaps, spherical=spherical)
    for name in ("Q", "M", "a", "P", "v", "bias", "teacher_bias"):
        big = float(np.max(np.abs(getattr(ov, name)), initial=0.0))
        if big > _OVERFLOW:
            raise ValueError(f"overlaps: {name} out of range (max |{name}| = {big:.3g} > {_OVERFLOW:.0e}, beyond the "
                             "kernels' range)")
    c = 1.0 if ro == "sum" else 1.0 / ov.K
    out = _core.ode_rhs(
        ov.Q,
        ov.M,
        ov.a,
        ov.P,
        ov.v,
        act,
        t_act,
        reg,
        bool(spherical),
        positive(lr, "lr", allow_zero=True),
        positive(lr_readout, "lr_readout", allow_zero=True) * c * c,
        positive(noise, "noise", allow_zero=True),
        n_threads=n_threads_arg(n_threads),
        **bias_kwargs(ov, lr_bias),
    )
    if not all(np.all(np.isfinite(x)) for x in out):
        raise ValueError("overlaps: out of range: the right-hand side exceeds the double range")
    return tuple(out)
