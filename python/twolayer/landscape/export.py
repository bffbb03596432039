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
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._validation import as_float_array, boolean, positive
from ..networks import Network
from .critical import CriticalPoint, _group
from .multistart import MultistartResult
from .realk import Crossing, RealKFamily
from .subspace import FamilyPoint
from .symmetry import FixedPointSpace, isotropy

__all__ = ["compress_point", "decompress_point", "to_json", "from_json", "to_dataframe", "to_xarray"]

FORMAT = "twolayer.landscape/1"
_TYPES: dict[str, type] = {c.__name__: c for c in (CriticalPoint, MultistartResult, RealKFamily, Crossing, FamilyPoint)}


# ------------------------------------------------------------------------------------------------ numbers
def _num(v: float) -> float | str:
    """A float for JSON: finite ones as they are (repr round-trips), others as "nan", "inf", "-inf"."""
    v = float(v)
    return v if math.isfinite(v) else repr(v)


def _unnum(v: float | str | int) -> float:
    return float(v)


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
    if not isinstance(data, dict) or "shape" not in data:
        raise ValueError("data: expected the dict of compress_point (with 'shape')")
    try:
        return _decompress(data)
    except (KeyError, IndexError, TypeError, AttributeError, AssertionError, ValueError) as exc:
        if str(exc).startswith("data:"):
            raise
        raise ValueError(f"data: not a valid compress_point dict ({type(exc).__name__}: {exc})") from None


def _decompress(data: dict[str, Any]) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    k, d = (int(v) for v in data["shape"])
    if k < 1 or d < 1:
        raise ValueError(f"data: expected a positive shape, got {data['shape']}")
    if "dense" in data:
        W = np.array([_unnum(v) for v in data["dense"]], dtype=np.float64).reshape(k, d)
        a = np.array([_unnum(v) for v in data["a"]], dtype=np.float64) if "a" in data else None
        return W, a
    if k != d:
        raise ValueError(f"data: a block-compressed point must be square, got shape {data['shape']}")
    has_a = any(lab.startswith("a[") for lab in data["labels"])
    space = FixedPointSpace(tuple(int(s) for s in data["blocks"]), train_readout=has_a)
    values = np.array([_unnum(v) for v in data["values"]], dtype=np.float64)
    flat = values[_coordinate_of_entry(space)]
    rows, cols = np.asarray(data["rows"], dtype=np.int64), np.asarray(data["cols"], dtype=np.int64)
    W = np.empty((k, k))
    W[np.ix_(rows, cols)] = flat[: k * k].reshape(k, k)
    a = None
    if has_a:
        a = np.empty(k)
        a[rows] = flat[k * k:]
    for i, j, v in data["exceptions"]:
        if int(i) == k:
            assert a is not None
            a[int(j)] = _unnum(v)
        else:
            W[int(i), int(j)] = _unnum(v)
    return W, a


# ------------------------------------------------------------------------------------------------ JSON
def _encode(v: Any, symmetrize: bool) -> Any:
    if isinstance(v, Network):
        return {"__network__": {"activation": v.activation, "scaling": v.scaling, "readout": v.readout,
                                "point": _compress(v.W, v.a, 1e-8, symmetrize)}}
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


