"""Young fixed-point spaces at real sizes (exact derivatives, isotypic spectra) and real-k continuation."""

from __future__ import annotations

import numpy as np
import pytest
import twolayer as tl
from twolayer.landscape import FixedPointSpace, SubspaceProblem, YoungProblem

L = tl.landscape
X6 = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]  # the ΔS_5 spurious minimum at k = 6


def _point(sizes, readout, seed):
    space = FixedPointSpace(sizes, readout)
    x = 0.5 * np.random.default_rng(seed).standard_normal(space.dim)
    if readout:
        x[-len(sizes):] = 1.0 + 0.3 * np.random.default_rng(seed + 1).standard_normal(len(sizes))
    return space, x


LAYOUTS = [((5, 1), False), ((3, 2), False), ((4, 2, 1), False), ((5, 1), True), ((3, 3), True), ((2, 2, 2), False),
           ((4,), False)]


@pytest.mark.parametrize(("sizes", "readout"), LAYOUTS)
def test_young_problem_equals_the_subspace_problem_at_integer_sizes(sizes, readout):
    space, x = _point(sizes, readout, 3)
    ref = SubspaceProblem(space)
    prob = YoungProblem(len(sizes), readout)
    assert prob.risk(x, sizes) == pytest.approx(ref.risk(x), abs=1e-13)
    np.testing.assert_allclose(prob.gradient(x, sizes), ref.gradient(x), rtol=0, atol=1e-13)
    np.testing.assert_allclose(prob.hessian(x, sizes), ref.hessian(x), rtol=0, atol=1e-12)
    np.testing.assert_allclose(prob.metric(sizes), np.diag(space.basis.T @ space.basis), rtol=0, atol=0)


@pytest.mark.parametrize(("sizes", "readout"), [((5.37, 1.0), False), ((4.2, 3.6), True), ((3.5, 2.0, 1.0), False)])
def test_young_derivatives_at_real_sizes_match_finite_differences(sizes, readout):
    prob = YoungProblem(len(sizes), readout)
    x = 0.4 * np.random.default_rng(5).standard_normal(len(prob.layout(sizes)))
    if readout:
        x[-len(sizes):] += 1.0
    h = 1e-5
    E = np.eye(x.size) * h
    g_fd = np.array([(prob.risk(x + e, sizes) - prob.risk(x - e, sizes)) / (2 * h) for e in E])
    H_fd = np.array([(prob.gradient(x + e, sizes) - prob.gradient(x - e, sizes)) / (2 * h) for e in E])
    g, H = prob.gradient(x, sizes), prob.hessian(x, sizes)
    np.testing.assert_allclose(g, g_fd, rtol=0, atol=1e-8 * max(1.0, np.abs(g).max()))
    np.testing.assert_allclose(H, H_fd, rtol=0, atol=1e-7 * max(1.0, np.abs(H).max()))


@pytest.mark.parametrize(("sizes", "readout"), LAYOUTS)
def test_isotypic_spectrum_is_the_full_hessian_spectrum(sizes, readout):
    # at any fixed point (critical or not) the Hessian commutes with the group, and so does the span of the
    # rescaling orbit's tangents (trained second layer): the parts across and along it are the full Hessian's
    space, x = _point(sizes, readout, 7)
    spec = YoungProblem(len(sizes), readout).spectrum(x, sizes)
    W, a = space.matrix(x)
    net = tl.Network(W, a, "relu", scaling="none")
    H = tl.population.hessian(net, L.identity_teacher(space.k), train_readout=readout)
    transverse, flat = L.split_spectrum(H, L.orbit_tangents(net, readout))
    assert flat.size == (space.k if readout else 0) and transverse.size == space.k * space.k
    np.testing.assert_allclose(spec.full("transverse"), transverse, rtol=0, atol=1e-10)
    np.testing.assert_allclose(spec.full("flat"), flat, rtol=0, atol=1e-10)
    if not readout:
        mine = spec.full()
        assert mine.size == space.k * space.k
        np.testing.assert_allclose(mine, np.linalg.eigvalsh(H), rtol=0, atol=1e-10)


