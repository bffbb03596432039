"""Per-panel series lengths of custom tables (``_custom.TRIM_TOL``): each panel's and order's trailing coefficients
whose magnitudes sum below 1e-15 of the order's scale are 0 and the core skips them; sigma and sigma' move by at most
that (plus rounding) against the full series."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer import _custom

FUNCTIONS = {
    "tanh": np.tanh,
    "softplus": lambda s: np.log1p(np.exp(s)),
    "tanh_lin": lambda s: np.tanh(s) + s / 10.0,
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_trimmed_series_equal_the_full_ones(monkeypatch, name):
    f = FUNCTIONS[name]
    edges, coef, strip = _custom.tabulate(f, [], 30.0)
    tol = _custom.TRIM_TOL
    monkeypatch.setattr(_custom, "TRIM_TOL", 0.0)
    edges0, coef0, strip0 = _custom.tabulate(f, [], 30.0)
    assert np.array_equal(edges, edges0) and strip == strip0
    n = coef.shape[-1]
    kept = coef != 0.0
    assert np.array_equal(coef[kept], coef0[..., :n][kept])  # the kept coefficients are the full series'
    scale = np.abs(coef0).sum(axis=-1).max(axis=0)
    dropped = np.abs(coef0[..., :n] - coef).sum(axis=-1) + np.abs(coef0[..., n:]).sum(axis=-1)
    assert (dropped <= tol * scale).all()
    lengths = n - np.argmax(kept[..., ::-1], axis=-1)
    assert lengths[:, :2].mean() < 0.7 * coef0.shape[-1]  # sigma's and sigma''s series: much shorter sums
    short = tl.activations.register_table(f"lengths_{name}", edges, coef, strip)
    full = tl.activations.register_table(f"lengths_{name}_full", edges0, coef0, strip0)
    x = np.linspace(-32.0, 32.0, 20001)
    for k, value in enumerate((tl.activations.sigma, tl.activations.derivative)):
        a, b = value(short, x), value(full, x)
        assert np.abs(a - b).max() <= tol * scale[k] + 8 * np.finfo(float).eps * np.abs(b).max()
