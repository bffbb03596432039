"""The strip of analyticity of custom tables (``_custom.tabulate``): the lowest point above the panel of the
Bernstein ellipse fitted per panel, times STRIP_SAFETY, lies inside the true strip and within 10% of it (a narrower
estimate only makes the certified lattices finer: slower)."""

from __future__ import annotations

import numpy as np
import pytest
from twolayer import _custom

CASES = {  # function, the half-width of its strip (the nearest poles)
    "tanh": (np.tanh, np.pi / 2),
    "tanh_4s": (lambda s: np.tanh(4.0 * s), np.pi / 8),  # poles above a panel's end (bisected panels)
    "tanh_shifted": (lambda s: np.tanh(s - 0.3), np.pi / 2),  # poles above a panel's interior
    "tanh_lin": (lambda s: np.tanh(s) + s / 10.0, np.pi / 2),
    "softplus": (lambda s: np.log1p(np.exp(s)), np.pi),
}


@pytest.mark.parametrize("name", list(CASES))
def test_strip_inside_and_near_the_true_one(name):
    f, true = CASES[name]
    _, _, strip = _custom.tabulate(f, [], 30.0)
    assert 0.9 * true < strip < true
