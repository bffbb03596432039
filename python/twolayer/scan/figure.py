"""The standard figure of a stored scan (matplotlib, the ``plot`` extra): the excess risk against time of every
configuration (the mean over runs for SGD), coloured by the first scanned dimension, and beside it the scan's
summary against the first dimension, one line per value of the second: the stop time where the runs stop early
(``risk_tol`` / ``risk_rtol``), else the final excess risk; further dimensions are averaged over (NaN ignored).

A dataset opened lazily from a store (:func:`twolayer.scan.open_dataset`) is reduced lazily (Dask): the summary
is computed chunk by chunk and at most :data:`MAX_CURVES` risk curves (evenly spaced over the grid) are read, so
a scan larger than memory can be plotted."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..plot import pyplot
from ..results import import_xarray

__all__ = ["MAX_CURVES", "scan_figure"]

MAX_CURVES = 300
"""The most risk curves the figure draws (and reads from a store)."""


def _last_finite(values: Any) -> Any:
    """The last finite value along the last axis (the first value where none is finite)."""
    valid = np.isfinite(values)
    last = np.where(valid.any(-1), values.shape[-1] - 1 - np.argmax(valid[..., ::-1], axis=-1), 0)
    return np.take_along_axis(values, last[..., None], axis=-1)[..., 0]


def last_recorded(risk: Any) -> Any:
    """``risk`` at each configuration's last recorded time (runs that stopped early are NaN afterwards); lazy
    (chunk by chunk) on a Dask-backed ``risk``."""
    return import_xarray().apply_ufunc(_last_finite, risk, input_core_dims=[["t"]], dask="parallelized",
                          output_dtypes=[risk.dtype], keep_attrs=True)


def _summary(ds: Any) -> tuple[Any, str]:
    if "stop_time" in ds and bool(np.isfinite(ds["stop_time"]).any()):
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
    plt = pyplot()
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
        n_configs = flat.sizes["config"]
        shown = np.unique(np.linspace(0, n_configs - 1, min(n_configs, MAX_CURVES)).round().astype(np.int64))
        rows = np.asarray(flat.isel(config=shown).transpose("config", "t").values)  # only these are read
        tt = np.where(t > 0, t, np.nan)
        for c, row in zip(shown, rows, strict=True):
            k = int(np.unravel_index(c, [ds.sizes[g] for g in grid])[0]) if grid else 0
            ax.loglog(tt, np.maximum(row, 1e-16), color=cmap(k / max(n_first - 1, 1)), lw=0.9, alpha=0.7)
        of = f" ({len(shown)} shown)" if len(shown) < n_configs else ""
        ax.set(xlabel=ds.attrs.get("time_unit", "t"), ylabel="excess population risk",
               title=f"{ds.attrs.get('engine', '')} scan: {n_configs} configurations{of}")
        if first:
            sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, max(n_first - 1, 1)))
            bar = fig.colorbar(sm, ax=ax)
            bar.set_label(f"{first} (index)")
    ax = axes[0, -1]
    values, label = _summary(ds)
    if "run" in values.dims:
        values = values.mean("run", skipna=True)
    if values.dtype.kind == "b":
        values = values.astype(np.int64)
    if first is None:
        ax.bar([0], [float(np.asarray(values.values).ravel()[0])])
    else:
        second = grid[1] if len(grid) > 1 else None
        rest = [g for g in grid[2:]]
        if rest:
            values = values.mean(rest, skipna=True)
        values = values.compute()  # the reduced summary: one value per (first, second)
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
