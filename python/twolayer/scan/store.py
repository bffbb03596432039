"""The scan store: a standard chunked Zarr (v3) dataset, created whole before the first group runs and filled
group by group; ``xarray.open_zarr(store)`` opens it lazily (Dask-backed) as the ``xarray.Dataset`` that
:func:`twolayer.scan.run` returns.

Layout (format ``twolayer-scan/2``)::

    scan.zarr/zarr.json         the dataset's attrs: constants, engine, scan_hash, scan_definition (JSON),
                                twolayer_version, time_unit, n_groups, format
    scan.zarr/<axis>/           one 1-D coordinate per scanned parameter (zipped ones on their zip's dimension)
    scan.zarr/t/, run_id/, ...  the engine's coordinates shared by every configuration
    scan.zarr/risk/, Q/, ...    one array per result: the grid's dimensions, then the engine's (``t``, ``run``,
                                ``student``, ...), chunked by group block (:func:`twolayer.scan.grouping.block_shape`)
                                along the grid and whole along the engine's dimensions
    scan.zarr/complete/         bool per configuration, chunked like the results: written last by each group
    scan.zarr/_twolayer/g0000007.json   a group's record: its checksum (CRC-32C of its values) and the twolayer
                                version that wrote it; ignored by Zarr and xarray

Shapes are fixed when the store is created: :func:`schema` computes the first configuration of every class of
configurations that one core call could run together (one per distinct value of ``K``, ``M``, ``t_max``, ...:
usually one) and takes the largest shape of every result; smaller ones are padded. Configurations not computed
read as the fill values NaN (floats), -1 (integers), "" (strings) and ``complete`` False.

Each group writes its own block of whole chunks of every array (no two writers share a chunk): its results, then
its record (replaced atomically), then its ``complete`` chunk. A group is finished when both its record and its
``complete`` chunk say so, so a process killed while writing (even by SIGKILL) leaves an unfinished group, which
resumption computes again; a finished group is never rewritten. :func:`damaged_groups` recomputes every finished group's
checksum from the stored values (a deleted chunk, flipped bytes) and compares the coordinates with the stored
definition, whose hash is checked on every open. Arrays are stored uncompressed (float64 trajectories barely
compress), so a dataset read back is bitwise the one computed; strings are Zarr's variable-length UTF-8.

A group's chunks are written without Zarr's per-call machinery: every array of the store has one codec
(``bytes``, or ``vlen-utf8`` for strings), and :class:`_Chunks` writes a chunk's encoded bytes (Zarr's own bytes,
checked by a test) as a file beside its key, renamed over it; chunk keys are ``c.i.j.k`` (no directory to create
per group). The costs measured, and the choice of group sizes: docs/layers/scans.rst, "Group size and its cost".
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import sys
import threading
import warnings
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import _core
from .._validation import boolean
from ..results import import_xarray, variable_attrs
from .engines import Part, fill_value, recorded_engine
from .grouping import BlockConfigs, block_shape, group_regions, region_indices
from .spec import Scan

__all__ = ["Assembly", "Schema", "assemble", "complete_groups", "definition", "open_dataset", "group_record", "prepare",
           "read_group", "schema", "damaged_groups", "write_group"]

_FORMAT = "twolayer-scan/2"
_OLD_FORMATS = ("twolayer-scan/1",)
_RECORDS = "_twolayer"
# the results' chunk keys: ``c.3.0.0`` (files side by side in the array's directory) rather than Zarr's default
# ``c/3/0/0``, whose directories (one or more new ones per array and group) cost ~0.3 ms each to create on the
# machines measured, more than writing a chunk's bytes
CHUNK_KEY_ENCODING = {"name": "default", "separator": "."}


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
    """The version of twolayer writing or reading the store (``twolayer.__version__``)."""
    return str(_core.build_info()["version"])


# ------------------------------------------------------------------------------------------ schema


@dataclass
class Schema:
    """The arrays of a scan's dataset, known before any group runs (:func:`schema`).

    Attributes
    ----------
    data : dict
        result name -> (engine dims, engine shape, dtype), per configuration (strings: dtype kind ``U``).
    shared : dict
        coordinate name -> (dims, values) shared by every configuration (e.g. the output times ``t``).

    Examples
    --------
    >>> s = tl.scan.store.Schema({"loss": ((), (), np.dtype(float))}, {})
    >>> s.data["loss"][2]
    dtype('float64')
    """

    data: dict[str, tuple[tuple[str, ...], tuple[int, ...], np.dtype[Any]]]
    shared: dict[str, tuple[tuple[str, ...], NDArray[Any]]]


def _per_config_name(k: str) -> str:
    """The per-configuration variable of a coordinate that differs between configurations."""
    return "time" if k == "t" else f"{k}_values"


def _merge(parts: Iterable[Part]) -> Schema:
    """The schema of the datasets holding ``parts``: every result at its largest shape and widest dtype;
    coordinates equal in every part shared, the others per-configuration variables (:func:`_per_config_name`)."""
    data: dict[str, tuple[tuple[str, ...], tuple[int, ...], np.dtype[Any]]] = {}
    coords: dict[str, list[tuple[tuple[str, ...], NDArray[Any]]]] = {}

    def put(k: str, dims: tuple[str, ...], shape: tuple[int, ...], dtype: np.dtype[Any]) -> None:
        old = data.get(k)
        if old is not None:
            shape = tuple(max(a, b) for a, b in zip(old[1], shape, strict=True))
            dtype = np.result_type(old[2], dtype)
        data[k] = (tuple(dims), shape, np.dtype(dtype))

    parts = list(parts)
    for part in parts:
        for k, (dims, arr) in part.data.items():
            a = np.asarray(arr)
            put(k, dims, a.shape[1:], a.dtype)
        for k, (dims, arr) in part.coords.items():
            coords.setdefault(k, []).append((tuple(dims), np.asarray(arr)))
    shared = {}
    for k, vals in coords.items():
        if len(vals) == len(parts) and all(v[0] == vals[0][0] and v[1].shape == vals[0][1].shape
                                          and np.array_equal(v[1], vals[0][1]) for v in vals):
            shared[k] = vals[0]
        else:
            for dims, arr in vals:
                put(_per_config_name(k), dims, arr.shape, arr.dtype)
    return Schema(data, shared)


def schema(scan: Scan) -> Schema:
    """The :class:`Schema` of ``scan``: the engine run on the first configuration of every class of configurations
    that must share a core call (equal :meth:`Engine.group_key`), the largest shapes kept.

    Parameters
    ----------
    scan : Scan
        The definition (its engine must be able to run).

    Returns
    -------
    Schema

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> s = tl.scan.store.schema(sc)
    >>> s.data["risk"][:2], s.shared["t"][1].tolist()
    ((('t',), (3,)), [0.0, 0.5, 1.0])
    """
    eng = scan.resolved_engine
    firsts: dict[tuple[Any, ...], dict[str, Any]] = {}
    names: tuple[str, ...] | None = None
    for region in group_regions(scan):
        config = BlockConfigs(scan, tuple(slice(r.start, r.start + 1) for r in region))[0]
        names = eng.group_names(config) if names is None else names
        firsts.setdefault(eng.group_key(config, names), config)
    return _merge(eng.run([c]) for c in firsts.values())


# ------------------------------------------------------------------------------------------ the dataset's layout


def _rename(scan: Scan, names: Iterable[str]) -> dict[str, str]:
    """Scanned parameters (and dimensions) named like a result variable: ``M`` -> ``n_teacher``, others
    ``param_<name>``."""
    names = set(names)
    return {k: _RENAME.get(k, f"param_{k}") for k in [*scan.coords, *scan.dims] if k in names}


def _dataset_attrs(scan: Scan, n_groups: int) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    for k, v in scan.constants.items():
        attrs[k] = json.dumps(v) if isinstance(v, list) else (int(v) if isinstance(v, bool) else v)
    attrs.update({"engine": scan.engine_name, "scan_hash": scan.digest(),
                  "scan_definition": json.dumps(scan.to_dict()), "twolayer_version": _version(),
                  "time_unit": _time_unit(scan), "n_groups": n_groups, "format": _FORMAT})
    return attrs


def coord_values(vals: list[Any]) -> Any:
    """A scanned parameter's values as its stored coordinate: the values, or, where some are lists (e.g. one bias
    per unit), every value as its JSON text (``"[0.1, -0.2]"``), so that the coordinate stays one-dimensional."""
    if any(isinstance(v, list) for v in vals):
        return np.array([json.dumps(v) for v in vals], dtype=np.dtypes.StringDType())
    return vals


def _layout(scan: Scan, sch: Schema) -> tuple[dict[str, tuple[tuple[str, ...], dict[str, str]]], dict[str, Any]]:
    """The dims and attrs of every result (``complete`` included), and the coordinates (name -> (dims, values,
    attrs)) of the dataset of ``scan`` with schema ``sch``."""
    unit = _time_unit(scan)
    rename = _rename(scan, [*sch.data, *sch.shared, "complete"])
    grid = tuple(rename.get(g, g) for g in scan.dims)
    data = {k: ((*grid, *dims), _labels(k, unit)) for k, (dims, _, _) in sch.data.items()}
    data["complete"] = (grid, {"long_name": "configuration computed", "units": "1"})
    coords: dict[str, Any] = {rename.get(name, name): (rename.get(dim, dim), coord_values(vals),
                                                       _labels(rename.get(name, name), unit))
                              for name, (dim, vals) in scan.coords.items()}
    for k, (dims, arr) in sch.shared.items():
        coords[k] = (dims, arr, _labels(k, unit))
    return data, coords


# ------------------------------------------------------------------------------------------ writing


def _store_dtype(dtype: np.dtype[Any]) -> Any:
    return np.dtypes.StringDType() if dtype.kind in "UO" else dtype


def prepare(store: str | Path, scan: Scan, n_groups: int, resume: bool, allow_version_change: bool = False) \
        -> set[int]:
    """Create the store of ``scan`` (every array, filled with NaN, -1, "" and ``complete`` False), or check an
    existing one: a store of another definition, of the previous layout, or that is not a scan store raises
    ValueError; one holding finished groups needs ``resume`` (FileExistsError otherwise); one written by another
    version of twolayer raises ValueError naming both versions unless ``allow_version_change`` (the store then
    records both in ``twolayer_version``, and each group its own). Finished groups are verified
    (:func:`damaged_groups`): damaged ones are not returned, so that they are computed again. Returns the finished ids.

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
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
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
        attrs = _root_attrs(path)
        if attrs.get("scan_hash") not in scan.digests():
            raise ValueError(f"store: {path} was written by a different scan definition (hash "
                             f"{str(attrs.get('scan_hash'))[:12]}..., this scan {digest[:12]}...): use another "
                             "store, or delete it to start over")
        marked = complete_groups(path)
        if marked and not resume:
            raise FileExistsError(f"store: {path} already holds {len(marked)} of {n_groups} finished groups of this "
                                  "scan: pass resume=True (--resume) to compute only the missing ones, or delete it")
        done = marked - set(damaged_groups(path, scan, marked))
        versions = [v.strip() for v in str(attrs.get("twolayer_version", "")).split(",")]
        if _version() not in versions:
            if not done:  # nothing stored yet: nothing to mix
                versions = []
            elif not allow_version_change:
                raise ValueError(f"store: {path} was written by twolayer {', '.join(versions)}, this is twolayer "
                                 f"{_version()}: results of two versions need not agree bit for bit; pass "
                                 "allow_version_change=True (--allow-version-change) to complete it anyway, or "
                                 "use another store")
            zarr.open_group(str(path), mode="a", zarr_format=3).attrs["twolayer_version"] = \
                ", ".join([*versions, _version()])
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", category=UserWarning)
                zarr.consolidate_metadata(str(path), zarr_format=3)
        return done
    _create(path, scan, n_groups)
    return set()


