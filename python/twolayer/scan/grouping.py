"""Groups: the configurations of a scan that one engine call computes together (equal shapes and shared
settings, see :meth:`Engine.group_key`), cut into chunks of at most ``group_size``; each group is one unit of
work, one stored chunk and one unit of resumption. The grouping depends only on the scan definition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .engines import engine_for
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
    eng = engine_for(scan.engine)
    size = scan.resolved_group_size
    keyed: dict[tuple[Any, ...], list[tuple[int, dict[str, Any]]]] = {}
    defaults = eng.complete({})
    # every configuration has the same parameter names, and only scanned ones can differ between configurations
    names = tuple(n for n in eng.group_names({**defaults, **next(scan.configs())}) if n in scan.coords)
    for i, cfg in enumerate(scan.configs()):
        full = {**defaults, **cfg}
        keyed.setdefault(eng.group_key(full, names), []).append((i, full))
    chunks = [members[s:s + size] for members in keyed.values() for s in range(0, len(members), size)]
    chunks.sort(key=lambda c: c[0][0])
    return [Group(g, [i for i, _ in c], [cfg for _, cfg in c]) for g, c in enumerate(chunks)]
