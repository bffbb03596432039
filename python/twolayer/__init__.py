"""twolayer: learning dynamics of two-layer neural networks in the teacher-student setting.

Layers (see the documentation's home and Conventions pages): Gaussian angle kernels (:mod:`twolayer.kernels`),
population quantities (:mod:`twolayer.population`) and, built on them, order-parameter dynamics and weight-space
simulations.
"""

from __future__ import annotations

from typing import Any

from . import (
    _core,
    _dispatch,
    _elf,
    activations,
    dmft,
    full_batch,
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
from ._core import DeviceUnavailable
from ._interrupt import Interrupted
from .networks import Network
from .overlaps import BatchOverlaps, Overlaps
from .results import BatchTrajectory, Ensemble, Status, Trajectory

__version__: str = _core.build_info()["version"]


def build_info() -> dict[str, Any]:
    """How the compiled core was built.

    Returns
    -------
    dict
        ``version``, ``simd_level`` (the instruction level in use),
        ``simd_levels`` (those compiled in), ``simd_supported`` (those this
        CPU runs), ``compiler`` and ``flags``, ``openmp`` (on/off),
        ``max_threads`` (OpenMP's default thread count), ``thread_limit``
        (the thread cap of one call), ``cuda`` (on/off) and ``libstdcxx_static``
        (whether the loaded core has its C++ runtime linked in, as with
        ``-static-libstdc++``, rather than the shared library; None where
        this cannot be read: not an ELF file).
        ``TWOLAYER_SIMD`` forces the level.

    Examples
    --------
    >>> info = tl.build_info()
    >>> info["version"] == tl.__version__
    True
    >>> info["simd_level"] in info["simd_levels"]
    True
    """
    info = dict(_core.build_info())
    info["libstdcxx_static"] = _elf.cxx_runtime_static(_core.__file__)
    info["simd_levels"] = list(_dispatch.compiled())
    info["simd_supported"] = [lvl for lvl in _dispatch.supported() if lvl != "native"]
    return info


__all__ = [
    "BatchOverlaps",
    "BatchTrajectory",
    "DeviceUnavailable",
    "Ensemble",
    "Interrupted",
    "Network",
    "Overlaps",
    "Status",
    "Trajectory",
    "activations",
    "build_info",
    "dmft",
    "full_batch",
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
