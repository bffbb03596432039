"""The scan store: a Zarr (v3) directory written group by group, and the assembly of groups into one
``xarray.Dataset``.

Layout::

    scan.zarr/                  attrs: scan_hash, scan_definition (JSON), engine, n_configs, n_groups,
                                twolayer_version
    scan.zarr/groups/g0000007/  one group: ``_index`` (its flat configuration indices), ``float64`` and
                                ``int64`` (its results, configuration first, raveled: see :func:`write_group`);
                                attrs ``variables`` and ``complete = true``, written last

A group is complete when its ``complete`` attribute is set: it is written after every array of the group, so a
process killed while writing (even by SIGKILL) leaves an incomplete group, which is recomputed and overwritten on
resumption. Workers write their own groups (each its own Zarr group: no two writers share a chunk), so the client
never holds the results. Arrays are stored as they are (float64, uncompressed: trajectories of doubles barely
compress, and Zstandard tripled the write time of a group), so a dataset read back is bitwise the one computed.
Strings (status, message) keep their values, not their fixed width: a dataset read back has the width of its
longest string.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .engines import Part, fill_value, recorded_engine
from .spec import Scan

__all__ = ["Assembly", "assemble", "complete_groups", "open_dataset", "prepare", "read_group", "write_group"]

_FORMAT = "twolayer-scan/1"


def _zarr() -> Any:
    try:
        import zarr
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("store: a scan store needs zarr >= 3 (Python >= 3.11): pip install 'twolayer[scan]'") \
            from exc
    if int(zarr.__version__.split(".")[0]) < 3:  # pragma: no cover - depends on the environment
        raise ImportError(f"store: a scan store needs zarr >= 3 (Python >= 3.11), found zarr {zarr.__version__}")
    return zarr


def _version() -> str:
    from .. import __version__

    return __version__


def prepare(store: str | Path, scan: Scan, n_groups: int, resume: bool, allow_version_change: bool = False) \
        -> set[int]:
    """Create the store for ``scan``, or check an existing one: a store of another definition raises ValueError;
    one holding finished groups needs ``resume`` (FileExistsError otherwise); one written by another version of
    twolayer raises ValueError naming both versions unless ``allow_version_change`` (results of two versions
    need not agree bit for bit: mixing them is the user's explicit choice, recorded in the store's
    ``twolayer_version``, e.g. ``"0.1.0, 0.2.0"``, and per group). Returns the finished group ids.

    Parameters
    ----------
    store : str or Path
        The Zarr directory.
    scan : Scan
        The definition (its hash is recorded).
    n_groups : int
        Number of groups of the scan.
    resume : bool
        Continue a store that already holds finished groups.
    allow_version_change : bool
        Continue a store written by another twolayer version.

    Returns
    -------
    set of int

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     first = tl.scan.store.prepare(f"{tmp}/s.zarr", sc, 1, resume=False)
    ...     again = tl.scan.store.prepare(f"{tmp}/s.zarr", sc, 1, resume=False)
    >>> first, again
    (set(), set())
    """
    zarr = _zarr()
    path = Path(store)
    digest = scan.digest()
    if path.exists():
        try:
            root = zarr.open_group(str(path), mode="r")
            attrs = dict(root.attrs)
        except Exception:
            raise ValueError(f"store: {path} exists and is not a scan store (not a Zarr group)") from None
        if attrs.get("format") != _FORMAT:
            raise ValueError(f"store: {path} exists and is not a twolayer scan store")
        if attrs.get("scan_hash") != digest:
            raise ValueError(f"store: {path} was written by a different scan definition (hash "
                             f"{str(attrs.get('scan_hash'))[:12]}..., this scan {digest[:12]}...): use another "
                             "store, or delete it to start over")
        done = complete_groups(path)
        if done and not resume:
            raise FileExistsError(f"store: {path} already holds {len(done)} of {n_groups} finished groups of this "
                                  "scan: pass resume=True (--resume) to compute only the missing ones, or delete it")
        versions = [v.strip() for v in str(attrs.get("twolayer_version", "")).split(",")]
        if _version() not in versions:
            if not done:  # nothing stored yet: nothing to mix
                versions = []
            elif not allow_version_change:
                raise ValueError(f"store: {path} was written by twolayer {', '.join(versions)}, this is twolayer "
                                 f"{_version()}: results of two versions need not agree bit for bit; pass "
                                 "allow_version_change=True (--allow-version-change) to complete it anyway, or "
                                 "use another store")
            zarr.open_group(str(path), mode="a").attrs["twolayer_version"] = ", ".join([*versions, _version()])
        return done
    root = zarr.open_group(str(path), mode="w")
    root.create_group("groups")
    root.attrs.update({"format": _FORMAT, "scan_hash": digest, "scan_definition": json.dumps(scan.to_dict()),
                       "engine": scan.engine_name, "n_configs": len(scan), "n_groups": n_groups,
                       "twolayer_version": _version()})
    return set()


def complete_groups(store: str | Path) -> set[int]:
    """The ids of the groups whose ``complete`` marker is written. Read from the group directories' metadata
    (``groups/g*/zarr.json``, which Zarr replaces atomically), not through Zarr's hierarchy listing, which trips
    over the temporary files of groups being written at the same moment by other workers.

    Parameters
    ----------
    store : str or Path
        The Zarr directory.

    Returns
    -------
    set of int

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     done = tl.scan.store.complete_groups(f"{tmp}/s.zarr")
    >>> done
    {0}
    """
    done = set()
    for meta in Path(store, "groups").glob("g*/zarr.json"):
        name = meta.parent.name
        if len(name) != 8 or not name[1:].isdigit():
            continue
        try:
            attrs = json.loads(meta.read_text()).get("attributes", {})
        except (OSError, ValueError):  # vanished or unreadable: not complete
            continue
        if attrs.get("complete") is True:
            done.add(int(name[1:]))
    return done


def write_group(store: str | Path, name: str, indices: list[int], part: Part) -> None:
    """Write one group's results (overwriting a partial earlier attempt), then its completion marker.

    A group is three one-chunk arrays: ``_index`` (its configurations), ``float64`` and ``int64`` (every result
    of that kind, raveled and concatenated; strings as int codes), described by the group attribute
    ``variables`` (name, role, dims, shape, dtype, offset, string categories). Zarr's cost is per array (~5-10 ms
    here), so a group of any number of variables costs three.

    Parameters
    ----------
    store : str or Path
        The Zarr directory (prepared by :func:`prepare`).
    name : str
        The group's name (``g`` and seven digits).
    indices : list of int
        Its flat configuration indices.
    part : Part
        Its results.

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> part = tl.scan.engines.Part({"loss": ((), np.array([1.5, 2.5]))})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.store.prepare(f"{tmp}/s.zarr", sc, 1, resume=False)
    ...     tl.scan.store.write_group(f"{tmp}/s.zarr", "g0000000", [0, 1], part)
    ...     index, back = tl.scan.store.read_group(f"{tmp}/s.zarr", 0)
    >>> index.tolist(), back.data["loss"][1].tolist()
    ([0, 1], [1.5, 2.5])
    """
    zarr = _zarr()
    variables: list[dict[str, Any]] = []
    blocks: dict[str, list[NDArray[Any]]] = {"float64": [], "int64": []}
    sizes = {"float64": 0, "int64": 0}
    for role, table in (("data", part.data), ("coord", part.coords)):
        for key, (dims, values) in table.items():
            arr = np.asarray(values)
            entry: dict[str, Any] = {"name": key, "role": role, "dims": list(dims), "shape": list(arr.shape),
                                     "dtype": arr.dtype.str}
            if arr.dtype.kind == "U":
                categories, codes = np.unique(arr, return_inverse=True)
                entry["categories"] = categories.tolist()
                arr = codes.reshape(arr.shape)
            elif arr.dtype.kind not in "biuf":
                raise TypeError(f"{key}: cannot store values of dtype {arr.dtype}")
            kind = "float64" if arr.dtype.kind == "f" else "int64"
            flat = np.ascontiguousarray(arr, dtype=kind).ravel()
            entry["block"], entry["offset"] = kind, sizes[kind]
            blocks[kind].append(flat)
            sizes[kind] += flat.size
            variables.append(entry)
    grp = zarr.open_group(str(store), path=f"groups/{name}", mode="w")
    for kind, arrays in (("_index", [np.asarray(indices, dtype=np.int64)]), *blocks.items()):
        data = np.concatenate(arrays) if arrays else np.zeros(0, dtype=kind if kind != "_index" else np.int64)
        grp.create_array(kind, data=data, chunks=(max(data.size, 1),), compressors=None)
    # one metadata write, last
    grp.update_attributes({"variables": variables, "twolayer_version": _version(), "complete": True})


def read_group(store: str | Path, gid: int) -> tuple[NDArray[np.int64], Part]:
    """One finished group: its configuration indices and results, bitwise as written.

    Parameters
    ----------
    store : str or Path
        The Zarr directory.
    gid : int
        The group's id.

    Returns
    -------
    indices : ndarray of int64
        Its flat configuration indices.
    part : Part
        Its results.

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     index, part = tl.scan.store.read_group(f"{tmp}/s.zarr", 0)
    >>> index.tolist(), part.data["risk"][1].shape
    ([0, 1], (2, 3))
    """
    zarr = _zarr()
    where = f"{store}/groups/g{gid:07d}"
    grp = zarr.open_group(str(store), path=f"groups/g{gid:07d}", mode="r")
    blocks = {kind: _numbers(grp, kind, where) for kind in ("float64", "int64")}
    part = Part({}, {})
    for v in grp.attrs["variables"]:
        shape = tuple(v["shape"])
        n = int(np.prod(shape, dtype=np.int64))
        flat = blocks[v["block"]][v["offset"]:v["offset"] + n]
        if "categories" in v:
            values = np.asarray(v["categories"], dtype=np.str_)[flat].reshape(shape) if n else \
                np.zeros(shape, dtype=np.str_)
        else:
            values = flat.reshape(shape).astype(_plain_dtype(v, where))
        (part.data if v["role"] == "data" else part.coords)[v["name"]] = (tuple(v["dims"]), values)
    return _numbers(grp, "_index", where, "int64"), part


def _numbers(grp: Any, kind: str, where: str, dtype: str | None = None) -> NDArray[Any]:
    """The array ``kind`` of a group, decoded only if it is what :func:`write_group` writes: a Zarr v3 array of
    float64 or int64 (never an object array, whose codecs could unpickle)."""
    arr = grp[kind]
    expected = np.dtype(dtype or kind)
    if arr.metadata.zarr_format != 3 or arr.dtype != expected:
        raise ValueError(f"store: {where}/{kind}: expected a Zarr v3 array of {expected}, got a Zarr "
                         f"v{arr.metadata.zarr_format} array of {arr.dtype}")
    return np.asarray(arr[...])


def _plain_dtype(v: Any, where: str) -> np.dtype[Any]:
    """The recorded dtype of a variable: numbers or bools only."""
    try:
        dtype = np.dtype(v["dtype"])
    except TypeError:
        dtype = np.dtype(object)
    if dtype.kind not in "biuf":
        raise ValueError(f"store: {where}: variable {v['name']!r} has dtype {v['dtype']!r}, expected numbers")
    return dtype


def definition(store: str | Path) -> Scan:
    """The scan definition recorded in a store, its engine read as text (:func:`recorded_engine`: nothing is
    imported)."""
    attrs = dict(_zarr().open_group(str(store), mode="r").attrs)
    if attrs.get("format") != _FORMAT:
        raise ValueError(f"store: {store} is not a twolayer scan store")
    try:
        data = json.loads(attrs["scan_definition"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"store: {store} holds no readable scan definition") from None
    if not isinstance(data, dict):
        raise ValueError(f"store: {store} holds no readable scan definition")
    return Scan.from_dict({**data, "engine": recorded_engine(data.get("engine"))})


def open_dataset(store: str | Path) -> Any:
    """The stored scan as an ``xarray.Dataset`` (the finished groups; configurations not computed yet are NaN,
    -1 or "").

    Parameters
    ----------
    store : str or Path
        The Zarr directory.

    Returns
    -------
    xarray.Dataset
        As :func:`twolayer.scan.run` returns it, with the attributes ``n_groups`` and ``n_groups_complete``.

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     ds = tl.scan.open_dataset(f"{tmp}/s.zarr")
    >>> ds.risk.dims, ds.attrs["n_groups_complete"]
    (('lr', 't'), 1)
    """
    if not Path(store).exists():
        raise FileNotFoundError(f"store: {store} does not exist")
    scan = definition(store)
    done = sorted(complete_groups(store))
    ds = assemble(scan, (read_group(store, g) for g in done))
    attrs = _zarr().open_group(str(store), mode="r").attrs
    ds.attrs.update({"n_groups": int(attrs["n_groups"]), "n_groups_complete": len(done),
                     "twolayer_version": str(attrs["twolayer_version"])})  # every version that wrote groups
    return ds


def _rows(indices: Any) -> slice | NDArray[np.int64]:
    """The rows of flat ``indices``: a slice when they are consecutive (a plain copy), else an index array."""
    idx = np.asarray(indices, dtype=np.int64)
    if idx.size and idx[-1] - idx[0] == idx.size - 1 and np.all(np.diff(idx) == 1):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


# scanned parameters whose names are also result variables (the teacher size M and the overlaps M) are renamed
_RENAME = {"M": "n_teacher", "K": "n_student"}


def _labels(name: str, unit: str) -> dict[str, str]:
    from ..results import variable_attrs

    try:
        return variable_attrs(name, unit)
    except KeyError:
        return {}


def _time_unit(scan: Scan) -> str:
    """The clock of a scan's ``t``: the ODE and SGD's t = steps / d, the large-batch map's iteration (a scan has
    one regime then: :func:`twolayer.scan.engines._ode_together`), the others' iterations."""
    regimes = scan.coords.get("regime", ("", [scan.constants.get("regime")]))[1]
    if scan.engine_name == "ode" and "large_batch" in regimes:
        return "t = iteration (large-batch map)"
    return "t = steps / d" if scan.engine_name in ("ode", "sgd") else "iterations"


