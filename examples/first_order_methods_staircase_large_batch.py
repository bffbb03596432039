"""First order optimization methods: the staircase z1 + z1 z2 + z1 z2 z3 under large-batch SGD and its d -> infinity
map.

A relu student (K = 4, readout "mean", second layer fixed, spherical: every |w_i|^2 = d after each step, the
paper's eq. 7) learns the polynomial target y = z1 + z1 z2 + z1 z2 z3, z = W* x / sqrt(d), from a random start.

Time convention: one iteration t = one SGD step on a fresh batch of n_b = alpha d samples with
``sgd.simulate(lr=gamma0 * d, batch_size=alpha * d)`` (recorded at t_max = T / d in the simulator's clock
steps / d, i.e. the simulator's time times d is the iteration); the map is
``ode.integrate(ov, target=tgt, lr=gamma0, regime="large_batch", batch_ratio=alpha, n_steps=T, spherical=True)``,
its exact expectations of the target (twolayer.targets) and t = iteration. The map starts from each d's own
initial overlaps (M ~ 1 / sqrt(d)).

Plotted: the overlap with each target direction, max_i |M_ir| (cosines: Q_ii = 1), against the iteration; map
(lines) against SGD at d = 1000, 2000, 4000 (markers: means over runs). What it shows: z1 is picked up in the first
step (relu has a He_1 coefficient), z2 in a few steps once M_1 is nonzero (E[sigma'(l) z2 z1 z2] = M_1
E[sigma''(l)] != 0: relu has a He_2 coefficient); both in a number of steps that does not grow with d (the staircase
is learnable in O(1) large-batch steps). The third direction needs E[sigma'(l) z1 z2] ~ M_1 M_2 E[sigma'''(l)],
which is 0 for relu (its He_3 coefficient vanishes): in the map z3 stays where it started, and SGD's z3 overlap
stays at its 1 / sqrt(d) noise floor -- a relu student climbs the first two steps of this staircase only.
Writes first_order_methods_staircase_large_batch.png (about a minute).

Run: python examples/first_order_methods_staircase_large_batch.py
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import twolayer as tl  # noqa: E402


def student(d: int, K: int, seed: int) -> tl.Network:
    W = np.random.default_rng(seed).standard_normal((K, d))
    W *= np.sqrt(d) / np.linalg.norm(W, axis=1, keepdims=True)  # on the sphere |w|^2 = d
    return tl.Network(W, np.ones(K), "relu", readout="mean")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--gamma0", type=float, default=2.0)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--K", type=int, default=4)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--dims", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument("--out", default="first_order_methods_staircase_large_batch.png")
    args = parser.parse_args()
    T, g0, alpha = args.steps, args.gamma0, args.alpha
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), sharey=True)
    for j, d in enumerate(args.dims):
        tgt = tl.targets.staircase(3, d=d, seed=1)
        st = student(d, args.K, seed=0)
        ov = tl.Overlaps.from_networks(st, tgt)
        start = time.perf_counter()
        tr = tl.ode.integrate(ov, "relu", target=tgt, lr=g0, regime="large_batch", batch_ratio=alpha, n_steps=T,
                              spherical=True)
        t_map = time.perf_counter() - start
        start = time.perf_counter()
        ens = tl.sgd.simulate(st, tgt, lr=g0 * d, batch_size=int(round(alpha * d)), t_max=T / d, n_records=T + 1,
                              seeds=args.runs, spherical=True, keep_weights=False)
        t_sgd = time.perf_counter() - start
        m_map = np.abs(tr.M).max(axis=1)  # (T + 1, 3): the best student per direction
        m_sgd = np.abs(ens.M).max(axis=2)  # (runs, T + 1, 3)
        ax = axes[min(j, len(axes) - 1)]
        for r in range(3):
            ax.plot(tr.t, m_map[:, r], "-", color=f"C{r}", lw=1.5, label=f"map, z{r + 1}")
            ax.errorbar(ens.t * d, m_sgd[..., r].mean(0), yerr=m_sgd[..., r].std(0), fmt="o", ms=4, color=f"C{r}",
                        alpha=0.6, label=f"SGD, z{r + 1}")
        ax.set(title=f"d = {d}", xlabel="iteration t (one batch of n_b = alpha d)")
        print(f"d={d}: map {T} iterations in {t_map * 1e3:.1f} ms, {args.runs} SGD runs in {t_sgd:.1f} s; "
              f"final overlaps map {m_map[-1].round(3)}, SGD {m_sgd[:, -1].mean(0).round(3)} "
              f"(+- {m_sgd[:, -1].std(0).round(3)}); max |map - SGD mean| over t: "
              f"{np.abs(m_map - m_sgd.mean(0)).max():.3f}")
    axes[0].set_ylabel("overlap max_i |M_ir| with direction z_r")
    axes[0].legend(fontsize=7, ncol=2)
    fig.suptitle(f"Staircase z1 + z1 z2 + z1 z2 z3, relu student K = {args.K} (spherical), n_b = {alpha:g} d, "
                 f"gamma0 = {g0:g} (First order optimization methods)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
