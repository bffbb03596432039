"""Configs and stores are data (issue 26, item 1): a scan definition names one of the package's engines; a
"module:function" is imported only with an explicit opt-in (``allow_import``, ``--allow-import MODULE``); reading a
store (``open_dataset``, ``xr.open_zarr``, ``twolayer plot``, resume checks) never imports the engine it records;
a config's ``store`` stays inside the config's directory. Every refusal is checked to have executed nothing: the
payloads would create a marker file."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import twolayer as tl
from twolayer import cli

xr = pytest.importorskip("xarray")
if sys.version_info < (3, 11):  # zarr 3 needs Python 3.11
    pytest.skip("the scan store needs zarr >= 3, which needs Python >= 3.11", allow_module_level=True)
zarr = pytest.importorskip("zarr")

MARKER = "executed.txt"
# a module with top-level side effects (importing it is executing it) and a harmless function
SIDEFX = f"open({MARKER!r}, 'w').write('EXECUTED')\n\ndef f(x=1.0):\n    return {{'y': 2.0 * x}}\n"


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """tmp_path as the current directory and first on sys.path, holding the module ``sidefx`` (top-level side
    effect) and ``trusted_mod`` (a plain function); both forgotten afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "sidefx.py").write_text(SIDEFX)
    (tmp_path / "trusted_mod.py").write_text("def square(x, c=0.0):\n    return {'y': x * x + c}\n")
    yield tmp_path
    for name in ("sidefx", "trusted_mod"):
        sys.modules.pop(name, None)


def marker_absent(where: Path) -> None:
    assert not (where / MARKER).exists(), "the payload ran"
    assert "sidefx" not in sys.modules, "the side-effect module was imported"


# every payload would create the marker (or import sidefx, which creates it) if it were run
PAYLOADS = [
    ("os:system", {"command": f"echo EXECUTED > {MARKER}"}),
    ("subprocess:getoutput", {"cmd": f"echo EXECUTED > {MARKER}"}),
    ("builtins:exec", {"source": f"open({MARKER!r}, 'w').write('x')"}),
    ("builtins:eval", {"source": f"open({MARKER!r}, 'w').write('x')"}),
    ("builtins:__import__", {"name": "sidefx"}),
    ("importlib:import_module", {"name": "sidefx"}),
    ("sidefx:f", {"x": 1.0}),  # a module in the current directory: importing it runs its top level
    ("os.path:join", {"a": MARKER}),  # a nested module path
    ("twolayer.scan:run", {"scan": "x.toml"}),  # the package's own functions are not engines either
    ("importlib.metadata:entry_points", {"group": "console_scripts"}),  # entry points
]