def assemble(scan: Scan, parts: Iterable[tuple[Any, Part]]) -> Any:
    """One ``xarray.Dataset`` from (indices, :class:`Part`) pairs: one dimension per scanned axis (or zip), then
    the engine's own dimensions (``run``, ``t``, ``student``, ...); every scanned parameter is a coordinate, the
    constants, the definition and the package version are attributes. Shapes that differ between groups (K, M)
    are padded (NaN, -1 or ""); a scanned parameter named like a result variable is renamed (``M`` ->
    ``n_teacher``, others ``param_<name>``); output times that differ between groups (e.g. a scanned ``t_max``)
    become the per-configuration variable ``time`` on a ``t`` dimension without coordinate.

    Parameters
    ----------
    scan : Scan
        The definition.
    parts : iterable of (indices, Part)
        The finished groups (configurations missing from them are NaN, -1 or "").

    Returns
    -------
    xarray.Dataset

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> g = tl.scan.make_groups(sc)[0]
    >>> part = tl.scan.engines.engine_for("ode").run(g.configs)
    >>> ds = tl.scan.store.assemble(sc, [(g.indices, part)])
    >>> ds.risk.shape, ds.attrs["engine"]
    ((2, 3), 'ode')
    """
    asm = Assembly(scan)
    for indices, part in parts:
        asm.add(indices, part)
    return asm.dataset()


