"""twolayer: learning dynamics of two-layer neural networks in the teacher-student setting.

Layers (see DESIGN.md): Gaussian angle kernels (:mod:`twolayer.kernels`), population quantities
(:mod:`twolayer.population`) and, built on them, order-parameter dynamics and weight-space simulations.
"""

from __future__ import annotations

from typing import Any

from . import _core, activations, kernels, landscape, networks, ode, population, sgd
from ._interrupt import Interrupted
from .networks import Network
from .overlaps import BatchOverlaps, Overlaps
from .results import BatchTrajectory, Trajectory

__version__: str = _core.build_info()["version"]


def build_info() -> dict[str, Any]:
    """The compiled core's build: version, ``simd_level`` (the instruction level in use), ``simd_levels`` (those
    compiled in), ``simd_supported`` (those this CPU runs), ``compiler`` and ``flags``, OpenMP on/off, OpenMP's
    default thread count, the thread cap of one call and CUDA on/off. ``TWOLAYER_SIMD`` forces the level."""
    from . import _dispatch

    info = dict(_core.build_info())
    info["simd_levels"] = list(_dispatch.compiled())
    info["simd_supported"] = [lvl for lvl in _dispatch.supported() if lvl != "native"]
    return info


__all__ = [
    "BatchOverlaps",
    "BatchTrajectory",
    "Interrupted",
    "Network",
    "Overlaps",
    "Trajectory",
    "activations",
    "build_info",
    "kernels",
    "landscape",
    "networks",
    "ode",
    "population",
    "sgd",
]
