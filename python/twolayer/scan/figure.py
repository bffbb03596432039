"""The standard figure of a stored scan (matplotlib, the ``plot`` extra): the excess risk against time of every
configuration (the mean over runs for SGD), coloured by the first scanned dimension, and beside it the scan's
summary against the first dimension, one line per value of the second: the stop time where the runs stop early
(``risk_tol`` / ``risk_rtol``), else the final excess risk; further dimensions are averaged over (NaN ignored)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["scan_figure"]


def last_recorded(risk: Any) -> Any:
    """``risk`` at each configuration's last recorded time (runs that stopped early are NaN afterwards)."""
    values = np.moveaxis(risk.values, risk.get_axis_num("t"), -1)
    valid = np.isfinite(values)
    last = np.where(valid.any(-1), values.shape[-1] - 1 - np.argmax(valid[..., ::-1], axis=-1), 0)
    out = np.take_along_axis(values, last[..., None], axis=-1)[..., 0]
    return risk.isel(t=0, drop=True).copy(data=out)


def _summary(ds: Any) -> tuple[Any, str]:
    if "stop_time" in ds and np.isfinite(ds["stop_time"].values).any():
        return ds["stop_time"], "stop time (first passage of the risk threshold)"
    if "risk" in ds and "t" in ds["risk"].dims:
        return last_recorded(ds["risk"]), "final excess risk"
    for name in ("loss", *ds.data_vars):  # a multistart scan's loss first, else the first numeric result
        if name in ds and np.issubdtype(ds[name].dtype, np.number):
            return ds[name], name
    raise ValueError("store: nothing numeric to plot")


def scan_figure(ds: Any, path: str) -> None:
    """Write the standard figure of the scan dataset ``ds`` to ``path`` (PNG).

    Needs matplotlib (the ``plot`` extra); ``twolayer plot STORE`` calls it.

    Parameters
    ----------
    ds : xarray.Dataset
        A scan's dataset (:func:`twolayer.scan.run`, :func:`twolayer.scan.open_dataset`).
    path : str
        The PNG to write.

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_points": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> ds = tl.scan.run(sc)
    >>> tl.scan.figure.scan_figure(ds, "scan.png")  # doctest: +SKIP
    """
    from ..plot import _pyplot

    plt = _pyplot()
    grid = [d for d in ds.risk.dims if d not in ("run", "t", "student", "student2", "teacher", "teacher2")] \
        if "risk" in ds else [d for d in ds.dims if d not in ("run",)]
    has_curves = "risk" in ds and "t" in ds["risk"].dims
    fig, axes = plt.subplots(1, 2 if has_curves else 1, figsize=(12.8 if has_curves else 6.4, 4.6),
                             constrained_layout=True, squeeze=False)
    first = grid[0] if grid else None
    if has_curves:
        ax = axes[0, 0]
        risk = ds["risk"].mean("run") if "run" in ds["risk"].dims else ds["risk"]
        t = ds["t"].values if "t" in ds.coords else np.arange(risk.sizes["t"])
        cmap = plt.get_cmap("viridis")
        n_first = ds.sizes[first] if first else 1
        flat = risk.stack(config=grid) if grid else risk.expand_dims(config=[0])
        for c in range(flat.sizes["config"]):
            row = flat.isel(config=c)
            k = int(np.unravel_index(c, [ds.sizes[g] for g in grid])[0]) if grid else 0
            tt = np.where(t > 0, t, np.nan)
            ax.loglog(tt, np.maximum(row.values, 1e-16), color=cmap(k / max(n_first - 1, 1)), lw=0.9, alpha=0.7)
        ax.set(xlabel=ds.attrs.get("time_unit", "t"), ylabel="excess population risk",
               title=f"{ds.attrs.get('engine', '')} scan: {flat.sizes['config']} configurations")
        if first:
            sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, max(n_first - 1, 1)))
            bar = fig.colorbar(sm, ax=ax)
            bar.set_label(f"{first} (index)")
    ax = axes[0, -1]
    values, label = _summary(ds)
    if "run" in values.dims:
        values = values.mean("run", skipna=True)
    if first is None:
        ax.bar([0], [float(values.values.ravel()[0])])
    else:
        second = grid[1] if len(grid) > 1 else None
        rest = [g for g in grid[2:]]
        if rest:
            values = values.mean(rest, skipna=True)
        x = ds[first].values
        if second is None:
            ax.plot(x, values.values, "o-")
        else:
            for j in range(ds.sizes[second]):
                ax.plot(x, values.isel({second: j}).transpose(first).values, "o-",
                        label=f"{second} = {ds[second].values[j]}")
            ax.legend()
        ax.set(xlabel=first, ylabel=label)
        if np.issubdtype(np.asarray(x).dtype, np.number) and np.all(np.asarray(x) > 0):
            ax.set_xscale("log")
    fig.savefig(path, dpi=120)
    plt.close(fig)
