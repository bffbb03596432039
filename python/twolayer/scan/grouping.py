"""Groups: the configurations of a scan that one engine call computes together, as rectangular blocks of the grid.

The grid (one dimension per axis or zip, C order) is cut into blocks of one shape, :func:`block_shape`: length 1
along every dimension that holds a parameter which must agree inside one engine call (:meth:`Engine.group_names`,
e.g. ``K`` or ``t_max`` of the ODE), and, from the last dimension to the first, as long as the block holds at
most ``group_size`` configurations. Each block (the last ones along a dimension may be shorter) is one group: one
unit of work, one chunk of every stored array (:mod:`~twolayer.scan.store`) and one unit of resumption. The
grouping depends only on the scan definition."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any, overload

import numpy as np

from .spec import Scan

__all__ = ["BlockConfigs", "Group", "block_shape", "group_regions", "make_groups", "region_indices"]


@dataclass(frozen=True)
class Group:
    """Group ``gid``: a block ``region`` of the grid of ``scan``; the flat indices (C order over the scan's
    dimensions) and the full configurations (defaults filled in) of its members are derived when asked for, so
    that the groups of a large scan hold no configurations.

    Attributes
    ----------
    gid : int
        The group's id (the C-order index of its block).
    region : tuple of slice
        Its block of the grid, one slice per dimension.
    scan : Scan
        The definition.

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> g = tl.scan.make_groups(sc)[0]
    >>> g.name, g.indices, g.configs[1]["lr"]
    ('g0000000', [0, 1], 1.0)
    """

    gid: int
    region: tuple[slice, ...]
    scan: Scan = field(repr=False, compare=False)

    @property
    def indices(self) -> list[int]:
        """Flat configuration indices (C order inside the block)."""
        return region_indices(self.region, tuple(self.scan.dims.values()))

    @property
    def configs(self) -> BlockConfigs:
        """The full configurations of its members (the engine's defaults, the constants, the axis values), in C
        order: a sequence built on demand, small to send to a worker."""
        return BlockConfigs(self.scan, self.region)

    @property
    def name(self) -> str:
        """The group's name in the store (``g`` and seven digits)."""
        return f"g{self.gid:07d}"


class BlockConfigs(Sequence[dict[str, Any]]):
    """The configurations of a block of a scan's grid, built on demand from the block's part of every axis: equal
    to ``scan.configs_at(indices, defaults)``, but what it holds (and pickles) is the size of the axes, not of the
    block.

    Parameters
    ----------
    scan : Scan
        The definition.
    region : tuple of slice
        The block, one slice per dimension.

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"t_max": 10.0}, axes={"lr": [0.5, 1.0], "seed": [0, 1, 2]})
    >>> cf = tl.scan.grouping.BlockConfigs(sc, (slice(1, 2), slice(0, 3)))
    >>> len(cf), [(c["lr"], c["seed"]) for c in cf] == [(c["lr"], c["seed"]) for c in sc.configs_at([3, 4, 5])]
    (3, True)
    """

    def __init__(self, scan: Scan, region: tuple[slice, ...]) -> None:
        self.start = {**scan.resolved_engine.complete({}), **scan.constants}
        dims = [{name: vals} for name, vals in scan.axes.items()] + [dict(cols) for cols in scan.zip.values()]
        # each dimension's part of the block, per parameter: a NumPy array where it holds the values exactly
        # (a Dask scheduler keeps the recent tasks it sent: a dict per value cost ~250 kB per 1000 values)
        self.columns = [{name: compact(list(vals[r])) for name, vals in cols.items()}
                        for cols, r in zip(dims, region, strict=True)]
        self.shape = tuple(len(next(iter(c.values()))) for c in self.columns)

    def __len__(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def _config(self, pos: Iterable[int]) -> dict[str, Any]:
        cfg = self.start.copy()
        for cols, p in zip(self.columns, pos, strict=True):
            for name, vals in cols.items():
                cfg[name] = vals[p].item() if isinstance(vals, np.ndarray) else vals[p]  # (Python types)
        return cfg

    def __iter__(self) -> Iterator[dict[str, Any]]:
        # each dimension's values as Python objects once (a NumPy scalar's .item() per configuration cost ~2 us)
        steps = [[dict(zip(cols, vals, strict=True))
                  for vals in zip(*(v.tolist() if isinstance(v, np.ndarray) else v for v in cols.values()),
                                  strict=True)]
                 for cols in self.columns]
        for updates in product(*steps):
            cfg = self.start.copy()
            for u in updates:
                cfg.update(u)
            yield cfg

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"configuration {i} of a block of {n}")
        pos = np.unravel_index(i % n, self.shape) if self.shape else ()
        return self._config(int(p) for p in pos)


def compact(values: list[Any]) -> Any:
    """``values`` as a ``range`` when they are ints in arithmetic progression (e.g. seeds), else as a 1-D NumPy
    array when it gives them back exactly (same values, same Python types: ints, floats, bools, strings), else the
    list itself."""
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):
        return values
    if arr.ndim != 1 or arr.dtype.kind not in "iufbU":
        return values
    back = arr.tolist()
    if back != values or any(type(a) is not type(b) for a, b in zip(back, values, strict=True)):
        return values
    if arr.dtype.kind == "i" and arr.size > 1 and np.all(np.diff(arr) == arr[1] - arr[0]) and arr[1] != arr[0]:
        return range(back[0], back[-1] + (back[1] - back[0]), back[1] - back[0])
    return arr


