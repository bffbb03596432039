"""A scan definition: plain data (a dict, or a TOML file) naming an engine, its constant parameters and the axes
to scan, checked in full before anything runs.

Layout (the same keys in Python and TOML)::

    engine = "ode"                 # "ode", "sgd", "descend", "multistart" (or, trusted: "package.module:function")
    group_size = 1000              # optional: most configurations per group (one engine call, one stored chunk)
    store = "plateau.zarr"         # optional (TOML only): where `twolayer scan` writes, inside the file's directory
    [constants]                    # parameters shared by every configuration
    activation = "erf"
    t_max = 100.0
    [axes]                         # a Cartesian product: one dimension per axis, in this order
    lr = [0.5, 1.0, 2.0]
    d = [100, 1000]
    [zip.size]                     # zipped axes: one dimension ("size") along which K and M move together
    K = [1, 2, 4]
    M = [1, 2, 4]

The ODE engine's ``regime = "large_batch"`` (the large-batch map) takes ``batch_ratio`` (scannable) and ``steps`` in
place of ``t_max`` and the solver options (its ``t`` counts iterations)::

    engine = "ode"
    [constants]
    regime = "large_batch"
    steps = 50
    lr = 1.0
    [axes]
    batch_ratio = [0.5, 1.0, 2.0]

Configurations are enumerated in C order over the dimensions (the product axes as listed, then each zip);
configuration ``i`` is ``constants`` updated with the axis values at grid position ``unravel(i)``.

A definition is data: reading one (and running it) never imports or executes code named in it. ``engine`` names
one of the package's engines; a function of yours is given from Python as the callable itself
(``Scan(engine=function)``), or named ``"package.module:function"`` in a config only when you trust its module
explicitly: ``allow_import=True`` or ``allow_import="package.module"`` in Python (:meth:`Scan.from_toml`,
:func:`twolayer.scan.load`, :func:`twolayer.scan.run`), ``--allow-import package.module`` on the command line.
Without it the definition is refused before anything is imported. A store records the engine's name as text:
:func:`twolayer.scan.open_dataset`, ``xarray.open_zarr``, ``twolayer plot`` and the resume checks never import it.

A config's ``store`` is resolved relative to the config's directory, and must stay inside it: an absolute path,
``..`` or a symbolic link leading out of it is refused (:func:`config_store`). A store anywhere else is the
user's own choice, given on the command line (``twolayer scan CONFIG --store PATH``) or from Python
(``tl.scan.run(scan, store=PATH)``).
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import sys
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._validation import integer, suggest
from .engines import engine_for, trusted_modules

__all__ = ["Scan", "config_store", "suggest"]

_TOP_KEYS = ("engine", "group_size", "store", "constants", "axes", "zip")


def _plain(value: Any, where: str) -> Any:
    """``value`` as plain JSON-able data (numbers, strings, bools, lists of them): numpy scalars and arrays are
    converted; anything else (None included: TOML has no null) raises TypeError naming ``where``."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"{where}: expected a finite number, got {v}")
        return v
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"{where}: expected a number, string, bool or a list of them, got {type(value).__name__}")


def _axis_values(values: Any, where: str) -> list[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, np.ndarray)):
        raise TypeError(f"{where}: expected a list of values, got {type(values).__name__}")
    out = _plain(list(values) if not isinstance(values, np.ndarray) else values, where)
    if len(out) == 0:
        raise ValueError(f"{where}: an axis needs at least one value, got an empty list")
    keys = [json.dumps(v, sort_keys=True) for v in out]
    if len(set(keys)) != len(keys):
        dup = next(v for v, k in zip(out, keys, strict=True) if keys.count(k) > 1)
        raise ValueError(f"{where}: the values of an axis must be distinct, {dup!r} appears twice")
    return list(out)


