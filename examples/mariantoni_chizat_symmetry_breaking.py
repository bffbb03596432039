"""Mariantoni & Chizat (2022): symmetry breaking in the gradient flow of step-activation networks (m = m*).

sigma(s) = 1(s > 0), lambda = w.x, unit second layers. The flow depends on the weights only through their
angles, and is equivariant under rotations of the input space. We compare
  * Gaussian initialisation theta(0) (d x 2m, entries N(0, 1/d): teacher and student columns) and
  * orthogonal initialisation theta_O(0) (2m orthonormal columns),
align them with the Procrustes rotation P = argmin |theta(0) - P theta_O(0)|_F (section 3 of the report) and
follow |theta(t) - P theta_O(t)|_F along the flow (Lemma 1) for growing d; the initial distance is the Lemma 2
quantity sum_i (s_i - 1)^2 -> 0 as d grows. Writes mariantoni_chizat_symmetry_breaking.png.

The flow is run by population descent with step lr = 0.02 up to flow time 200, then the step is halved every 200
iterations (twolayer.schedules.step_decay; total flow time 208): fixed steps oscillate on the cusp of the loss at
alignment (risk ~1e-3), the decaying ones let the Gaussian runs that converge reach ~1e-12 (the paper's "machine
error, ~1e-9"; the step pairs' angles are resolved to ~1e-13 rad), while the orthogonal runs stay at their symmetric
fixed point (0.2622 at m = 3).

Run: python examples/mariantoni_chizat_symmetry_breaking.py
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import twolayer as tl  # noqa: E402

L = tl.landscape


def runs(m: int, d: int, seed: int, times: np.ndarray, lr: float, schedule=None):
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal((d, 2 * m)) / np.sqrt(d)  # teacher columns first, then students
    q, r = np.linalg.qr(rng.standard_normal((d, 2 * m)))
    theta_o = q * np.sign(np.diag(r))
    P = L.procrustes(theta, theta_o)
    out = []
    for th in (theta, theta_o):
        teacher = tl.Network(th[:, :m].T, None, "step", scaling="none")
        student = tl.Network(th[:, m:].T, None, "step", scaling="none")
        out.append(L.step_gradient_flow(student, teacher, times, lr=lr, schedule=schedule))
    gauss, orth = out
    dist = np.array([np.linalg.norm(gauss.theta[t] - P @ orth.theta[t]) for t in range(len(gauss.tau))])
    return gauss, orth, dist


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", type=int, default=3)
    parser.add_argument("--out", default="mariantoni_chizat_symmetry_breaking.png")
    args = parser.parse_args()
    m = args.m
    lr = 0.02
    schedule = tl.schedules.step_decay(0.5, every=200.0, start=200.0 / lr)  # iterations; flow time 200 + 8
    times = np.concatenate([[0.0], np.geomspace(0.1, 200.0, 25), 208.0 - np.geomspace(4.0, 1e-8, 12)])

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.4))
    print(f"m = {m}: final risks (Gaussian init / orthogonal init) and |theta(t) - P theta_O(t)|_F")
    print(f"{'d':>5} {'seed':>4} {'risk G':>10} {'risk O':>10} {'dist(0)':>9} {'dist(T)':>9}")
    for d, color in zip((8, 32, 128, 512), ("tab:blue", "tab:orange", "tab:green", "tab:red"), strict=True):
        for seed in range(3):
            g, o, dist = runs(m, d, seed, times, lr, schedule)
            print(
                f"{d:>5} {seed:>4} {g.risk[-1]:10.3e} {o.risk[-1]:10.3e} {dist[0]:9.4f} {dist[-1]:9.4f}"
                + ("" if g.status == o.status == "completed" else f"  ({g.status}/{o.status})")
            )
            lab = f"d = {d}" if seed == 0 else None
            ax[0].loglog(g.tau[1:], g.risk[1:], "-", color=color, alpha=0.7, label=lab)
            ax[0].loglog(o.tau[1:], o.risk[1:], ":", color=color, alpha=0.7)
            ax[1].semilogx(g.tau[1:], dist[1:], "-", color=color, alpha=0.7, label=lab)
    ax[0].set(xlabel="flow time", ylabel="risk", title="risk: Gaussian (solid) vs orthogonal (dotted) init")
    ax[1].set(xlabel="flow time", ylabel="|theta(t) - P theta_O(t)|_F", title="distance between the two runs")
    ax[0].legend()
    ax[1].legend()

    # Lemma 2: min_P |theta(0) - P theta_O(0)|_F^2 = sum (s_i - 1)^2, ~ (n^2 + n) / (4 d) for n = 2m columns
    n = 2 * m
    ds = np.array([8, 16, 32, 64, 128, 256, 512, 1024, 2048])
    rng = np.random.default_rng(1)
    mean = []
    for d in ds:
        vals = []
        for _ in range(50):
            A = rng.standard_normal((d, n)) / np.sqrt(d)
            s = np.linalg.svd(A, compute_uv=False)
            vals.append(np.sum((s - 1) ** 2))
        mean.append(np.mean(vals))
    mean = np.array(mean)
    print("\nLemma 2:  d   E sum (s_i - 1)^2   d * mean   ((n^2 + n)/4 =", (n * n + n) / 4, ")")
    for d, v in zip(ds, mean, strict=True):
        print(f"{d:8d}   {v:.5f}   {d * v:.3f}")
    ax[2].loglog(ds, mean, "o-", label="mean over 50 draws")
    ax[2].loglog(ds, (n * n + n) / (4 * ds), "k--", label="(n² + n) / (4d)")
    ax[2].loglog(ds, n * n / ds, "k:", label="bound n² / d of the report")
    ax[2].set(xlabel="d", ylabel="min_P |θ(0) − P θ_O(0)|²", title=f"Lemma 2 (n = 2m = {n})")
    ax[2].legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
