"""Where the groups of a scan run: in this process (OpenMP threads inside each core call), on a
``concurrent.futures.Executor`` (e.g. a process pool), or on a ``dask.distributed.Client`` (one machine or a
cluster). Each task is one group; the worker computes it and writes it to the store itself, and sends back only
its id, so the client never holds the results.

Process pools: the core is fork-safe (a forked child runs its OpenMP regions serially), but a pool made with the
"forkserver" or "spawn" start method keeps the OpenMP threads of every worker; the CLI uses "forkserver".
"""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..activations import register_table
from .engines import Part, engine_for
from .store import write_group

__all__ = ["Task", "execute", "run_task"]

# how run_task writes a group: at once (workers), or through the in-process executor's writer thread
_WRITE: contextvars.ContextVar[Callable[[str, str, Any, Part], None]] = \
    contextvars.ContextVar("twolayer_scan_write", default=lambda *args: write_group(*args))


@dataclass(frozen=True)
class Task:
    """One group to compute: the engine (a package engine's name or a picklable callable), its full
    configurations, their flat indices, and the store and group name to write to.

    Attributes
    ----------
    engine : str or callable
        The engine (:attr:`Engine.portable <twolayer.scan.engines.Engine.portable>`: picklable for a process
        pool or Dask; a worker never imports a module by name).
    configs : sequence of dict
        Full configurations (a list, or :attr:`Group.configs <twolayer.scan.Group.configs>`, built on the worker).
    indices : sequence of int
        Their flat indices (a list, a range or an int array: what a Dask scheduler keeps of each task sent).
    store : str
        The Zarr store.
    name : str
        The group's name (:attr:`Group.name <twolayer.scan.Group.name>`).
    custom : dict, optional
        The tables of the custom activations the configurations use (:func:`twolayer.activations.custom_tables`):
        data, registered on the worker before it computes (a worker process has not run ``custom``).

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> g = tl.scan.make_groups(sc)[0]
    >>> task = tl.scan.executors.Task("ode", g.configs, g.indices, "s.zarr", g.name)
    >>> task.name, len(task.configs)
    ('g0000000', 2)
    """

    engine: Any
    configs: Sequence[dict[str, Any]]
    indices: Sequence[int] | NDArray[np.integer[Any]]
    store: str
    name: str
    custom: Mapping[str, tuple[Any, Any, float]] = field(default_factory=dict)


def run_task(task: Task) -> str:
    """Compute one group and write it to the store (on the worker; in-process, the write is handed to the writer
    thread of :func:`execute`, which reports the group once written); returns the group's name.

    Parameters
    ----------
    task : Task
        The group (its store prepared by :func:`twolayer.scan.store.prepare`).

    Returns
    -------
    str

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> g = tl.scan.make_groups(sc)[0]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.store.prepare(f"{tmp}/s.zarr", sc, 1, resume=False)
    ...     name = tl.scan.executors.run_task(tl.scan.executors.Task("ode", g.configs, g.indices, f"{tmp}/s.zarr",
    ...                                                             g.name))
    ...     done = tl.scan.store.complete_groups(f"{tmp}/s.zarr")
    >>> name, done
    ('g0000000', {0})
    """
    for spelling, (edges, coefficients, strip) in task.custom.items():
        register_table(spelling[len("custom("):-1], edges, coefficients, strip)
    part = engine_for(task.engine).run(list(task.configs))
    _WRITE.get()(task.store, task.name, task.indices, part)
    return task.name


def _is_dask_client(executor: Any) -> bool:
    return type(executor).__name__ == "Client" and type(executor).__module__.startswith("distributed")


def check_executor(executor: Any) -> None:
    """None, a concurrent.futures.Executor or a dask.distributed.Client; TypeError otherwise."""
    if executor is None or isinstance(executor, cf.Executor) or _is_dask_client(executor):
        return
    raise TypeError("executor: expected None (in-process), a concurrent.futures.Executor or a "
                    f"dask.distributed.Client, got {type(executor).__name__}")