def toml_of(engine: str, constants: dict) -> str:
    lines = [f"engine = {json.dumps(engine)}", "[constants]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in constants.items()]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ configs


@pytest.mark.parametrize("engine,constants", PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_config_engine_refused_python(sandbox, engine, constants):
    data = {"engine": engine, "constants": constants}
    with pytest.raises(ValueError, match=rf"^engine: '{engine}' would import module '{engine.split(':')[0]}'.*"
                                         "allow_import"):
        tl.scan.Scan.from_dict(data)
    path = sandbox / "evil.toml"
    path.write_text(toml_of(engine, constants))
    assert tl.scan.read_toml(path) == data  # parsing is plain data
    for load in (tl.scan.Scan.from_toml, tl.scan.load, tl.scan.run):
        with pytest.raises(ValueError, match="^engine: .*allow_import"):
            load(path)
    with pytest.raises(ValueError, match="^engine: .*allow_import"):
        tl.scan.Scan(engine, constants=constants)
    with pytest.raises(ValueError, match="^engine: .*allow_import"):
        tl.scan.engines.engine_for(engine)
    marker_absent(sandbox)


@pytest.mark.parametrize("engine,constants", PAYLOADS, ids=[p[0] for p in PAYLOADS])
def test_config_engine_refused_cli(sandbox, engine, constants, capsys):
    path = sandbox / "evil.toml"
    path.write_text(toml_of(engine, constants))
    assert cli.main(["scan", str(path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"twolayer: engine: '{engine}' would import") and "--allow-import" in err
    assert not (sandbox / "evil.zarr").exists()
    # trusting another module does not trust this one
    assert cli.main(["scan", str(path), "--allow-import", "trusted_mod", "--no-progress"]) == 1
    assert "twolayer: engine: " in capsys.readouterr().err
    assert cli.main(["run", str(path), "--no-progress"]) == 1  # an experiment takes only 'ode', 'sgd', 'both'
    marker_absent(sandbox)


def test_names_that_are_not_module_paths(sandbox):
    for engine in ("__import__", "sidefx", "exec", "os.system"):
        with pytest.raises(ValueError, match=rf"^engine: unknown engine '{engine}'"):
            tl.scan.Scan.from_dict({"engine": engine})
    for engine in ("sidefx:f.__globals__", "os:", ":system", "os;x:system", "sidefx:f()", " os:system"):
        with pytest.raises(ValueError, match=r"^engine: expected one of 'ode'.*or 'package\.module:function'"):
            tl.scan.Scan.from_dict({"engine": engine}, allow_import=True)
    marker_absent(sandbox)


def test_cli_subprocess_module_in_current_directory(sandbox):
    """``python -m twolayer`` puts the current directory first on sys.path: its modules are still not imported."""
    (sandbox / "evil.toml").write_text(toml_of("sidefx:f", {"x": 1.0}))
    proc = subprocess.run([sys.executable, "-m", "twolayer", "scan", "evil.toml", "--no-progress"], cwd=sandbox,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "twolayer: engine: 'sidefx:f' would import module 'sidefx'" in proc.stderr
    assert not (sandbox / MARKER).exists()


def test_opt_in_runs_a_trusted_function(sandbox, capsys):
    data = {"engine": "trusted_mod:square", "constants": {"c": 1.0}, "axes": {"x": [1.0, 2.0, 3.0]}}
    for allow in (True, "trusted_mod", ["other", "trusted_mod"]):
        ds = tl.scan.run(tl.scan.Scan.from_dict(data, allow_import=allow))
        np.testing.assert_array_equal(ds["y"].values, [2.0, 5.0, 10.0])
        assert ds.attrs["engine"] == "trusted_mod:square"
    for allow in (False, "other", ["trusted", "trusted_mod.sub", "trusted_mo"], []):
        with pytest.raises(ValueError, match="^engine: 'trusted_mod:square' would import module 'trusted_mod'"):
            tl.scan.Scan.from_dict(data, allow_import=allow)
    for allow, err in ((1, TypeError), ("not a module", ValueError), ([1], TypeError), (None, TypeError)):
        with pytest.raises(err, match="^allow_import: "):
            tl.scan.Scan.from_dict(data, allow_import=allow)
    with pytest.raises(ValueError, match="engine: cannot import 'tests.nowhere:fn'"):
        tl.scan.Scan.from_dict({"engine": "tests.nowhere:fn"}, allow_import=True)
    with pytest.raises(TypeError, match="engine: 'os:sep' is not callable"):
        tl.scan.Scan.from_dict({"engine": "os:sep"}, allow_import="os")
    # from a file: Python and the command line (which names the module it trusts)
    config = sandbox / "sq.toml"
    config.write_text(toml_of("trusted_mod:square", {"c": 1.0}) + "[axes]\nx = [1.0, 2.0, 3.0]\n")
    np.testing.assert_array_equal(tl.scan.run(config, allow_import="trusted_mod")["y"].values, [2.0, 5.0, 10.0])
    assert cli.main(["scan", str(config), "--allow-import", "other", "--no-progress"]) == 1
    assert "twolayer: engine: 'trusted_mod:square' would import" in capsys.readouterr().err
    assert cli.main(["scan", str(config), "--allow-import", "other", "--allow-import", "trusted_mod",
                     "--no-progress"]) == 0
    ds = tl.scan.open_dataset(sandbox / "sq.zarr")
    np.testing.assert_array_equal(ds["y"].values, [2.0, 5.0, 10.0])
    # resuming needs the same trust: the definition is read from the config, never from the store
    assert cli.main(["scan", str(config), "--resume", "--no-progress"]) == 1
    assert cli.main(["scan", str(config), "--resume", "--allow-import", "trusted_mod", "--no-progress"]) == 0
    assert "0 computed, 1 already stored" in capsys.readouterr().out


def test_opt_in_on_a_process_pool(sandbox, tmp_path):
    """The workers get the trusted function itself, not a string they would have to import (and refuse)."""
    scan = tl.scan.Scan.from_dict({"engine": "trusted_mod:square", "axes": {"x": [1.0, 2.0]}, "group_size": 1},
                                  allow_import="trusted_mod")
    with ProcessPoolExecutor(1, mp_context=mp.get_context("fork")) as pool:
        ds = tl.scan.run(scan, store=tmp_path / "p.zarr", executor=pool)
    np.testing.assert_array_equal(ds["y"].values, [1.0, 4.0])


# ------------------------------------------------------------------------------------------ stores


def evil_store(path: Path) -> Path:
    """A finished store whose recorded definition names the engine ``sidefx:f`` (as a scan of that function,
    trusted when it was run, would record it)."""

    def f(x=1.0):
        return {"y": 2.0 * x}

    tl.scan.run(tl.scan.Scan(f, axes={"x": [1.0, 3.0]}), store=path, load_result=False)
    root = zarr.open_group(str(path), mode="a")
    definition = json.loads(root.attrs["scan_definition"])
    definition["engine"] = "sidefx:f"
    digest = tl.scan.Scan.from_dict({**definition, "engine": tl.scan.engines.recorded_engine("sidefx:f")}).digest()
    root.attrs.update({"scan_definition": json.dumps(definition), "engine": "sidefx:f", "scan_hash": digest})
    return path


def test_reading_a_store_imports_nothing(sandbox, capsys):
    path = evil_store(sandbox / "evil.zarr")
    ds = tl.scan.open_dataset(path)
    np.testing.assert_array_equal(ds["y"].values, [2.0, 6.0])
    assert ds.attrs["engine"] == "sidefx:f" and json.loads(ds.attrs["scan_definition"])["engine"] == "sidefx:f"
    marker_absent(sandbox)
    xr.open_zarr(path, consolidated=False).close()
    marker_absent(sandbox)
    assert cli.main(["plot", str(path)]) == 0
    assert (sandbox / "evil.png").exists()
    marker_absent(sandbox)
    # the recorded definition cannot be run from the store
    with pytest.raises(ValueError, match="engine: 'sidefx:f' is recorded in a store as text"):
        tl.scan.engines.recorded_engine("sidefx:f").run([{"x": 1.0}])


def test_resume_checks_import_nothing(sandbox, capsys):
    path = evil_store(sandbox / "evil.zarr")
    ok = {"engine": "ode", "constants": {"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3, "lr": 1.0}}
    with pytest.raises(ValueError, match="different scan definition"):
        tl.scan.run(ok, store=path, resume=True)
    config = sandbox / "ok.toml"
    config.write_text(toml_of("ode", ok["constants"]))
    assert cli.main(["scan", str(config), "--store", str(path), "--resume", "--no-progress"]) == 1
    assert "different scan definition" in capsys.readouterr().err
    marker_absent(sandbox)


@pytest.mark.filterwarnings("ignore::zarr.errors.UnstableSpecificationWarning")
def test_store_arrays_are_checked_not_trusted(sandbox):
    """A finished group's array replaced by one of another dtype (strings where numbers were written) fails the
    group's checksum: refused on open, computed again on resume (Zarr v3 has no object codec: nothing unpickles)."""
    path = evil_store(sandbox / "s.zarr")
    root = zarr.open_group(str(path), mode="a")
    attrs = dict(root["y"].attrs)
    del root["y"]
    root.create_array("y", data=np.array(["a", "b"]), compressors=None, dimension_names=("x",)).update_attributes(
        attrs)
    with pytest.raises(ValueError, match=r"store: .*s.zarr: 1 finished group\(s\) fail their checksum"):
        tl.scan.open_dataset(path)


# ------------------------------------------------------------------------------------------ store paths


SMALL = toml_of("ode", {"K": 1, "M": 1, "d": 10, "t_max": 1.0, "n_records": 3, "lr": 1.0})


@pytest.mark.parametrize("where", ["../outside.zarr", "ABSOLUTE", "sub/../../outside.zarr",
                                   "link/s.zarr", ".", ""])
def test_config_store_must_stay_in_its_directory(tmp_path, where, capsys, monkeypatch):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (conf_dir / "link").symlink_to(tmp_path / "elsewhere")
    monkeypatch.chdir(conf_dir)
    config = conf_dir / "c.toml"
    if where == "ABSOLUTE":
        where = str(tmp_path / "abs.zarr")
    config.write_text(f"store = {json.dumps(where)}\n" + SMALL)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    assert cli.main(["scan", str(config), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("twolayer: store: ") and "--store" in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not Path("ABSOLUTE").exists()
    # the same path from the command line is the user's own choice
    if where not in (".", ""):
        out = tmp_path / "elsewhere" / "cli.zarr"
        assert cli.main(["scan", str(config), "--store", str(out), "--no-progress"]) == 0
        assert tl.scan.open_dataset(out)["risk"].shape == (3,)


def test_config_store_relative_to_the_config(tmp_path, monkeypatch, capsys):
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    monkeypatch.chdir(tmp_path)  # not the config's directory
    config = conf_dir / "c.toml"
    config.write_text('store = "sub/../out/s.zarr"\n' + SMALL)
    assert cli.main(["scan", str(Path("conf") / "c.toml"), "--no-progress"]) == 0
    assert (conf_dir / "out" / "s.zarr").is_dir() and not (tmp_path / "out").exists()
    config.write_text("store = 3\n" + SMALL)
    assert cli.main(["scan", str(config), "--no-progress"]) == 1
    assert "twolayer: store: expected a path relative to the config's directory, got int" in capsys.readouterr().err
    assert tl.scan.spec.config_store({"store": "a/b.zarr"}, config) == (conf_dir / "a" / "b.zarr").resolve()
    assert tl.scan.spec.config_store({}, config) is None
    if os.name == "posix":
        with pytest.raises(ValueError, match=r"^store: '/x.zarr' is not inside the directory of .*c\.toml"):
            tl.scan.spec.config_store({"store": "/x.zarr"}, config)
