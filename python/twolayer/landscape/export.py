"""Export of landscape results: JSON (lossless, symmetry-compressed), pandas DataFrames and xarray Datasets.

Handled: :class:`~twolayer.landscape.CriticalPoint`, :class:`~twolayer.landscape.MultistartResult`, families
(the list of :class:`~twolayer.landscape.FamilyPoint` that :func:`~twolayer.landscape.continue_family` returns)
and :class:`~twolayer.landscape.RealKFamily`.

Symmetry compression (:func:`compress_point`): a square weight matrix (with its second layer) is stored as the
block structure of its isotropy -- the :class:`~twolayer.landscape.FixedPointSpace` block sizes and the row and
column orders of :meth:`FixedPointSpace.containing` -- and one value per coordinate of that space (the distinct
values), plus every entry that differs from its coordinate's value (``exceptions``, stored exactly). The
round trip is therefore exact whatever the symmetry (a point of a fixed-point subspace has no exceptions; a
Newton-refined point, symmetric only to ~1e-13, has many unless exported with ``symmetrize=True``, which drops
them and records the largest dropped deviation). Floats are written with 17 significant digits (Python's
``repr``), so JSON reproduces every number bit for bit; NaN and infinities are written as strings.

Versions: :data:`FORMAT` ``twolayer.landscape/2`` stores each network's biases (``bias``, exact) and a
:class:`~twolayer.landscape.MultistartResult`'s ``bias``; documents of ``twolayer.landscape/1`` (no biases) still
load, with zero biases.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import types
import typing
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._validation import as_float_array, boolean, positive, writing
from ..networks import Network, check_network
from ..results import import_xarray
from .critical import CriticalPoint, group_eigenvalues
from .multistart import MultistartResult
from .realk import Crossing, RealKFamily
from .subspace import FamilyPoint
from .symmetry import FixedPointSpace, isotropy

__all__ = ["compress_point", "decompress_point", "to_json", "from_json", "to_dataframe", "to_xarray"]

FORMAT = "twolayer.landscape/2"
"""The version :func:`to_json` writes (2: with biases)."""
FORMATS = ("twolayer.landscape/1", FORMAT)
"""The versions :func:`from_json` reads (1: without biases, read with zero biases)."""
MAX_EXPANDED = 2**27
"""The most float64 values (1 GiB) the block-compressed points of one document may expand to."""
MAX_DEPTH = 32
"""The deepest nesting of JSON containers :func:`from_json` reads (its documents nest about 8 deep)."""
_TYPES: dict[str, type] = {c.__name__: c for c in (CriticalPoint, MultistartResult, RealKFamily, Crossing, FamilyPoint)}


# ------------------------------------------------------------------------------------------------ numbers
def _num(v: float) -> float | str:
    """A float for JSON: finite ones as they are (repr round-trips), others as "nan", "inf", "-inf"."""
    v = float(v)
    return v if math.isfinite(v) else repr(v)


def _nums(x: ArrayLike) -> list[Any]:
    return [_num(v) for v in np.asarray(x, dtype=np.float64).ravel()]


# ------------------------------------------------------------------------------------------ compression
def compress_point(
    W: ArrayLike, a: ArrayLike | None = None, tol: float = 1e-8, symmetrize: bool = False
) -> dict[str, Any]:
    """A weight matrix as block structure + distinct values (JSON-ready).

    Parameters
    ----------
    W : array_like, shape (k, d)
        The first layer.
    a : array_like, shape (k,), optional
        The second layer (compressed with W: row swaps must fix it).
    tol : float, default 1e-8
        Tolerance of the isotropy that defines the blocks.
    symmetrize : bool, default False
        Drop the entries that deviate from their block's value (the point
        becomes exactly symmetric; ``max_deviation`` records the largest
        change, capped at the largest double). False keeps them: the round
        trip is exact.

    Returns
    -------
    dict
        ``shape``; the block structure ``blocks``, ``rows``, ``cols``,
        ``labels``, ``values`` and ``max_deviation`` where W is square with
        an isotropy of diagonal type and enough symmetry; then either
        ``exceptions`` ([i, j, W_ij], i = k for entries of ``a``) or, where
        these would be longer than the point itself or there is no block
        structure, ``dense`` (and ``a``): the exact point.

    Examples
    --------
    >>> W = np.eye(4) + 0.25 * (np.ones((4, 4)) - np.eye(4))
    >>> c = tl.landscape.compress_point(W)
    >>> c["blocks"], c["values"], c["exceptions"]
    ([4], [1.0, 0.25], [])
    >>> bool(np.array_equal(tl.landscape.decompress_point(c)[0], W))
    True
    """
    W_ = as_float_array(W, "W", ndim=2)
    a_ = None if a is None else as_float_array(a, "a", ndim=1, scalar_ok=False)
    return _compress(W_, a_, positive(tol, "tol"), boolean(symmetrize, "symmetrize"))


def _compress(
    W_: NDArray[np.float64], a_: NDArray[np.float64] | None, tol_: float, symmetrize: bool
) -> dict[str, Any]:
    """:func:`compress_point` on checked arrays, non-finite entries allowed (stored dense: failed runs)."""
    k, d = W_.shape
    if a_ is not None and a_.shape[0] != k:
        raise ValueError(f"a: expected length {k} (rows of W), got {a_.shape[0]}")
    out: dict[str, Any] = {"shape": [k, d]}
    dense = {"dense": _nums(W_), **({} if a_ is None else {"a": _nums(a_)})}
    finite = bool(np.all(np.isfinite(W_))) and (a_ is None or bool(np.all(np.isfinite(a_))))
    if k != d or not finite:
        return {**out, **dense}
    iso = isotropy(W_, tol=tol_, a=a_)
    blocks = len(iso.classes) + k - sum(iso.class_sizes)
    if blocks * blocks > k * k // 2 + 1:  # too little symmetry: the block values would not be fewer than W's
        return {**out, **dense}
    try:
        space, rows, cols, x = FixedPointSpace.containing(W_, tol=tol_, train_readout=a_ is not None, a=a_)
    except ValueError:
        return {**out, **dense}
    entry = _coordinate_of_entry(space)
    target = W_[np.ix_(rows, cols)].ravel()
    if a_ is not None:
        target = np.concatenate([target, a_[rows]])
    # each coordinate's value is the most frequent of its own entries, so exactly symmetric points have no
    # exceptions (a mean of equal floats need not be that float) and a few odd entries stay few
    values = np.empty(space.dim)
    for j in range(space.dim):
        u, counts = np.unique(target[entry == j], return_counts=True)
        values[j] = u[np.argmax(counts)]
    rebuilt = values[entry]
    off = np.flatnonzero(rebuilt != target)
    kk = k * k
    exceptions = [] if symmetrize else [
        [int(rows[e // k]), int(cols[e % k]), _num(target[e])] if e < kk else [k, int(rows[e - kk]), _num(target[e])]
        for e in off
    ]
    with np.errstate(over="ignore"):
        deviation = min(float(np.max(np.abs(rebuilt - target), initial=0.0)), float(np.finfo(np.float64).max))
    structure = {"blocks": list(space.sizes), "rows": rows.tolist(), "cols": cols.tolist(), "labels": space.labels,
                 "values": _nums(values), "max_deviation": deviation}
    if 3 * len(exceptions) >= target.size:  # symmetric only to rounding: the dense point is shorter (and exact)
        return {**out, **dense, **structure}
    return {**out, **structure, "exceptions": exceptions}


def _coordinate_of_entry(space: FixedPointSpace) -> NDArray[np.int64]:
    """For every entry of [vec(W), a] the coordinate of ``space`` that carries it (the basis is 0/1 with one 1 per
    row)."""
    return np.asarray(np.argmax(space.basis, axis=1), dtype=np.int64)


def decompress_point(data: dict[str, Any]) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """(W, a) from :func:`compress_point`'s dict (a is None if it was not given).

    The dict is checked before anything is allocated: field types, lengths, index ranges, and the size of a
    block-compressed point (its working arrays, (k^2 + k) x the space's dimension, at most 2**27 float64 values).

    Parameters
    ----------
    data : dict
        From :func:`compress_point` (possibly through JSON).

    Returns
    -------
    W : ndarray, shape (k, d)
    a : ndarray, shape (k,), or None

    Examples
    --------
    >>> W, a = tl.landscape.decompress_point(tl.landscape.compress_point(np.eye(3), np.ones(3)))
    >>> W.shape, a
    ((3, 3), array([1., 1., 1.]))
    """
    return _decompress(data, "data", _Budget())


class _Budget:
    """The float64 values a document may still expand to through block-compressed points (their text is short,
    their arrays are not): checked before each point is built."""

    def __init__(self, total: int = MAX_EXPANDED) -> None:
        self.left = total

    def take(self, n: int, where: str) -> None:
        if n > self.left:
            raise ValueError(f"{where}: the point expands to {n:.4g} float64 values, more than the "
                             f"{MAX_EXPANDED:.4g} (2**27, 1 GiB) a document may expand to")
        self.left -= n


def _fail(where: str, expected: str, got: Any) -> ValueError:
    return ValueError(f"{where}: expected {expected}, got {_clip(got)}")


def _int(v: Any, where: str, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise _fail(where, f"an integer in [{lo}, {hi if hi is not None else 'inf'}]", v)
    return v


def _list(v: Any, where: str, n: int | None = None) -> list[Any]:
    if not isinstance(v, list) or (n is not None and len(v) != n):
        raise _fail(where, "a list" + ("" if n is None else f" of {n} entries"), v)
    return v


def _floats(v: Any, where: str, n: int | None = None) -> NDArray[np.float64]:
    """A JSON list of numbers (non-finite ones as the strings "nan", "inf", "-inf") as float64."""
    out = np.empty(len(_list(v, where, n)))
    for i, x in enumerate(v):
        if isinstance(x, float) or (isinstance(x, int) and not isinstance(x, bool) and abs(x) < 2**1023):
            out[i] = x
        elif x in ("nan", "inf", "-inf"):
            out[i] = float(x)
        else:
            raise _fail(f"{where}[{i}]", "a number (or 'nan', 'inf', '-inf')", x)
    return out


def _permutation(v: Any, where: str, k: int) -> NDArray[np.int64]:
    idx = np.array([_int(x, f"{where}[{i}]", 0, k - 1) for i, x in enumerate(_list(v, where, k))], dtype=np.int64)
    if np.unique(idx).size != k:
        raise _fail(where, f"a permutation of 0..{k - 1}", v)
    return idx


def _decompress(data: Any, where: str, budget: _Budget) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    if not isinstance(data, dict) or "shape" not in data:
        raise _fail(where, "the dict of compress_point (with 'shape')", data)
    k, d = (_int(v, f"{where}.shape[{i}]", 1) for i, v in enumerate(_list(data["shape"], f"{where}.shape", 2)))
    if "dense" in data:
        if k * d != len(_list(data["dense"], f"{where}.dense")):
            raise _fail(f"{where}.dense", f"{k * d} values (shape [{k}, {d}])", f"{len(data['dense'])} values")
        W = _floats(data["dense"], f"{where}.dense").reshape(k, d)
        return W, (_floats(data["a"], f"{where}.a", k) if "a" in data else None)
    if k != d:
        raise ValueError(f"{where}: a block-compressed point must be square, got shape {data['shape']}")
    for key in ("blocks", "rows", "cols", "labels", "values", "exceptions"):
        if key not in data:
            raise ValueError(f"{where}: a block-compressed point needs the field {key!r}")
    sizes = [_int(b, f"{where}.blocks[{i}]", 1, k) for i, b in enumerate(_list(data["blocks"], f"{where}.blocks"))]
    if not sizes or sum(sizes) != k:
        raise _fail(f"{where}.blocks", f"block sizes summing to k = {k}", data["blocks"])
    labels = _list(data["labels"], f"{where}.labels")
    if not all(isinstance(lab, str) for lab in labels):
        raise _fail(f"{where}.labels", "a list of strings", labels)
    has_a = any(lab.startswith("a[") for lab in labels)
    r = len(sizes)
    dim = sum(1 + (s >= 2) for s in sizes) + r * (r - 1) + (r if has_a else 0)
    budget.take((k * k + k) * (dim + 1), where)
    values = _floats(data["values"], f"{where}.values", dim)
    rows, cols = _permutation(data["rows"], f"{where}.rows", k), _permutation(data["cols"], f"{where}.cols", k)
    space = FixedPointSpace(tuple(sizes), train_readout=has_a)
    if space.labels != labels:
        raise _fail(f"{where}.labels", f"the labels of blocks {sizes} ({_clip(space.labels)})", labels)
    flat = values[_coordinate_of_entry(space)]
    W = np.empty((k, k))
    W[np.ix_(rows, cols)] = flat[: k * k].reshape(k, k)
    a = None
    if has_a:
        a = np.empty(k)
        a[rows] = flat[k * k:]
    for n, e in enumerate(_list(data["exceptions"], f"{where}.exceptions")):
        i, j, v = _list(e, f"{where}.exceptions[{n}]", 3)
        i_ = _int(i, f"{where}.exceptions[{n}][0]", 0, k if has_a else k - 1)
        j_ = _int(j, f"{where}.exceptions[{n}][1]", 0, k - 1)
        value = float(_floats([v], f"{where}.exceptions[{n}][2]")[0])
        if i_ == k:
            assert a is not None
            a[j_] = value
        else:
            W[i_, j_] = value
    return W, a


# ------------------------------------------------------------------------------------------------ JSON
def _encode(v: Any, symmetrize: bool) -> Any:
    if isinstance(v, Network):
        check_network(v, "network", biases=True)
        return {"__network__": {"activation": v.activation, "scaling": v.scaling, "readout": v.readout,
                                "point": _compress(v.W, v.a, 1e-8, symmetrize), "bias": _nums(v.bias)}}
    if isinstance(v, MultistartResult):
        fields = {f.name: _encode(getattr(v, f.name), symmetrize) for f in dataclasses.fields(v)
                  if f.name not in ("W", "a")}
        fields["points"] = [_compress(np.asarray(W, dtype=np.float64), np.asarray(a, dtype=np.float64), 1e-8,
                                      symmetrize) for W, a in zip(v.W, v.a, strict=True)]
        return {"__type__": "MultistartResult", "shape": list(v.W.shape), "fields": fields}
    if dataclasses.is_dataclass(v) and not isinstance(v, type) and type(v).__name__ in _TYPES:
        return {"__type__": type(v).__name__,
                "fields": {f.name: _encode(getattr(v, f.name), symmetrize) for f in dataclasses.fields(v)}}
    if isinstance(v, np.ndarray):
        kind = "int" if np.issubdtype(v.dtype, np.integer) else "bool" if v.dtype == bool else "float"
        data = v.ravel().tolist() if kind != "float" else _nums(v)
        return {"__array__": kind, "shape": list(v.shape), "data": data}
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return v if math.isfinite(v) else {"__float__": repr(float(v))}
    if isinstance(v, tuple):
        return {"__tuple__": [_encode(x, symmetrize) for x in v]}
    if isinstance(v, list):
        return [_encode(x, symmetrize) for x in v]
    if isinstance(v, dict):
        return {"__dict__": [[_encode(key, symmetrize), _encode(x, symmetrize)] for key, x in v.items()]}
    if v is None or isinstance(v, str):
        return v
    raise TypeError(f"cannot export a {type(v).__name__}")


def _decode(v: Any, where: str, budget: _Budget) -> Any:
    """A decoded JSON value back to the objects :func:`_encode` wrote, checked field by field (``where``: the path
    in the document, for the messages)."""
    if isinstance(v, list):
        return [_decode(x, f"{where}[{i}]", budget) for i, x in enumerate(v)]
    if not isinstance(v, dict):
        return v
    if "__network__" in v:
        n = v["__network__"]
        if not isinstance(n, dict) or set(n) - {"bias"} != {"activation", "scaling", "readout", "point"}:
            raise _fail(f"{where}.__network__", "a dict of activation, scaling, readout, point (and bias)", n)
        W, a = _decompress(n["point"], f"{where}.__network__.point", budget)
        bias = _floats(n["bias"], f"{where}.__network__.bias", W.shape[0]) if "bias" in n else None
        try:
            return Network(W, a, n["activation"], scaling=n["scaling"], readout=n["readout"], bias=bias)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}.__network__: {exc}") from None
    if "__type__" in v:
        return _decode_dataclass(v, where, budget)
    if "__array__" in v:
        return _decode_array(v, where)
    if set(v) == {"__float__"} and v["__float__"] in ("nan", "inf", "-inf"):
        return float(v["__float__"])
    if set(v) == {"__tuple__"}:
        return tuple(_decode(x, f"{where}.__tuple__[{i}]", budget)
                     for i, x in enumerate(_list(v["__tuple__"], f"{where}.__tuple__")))
    if set(v) == {"__dict__"}:
        entries = _list(v["__dict__"], f"{where}.__dict__")
        pairs = [_list(kv, f"{where}.__dict__[{i}]", 2) for i, kv in enumerate(entries)]
        out = {}
        for i, (key, x) in enumerate(pairs):
            if not isinstance(key, (str, int, float)) or isinstance(key, bool):
                raise _fail(f"{where}.__dict__[{i}][0]", "a string or number key", key)
            out[key] = _decode(x, f"{where}.__dict__[{i}][1]", budget)
        return out
    raise ValueError(f"{where}: unexpected object with keys {sorted(v)[:5]}")


def _decode_array(v: dict[str, Any], where: str) -> NDArray[Any]:
    kind = v["__array__"]
    if kind not in ("int", "bool", "float") or set(v) != {"__array__", "shape", "data"}:
        raise _fail(where, "an array {'__array__': 'int' | 'bool' | 'float', 'shape', 'data'}", v)
    shape = tuple(_int(x, f"{where}.shape[{i}]", 0) for i, x in enumerate(_list(v["shape"], f"{where}.shape")))
    size = math.prod(shape)
    data = _list(v["data"], f"{where}.data")
    if len(data) != size:
        raise _fail(f"{where}.data", f"{size} values (shape {list(shape)})", f"{len(data)} values")
    if kind == "float":
        return _floats(data, f"{where}.data").reshape(shape)
    is_int = kind == "int"
    for i, x in enumerate(data):
        if not isinstance(x, bool if not is_int else int) or (is_int and isinstance(x, bool)):
            raise _fail(f"{where}.data[{i}]", "an integer" if is_int else "true or false", x)
        if is_int and not -(2**63) <= x < 2**63:
            raise _fail(f"{where}.data[{i}]", "an integer of 64 bits", x)
    return np.array(data, dtype=np.int64 if is_int else bool).reshape(shape)


def _decode_dataclass(v: dict[str, Any], where: str, budget: _Budget) -> Any:
    name = v["__type__"]
    cls = _TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"{where}.__type__: unknown type {_clip(name)}")
    raw = v.get("fields")
    if not isinstance(raw, dict):
        raise _fail(f"{where}.fields", "a dict of the fields", raw)
    if "loss" in raw and "risk" not in raw:  # written by an older release
        raw = {("risk" if key == "loss" else key): x for key, x in raw.items()}
    hints = typing.get_type_hints(cls)
    extra = set(raw) - set(hints) - ({"points"} if cls is MultistartResult else set())
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING} - ({"W", "a"} if cls is MultistartResult else set())
    if extra or required - set(raw):
        raise ValueError(f"{where}.fields: a {name} has the fields {sorted(hints)}; unknown {sorted(extra)}, "
                         f"missing {sorted(required - set(raw))}")
    fields = {key: _conform(_decode(x, f"{where}.{key}", budget), hints[key], f"{where}.{key}")
              for key, x in raw.items() if key != "points"}
    if cls is MultistartResult:
        runs, n, d = (_int(x, f"{where}.shape[{i}]", 0) for i, x in enumerate(_list(v.get("shape"), f"{where}.shape",
                                                                                     3)))
        pts = [_decompress(p, f"{where}.points[{i}]", budget)
               for i, p in enumerate(_list(raw.get("points"), f"{where}.points", runs))]
        for i, (W, a) in enumerate(pts):
            if W.shape != (n, d) or a is None or a.shape != (n,):
                raise _fail(f"{where}.points[{i}]", f"a point of shape ({n}, {d}) with a second layer",
                            f"shape {W.shape}")
        fields["W"] = np.array([W for W, _ in pts], dtype=np.float64).reshape(runs, n, d)
        fields["a"] = np.array([a for _, a in pts], dtype=np.float64).reshape(runs, n)
        if fields.get("bias") is not None and fields["bias"].shape != (runs, n):
            raise _fail(f"{where}.bias", f"shape ({runs}, {n}) like a", f"shape {fields['bias'].shape}")
    _check_shapes(cls, fields, where)
    return cls(**fields)


def _conform(x: Any, hint: Any, where: str) -> Any:
    """``x`` if it is of the annotated type ``hint`` (floats may come as JSON integers), else ValueError."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is object:
        return x
    if origin in (types.UnionType, typing.Union):
        if x is None and type(None) in args:
            return None
        return _conform(x, next(a for a in args if a is not type(None)), where)
    if hint is float and isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    if hint is int and isinstance(x, int) and not isinstance(x, bool):
        return x
    if hint in (bool, str) and type(x) is hint:
        return x
    if origin is np.ndarray:
        kind = "f" if typing.get_args(args[1])[0] is np.float64 else "i"
        if isinstance(x, np.ndarray) and x.dtype.kind == kind:
            return x
    elif origin is list and isinstance(x, list):
        return [_conform(e, args[0], f"{where}[{i}]") for i, e in enumerate(x)]
    elif origin is tuple and isinstance(x, tuple) and len(x) == len(args):
        return tuple(_conform(e, a, f"{where}[{i}]") for i, (e, a) in enumerate(zip(x, args, strict=True)))
    elif origin is dict and isinstance(x, dict):
        return {_conform(key, args[0], f"{where} key"): _conform(e, args[1], f"{where}[{key!r}]")
                for key, e in x.items()}
    elif origin is None and isinstance(hint, type) and hint not in (float, int, bool, str) and isinstance(x, hint):
        return x
    what = getattr(hint, "__name__", None) if origin is None else None
    if origin is np.ndarray:
        what = f"an array of {'floats' if kind == 'f' else 'integers'}"
    raise _fail(where, what or str(hint).replace("numpy.", "np."), x)


# per dataclass: (the field that sets the length n, {field: ndim}) -- every listed array (and list) is n long
_SHAPES: dict[type, tuple[str | None, dict[str, int]]] = {
    CriticalPoint: (None, {"eigenvalues": 1, "flat_eigenvalues": 1}),
    FamilyPoint: (None, {"x": 1}),
    MultistartResult: ("W", {"W": 3, "a": 2, "risk": 1, "grad_norm": 1, "index": 1, "iterations": 1, "kind": 1,
                             "isotropy": 1, "status": 1, "bias": 2}),
    RealKFamily: ("k", {"k": 1, "sizes": 2, "x": 2, "risk": 1, "grad_norm": 1, "index": 1}),
}


def _check_shapes(cls: type, fields: dict[str, Any], where: str) -> None:
    lead, ndims = _SHAPES.get(cls, (None, {}))
    n = None if lead is None else len(fields[lead])
    for key, ndim in ndims.items():
        if fields.get(key) is None:  # absent, or an optional field that is None (a MultistartResult's bias)
            continue
        x = fields[key]
        got = (len(x),) if isinstance(x, list) else x.shape
        if len(got) != ndim or (n is not None and got[0] != n):
            raise _fail(f"{where}.{key}", f"{ndim}-d with {n} rows" if n is not None else f"a {ndim}-d array",
                        f"shape {got}")
    if cls is RealKFamily:
        for table, ndim in (("eigenvalues", 2), ("dimension", 1)):
            for key, x in fields[table].items():
                if x.ndim != ndim or x.shape[0] != n:
                    raise _fail(f"{where}.{table}[{key!r}]", f"{ndim}-d with {n} rows", f"shape {x.shape}")


def to_json(result: Any, path: str | Path | None = None, symmetrize: bool = False) -> str:
    """A landscape result as JSON (lossless unless ``symmetrize``).

    Parameters
    ----------
    result : CriticalPoint, MultistartResult, RealKFamily, FamilyPoint or list of FamilyPoint
        What to export.
    path : str or Path, optional
        Also write the text there.
    symmetrize : bool, default False
        Store weight matrices exactly symmetric (see :func:`compress_point`).

    Returns
    -------
    str

    Examples
    --------
    >>> teacher = tl.landscape.identity_teacher(3)
    >>> cp = tl.landscape.refine(teacher.with_weights(np.eye(3) + 1e-3), teacher)
    >>> back = tl.landscape.from_json(tl.landscape.to_json(cp))
    >>> back.kind, bool(np.array_equal(back.student.W, cp.student.W))
    ('global minimum', True)
    """
    symmetrize = boolean(symmetrize, "symmetrize")
    if not (isinstance(result, (CriticalPoint, MultistartResult, RealKFamily, FamilyPoint))
            or (isinstance(result, list) and all(isinstance(p, FamilyPoint) for p in result))):
        raise TypeError("result: expected a CriticalPoint, MultistartResult, RealKFamily, FamilyPoint or a list "
                        f"of FamilyPoint, got {type(result).__name__}")
    text = json.dumps({"format": FORMAT, "result": _encode(result, symmetrize)}, allow_nan=False)
    if path is not None:
        with writing(path):
            Path(path).write_text(text, encoding="utf-8")
    return text


def from_json(text: str | Path) -> Any:
    """The result that :func:`to_json` wrote.

    A document is data from anywhere: it is checked before anything is built -- nesting (at most
    :data:`MAX_DEPTH` levels), every field against its annotated type and the lengths of per-run arrays, and the
    total size block-compressed points expand to (:data:`MAX_EXPANDED` float64 values) -- and a bad one raises a
    ValueError naming the field (``text: result.fields...``).

    Parameters
    ----------
    text : str or Path
        The JSON text, or a path (a ``Path``, or a string not starting with
        ``{``) to a file holding it.

    Returns
    -------
    CriticalPoint, MultistartResult, RealKFamily, FamilyPoint or list of FamilyPoint

    Examples
    --------
    >>> res = tl.landscape.multistart(3, runs=2, seed=0)
    >>> back = tl.landscape.from_json(tl.landscape.to_json(res))
    >>> back.kind, bool(np.array_equal(back.W, res.W))
    (['global minimum', 'global minimum'], True)
    """
    if isinstance(text, Path) or (isinstance(text, str) and not text.lstrip().startswith("{")):
        try:
            text = Path(text).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"text: neither JSON text nor a readable file: {_clip(text)} ({exc})") from None
    if not isinstance(text, str):
        raise TypeError(f"text: expected JSON text or a path, got {type(text).__name__}")
    try:
        data = json.loads(text)  # JSONDecodeError is a ValueError
    except RecursionError:
        raise ValueError(f"text: nested deeper than the {MAX_DEPTH} levels a {FORMAT!r} document uses") from None
    if not isinstance(data, dict) or data.get("format") not in FORMATS or "result" not in data:
        raise ValueError(f"text: expected a document from to_json (format {' or '.join(map(repr, FORMATS))})")
    _check_depth(data)
    result = _decode(data["result"], "text: result", _Budget())
    if not (isinstance(result, (CriticalPoint, MultistartResult, RealKFamily, FamilyPoint))
            or (isinstance(result, list) and all(isinstance(p, FamilyPoint) for p in result))):
        raise ValueError("text: result: expected a CriticalPoint, MultistartResult, RealKFamily, FamilyPoint or a "
                         f"list of FamilyPoint, got {_clip(result)}")
    return result