def _create(path: Path, scan: Scan, n_groups: int) -> None:
    """Write the whole dataset's metadata and coordinates (no result chunk: they read as the fill values), in a
    temporary directory beside ``path`` renamed to it at the end: a process killed meanwhile leaves no store."""
    for stale in path.parent.glob(f".{path.name}.creating-*"):  # left by a killed process
        shutil.rmtree(stale, ignore_errors=True)
    tmp = path.parent / f".{path.name}.creating-{os.getpid()}"
    try:
        _create_in(tmp, scan, n_groups)
        os.rename(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _create_in(path: Path, scan: Scan, n_groups: int) -> None:
    """The coordinates and attributes written by xarray (its CF encoding), then every result array created empty
    by Zarr itself with the metadata xarray would give it (dimension names, attrs, fill value; no chunk), then the
    metadata consolidated, all in a Zarr ``MemoryStore``, whose keys are then written out as the files of
    ``path``: ~20 ms of CPU for the ODE's 3 coordinates and 16 results, where Zarr's local store took ~35 ms
    (a round trip per file) and a lazy Dask array per result through ``to_zarr`` about 0.1 s."""
    zarr = _zarr()
    from zarr.storage import MemoryStore

    memory = MemoryStore()
    sch = schema(scan)
    layout, coords = _layout(scan, sch)
    grid_shape, block = tuple(scan.dims.values()), block_shape(scan)
    with warnings.catch_warnings():  # consolidated metadata: not (yet) in the v3 spec, but what open_zarr reads first
        warnings.simplefilter("ignore", category=UserWarning)
        import_xarray().Dataset(coords=coords, attrs=_dataset_attrs(scan, n_groups)).to_zarr(
            memory, mode="w-", zarr_format=3, consolidated=False)
        root = zarr.open_group(memory, mode="r+", zarr_format=3)
        specs = {**{k: (shape, _store_dtype(dtype)) for k, (_, shape, dtype) in sch.data.items()},
                 "complete": ((), np.dtype(bool))}
        # xarray's CF encoding: each non-dimension coordinate named in the ``coordinates`` attribute of every
        # variable holding its dimensions, in the dataset's only where no variable does
        tupled = {name: (dims,) if isinstance(dims, str) else tuple(dims) for name, (dims, *_) in coords.items()}
        extra = {name: set(dims) for name, dims in tupled.items() if dims != (name,)}
        unplaced = set(extra)
        create = []
        for k, (shape, dtype) in specs.items():
            fill = fill_value(np.dtype("U") if dtype.kind == "T" else dtype)
            dims, attrs = layout[k]
            placed = sorted(c for c, cdims in extra.items() if cdims <= set(dims))
            unplaced -= set(placed)
            attrs = {**attrs, **({"coordinates": " ".join(placed)} if placed else {})}
            if dtype.kind == "f":  # the CF mask value of floats (base64 of its bytes)
                attrs["_FillValue"] = base64.standard_b64encode(np.array(fill, dtype).tobytes()).decode()
            create.append((k, {"shape": (*grid_shape, *shape), "chunks": (*block, *shape), "dtype": dtype,
                               "fill_value": fill, "compressors": None, "dimension_names": dims, "attributes": attrs,
                               "chunk_key_encoding": CHUNK_KEY_ENCODING}))
        _create_arrays(root, memory, create)
        if "coordinates" in root.attrs:
            if unplaced:
                root.attrs["coordinates"] = " ".join(sorted(unplaced))
            else:
                del root.attrs["coordinates"]
        zarr.consolidate_metadata(memory, zarr_format=3)
    _dump(memory, path)
    rename = _rename(scan, [*sch.data, *sch.shared, "complete"])
    _write_json(path / _RECORDS / "zarr.json", _group_meta(
        {"scanned": {name: rename.get(name, name) for name in scan.coords}, "results": sorted(sch.data),
         "shared": sorted(sch.shared)}))


def _dump(memory: Any, path: Path) -> None:
    """Write every key of the Zarr store ``memory`` as the file of that name under ``path``."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    async def read() -> dict[str, bytes]:
        keys = [k async for k in memory.list()]
        return {k: (await memory.get(k, prototype=default_buffer_prototype())).to_bytes() for k in keys}

    for key, data in sync(read()).items():
        dest = path.joinpath(*key.split("/"))
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def _meta(store: str | Path) -> dict[str, Any]:
    """The store's own description (``_twolayer/zarr.json``): the stored name of every scanned parameter
    (``scanned``), the results (``results``) and the shared coordinates (``shared``)."""
    try:
        meta = json.loads(Path(store, _RECORDS, "zarr.json").read_text())["attributes"]
        if not (isinstance(meta["scanned"], dict) and isinstance(meta["results"], list)
                and isinstance(meta["shared"], list)):
            raise TypeError
    except Exception:
        raise ValueError(f"store: {store}: its {_RECORDS} group is missing or unreadable") from None
    return dict(meta)


def _group_meta(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The ``zarr.json`` of a Zarr v3 group with these attributes."""
    return {"zarr_format": 3, "node_type": "group", "attributes": dict(attributes)}


def _write_json(path: Path, data: Any) -> None:
    """Write ``path`` atomically (a temporary file beside it, then renamed over it)."""
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _record_path(store: str | Path, gid: int) -> Path:
    return Path(store, _RECORDS, f"g{gid:07d}", "zarr.json")


def _crc32c(data: Any, crc: int) -> int:
    import google_crc32c  # a dependency of zarr 3

    return int(google_crc32c.extend(crc, data))


# the checksums a group's record may name (``<name>:<8 hex digits>``): CRC-32C (hardware, ~0.04 ms per MiB) since
# this layout's tuning, CRC-32 (zlib, ~0.15 ms per MiB) before it
_CHECKSUMS = {"crc32c": _crc32c, "crc32": lambda data, crc: zlib.crc32(data, crc)}


def _checksum(values: Mapping[str, NDArray[Any]], kind: str = "crc32c") -> str:
    """``<kind>:`` and the checksum (8 hex digits: CRC-32C by default, or the ``crc32`` of records written before)
    of a group's values, variable by variable in name order (each preceded by its name and shape; strings as UTF-8,
    NUL-separated; the other values' bytes, without a copy). It finds accidental damage (deleted chunks, flipped
    bytes), not deliberate forgery. ValueError for an unknown ``kind``."""
    update = _CHECKSUMS.get(kind)
    if update is None:
        raise ValueError(f"store: unknown checksum {kind!r} (known: {', '.join(_CHECKSUMS)})")
    crc = 0
    for k in sorted(values):
        arr = np.asarray(values[k])
        crc = update(f"{k}:{arr.shape}:".encode(), crc)
        if arr.dtype.kind in "UTO":
            crc = update("\x00".join(str(x) for x in arr.ravel()).encode(), crc)
        else:
            crc = update(np.ascontiguousarray(arr).reshape(-1).view(np.uint8), crc)
    return f"{kind}:{crc:08x}"


def _checksum_matches(values: Mapping[str, NDArray[Any]], recorded: Any) -> bool:
    """Whether ``values`` have the checksum ``recorded`` in a group's record (of the kind it names)."""
    kind = str(recorded).partition(":")[0]
    return kind in _CHECKSUMS and _checksum(values, kind) == recorded


@dataclass(frozen=True)
class _Chunks:
    """Where and how the chunks of one uncompressed array are stored (:func:`_chunks`), so that a group's chunk is
    written as Zarr would write it, without Zarr's per-call machinery: the chunk's block, padded to the chunk's
    shape with the fill value (the last chunks along a dimension), encoded by the array's one codec (``bytes``:
    the values' little-endian bytes in C order, no copy; ``vlen-utf8``: numcodecs' ``VLenUTF8``, which Zarr's
    codec calls), at the key of the array's chunk key encoding; written beside it and renamed over it, so that a
    chunk is either the old one or the new one, never a mix."""

    path: str
    chunk_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    fill: Any
    encode_key: Any
    encode: Any  # values -> bytes-like

    def write(self, region: tuple[slice, ...], values: NDArray[Any]) -> None:
        """Write ``values``, the block ``region`` of the grid (whole chunks of it along the grid)."""
        grid = len(region)
        coords = tuple(s.start // c for s, c in zip(region, self.chunk_shape[:grid], strict=True))
        if values.shape != self.chunk_shape or values.dtype != self.dtype:
            chunk = np.full(self.chunk_shape, self.fill, dtype=self.dtype)
            chunk[tuple(slice(0, n) for n in values.shape)] = values
            values = chunk
        dest = os.path.join(self.path, *self.encode_key(coords + (0,) * (len(self.chunk_shape) - grid)).split("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        tmp = f"{dest}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(self.encode(values))
        os.replace(tmp, dest)


def _plain_bytes(values: NDArray[Any]) -> Any:
    return np.ascontiguousarray(values).data


def _chunks(path: str, name: str, arr: Any) -> _Chunks | None:
    """The :class:`_Chunks` of ``arr`` (the array ``name`` of the store at ``path``), or None where its chunks
    are not written by one codec alone (a compressor, a storage transformer, another codec): Zarr writes those."""
    from numcodecs.vlen import VLenUTF8  # type: ignore[import-untyped]
    from zarr.codecs import BytesCodec, VLenUTF8Codec

    meta: Any = arr.metadata
    codecs: tuple[Any, ...] = tuple(getattr(meta, "codecs", ()))
    if len(codecs) != 1 or getattr(meta, "storage_transformers", None) or not hasattr(meta, "encode_chunk_key"):
        return None
    (codec,) = codecs
    if isinstance(codec, BytesCodec) and (codec.endian is None or codec.endian.value == "little") \
            and arr.dtype.kind in "biuf":
        dtype, encode = np.dtype(arr.dtype).newbyteorder("<"), _plain_bytes
    elif isinstance(codec, VLenUTF8Codec) and arr.dtype.kind == "T":
        dtype, encode = np.dtype(arr.dtype), VLenUTF8().encode
    else:
        return None
    return _Chunks(os.path.join(path, name), tuple(arr.chunks), dtype, np.asarray(arr.fill_value, dtype=dtype),
                   meta.encode_chunk_key, encode)


@dataclass(frozen=True)
class _Handles:
    """What writing a group needs from its store, opened once per store and process (:func:`_handles`): the
    grid's shape, the store's description (:func:`_meta`), every result array and ``complete`` (written with
    every chunk stored, fill values included: a missing chunk of a finished group is damage, never "all NaN"),
    the :class:`_Chunks` of the arrays written as files, and the values of the shared coordinates."""

    grid_shape: tuple[int, ...]
    meta: dict[str, Any]
    arrays: dict[str, Any]
    chunks: dict[str, _Chunks]
    shared: dict[str, NDArray[Any]]

    def write(self, region: tuple[slice, ...], values: Mapping[str, NDArray[Any]]) -> None:
        """Write the block ``region`` of every array in ``values``: chunks of one codec as files (:class:`_Chunks`),
        the others through Zarr."""
        for k, v in values.items():
            if k in self.chunks:
                self.chunks[k].write(region, v)
        rest = [(self.arrays[k], region, v) for k, v in values.items() if k not in self.chunks]
        if rest:
            _write_all(rest)


def _handles(store: str | Path) -> _Handles:
    """The :class:`_Handles` of ``store``, cached while its root ``zarr.json`` is the same file (inode and
    modification time: a store deleted and created again at the same path is opened again)."""
    path = os.path.realpath(store)
    st = os.stat(os.path.join(path, "zarr.json"))
    return _open_handles(path, (st.st_ino, st.st_mtime_ns))


@functools.lru_cache(maxsize=8)
def _open_handles(path: str, stamp: tuple[int, int]) -> _Handles:
    root = _zarr().open_group(path, mode="r+", zarr_format=3)
    meta = _meta(path)
    arrays = {k: root[k].with_config({"write_empty_chunks": True}) for k in [*meta["results"], "complete"]}
    chunks = {k: c for k, arr in arrays.items() if (c := _chunks(path, k, arr)) is not None}
    shared = {k: np.asarray(root[k][...]) for k in meta["shared"]}
    return _Handles(tuple(arrays["complete"].shape), meta, arrays, chunks, shared)


def _region(indices: Any, grid_shape: tuple[int, ...]) -> tuple[slice, ...]:
    """The block of the grid that flat ``indices`` fill (ValueError unless they fill one whole block)."""
    idx = np.asarray(indices, dtype=np.int64)
    if not grid_shape:
        return ()
    pos = np.unravel_index(idx, grid_shape)
    region = tuple(slice(int(p.min()), int(p.max()) + 1) for p in pos)
    if region_indices(region, grid_shape) != idx.tolist():
        raise ValueError("store: a group's configurations must fill one block of the grid, in C order")
    return region


def _group_values(h: _Handles, region: tuple[slice, ...], part: Part) -> dict[str, NDArray[Any]]:
    """A group's block of every result (``complete`` aside) from its :class:`Part`: padded to the stored shape
    (fill values), cast to the stored dtype, missing results filled; its coordinates checked against the shared
    ones or spread into their per-configuration variables. A result already of the stored shape and dtype is
    used as it is (no copy)."""
    block = tuple(s.stop - s.start for s in region)
    n = int(np.prod(block, dtype=np.int64))
    table = dict(part.data)
    for k, (dims, arr) in part.coords.items():
        if k in h.shared:
            stored, arr = h.shared[k], np.asarray(arr)
            # a group that recorded fewer points (all its runs diverged early) has a prefix of the coordinate
            if arr.ndim != stored.ndim or any(a > b for a, b in zip(arr.shape, stored.shape, strict=True)) \
                    or not np.array_equal(stored[tuple(slice(0, n) for n in arr.shape)], arr):
                raise ValueError(f"store: coordinate {k!r} of this group differs from the store's (fixed when it "
                                 "was created from the first configuration of its class)")
        else:
            arr = np.asarray(arr)
            table[_per_config_name(k)] = (dims, np.broadcast_to(arr, (n, *arr.shape)))
    out = {}
    for k in h.meta["results"]:
        arr = h.arrays[k]
        shape = tuple(arr.shape[len(block):])
        got = np.asarray(table[k][1]) if k in table else None
        if got is not None and got.shape == (n, *shape) and got.dtype == arr.dtype:
            out[k] = got.reshape((*block, *shape))
            continue
        fill = fill_value(np.dtype("U") if arr.dtype.kind == "T" else arr.dtype)
        values = np.full((n, *shape), fill, dtype=arr.dtype)
        if got is not None:
            if got.ndim != values.ndim or any(a > b for a, b in zip(got.shape[1:], shape, strict=True)):
                raise ValueError(f"store: result {k!r} of shape {got.shape[1:]} does not fit the store's {shape} "
                                 "(fixed when it was created from the first configuration of its class)")
            values[(slice(None),) + tuple(slice(0, s) for s in got.shape[1:])] = got
        out[k] = values.reshape((*block, *shape))
    return out


def write_group(store: str | Path, name: str, indices: Any, part: Part) -> None:
    """Write one group's block of every result (:meth:`_Handles.write`), then its record (checksum, version;
    replaced atomically), then its ``complete`` chunk. An error propagates with a note naming the group.

    Parameters
    ----------
    store : str or Path
        The Zarr directory (prepared by :func:`prepare`).
    name : str
        The group's name (``g`` and seven digits).
    indices : sequence of int
        Its flat configuration indices (one block of the grid, C order; a list or an int array).
    part : Part
        Its results.

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> g = tl.scan.make_groups(sc)[0]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.store.prepare(f"{tmp}/s.zarr", sc, 1, resume=False)
    ...     tl.scan.store.write_group(f"{tmp}/s.zarr", g.name, g.indices, tl.scan.engines.engine_for("ode").run(
    ...         list(g.configs)))
    ...     done = tl.scan.store.complete_groups(f"{tmp}/s.zarr")
    >>> done
    {0}
    """
    try:
        h = _handles(store)
        region = _region(indices, h.grid_shape)
        values = _group_values(h, region, part)
        h.write(region, values)
        _write_json(_record_path(store, int(name[1:])), _group_meta(
            {"checksum": _checksum(values), "twolayer_version": _version(),
             "region": [[s.start, s.stop] for s in region]}))
        h.write(region, {"complete": np.ones(tuple(s.stop - s.start for s in region), dtype=bool)})
    except Exception as exc:  # where it happened, in the traceback of whichever thread or worker re-raises it
        if sys.version_info >= (3, 11):  # (always: a store needs zarr 3)
            exc.add_note(f"store: while writing group {name} to {store} (not marked finished: resuming computes it "
                         "again)")
        raise


def _create_arrays(root: Any, store: Any, arrays: list[tuple[str, dict[str, Any]]]) -> None:
    """``root.create_array(name, **kwargs)`` for every pair, concurrently on Zarr's event loop (as
    :func:`_write_all`): ~3 ms of wall time for the ODE's 16 arrays instead of ~30 ms."""
    import asyncio

    try:
        from zarr.api.asynchronous import open_group
        from zarr.core.sync import sync
    except ImportError:  # pragma: no cover - depends on the zarr version
        for name, kwargs in arrays:
            root.create_array(name, **kwargs)
        return

    async def create() -> None:
        group = await open_group(store, mode="r+", zarr_format=3)
        await asyncio.gather(*(group.create_array(name, **kwargs) for name, kwargs in arrays))

    sync(create())


def _write_all(writes: list[tuple[Any, tuple[slice, ...], NDArray[Any]]]) -> None:
    """``array[region] = values`` for every triple, concurrently on Zarr's event loop (its cost is per array:
    one round trip in all instead of one per array); returns once every write is done, raising the first error.
    ``zarr.core.sync`` is not public API: where a Zarr version lacks it, the arrays are written one by one (the same
    values, only slower)."""
    import asyncio

    try:
        from zarr.core.sync import sync
    except ImportError:  # pragma: no cover - depends on the zarr version
        for arr, region, v in writes:
            arr[region] = v
        return

    async def put() -> None:
        await asyncio.gather(*(arr.async_array.setitem(region, v) for arr, region, v in writes))

    sync(put())


def read_group(store: str | Path, gid: int) -> tuple[NDArray[np.int64], dict[str, NDArray[Any]]]:
    """One group's flat configuration indices and its stored values (name -> its block), as written.

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
    values : dict
        name -> its block of that result (the grid's block dimensions first).

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     index, values = tl.scan.store.read_group(f"{tmp}/s.zarr", 0)
    >>> index.tolist(), values["risk"].shape
    ([0, 1], (2, 3))
    """
    scan = definition(store)
    root = _zarr().open_group(str(store), mode="r", zarr_format=3)
    region = group_regions(scan)[gid]
    values = _stored_values(root, _meta(store), region)
    return np.asarray(region_indices(region, tuple(scan.dims.values())), dtype=np.int64), values


def _stored_values(root: Any, meta: Mapping[str, Any], region: tuple[slice, ...]) -> dict[str, NDArray[Any]]:
    return {k: np.asarray(root[k][region]) for k in meta["results"]}


def _group_flags(root: Any, regions: list[tuple[slice, ...]], groups: Iterable[int]) \
        -> dict[int, NDArray[np.bool_] | None]:
    """Each group's block of ``complete`` (None where it does not decode): the whole array read once (one byte
    per configuration), group by group only if some chunk is damaged."""
    arr = root["complete"]
    try:
        whole: NDArray[np.bool_] | None = np.asarray(arr[...])
    except Exception:
        whole = None
    out: dict[int, NDArray[np.bool_] | None] = {}
    for g in groups:
        if whole is not None:
            out[g] = whole[regions[g]]
            continue
        try:
            out[g] = np.asarray(arr[regions[g]])
        except Exception:
            out[g] = None
    return out


def complete_groups(store: str | Path) -> set[int]:
    """The ids of the finished groups: a record and a ``complete`` block of True (not checked against their
    checksums: :func:`damaged_groups`).

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
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     done = tl.scan.store.complete_groups(f"{tmp}/s.zarr")
    >>> done
    {0}
    """
    recorded = set()
    for rec in Path(store, _RECORDS).glob("g*/zarr.json"):
        name = rec.parent.name
        if len(name) == 8 and name[1:].isdigit():
            recorded.add(int(name[1:]))
    if not recorded:
        return set()
    root = _zarr().open_group(str(store), mode="r", zarr_format=3)
    regions = group_regions(definition(store))
    flags = _group_flags(root, regions, [g for g in recorded if g < len(regions)])
    return {g for g, f in flags.items() if f is not None and bool(np.all(f))}


def group_record(store: str | Path, gid: int) -> dict[str, Any]:
    """A group's record (``checksum``, ``twolayer_version``, ``region``); empty when it has none.

    Parameters
    ----------
    store : str or Path
        The Zarr directory.
    gid : int
        The group's id.

    Returns
    -------
    dict

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     record = tl.scan.store.group_record(f"{tmp}/s.zarr", 0)
    >>> record["region"], record["twolayer_version"] == tl.__version__
    ([[0, 2]], True)
    """
    try:
        out = json.loads(_record_path(store, gid).read_text()).get("attributes", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return out if isinstance(out, dict) else {}


def damaged_groups(store: str | Path, scan: Scan | None = None, groups: Iterable[int] | None = None) \
        -> list[int]:
    """The groups marked computed (any ``complete`` True) that are not intact: their record is missing, their
    ``complete`` block is not all True, or their stored values no longer match the recorded checksum (a deleted
    or damaged chunk, an unreadable array). Each such group is read once: this reads the whole store, group by
    group (never more than one group in memory).

    Parameters
    ----------
    store : str or Path
        The Zarr directory.
    scan : Scan, optional
        Its definition (read from the store if None).
    groups : iterable of int, optional
        The groups to check, each of which must be intact (default: every group marked computed).

    Returns
    -------
    list of int
        The damaged groups' ids (empty: the store is intact).

    Examples
    --------
    >>> import tempfile, os
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     before = tl.scan.store.damaged_groups(f"{tmp}/s.zarr")
    ...     os.remove(f"{tmp}/s.zarr/risk/c.0.0")  # a deleted chunk
    ...     after = tl.scan.store.damaged_groups(f"{tmp}/s.zarr")
    >>> before, after
    ([], [0])
    """
    scan = definition(store) if scan is None else scan
    regions = group_regions(scan)
    root = _zarr().open_group(str(store), mode="r", zarr_format=3)
    meta = _meta(store)
    flags = _group_flags(root, regions, range(len(regions)) if groups is None else groups)
    bad = []
    for g, f in sorted(flags.items()):
        if f is not None and not f.any() and groups is None:  # not computed (yet): nothing claimed
            continue
        try:
            ok = f is not None and bool(f.all()) and \
                _checksum_matches(_stored_values(root, meta, regions[g]), group_record(store, g).get("checksum"))
        except Exception:  # a chunk that does not decode
            ok = False
        if not ok:
            bad.append(g)
    return bad


# ------------------------------------------------------------------------------------------ reading


def _root_attrs(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise FileNotFoundError(f"store: {path} does not exist")
    try:
        attrs = dict(_zarr().open_group(str(path), mode="r", use_consolidated=False).attrs)
    except Exception:
        raise ValueError(f"store: {path} exists and is not a scan store (not a Zarr group)") from None
    fmt = attrs.get("format")
    if fmt in _OLD_FORMATS:
        raise ValueError(f"store: {path} was written by an earlier twolayer in the layout {fmt!r} (per-group blobs, "
                         f"not a standard dataset), which this version does not read: run the scan again into a "
                         f"new store (twolayer scan CONFIG --store NEW.zarr), or open it with the twolayer that "
                         "wrote it")
    if fmt != _FORMAT:
        raise ValueError(f"store: {path} is not a twolayer scan store (format {fmt!r}, expected {_FORMAT!r})")
    return attrs


def definition(store: str | Path) -> Scan:
    """The scan definition recorded in a store, its engine read as text (:func:`recorded_engine`: nothing is
    imported); ValueError if its hash does not match the recorded ``scan_hash`` (an edited definition), or if
    the store is of the previous layout or no scan store.

    Parameters
    ----------
    store : str or Path
        The Zarr directory.

    Returns
    -------
    Scan

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     back = tl.scan.store.definition(f"{tmp}/s.zarr")
    >>> back.digest() == sc.digest()
    True
    """
    attrs = _root_attrs(Path(store))
    try:
        data = json.loads(attrs["scan_definition"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"store: {store} holds no readable scan definition") from None
    if not isinstance(data, dict):
        raise ValueError(f"store: {store} holds no readable scan definition")
    with warnings.catch_warnings():  # a store of an older release records old spellings: data, not the caller's
        warnings.simplefilter("ignore", DeprecationWarning)
        scan = Scan.from_dict({**data, "engine": recorded_engine(data.get("engine"))})
    if attrs.get("scan_hash") not in scan.digests():
        raise ValueError(f"store: {store}: the recorded scan definition does not match its hash (edited after it "
                         "was written): the store cannot be trusted; run the scan again into a new store")
    return scan


def _check_coords(store: str | Path, scan: Scan) -> None:
    """The stored coordinates of the scanned parameters equal the definition's values."""
    root = _zarr().open_group(str(store), mode="r", zarr_format=3)
    scanned = _meta(store)["scanned"]
    for name, (_, vals) in scan.coords.items():
        key = scanned.get(name, name)
        try:
            stored = np.asarray(root[key][...])
        except Exception:
            raise ValueError(f"store: {store}: the coordinate {key!r} is missing or unreadable") from None
        expected = np.asarray(coord_values(vals))
        if stored.shape != expected.shape or not np.array_equal(stored.astype(expected.dtype), expected):
            raise ValueError(f"store: {store}: the coordinate {key!r} differs from the recorded scan definition "
                             "(edited after it was written): run the scan again into a new store")


def open_dataset(store: str | Path, verify: bool = True) -> Any:
    """The stored scan, opened lazily with ``xarray.open_zarr`` (Dask-backed) after checks: the format, the
    definition's hash, the coordinates against it, and (``verify``) every finished group's checksum, which reads
    the whole store once, group by group (pass ``verify=False`` to skip that for a large store).

    Parameters
    ----------
    store : str or Path
        The Zarr directory.
    verify : bool, default True
        Check every finished group's values against its checksum (ValueError naming the damaged groups).

    Returns
    -------
    xarray.Dataset
        As :func:`twolayer.scan.run` returns it; configurations not computed read as NaN, -1 or "", with
        ``complete`` False. The stacked runs of a store written before the vocabulary of issue 25
        (dimension ``run``) read with dimension ``member``.

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     ds = tl.scan.open_dataset(f"{tmp}/s.zarr")
    ...     done = bool(ds.complete.all())  # read lazily: while the store exists
    >>> ds.risk.dims, done
    (('lr', 't'), True)
    """
    verify = boolean(verify, "verify")
    scan = definition(store)
    _check_coords(store, scan)
    if verify:
        bad = damaged_groups(store, scan)
        if bad:
            raise ValueError(f"store: {store}: {len(bad)} finished group(s) fail their checksum (a deleted or "
                             f"damaged chunk): g{bad[0]:07d}{', ...' if len(bad) > 1 else ''}; resume the scan "
                             "(resume=True, --resume) to compute them again")
    ds = import_xarray().open_zarr(str(store), consolidated=False, zarr_format=3)  # the metadata itself
    if "run" in ds.dims and "member" not in ds.dims:  # written before the vocabulary (sgd, full_batch)
        ds = ds.rename({"run": "member"})
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
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> g = tl.scan.make_groups(sc)[0]
    >>> part = tl.scan.engines.engine_for("ode").run(list(g.configs))
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
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> asm = tl.scan.store.Assembly(sc)
    >>> asm.add([1], tl.scan.engines.Part({"loss": ((), np.array([2.5]))}))
    >>> asm.dataset().loss.values.tolist()
    [nan, 2.5]
    """

    def __init__(self, scan: Scan) -> None:
        self.scan, self.n, self.n_groups = scan, len(scan), len(group_regions(scan))
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
        xr = import_xarray()
        scan = self.scan
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
                    self._put(_per_config_name(k), dims, _rows(idx),
                              np.broadcast_to(arr, (idx.size, *arr.shape)))
        missing = ~self.written
        if missing.any():
            for out in self.full.values():
                out[missing] = fill_value(out.dtype)
        grid = tuple(scan.dims.values())
        sch = Schema({k: (self.dims[k], v.shape[1:], v.dtype) for k, v in self.full.items()}, shared)
        layout, coords = _layout(scan, sch)
        arrays = {**self.full, "complete": self.written.copy()}
        data = {k: (dims, arrays[k].reshape((*grid, *arrays[k].shape[1:])), attrs)
                for k, (dims, attrs) in layout.items()}
        return xr.Dataset(data, coords=coords, attrs=_dataset_attrs(scan, self.n_groups))
