"""``twolayer plot``'s figure (twolayer.scan.figure): the colour bar shows the first dimension's values (a log
scale where they are geometric), and runs that stopped early end in a marker of their stop state."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
pytest.importorskip("xarray")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from twolayer.scan import figure  # noqa: E402

PLATEAU = {"activation": "erf", "K": 2, "M": 2, "t_max": 3000.0, "risk_tol": 1e-3}


@pytest.fixture(scope="module")
def plateau():
    """lr = 0.5, 1, 2 (geometric) x d x seed, every run stopped at risk 1e-3 long before t_max."""
    return tl.scan.run(tl.scan.Scan("ode", constants=PLATEAU, axes={"lr": [0.5, 1.0, 2.0], "d": [100, 10000],
                                                                     "seed": [0, 1]}))


def _colour_bar(fig):
    (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    return bar


def _ticks(bar):
    return [t.get_text() for t in bar.get_yticklabels()]


def test_colour_bar_shows_the_values_on_a_log_scale(plateau):
    """It read "lr (index)" 0, 1, 2 for lr = 0.5, 1, 2."""
    fig = figure.draw(plateau)
    try:
        bar = _colour_bar(fig)
        assert bar.get_ylabel() == "lr" and _ticks(bar) == ["0.5", "1", "2"]
        assert bar.get_yscale() == "log" and bar.get_ylim() == pytest.approx((0.5, 2.0))
        np.testing.assert_allclose([float(t) for t in bar.get_yticks()], [0.5, 1.0, 2.0])
        # each curve's colour is its lr on that scale
        cmap = plt.get_cmap("viridis")
        colours = [line.get_color() for line in fig.axes[0].get_lines()]
        lrs = plateau.risk.stack(config=["lr", "d", "seed"])["lr"].values
        np.testing.assert_allclose(np.asarray(colours), cmap(LogNorm(0.5, 2.0)(lrs)))
    finally:
        plt.close(fig)


def test_colour_bar_linear_and_categorical_values():
    ode = tl.scan.run(tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0},
                                   axes={"lr": [0.5, 1.0, 4.0]}))  # ratios 2, 4: not geometric
    act = tl.scan.run(tl.scan.Scan("ode", constants={"K": 1, "M": 1, "d": 10, "t_max": 1.0},
                                   axes={"activation": ["erf", "relu", "linear"], "lr": [0.5, 1.0]}))
    for ds, label, ticks, log in ((ode, "lr", ["0.5", "1", "4"], False),
                                  (act, "activation", ["erf", "relu", "linear"], False)):
        fig = figure.draw(ds)
        try:
            bar = _colour_bar(fig)
            assert bar.get_ylabel() == label and _ticks(bar) == ticks
            assert (bar.get_yscale() == "log") is log
        finally:
            plt.close(fig)


def test_early_stops_end_in_a_marker_at_the_stop_state(plateau):
    """Curves that stopped early had only their 4-13 recorded points and no mark of the stop: each now runs on to
    (stop_time, risk at the stop) and a 'converged' marker sits there, named in the legend."""
    fig = figure.draw(plateau)
    try:
        ax = fig.axes[0]
        flat = plateau.stack(config=["lr", "d", "seed"])
        assert set(flat["status"].values) == {"converged"}
        final = "final_risk" if "final_risk" in flat else "risk_final"  # (the vocabulary's spelling, or the old one)
        stop, at_stop = flat["stop_time"].values, flat[final].values
        assert np.all(stop < 0.2 * PLATEAU["t_max"]) and np.allclose(at_stop, 1e-3)
        handles, labels = ax.get_legend_handles_labels()
        assert labels == [f"converged ({flat.sizes['config']})"]
        np.testing.assert_allclose(handles[0].get_offsets(), np.column_stack([stop, at_stop]))
        ends = np.array([line.get_xydata()[-1] for line in ax.get_lines()])
        np.testing.assert_allclose(ends, np.column_stack([stop, at_stop]))
        assert ax.get_legend().get_title().get_text() == "stop state"
    finally:
        plt.close(fig)


def test_diverged_runs_are_marked_and_completed_ones_are_not():
    sgd = tl.scan.run(tl.scan.Scan("sgd", constants={"K": 2, "M": 2, "d": 100, "t_max": 5.0, "activation": "relu"},
                                   axes={"lr": [0.5, 8.0]}))
    status = sgd["status"].values.ravel()
    assert list(status) == ["completed", "diverged"]
    fig = figure.draw(sgd)
    try:
        handles, labels = fig.axes[0].get_legend_handles_labels()
        assert labels == ["diverged (1)"]
        assert handles[0].get_offsets()[0][0] == pytest.approx(float(sgd["stop_time"].values.ravel()[1]))
    finally:
        plt.close(fig)


def test_scan_figure_writes_and_closes_the_figure(tmp_path, plateau):
    path = tmp_path / "p.png"
    before = set(plt.get_fignums())
    figure.scan_figure(plateau, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and set(plt.get_fignums()) == before


def test_sgd_members_are_averaged_not_drawn_as_configurations():
    """An SGD scan stacks its runs along ``member``: one mean curve per lr (the figure looked for the old ``run``
    dimension and drew every member as a configuration of its own)."""
    ds = tl.scan.run(tl.scan.Scan("sgd", constants={"K": 1, "M": 1, "d": 20, "t_max": 1.0, "n_records": 3,
                                                    "seeds": 3}, axes={"lr": [0.5, 1.0]}))
    assert ds["risk"].dims == ("lr", "member", "t")
    fig = figure.draw(ds)
    try:
        curves = fig.axes[0].get_lines()
        assert len(curves) == 2
        np.testing.assert_allclose(curves[1].get_ydata()[1:], ds["risk"].sel(lr=1.0).mean("member").values[1:])
    finally:
        plt.close(fig)
