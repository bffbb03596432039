"""Reused batches against one pass ("First Order Optimization Methods in Two-Layer Neural Networks Training"): a ReLU
student of p = 2 units (fixed readout a = (1, 1)) on two targets of z = W* x / sqrt(d), He3(z) = z^3 - 3z:

* y = z1 + He3(z2) (top row, the main panel): z2 enters only through He3, so E[y z2 | z1] = 0 and the one-pass
  map keeps M_{.2} = 0 exactly from M(0) = 0; reusing the batch feeds the labels back into the pre-activations
  (the DMFT's memory term) and pulls the student along z2: small (overlap about -0.03 at alpha 3, lr 0.3, T = 10)
  but resolved at d = 2000 (docs/layers/dmft.rst, "Which directions reuse learns");
* y = tanh(z1 + He3(z2)) (bottom row, the issue's target): E[y z2] = -0.30 (measured), so z2 has a linear
  component and one-pass methods learn it too; reuse does not help here.

Curves: the signed overlap with each direction, m_r = mean_i M_ir / sqrt(Q_ii), against the iteration t, for

* one pass, d -> infinity: the large-batch map, a fresh batch of n = alpha d samples at every step
  (:func:`twolayer.dmft.one_pass`);
* one pass, finite d: large-batch SGD on fresh batches (``tl.sgd.simulate(lr = eta d, batch_size = alpha d)``);
* reused batch, finite d: full-batch GD on one training set of n = alpha d samples (:mod:`twolayer.full_batch`);
* reused batch, d -> infinity: its DMFT (:func:`twolayer.dmft.solve`).

All four use the same step eta (the first-order-methods paper's gamma0), alpha and ridge; time is the iteration;
finite-d curves show the mean over seeds with its standard error.

Default: d = 2000, 8 seeds, T = 10 (a few minutes); ``--full``: 16 seeds, T = 30.
Writes first_order_methods_batch_reuse.png.

Run: python examples/first_order_methods_batch_reuse.py [--full]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import twolayer as tl  # noqa: E402


def z1_he3(z: np.ndarray) -> np.ndarray:
    return z[:, 0] + z[:, 1] ** 3 - 3 * z[:, 1]


def tanh_he3(z: np.ndarray) -> np.ndarray:
    return np.tanh(z[:, 0] + z[:, 1] ** 3 - 3 * z[:, 1])


TARGETS = {"z1 + He3(z2)": z1_he3, "tanh(z1 + He3(z2))": tanh_he3}


def overlaps(M: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """m_r = mean_i M_ir / sqrt(Q_ii), (..., T, k) from M (..., T, p, k), Q (..., T, p, p)."""
    q = np.sqrt(np.einsum("...ii->...i", Q))[..., None]
    return np.asarray((M / q).mean(axis=-2))


def run(fn, d: int, seeds: int, T: int, alpha: float, lr: float, ridge: float,
        n_mc: int) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """label -> (mean overlap (T+1, k), its standard error over seeds or None)."""
    target = tl.targets.function(fn, k=2, d=d, seed=1)
    Wt = target.directions
    W = tl.Network.random(2, d, "relu", seed=5).W
    W = W - (W @ Wt.T / d) @ Wt  # M(0) = 0, as in the d -> infinity curves
    student = tl.Network(W, np.ones(2), "relu")
    Q0 = W @ W.T / d
    out: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}

    def seeds_stat(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return m.mean(axis=0), m.std(axis=0, ddof=1) / np.sqrt(len(m))

    lb = tl.dmft.one_pass(target, activation="relu", a=np.ones(2), lr=lr, n_steps=T, alpha=alpha, ridge=ridge, Q0=Q0,
                          n_mc=10 * n_mc)  # its M_.2 = 0 on z1 + He3(z2) up to the Monte Carlo error
    out["one pass, map (d = inf)"] = (overlaps(lb["M"], lb["Q"]), None)
    if ridge == 0:
        n = int(round(alpha * d))
        ens = tl.sgd.simulate(student, target, lr=lr * d, batch_size=n, times=np.arange(T + 1) / d, seeds=seeds)
        out[f"one pass, SGD (d = {d})"] = seeds_stat(np.array([overlaps(r.M, r.Q) for r in ens.runs]))
    fb = tl.full_batch.simulate(student, target, alpha=alpha, lr=lr, n_steps=T, ridge=ridge, seeds=seeds, seed=3,
                                n_test=20_000)
    out[f"reused, GD (d = {d})"] = seeds_stat(overlaps(fb.M, fb.Q))
    res = tl.dmft.solve(target, activation="relu", a=np.ones(2), alpha=alpha, lr=lr, ridge=ridge, n_steps=T, Q0=Q0,
                        n_mc=n_mc)
    out["reused, DMFT (d = inf)"] = (overlaps(res.M, res.Q), None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="16 seeds, T = 30")
    parser.add_argument("--d", type=int, default=2000)
    parser.add_argument("--alpha", type=float, default=3.0)
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--ridge", type=float, default=0.0)
    parser.add_argument("--out", default="first_order_methods_batch_reuse.png")
    args = parser.parse_args()
    seeds, T, n_mc = (16, 30, 200_000) if args.full else (8, 10, 100_000)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), sharex=True)
    styles = ["-", "o", "s", "--"]
    for row, (name, fn) in enumerate(TARGETS.items()):
        curves = run(fn, args.d, seeds, T, args.alpha, args.lr, args.ridge, n_mc)
        for r in range(2):
            ax = axes[row, r]
            for (label, (m, se)), st in zip(curves.items(), styles, strict=False):
                t = np.arange(len(m))
                if se is None:
                    ax.plot(t, m[:, r], st, label=label)
                else:
                    ax.errorbar(t, m[:, r], yerr=se[:, r], fmt=st, label=label, ms=4, mfc="none", capsize=2)
            ax.axhline(0.0, color="grey", lw=0.5)
            ax.set_title(f"y = {name}: direction z{r + 1}")
        axes[row, 0].set_ylabel(r"$\mathrm{mean}_i\, M_{ir} / \sqrt{Q_{ii}}$")
        for label, (m, se) in curves.items():
            err = "" if se is None else f" +- {np.round(se[-1], 3)}"
            print(f"{name:20s} {label:28s} final m = {np.round(m[-1], 3)}{err}")
    for ax in axes[1]:
        ax.set_xlabel("iteration t")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(rf"ReLU p = 2, $\alpha$ = {args.alpha:g}, $\eta$ = {args.lr:g}, d = {args.d}")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