class Assembly:
    """The arrays of a scan's dataset, filled group by group as the groups arrive (:meth:`add`), each result
    copied once, straight into its row block of the full array (a slice when the group's configurations are
    consecutive), so that a group's own arrays can be dropped at once; :meth:`dataset` wraps them. Rows of
    configurations no group computed, and the padding of groups of smaller shape, are filled (NaN, -1 or "").

    Parameters
    ----------
    scan : Scan
        The definition.

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> asm = tl.scan.store.Assembly(sc)
    >>> asm.add([1], tl.scan.engines.Part({"loss": ((), np.array([2.5]))}))
    >>> asm.dataset().loss.values.tolist()
    [nan, 2.5]
    """

    def __init__(self, scan: Scan) -> None:
        self.scan, self.n = scan, len(scan)
        self.full: dict[str, NDArray[Any]] = {}  # name -> (n_configs, ...)
        self.dims: dict[str, tuple[str, ...]] = {}
        self.written = np.zeros(self.n, dtype=bool)
        self.coords: list[tuple[NDArray[np.int64], dict[str, tuple[tuple[str, ...], NDArray[Any]]]]] = []

    def add(self, indices: Any, part: Part) -> None:
        """Copy one group's results (its flat configuration ``indices``) into the full arrays."""
        idx = np.asarray(indices, dtype=np.int64)
        rows = _rows(idx)
        for k, (dims, arr) in part.data.items():
            self._put(k, dims, rows, np.asarray(arr))
        for k, out in self.full.items():
            if k not in part.data:  # a variable this group does not have
                out[rows] = fill_value(out.dtype)
        self.coords.append((idx, dict(part.coords)))
        self.written[idx] = True

    def _put(self, k: str, dims: tuple[str, ...], rows: slice | NDArray[np.int64], arr: NDArray[Any]) -> None:
        out = self.full.get(k)
        shape, dtype = arr.shape[1:], arr.dtype
        if out is None:  # rows written before without it are filled; rows never written, in dataset()
            out = self.full[k] = np.empty((self.n, *shape), dtype=dtype)
            self.dims[k] = dims
            if self.written.any():
                out[self.written] = fill_value(dtype)
        elif out.shape[1:] != shape or np.result_type(out.dtype, dtype) != out.dtype:
            grown = tuple(max(a, b) for a, b in zip(out.shape[1:], shape, strict=True))
            if grown != out.shape[1:] or np.result_type(out.dtype, dtype) != out.dtype:  # pad earlier groups
                new = np.full((self.n, *grown), fill_value(np.result_type(out.dtype, dtype)),
                              dtype=np.result_type(out.dtype, dtype))
                new[(slice(None),) + tuple(slice(0, s) for s in out.shape[1:])] = out
                out = self.full[k] = new
        if shape != out.shape[1:]:
            out[rows] = fill_value(out.dtype)  # this group's padding
        out[(rows,) + tuple(slice(0, s) for s in shape)] = arr

    def dataset(self) -> Any:
        """The ``xarray.Dataset`` of the groups added so far (see :func:`assemble`)."""
        from ..results import _xarray

        xr = _xarray()
        scan = self.scan
        grid = scan.dims
        # coordinates shared by every group stay coordinates; the others become per-configuration data
        values: dict[str, list[tuple[tuple[str, ...], NDArray[Any]]]] = {}
        for _, group_coords in self.coords:
            for k, v in group_coords.items():
                values.setdefault(k, []).append(v)
        shared = {k: vals[0] for k, vals in values.items()
                  if all(v[0] == vals[0][0] and v[1].shape == vals[0][1].shape and np.array_equal(v[1], vals[0][1])
                         for v in vals)}
        for idx, group_coords in self.coords:
            for k, (dims, arr) in group_coords.items():
                if k not in shared:
                    self._put("time" if k == "t" else f"{k}_values", dims, _rows(idx),
                              np.broadcast_to(arr, (idx.size, *arr.shape)))
        missing = ~self.written
        if missing.any():
            for out in self.full.values():
                out[missing] = fill_value(out.dtype)
        full, specs = self.full, self.dims
        unit = _time_unit(scan)
        rename = {k: _RENAME.get(k, f"param_{k}") for k in [*scan.coords, *grid] if k in specs or k in shared}
        data = {}
        for k, dims in specs.items():
            data[k] = ((*(rename.get(g, g) for g in grid), *dims),
                       full[k].reshape((*grid.values(), *full[k].shape[1:])), _labels(k, unit))
        coords: dict[str, Any] = {rename.get(name, name): (rename.get(dim, dim), vals,
                                                               _labels(rename.get(name, name), unit))
                                  for name, (dim, vals) in scan.coords.items()}
        for k, (dims, arr) in shared.items():
            coords[k] = (dims, arr, _labels(k, unit))
        attrs: dict[str, Any] = {}
        for k, v in scan.constants.items():
            attrs[k] = json.dumps(v) if isinstance(v, list) else (int(v) if isinstance(v, bool) else v)
        attrs.update({"engine": scan.engine_name, "scan_hash": scan.digest(),
                      "scan_definition": json.dumps(scan.to_dict()), "twolayer_version": _version(),
                      "time_unit": unit})
        return xr.Dataset(data, coords=coords, attrs=attrs)