def block_shape(scan: Scan) -> tuple[int, ...]:
    """The shape of a group's block of the grid (one length per dimension of ``scan.dims``).

    Parameters
    ----------
    scan : Scan
        The definition.

    Returns
    -------
    tuple of int

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "n_records": 3},
    ...                   axes={"t_max": [1.0, 2.0], "lr": [0.5, 1.0, 2.0]}, group_size=2)
    >>> tl.scan.grouping.block_shape(sc)  # t_max must agree inside one core call
    (1, 2)
    """
    eng = scan.resolved_engine
    size = scan.resolved_group_size
    names = set(eng.group_names({**eng.complete({}), **scan.configs_at([0])[0]})) & set(scan.coords)
    keyed = {scan.coords[k][0] for k in names}
    shape: list[int] = []
    room = size
    for dim, length in reversed(scan.dims.items()):
        n = 1 if dim in keyed else max(1, min(length, room))
        room = max(1, room // n)
        shape.append(n)
    return tuple(reversed(shape))


def group_regions(scan: Scan) -> list[tuple[slice, ...]]:
    """The block of every group, in the order of their ids: one slice per dimension of ``scan.dims``.

    Parameters
    ----------
    scan : Scan
        The definition.

    Returns
    -------
    list of tuple of slice

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0, 2.0]}, group_size=2)
    >>> tl.scan.grouping.group_regions(sc)
    [(slice(0, 2, None),), (slice(2, 3, None),)]
    """
    sizes = tuple(scan.dims.values())
    block = block_shape(scan)
    starts = [range(0, n, b) for n, b in zip(sizes, block, strict=True)]
    return [tuple(slice(s, min(s + b, n)) for s, b, n in zip(corner, block, sizes, strict=True))
            for corner in product(*starts)]


def region_indices(region: tuple[slice, ...], sizes: tuple[int, ...]) -> list[int]:
    """The flat (C order) indices of the configurations in a block ``region`` of a grid of ``sizes``.

    Parameters
    ----------
    region : tuple of slice
        The block, one slice per dimension.
    sizes : tuple of int
        The grid's shape.

    Returns
    -------
    list of int

    Examples
    --------
    >>> tl.scan.grouping.region_indices((slice(1, 3), slice(0, 2)), (3, 4))
    [4, 5, 8, 9]
    """
    if not sizes:
        return [0]
    axes = np.meshgrid(*(np.arange(s.start, s.stop) for s in region), indexing="ij")
    return np.ravel_multi_index(tuple(a.ravel() for a in axes), sizes).tolist()


def make_groups(scan: Scan) -> list[Group]:
    """The groups of ``scan``, in the C order of their blocks (:func:`block_shape`).

    Parameters
    ----------
    scan : Scan
        The definition.

    Returns
    -------
    list of Group

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> groups = tl.scan.make_groups(sc)
    >>> len(groups), groups[0].indices
    (1, [0, 1])
    """
    return [Group(gid, region, scan) for gid, region in enumerate(group_regions(scan))]