def test_isotypic_spectrum_at_a_trained_readout_critical_point_is_the_full_spectrum():
    prob = YoungProblem(2, train_readout=True)
    x, gn, ok = prob.solve(X6 + [1.0, 1.0], [5, 1])
    assert ok
    spec = prob.spectrum(x, [5, 1])
    assert {c for c, v in spec.flat.items() if v.size} == {"trivial", "standard[0]"}
    assert max(np.abs(v).max(initial=0.0) for v in spec.flat.values()) <= 1e-12
    W, a = FixedPointSpace((5, 1), True).matrix(x)
    H = tl.population.hessian(tl.Network(W, a, "relu", scaling="none"), L.identity_teacher(6), train_readout=True)
    np.testing.assert_allclose(spec.full(), np.linalg.eigvalsh(H), rtol=0, atol=1e-10)
    assert spec.index() == 0.0  # the same index as with the fixed readout (a congruence: Sylvester)


@pytest.mark.parametrize(("activation", "readout"), [("relu", True), ("linear", True), ("quadratic", True),
                                                     ("step", False), ("step", True)])
def test_symmetry_directions_are_the_rescaling_orbit(activation, readout):
    # R(D_b(c) x) = R(x) with D_b(c) scaling block b's rows by c and a_b by c^-p: at every point
    # g . s_b = 0 and H s_b = -D_b'(1) g, s_b = D_b'(1) x
    prob = YoungProblem(2, readout, activation)
    sizes = [4.3, 1.0]
    x = 0.5 * np.random.default_rng(1).standard_normal(len(prob.layout(sizes)))
    x[[0, 2]] += 1.0  # the two diagonal coordinates
    if readout:
        x[-2:] += 1.0
    S = prob.symmetry_directions(x, sizes)
    g, H = prob.gradient(x, sizes), prob.hessian(x, sizes)
    assert S.shape == (2, x.size)
    for s in S:
        assert abs(g @ s) <= 1e-12 * np.abs(g).max()
        np.testing.assert_allclose(H @ s, -(s / x) * g, rtol=0, atol=1e-12 * np.abs(H).max())
    assert YoungProblem(2, False, "relu").symmetry_directions(x[:5], sizes).shape == (0, 5)


X10 = [0.997564, -0.037412, -0.72984, 0.153265, 0.191012, 0.135519]  # Δ(S_8 × S_2) at k = 10 (a multistart)


@pytest.mark.parametrize(("x0", "k0", "sizes", "grids", "known"), [
    (X6, 6.0, None, ([6.0, 5.6, 5.5], [6.0, 5.5, 5.0]), 5.5855052474),
    (X10, 10.0, lambda k: (k - 2.0, 2.0), ([10.0, 8.0, 7.6, 7.0], [10.0, 7.5, 7.0]), 7.5611904979)])
def test_trained_and_fixed_readouts_give_the_same_crossings_on_any_grid(x0, k0, sizes, grids, known):
    # issue 28: with a trained readout the rescaling zero mode (±1e-16) was root-found instead of the physical
    # eigenvalue, so k_turn fell on a grid point (5.6000, 7.6000) or elsewhere (5.7012, 7.8025)
    turns = []
    for grid in grids:
        fixed = L.continue_real_k(x0, k0, grid, sizes=sizes)
        trained = L.continue_real_k(list(x0) + [1.0, 1.0], k0, grid, sizes=sizes, train_readout=True)
        assert fixed.status == trained.status == "completed"
        assert [(c.component, c.position, c.negative_before, c.negative_after) for c in trained.crossings] == [
            (c.component, c.position, c.negative_before, c.negative_after) for c in fixed.crossings]
        np.testing.assert_allclose([c.k for c in trained.crossings], [c.k for c in fixed.crossings], rtol=0,
                                   atol=1e-8)
        np.testing.assert_array_equal(trained.index, fixed.index)
        assert set(trained.flat_eigenvalues) == set(trained.eigenvalues)
        assert max(np.abs(v).max(initial=0.0) for v in trained.flat_eigenvalues.values()) <= 1e-10
        assert all(v.shape == (fixed.k.size, 0) for v in fixed.flat_eigenvalues.values())
        turns += [fixed.k_turn, trained.k_turn]
    np.testing.assert_allclose(turns, known, rtol=0, atol=1e-9)  # and so independent of the grid


