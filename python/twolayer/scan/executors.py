"""Where the groups of a scan run: in this process (OpenMP threads inside each core call), on a
``concurrent.futures.Executor`` (e.g. a process pool), or on a ``dask.distributed.Client`` (one machine or a
cluster). Each task is one group; the worker computes it and writes it to the store itself, and sends back only
its id, so the client never holds the results.

Process pools: the core is fork-safe (a forked child runs its OpenMP regions serially), but a pool made with the
"forkserver" or "spawn" start method keeps the OpenMP threads of every worker; the CLI uses "forkserver".
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .engines import engine_for
from .store import write_group

__all__ = ["Task", "execute", "run_task"]


@dataclass(frozen=True)
class Task:
    """One group to compute: the engine (a name, 'module:function' or a picklable callable), its full
    configurations, their flat indices, and the store and group name to write to."""

    engine: Any
    configs: list[dict[str, Any]]
    indices: list[int]
    store: str
    name: str


def run_task(task: Task) -> str:
    """Compute one group and write it to the store (on the worker); returns the group's name."""
    part = engine_for(task.engine).run(task.configs)
    write_group(task.store, task.name, task.indices, part)
    return task.name


def _is_dask_client(executor: Any) -> bool:
    return type(executor).__name__ == "Client" and type(executor).__module__.startswith("distributed")


def check_executor(executor: Any) -> None:
    """None, a concurrent.futures.Executor or a dask.distributed.Client; TypeError otherwise."""
    if executor is None or isinstance(executor, cf.Executor) or _is_dask_client(executor):
        return
    raise TypeError("executor: expected None (in-process), a concurrent.futures.Executor or a "
                    f"dask.distributed.Client, got {type(executor).__name__}")


def execute(tasks: list[Task], executor: Any, done: Callable[[Task], None]) -> None:
    """Run ``tasks`` on ``executor`` (None: here, in order), calling ``done(task)`` as each one is stored. On an
    error or Ctrl-C the tasks not started are cancelled and the exception propagates: what was stored stays."""
    if executor is None:
        for task in tasks:
            run_task(task)
            done(task)
        return
    if _is_dask_client(executor):
        from distributed import as_completed

        futures = [executor.submit(run_task, t, pure=False, key=f"twolayer-scan-{Path(t.store).name}-{t.name}-"
                                   f"{id(t):x}") for t in tasks]
        by_key = {f.key: t for f, t in zip(futures, tasks, strict=True)}
        try:
            for f in as_completed(futures):
                f.result()
                done(by_key[f.key])
        except BaseException:
            executor.cancel(futures)
            raise
        return
    pending = {executor.submit(run_task, t): t for t in tasks}
    try:
        for f in cf.as_completed(pending):
            f.result()
            done(pending[f])
    except BaseException:
        for f in pending:
            f.cancel()
        raise
