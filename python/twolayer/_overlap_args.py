"""The arguments shared by the overlap-space engines (:mod:`twolayer.ode`, :mod:`twolayer.sde`,
:mod:`twolayer.large_batch`), checked: the overlaps, the activations they remember and a polynomial target of
:mod:`twolayer.targets`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ._validation import positive
from .activations import ACTIVATIONS, check_activation
from .networks import Network
from .overlaps import Overlaps, check_stack
from .targets import FunctionTarget, HermiteTarget


def bias_kwargs(ov: Overlaps, lr_bias: float) -> dict[str, Any]:
    """The core's bias arguments of a run from ``ov`` (empty for a run without biases: zero biases and
    ``lr_bias = 0``; ``ode._bias`` states the equations)."""
    lr_b = positive(lr_bias, "lr_bias", allow_zero=True)
    if not (ov.has_bias or lr_b > 0):
        return {}
    return {"bias": ov.bias, "teacher_bias": ov.teacher_bias, "lr_bias": lr_b}


def check_overlaps(ov: Any, name: str = "overlaps", spherical: bool = False) -> Overlaps:
    """``ov``, checked to be an :class:`~twolayer.Overlaps` the core can start from (and on the sphere when
    ``spherical``; biases are the caller's: every engine takes them); errors name it ``name``."""
    if not isinstance(ov, Overlaps):
        raise TypeError(f"{name}: expected a twolayer.Overlaps, got {type(ov).__name__}")
    # Overlaps validates on construction; its arrays are mutable, so re-check what the C++ core relies on.
    check_stack(ov.Q[None], ov.M[None], ov.P[None], ov.a[None], ov.v[None], lambda b, field: f"{name}: {field}",
                ov.integration_tol)
    check_spherical(ov.Q[None], spherical, lambda b, field: name)
    return ov


def check_spherical(Q: NDArray[np.float64], spherical: bool, label: Callable[[int, str], str]) -> None:
    """spherical=True needs diag(Q) = 1 for every member of the stack Q (B, K, K)."""
    if not spherical:
        return
    bad = ~np.all(np.abs(np.diagonal(Q, axis1=1, axis2=2) - 1.0) <= 1e-10, axis=1)
    if bad.any():
        raise ValueError(f"{label(int(np.argmax(bad)), 'Q')}: spherical=True needs diag(Q) = 1 (weights on the sphere "
                         "|w|^2 = d)")


def resolve_activations(activation: Any, teacher_activation: Any, overlaps: Any) -> tuple[str, str]:
    """The (student, teacher) activations: the caller's (the teacher's defaulting to the student's, as before),
    or, when the caller gives no ``activation``, the ones the overlaps remember (``Overlaps.from_networks``)."""
    if activation is None:
        activation = getattr(overlaps, "activation", None)
        if teacher_activation is None:
            teacher_activation = getattr(overlaps, "teacher_activation", None)
        if activation is None:
            raise TypeError(
                f"activation: required (one of {', '.join(map(repr, ACTIVATIONS))}): the overlaps do not "
                "remember the activations of the networks they describe (only Overlaps.from_networks records them)")
    act = check_activation(activation, "activation")
    t_act = check_activation(teacher_activation if teacher_activation is not None else act, "teacher_activation")
    return act, t_act


def resolve_target(target: Any, overlaps: Any) -> Any:
    """The polynomial target of a call: ``target``, else the one the overlaps remember, else None; TypeError
    for targets without an ODE."""
    tgt = target if target is not None else getattr(overlaps, "target", None)
    if tgt is None or isinstance(tgt, HermiteTarget):
        return tgt
    if isinstance(tgt, FunctionTarget):
        raise TypeError("target: a FunctionTarget (a Python function of the projections) has no order-parameter "
                        "ODE: its expectations are not known in closed form; use sgd.simulate, or write the target "
                        "as a polynomial (targets.hermite)")
    if isinstance(tgt, Network):
        raise TypeError("target: a committee Network is the ODE's ordinary teacher: pass its overlaps "
                        "(Overlaps.from_networks(student, teacher)) without target=")
    raise TypeError(f"target: expected a twolayer.targets.HermiteTarget, got {type(tgt).__name__}")


def check_target_overlaps(overlaps: Any, activation: Any, tgt: Any, spherical: bool) -> tuple[Overlaps, str]:
    """The checked overlaps (M (K, k), P = I_k, v = 0) and the student activation of a target run (student biases
    allowed; a target has no teacher biases)."""
    ov = check_overlaps(overlaps, spherical=spherical)
    if np.any(ov.teacher_bias != 0.0):
        raise ValueError(f"overlaps: a polynomial target has no teacher biases, got teacher_bias {ov.teacher_bias}")
    act = activation if activation is not None else ov.activation
    if act is None:
        raise TypeError("activation: required (the overlaps do not remember the student's activation)")
    act = check_activation(act, "activation")
    if ov.M.shape != (ov.K, tgt.k):
        raise ValueError(f"overlaps: M must be (K, k) = ({ov.K}, {tgt.k}) for a target of k = {tgt.k} directions, "
                         f"got {ov.M.shape}")
    if not np.allclose(ov.P, np.eye(tgt.k), rtol=0.0, atol=1e-10):
        raise ValueError("overlaps: P must be the identity I_k with a target (orthonormal directions)")
    return ov, act
