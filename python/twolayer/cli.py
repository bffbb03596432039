"""Command line: ``twolayer demo`` (the main job), ``twolayer info``, ``twolayer --version``, and the scan
commands ``twolayer run``, ``twolayer scan``, ``twolayer plot`` (:mod:`twolayer.scan.cli`); also run as
``python -m twolayer``.

Expected failures (an output directory that cannot be written, a missing optional dependency) print one line
``twolayer: <what went wrong>`` to stderr and exit with status 1; bad arguments are argparse's (status 2)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from importlib.metadata import PackageNotFoundError, version

from . import build_info, demo
from .scan.cli import add_commands


def _demo(args: argparse.Namespace) -> int:
    cfg, plateau = demo.DemoConfig(), demo.PlateauConfig()
    if args.quick:
        cfg.n_steps, cfg.seeds, cfg.decay_start, cfg.decay_every = 2_000, (0, 1), 1_000, 30
        plateau.d, plateau.t_max, plateau.seeds = 200, 150.0, 2
    start = time.perf_counter()
    result = demo.run(args.out, progress=not args.no_progress and sys.stderr.isatty(), config=cfg, plateau=plateau)
    print(f"Mariantoni-Chizat symmetry-breaking experiment: step units, K = {cfg.K} student and M = {cfg.M} "
          f"teacher units, d = {cfg.d}, {cfg.n_steps} steps of population gradient descent (lr = {cfg.lr}, "
          f"halved every {cfg.decay_every} steps after step {cfg.decay_start})")
    print("final excess risk per initialisation:")
    print(result.table())
    print(f"wrote {args.out}/demo.png and {args.out}/demo.csv in {time.perf_counter() - start:.1f} s")
    return 0


def _info(args: argparse.Namespace) -> int:
    info = build_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for k, v in info.items():
        print(f"{k}: {', '.join(v) if isinstance(v, (list, tuple)) else v}")
    return 0


def _version() -> str:
    try:
        return version("twolayer")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree without installing
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="twolayer",
        description="Learning dynamics of two-layer networks in the teacher-student setting.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="run the built-in demonstration (Mariantoni and Chizat's symmetry breaking of "
                                    "step networks, the Saad-Solla plateau by ODE and SGD) and write demo.png and "
                                    "demo.csv",
                       description="Run the embedded default experiments, print a summary table and write "
                                   "demo.png (figure) and demo.csv (data).")
    p.add_argument("--out", default=".", help="output directory (default: current directory)")
    p.add_argument("--quick", action="store_true", help="a smaller run (fewer steps and seeds) for smoke tests")
    p.add_argument("--no-progress", action="store_true", help="do not show progress bars")
    p.set_defaults(func=_demo)
    p = sub.add_parser("info", help="print the build configuration (version, compiler, flags, instruction levels, "
                                    "OpenMP, threads, CUDA)",
                       description="Print the build configuration of the compiled core: version, compiler and "
                                   "flags, the instruction levels compiled in, those this CPU supports and the "
                                   "one in use (TWOLAYER_SIMD forces one), OpenMP, threads and CUDA.")
    p.add_argument("--json", action="store_true", help="print it as one JSON object")
    p.set_defaults(func=_info)
    add_commands(sub)  # run, scan, plot
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except OSError as exc:  # e.g. --out on a full disk, a file, or a directory without write permission
        # our own messages (demo._write, demo._prepare_output) carry no filename; raw ones keep theirs
        text = exc.strerror if exc.filename is None and exc.strerror else str(exc)
        return _fail(text)
    except ImportError as exc:  # an optional dependency (matplotlib for demo.png)
        return _fail(str(exc))
    except (ValueError, TypeError) as exc:  # a bad config file (twolayer run / scan), naming the key
        return _fail(str(exc))


def _fail(message: str) -> int:
    """Print ``twolayer: message`` to stderr (one line) and return the exit status 1."""
    print(f"twolayer: {' '.join(message.split())}", file=sys.stderr)
    return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
