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
Writes first_order_methods_staircase_large_batch.png (about 10 s on two cores).

Parity (second figure, the map alone, from M = 0 exactly, K = 2, spherical): relu, GELU, SiLU and softplus are x/2
plus an even function, tanh, erf and sigmoid are odd, so each misses a parity. From M = 0 the map's pull on z_r is
E[sigma'(l) d_r f] with the earlier directions' overlaps only: z1 needs E[sigma'] (step 1), z2 m1 E[sigma''] (step
2), z3 m1 m2 E[sigma'''] (step 3). Without a bias E[sigma''] = 0 for the odd units (erf, tanh: z2 and z3 stay
exactly 0) and E[sigma'''] = 0 for relu and softplus (z3 stays 0); by the global sign flip (l, z) -> -(l, z) these
zeros hold at every iteration, not only the first. A bias b != 0 breaks the parity: softplus (b = -1) and tanh
(b = 0.5) climb z1, z2, z3 one direction per iteration. Measured (gamma0 = 2, alpha = 1, a = 1/2): max_i |M_ir|
after iterations 1, 2, 3 (printed by the script, asserted in tests/test_targets_bias.py):
  relu             z1 0.318 0.432 0.482   z2 0 0.082 0.138      z3 0 0 0 (exactly)
  erf              z1 0.370 0.551 0.642   z2 0 0 0 (exactly)    z3 0 0 0 (exactly)
  softplus         z1 0.357 0.505 0.569   z2 0 0.053 0.097      z3 0 0 2e-18 (the quadrature's round-off)
  tanh             z1 0.369 0.536 0.617   z2 0 2e-18 4e-18      z3 0 0 3e-19
  softplus b = -1  z1 0.270 0.449 0.563   z2 0 0.041 0.094      z3 0 0 0.0008
  tanh b = 0.5     z1 0.349 0.516 0.599   z2 0 0.037 0.073      z3 0 0 0.0035
  He1 + He2 + He3   z1 0.022 0.015 0.017   z2 0 0.0010 0.0003    z3 0 0 2e-6
(z2 after one iteration and z3 after two are exactly 0 for every unit: the pull needs the earlier overlaps.)
The last is the activation "hermite(0,1,1,1)" (E[sigma^(r)] = r! c_r != 0 for r = 1, 2, 3, no bias needed; asserted
in tests/test_activations_hermite.py): it climbs z1, z2, z3 one per iteration, with small overlaps at this learning
rate because its own large variance (Var sigma = 9) dominates the normalised step.
Writes first_order_methods_staircase_parity.png (seconds).

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


# (activation, bias) of the parity figure
PARITY = (("relu", 0.0), ("erf", 0.0), ("softplus", 0.0), ("tanh", 0.0), ("softplus", -1.0), ("tanh", 0.5),
          ("hermite(0,1,1,1)", 0.0))


def parity_climb(act: str, bias: float, steps: int = 6, K: int = 2, gamma0: float = 2.0,
                 alpha: float = 1.0) -> tl.Trajectory:
    """The map from M = 0 exactly on z1 + z1 z2 + z1 z2 z3: K spherical students (Q from a fixed draw, unit
    diagonal), second layer 1/K, every student bias ``bias``."""
    W = np.random.default_rng(0).standard_normal((K, 50))
    Q = W @ W.T
    Q /= np.sqrt(np.outer(np.diag(Q), np.diag(Q)))
    tgt = tl.targets.staircase(3, d=50, seed=1)  # the map needs only the coefficients (M is given)
    ov = tl.Overlaps(Q, np.zeros((K, 3)), np.eye(3), np.full(K, 1.0 / K), np.zeros(3), bias=np.full(K, bias))
    return tl.ode.integrate(ov, act, target=tgt, lr=gamma0, regime="large_batch", batch_ratio=alpha,
                            n_steps=steps, spherical=True)


def parity_figure(out: str) -> None:
    fig, axes = plt.subplots(1, len(PARITY), figsize=(3.0 * len(PARITY), 3.4), sharey=True)
    for ax, (act, b) in zip(axes, PARITY, strict=True):
        tr = parity_climb(act, b)
        m = np.abs(tr.M).max(axis=1)
        for r in range(3):
            ax.semilogy(tr.t, np.maximum(m[:, r], 1e-20), "o-", color=f"C{r}", ms=3, label=f"z{r + 1}")
        ax.set(title=f"{act}, b = {b:g}", xlabel="iteration", ylim=(1e-20, 2))
        print(f"{act:9s} b={b:5.2f}: max_i |M_ir| after iterations 1..3: "
              + "  ".join(f"z{r + 1} {np.array2string(m[1:4, r], precision=4)}" for r in range(3)))
    axes[0].set_ylabel("max_i |M_ir| (1e-20: exactly 0)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Staircase from M = 0, large-batch map: one direction per iteration, unless a parity kills it")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--gamma0", type=float, default=2.0)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--K", type=int, default=4)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--dims", type=int, nargs="+", default=[1000, 2000, 4000])
    parser.add_argument("--out", default="first_order_methods_staircase_large_batch.png")
    parser.add_argument("--parity-out", default="first_order_methods_staircase_parity.png")
    args = parser.parse_args()
    parity_figure(args.parity_out)
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
