"""Benchmarks: each hot path next to a straightforward NumPy implementation of the same computation.

Run (the ``bench`` extra; bench/README.md explains comparing versions and machines)::

    python -m pytest bench --benchmark-only            # the whole suite (~3 min on 2 cores)
    python -m pytest bench --benchmark-only --quick    # one benchmark per group: a CI-sized run

Conventions for every benchmark file (bench/test_bench_<area>.py):

* Related benchmarks share ``@pytest.mark.benchmark(group="...")``: the twolayer call and its NumPy reference (same
  computation, same run) sit in one group, and each group's table compares like with like.
* Every benchmark runs enough rounds for a median: ``benchmark(fn, ...)`` (calibrated, at least 5 rounds) or
  ``benchmark.pedantic(fn, ..., rounds=5 or more)`` (3 for the longest); never ``rounds=1``.
* Speed is reported, not asserted: a target goes into ``extra_info`` (``target_...``, ``target_met``); only
  correctness (results agree with the reference) is asserted.
* Sizes keep the whole suite at about 3 minutes on 2 cores; a headline configuration that is inherently long
  runs smaller by default and at full size with ``TWOLAYER_BENCH_FULL=1`` (``bench/sizes.py``).
* After timing, call the ``record`` fixture (:func:`_record`) with the work one timed call does, e.g.
  ``record(benchmark, work=len(C), unit="cov")`` or ``record(benchmark, work=evals, unit="RHS", ref=name)``.
  The timings are then per unit of work: the main table's times and OPS column (= rate in units/s) compare calls
  that do different amounts of work (a C++ loop of 10^5 evaluations against one NumPy evaluation). ``ref`` names
  the benchmark (its test name, e.g. ``"test_erf_i4_numpy"`` or ``"test_bench_rhs_numpy[8]"``) whose rate the
  speed-up divides by. A headline that is not a rate (time to accuracy): ``record(benchmark, value=seconds,
  unit="s", metric="time to 1e-6")``.
* The headlines land in ``extra_info`` (``headline``, ``unit``, ``work``, ``rate``, ``speedup``, ``speedup_vs``),
  so they are in the JSON of ``--benchmark-json`` / ``--benchmark-autosave``, and a compact headline table is
  printed at the end of every run.
* Mark one representative benchmark per group ``@pytest.mark.quick`` (and its reference, for the speed-up):
  ``--quick`` runs only those.
* The machine info of the JSON records the package build (``twolayer``: version, compiler, flags, SIMD level,
  levels compiled in, OpenMP threads).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

sys.path.insert(0, os.path.dirname(__file__))

_recorded: list[Any] = []  # the benchmark fixtures that called record(), in run order


def _record(benchmark: Any, *, work: float | None = None, unit: str = "call", ref: str | None = None,
           value: float | None = None, metric: str | None = None, **extra: Any) -> None:
    """Records the headline metric of a benchmark that has run.

    Parameters
    ----------
    benchmark
        The pytest-benchmark fixture, after ``benchmark(...)`` or ``benchmark.pedantic(...)``.
    work
        Units of work one timed call does (covariances, RHS evaluations, SGD steps). The recorded timings are
        divided by it, so the tables show time per unit and OPS = rate in ``unit``/s.
    unit
        Name of the unit of work (or of ``value``).
    ref
        Name of the reference benchmark (usually NumPy, same run); the speed-up is this rate over its rate.
    value, metric
        A headline that is not a rate (e.g. the time to reach an accuracy), with its name.
    extra
        More entries for ``extra_info``.
    """
    if benchmark.stats is None:  # --benchmark-disable / --benchmark-skip: nothing was timed
        return
    info = benchmark.extra_info
    info.update(extra)
    info["unit"] = unit
    if value is not None:
        info["headline"] = f"{metric or 'value'}: {value:.4g} {unit}"
        info["value"] = value
    else:
        stats = benchmark.stats.stats
        if work is not None and work != 1:
            stats.data[:] = [t / work for t in stats.data]
            for cached in [k for k in vars(stats) if k != "data"]:
                delattr(stats, cached)  # min/median/... are cached properties: recompute from the scaled data
        info["work"] = work or 1
        info["rate"] = 1.0 / stats.median
        info["headline"] = f"{info['rate']:.4g} {unit}/s"
    if ref is not None:
        info["speedup_vs"] = ref
    _recorded.append(benchmark)


@pytest.fixture
def record() -> Any:
    """The function :func:`_record`: ``record(benchmark, work=..., unit=..., ref=...)`` after the timing."""
    return _record


def _speedups() -> None:
    """Fills speedup for every recorded benchmark whose reference ran (the ratio of their rates)."""
    rates = {b.name: b.extra_info.get("rate") for b in _recorded}
    for b in _recorded:
        ref = b.extra_info.get("speedup_vs")
        if ref in rates and rates[ref] and b.extra_info.get("rate"):
            b.extra_info["speedup"] = b.extra_info["rate"] / rates[ref]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--quick", action="store_true", help="run only the benchmarks marked quick (CI-sized run)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "quick: part of the --quick benchmark subset (one per group)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--quick``: only the benchmarks marked quick; benchmarks marked ``gpu`` skip, with the reason, where the CUDA
    backend or a GPU is missing (as the tests do, tests/conftest.py)."""
    gpu = [item for item in items if "gpu" in item.keywords]
    if gpu:
        from twolayer._validation import cuda_unavailable

        why = cuda_unavailable()
        if why is not None:
            for item in gpu:
                item.add_marker(pytest.mark.skip(reason=why))
    if not config.getoption("--quick"):
        return
    skip = pytest.mark.skip(reason="not in the --quick subset")
    for item in items:
        if "quick" not in item.keywords:
            item.add_marker(skip)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    import twolayer as tl

    machine_info["twolayer"] = tl.build_info()
    machine_info["omp_num_threads_env"] = os.environ.get("OMP_NUM_THREADS")


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    _speedups()
    by_name = {b.name: b.extra_info for b in _recorded}
    for entry in output_json.get("benchmarks", []):
        if entry["name"] in by_name:
            entry["extra_info"].update(by_name[entry["name"]])


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _recorded:
        return
    _speedups()
    tr = terminalreporter
    tr.section("twolayer headline metrics (median)")
    groups: dict[str, list[Any]] = {}
    for b in _recorded:
        groups.setdefault(b.group or "(no group)", []).append(b)
    width = max(len(b.name) for b in _recorded)
    for group, members in groups.items():
        tr.write_line(group)
        for b in members:
            info = b.extra_info
            speed = f"  {info['speedup']:8.3g}x vs {info['speedup_vs']}" if "speedup" in info else ""
            tr.write_line(f"  {b.name:<{width}}  {info['headline']:>22}{speed}")
