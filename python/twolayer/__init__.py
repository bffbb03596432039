"""twolayer: learning dynamics of two-layer neural networks in the teacher-student setting.

Layers (see the documentation's home and Conventions pages): Gaussian angle kernels (:mod:`twolayer.kernels`),
population quantities (:mod:`twolayer.population`) and, built on them, order-parameter dynamics and weight-space
simulations.
"""

from __future__ import annotations

from typing import Any

from . import (
    _core,
    activations,
    kernels,
    landscape,
    large_batch,
    networks,
    ode,
    passage,
    population,
    scan,
    schedules,
    sde,
    sgd,
    targets,
    theory,
)
from ._interrupt import Interrupted
from .networks import Network
from .overlaps import BatchOverlaps, Overlaps
from .results import BatchTrajectory, Trajectory

__version__: str = _core.build_info()["version"]


def build_info() -> dict[str, Any]:
    """How the compiled core was built.

    Returns
    -------
    dict
        ``version``, ``openmp`` (on/off), ``max_threads`` (OpenMP's default
        thread count), ``thread_limit`` (the thread cap of one call),
        ``cuda`` (on/off), and whatever else the core reports.

    Examples
    --------
    >>> info = tl.build_info()
    >>> info["version"] == tl.__version__
    True
    """
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
    "large_batch",
    "networks",
    "ode",
    "passage",
    "population",
    "scan",
    "schedules",
    "sde",
    "sgd",
    "targets",
    "theory",
]
