"""Groups: the configurations of a scan that one engine call computes together (equal shapes and shared
settings, see :meth:`Engine.group_key`), cut into chunks of at most ``group_size``; each group is one unit of
work, one stored chunk and one unit of resumption. The grouping depends only on the scan definition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .engines import _hashable
from .spec import Scan

__all__ = ["Group", "make_groups"]


@dataclass(frozen=True)
class Group:
    """Group ``gid``: the flat indices (C order over the scan's dimensions) and the full configurations (defaults
    filled in) of its members.

    Attributes
    ----------
    gid : int
        The group's id (its order of first configuration).
    indices : list of int
        Flat configuration indices.
    configs : list of dict
        Full configurations.

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> g = tl.scan.make_groups(sc)[0]
    >>> g.name, g.indices, g.configs[1]["lr"]
    ('g0000000', [0, 1], 1.0)
    """

    gid: int
    indices: list[int]
    configs: list[dict[str, Any]]

    @property
    def name(self) -> str:
        """The group's name in the store (``g`` and seven digits)."""
        return f"g{self.gid:07d}"


def make_groups(scan: Scan) -> list[Group]:
    """The groups of ``scan``, in the order of their first configuration.

    Parameters
    ----------
    scan : Scan
        The definition.

    Returns
    -------
    list of Group

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> groups = tl.scan.make_groups(sc)
    >>> len(groups), groups[0].indices
    (1, [0, 1])
    """
    eng = scan.resolved_engine
    size = scan.resolved_group_size
    defaults = eng.complete({})
    n = len(scan)
    # every configuration has the same parameter names, and only scanned ones can differ between configurations:
    # the group key of a configuration is fixed by its positions along the dimensions holding such parameters
    names = set(eng.group_names({**defaults, **scan.configs_at([0])[0]})) & set(scan.coords)
    code = np.zeros(n, dtype=np.int64)
    if names:
        sizes = tuple(scan.dims.values())
        positions = np.unravel_index(np.arange(n, dtype=np.int64), sizes)
        for d, (dim, length) in enumerate(scan.dims.items()):
            keyed = [k for k in sorted(names) if scan.coords[k][0] == dim]
            if not keyed:
                continue
            # equal values at two positions give one code (a zip may repeat a shape)
            values = [tuple(_hashable(scan.coords[k][1][i]) for k in keyed) for i in range(length)]
            first: dict[tuple[Any, ...], int] = {}
            dim_code = np.array([first.setdefault(v, len(first)) for v in values], dtype=np.int64)
            code = code * len(first) + dim_code[positions[d]]
    order = np.argsort(code, kind="stable")  # each key's members in increasing flat index
    bounds = np.flatnonzero(np.diff(code[order])) + 1
    chunks = [members[s:s + size] for members in np.split(order, bounds) for s in range(0, len(members), size)]
    chunks.sort(key=lambda c: int(c[0]))
    return [Group(g, c.tolist(), scan.configs_at(c, defaults)) for g, c in enumerate(chunks)]
