"""The scan commands of the command line (registered by :func:`add_commands` in :mod:`twolayer.cli`):

* ``twolayer run CONFIG.toml``: one experiment (``engine = "ode"``, ``"sgd"`` or ``"both"``: the ODE and the SGD
  runs from the same initial networks side by side), written as ``<config>.csv`` (the risk curves),
  ``<config>.<engine>.nc`` (each engine's full ``xarray.Dataset`` as NetCDF) and ``<config>.png``;
* ``twolayer scan CONFIG.toml [--resume] [--workers N | --scheduler ADDRESS] [--store PATH] [--allow-import
  MODULE]``: a scan into a Zarr store, by default next to the config and named after it (``<config>.zarr``) unless
  the TOML's ``store`` says otherwise (a path inside the config's directory; ``--store`` may point anywhere); an
  engine ``"MODULE:function"`` runs only when ``--allow-import MODULE`` trusts its module; Ctrl-C stops it at once,
  ending the ``--workers`` processes too (the groups they were computing have no completion marker and are
  recomputed by ``--resume``);
* ``twolayer plot STORE``: the standard figure of a stored scan (``<store>.png``).
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing as mp
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..plot import pyplot
from ..results import import_xarray
from . import run
from .engines import ENGINES
from .figure import last_recorded, scan_figure
from .spec import Scan, config_store, read_toml, suggest
from .store import open_dataset

__all__ = ["add_commands"]


def add_commands(sub: Any) -> None:
    """Add the ``run``, ``scan`` and ``plot`` subcommands to an argparse subparsers object.

    Parameters
    ----------
    sub : argparse subparsers action
        What ``ArgumentParser.add_subparsers()`` returns.

    Examples
    --------
    >>> import argparse
    >>> parser = argparse.ArgumentParser(prog="twolayer")
    >>> tl.scan.cli.add_commands(parser.add_subparsers())
    >>> args = parser.parse_args(["scan", "plateau.toml", "--resume", "--workers", "2"])
    >>> args.config, args.resume, args.workers
    ('plateau.toml', True, 2)
    """
    p = sub.add_parser("run", help="run one experiment of a TOML config (ODE, SGD or both) and write CSV, NetCDF "
                                   "and PNG",
                       description="Run one experiment: engine = 'ode', 'sgd' or 'both' with its [constants]; "
                                   "writes <config>.csv (risk curves), <config>.<engine>.nc (each engine's full "
                                   "results) and <config>.png.")
    p.add_argument("config", help="the experiment's TOML file")
    p.add_argument("--out", default=None, help="output directory (default: the config's directory)")
    p.add_argument("--no-progress", action="store_true", help="do not show progress bars")
    p.set_defaults(func=_run)
    p = sub.add_parser("scan", help="run a scan of a TOML config into a Zarr store (resumable)",
                       description="Run the scan a TOML file defines, group by group into a Zarr store (default: "
                                   "<config>.zarr next to the config, or the TOML's store).")
    p.add_argument("config", help="the scan's TOML file")
    p.add_argument("--store", default=None, help="the Zarr store to write (overrides the TOML, whose store must lie "
                                                 "inside the config's directory)")
    p.add_argument("--allow-import", action="append", default=None, metavar="MODULE",
                   help="trust MODULE: let the config's engine = 'MODULE:function' import and run it (repeatable; "
                        "never needed for the package's engines)")
    p.add_argument("--resume", action="store_true", help="continue an existing store of this scan")
    p.add_argument("--allow-version-change", action="store_true",
                   help="with --resume: continue a store written by another twolayer version")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--workers", type=int, default=None, help="run groups on N local worker processes")
    how.add_argument("--scheduler", default=None, help="run groups on a Dask cluster (scheduler ADDRESS)")
    p.add_argument("--no-progress", action="store_true", help="do not show the progress bar")
    p.set_defaults(func=_scan)
    p = sub.add_parser("plot", help="draw the standard figure of a stored scan",
                       description="Draw the standard figure of a stored scan: risk curves and the summary "
                                   "against the first scanned axis.")
    p.add_argument("store", help="the scan's Zarr store")
    p.add_argument("--out", default=None, help="the PNG to write (default: <store>.png)")
    p.set_defaults(func=_plot)


def _progress(args: argparse.Namespace) -> bool:
    return not args.no_progress and sys.stderr.isatty()


def _scan(args: argparse.Namespace) -> int:
    config = Path(args.config)
    data = read_toml(config)
    scan = Scan.from_dict(data, allow_import=args.allow_import or False)
    store = Path(args.store) if args.store else (config_store(data, config) or config.with_suffix(".zarr"))
    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers: expected a positive number of worker processes, got {args.workers}")
    executor: Any = None
    if args.workers is not None:
        executor = ProcessPoolExecutor(args.workers, mp_context=mp.get_context("forkserver"))
    elif args.scheduler is not None:
        try:
            from distributed import Client
        except ImportError as exc:
            raise ImportError("--scheduler needs dask.distributed: pip install 'twolayer[scan]'") from exc
        executor = Client(args.scheduler)
    start = time.perf_counter()
    try:
        summary = run(scan, store, executor=executor, resume=args.resume, progress=_progress(args),
                      load_result=False, allow_version_change=args.allow_version_change)
    except KeyboardInterrupt:
        if args.workers is not None:
            _stop_workers(executor)
        print(f"interrupted: the finished groups are in {store}; run again with --resume to complete it",
              file=sys.stderr)
        return 130
    finally:
        if args.workers is not None:
            executor.shutdown(cancel_futures=True)
        elif executor is not None:  # our client only: the cluster stays up
            executor.close()
    print(f"{len(scan)} configurations in {summary.groups} groups: {summary.computed} computed, {summary.skipped} "
          f"already stored; {time.perf_counter() - start:.1f} s; store {store}")
    return 0


def _stop_workers(executor: Any) -> None:
    """Ends the worker processes of our pool at once instead of waiting for their running groups (up to minutes):
    a group is complete only once its marker is written after its data, so a group cut short anywhere is
    recomputed on resume and the store stays consistent."""
    if hasattr(executor, "terminate_workers"):  # Python >= 3.14
        executor.terminate_workers()
        return
    processes = list((getattr(executor, "_processes", None) or {}).values())
    for p in processes:
        p.terminate()
    for p in processes:
        p.join(1.0)


def _plot(args: argparse.Namespace) -> int:
    store = Path(args.store)
    ds = open_dataset(store)
    out = Path(args.out) if args.out else store.with_suffix(".png")
    scan_figure(ds, str(out))
    print(f"wrote {out}")
    return 0


def _check_netcdf() -> None:
    """ImportError (before anything runs) when xarray has no NetCDF backend to write with."""
    if not {"netcdf4", "h5netcdf", "scipy"} & set(import_xarray().backends.list_engines()):
        raise ImportError("twolayer run writes NetCDF: it needs scipy, netCDF4 or h5netcdf: pip install "
                          "'twolayer[scan]'")


def _run(args: argparse.Namespace) -> int:
    config = Path(args.config)
    data = read_toml(config)
    for key in data:
        if key not in ("engine", "constants"):
            raise ValueError(f"{key}: an experiment has only 'engine' and [constants]{suggest(str(key), ['engine'])}"
                             " (axes make a scan: use twolayer scan)")
    engine = data.get("engine", "both")
    if engine not in ("ode", "sgd", "both"):
        raise ValueError(f"engine: expected 'ode', 'sgd' or 'both', got {engine!r}{suggest(str(engine), ['both'])}")
    constants = dict(data.get("constants", {}))
    engines = ["ode", "sgd"] if engine == "both" else [engine]
    known = sorted({k for e in engines for k in (*ENGINES[e].params, *ENGINES[e].renamed)})
    for key in constants:
        if key not in known:
            raise ValueError(f"constants.{key}: unknown parameter of {' and '.join(engines)}{suggest(key, known)}")
    regime = constants.get("regime", "online")
    if engine == "both" and regime != "online":
        raise ValueError(f"constants.regime: engine 'both' puts the ODE beside online SGD, so it needs the online "
                         f"regime, got {regime!r} (use engine = 'ode' for it)")
    plt = pyplot()  # the optional dependencies of the outputs, checked before anything runs
    _check_netcdf()
    results = {}
    for e in engines:
        takes = {*ENGINES[e].params, *ENGINES[e].renamed}  # old spellings warn in Scan
        sc = Scan(e, constants={k: v for k, v in constants.items() if k in takes})
        results[e] = run(sc, progress=_progress(args))
    out_dir = Path(args.out) if args.out else config.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = out_dir / f"{config.stem}.csv", out_dir / f"{config.stem}.png"
    rows = []
    for e, ds in results.items():
        risk = ds["risk"]
        mean = risk.mean("member") if "member" in risk.dims else risk
        std = risk.std("member", ddof=1) if "member" in risk.dims and risk.sizes["member"] > 1 else None
        for k, t in enumerate(ds["t"].values):
            rows.append({"engine": e, "t": repr(float(t)), "risk": repr(float(mean.values[k])),
                         "risk_std": "" if std is None else repr(float(std.values[k]))})
    with csv_path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["engine", "t", "risk", "risk_std"])
        writer.writeheader()
        writer.writerows(rows)
    # the full results (overlaps, status, ...), one NetCDF file per engine: their dimensions differ (member)
    nc_paths = [out_dir / f"{config.stem}.{e}.nc" for e in results]
    for path, ds in zip(nc_paths, results.values(), strict=True):
        ds.to_netcdf(path)
    fig, ax = plt.subplots(figsize=(6.4, 4.6), constrained_layout=True)
    for ds in results.values():
        t = ds["t"].values
        tt = np.where(t > 0, t, np.nan)
        if "member" in ds["risk"].dims:
            for r in ds["risk"].values:
                ax.loglog(tt, r, color="tab:green", alpha=0.3, lw=0.8)
            d = ds.attrs.get("d", constants.get("d", 1000))
            ax.loglog(tt, ds["risk"].mean("member").values, color="tab:green", lw=1.6,
                      label=f"SGD, d = {d}: mean of {ds.sizes['member']} runs")
        else:
            ax.loglog(tt, ds["risk"].values, "k--", lw=1.5, label="ODE (d -> infinity)")
    ax.set(xlabel="t = steps / d", ylabel="excess population risk", title=config.stem)
    ax.legend()
    fig.savefig(png_path, dpi=120)
    plt.close(fig)
    for e, ds in results.items():
        final = last_recorded(ds["risk"])
        print(f"{e}: final excess risk {float(final.mean()):.6g}" + (f" (mean of {final.size} runs)"
                                                                       if final.size > 1 else ""))
    print(f"wrote {csv_path}, {', '.join(map(str, nc_paths))} and {png_path}")
    return 0
