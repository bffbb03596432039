"""The claims of examples/first_order_methods_staircase_online.py (issue 28 item 4): for k = 3 at lr = 0.4 / sqrt(d) the
ODE has an unstable point at m0 sqrt(d) = 0.533 inside the law of the starts and SGD escapes from below it, so the
escape is noise-driven; the SDE at the same d describes it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import twolayer as tl

_PATH = Path(__file__).resolve().parent.parent / "examples" / "first_order_methods_staircase_online.py"


def _example():
    spec = importlib.util.spec_from_file_location("first_order_methods_staircase_online", _PATH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _ode_escapes(ex, d: int, m0_sqrt_d: float) -> bool:
    tgt = tl.targets.hermite_single(3, d=d, seed=0, normalized=False)
    ov = tl.Overlaps(np.ones((1, 1)), [[m0_sqrt_d / np.sqrt(d)]], np.eye(1), [-1.0], np.zeros(1))
    tr = tl.ode.integrate(ov, "erf", target=tgt, lr=ex.lr(3, d), spherical=True, t_max=50.0 * d, n_records=11)
    return bool(abs(tr.M[-1, 0, 0]) >= ex.THRESHOLD)


@pytest.mark.parametrize("d", [50, 200])
def test_k3_ode_threshold_is_the_same_at_every_d(d: int) -> None:
    ex = _example()
    assert not _ode_escapes(ex, d, 0.525) and _ode_escapes(ex, d, 0.545)  # 0.533: m* ~ lr ~ 1 / sqrt(d)


def test_k3_sgd_escapes_where_the_ode_never_does() -> None:
    ex = _example()
    times, starts, _ = ex.sgd_escapes(100, 3, 2)
    m0 = float(starts[1].M[0, 0]) * 10.0
    assert m0 < 0.5 and not _ode_escapes(ex, 100, m0)  # the ODE from this start decays
    assert 100 < times[1] < 120  # SGD from it escapes at t = 111 (the example's docstring)
    assert np.isnan(ex.median_with_censoring(np.array([1.0, np.nan]))) and ex.median_with_censoring(
        np.array([1.0, 2.0, np.nan])) == 2.0


@pytest.mark.slow  # ~35 s: 16 SDE paths
def test_k3_sde_describes_the_sgd_escapes() -> None:
    ex = _example()
    sgd, starts, _ = ex.sgd_escapes(100, 3, 16)
    sde = ex.sde_escapes(100, 3, starts)
    n_sgd, n_sde = int(np.isfinite(sgd).sum()), int(np.isfinite(sde).sum())
    assert n_sgd == 11 and abs(n_sgd - n_sde) <= 5  # binomial, p ~ 0.7: 2 sigma of the difference ~ 5
    med_sgd, med_sde = ex.median_with_censoring(sgd), ex.median_with_censoring(sde)
    assert abs(med_sgd - med_sde) < 0.5 * med_sgd
    # the ODE from each start's own m0 misses: its verdict (escape iff m0 sqrt(d) > 0.533) differs from SGD's
    ode_says = np.array([float(s.M[0, 0]) * 10.0 > 0.533 for s in starts])
    assert np.any(ode_says != np.isfinite(sgd))