def test_continuation_eigenvalues_at_integer_k_equal_the_full_hessian():
    fam = L.continue_real_k(X6, 6.0, [6.0, 7.0, 9.0], max_step=0.3)
    assert fam.status == "completed"
    for i, k in enumerate(fam.k):
        k = int(k)
        prob = SubspaceProblem(FixedPointSpace((k - 1, 1)))
        x, gn, ok = prob.solve(fam.x[i])
        assert ok and np.abs(x - fam.x[i]).max() <= 1e-10
        cp = prob.critical_point(fam.x[i])
        assert cp.grad_norm <= 1e-12 and fam.risk[i] == pytest.approx(cp.risk, abs=1e-14)
        assembled = np.sort(np.concatenate([np.repeat(fam.eigenvalues[c][i], round(fam.dimension[c][i]))
                                            for c in fam.eigenvalues]))
        np.testing.assert_allclose(assembled, cp.eigenvalues, rtol=0, atol=1e-10)


def test_type_a_family_turns_into_a_minimum_at_a_k_known_to_ten_digits():
    down = L.continue_real_k(X6, 6.0, [6.0, 5.5, 5.0])
    assert down.status == "completed" and down.k_turn is not None
    assert down.index.tolist() == [0.0, 3.5, 3.0]  # one standard eigenvalue of dimension k - 2 below the turn
    (c,) = down.crossings
    assert (c.component, c.position, c.negative_before, c.negative_after) == ("standard[0]", 0, 0, 1)
    # independently: from k = 5 upwards with other steps, and the eigenvalue re-solved at the root
    up = L.continue_real_k(down.x[-1], 5.0, [5.2, 6.0], max_step=0.05)
    assert up.k_turn == pytest.approx(down.k_turn, abs=1e-10)
    assert L.continue_real_k(X6, 6.0, [5.0]).k_turn == pytest.approx(down.k_turn, abs=1e-10)  # between outputs
    prob = YoungProblem(2)
    sizes = [down.k_turn - 1.0, 1.0]
    x, gn, ok = prob.solve(down.x[1], sizes, tol=1e-14)
    lam = prob.spectrum(x, sizes).eigenvalues["standard[0]"][0]
    assert abs(lam) <= 1e-12
    # the finite-difference implementation this replaces gave 5.58558 (eigenvalues ~1e-6 off)
    assert down.k_turn == pytest.approx(5.5855052474, abs=1e-9)


def test_continuation_takes_large_k_steps_and_agrees_with_integer_k():
    fam = L.continue_real_k(X6, 6.0, [12.0, 20.0])
    assert fam.status == "completed" and fam.k.tolist() == [12.0, 20.0]
    ints = L.continue_family(lambda k: (k - 1, 1), [6, 8, 10, 12, 14, 16, 18, 20], X6)
    np.testing.assert_allclose(fam.x[-1], ints[-1].x, rtol=0, atol=1e-10)
    np.testing.assert_allclose(fam.index, [0.0, 0.0])


def test_continuation_of_other_families():
    # Δ(S_8 × S_2) spurious minimum at k = 10 (from a multistart), continued along (k - 2, 2) in real k
    prob = SubspaceProblem(FixedPointSpace((8, 2)))
    x10, gn, ok = prob.solve([0.997564, -0.037412, -0.72984, 0.153265, 0.191012, 0.135519])
    assert ok
    fam = L.continue_real_k(x10, 10.0, [10.5, 11.0], sizes=lambda k: (k - 2.0, 2.0))
    assert fam.status == "completed"
    assert set(fam.eigenvalues) == {"trivial", "standard[0]", "exterior[0]", "symmetric[0]", "standard[1]",
                                    "standard[0,1]"}
    x11, gn, ok = SubspaceProblem(FixedPointSpace((9, 2))).solve(fam.x[-1])
    assert ok and np.abs(x11 - fam.x[-1]).max() <= 1e-10
    # a trained second layer and two growing blocks: Δ(S_a × S_a) with a = k / 2
    space = FixedPointSpace((4, 4), train_readout=True)
    W = np.eye(8) + 0.05 * (np.ones((8, 8)) - np.eye(8))
    x0 = space.coordinates(W)
    fam2 = L.continue_real_k(x0, 8.0, [9.0, 10.0], sizes=lambda k: (k / 2, k / 2), train_readout=True)
    assert fam2.status == "completed"
    assert np.all(fam2.risk <= 1e-14)  # the global minimum family: W = c I, a = 1 / c (rescaling orbit)
    diag0, off0, diag1, off1, b01, b10, a0, a1 = fam2.x[-1]
    np.testing.assert_allclose([off0, off1, b01, b10, diag0 * a0 - 1, diag1 * a1 - 1], 0, atol=1e-10)


