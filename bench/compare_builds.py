"""Speed of the main hot paths across builds and instruction levels, measured in one run.

    python bench/compare_builds.py --build native=DIR --build dispatched=DIR2 --levels auto,baseline --rounds 7

Each ``--build NAME=DIR`` is a directory holding an importable ``twolayer`` package (an installed wheel's
site-packages, or a copy of python/twolayer beside the compiled modules); ``--levels`` are the TWOLAYER_SIMD
values to run each build at (``auto``: the loader's choice; a build without the level is skipped). Every
measurement runs in a fresh subprocess; the configurations are interleaved in each round (in a rotated order), so
drifting load on a shared machine hits them alike. Hot paths, single-threaded so that the cores' sharing adds as
little noise as possible:

* erf I4 over 2e5 covariances (covariances/s);
* the erf online ODE right-hand side at K = M = 2 and K = M = 8 (evaluations/s, the loop inside C++);
* online SGD, erf, d = 1000, K = M = 2 (steps/s);
* the ReLU population gradient at K = M = d = 100 (calls/s).

Each worker reports the best of 5 repeats by the process's CPU time; the table shows the median over rounds and
the ratio to the first configuration, with the spread of the per-round ratios (min-max).

``--callgrind`` counts instead of timing: valgrind's callgrind runs each hot path once (at 2 % of the timed work)
and counts the instructions executed inside its core function (CALLGRIND_FUNCTIONS), per unit of work. The counts
are deterministic, so they compare builds on a loaded machine; they do not see what an instruction costs (latency,
alignment, scheduling: the timings do). Needs valgrind (Debian: apt-get install valgrind) and unstripped modules
(pybind11 strips Release builds: configure with -DCMAKE_STRIP=/bin/true, or pip with
-Ccmake.define.CMAKE_STRIP=/bin/true -Cinstall.strip=false); valgrind cannot run AVX-512 code, so not the v4 level.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PATHS = ("erf_i4", "ode_rhs_K2", "ode_rhs_K8", "sgd_d1000", "relu_grad_K100")


def _best(fn, repeats: int = 5) -> float:
    """Best (smallest) process CPU time of fn() over ``repeats`` calls (the core runs long calls on a worker
    thread, so the caller's thread time would miss them; CPU time, unlike the wall clock, does not count the
    time the process waits for a core on a shared machine)."""
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        fn()
        best = min(best, time.process_time() - c0)
    return best


def _workloads(scale: float) -> dict[str, tuple[float, object]]:
    """The hot paths as (units of work, function doing them once); ``scale`` shrinks the work (callgrind)."""
    import numpy as np
    import twolayer as tl
    from twolayer import _core

    loads: dict[str, tuple[float, object]] = {}
    A = np.random.default_rng(0).standard_normal((max(1, int(200_000 * scale)), 4, 4))
    C = A @ np.swapaxes(A, -1, -2) / 4
    loads["erf_i4"] = (len(C), lambda: tl.kernels.i4("erf", "erf", "erf", C, n_threads=1))
    for K in (2, 8):
        rng = np.random.default_rng(0)
        X = rng.standard_normal((2 * K, 4 * K + 10)) / np.sqrt(4 * K + 10)
        Om = X @ X.T
        Q, M, P, a, v = Om[:K, :K].copy(), Om[:K, K:].copy(), Om[K:, K:].copy(), np.ones(K), np.ones(K)
        n = max(1, int(4e5 * scale / K**4))
        args = (Q, M, a, P, v, "erf", "erf", "online", 0.7, 0.1, n, 1)
        loads[f"ode_rhs_K{K}"] = (n, lambda args=args: _core.ode_rhs_timing(*args))
    st, te = tl.networks.teacher_student(2, 2, 1000, "erf", seed=1)
    steps = max(1000, int(40_000 * scale))
    loads["sgd_d1000"] = (steps, lambda: tl.sgd.simulate(st, te, lr=0.5, times=[0.0, steps / 1000], n_threads=1,
                                                         keep_weights=False))
    rng = np.random.default_rng(1)
    student = tl.Network(rng.standard_normal((100, 100)), None, "relu", "none")
    teacher = tl.Network(rng.standard_normal((100, 100)), None, "relu", "none")
    calls = max(1, int(50 * scale))  # 5 calls (4 ms) gave per-round ratios spread over 0.66-1.45
    loads["relu_grad_K100"] = (calls, lambda: [tl.population.gradient(student, teacher, train_readout=False,
                                                                      n_threads=1) for _ in range(calls)])
    return loads


def worker() -> dict[str, float]:
    import twolayer as tl

    rates: dict[str, float] = {}
    for path, (work, fn) in _workloads(1.0).items():
        rates[path] = work / _best(fn, repeats=3 if path.startswith("sgd") else 5)  # type: ignore[arg-type]
    rates["level"] = tl.build_info()["simd_level"]  # type: ignore[assignment]
    return rates


# The core function each hot path spends its time in (callgrind counts the instructions executed inside it,
# callees included, and nothing of the Python around it). Full names: a pattern that also matched a function called
# inside (an OpenMP-outlined clone, a lambda) would toggle the counting off there.
CALLGRIND_FUNCTIONS = {
    "erf_i4": "twolayer::i4_batch(twolayer::Activation, twolayer::Activation, twolayer::Activation, double const*, "
              "unsigned long, double*, int)",
    "ode_rhs_K2": "void twolayer::OdeRhs::eval<*>(double const*, double*, int)",
    "ode_rhs_K8": "void twolayer::OdeRhs::eval<*>(double const*, double*, int)",
    "sgd_d1000": "twolayer::sgd_simulate(twolayer::SgdSpec const&, double const*, double const*, unsigned long, "
                 "double const*, double const*, twolayer::SgdRun const*, unsigned long, twolayer::SgdOut*, int, "
                 "std::atomic<long long>*)",
    "relu_grad_K100": "twolayer::(anonymous namespace)::gradient_impl(twolayer::Population const&, double*, double*, "
                      "double*, int)",
}
CALLGRIND_SCALE = 0.02  # of the timed work: callgrind runs some 50x slower


def callgrind_worker(path: str) -> None:
    """Runs one hot path once at CALLGRIND_SCALE (under valgrind: see callgrind_counts); prints its work and level."""
    import twolayer as tl

    work, fn = _workloads(CALLGRIND_SCALE)[path]
    fn()  # type: ignore[operator]
    print(json.dumps({"work": work, "level": tl.build_info()["simd_level"]}))


def callgrind_counts(path_dir: str, level: str, path: str) -> tuple[float, str]:
    """Instructions executed per unit of work by one hot path (valgrind --tool=callgrind, only inside the core
    function CALLGRIND_FUNCTIONS[path]), and the level that ran: deterministic, so independent of the load."""
    import tempfile

    env = dict(os.environ, PYTHONPATH=path_dir, TWOLAYER_SIMD=level, OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=no",
               f"--toggle-collect={CALLGRIND_FUNCTIONS[path]}", sys.executable, __file__, "--callgrind-worker", path]
        res = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"callgrind {path} at {level}: " + (res.stderr.strip().splitlines() or ["?"])[-1])
        with open(out) as f:
            total = next(int(line.split()[1]) for line in f if line.startswith(("summary:", "totals:")))
    if total == 0:
        raise RuntimeError(f"callgrind {path} at {level}: no instruction inside {CALLGRIND_FUNCTIONS[path]}: the "
                           "extension modules are stripped (configure with -DCMAKE_STRIP=/bin/true)")
    info = json.loads(res.stdout.strip().splitlines()[-1])
    return total / info["work"], info["level"]


def main_callgrind(configs: list[tuple[str, str, str]]) -> None:
    """Instruction counts per unit of work of every configuration, and their ratio to the first."""
    counts = {label: {p: callgrind_counts(path_dir, level, p) for p in PATHS} for label, path_dir, level in configs}
    labels = list(counts)
    ref = labels[0]
    print(f"callgrind: instructions per unit of work (inside the core function, {CALLGRIND_SCALE:g} of the timed "
          f"work); ratio to {ref} (< 1: fewer instructions)")
    print(f"{'path':16s}" + "".join(f"{lbl + ' (' + counts[lbl][PATHS[0]][1] + ')':>30s}" for lbl in labels))
    for p in PATHS:
        print(f"{p:16s}" + "".join(f"{counts[lbl][p][0]:14.6g} {counts[lbl][p][0] / counts[ref][p][0]:15.4f}"
                                   for lbl in labels))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", action="append", required=True, metavar="NAME=DIR")
    parser.add_argument("--levels", default="auto", help="comma-separated TWOLAYER_SIMD values (default: auto)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="also write the raw per-round rates to this file")
    parser.add_argument("--callgrind", action="store_true",
                        help="count instructions under valgrind's callgrind instead of timing (load-independent)")
    args = parser.parse_args()

    configs = []
    for spec in args.build:
        name, _, path = spec.partition("=")
        for level in args.levels.split(","):
            configs.append((f"{name}:{level}", os.path.abspath(path), level))
    if args.callgrind:
        main_callgrind(configs)
        return
    raw: dict[str, list[dict[str, float]]] = {c[0]: [] for c in configs}
    for r in range(args.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for label, path, level in order:
            env = dict(os.environ, PYTHONPATH=path, TWOLAYER_SIMD=level)
            res = subprocess.run([sys.executable, __file__, "--worker"], env=env, capture_output=True, text=True)
            if res.returncode != 0:
                last = (res.stderr.strip().splitlines() or ["?"])[-1]
                print(f"round {r}: {label} skipped: {last}", file=sys.stderr)
                continue
            raw[label].append(json.loads(res.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    raw = {k: v for k, v in raw.items() if v}
    labels = list(raw)
    ref = labels[0]
    print(f"median over {args.rounds} rounds (rate per second, single thread); ratio to {ref} "
          "[min-max of the per-round ratios]")
    print(f"{'path':16s}" + "".join(f"{lbl + ' (' + str(raw[lbl][0]['level']) + ')':>36s}" for lbl in labels))
    for p in PATHS:
        row = f"{p:16s}"
        for lbl in labels:
            med = statistics.median(x[p] for x in raw[lbl])
            n = min(len(raw[lbl]), len(raw[ref]))
            ratios = [raw[lbl][i][p] / raw[ref][i][p] for i in range(n)]
            row += f"{med:12.4g} {statistics.median(ratios):6.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
        print(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        print(json.dumps(worker()))
    elif sys.argv[1:2] == ["--callgrind-worker"]:
        callgrind_worker(sys.argv[2])
    else:
        main()
