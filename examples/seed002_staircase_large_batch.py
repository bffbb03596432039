"""Seed 002: large-batch SGD (batches of n_b = alpha d, step gamma0) and its d -> infinity map, layer-wise training.

A relu student (K = 4, readout "mean", second layer fixed during the first-layer phase) learns a two-unit
committee target from a random start. An erf teacher has a linear (He_1) component: its directions are picked up
in the very first large-batch steps. A quadratic teacher has none (information exponent 2, a leap-2 target): at
M = 0 the population gradient has no component along the teacher directions, the map stays at M = 0, and finite-d
SGD only drifts from its M ~ 1/sqrt(d) start. Top: |M| (largest overlap of a student with each teacher unit)
against the iteration, the map (lines) against SGD at d = 1000, 2000, 4000 (markers: means over runs). Bottom:
the excess risk after layer-wise training (first layer T steps, then the ridge second layer), map against SGD.
Writes seed002_staircase_large_batch.png.

Run: python examples/seed002_staircase_large_batch.py
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import twolayer as tl  # noqa: E402


def networks(d: int, teacher_activation: str, seed: int) -> tuple[tl.Network, tl.Network]:
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((4, d))
    U, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    student = tl.Network(W, np.ones(4), "relu", readout="mean")
    teacher = tl.Network(U.T * np.sqrt(d), np.ones(2), teacher_activation, readout="mean")
    return student, teacher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--gamma0", type=float, default=4.0)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dims", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument("--out", default="seed002_staircase_large_batch.png")
    args = parser.parse_args()
    T, g0, alpha = args.steps, args.gamma0, args.alpha
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for col, t_act in enumerate(("erf", "quadratic")):
        ax = axes[0, col]
        ov = tl.Overlaps.from_networks(*networks(max(args.dims), t_act, seed=0))
        start = time.perf_counter()
        lw = tl.large_batch.layerwise(ov, lr=g0, batch_ratio=alpha, steps=T, ridge=1e-3)
        t_map = time.perf_counter() - start
        m_map = np.abs(lw.first.M).max(axis=1)  # (T + 1, M): best student per teacher unit
        for r in range(2):
            ax.plot(lw.first.t, m_map[:, r], "k-", lw=1.5, label="map" if r == 0 else None)
        risks = []
        for d, marker in zip(args.dims, "os^", strict=False):
            st, te = networks(d, t_act, seed=0)
            start = time.perf_counter()
            sims = [tl.large_batch.simulate_layerwise(st, te, lr=g0 * d, batch_size=int(alpha * d), steps=T,
                                                      ridge=1e-3, seed=s) for s in range(args.runs)]
            t_sgd = time.perf_counter() - start
            m = np.mean([np.abs(s.first.M).max(axis=1) for s in sims], axis=0)
            for r in range(2):
                ax.plot(np.arange(T + 1), m[:, r], marker, ms=4, color=f"C{r}", alpha=0.4 + 0.2 * (d / max(args.dims)),
                        label=f"SGD d={d}" if r == 0 else None)
            risks.append((d, np.mean([s.risk for s in sims]), np.std([s.risk for s in sims])))
            print(f"{t_act}: d={d}: {args.runs} SGD runs in {t_sgd:.1f} s; final max|M| {m[-1].round(3)}, "
                  f"layer-wise risk {risks[-1][1]:.4f}")
        print(f"{t_act}: map {T} iterations in {t_map * 1e3:.1f} ms; final max|M| {m_map[-1].round(3)}, "
              f"layer-wise risk {lw.risk:.4f}")
        ax.set(title=f"{t_act} teacher (M = 2), relu student (K = 4)", xlabel="iteration t",
               ylabel="max_i |M_ir|", ylim=(0, 1.05))
        ax.legend(fontsize=8)
        ax = axes[1, col]
        ds, rm, rs = zip(*risks, strict=False)
        ax.errorbar(ds, rm, yerr=rs, fmt="o", label="SGD + ridge on fresh samples")
        ax.axhline(lw.risk, color="k", label="map + population ridge")
        ax.axhline(lw.first.risk[0], color="gray", ls=":", label="initial risk")
        ax.set(xscale="log", xlabel="d", ylabel="excess risk after layer-wise training")
        ax.legend(fontsize=8)
    fig.suptitle(f"Large-batch SGD, n_b = {alpha:g} d, gamma0 = {g0:g} (seed 002)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