@dataclass(frozen=True)
class Scan:
    """A declarative scan: ``engine`` over the grid ``axes`` (Cartesian product) x ``zip`` (each entry a named
    dimension along which several parameters move together), every configuration completed by ``constants``.

    ``engine``: ``"ode"``, ``"sgd"``, ``"descend"``, ``"multistart"`` (see :mod:`twolayer.scan.engines` for their
    parameters), a Python callable taking one configuration as keyword arguments and returning a dict of arrays,
    or ``"package.module:function"`` naming one in a module that ``allow_import`` trusts (never imported
    otherwise: see the module docstring). ``group_size``: the most configurations run together in one engine
    call and stored as one chunk (None: the engine's default). Build one from Python, :meth:`from_dict` or
    :meth:`from_toml`; it is validated on construction (unknown names with the closest known one, empty axes,
    zipped lengths, a parameter given twice, parameter values), before anything runs.

    Parameters
    ----------
    engine : str or callable
        The engine.
    constants : dict, optional
        Parameters shared by every configuration.
    axes : dict, optional
        name -> list of values: a Cartesian product, one dimension per axis in this order.
    zip : dict, optional
        dimension -> {name: list of values}: parameters moving together along one dimension.
    group_size : int, optional
        Most configurations per group.
    allow_import : bool, str or list of str, default False
        The modules a ``"package.module:function"`` engine may be imported from: True (any), a module name or a
        list of them. Not part of the definition (neither compared nor recorded).

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"t_max": 10.0}, axes={"lr": [0.5, 1.0]},
    ...                   zip={"size": {"d": [10, 100], "seed": [0, 1]}})
    >>> len(sc), sc.dims, sc.coords["d"]
    (4, {'lr': 2, 'size': 2}, ('size', [10, 100]))
    >>> [(c["lr"], c["d"]) for c in sc.configs()]
    [(0.5, 10), (0.5, 100), (1.0, 10), (1.0, 100)]
    >>> tl.scan.Scan.from_dict(sc.to_dict()).digest() == sc.digest()
    True
    """

    engine: Any
    constants: Mapping[str, Any] = field(default_factory=dict)
    axes: Mapping[str, Any] = field(default_factory=dict)
    zip: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    group_size: int | None = None
    allow_import: bool | str | Collection[str] = field(default=False, repr=False, compare=False)
    # the tables with the parameter names they were given in (old spellings included): see digests()
    _as_written: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "allow_import", trusted_modules(self.allow_import))
        eng = engine_for(self.engine, self.allow_import)
        if not isinstance(self.constants, Mapping):
            raise TypeError(f"constants: expected a table of parameter values, got {type(self.constants).__name__}")
        if not isinstance(self.axes, Mapping):
            raise TypeError(f"axes: expected a table of name = [values], got {type(self.axes).__name__}")
        if not isinstance(self.zip, Mapping):
            raise TypeError(f"zip: expected a table of [zip.<dimension>] tables, got {type(self.zip).__name__}")
        constants = {str(k): _plain(v, f"constants.{k}") for k, v in self.constants.items()}
        axes = {str(k): _axis_values(v, f"axes.{k}") for k, v in self.axes.items()}
        zipped: dict[str, dict[str, list[Any]]] = {}
        for dim, table in self.zip.items():
            if not isinstance(table, Mapping) or not table:
                raise ValueError(f"zip.{dim}: expected a non-empty table of name = [values] moving together")
            cols = {str(k): _axis_values(v, f"zip.{dim}.{k}") if len(table) == 1 else _plain_list(v, f"zip.{dim}.{k}")
                    for k, v in table.items()}
            lengths = {k: len(v) for k, v in cols.items()}
            if len(set(lengths.values())) != 1:
                raise ValueError(f"zip.{dim}: zipped axes need equal lengths, got " +
                                 ", ".join(f"{k} ({n})" for k, n in lengths.items()))
            rows = [json.dumps([c[i] for c in cols.values()]) for i in range(next(iter(lengths.values())))]
            if len(set(rows)) != len(rows):
                raise ValueError(f"zip.{dim}: the zipped rows must be distinct")
            zipped[str(dim)] = cols
        as_written = {"constants": constants, "axes": axes, "zip": zipped}
        if eng.renamed:  # old spellings of parameter names (docs: conventions, "Vocabulary"), with a warning
            from .._deprecation import renamed_keys

            def new_names(table: dict[str, Any], where: str) -> dict[str, Any]:
                return renamed_keys(table, eng.renamed, f"{where} of scan engine {eng.name!r}", what="parameter",
                                    stacklevel=5)

            constants = new_names(constants, "constants")
            axes = new_names(axes, "axes")
            zipped = {dim: new_names(cols, f"zip.{dim}") for dim, cols in zipped.items()}
        seen: dict[str, str] = {}
        for where, names in (("constants", constants), ("axes", axes),
                             *((f"zip.{d}", cols) for d, cols in zipped.items())):
            for name in names:
                if name in seen:
                    raise ValueError(f"{where}.{name}: {name!r} is already given in {seen[name]}")
                seen[name] = where
        dims = [*axes, *zipped]
        for dim in zipped:
            if dim in axes:
                raise ValueError(f"zip.{dim}: the dimension name {dim!r} is also an axis")
        if len(set(dims)) != len(dims):
            raise ValueError("zip: dimension names must be distinct")
        eng.check_names(seen)
        if self.group_size is not None:
            object.__setattr__(self, "group_size", integer(self.group_size, "group_size", 1, 2**31 - 1))
        object.__setattr__(self, "constants", constants)
        object.__setattr__(self, "axes", axes)
        object.__setattr__(self, "zip", zipped)
        # the definition with the spellings it was given in: what a store of an older release hashed
        object.__setattr__(self, "_as_written", as_written)
        # every value of every parameter through the engine's checks (one config per axis value suffices: the
        # checks are per parameter), so that a bad value fails here, not in the middle of a run
        eng.check_values(constants, {**{k: (f"axes.{k}", v) for k, v in axes.items()},
                                     **{k: (f"zip.{d}.{k}", v) for d, cols in zipped.items() for k, v in cols.items()}})
        eng.check_combination(seen, {**{k: [v] for k, v in constants.items()}, **axes,
                                     **{k: v for cols in zipped.values() for k, v in cols.items()}})

    # ------------------------------------------------------------------ construction from data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], allow_import: bool | str | Collection[str] = False) -> Scan:
        """A scan from plain data (e.g. a parsed TOML file): the keys ``engine``, ``constants``, ``axes``,
        ``zip``, ``group_size`` (``store`` is accepted and ignored here: :func:`twolayer.scan.run` takes it,
        ``twolayer scan`` reads it with :func:`config_store`); ``allow_import`` as for :class:`Scan`."""
        if not isinstance(data, Mapping):
            raise TypeError(f"scan: expected a table, got {type(data).__name__}")
        for key in data:
            if key not in _TOP_KEYS:
                raise ValueError(f"{key}: unknown key of a scan definition (expected {', '.join(_TOP_KEYS)})"
                                 f"{suggest(str(key), _TOP_KEYS)}")
        if "engine" not in data:
            raise ValueError("engine: missing (one of 'ode', 'sgd', 'descend', 'multistart' or "
                             "'package.module:function')")
        return cls(engine=data["engine"], constants=data.get("constants", {}), axes=data.get("axes", {}),
                   zip=data.get("zip", {}), group_size=data.get("group_size"), allow_import=allow_import)

    @classmethod
    def from_toml(cls, path: str | Path, allow_import: bool | str | Collection[str] = False) -> Scan:
        """A scan from a TOML file (see the module docstring); syntax errors name the file and line;
        ``allow_import`` as for :class:`Scan`."""
        return cls.from_dict(read_toml(path), allow_import)

    def to_dict(self) -> dict[str, Any]:
        """The definition as plain data (``Scan.from_dict(s.to_dict())`` is ``s``)."""
        out: dict[str, Any] = {"engine": self.engine_name, "constants": dict(self.constants),
                               "axes": dict(self.axes), "zip": {k: dict(v) for k, v in self.zip.items()}}
        if self.group_size is not None:
            out["group_size"] = self.group_size
        return out

    @property
    def resolved_engine(self) -> Any:
        """The :class:`~twolayer.scan.engines.Engine` that runs this scan."""
        return engine_for(self.engine, self.allow_import)

    @property
    def engine_name(self) -> str:
        """The engine's name (``"ode"``, ..., or ``"module:function"``)."""
        return str(self.resolved_engine.name)

    def digest(self) -> str:
        """SHA-256 of the canonical JSON of :meth:`to_dict` (with the resolved group size): stores written by a
        different definition are refused."""
        return self._hash(self.to_dict())

    def digests(self) -> tuple[str, ...]:
        """:meth:`digest`, and for a definition given with old spellings of parameter names (docs: conventions,
        "Vocabulary") also the digest of the definition as written: the hash a store of an older release
        recorded for it."""
        written = {**self.to_dict(), **self._as_written}
        return tuple(dict.fromkeys([self.digest(), self._hash(written)]))

    def _hash(self, definition: dict[str, Any]) -> str:
        d = {**definition, "group_size": self.resolved_group_size}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    @property
    def resolved_group_size(self) -> int:
        """``group_size``, or the engine's default when it is None."""
        return self.group_size if self.group_size is not None else int(self.resolved_engine.group_size)

    # ------------------------------------------------------------------ the grid

    @property
    def dims(self) -> dict[str, int]:
        """The grid's dimensions and sizes: each product axis, then each zip."""
        out = {k: len(v) for k, v in self.axes.items()}
        out.update({k: len(next(iter(cols.values()))) for k, cols in self.zip.items()})
        return out

    @property
    def coords(self) -> dict[str, tuple[str, list[Any]]]:
        """Every scanned parameter: (its dimension, its values)."""
        out: dict[str, tuple[str, list[Any]]] = {k: (k, v) for k, v in self.axes.items()}
        for dim, cols in self.zip.items():
            out.update({k: (dim, v) for k, v in cols.items()})
        return out

    def __len__(self) -> int:
        return int(np.prod(list(self.dims.values()), dtype=np.int64))

    def configs(self) -> Iterator[dict[str, Any]]:
        """Every configuration, in C order over :attr:`dims` (constants updated with the axis values)."""
        yield from self.configs_at(range(len(self)))

    def configs_at(self, indices: Any, base: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
        """The configurations at flat ``indices`` (C order over :attr:`dims`): ``base`` (e.g. the engine's
        defaults) updated with the constants and the axis values at each grid position.

        >>> sc = tl.scan.Scan("ode", constants={"t_max": 10.0}, axes={"lr": [0.5, 1.0], "seed": [0, 1, 2]})
        >>> [(c["lr"], c["seed"]) for c in sc.configs_at([1, 5])]
        [(0.5, 1), (1.0, 2)]
        """
        start = {**(base or {}), **self.constants}
        columns = [[{name: x} for x in vals] for name, vals in self.axes.items()]
        for cols in self.zip.values():
            n = len(next(iter(cols.values())))
            columns.append([{k: v[i] for k, v in cols.items()} for i in range(n)])
        idx = np.asarray(indices, dtype=np.int64)
        if not columns:
            return [dict(start) for _ in range(idx.size)]
        positions = [p.tolist() for p in np.unravel_index(idx, tuple(len(c) for c in columns))]
        out = []
        for pos in zip(*positions, strict=True):
            cfg = start.copy()
            for col, i in zip(columns, pos, strict=True):
                cfg.update(col[i])
            out.append(cfg)
        return out


def _plain_list(values: Any, where: str) -> list[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, np.ndarray)):
        raise TypeError(f"{where}: expected a list of values, got {type(values).__name__}")
    out = _plain(values, where)
    if len(out) == 0:
        raise ValueError(f"{where}: an axis needs at least one value, got an empty list")
    return list(out)


