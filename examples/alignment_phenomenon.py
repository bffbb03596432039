"""The alignment paper: alignment of student neurons with teacher neurons (ReLU, d = 2, unit second layers).

1. Figure 1: population gradient descent of ``--students`` students (default 6) on a ``--teachers``-neuron
   teacher (default 1); student directions over time converge onto the teacher directions. The paper's
   Figure 1 has a 5-neuron teacher (``--teachers 5``); its text does not give the student width or the
   learning rate, and it draws epochs 0, 10, 1000, 50000 of SGD where this draws population gradient descent
   at flow times 0, 1, 100, 2000, 20000.
2. Figure 4 / Theorem 5.1: the determinant condition det M > 0 and min_i det M_i <= 0 for 100 000 random angle
   sets with m = 6 and m = 9 (one teacher at angle 0), vectorised.
Writes alignment_phenomenon.png.

Run: python examples/alignment_phenomenon.py
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import twolayer as tl  # noqa: E402

L = tl.landscape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", type=int, default=100_000)
    parser.add_argument("--teachers", type=int, default=1)
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--out", default="alignment_phenomenon.png")
    args = parser.parse_args()
    rng = np.random.default_rng(0)

    # 1. alignment in d = 2
    t_angles = np.sort(rng.uniform(0, 2 * np.pi, args.teachers))
    teacher = tl.Network(np.column_stack([np.cos(t_angles), np.sin(t_angles)]), None, "relu", scaling="none")
    student = tl.Network(0.3 * rng.standard_normal((args.students, 2)), None, "relu", scaling="none")
    times = [0.0, 1.0, 100.0, 2000.0, 20000.0]
    path = L.alignment_flow(student, teacher, times, lr=0.1)
    print("flow time   risk")
    for tau, r in zip(path.tau, path.risk, strict=True):
        print(f"{tau:9.1f}  {r:.3e}")
    final = path.W[-1]
    norms = np.linalg.norm(final, axis=1)
    # with several teachers a zero-loss point may also put students on -w*_r (relu(z) = (z + |z|)/2: the |.|
    # parts see only the line, the linear parts must add up), the "negative alignment" of the paper
    both = np.concatenate([t_angles, np.mod(t_angles + np.pi, 2 * np.pi)])
    diff = np.abs(path.angles[-1][:, None] - both[None, :])
    diff = np.minimum(diff, 2 * np.pi - diff)
    which = diff.argmin(axis=1)
    print("student   |w|     angle to nearest +-teacher   sign")
    for i, (n_, j) in enumerate(zip(norms, which, strict=True)):
        print(f"  {i:2d}   {n_:.4f}   {diff[i, j]:.2e}   {'+' if j < args.teachers else '-'}")

    # 2. determinant condition
    stats = {}
    for m in (6, 9):
        angles = np.sort(rng.uniform(0, 2 * np.pi, (args.sets, m)), axis=1)
        t0 = time.perf_counter()
        det_M, z = L.alignment_determinants(angles)
        dt = time.perf_counter() - t0
        stats[m] = z
        print(
            f"m = {m}: {args.sets} sets in {dt:.3f} s; det M > 0 in {np.mean(det_M > 0):.4%}, "
            f"min_i det M_i <= 0 in {np.mean(z <= 0):.4%} (max z = {z.max():.3e})"
        )

    fig = plt.figure(figsize=(16, 7))
    grid = fig.add_gridspec(2, 10)
    for j, tau in enumerate(path.tau):
        ax = fig.add_subplot(grid[0, 2 * j : 2 * j + 2])
        for w in teacher.W:
            ax.plot([0, w[0]], [0, w[1]], "k:", lw=1.5)
        for w in path.W[j]:
            ax.plot([0, w[0]], [0, w[1]], "-", color="tab:blue", lw=1.2)
        ax.set_aspect("equal")
        ax.set_xlim(-1.1, 1.1)
        ax.set_ylim(-1.1, 1.1)
        ax.set_title(f"flow time {tau:g}")
    for j, m in enumerate((6, 9)):
        ax = fig.add_subplot(grid[1, 5 * j : 5 * j + 5])
        z = stats[m]
        ax.hist(np.clip(z, np.quantile(z, 0.01), 0.0) if np.all(z <= 0) else z, bins=100)
        ax.set(title=f"m = {m}: z = min_i det M_i (clipped to the 1% quantile)", xlabel="z", yscale="log")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