def _decode(v: Any) -> Any:
    if isinstance(v, list):
        return [_decode(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "__network__" in v:
        n = v["__network__"]
        W, a = decompress_point(n["point"])
        return Network(W, a, n["activation"], scaling=n["scaling"], readout=n["readout"])
    if "__type__" in v:
        cls = _TYPES.get(v["__type__"])
        if cls is None:
            raise ValueError(f"text: unknown type {v['__type__']!r}")
        fields = {name: _decode(x) for name, x in v["fields"].items() if name != "points"}
        if cls is MultistartResult:
            pts = [decompress_point(p) for p in v["fields"]["points"]]
            shape = tuple(int(s) for s in v["shape"])
            fields["W"] = np.array([W for W, _ in pts], dtype=np.float64).reshape(shape)
            fields["a"] = np.array([a for _, a in pts], dtype=np.float64).reshape(shape[:2])
        return cls(**fields)
    if "__array__" in v:
        dtype = {"int": np.int64, "bool": bool, "float": np.float64}[v["__array__"]]
        data = [_unnum(x) for x in v["data"]] if dtype is np.float64 else v["data"]
        return np.array(data, dtype=dtype).reshape(tuple(int(s) for s in v["shape"]))
    if "__float__" in v:
        return float(v["__float__"])
    if "__tuple__" in v:
        return tuple(_decode(x) for x in v["__tuple__"])
    if "__dict__" in v:
        return {_decode(key): _decode(x) for key, x in v["__dict__"]}
    raise ValueError(f"text: unexpected object with keys {sorted(v)[:5]}")


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
        Path(path).write_text(text, encoding="utf-8")
    return text


def from_json(text: str | Path) -> Any:
    """The result that :func:`to_json` wrote.

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
    data = json.loads(text)  # JSONDecodeError is a ValueError
    if not isinstance(data, dict) or data.get("format") != FORMAT or "result" not in data:
        raise ValueError(f"text: expected a {FORMAT!r} document from to_json")
    try:
        return _decode(data["result"])
    except (KeyError, IndexError, AttributeError, AssertionError) as exc:
        raise ValueError(f"text: malformed {FORMAT!r} document ({type(exc).__name__}: {exc})") from None


def _clip(x: Any) -> str:
    r = repr(x)
    return r if len(r) <= 80 else r[:77] + "..."


# ------------------------------------------------------------------------------------- tables and datasets
def _family_rows(family: list[FamilyPoint]) -> dict[str, Any]:
    n_x = max((p.x.size for p in family), default=0)
    cols: dict[str, Any] = {
        "k": [p.k for p in family], "loss": [p.loss for p in family], "kind": [p.point.kind for p in family],
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
            "message": fam.message, "steps": int(fam.steps)}


def _real_k_frame(pd: Any, fam: RealKFamily) -> Any:
    """One row per k: sizes, loss, grad_norm, index, x, every component's eigenvalues, dimension and flat ones."""
    cols: dict[str, Any] = {"k": fam.k}
    for b in range(fam.sizes.shape[1]):
        cols[f"size{b}"] = fam.sizes[:, b]
    cols.update({"loss": fam.loss, "grad_norm": fam.grad_norm, "index": fam.index})
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
        {"sizes": (("k", "block"), fam.sizes), "loss": ("k", fam.loss), "grad_norm": ("k", fam.grad_norm),
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
    columns ``k``, ``size{b}``, ``loss``, ``grad_norm``, ``index``,
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
    ['kind', 'loss', 'grad_norm', 'index', 'isotropy', 'status', 'iterations']
    """
    try:
        pd = importlib.import_module("pandas")  # untyped without pandas-stubs
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("to_dataframe needs pandas: pip install 'twolayer[xarray]'") from exc
    family = _check_family(result)
    if isinstance(result, MultistartResult):
        df = pd.DataFrame({"kind": result.kind, "loss": result.loss, "grad_norm": result.grad_norm,
                           "index": result.index, "isotropy": result.isotropy, "status": result.status,
                           "iterations": result.iterations})
        df.index.name = "run"
        df.attrs.update(result.meta)
        return df
    if family is not None:
        return pd.DataFrame(_family_rows(family))
    if isinstance(result, RealKFamily):
        return _real_k_frame(pd, result)
    if isinstance(result, CriticalPoint):
        rows = [(v, m, "transverse") for v, m in result.spectrum()] + [
            (v, m, "flat") for v, m in _group(result.flat_eigenvalues, 1e-7)]
        df = pd.DataFrame(rows, columns=["eigenvalue", "multiplicity", "part"])
        df.attrs.update({"kind": result.kind, "loss": result.loss, "index": result.index})
        return df
    raise TypeError(f"result: expected a CriticalPoint, MultistartResult, RealKFamily or a list of FamilyPoint, "
                    f"got {type(result).__name__}")


def to_xarray(result: Any) -> Any:
    """A landscape result as an xarray Dataset (needs the xarray extra).

    MultistartResult: dimensions ``run``, ``unit``, ``input`` (W, a and the
    per-run classification); a family: dimension ``k`` (and ``coord`` for x,
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
    {'run': 2, 'unit': 3, 'input': 3}
    """
    try:
        import xarray as xr
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("to_xarray needs xarray: pip install 'twolayer[xarray]'") from exc
    family = _check_family(result)
    if isinstance(result, MultistartResult):
        attrs = {k: (int(v) if isinstance(v, bool) else v) for k, v in result.meta.items()
                 if isinstance(v, (int, float, str))}
        return xr.Dataset(
            {"W": (("run", "unit", "input"), result.W), "a": (("run", "unit"), result.a),
             "loss": ("run", result.loss), "grad_norm": ("run", result.grad_norm), "index": ("run", result.index),
             "kind": ("run", np.array(result.kind, dtype=str)),
             "isotropy": ("run", np.array(result.isotropy, dtype=str)),
             "status": ("run", np.array(result.status, dtype=str)), "iterations": ("run", result.iterations)},
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
        return xr.Dataset({"W": (("unit", "input"), s.W), "a": ("unit", s.a),
                           "eigenvalues": ("eigen", result.eigenvalues),
                           "flat_eigenvalues": ("flat", result.flat_eigenvalues)},
                          attrs={"kind": result.kind, "loss": result.loss, "grad_norm": result.grad_norm,
                                 "index": result.index, "nullity": result.nullity, "activation": s.activation,
                                 "train_readout": int(result.train_readout)})
    raise TypeError(f"result: expected a CriticalPoint, MultistartResult, RealKFamily or a list of FamilyPoint, "
                    f"got {type(result).__name__}")