def test_continue_real_k_rejects_bad_input():
    with pytest.raises(ValueError, match="ks"):
        L.continue_real_k(X6, 6.0, [6.0, 7.0, 6.5])
    with pytest.raises(ValueError, match="ks"):
        L.continue_real_k(X6, 6.0, [5.0, 7.0])
    with pytest.raises(ValueError, match="sizes"):
        L.continue_real_k(X6, 6.0, [3.5])  # block 2.5: not an integer and not above 3
    with pytest.raises(ValueError, match="x0"):
        L.continue_real_k(X6[:4], 6.0, [6.5])
    with pytest.raises(TypeError, match="sizes"):
        L.continue_real_k(X6, 6.0, [6.5], sizes=(5, 1))
    with pytest.raises(ValueError, match="component"):
        tl.landscape.young.irrep_dimension("wedge[0]", [5, 1])


def test_continuation_in_log_k_reaches_the_large_k_limits():
    # issue 28: steps in k stopped with "step too small" near k = 1.3e4 (Newton's tol below the rounding level of
    # a gradient whose terms grow like k^2) after ~3.5e4 steps and 270 s; in log k, to the gradient's rounding
    # level, k = 1e8 takes a few dozen steps
    ks = [1e4, 1e6, 1e8]
    fam = L.continue_real_k(X6, 6.0, ks)
    assert fam.status == "completed" and fam.k.tolist() == ks and fam.n_steps < 100
    assert fam.index.tolist() == [0.0, 0.0, 0.0] and fam.crossings == []
    k = fam.k[-1]
    lo, hi = 0.25 - 0.5 / np.pi, 0.25 + 0.5 / np.pi  # the global minimum's bulk eigenvalues, exact at every k
    net = tl.Network(np.eye(8), np.ones(8), "relu", scaling="none")
    bulk = np.linalg.eigvalsh(tl.population.hessian(net, L.identity_teacher(8), train_readout=False))
    assert np.sum(np.abs(bulk - lo) < 1e-12) == 28 and np.sum(np.abs(bulk - hi) < 1e-12) == 20  # k(k-1)/2, k(k-3)/2
    # the spurious family's spectrum tends to the same bulk and to outliers k / (2 pi), k / 4 (Arjevani & Field:
    # the spectra coincide to O(k^-1/2)); the slowest eigenvalues approach as c / sqrt(k), c fixed to 1 %
    eig = {c: v[-1] for c, v in fam.eigenvalues.items()}
    np.testing.assert_allclose(eig["exterior[0]"], [lo], rtol=0, atol=1e-7)
    np.testing.assert_allclose(eig["symmetric[0]"], [hi], rtol=0, atol=1e-7)
    np.testing.assert_allclose(eig["standard[0]"][1:3], [lo, 0.25], rtol=0, atol=2e-7)
    np.testing.assert_allclose([eig["standard[0]"][4] / k, *eig["trivial"][2:] / k], [0.25, 0.5 / np.pi, 0.25, 0.25],
                               rtol=1e-6)
    for comp, j, limit in (("standard[0]", 0, lo), ("standard[0]", 3, hi), ("trivial", 1, 0.25)):
        c = (limit - fam.eigenvalues[comp][:, j]) * np.sqrt(fam.k)
        assert 0 < c[-1] < 0.5 and c[-1] == pytest.approx(c[-2], rel=1e-2), (comp, j, c)
    # the point tends to W = I with the singleton row reversed: x -> (1, 0, -1, 0, 0), the singleton column ~ 2 / k
    np.testing.assert_allclose(fam.x[-1], [1.0, 0.0, -1.0, 0.0, 0.0], rtol=0, atol=1e-7)
    assert fam.x[-2, 3] * fam.k[-2] == pytest.approx(2.0, rel=1e-5)
    assert fam.grad_norm[-1] <= YoungProblem(2).gradient_floor(fam.x[-1], fam.sizes[-1])


