"""The standard figure of a stored scan (matplotlib, the ``plot`` extra): the excess risk against time of every
configuration (the mean over runs for SGD), coloured by the value of the first scanned dimension (a logarithmic
colour scale where its values are positive and geometric, one colour per value where they are not numbers), and
beside it the scan's summary against the first dimension, one line per value of the second: the stop time where
the runs stop early (``risk_tol`` / ``risk_rtol``), else the final excess risk; further dimensions are averaged
over (NaN ignored). A run that stopped early ends in a marker at its stop state (time and risk at the stop, which
falls between the recorded times): one marker per status (converged, diverged, ...), named in a legend.

A dataset opened lazily from a store (:func:`twolayer.scan.open_dataset`) is reduced lazily (Dask): the summary
is computed chunk by chunk and at most :data:`MAX_CURVES` risk curves (evenly spaced over the grid) are read, so
a scan larger than memory can be plotted."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..plot import pyplot
from ..results import import_xarray

__all__ = ["MAX_CURVES", "draw", "scan_figure"]

MAX_CURVES = 300
"""The most risk curves the figure draws (and reads from a store)."""

STOP_MARKERS = {"converged": ("o", "tab:green"), "diverged": ("X", "tab:red"), "max_steps": ("s", "tab:orange"),
                "interrupted": ("v", "tab:gray")}
"""Marker and colour of each stop state ("completed" runs reach the end of the time grid and have none)."""


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
    for name in ("risk", *ds.data_vars):  # a multistart scan's risk first, else the first numeric result
        if name in ds and np.issubdtype(ds[name].dtype, np.number):
            return ds[name], name
    raise ValueError("store: nothing numeric to plot")


def _geometric(values: Any) -> bool:
    """Positive values whose consecutive ratios are equal (within 10 % in the logarithm): e.g. 0.5, 1, 2."""
    u = np.unique(np.asarray(values, dtype=float))
    if len(u) < 2 or u[0] <= 0:
        return False
    steps = np.diff(np.log(u))
    return bool(np.all(np.abs(steps - steps[0]) <= 0.1 * steps[0]))


def _colour_scale(plt: Any, values: Any) -> tuple[Any, Any, Any, list[str]]:
    """(cmap, norm, the colour coordinate of each value, tick labels) for the values of the first dimension: the
    values themselves (a logarithmic norm where they are geometric), or their positions for non-numeric ones."""
    from matplotlib.colors import BoundaryNorm, LogNorm, Normalize

    v = np.asarray(values)
    cmap = plt.get_cmap("viridis")
    numeric = v.dtype.kind in "iuf" and bool(np.all(np.isfinite(v)))
    if numeric and len(np.unique(v)) > 1:
        x = v.astype(float)
        norm = LogNorm(x.min(), x.max()) if _geometric(x) else Normalize(x.min(), x.max())
        return cmap, norm, x, [f"{y:g}" for y in x]
    from matplotlib.colors import ListedColormap

    n = len(v)  # categories (names, flags, a single value): one colour each, labelled by value
    cmap = ListedColormap(cmap(np.linspace(0.0, 1.0, n))) if n > 1 else cmap
    return cmap, BoundaryNorm(np.arange(n + 1) - 0.5, max(n, 1)), np.arange(n, dtype=float), [str(y) for y in v]


def _stop_states(ds: Any, flat_grid: list[str], shown: Any) -> tuple[Any, Any, Any]:
    """Status, stop time and risk at the stop of the shown configurations (``(configs, members)`` arrays; one
    run without a ``member`` dimension). The time is ``stop_time`` (else the last recorded time), the risk the result's
    final risk (else the last recorded one): an early stop falls between the recorded times."""
    def pick(name: str) -> Any:
        var = ds[name]
        var = var.stack(config=flat_grid) if flat_grid else var.expand_dims(config=[0])
        var = var.isel(config=shown)
        var = var if "member" in var.dims else var.expand_dims(member=[0])
        return np.asarray(var.transpose("config", "member", ...).values)

    status = np.vectorize(lambda x: str(getattr(x, "value", x)), otypes=[object])(pick("status"))
    t = ds["t"].values if "t" in ds.coords else np.arange(ds.sizes["t"], dtype=float)
    risk = pick("risk")  # (configs, runs, t)
    last = np.where(np.isfinite(risk).any(-1), risk.shape[-1] - 1 - np.argmax(np.isfinite(risk)[..., ::-1], -1), 0)
    when = pick("stop_time") if "stop_time" in ds else np.full(status.shape, np.nan)
    when = np.where(np.isfinite(when), when, np.asarray(t, dtype=float)[last])
    final = next((name for name in ("final_risk", "risk_final") if name in ds), None)
    value = pick(final) if final else np.full(status.shape, np.nan)
    value = np.where(np.isfinite(value), value, np.take_along_axis(risk, last[..., None], -1)[..., 0])
    return status, when, value


def _draw_curves(fig: Any, ax: Any, ds: Any, grid: list[str]) -> None:
    """The risk curves of up to MAX_CURVES configurations, coloured by the first dimension, with stop markers."""
    import matplotlib.pyplot as plt

    first = grid[0] if grid else None
    risk = ds["risk"].mean("member") if "member" in ds["risk"].dims else ds["risk"]
    t = ds["t"].values if "t" in ds.coords else np.arange(risk.sizes["t"])
    flat = risk.stack(config=grid) if grid else risk.expand_dims(config=[0])
    n_configs = flat.sizes["config"]
    shown = np.unique(np.linspace(0, n_configs - 1, min(n_configs, MAX_CURVES)).round().astype(np.int64))
    rows = np.asarray(flat.isel(config=shown).transpose("config", "t").values)  # only these are read
    cmap, norm, coord, labels = _colour_scale(plt, ds[first].values if first else np.array([""]))
    firsts = np.array([np.unravel_index(c, [ds.sizes[g] for g in grid])[0] if grid else 0 for c in shown])
    colours = cmap(norm(coord[firsts]))
    stops = _stop_states(ds, grid, shown) if "status" in ds else None
    tt = np.where(t > 0, t, np.nan)
    for i, row in enumerate(rows):
        x, y = tt, row
        if stops is not None and "member" not in ds["risk"].dims:  # one run: the curve goes on to its stop state
            status, when, value = (a[i, 0] for a in stops)
            if status in STOP_MARKERS and np.isfinite(when) and when > 0 and np.isfinite(value):
                keep = np.isfinite(row)
                x, y = np.append(tt[keep], when), np.append(row[keep], value)
        ax.loglog(x, np.maximum(y, 1e-16), color=colours[i], lw=0.9, alpha=0.7)
    if stops is not None:
        status, when, value = stops
        for name, (marker, colour) in STOP_MARKERS.items():
            hit = (status == name) & np.isfinite(when) & (when > 0) & np.isfinite(value)
            if hit.any():
                ax.scatter(when[hit], np.maximum(value[hit], 1e-16), marker=marker, s=28, facecolor=colour,
                           edgecolor="black", linewidth=0.4, zorder=3, label=f"{name} ({int(hit.sum())})")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(title="stop state", loc="best", fontsize="small")
    of = f" ({len(shown)} shown)" if len(shown) < n_configs else ""
    ax.set(xlabel=ds.attrs.get("time_unit", "t"), ylabel="excess population risk",
           title=f"{ds.attrs.get('engine', '')} scan: {n_configs} configurations{of}")
    if first:
        bar = fig.colorbar(plt.cm.ScalarMappable(cmap=cmap, norm=norm), ax=ax)
        bar.set_label(first)
        if len(labels) <= 12:  # the scanned values themselves as ticks
            bar.set_ticks(list(coord), labels=labels)
            bar.ax.minorticks_off()


def _draw_summary(ax: Any, ds: Any, grid: list[str]) -> None:
    """The stop time (or final risk) against the first dimension, one line per value of the second."""
    first = grid[0] if grid else None
    values, label = _summary(ds)
    if "member" in values.dims:
        values = values.mean("member", skipna=True)
    if values.dtype.kind == "b":
        values = values.astype(np.int64)
    if first is None:
        ax.bar([0], [float(np.asarray(values.values).ravel()[0])])
        return
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


def draw(ds: Any) -> Any:
    """The standard figure of the scan dataset ``ds`` as an open matplotlib Figure (the caller closes it).

    Needs matplotlib (the ``plot`` extra). The risk panel's colour bar shows the first dimension's values
    (logarithmic where they are geometric); runs that stopped early end in a marker of their stop state.

    Parameters
    ----------
    ds : xarray.Dataset
        A scan's dataset (:func:`twolayer.scan.run`, :func:`twolayer.scan.open_dataset`).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> from twolayer.scan.figure import draw
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0}, axes={"lr": [0.5, 1.0, 2.0]})
    >>> fig = draw(tl.scan.run(sc))
    >>> [t.get_text() for t in fig.axes[-1].get_yticklabels()]  # the colour bar: lr's values, log scale
    ['0.5', '1', '2']
    >>> matplotlib.pyplot.close(fig)
    """

    plt = pyplot()
    grid = [d for d in ds.risk.dims if d not in ("member", "t", "student", "student2", "teacher", "teacher2")] \
        if "risk" in ds else [d for d in ds.dims if d != "member"]
    has_curves = "risk" in ds and "t" in ds["risk"].dims
    fig, axes = plt.subplots(1, 2 if has_curves else 1, figsize=(12.8 if has_curves else 6.4, 4.6),
                             constrained_layout=True, squeeze=False)
    if has_curves:
        _draw_curves(fig, axes[0, 0], ds, grid)
    _draw_summary(axes[0, -1], ds, grid)
    return fig


def scan_figure(ds: Any, path: str) -> None:
    """Write the standard figure of the scan dataset ``ds`` to ``path`` (PNG): :func:`draw`, saved and closed.

    Needs matplotlib (the ``plot`` extra); ``twolayer plot STORE`` calls it.

    Parameters
    ----------
    ds : xarray.Dataset
        A scan's dataset (:func:`twolayer.scan.run`, :func:`twolayer.scan.open_dataset`).
    path : str
        The PNG to write.

    Examples
    --------
    >>> sc = tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3},
    ...                   axes={"lr": [0.5, 1.0]})
    >>> ds = tl.scan.run(sc)
    >>> tl.scan.figure.scan_figure(ds, "scan.png")  # doctest: +SKIP
    """
    import matplotlib.pyplot as plt

    fig = draw(ds)
    try:
        fig.savefig(path, dpi=120)
    finally:
        plt.close(fig)
