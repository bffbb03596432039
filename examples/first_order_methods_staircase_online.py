"""First order optimization methods: online SGD on single-index Hermite targets He_k(z), escape time against d
(information exponent).

A one-unit spherical student (|w|^2 = d, fixed readout a) learns the target He_k(z) (z = w* . x / sqrt(d)) from
a random start, overlap m = M_11 ~ 1 / sqrt(d) (its sign flipped towards the descent direction: for odd k the
drift ~ m^(k-1) has one sign). The student's activation has a nonzero k-th Hermite coefficient (k = 1: linear,
k = 2: quadratic, k = 3: erf with a = -1), so the population drift of m is ~ lr m^(k-1), against the online
noise term ~ lr^2 m of the spherical projection. k = 1, 2 run at a fixed lr: escape time O(1) and ~ log d.
For k = 3 the noise term stalls m at m* ~ lr unless lr ~ m0 ~ d^(-1/2): with lr = 0.4 / sqrt(d) the escape time
grows ~ d, i.e. ~ d^2 samples = d^(k-1) (t = steps / d).

Dots: SGD runs; triangles at t_max: runs not escaped by t_max (6 d for k = 3), lower bounds of their escape times,
counted in the printed table. Lines, k = 1, 2: the order-parameter ODE (exact expectations for the target) from
m0 = 1 / sqrt(d). For k = 3 the ODE does not describe SGD at these d, and no parameter of it is wrong (time units,
start, target normalisation all match): its drift has an unstable fixed point at m0 sqrt(d) = 0.533 (the same at
every d, since m* ~ lr ~ 1 / sqrt(d)), in the middle of the starts' law |N(0, 1)|, so it predicts no escape at all
for 40 % of the starts and a sharp time for the others, while the SGD noise on m over the escape (~ lr sqrt(t / d)
~ 1 / sqrt(d)) is as large as m0 and m* themselves: the escape is a noise-driven first passage, which only
vanishes as d -> infinity at fixed m0 sqrt(d). Its finite-d law is the diffusion approximation's (tl.sde): k = 3
also shows the SDE from the same starts (open squares, slightly right; its median escape time as the line). At
d = 100 over 16 starts SGD escaped 11 (median 251), the SDE 11 (median 254), while the ODE from each start's own
m0 misses in both directions (an SGD run from m0 sqrt(d) = 0.42 escapes at t = 111, the ODE never). Writes
first_order_methods_staircase_online.png (about a minute and a half).

Run: python examples/first_order_methods_staircase_online.py
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


def sgd_escapes(d: int, k: int, seeds: int) -> tuple[np.ndarray, list[tl.Overlaps], tl.Trajectory]:
    """Escape times of SGD runs (NaN: not escaped by t_max), their starts as overlaps, and the first run."""
    times, starts, first = [], [], None
    for s in range(seeds):
        student, tgt = start(d, k, s)
        tr = tl.sgd.simulate(student, tgt, lr=lr(k, d), spherical=True, t_max=t_max(k, d), n_records=2001,
                             keep_weights=False)
        times.append(escape_time(tr.t, tr.M[:, 0, 0]))
        starts.append(tl.Overlaps(np.ones((1, 1)), tr.M[0], np.eye(1), np.full(1, READOUT[k]), np.zeros(1)))
        if first is None:
            first = tr
    assert first is not None
    return np.array(times), starts, first


def sde_escapes(d: int, k: int, starts: list[tl.Overlaps]) -> np.ndarray:
    """Escape times of SDE paths (diffusion approximation at dimension d) from the given starts."""
    tgt = tl.targets.hermite_single(k, d=d, seed=0, normalized=False)
    ens = tl.sde.simulate(starts, ACTIVATION[k], target=tgt, lr=lr(k, d), d=d, spherical=True, t_max=t_max(k, d),
                          seeds=list(range(len(starts))), n_records=2001, dt=0.05)
    return np.array([escape_time(r.t, r.M[:, 0, 0]) for r in ens.runs])


def median_with_censoring(times: np.ndarray) -> float:
    """Median counting runs not escaped as later than all others (NaN if half or more did not escape)."""
    m = float(np.median(np.where(np.isnan(times), np.inf, times)))
    return m if np.isfinite(m) else float("nan")


def scatter(ax: plt.Axes, d: float, times: np.ndarray, tmax: float, color: str, hollow: bool) -> None:
    """Escaped runs as points, the others as triangles at t_max (lower bounds)."""
    face = "none" if hollow else color
    marker = "s" if hollow else "o"
    ok = np.isfinite(times)
    ax.scatter([d] * int(ok.sum()), times[ok], s=14, marker=marker, facecolors=face, edgecolors=color, alpha=0.8)
    if (~ok).any():
        ax.scatter([d] * int((~ok).sum()), [tmax] * int((~ok).sum()), s=30, marker="^", facecolors=face,
                   edgecolors=color)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every d by this (e.g. 0.5: faster)")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--out", default="first_order_methods_staircase_online.png")
    args = parser.parse_args()
    t0 = time.time()
    fig, ax = plt.subplots(1, 2, figsize=(11, 4.2))
    for k, color in zip((1, 2, 3), ("C0", "C1", "C2"), strict=True):
        line = []
        dims = [max(20, int(round(d * args.scale))) for d in DIMS[k]]
        for d in dims:
            runs, starts, first = sgd_escapes(d, k, args.seeds)
            if d == dims[-1]:
                ax[1].plot(first.t, np.abs(first.M[:, 0, 0]), color=color, lw=0.8, label=f"SGD k = {k}, d = {d}")
            scatter(ax[0], d, runs, t_max(k, d), color, hollow=False)
            n_esc = f"{int(np.isfinite(runs).sum())}/{len(runs)} escaped"
            if k < 3:  # the ODE from m0 = 1 / sqrt(d) (the typical |m| of the random start)
                _, tgt = start(d, k, 0)
                ov = tl.Overlaps(np.ones((1, 1)), [[1.0 / np.sqrt(d)]], np.eye(1), np.full(1, READOUT[k]), np.zeros(1))
                ode = tl.ode.integrate(ov, ACTIVATION[k], target=tgt, lr=lr(k, d), spherical=True,
                                       t_max=t_max(k, d), n_records=4001)
                line.append(escape_time(ode.t, ode.M[:, 0, 0]))
                other = f"ODE from 1/sqrt(d): {line[-1]:.2f}"
            else:  # the SDE from the same starts: the finite-d law of the escape
                sde = sde_escapes(d, k, starts)
                scatter(ax[0], d * 1.08, sde, t_max(k, d), color, hollow=True)
                line.append(median_with_censoring(sde))
                other = (f"SDE {int(np.isfinite(sde).sum())}/{len(sde)} escaped, times {np.round(sde, 1)}, "
                         f"median {line[-1]:.1f}")
            print(f"k = {k}, d = {d:5d}: SGD {n_esc}, times {np.round(runs, 2)} (nan: not by t_max = "
                  f"{t_max(k, d):g}); {other}")
        label = f"He_{k} ({ACTIVATION[k]} student), " + ("ODE" if k < 3 else "SDE median (where defined)")
        ok = np.isfinite(line)
        ax[0].plot(np.array(dims)[ok], np.array(line)[ok], color=color, marker="x" if k == 3 else None, label=label)
    ax[0].scatter([], [], marker="^", facecolors="none", edgecolors="k", label="not escaped by t_max (lower bound)")
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
