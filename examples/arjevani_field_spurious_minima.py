"""Arjevani & Field (2021), Safran-Shamir setting: spurious minima of two-layer ReLU networks and their symmetry.

Teacher W* = I_k, k = d, lambda = w.x, unit second layers. This script
1. runs many L-BFGS searches from Xavier starts for k = 6..10 and tabulates how often each family of critical
   points (risk, Hessian index, isotropy) is reached;
2. solves the 5-dimensional ΔS_{k-1} fixed-point system at k = 6, refines the point in the full space and
   continues the family for k = 5..20 (risk, smallest Hessian eigenvalue: a saddle at k = 5, a minimum from
   6);
3. writes arjevani_field_spurious_minima.png.

Run: python examples/arjevani_field_spurious_minima.py [--runs 200]
"""

from __future__ import annotations

import argparse

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import twolayer as tl  # noqa: E402

L = tl.landscape


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="searches per k")
    parser.add_argument("--out", default="arjevani_field_spurious_minima.png")
    args = parser.parse_args()

    print("1. multistart: families reached from Xavier starts")
    fractions = {}
    for k in range(6, 11):
        res = L.multistart(k, args.runs, init="xavier", seed=k)
        print(f"\nk = d = {k}, {args.runs} runs\n{res.table()}")
        fractions[k] = np.mean([kind == "spurious minimum" for kind in res.kind])

    print("\n2. the ΔS_{k-1} family")
    prob = L.SubspaceProblem(L.FixedPointSpace((5, 1)))
    x6, gn, ok = prob.solve([1.0, -0.05, -0.6, 0.3, 0.2])
    cp = L.refine(*_networks(prob, x6))
    iso = L.isotropy(cp.student.W)
    print(f"k = 6: {cp}\n  isotropy {iso.description} (order {iso.order}), W =\n{np.round(cp.student.W, 6)}")
    print("  Hessian spectrum (eigenvalue, multiplicity):")
    for lam, m in cp.spectrum(1e-7):
        print(f"    {lam:12.8f}  x{m}")
    up = L.continue_family(lambda k: (k - 1, 1), range(6, 21), x6)
    down = L.continue_family(lambda k: (k - 1, 1), [6, 5, 4], x6)[1:]
    fam = sorted(down + up, key=lambda p: p.k)
    print(f"\n{'k':>3} {'risk':>12} {'index':>5} {'min eig':>12}  kind              isotropy  coordinates")
    for p in fam:
        print(
            f"{p.k:>3} {p.risk:12.8f} {p.point.index:>5} {p.point.eigenvalues[0]:12.3e}  {p.point.kind:<17} "
            f"{p.isotropy:<9} {np.round(p.x, 5)}"
        )
    ks = np.array([p.k for p in fam])
    lmin = np.array([p.point.eigenvalues[0] for p in fam])
    turn = [(a, b) for a, b, la, lb in zip(ks[:-1], ks[1:], lmin[:-1], lmin[1:], strict=True) if la < 0 <= lb]
    if turn:
        a, b = turn[0]
        print(f"\nthe family turns from saddle into minimum between k = {a} and k = {b}")
    real = L.continue_real_k(x6, 6.0, np.linspace(6.0, 5.0, 6))
    print("real k: smallest standard-representation eigenvalue (multiplicity k - 2 at integer k)")
    for k, lam in zip(real.k, real.standard[:, 0], strict=True):
        print(f"  k = {k:5.2f}: {lam: .6e}")
    print(f"  the family turns from saddle into minimum at k = {real.k_turn:.5f}")

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    ax[0].bar(list(fractions), [fractions[k] for k in fractions], color="tab:red")
    ax[0].set(xlabel="k = d", ylabel="fraction of runs", title="searches ending in a spurious minimum")
    ax[1].plot(ks, [p.risk for p in fam], "o-")
    ax[1].set(xlabel="k", ylabel="excess risk", title="ΔS_{k-1} family: excess risk")
    ax[2].plot(ks, lmin, "o", label="integer k (full Hessian)")
    ax[2].plot(real.k, real.standard[:, 0], "-", label=f"real k (turn at {real.k_turn:.3f})")
    ax[2].legend()
    ax[2].axhline(0, color="k", lw=0.8)
    ax[2].set(xlabel="k", ylabel="smallest Hessian eigenvalue", title="saddle (< 0) or minimum (> 0)")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


def _networks(prob: L.SubspaceProblem, x: np.ndarray) -> tuple[tl.Network, tl.Network]:
    return prob.network(x), prob.teacher


if __name__ == "__main__":
    main()