def test_gradient_floor_bounds_the_gradient_noise_newton_stops_at():
    prob = YoungProblem(2)
    x = L.continue_real_k(X6, 6.0, [1e5]).x[-1]
    floor = prob.gradient_floor(x, [1e5 - 1.0, 1.0])
    assert 1e-10 < floor < 1e-8  # far above tol = 1e-12 at k = 1e5
    for seed in range(4):
        xs = x * (1.0 + 1e-9 * np.random.default_rng(seed).standard_normal(x.size))
        _, gn, _ = prob.solve(xs, [1e5 - 1.0, 1.0], tol=0.0, max_iter=30)
        assert gn <= floor
    assert prob.gradient_floor(X6, [5, 1]) < 1e-14  # negligible at small k


def _mp_risk(x, sizes, readout=False):
    """The plain sum over row pairs and teacher pairs of relu kernels, in mpmath (reference for large k)."""
    mp = pytest.importorskip("mpmath")  # in the test extra: never skipped in CI
    n = [mp.mpf(v) for v in sizes]
    r = len(n)
    idx = {key: i for i, key in enumerate(YoungProblem(r, readout).layout([float(v) for v in sizes]))}
    X = [mp.mpf(v) for v in x]
    a = X[len(X) - r:] if readout else [mp.mpf(1)] * r
    al = [X[idx[("diag", b, b)]] for b in range(r)]
    be = [X[idx[("off", b, b)]] if ("off", b, b) in idx else mp.mpf(0) for b in range(r)]

    def ga(b, c):
        return X[idx[("block", b, c)]]

    def kern(c11, c12, c22):
        return (mp.sqrt(c11 * c22 - c12**2) + (mp.pi - mp.acos(c12 / mp.sqrt(c11 * c22))) * c12) / (2 * mp.pi)

    q = [al[b]**2 + (n[b] - 1) * be[b]**2 + sum(n[c] * ga(b, c)**2 for c in range(r) if c != b) for b in range(r)]
    k = sum(n)
    tot = k / 2 + k * (k - 1) / (2 * mp.pi)
    for b in range(r):
        tot += n[b] * a[b]**2 * q[b] / 2 - 2 * n[b] * a[b] * kern(q[b], al[b], 1)
        if n[b] > 1:
            same = 2 * al[b] * be[b] + (n[b] - 2) * be[b]**2 + sum(n[c] * ga(b, c)**2 for c in range(r) if c != b)
            tot += n[b] * (n[b] - 1) * (a[b]**2 * kern(q[b], same, q[b]) - 2 * a[b] * kern(q[b], be[b], 1))
        for c in range(r):
            if c != b:
                cross = (al[b] + (n[b] - 1) * be[b]) * ga(c, b) + ga(b, c) * (al[c] + (n[c] - 1) * be[c]) + sum(
                    n[e] * ga(b, e) * ga(c, e) for e in range(r) if e not in (b, c))
                tot += n[b] * n[c] * (a[b] * a[c] * kern(q[b], cross, q[c]) - 2 * a[b] * kern(q[b], ga(b, c), 1))
    return tot / 2


@pytest.mark.parametrize(("sizes", "readout"), [((5.37, 1.0), False), ((4.2, 3.6), True), ((3.5, 2.0, 1.0), False),
                                                ((4.0, 3.0, 2.0), True)])
def test_relu_risk_grouping_equals_the_plain_sum(sizes, readout):
    prob = YoungProblem(len(sizes), readout)
    rng = np.random.default_rng(11)
    for _ in range(5):
        x = 0.5 * rng.standard_normal(len(prob.layout(sizes)))
        if readout:
            x[-len(sizes):] = rng.choice([-1.0, 1.0], len(sizes)) * (0.5 + rng.random(len(sizes)))
        assert prob.risk(x, sizes) == pytest.approx(prob._evaluate(x, sizes, 0)[0], rel=1e-13, abs=1e-14)
        x[: len(prob.layout(sizes)) - (len(sizes) if readout else 0)] = 0.0  # zero rows: relu units that are off
        x[0] = 0.7
        assert prob.risk(x, sizes) == pytest.approx(prob._evaluate(x, sizes, 0)[0], rel=1e-13, abs=1e-14)


