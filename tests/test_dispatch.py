"""Run-time CPU dispatch: every compiled instruction level this CPU runs gives the same numbers.

tests/dispatch_workload.py (kernels of every activation, the ReLU population gradient and risk, RK4 and adaptive
ODE trajectories, SGD runs) runs in one subprocess per level, forced by TWOLAYER_SIMD. Documented tolerances:

* levels without FMA (baseline, v2) run the same operations in the same order: results are bitwise equal;
* levels with FMA (v3, v4, native) let the compiler contract a*b + c into one rounding (except in rng.cpp, built
  with -ffp-contract=off, so the Gaussian samples are bitwise the same at every level): kernels, population
  quantities and ODE trajectories agree with the baseline to |x - y| <= 1e-13 + 1e-12 |y| (measured: 1.6e-13
  relative at most); SGD trajectories, whose rounding differences grow along the run, to |x - y| <= 1e-6 after
  t = 5 at d = 500 (measured: 3.7e-9).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import twolayer as tl
from twolayer import _dispatch, cli

WORKLOAD = Path(__file__).with_name("dispatch_workload.py")
NO_FMA = {"baseline", "v2"}


def _run(level: str, out: Path) -> dict[str, np.ndarray]:
    env = dict(os.environ, TWOLAYER_SIMD=level, OMP_NUM_THREADS="2")
    subprocess.run([sys.executable, str(WORKLOAD), str(out)], env=env, check=True, capture_output=True)
    with np.load(out) as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict[str, np.ndarray]]:
    levels = [lvl for lvl in _dispatch.compiled() if lvl in _dispatch.supported()]
    tmp = tmp_path_factory.mktemp("dispatch")
    return {lvl: _run(lvl, tmp / f"{lvl}.npz") for lvl in levels}


def test_each_level_loads_itself(results):
    assert results, "no compiled level runs on this CPU"
    for level, res in results.items():
        assert str(res["level"]) == level


def test_levels_agree(results):
    ref_level = "baseline" if "baseline" in results else next(iter(results))
    ref = results[ref_level]
    for level, res in results.items():
        for key, want in ref.items():
            if key == "level":
                continue
            got = res[key]
            assert got.shape == want.shape, (level, key)
            if level in NO_FMA and ref_level in NO_FMA:
                assert np.array_equal(got, want), f"{level} vs {ref_level}: {key} not bitwise equal"
            elif key.startswith("sgd_"):
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-6, err_msg=f"{level}: {key}")
            else:
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13, err_msg=f"{level}: {key}")


def test_default_is_the_best_supported_level():
    usable = [lvl for lvl in _dispatch.compiled() if lvl in _dispatch.supported()]
    assert _dispatch.select("auto") == usable[-1] == _dispatch.select("")
    if "TWOLAYER_SIMD" not in os.environ:
        assert tl.build_info()["simd_level"] == usable[-1]


def test_bad_requests_are_named():
    with pytest.raises(ImportError, match="TWOLAYER_SIMD must be one of .*got 'avx9'"):
        _dispatch.select("avx9")
    missing = [lvl for lvl in ("baseline", "v2", "v3", "v4", "native") if lvl not in _dispatch.compiled()]
    if missing:
        with pytest.raises(ImportError, match=f"TWOLAYER_SIMD={missing[0]}: this build has"):
            _dispatch.select(missing[0])
    env = dict(os.environ, TWOLAYER_SIMD="avx9")
    res = subprocess.run([sys.executable, "-c", "import twolayer"], env=env, capture_output=True, text=True)
    assert res.returncode != 0 and "TWOLAYER_SIMD must be one of" in res.stderr


def test_info_reports_the_build(capsys):
    info = tl.build_info()
    assert info["simd_level"] in info["simd_levels"] and info["simd_level"] in info["simd_supported"] + ["native"]
    assert info["compiler"] and isinstance(info["flags"], str)
    assert cli.main(["info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(info))
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"twolayer {tl.__version__}"


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("readelf") is None, reason="ELF (readelf) only")
def test_info_reports_how_the_cxx_runtime_is_linked(capsys):
    """libstdcxx_static: the loaded core names no libstdc++.so (-static-libstdc++), read from its ELF file."""
    from twolayer import _core, _elf

    dynamic = subprocess.run(["readelf", "-d", _core.__file__], capture_output=True, text=True, check=True).stdout
    needed = [line.split("[", 1)[1].split("]", 1)[0] for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert _elf.needed_libraries(_core.__file__) == needed
    static = not any(n.startswith("libstdc++") for n in needed)
    assert tl.build_info()["libstdcxx_static"] is static
    assert cli.main(["info"]) == 0 and f"libstdcxx_static: {static}" in capsys.readouterr().out


@pytest.mark.skipif(sys.platform != "linux" or shutil.which("c++") is None, reason="a C++ compiler on Linux")
def test_cxx_runtime_static_tells_the_two_links_apart(tmp_path):
    from twolayer import _elf

    src = tmp_path / "m.cpp"
    src.write_text('#include <string>\nextern "C" int f(int n) { return int(std::to_string(n).size()); }\n')
    for flags, static in (([], False), (["-static-libstdc++", "-static-libgcc"], True)):
        so = tmp_path / f"m{int(static)}.so"
        subprocess.run(["c++", "-shared", "-fPIC", "-o", str(so), str(src), *flags], check=True)
        assert _elf.cxx_runtime_static(str(so)) is static
    assert _elf.cxx_runtime_static(str(src)) is None  # not an ELF file


def test_python_m_twolayer():
    res = subprocess.run([sys.executable, "-m", "twolayer", "--version"], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip().splitlines()[-1] == f"twolayer {tl.__version__}"


def test_core_exceptions_keep_their_type_when_every_level_is_imported():
    """Importing the other levels' modules (as tests/test_docs.py does) must not change which Python type the loaded
    core raises: its exception translators are module-local."""
    code = (
        "import importlib, twolayer as tl\n"
        "from twolayer import _dispatch\n"
        "for level in _dispatch.compiled():\n"
        "    importlib.import_module('twolayer._core_' + level)\n"
        "try:\n"
        "    tl.ode.integrate_batch([tl.ode.plateau_overlaps()], 'relu', 'erf', lr=1.0, t_max=1.0, device='cuda')\n"
        "except tl.DeviceUnavailable:\n"
        "    print('caught')\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.splitlines()[-1:] == ["caught"], res.stdout + res.stderr