def execute(tasks: Iterable[Task], executor: Any, done: Callable[[Task], None], in_flight: int | None = None) \
        -> None:
    """Run ``tasks`` on ``executor`` (None: here, in order), calling ``done(task)`` as each one is stored. At most
    ``in_flight`` tasks are submitted at a time (default: four per worker, at least 8), each taken from ``tasks``
    (which may be a generator) when a slot frees: the client holds the configurations of those groups only. On an
    error or Ctrl-C the tasks not started are cancelled and the exception propagates: what was stored stays.

    Parameters
    ----------
    tasks : iterable of Task
        The groups to compute.
    executor : None, concurrent.futures.Executor or dask.distributed.Client
        Where they run.
    done : callable
        Called with each task once it is stored (in the calling process).
    in_flight : int, optional
        The most tasks submitted and not yet finished.

    Examples
    --------
    >>> import tempfile
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> g = tl.scan.make_groups(sc)[0]
    >>> finished = []
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = tl.scan.store.prepare(f"{tmp}/s.zarr", sc, 1, resume=False)
    ...     tasks = [tl.scan.executors.Task("ode", g.configs, g.indices, f"{tmp}/s.zarr", g.name)]
    ...     tl.scan.executors.execute(tasks, None, lambda t: finished.append(t.name))
    >>> finished
    ['g0000000']
    """
    if executor is None:
        _execute_here(tasks, done)
        return
    window = in_flight if in_flight is not None else max(8, 4 * _workers(executor))
    source = iter(tasks)
    if _is_dask_client(executor):
        from distributed import as_completed

        by_key: dict[str, tuple[Task, Any]] = {}

        def submit_dask() -> Any:
            t = next(source, None)
            if t is None:
                return None
            f = executor.submit(run_task, t, pure=False,
                                key=f"twolayer-scan-{Path(t.store).name}-{t.name}-{id(t):x}")
            by_key[f.key] = (t, f)
            return f

        first = [f for f in (submit_dask() for _ in range(window)) if f is not None]
        queue = as_completed(first)
        try:
            for f in queue:
                f.result()
                done(by_key.pop(f.key)[0])
                nxt = submit_dask()
                if nxt is not None:
                    queue.add(nxt)
        except BaseException:
            executor.cancel([f for _, f in by_key.values()])
            raise
        return
    pending: dict[cf.Future[Any], Task] = {}

    def submit() -> None:
        t = next(source, None)
        if t is not None:
            pending[executor.submit(run_task, t)] = t

    for _ in range(window):
        submit()
    try:
        while pending:
            finished, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
            for f in finished:
                f.result()
                done(pending.pop(f))
                submit()
    except BaseException:
        for f in pending:
            f.cancel()
        raise


def _execute_here(tasks: Iterable[Task], done: Callable[[Task], None]) -> None:
    """Compute the groups here, one after the other (each by :func:`run_task`), each written by one writer thread
    while the next one computes (the core releases the GIL, so Zarr's copying and I/O overlap the compute on a
    second core). At most one group waits to be written (two in memory); ``done`` is called in order, after each
    write. On an error or Ctrl-C the write under way is finished (or fails) before the exception propagates."""
    with cf.ThreadPoolExecutor(1, thread_name_prefix="twolayer-scan-writer") as writer:
        current: list[Task] = []
        pending: list[tuple[Task, cf.Future[None]]] = []

        def finish() -> None:
            while pending:
                task, future = pending.pop()
                future.result()
                done(task)

        def write_later(store: str, name: str, indices: Any, part: Part) -> None:
            finish()  # the previous group's write (its error propagates here)
            pending.append((current[-1], writer.submit(write_group, store, name, indices, part)))

        token = _WRITE.set(write_later)
        try:
            for task in tasks:
                current.append(task)
                run_task(task)
                current.clear()
            finish()
        finally:
            _WRITE.reset(token)


def _workers(executor: Any) -> int:
    """The number of workers of a process pool or Dask client (1 when unknown)."""
    if _is_dask_client(executor):
        try:
            return max(1, sum(w.get("nthreads", 1) for w in executor.scheduler_info()["workers"].values()))
        except Exception:  # pragma: no cover - a client without a scheduler
            return 1
    return int(getattr(executor, "_max_workers", 1) or 1)
