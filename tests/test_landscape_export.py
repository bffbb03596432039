"""tl.landscape.export (JSON with symmetry compression, pandas, xarray) and tl.landscape.figures."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import twolayer as tl
from twolayer.landscape import FixedPointSpace, SubspaceProblem

L = tl.landscape
X6 = np.array([0.986704, -0.050413, -0.601512, 0.308011, 0.224516])


@pytest.fixture(scope="module")
def family():
    return L.continue_family(lambda k: (k - 1, 1), [6, 7, 8], X6)


@pytest.fixture(scope="module")
def real_k():
    """The ΔS_{k-1} family from k = 6 to 5 (it turns from minimum into saddle at k = 5.5855...)."""
    fam = L.continue_real_k(X6, 6.0, [6.0, 5.5, 5.0])
    assert fam.status == "completed" and len(fam.crossings) == 1
    return fam


@pytest.fixture(scope="module")
def readout_point():
    prob = SubspaceProblem(FixedPointSpace((5, 1), train_readout=True))
    x, _, ok = prob.solve(np.r_[X6, 1.0, 1.0])
    assert ok
    return prob.critical_point(x)


def same(x, y) -> None:
    """Equal to 1e-15 (here: bit for bit, NaN where NaN)."""
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def assert_same_point(p: L.CriticalPoint, q: L.CriticalPoint) -> None:
    for f in dataclasses.fields(p):
        u, v = getattr(p, f.name), getattr(q, f.name)
        if isinstance(u, tl.Network):
            same(u.W, v.W)
            same(u.a, v.a)
            assert (u.activation, u.scaling, u.readout) == (v.activation, v.scaling, v.readout)
        elif isinstance(u, np.ndarray):
            same(u, v)
        else:
            assert u == v, f.name


# ---------------------------------------------------------------------------------------------- compression
def test_a_fixed_point_space_point_compresses_to_its_distinct_values_exactly(family):
    for p in family:
        W = p.point.student.W
        c = L.compress_point(W)
        assert c["blocks"] == [p.k - 1, 1] and c["exceptions"] == [] and len(c["values"]) == 5
        np.testing.assert_array_equal(np.sort(c["values"]), np.sort(np.unique(W)))
        back, a = L.decompress_point(json.loads(json.dumps(c)))
        same(back, W)
        assert a is None
    # a permuted copy: same blocks, the orders undo the permutation
    W = family[0].point.student.W
    rng = np.random.default_rng(0)
    P, Q = rng.permutation(6), rng.permutation(6)
    c = L.compress_point(W[np.ix_(P, Q)], np.ones(6))
    assert c["blocks"] == [5, 1] and c["exceptions"] == []
    back, a = L.decompress_point(c)
    same(back, W[np.ix_(P, Q)])
    same(a, np.ones(6))


def test_compression_is_lossless_for_any_point():
    rng = np.random.default_rng(1)
    sym = np.eye(5) + 0.1 * (np.ones((5, 5)) - np.eye(5))
    noisy = sym + 1e-13 * rng.standard_normal((5, 5))  # symmetric only to 1e-13: many exceptions
    cases = [
        (sym, None), (noisy, None), (noisy, np.ones(5) + 1e-14 * rng.standard_normal(5)),
        (rng.standard_normal((4, 4)), rng.standard_normal(4)),  # trivial isotropy: dense
        (rng.standard_normal((3, 6)), None),  # not square: dense
    ]
    for W, a in cases:
        c = json.loads(json.dumps(L.compress_point(W, a), allow_nan=False))
        back, a_back = L.decompress_point(c)
        same(back, W)
        if a is None:
            assert a_back is None
        else:
            same(a_back, a)
    c = L.compress_point(noisy)
    assert "dense" in c and c["blocks"] == [5] and 0 < c["max_deviation"] < 1e-12
    sym_c = L.compress_point(noisy, symmetrize=True)
    back, _ = L.decompress_point(sym_c)
    assert np.max(np.abs(back - noisy)) <= sym_c["max_deviation"] < 1e-12
    assert L.isotropy(back, tol=1e-300).description == "ΔS_5"  # exactly symmetric
    few = sym.copy()
    few[0, 1] += 1e-14
    c = L.compress_point(few)
    assert c["exceptions"] == [[0, 1, few[0, 1]]] and "dense" not in c
    same(L.decompress_point(c)[0], few)


def test_compression_validates():
    with pytest.raises(ValueError, match="W"):
        L.compress_point(np.array([[np.nan, 1.0], [np.inf, -0.0]]))  # (failed runs are exported dense by to_json)
    for bad in ({"shape": [2, 2], "blocks": [2]}, {"shape": [2, 3], "blocks": [2], "labels": []},
                {"shape": [0, 1], "dense": []}, {"shape": "ab", "dense": [1.0]}):
        with pytest.raises(ValueError, match="data"):
            L.decompress_point(bad)
    with pytest.raises(ValueError, match="a: expected length 3"):
        L.compress_point(np.eye(3), np.ones(2))
    with pytest.raises(ValueError, match="data"):
        L.decompress_point({"values": []})


# ------------------------------------------------------------------------------------------------ JSON
def test_json_round_trip_of_critical_points_and_families(family, readout_point, tmp_path):
    for cp in (family[0].point, readout_point):
        back = L.from_json(L.to_json(cp))
        assert_same_point(cp, back)
    assert readout_point.flat_eigenvalues.size == 6
    text = L.to_json(family, path=tmp_path / "fam.json")
    W8 = family[-1].point.student.W  # 64 entries, 5 distinct values: the compressed point is much shorter
    assert 4 * len(json.dumps(L.compress_point(W8))) < len(json.dumps(W8.tolist()))
    for src in (text, tmp_path / "fam.json", str(tmp_path / "fam.json")):
        back = L.from_json(src)
        assert [p.k for p in back] == [6, 7, 8]
        for p, q in zip(family, back, strict=True):
            same(p.x, q.x)
            assert p.spectrum == q.spectrum and p.isotropy == q.isotropy
            assert_same_point(p.point, q.point)


def test_json_round_trip_of_multistart_results_with_failed_runs():
    res = L.multistart(5, 6, seed=2, train_readout=True)
    back = L.from_json(L.to_json(res))
    for f in dataclasses.fields(res):
        u, v = getattr(res, f.name), getattr(back, f.name)
        if isinstance(u, np.ndarray):
            same(u, v)
        else:
            assert u == v, f.name
    W = res.W.copy()
    W[1] = np.nan
    broken = dataclasses.replace(res, W=W, risk=np.r_[res.risk[:-1], np.nan], kind=[*res.kind[:-1], "failed"])
    text = L.to_json(broken)
    json.loads(text)  # strict JSON: no bare NaN
    assert "NaN" not in text
    back = L.from_json(text)
    same(back.W, W)
    same(back.risk, broken.risk)
    sym = L.from_json(L.to_json(res, symmetrize=True))
    assert np.max(np.abs(sym.W - res.W)) < 1e-12


def test_json_round_trip_of_real_k_families(real_k):
    back = L.from_json(L.to_json(real_k))
    assert isinstance(back, L.RealKFamily)
    for f in dataclasses.fields(real_k):
        u, v = getattr(real_k, f.name), getattr(back, f.name)
        if isinstance(u, dict):  # eigenvalues, dimension: every component, bit for bit
            assert list(u) == list(v) == ["trivial", "standard[0]", "exterior[0]", "symmetric[0]"]
            for name in u:
                same(u[name], v[name])
        elif isinstance(u, np.ndarray):
            same(u, v)
        else:  # crossings (a list of Crossing), k_turn, status, message, steps
            assert u == v, f.name
    assert back.crossings[0] == L.Crossing(real_k.k_turn, "standard[0]", 0, 0, 1)
    # non-finite numbers and a stopped continuation survive too
    odd = dataclasses.replace(real_k, risk=np.array([0.1, np.inf, np.nan]), k_turn=None, crossings=[],
                              status="fold", message="the branch turns back")
    back = L.from_json(L.to_json(odd))
    same(back.risk, odd.risk)
    assert (back.k_turn, back.crossings, back.status, back.message) == (None, [], "fold", "the branch turns back")


def test_json_validates(tmp_path):
    with pytest.raises(TypeError, match="result"):
        L.to_json({"W": 1})
    with pytest.raises(ValueError, match="text"):
        L.from_json('{"format": "other"}')
    for bad in (tmp_path / "missing.json", "", "not json", '{"format": "twolayer.landscape/1"}',
                '{"format": "twolayer.landscape/1", "result": {"__type__": "CriticalPoint", "fields": {}}}',
                '{"format": "twolayer.landscape/1", "result": {"__array__": "float"}}'):
        with pytest.raises((ValueError, TypeError), match="text|CriticalPoint"):
            L.from_json(bad)


# ------------------------------------------------------------------------------------- tables and datasets
def test_dataframes_and_datasets_hold_the_results(family, readout_point):
    res = L.multistart(4, 3, seed=0)
    df = L.to_dataframe(res)
    assert len(df) == 3 and list(df["kind"]) == res.kind and df.attrs["M"] == 4
    same(df["risk"].to_numpy(), res.risk)
    ds = L.to_xarray(res)
    same(ds["W"].values, res.W)
    assert list(ds["isotropy"].values) == res.isotropy and ds.attrs["train_readout"] == 0

    df = L.to_dataframe(family)
    assert list(df["k"]) == [6, 7, 8] and list(df["isotropy"]) == ["ΔS_5", "ΔS_6", "ΔS_7"]
    same(df[[f"x{j}" for j in range(5)]].to_numpy(), np.stack([p.x for p in family]))
    same(df["lambda_min"].to_numpy(), [p.point.eigenvalues[0] for p in family])
    ds = L.to_xarray(family)
    assert ds.sizes["eigen"] == 64 and np.isnan(ds["eigenvalues"].values[0, 36:]).all()
    same(ds["eigenvalues"].values[2], family[2].point.eigenvalues)

    df = L.to_dataframe(readout_point)
    assert df.loc[df["part"] == "flat", "multiplicity"].sum() == 6
    assert df.loc[df["part"] == "transverse", "multiplicity"].sum() == 36
    ds = L.to_xarray(readout_point)
    same(ds["flat_eigenvalues"].values, readout_point.flat_eigenvalues)

    for fn in (L.to_dataframe, L.to_xarray):
        with pytest.raises(TypeError, match="result"):
            fn([1, 2])


def test_real_k_families_as_dataframes_and_datasets(real_k):
    df = L.to_dataframe(real_k)
    # k, 2 sizes, risk, grad_norm, index, 5 x, 5 + 5 + 1 + 1 eigenvalues, 4 dimensions
    assert df.shape == (3, 1 + 2 + 3 + 5 + 12 + 4)
    same(df["k"].to_numpy(), [6.0, 5.5, 5.0])
    same(df[["size0", "size1"]].to_numpy(), real_k.sizes)
    same(df["index"].to_numpy(), [0.0, 3.5, 3.0])
    same(df[[f"x{j}" for j in range(5)]].to_numpy(), real_k.x)
    for name, lam in real_k.eigenvalues.items():
        same(df[[f"{name}:{j}" for j in range(lam.shape[1])]].to_numpy(), lam)
        same(df[f"dim:{name}"].to_numpy(), real_k.dimension[name])
    same(df["dim:standard[0]"].to_numpy(), [4.0, 3.5, 3.0])  # k - 2
    assert df.attrs["k_turn"] == real_k.k_turn and df.attrs["status"] == "completed"
    assert df.attrs["crossings"] == [{"k": real_k.k_turn, "component": "standard[0]", "position": 0,
                                      "negative_before": 0, "negative_after": 1}]

    ds = L.to_xarray(real_k)
    assert dict(ds.sizes) == {"k": 3, "block": 2, "coord": 5, "component": 4, "eigen": 5, "flat": 0, "crossing": 1}
    assert list(ds["component"].values) == ["trivial", "standard[0]", "exterior[0]", "symmetric[0]"]
    for name, lam in real_k.eigenvalues.items():
        e = ds["eigenvalues"].sel(component=name).values
        same(e[:, : lam.shape[1]], lam)
        assert np.isnan(e[:, lam.shape[1]:]).all()
        same(ds["dimension"].sel(component=name).values, real_k.dimension[name])
    same(ds["x"].values, real_k.x)
    assert float(ds["crossing_k"][0]) == real_k.k_turn == ds.attrs["k_turn"]
    assert str(ds["crossing_component"].values[0]) == "standard[0]" and int(ds["negative_after"][0]) == 1
    assert ds.attrs["n_steps"] == real_k.n_steps
    # the standard[0] eigenvalue changes sign between k = 6 and 5.5
    assert ds["eigenvalues"].sel(component="standard[0]", eigen=0).values[0] > 0 > \
        ds["eigenvalues"].sel(component="standard[0]", eigen=0).values[1]
    none = dataclasses.replace(real_k, k_turn=None, crossings=[])
    assert "k_turn" not in L.to_xarray(none).attrs and L.to_xarray(none).sizes["crossing"] == 0


def test_real_k_tables_hold_the_flat_eigenvalues():
    # issue 28: the JSON round trip kept RealKFamily.flat_eigenvalues, the DataFrame and Dataset dropped them
    fam = L.continue_real_k(np.r_[X6, 1.0, 1.0], 6.0, [6.0, 7.0], train_readout=True)
    widths = {name: lam.shape[1] for name, lam in fam.flat_eigenvalues.items()}
    assert widths == {"trivial": 2, "standard[0]": 1, "exterior[0]": 0, "symmetric[0]": 0}  # one per block each
    df = L.to_dataframe(fam)
    flat_cols = [c for c in df.columns if c.startswith("flat:")]
    assert flat_cols == ["flat:trivial:0", "flat:trivial:1", "flat:standard[0]:0"]
    for name, lam in fam.flat_eigenvalues.items():
        same(df[[f"flat:{name}:{j}" for j in range(lam.shape[1])]].to_numpy().reshape(lam.shape), lam)
    ds = L.to_xarray(fam)
    assert ds["flat_eigenvalues"].dims == ("k", "component", "flat") and ds.sizes["flat"] == 2
    for name, lam in fam.flat_eigenvalues.items():
        f = ds["flat_eigenvalues"].sel(component=name).values
        same(f[:, : lam.shape[1]], lam)
        assert np.isnan(f[:, lam.shape[1]:]).all()
    assert np.nanmax(np.abs(ds["flat_eigenvalues"].values)) <= 1e-10  # ~0 at critical points



# ------------------------------------------------------------------------------------------------ figures
def test_figures_draw_spectra_and_family_curves(family, readout_point, real_k):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # the test extra has matplotlib: no silent skip in CI

    fig, axes = plt.subplots(1, 4)
    try:
        L.figures.plot_spectrum(readout_point, ax=axes[0])
        # 12 distinct transverse eigenvalues (ΔS_5 at k = 6, second layer trained too) and one flat group
        assert len(axes[0].lines[0].get_xdata()) == len(readout_point.spectrum())
        assert len(axes[0].lines[1].get_xdata()) == 1
        L.figures.plot_spectrum(np.array([-1.0, 2.0, 2.0]), ax=axes[1])
        L.figures.plot_family(family, "risk", ax=axes[2])
        same(axes[2].lines[0].get_ydata(), [p.risk for p in family])
        L.figures.plot_family(real_k, "eigenvalues", ax=axes[3])
        lines = axes[3].lines
        assert len(lines) == 12 + 1 + 1  # 5 + 5 + 1 + 1 eigenvalue curves (4 components), k_turn, zero line
        same(lines[5].get_xdata(), [6.0, 5.5, 5.0])
        same(lines[5].get_ydata(), real_k.eigenvalues["standard[0]"][:, 0])
        assert lines[0].get_color() != lines[5].get_color() != lines[10].get_color()
        assert list(lines[12].get_xdata()) == [real_k.k_turn] * 2  # the dotted k_turn line, at 5.5855...
        assert abs(real_k.k_turn - 5.5855052474) < 1e-10
        assert [t.get_text() for t in axes[3].get_legend().get_texts()][:4] == list(real_k.eigenvalues)
        L.figures.plot_family(real_k, "risk", ax=axes[3])
        same(axes[3].lines[-1].get_ydata(), real_k.risk)
        with pytest.raises(ValueError, match="quantity"):
            L.figures.plot_family(family, "index", ax=axes[3])
        with pytest.raises(TypeError, match="family"):
            L.figures.plot_family([], ax=axes[3])
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------------- untrusted documents
def _doc(result):
    return json.dumps({"format": "twolayer.landscape/1", "result": result})


def _huge_point(k):
    return {"shape": [k, k], "blocks": [k], "rows": list(range(3)), "cols": list(range(3)),
            "labels": ["diag[0]", "off[0]"], "values": [1.0, 0.0], "exceptions": []}


def test_from_json_checks_sizes_before_allocating(readout_point):
    """A 230-byte document (a block-compressed point claiming k = 30000) used 6 GiB and 14 s before MemoryError."""
    import time
    import tracemalloc

    cp = json.loads(L.to_json(readout_point))
    cp["result"]["fields"]["student"]["__network__"]["point"] = _huge_point(30000)
    ms = json.loads(L.to_json(L.multistart(2, 2, seed=0)))
    ms["result"]["shape"] = [1, 30000, 30000]
    ms["result"]["fields"]["points"] = [_huge_point(30000)]
    tracemalloc.start()
    t0 = time.perf_counter()
    for bad in (cp, ms):
        with pytest.raises(ValueError, match=r"text: result\.(student|points).* the point expands to 2\.7e\+09"):
            L.from_json(json.dumps(bad))
    with pytest.raises(ValueError, match=r"data: the point expands to .* more than the"):
        L.decompress_point(_huge_point(30000))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - t0 < 2.0 and peak < 50e6
    # many points that each expand within the limit: the document's total is bounded too
    pt = {"shape": [300, 300], "blocks": [300], "rows": list(range(300)), "cols": list(range(300)),
          "labels": ["diag[0]", "off[0]"], "values": [1.0, 0.0], "exceptions": []}
    runs = 600
    ms["result"]["shape"] = [runs, 300, 300]
    ms["result"]["fields"]["points"] = [pt] * runs
    for key in ("risk", "grad_norm", "index", "iterations"):
        kind = "float" if key in ("risk", "grad_norm") else "int"
        ms["result"]["fields"][key] = {"__array__": kind, "shape": [runs], "data": [0] * runs}
    for key in ("kind", "isotropy", "status"):
        ms["result"]["fields"][key] = ["x"] * runs
    with pytest.raises(ValueError, match=r"text: result\.points\[\d+\]: .* a document may expand to"):
        L.from_json(json.dumps(ms))


def test_from_json_refuses_deep_nesting_and_bare_values():
    """'"result": true' came back as True; deep nesting raised RecursionError."""
    for bad in ("[" * 100_000, '{"format": "twolayer.landscape/1", "result": ' + "[" * 100_000 + "]" * 100_000 + "}",
                _doc(json.loads("[" * 500 + "]" * 500))):
        with pytest.raises(ValueError, match="nested deeper|Expecting|text"):
            L.from_json(bad)
    for result in (True, 1, "x", None, [1], {"__array__": "float", "shape": [1], "data": [1.0]}, []):
        if result == []:
            assert L.from_json(_doc(result)) == []  # an empty family
            continue
        with pytest.raises(ValueError, match="text: result"):
            L.from_json(_doc(result))


@pytest.mark.parametrize("path,value", [
    (("risk",), "x"), (("risk",), True), (("grad_norm",), [1.0]), (("eigenvalues",), 1.0),
    (("eigenvalues",), {"__array__": "int", "shape": [1], "data": [1]}), (("index",), 1.5), (("index",), True),
    (("nullity",), "1"), (("kind",), 5), (("converged",), 1), (("iterations",), None), (("history",), "ab"),
    (("history",), ["x"]), (("train_readout",), "False"), (("flat_eigenvalues",), [1.0]),
    (("eigenvalues",), {"__array__": "float", "shape": [2, 2], "data": [1.0]}),
    (("eigenvalues",), {"__array__": "float", "shape": [1, 1], "data": [1.0]}),
    (("student",), {"__network__": {"activation": "swish", "scaling": "none", "readout": "sum",
                                    "point": {"shape": [1, 1], "dense": [1.0], "a": [1.0]}}}),
    (("student",), {"__network__": {"activation": "relu", "scaling": "none", "readout": "sum",
                                    "point": {"shape": [1, 1], "dense": ["1"], "a": [1.0]}}}),
    (("student",), 3), (("bogus",), 1),
])
def test_from_json_checks_field_types(readout_point, path, value):
    """14 decoded objects with fields of the wrong type raised only when printed; now from_json names the field."""
    doc = json.loads(L.to_json(readout_point))
    doc["result"]["fields"][path[0]] = value
    with pytest.raises(ValueError, match=rf"text: result\.{path[0]}|text: result\.fields"):
        L.from_json(json.dumps(doc))


def test_from_json_checks_multistart_lengths():
    doc = json.loads(L.to_json(L.multistart(2, 2, seed=0)))
    for key, value in (("kind", ["global minimum"]), ("risk", {"__array__": "float", "shape": [3], "data": [0, 0, 0]}),
                       ("status", "converged")):
        bad = json.loads(json.dumps(doc))
        bad["result"]["fields"][key] = value
        with pytest.raises(ValueError, match=rf"text: result\.{key}"):
            L.from_json(json.dumps(bad))
    bad = json.loads(json.dumps(doc))
    bad["result"]["shape"] = [2, 3, 2]
    with pytest.raises(ValueError, match=r"text: result\.points\[0\]"):
        L.from_json(json.dumps(bad))


def test_to_json_names_the_path_it_cannot_write(readout_point):
    """A full disk gave a raw OSError traceback; /dev/full fails every write with ENOSPC."""
    import errno
    import os

    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    with pytest.raises(OSError, match=r"\[Errno 28\] No space left on device: '/dev/full'") as info:
        L.to_json(readout_point, "/dev/full")
    assert info.value.errno == errno.ENOSPC
