"""Figures (matplotlib, an optional extra: pip install 'twolayer[plot]')."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._validation import writing

if TYPE_CHECKING:
    from .demo import DemoResult
    from .results import Trajectory


def pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive Agg backend, imported on first use (matplotlib is the optional
    ``plot`` extra).

    Returns
    -------
    module
        ``matplotlib.pyplot``; ImportError naming the extra where matplotlib is missing.

    Examples
    --------
    >>> from twolayer.plot import pyplot
    >>> pyplot().get_backend().lower()
    'agg'
    """
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("plotting needs matplotlib: pip install 'twolayer[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def risk_curves(ax: Any, trajectories: list[Trajectory], color: str, label: str) -> None:
    """Excess risk against time on log-log axes.

    Time 0 is drawn at 1/2 to keep it on the log axis.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The axes.
    trajectories : list of Trajectory
        One curve each.
    color : str
        Their colour.
    label : str
        Legend label (on the first curve).

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> traj = tl.ode.integrate(tl.ode.plateau_overlaps(), "erf", lr=1.0,
    ...                         t_max=10, n_records=5)
    >>> fig, ax = plt.subplots()
    >>> tl.plot.risk_curves(ax, [traj], "k", "ODE")
    >>> len(ax.lines)
    1
    >>> plt.close(fig)
    """
    for k, tr in enumerate(trajectories):
        t = np.where(tr.t > 0, tr.t, 0.5)
        ax.loglog(t, np.maximum(tr.risk, 1e-16), color=color, alpha=0.8, lw=1.2, label=label if k == 0 else None)


def demo_figure(result: DemoResult, path: str) -> None:
    """Draw demo.png: one panel per experiment of the demo.

    Parameters
    ----------
    result : DemoResult
        From :func:`twolayer.demo.run` (or :func:`~twolayer.demo.run_symmetry_breaking`,
        then without the plateau panel).
    path : str
        The image file to write.

    Examples
    --------
    >>> import os, tempfile
    >>> cfg = tl.demo.DemoConfig(K=2, M=2, d=8, n_steps=10, seeds=(0,), n_records=3)
    >>> with tempfile.TemporaryDirectory() as out:
    ...     tl.plot.demo_figure(tl.demo.run_symmetry_breaking(cfg), os.path.join(out, "a.png"))
    ...     os.listdir(out)
    ['a.png']
    """
    plt = pyplot()
    panels = 2 if result.plateau is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 4.6), constrained_layout=True, squeeze=False)
    ax = axes[0, 0]
    colors = {"gaussian": "tab:orange", "orthogonal": "tab:blue"}
    for init, runs in result.runs.items():
        risk_curves(ax, runs, colors.get(init, "k"), f"{init} init ({len(runs)} seeds)")
    c = result.config
    ax.set(xlabel="iteration", ylabel="excess population risk",
           title=f"Mariantoni & Chizat symmetry breaking: step units, K = {c.K}, M = {c.M}, d = {c.d}, lr = {c.lr}")
    ax.legend()
    if result.plateau is not None:
        plateau_panel(axes[0, 1], result.plateau)
    with writing(path):
        fig.savefig(path, dpi=120)
    plt.close(fig)


def plateau_panel(ax: Any, plateau: Any) -> None:
    """The plateau panel: the SGD ensemble over the ODE, against t = steps / d.

    Draws the runs, their mean and a +-1 std band, and the ODE.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The axes.
    plateau : PlateauResult
        From :func:`twolayer.demo.run_plateau`.

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> cfg = tl.demo.PlateauConfig(d=20, t_max=2.0, seeds=2, n_records=3)
    >>> fig, ax = plt.subplots()
    >>> tl.plot.plateau_panel(ax, tl.demo.run_plateau(cfg))
    >>> ax.get_xlabel()
    't = steps / d'
    >>> plt.close(fig)
    """
    ens, c = plateau.sgd, plateau.config
    risk = ens.risk
    mean, std = risk.mean(axis=0), risk.std(axis=0, ddof=1)
    t = np.where(ens.t > 0, ens.t, np.nan)
    for r in risk:
        ax.loglog(t, r, color="tab:green", alpha=0.25, lw=0.8)
    ax.fill_between(t, np.maximum(mean - std, 1e-12), mean + std, color="tab:green", alpha=0.25,
                    label=f"SGD, d = {c.d}: mean +- std ({len(risk)} seeds)")
    ax.loglog(t, mean, color="tab:green", lw=1.5)
    ax.loglog(np.where(plateau.ode.t > 0, plateau.ode.t, np.nan), plateau.ode.risk, "k--", lw=1.5,
              label="ODE (d -> infinity)")
    ax.set(xlabel="t = steps / d", ylabel="excess population risk", ylim=(1e-6, None),
           title=f"Saad-Solla plateau: erf, K = M = 2, lr = {c.lr}")
    ax.legend()
