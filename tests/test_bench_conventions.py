"""Static checks of the benchmark suite's conventions (bench/conftest.py): enough rounds for a median, and speed
reported rather than asserted (no assertion on a measured rate, share or time)."""

from __future__ import annotations

import ast
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"
FILES = sorted(BENCH.glob("test_bench_*.py"))
TIMING_NAMES = {"rate", "share", "seconds", "wall", "cpu", "elapsed"}


@pytest.mark.skipif(not FILES, reason="bench/ is not part of this checkout")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_pedantic_rounds_allow_a_median(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):  # benchmark.pedantic(..., rounds=n) and helpers passing rounds= on
            for kw in node.keywords:
                if kw.arg == "rounds" and isinstance(kw.value, ast.Constant):
                    assert kw.value.value >= 3, f"{path.name}:{node.lineno}: rounds={kw.value.value} (at least 3)"


@pytest.mark.skipif(not FILES, reason="bench/ is not part of this checkout")
@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_assertion_on_a_timing(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assert):
            names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
            names |= {n.value for n in ast.walk(node.test) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            assert not names & TIMING_NAMES, f"{path.name}:{node.lineno}: asserts a timing ({names & TIMING_NAMES})"
