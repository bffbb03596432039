"""Saddle search by eigenvector following and the minima an index-1 saddle connects."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer.landscape import FixedPointSpace, SubspaceProblem

L = tl.landscape


@pytest.fixture(scope="module")
def spurious6():
    prob = SubspaceProblem(FixedPointSpace((5, 1)))
    x, gn, ok = prob.solve([1.0, -0.05, -0.6, 0.3, 0.2])
    assert ok
    return L.refine(prob.network(x), prob.teacher), prob.teacher


def _exact_index(cp, teacher):
    lam = np.linalg.eigvalsh(tl.population.hessian(cp.student, teacher, train_readout=False))
    return int(np.sum(lam < -1e-8 * np.abs(lam).max())), lam


def test_index_one_saddle_from_the_spurious_minimum_connects_it_to_the_global_minimum(spurious6):
    start, teacher = spurious6
    assert start.kind == "spurious minimum"
    sd = L.saddle_search(start, teacher, index=1)
    assert sd.kind == "saddle" and sd.index == 1 and sd.converged
    assert sd.grad_norm <= 1e-10
    idx, lam = _exact_index(sd, teacher)
    assert idx == 1 and abs(lam[1]) > 1e-6  # non-degenerate
    assert sd.risk > start.risk  # a barrier
    ends = L.saddle_connections(sd, teacher)
    assert sorted(e.kind for e in ends) == ["global minimum", "spurious minimum"]
    spur = next(e for e in ends if e.kind == "spurious minimum")
    assert spur.risk == pytest.approx(start.risk, abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_saddle_search_does_not_depend_on_the_eigensolvers_basis(spurious6, monkeypatch, seed):
    # The softest mode of the S_5-symmetric minimum is 4-fold: an eigensolver's basis of it is arbitrary (rounding
    # turns it). Rotate every degenerate eigenspace at random: the search must reach the same saddle.
    from twolayer.landscape import saddle as saddle_module

    start, teacher = spurious6
    reference = L.saddle_search(start, teacher, index=1)
    rng = np.random.default_rng(seed)
    eigh = saddle_module.hessian_eigh

    def rotated(net, teacher_, tr, tb=False):
        lam, V = eigh(net, teacher_, tr, tb)
        V = V.copy()
        groups = saddle_module._eigen_groups(lam)
        for g in np.unique(groups):
            cols = np.flatnonzero(groups == g)
            if cols.size > 1:
                R, _ = np.linalg.qr(rng.standard_normal((cols.size, cols.size)))
                V[:, cols] = V[:, cols] @ R
        return lam, V

    monkeypatch.setattr(saddle_module, "hessian_eigh", rotated)
    sd = L.saddle_search(start, teacher, index=1)
    assert sd.kind == "saddle" and sd.index == 1 and sd.grad_norm <= 1e-10
    assert sd.risk == pytest.approx(reference.risk, rel=1e-10)


def test_saddle_search_follows_other_modes_and_directions(spurious6):
    start, teacher = spurious6
    sd = L.saddle_search(start, teacher, index=1, modes=3, direction=1.0)
    assert sd.index == 1 and sd.grad_norm <= 1e-10
    assert _exact_index(sd, teacher)[0] == 1
    assert sd.risk > start.risk + 1e-3  # a higher saddle than the softest mode's


def test_saddle_search_with_a_trained_second_layer(spurious6):
    # relu homogeneity leaves one flat direction per unit: left out of the steps and of the index
    start, teacher = spurious6
    start = L.refine(start.student, teacher, train_readout=True)
    sd = L.saddle_search(start, teacher)
    assert sd.train_readout and sd.kind == "saddle" and sd.index == 1 and sd.grad_norm <= 1e-10
    assert sd.nullity == 6
    lam = np.linalg.eigvalsh(tl.population.hessian(sd.student, teacher, train_readout=True))
    assert int(np.sum(lam < -1e-8 * np.abs(lam).max())) == 1
    assert sorted(e.kind for e in L.saddle_connections(sd, teacher)) == ["global minimum", "spurious minimum"]


def test_saddle_search_rejects_bad_input(spurious6):
    start, teacher = spurious6
    with pytest.raises(ValueError, match="index"):
        L.saddle_search(start, teacher, index=0)
    with pytest.raises(ValueError, match="direction"):
        L.saddle_search(start, teacher, direction=0.0)
    with pytest.raises(ValueError, match="modes"):
        L.saddle_search(start, teacher, index=2, modes=[0])
    with pytest.raises(ValueError, match="modes"):
        L.saddle_search(start, teacher, modes=99)
    with pytest.raises(TypeError, match="start"):
        L.saddle_search("W", teacher)
    with pytest.raises(ValueError, match="saddle"):
        L.saddle_connections(start, teacher)  # a minimum, not a saddle