def test_relu_risk_keeps_its_digits_at_large_k():
    # issue 28: the risk was a sum of ~k^2 cancelling kernel terms: 1e-4 relative error at k = 1e4, 0.12 at 1e5,
    # 0.0 at 1e8 along the ΔS_{k-1} family (loss ~ 0.3 / k); grouped, it is right to a few ulps at any k
    mp = pytest.importorskip("mpmath")  # in the test extra: never skipped in CI
    mp.mp.dps = 80
    fam = L.continue_real_k(X6, 6.0, [1e2, 1e4, 1e6, 1e8])
    trained = L.continue_real_k(X6 + [1.0, 1.0], 6.0, [1e4, 1e8], train_readout=True)
    for f, readout, rtol in ((fam, False, 5e-15), (trained, True, 1e-9)):
        for k, x, loss in zip(f.k, f.x, f.risk, strict=True):
            ref = _mp_risk(x, [k - 1.0, 1.0], readout)
            assert abs(loss - ref) <= rtol * ref, (k, readout, loss, ref)
    # and it is the realised network's population risk (k = 50; that plain sum of k^2 terms loses digits as k
    # grows: 1e-9 relative here, 5e-7 at k = 200)
    x = L.continue_real_k(X6, 6.0, [50.0]).x[-1]
    net = SubspaceProblem(FixedPointSpace((49, 1))).network(x)
    assert YoungProblem(2).risk(x, [49, 1]) == pytest.approx(tl.population.risk(net, L.identity_teacher(50)), rel=1e-8)


def test_type_a_loss_times_k_reaches_its_limit():
    # k loss -> L_inf + c / sqrt(k) + d / k along the ΔS_{k-1} family, extrapolated from k = 1e6, 1e7, 1e8;
    # independently: the critical point at k = 1e12 solved by Newton in 80-digit arithmetic (scaled coordinates)
    mp = pytest.importorskip("mpmath")  # in the test extra: never skipped in CI
    mp.mp.dps = 80
    fam = L.continue_real_k(X6, 6.0, [1e6, 1e7, 1e8])
    kl = fam.k * fam.risk
    assert np.all(np.diff(kl) > 0)
    limit = np.linalg.solve(np.stack([np.ones(3), fam.k**-0.5, 1.0 / fam.k], 1), kl)[0]
    K = mp.mpf(10)**12
    scale = [K**-2, K**-2, 1 / K, 1 / K, 1 / K]
    base = [1, 0, -1, 0, 0]
    y = mp.matrix([mp.mpf(v) for v in (fam.x[-1] - base) * np.array([1e16, 1e16, 1e8, 1e8, 1e8])])  # k = 1e8

    def risk(yy):
        return _mp_risk([base[i] + scale[i] * yy[i] for i in range(5)], [K - 1, 1])

    h = mp.mpf(10)**-12
    unit = [mp.matrix([h * (i == j) for j in range(5)]) for i in range(5)]

    def grad(yy):
        return mp.matrix([(risk(yy + e) - risk(yy - e)) / (2 * h) for e in unit])

    for _ in range(4):
        H = mp.matrix(5, 5)
        for i, e in enumerate(unit):
            H[:, i] = (grad(y + e) - grad(y - e)) / (2 * h)
        step = mp.lu_solve(H, grad(y))
        y = y - step
    assert max(abs(s) for s in step) < 1e-20
    far = float(K * risk(y))
    assert far == pytest.approx(0.2973575232, abs=1e-9)
    assert 0 < limit - far < 3e-7  # the c / sqrt(k) tail left at 1e12 (c = -0.11)
    assert kl[-1] == pytest.approx(limit, abs=2e-5)
    assert limit == pytest.approx(0.5 - 2.0 / np.pi**2, abs=1e-8)  # numerically: k loss -> 1/2 - 2/pi^2


def test_grid_point_on_the_edge_of_the_allowed_sizes_is_reached_without_error():
    # k = 4 gives the (k - 1, 1) family sizes (3, 1): allowed, but k - dk is not (reals must be > 3); the derivative
    # along k there is one-sided (it used to raise a ValueError about sizes at k = 3.99996)
    fam = L.continue_real_k([0.9867, -0.0504, -0.6015, 0.308, 0.2245], 6.0, [6.0, 5.0, 4.2, 4.0])
    assert [float(k) for k in fam.k] == [6.0, 5.0, 4.2]
    assert fam.status == "layout changed" and "between k = 4.2 and k = 4.0" in fam.message
