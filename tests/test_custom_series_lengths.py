"""Per-panel series lengths of custom tables (``_custom.TRIM_TOL``): each panel's and order's trailing coefficients
whose magnitudes sum below 1e-15 of that panel's own series are 0 and the core skips them; sigma and sigma' move by
at most that (plus rounding) against the full series, relative where the function is small too."""

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
    assert lengths[:, 0].mean() < 0.7 * coef0.shape[-1]  # sigma's series: much shorter sums
    short = tl.activations.register_table(f"lengths_{name}", edges, coef, strip)
    full = tl.activations.register_table(f"lengths_{name}_full", edges0, coef0, strip0)
    x = np.linspace(-32.0, 32.0, 20001)
    for k, value in enumerate((tl.activations.sigma, tl.activations.derivative)):
        a, b = value(short, x), value(full, x)
        assert np.abs(a - b).max() <= tol * scale[k] + 8 * np.finfo(float).eps * np.abs(b).max()


def test_trimming_keeps_relative_accuracy_where_the_function_is_small():
    """A Gaussian bump is tiny in its tails: its panels' series are trimmed against their own size, not the order's
    scale (which lost the tails: 3e-5 relative at s = 7, the wrong sign at 8.5, exactly 0 from 9 on)."""
    bump = tl.activations.custom("lengths_bump", lambda s: np.exp(-0.5 * s * s))
    x = np.array([0.5, 3.0, 5.0, 7.0, 8.5, 9.0, 12.0, 20.0, 25.0])
    exact = np.exp(-0.5 * x * x)
    np.testing.assert_allclose(tl.activations.sigma(bump, x), exact, rtol=1e-12, atol=0.0)
    np.testing.assert_allclose(tl.activations.derivative(bump, x), -x * exact, rtol=1e-12, atol=0.0)