def read_toml(path: str | Path) -> dict[str, Any]:
    """The table of a TOML file; a missing file raises FileNotFoundError, a syntax error ValueError naming the
    file.

    Parameters
    ----------
    path : str or Path
        The TOML file.

    Returns
    -------
    dict

    Examples
    --------
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     p = pathlib.Path(tmp, "scan.toml")
    ...     _ = p.write_text('engine = "ode"\\n[axes]\\nlr = [0.5, 1.0]\\n')
    ...     table = tl.scan.read_toml(p)
    >>> table
    {'engine': 'ode', 'axes': {'lr': [0.5, 1.0]}}
    """
    if sys.version_info >= (3, 11):
        import tomllib as toml
    else:  # pragma: no cover - Python 3.10: the tomli backport (in the scan extra)
        import tomli as toml
    if isinstance(path, str) and not path.strip():  # Path("") is ".", the working directory
        raise ValueError("path: expected the path of a TOML file, got an empty string")
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"path: expected a TOML file, got the directory {str(p)!r}")
    try:
        with p.open("rb") as f:
            return dict(toml.load(f))
    except toml.TOMLDecodeError as exc:
        raise ValueError(f"{p}: not valid TOML: {exc}") from None


def config_store(table: Mapping[str, Any], config: str | Path) -> Path | None:
    """The store a config file names (its ``store`` key), resolved relative to the file's directory; None when
    it names none. The store must lie inside that directory: an absolute path, ``..`` or a symbolic link that
    leads out of it raises ValueError (a store elsewhere is given on the command line or from Python).

    Parameters
    ----------
    table : dict
        The config's table (:func:`read_toml`).
    config : str or Path
        The config file.

    Returns
    -------
    Path or None
        The resolved store path.

    Examples
    --------
    >>> import pathlib
    >>> config = pathlib.Path("experiments", "plateau.toml")
    >>> path = tl.scan.spec.config_store({"store": "out/plateau.zarr"}, config)
    >>> path.relative_to(pathlib.Path.cwd().resolve()).as_posix()
    'experiments/out/plateau.zarr'
    >>> tl.scan.spec.config_store({"store": "../plateau.zarr"}, config)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: store: '../plateau.zarr' is not inside the directory of experiments/plateau.toml ...
    """
    if "store" not in table:
        return None
    where = table["store"]
    if not isinstance(where, str):
        raise TypeError(f"store: expected a path relative to the config's directory, got {type(where).__name__}")
    base = Path(config).parent.resolve()
    path = (base / where).resolve()
    if path == base or not path.is_relative_to(base):
        raise ValueError(f"store: {where!r} is not inside the directory of {config} ({base}): a config names its store "
                         "only inside its own directory; give any other place on the command line (--store "
                         "PATH) or from Python (run(scan, store=PATH))")
    return path


Check = Callable[[Any, str], Any]
