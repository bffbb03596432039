"""Seed 002: online SGD on single-index Hermite targets He_k(z), escape time against d (information exponent).

A one-unit spherical student (|w|^2 = d, fixed readout a) learns the target He_k(z) (z = w* . x / sqrt(d)) from
a random start, overlap m = M_11 ~ 1 / sqrt(d) (its sign flipped towards the descent direction: for odd k the
drift ~ m^(k-1) has one sign). The student's activation has a nonzero k-th Hermite coefficient (k = 1: linear,
k = 2: quadratic, k = 3: erf with a = -1), so the population drift of m is ~ lr m^(k-1), against the online
noise term ~ lr^2 m of the spherical projection. k = 1, 2 run at a fixed lr: escape time O(1) and ~ log d.
For k = 3 the noise term stalls m at m* ~ lr unless lr ~ m0 ~ d^(-1/2): with lr = 0.4 / sqrt(d) the escape time
grows ~ d, i.e. ~ d^2 samples = d^(k-1) (t = steps / d). Dots: SGD runs; lines: the order-parameter ODE (exact
expectations for the target) from m0 = 1 / sqrt(d); SGD runs not escaped by t_max (6 d for k = 3) are left out
(printed as nan). Writes seed002_staircase_online.png (about a minute).

Run: python examples/seed002_staircase_online.py
"""

from __future__ import annotations

import argparse
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import twolayer as tl  # noqa: E402

ACTIVATION = {1: "linear", 2: "quadratic", 3: "erf"}
READOUT = {1: 1.0, 2: 1.0, 3: -1.0}
DIMS = {1: [250, 500, 1000, 2000], 2: [250, 500, 1000, 2000], 3: [50, 100, 200]}
THRESHOLD = 0.5


def lr(k: int, d: int) -> float:
    return {1: 0.5, 2: 0.05}.get(k, 0.4 / np.sqrt(d))


def t_max(k: int, d: int) -> float:
    return {1: 20.0, 2: 150.0}.get(k, 6.0 * d)


def escape_time(t: np.ndarray, m: np.ndarray) -> float:
    """First time |m| reaches THRESHOLD (linear interpolation), NaN if never."""
    hit = np.flatnonzero(np.abs(m) >= THRESHOLD)
    if hit.size == 0:
        return float("nan")
    j = int(hit[0])
    if j == 0:
        return float(t[0])
    m0, m1 = abs(m[j - 1]), abs(m[j])
    return float(t[j - 1] + (t[j] - t[j - 1]) * (THRESHOLD - m0) / (m1 - m0))


def start(d: int, k: int, seed: int) -> tuple[tl.Network, tl.targets.HermiteTarget]:
    """Target He_k and a random spherical one-unit student with M(0) >= 0."""
    tgt = tl.targets.hermite_single(k, d=d, seed=seed, normalized=False)
    rng = np.random.default_rng(seed + 1000)
    w = rng.standard_normal((1, d))
    w *= np.sqrt(d) / np.linalg.norm(w)
    if w[0] @ tgt.directions[0] < 0:
        w = -w
    return tl.Network(w, np.full(1, READOUT[k]), ACTIVATION[k]), tgt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every d by this (e.g. 0.5: faster)")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--out", default="seed002_staircase_online.png")
    args = parser.parse_args()
    t0 = time.time()
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for k, color in zip((1, 2, 3), ("C0", "C1", "C2"), strict=True):
        times, ode_times = [], []
        dims = [max(20, int(round(d * args.scale))) for d in DIMS[k]]
        for d in dims:
            runs = []
            for s in range(args.seeds):
                student, tgt = start(d, k, s)
                tr = tl.sgd.simulate(student, tgt, lr=lr(k, d), spherical=True, t_max=t_max(k, d), records=2001,
                                     keep_weights=False)
                runs.append(escape_time(tr.t, tr.M[:, 0, 0]))
                if d == dims[-1] and s == 0:
                    ax[1].plot(tr.t, np.abs(tr.M[:, 0, 0]), color=color, lw=0.8, label=f"SGD k = {k}, d = {d}")
            times.append(runs)
            # the ODE from m0 = 1 / sqrt(d) (the typical |m| of the random start)
            m0 = 1.0 / np.sqrt(d)
            ov = tl.Overlaps(np.ones((1, 1)), [[m0]], np.eye(1), np.full(1, READOUT[k]), np.zeros(1))
            ode = tl.ode.integrate(ov, ACTIVATION[k], target=tgt, lr=lr(k, d), spherical=True, t_max=t_max(k, d),
                                   n_points=4001)
            ode_times.append(escape_time(ode.t, ode.M[:, 0, 0]))
            print(f"k = {k}, d = {d:5d}: SGD escape times {np.round(runs, 2)}, ODE from 1/sqrt(d): "
                  f"{ode_times[-1]:.2f}")
        arr = np.array(times)
        for j, d in enumerate(dims):
            ax[0].scatter([d] * arr.shape[1], arr[j], color=color, s=12, alpha=0.7)
        ax[0].plot(dims, ode_times, color=color, label=f"He_{k} ({ACTIVATION[k]} student), ODE")
    ax[0].set(xscale="log", yscale="log", xlabel="d", ylabel=f"escape time t (|m| = {THRESHOLD})",
              title="information exponent k: O(1), log d, d (k = 3 at lr ~ 1/sqrt d)")
    ax[0].legend(fontsize=8)
    ax[1].set(xlabel="t = steps / d", ylabel="|m|", xscale="log", title="overlap, largest d of each k")
    ax[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out} in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