def _check_depth(data: Any) -> None:
    """Refuse documents nested deeper than :data:`MAX_DEPTH` (before the recursive decoder sees them)."""
    stack = [(data, 1)]
    while stack:
        x, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ValueError(f"text: nested deeper than the {MAX_DEPTH} levels a {FORMAT!r} document uses")
        if isinstance(x, dict):
            stack.extend((y, depth + 1) for y in x.values())
        elif isinstance(x, list):
            stack.extend((y, depth + 1) for y in x)


def _clip(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 80 else r[:77] + "..."


# ------------------------------------------------------------------------------------- tables and datasets
def _family_rows(family: list[FamilyPoint]) -> dict[str, Any]:
    n_x = max((p.x.size for p in family), default=0)
    cols: dict[str, Any] = {
        "k": [p.k for p in family], "risk": [p.risk for p in family], "kind": [p.point.kind for p in family],
        "index": [p.point.index for p in family], "nullity": [p.point.nullity for p in family],
        "grad_norm": [p.point.grad_norm for p in family], "isotropy": [p.isotropy for p in family],
        "lambda_min": [float(p.point.eigenvalues[0]) if p.point.eigenvalues.size else np.nan for p in family],
    }
    for j in range(n_x):
        cols[f"x{j}"] = [float(p.x[j]) if j < p.x.size else np.nan for p in family]
    return cols


def _check_family(result: Any) -> list[FamilyPoint] | None:
    if isinstance(result, list) and result and all(isinstance(p, FamilyPoint) for p in result):
        return result
    return None


def _real_k_attrs(fam: RealKFamily) -> dict[str, Any]:
    return {"k_turn": None if fam.k_turn is None else float(fam.k_turn), "status": fam.status,
            "message": fam.message, "n_steps": int(fam.n_steps)}


def _real_k_frame(pd: Any, fam: RealKFamily) -> Any:
    """One row per k: sizes, risk, grad_norm, index, x, every component's eigenvalues, dimension and flat ones."""
    cols: dict[str, Any] = {"k": fam.k}
    for b in range(fam.sizes.shape[1]):
        cols[f"size{b}"] = fam.sizes[:, b]
    cols.update({"risk": fam.risk, "grad_norm": fam.grad_norm, "index": fam.index})
    for j in range(fam.x.shape[1]):
        cols[f"x{j}"] = fam.x[:, j]
    for name, lam in fam.eigenvalues.items():
        for j in range(lam.shape[1]):
            cols[f"{name}:{j}"] = lam[:, j]
        cols[f"dim:{name}"] = fam.dimension[name]
    for name, lam in fam.flat_eigenvalues.items():
        for j in range(lam.shape[1]):
            cols[f"flat:{name}:{j}"] = lam[:, j]
    df = pd.DataFrame(cols)
    df.attrs.update(_real_k_attrs(fam))
    df.attrs["crossings"] = [dataclasses.asdict(c) for c in fam.crossings]
    return df


def _real_k_dataset(xr: Any, fam: RealKFamily) -> Any:
    """Dimensions k, block, coord, component (every isotypic component), eigen and flat (NaN-padded), crossing."""
    names = list(fam.eigenvalues)

    def padded(values: dict[str, NDArray[np.float64]]) -> NDArray[np.float64]:
        width = max((lam.shape[1] for lam in values.values()), default=0)
        out = np.full((fam.k.size, len(names), width), np.nan)
        for c, name in enumerate(names):
            lam = values.get(name, np.empty((fam.k.size, 0)))
            out[:, c, : lam.shape[1]] = lam
        return out

    eig = padded(fam.eigenvalues)
    dim = np.stack([fam.dimension[n] for n in names], axis=1) if names else np.empty((fam.k.size, 0))
    cr = fam.crossings
    attrs = {key: v for key, v in _real_k_attrs(fam).items() if v is not None}
    return xr.Dataset(
        {"sizes": (("k", "block"), fam.sizes), "risk": ("k", fam.risk), "grad_norm": ("k", fam.grad_norm),
         "index": ("k", fam.index), "x": (("k", "coord"), fam.x),
         "eigenvalues": (("k", "component", "eigen"), eig), "dimension": (("k", "component"), dim),
         "flat_eigenvalues": (("k", "component", "flat"), padded(fam.flat_eigenvalues)),
         "crossing_k": ("crossing", np.array([c.k for c in cr], dtype=np.float64)),
         "crossing_component": ("crossing", np.array([c.component for c in cr], dtype=str)),
         "crossing_position": ("crossing", np.array([c.position for c in cr], dtype=np.int64)),
         "negative_before": ("crossing", np.array([c.negative_before for c in cr], dtype=np.int64)),
         "negative_after": ("crossing", np.array([c.negative_after for c in cr], dtype=np.int64))},
        coords={"k": fam.k, "component": np.array(names, dtype=str)}, attrs=attrs)


def to_dataframe(result: Any) -> Any:
    """A landscape result as a pandas DataFrame (needs pandas: the xarray extra).

    One row per run (MultistartResult), per k (a family; RealKFamily:
    columns ``k``, ``size{b}``, ``risk``, ``grad_norm``, ``index``,
    ``x{j}``, and for every isotypic component ``{component}:{j}`` (its
    eigenvalues), ``dim:{component}`` and ``flat:{component}:{j}`` (its
    eigenvalues along the rescaling orbit, if any)), or per distinct eigenvalue
    (CriticalPoint: columns ``eigenvalue``, ``multiplicity``, ``part`` =
    "transverse" or "flat").

    Parameters
    ----------
    result : CriticalPoint, MultistartResult, RealKFamily or list of FamilyPoint
        What to tabulate.

    Returns
    -------
    pandas.DataFrame
        The call's parameters (MultistartResult.meta; RealKFamily's
        k_turn, status, message, steps and crossings as dicts) in ``attrs``.

    Examples
    --------
    >>> df = tl.landscape.to_dataframe(tl.landscape.multistart(3, runs=2, seed=0))
    >>> list(df.columns)
    ['kind', 'risk', 'grad_norm', 'index', 'isotropy', 'status', 'iterations']
    """
    try:
        pd = importlib.import_module("pandas")  # untyped without pandas-stubs
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("to_dataframe needs pandas: pip install 'twolayer[xarray]'") from exc
    family = _check_family(result)
    if isinstance(result, MultistartResult):
        df = pd.DataFrame({"kind": result.kind, "risk": result.risk, "grad_norm": result.grad_norm,
                           "index": result.index, "isotropy": result.isotropy, "status": result.status,
                           "iterations": result.iterations})
        df.index.name = "member"
        df.attrs.update(result.meta)
        return df
    if family is not None:
        return pd.DataFrame(_family_rows(family))
    if isinstance(result, RealKFamily):
        return _real_k_frame(pd, result)
    if isinstance(result, CriticalPoint):
        rows = [(v, m, "transverse") for v, m in result.spectrum()] + [
            (v, m, "flat") for v, m in group_eigenvalues(result.flat_eigenvalues, 1e-7)]
        df = pd.DataFrame(rows, columns=["eigenvalue", "multiplicity", "part"])
        df.attrs.update({"kind": result.kind, "risk": result.risk, "index": result.index})
        return df
    raise TypeError(f"result: expected a CriticalPoint, MultistartResult, RealKFamily or a list of FamilyPoint, "
                    f"got {type(result).__name__}")


def to_xarray(result: Any) -> Any:
    """A landscape result as an xarray Dataset (needs the xarray extra).

    MultistartResult: dimensions ``member`` (the runs), ``unit``, ``input`` (W, a
    and the per-run classification); a family: dimension ``k`` (and ``coord`` for x,
    ``eigen`` for the spectra, NaN-padded); RealKFamily: ``k``, ``block``,
    ``coord``, ``component`` (every isotypic component), ``eigen`` and
    ``flat`` (``eigenvalues`` and ``flat_eigenvalues``, NaN-padded) and
    ``crossing``; CriticalPoint: ``unit``, ``input``, ``eigen``, ``flat``.

    Parameters
    ----------
    result : CriticalPoint, MultistartResult, RealKFamily or list of FamilyPoint
        What to convert.

    Returns
    -------
    xarray.Dataset

    Examples
    --------
    >>> ds = tl.landscape.to_xarray(tl.landscape.multistart(3, runs=2, seed=0))
    >>> dict(ds.sizes)
    {'member': 2, 'unit': 3, 'input': 3}
    """
    xr = import_xarray()
    family = _check_family(result)
    if isinstance(result, MultistartResult):
        attrs = {k: (int(v) if isinstance(v, bool) else v) for k, v in result.meta.items()
                 if isinstance(v, (int, float, str))}
        bias: dict[str, Any] = {} if result.bias is None else {"bias": (("member", "unit"), result.bias)}
        return xr.Dataset(
            {"W": (("member", "unit", "input"), result.W), "a": (("member", "unit"), result.a), **bias,
             "risk": ("member", result.risk), "grad_norm": ("member", result.grad_norm),
             "index": ("member", result.index), "kind": ("member", np.array(result.kind, dtype=str)),
             "isotropy": ("member", np.array(result.isotropy, dtype=str)),
             "status": ("member", np.array(result.status, dtype=str)), "iterations": ("member", result.iterations)},
            attrs=attrs)
    if family is not None:
        cols = _family_rows(family)
        n_eig = max(p.point.eigenvalues.size for p in family)
        eig = np.full((len(family), n_eig), np.nan)
        for i, p in enumerate(family):
            eig[i, : p.point.eigenvalues.size] = p.point.eigenvalues
        xs = np.array([[cols[f"x{j}"][i] for j in range(sum(c.startswith("x") for c in cols))]
                       for i in range(len(family))])
        data = {name: ("k", np.asarray(v, dtype=str) if isinstance(v[0], str) else np.asarray(v))
                for name, v in cols.items() if name != "k" and not name.startswith("x")}
        return xr.Dataset({**data, "x": (("k", "coord"), xs), "eigenvalues": (("k", "eigen"), eig)},
                          coords={"k": np.asarray(cols["k"])})
    if isinstance(result, RealKFamily):
        return _real_k_dataset(xr, result)
    if isinstance(result, CriticalPoint):
        s = result.student
        bias_: dict[str, Any] = {"bias": ("unit", s.bias)} if s.has_bias or result.train_bias else {}
        return xr.Dataset({"W": (("unit", "input"), s.W), "a": ("unit", s.a), **bias_,
                           "eigenvalues": ("eigen", result.eigenvalues),
                           "flat_eigenvalues": ("flat", result.flat_eigenvalues)},
                          attrs={"kind": result.kind, "risk": result.risk, "grad_norm": result.grad_norm,
                                 "index": result.index, "nullity": result.nullity, "activation": s.activation,
                                 "train_readout": int(result.train_readout),
                                 **({"train_bias": 1} if result.train_bias else {})})
    raise TypeError(f"result: expected a CriticalPoint, MultistartResult, RealKFamily or a list of FamilyPoint, "
                    f"got {type(result).__name__}")
