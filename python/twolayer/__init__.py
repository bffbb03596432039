"""twolayer: learning dynamics of two-layer neural networks in the teacher-student setting.

Layers (see DESIGN.md): Gaussian angle kernels (:mod:`twolayer.kernels`), population quantities
(:mod:`twolayer.population`) and, built on them, order-parameter dynamics and weight-space simulations.
"""

from __future__ import annotations

from typing import Any

from . import _core, activations, kernels, landscape, networks, ode, population, scan, sgd
from ._interrupt import Interrupted
from .networks import Network
from .overlaps import BatchOverlaps, Overlaps
from .results import BatchTrajectory, Trajectory

__version__: str = _core.build_info()["version"]


def build_info() -> dict[str, Any]:
    """Version, OpenMP on/off, OpenMP's default thread count, the thread cap of one call and CUDA on/off of the
    compiled core."""
    return dict(_core.build_info())


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
    "scan",
    "sgd",
]
