"""Figures (matplotlib, an optional extra: pip install 'twolayer[plot]')."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .demo import DemoResult
    from .results import Trajectory


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install 'twolayer[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def risk_curves(ax: Any, trajectories: list[Trajectory], color: str, label: str) -> None:
    """Excess risk against time on log-log axes; iteration 0 is drawn at 1/2 to keep it on the log axis."""
    for k, tr in enumerate(trajectories):
        t = np.where(tr.t > 0, tr.t, 0.5)
        ax.loglog(t, np.maximum(tr.risk, 1e-16), color=color, alpha=0.8, lw=1.2, label=label if k == 0 else None)


def demo_figure(result: DemoResult, path: str) -> None:
    """demo.png: one panel per experiment of the demo."""
    plt = _pyplot()
    fig, ax = plt.subplots(1, 1, figsize=(6.4, 4.6), constrained_layout=True)
    colors = {"gaussian": "tab:orange", "orthogonal": "tab:blue"}
    for init, runs in result.runs.items():
        risk_curves(ax, runs, colors.get(init, "k"), f"{init} init ({len(runs)} seeds)")
    c = result.config
    ax.set(xlabel="iteration", ylabel="excess population risk",
           title=f"Seed 000: step units, m = {c.units}, d = {c.d}, lr = {c.lr}")
    ax.legend()
    fig.savefig(path, dpi=120)
    plt.close(fig)
