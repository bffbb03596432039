"""Declarative, stored, resumable parameter scans over every engine of the package.

A :class:`Scan` names an engine, constants and axes (a Cartesian product and zipped axes) as plain data, in
Python or a TOML file (:mod:`twolayer.scan.spec`). :func:`run` cuts the grid into groups of configurations that one
core call computes together (:mod:`~twolayer.scan.grouping`), runs them in this process, on a
``concurrent.futures`` executor or a ``dask.distributed`` client (:mod:`~twolayer.scan.executors`), writes each
finished group into its chunks of a standard Zarr dataset (:mod:`~twolayer.scan.store`, which
``xarray.open_zarr`` opens lazily) and returns one ``xarray.Dataset``: one dimension per axis, then the engine's
own (``run``, ``t``, ``student``, ...), every scanned parameter a coordinate, ``complete`` per configuration;
constants, the definition's hash and the package version in ``attrs``. Configurations that diverged keep their
``status`` and ``stop_time``. Running the same scan on the same store with ``resume=True`` computes only the groups
missing (after Ctrl-C or a killed process) and gives the dataset of an uninterrupted run, bit for bit.

>>> scan = tl.scan.Scan("ode", constants={"K": 2, "M": 2, "t_max": 100.0, "risk_tol": 1e-3},
...                     axes={"lr": [0.5, 1.0], "d": [100, 1000]})
>>> ds = tl.scan.run(scan, store="plateau.zarr", progress=True)      # doctest: +SKIP
>>> ds.stop_time.sel(d=1000)                                         # doctest: +SKIP

Needs the ``scan`` extra (xarray, zarr; dask.distributed for a Dask client): ``pip install 'twolayer[scan]'``.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from .._interrupt import Interrupted, keep_partial
from .._validation import boolean
from ..activations import custom_tables
from .engines import Engine, engine_for, initial_networks, initial_overlaps
from .executors import Task, check_executor, execute
from .grouping import Group, compact, make_groups
from .lock import StoreLockedError, store_lock
from .spec import Scan, read_toml
from .store import Assembly, open_dataset, prepare

__all__ = ["Engine", "Group", "Scan", "StoreLockedError", "Summary", "engine_for", "initial_networks",
           "initial_overlaps", "load", "make_groups", "open_dataset", "read_toml", "run"]


def load(definition: Scan | Mapping[str, Any] | str | Path, allow_import: bool | str | Collection[str] = False) -> Scan:
    """A :class:`Scan` from a Scan, a dict, or the path of a TOML file.

    Parameters
    ----------
    definition : Scan, dict or path
        A Scan (returned as it is), plain data (:meth:`Scan.from_dict`) or a TOML file (:meth:`Scan.from_toml`).
    allow_import : bool, str or list of str, default False
        The modules a ``"package.module:function"`` engine of a dict or file may be imported from (True: any);
        none by default (see :mod:`twolayer.scan.spec`).

    Returns
    -------
    Scan

    Examples
    --------
    >>> sc = tl.scan.load({"engine": "ode", "constants": {"t_max": 10.0}, "axes": {"lr": [0.5, 1.0]}})
    >>> sc.engine_name, len(sc)
    ('ode', 2)
    """
    if isinstance(definition, Scan):
        return definition
    if isinstance(definition, (str, Path)):
        return Scan.from_toml(definition, allow_import)
    if isinstance(definition, Mapping):
        return Scan.from_dict(definition, allow_import)
    raise TypeError(f"scan: expected a Scan, a dict or the path of a TOML file, got {type(definition).__name__}")


class Summary:
    """What a :func:`run` did: ``groups`` in all, ``computed`` now, ``skipped`` (already stored), ``seconds``.

    Parameters
    ----------
    groups : int
        Groups of the scan.
    computed : int
        Groups computed by this call.
    skipped : int
        Groups already in the store (resumed).
    seconds : float
        Wall time of the call.

    Examples
    --------
    >>> tl.scan.Summary(groups=3, computed=1, skipped=2, seconds=0.5)
    Summary(groups=3, computed=1, skipped=2, seconds=0.5)
    """

    def __init__(self, groups: int, computed: int, skipped: int, seconds: float) -> None:
        self.groups, self.computed, self.skipped, self.seconds = groups, computed, skipped, seconds

    def __repr__(self) -> str:
        return (f"Summary(groups={self.groups}, computed={self.computed}, skipped={self.skipped}, "
                f"seconds={self.seconds:.3g})")


def run(
    scan: Scan | Mapping[str, Any] | str | Path,
    store: str | Path | None = None,
    *,
    executor: Any = None,
    resume: bool = False,
    progress: bool = False,
    load_result: bool = True,
    allow_version_change: bool = False,
    allow_import: bool | str | Collection[str] = False,
) -> Any:
    """Run a scan and return its ``xarray.Dataset`` (see the module docstring).

    Parameters
    ----------
    scan : Scan, dict or path of a TOML file
        The definition, validated in full before anything runs.
    store : path, optional
        A Zarr directory written group by group (needed for an ``executor``). An existing store of the same
        definition is continued with ``resume=True`` (only missing groups are computed); one of another
        definition is refused (ValueError), and so is one written by another twolayer version unless
        ``allow_version_change``. One process writes a store at a time: the call holds the lock
        ``<store>.lock`` (:mod:`~twolayer.scan.lock`), and raises :class:`StoreLockedError` (naming the owner's
        PID, host and start time) while another process holds it.
    executor : None, concurrent.futures.Executor or dask.distributed.Client
        Where groups run; None: in this process, one group after the other (OpenMP inside each core call).
    progress : bool
        A tqdm bar over configurations, advancing as groups finish, with the count of groups stored.
    load_result : bool
        Return the dataset opened lazily (Dask) from the store by :func:`open_dataset` (default), or only a
        :class:`Summary`; either way the client holds the configurations of a few groups at a time.
    allow_version_change : bool
        Continue a store written by another twolayer version (refused by default: results of two versions need
        not agree bit for bit); the store then records both versions in ``twolayer_version``.
    allow_import : bool, str or list of str, default False
        For a dict or TOML ``scan``: the modules a ``"package.module:function"`` engine may be imported from
        (see :func:`load`); none by default.

    Returns
    -------
    xarray.Dataset or Summary
        One dimension per axis (or zip), then the engine's own; a :class:`Summary` when ``load_result=False``.

    Ctrl-C in-process stops within a fraction of a second; the groups already stored stay (without a store,
    :class:`twolayer.Interrupted`'s ``partial`` is the dataset of the finished groups).

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> ds = tl.scan.run(sc)
    >>> ds.risk.dims, ds.risk.shape
    (('lr', 't'), (2, 3))
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     summary = tl.scan.run(sc, store=f"{tmp}/s.zarr", load_result=False)
    ...     same = bool(tl.scan.open_dataset(f"{tmp}/s.zarr").risk.equals(ds.risk))  # read lazily, here
    >>> summary.computed, same
    (1, True)
    """
    sc = load(scan, allow_import)
    check_executor(executor)
    resume = boolean(resume, "resume")
    progress = boolean(progress, "progress")
    load_result = boolean(load_result, "load_result")
    allow_version_change = boolean(allow_version_change, "allow_version_change")
    groups = make_groups(sc)
    eng = sc.resolved_engine
    start = time.perf_counter()
    if store is None:
        if executor is not None:
            raise ValueError("store: an executor's workers write their groups to a store: give store=")
        return _run_in_memory(sc, eng, groups, progress)
    store = str(store)
    with store_lock(store):  # one writer per store (its workers write under the lock of this process)
        done = prepare_store(store, sc, len(groups), resume, allow_version_change)
        # built one by one as the executor takes them: the client holds the configurations of a few groups only
        # (and a Dask scheduler the last 1000 tasks it sent to each worker: kept small, the indices as a range
        # where consecutive, else one array)
        tables = _custom_tables(sc)
        tasks = (Task(eng.portable, g.configs, compact(g.indices), store, g.name, tables) for g in groups
                 if g.gid not in done)
        with _bar(progress, len(sc), sum(len(g.indices) for g in groups if g.gid in done), len(groups),
                  len(done)) as bar:
            execute(tasks, executor, lambda t: bar(len(t.indices)))
    summary = Summary(len(groups), len(groups) - len(done), len(done), time.perf_counter() - start)
    # not verified again: prepare_store verified the groups found finished, and this call checksummed the
    # others from the values it wrote
    return open_dataset(store, verify=False) if load_result else summary


def prepare_store(store: str, scan: Scan, n_groups: int, resume: bool, allow_version_change: bool) -> set[int]:
    return prepare(store, scan, n_groups, resume, allow_version_change)


def _run_in_memory(sc: Scan, eng: Engine, groups: list[Group], progress: bool) -> Any:
    asm = Assembly(sc)  # each group copied into the full arrays as it finishes, then dropped
    # Ctrl-C, in the core or in Python (an engine's own phases, the copy, the bar): the finished groups
    with keep_partial(asm.dataset), _bar(progress, len(sc), 0, len(groups), 0) as bar:
        for g in groups:
            try:
                part = eng.run(list(g.configs))
            except Interrupted as exc:
                exc.partial = asm.dataset()
                raise
            asm.add(g.indices, part)
            del part
            bar(len(g.indices))
        return asm.dataset()


class _bar:
    """A tqdm bar over configurations, with the groups stored so far after it (a no-op when disabled); calling
    it records one more finished group of n configurations."""

    def __init__(self, enabled: bool, total: int, initial: int, groups: int, groups_done: int) -> None:
        self.enabled, self.total, self.initial = enabled, total, initial
        self.groups, self.groups_done = groups, groups_done
        self.tqdm: Any = None

    def __enter__(self) -> _bar:
        if self.enabled:
            from tqdm.auto import tqdm

            self.tqdm = tqdm(total=self.total, initial=self.initial, unit="config", desc="scan",
                             postfix=self._groups())
        return self

    def _groups(self) -> str:
        return f"groups {self.groups_done}/{self.groups}"

    def __call__(self, n: int) -> None:
        self.groups_done += 1
        if self.tqdm is not None:
            self.tqdm.set_postfix_str(self._groups(), refresh=False)
            self.tqdm.update(n)

    def __exit__(self, *exc: Any) -> None:
        if self.tqdm is not None:
            self.tqdm.close()


def _custom_tables(sc: Scan) -> dict[str, Any]:
    """The tables of the custom activations the scan's parameters name (shipped with its tasks: data, registered
    on each worker process, which has not run ``twolayer.activations.custom``)."""
    values = [*sc.constants.values()]
    for v in sc.axes.values():
        values.extend(v if isinstance(v, (list, tuple)) else [v])
    for cols in sc.zip.values():
        for v in cols.values():
            values.extend(v if isinstance(v, (list, tuple)) else [v])
    return custom_tables(values)
