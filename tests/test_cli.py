"""The command line: ``twolayer demo`` writes its figure and data, ``twolayer info`` reports the build."""

from __future__ import annotations

import csv
import subprocess
import sys

import twolayer as tl
from twolayer import cli


def test_demo_quick_writes_png_and_csv(tmp_path, capsys):
    assert cli.main(["demo", "--quick", "--no-progress", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "orthogonal" in out and "erf plateau" in out
    png = (tmp_path / "demo.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    with open(tmp_path / "demo.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    panels = {r["panel"] for r in rows}
    assert panels == {"symmetry_breaking", "plateau"}
    # The orthogonal start stays on the symmetric saddle: its final risk is far above the Gaussian starts' best.
    final = {}
    for r in rows:
        if r["panel"] == "symmetry_breaking":
            final[(r["series"], r["seed"])] = float(r["risk"])
    assert min(v for (s, _), v in final.items() if s == "orthogonal") > 0.3


def test_info_and_help():
    info = tl.build_info()
    assert set(info) >= {"version", "openmp", "max_threads", "cuda"} and info["max_threads"] >= 1
    res = subprocess.run([sys.executable, "-m", "twolayer.cli", "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "demo" in res.stdout and "info" in res.stdout
