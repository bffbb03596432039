"""First order optimization methods (the paper's large-batch SGD): leap 1 against leap 2 -- large-batch steps
needed as d grows.

A relu student (K = 4, readout "mean", second layer fixed, spherical: |w_i|^2 = d after each step) learns either the
staircase z1 + z1 z2 (leap 1) or the parity z1 z2 (leap 2), z = W* x / sqrt(d), from a random start (overlaps
M ~ 1 / sqrt(d)).

Time convention: one iteration = one SGD step on a fresh batch of n_b = alpha d samples,
``sgd.simulate(lr=gamma0 * d, batch_size=alpha * d, t_max=T / d)`` (simulator time times d = iteration), and the
d -> infinity map ``ode.integrate(ov, target=tgt, lr=gamma0, regime="large_batch", batch_ratio=alpha, n_steps=T,
spherical=True)`` started from each d's own initial overlaps.

Measured: the first iteration at which the overlap with z1, max_i |M_i1|, reaches 0.3. Leap 1: the population
gradient has a component along z1 at M = 0 (E[sigma'(l) z1 f] = E[sigma'] != 0), so z1 is found in a number of
steps that does not depend on d. Leap 2: at M = 0 it has none (E[sigma'(l) z1 z1 z2] = E[sigma'(l) z2] = M_2
E[sigma''] -> 0): M grows geometrically from its 1 / sqrt(d) start, and the number of steps grows like log d.
Left: overlap against iteration (map lines, SGD markers) at d = 1000, 4000. Right: steps to reach 0.3 against d,
map (d up to 64000; mean +- sd over 8 random starts) and SGD (d = 1000, 2000, 4000; mean +- sd over runs
from the first 3 of those starts; the left panel's map line is the mean over those same 3 starts).
Writes first_order_methods_leap.png (about a minute).

Run: python examples/first_order_methods_leap.py
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import twolayer as tl  # noqa: E402

TARGETS = {"staircase z1 + z1 z2 (leap 1)": {(1, 0): 1.0, (1, 1): 1.0}, "z1 z2 (leap 2)": {(1, 1): 1.0}}
THRESHOLD = 0.3


def student(d: int, K: int, seed: int) -> tl.Network:
    W = np.random.default_rng(seed).standard_normal((K, d))
    W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)
    return tl.Network(W, np.ones(K), "relu", readout="mean")


def first_crossing(m: np.ndarray) -> float:
    """The first index where m >= THRESHOLD (nan if none)."""
    hit = np.nonzero(m >= THRESHOLD)[0]
    return float(hit[0]) if hit.size else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--gamma0", type=float, default=2.0)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--K", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="SGD runs (from the first --runs starts)")
    parser.add_argument("--inits", type=int, default=8, help="random starts for the map")
    parser.add_argument("--dims", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument("--map-dims", type=int, nargs="+", default=[1000, 2000, 4000, 8000, 16000, 32000, 64000])
    parser.add_argument("--out", default="first_order_methods_leap.png")
    args = parser.parse_args()
    T, g0, alpha = args.steps, args.gamma0, args.alpha
    fig, (ax_t, ax_d) = plt.subplots(1, 2, figsize=(12, 4.5))
    for c, (name, coefs) in enumerate(TARGETS.items()):
        map_steps, sgd_steps = [], []
        for d in args.map_dims:
            tgt = tl.targets.hermite(coefs, d=d, seed=1)
            curves, steps_map = [], []
            for s in range(args.inits):  # the map from each random start's overlaps
                ov = tl.Overlaps.from_networks(student(d, args.K, seed=s), tgt)
                tr = tl.ode.integrate(ov, "relu", target=tgt, lr=g0, regime="large_batch", batch_ratio=alpha,
                                      n_steps=T, spherical=True)
                curves.append(np.abs(tr.M[:, :, 0]).max(axis=1))
                steps_map.append(first_crossing(curves[-1]))
            map_steps.append((np.nanmean(steps_map), np.nanstd(steps_map)))
            line = f"{name}, d={d}: steps to overlap {THRESHOLD}: map {steps_map}"
            if d in args.dims:
                start = time.perf_counter()
                m_sgd = []
                for s in range(args.runs):  # SGD from the same starts (one run each)
                    ens = tl.sgd.simulate(student(d, args.K, seed=s), tgt, lr=g0 * d,
                                          batch_size=int(round(alpha * d)), t_max=T / d, n_records=T + 1, seed=100 + s,
                                          spherical=True, keep_weights=False)
                    m_sgd.append(np.abs(ens.M[:, :, 0]).max(axis=1))
                m_sgd_a = np.array(m_sgd)  # (runs, T + 1)
                steps = [first_crossing(m) for m in m_sgd_a]
                sgd_steps.append((d, np.nanmean(steps), np.nanstd(steps)))
                line += f", SGD {steps} ({args.runs} runs in {time.perf_counter() - start:.1f} s)"
                if d in (min(args.dims), max(args.dims)):
                    ls = "-" if d == min(args.dims) else "--"
                    ax_t.plot(np.arange(T + 1), np.mean(curves[:args.runs], axis=0), ls, color=f"C{c}",
                              label=f"map, {name}, d={d}")
                    ax_t.errorbar(np.arange(T + 1), m_sgd_a.mean(0), yerr=m_sgd_a.std(0),
                                  fmt="o" if ls == "-" else "s", ms=3, color=f"C{c}", alpha=0.5)
            print(line)
        mm, ms = zip(*map_steps, strict=False)
        ax_d.errorbar(args.map_dims, mm, yerr=ms, fmt="-", color=f"C{c}", label=f"map, {name}")
        ds, mean, sd = zip(*sgd_steps, strict=False)
        ax_d.errorbar(ds, mean, yerr=sd, fmt="o", color=f"C{c}", label=f"SGD, {name}")
    ax_t.axhline(THRESHOLD, color="gray", ls=":")
    ax_t.set(xlabel="iteration t (one batch of n_b = alpha d)", ylabel="overlap with z1, max_i |M_i1|",
             title="overlap against iteration (markers: SGD)")
    ax_t.legend(fontsize=7)
    ax_d.set(xscale="log", xlabel="d", ylabel=f"iterations to overlap {THRESHOLD}",
             title="large-batch steps needed against d")
    ax_d.legend(fontsize=7)
    fig.suptitle(f"Leap 1 against leap 2: relu student K = {args.K} (spherical), n_b = {alpha:g} d, gamma0 = {g0:g} "
                 "(First order optimization methods)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
