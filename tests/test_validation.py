"""Input coercion and error messages (hardening issue): wrong types raise TypeError, bad values ValueError, and
every message names the argument, what was expected and what was given -- checked before the C++ core runs."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from fractions import Fraction

import numpy as np
import pytest
import twolayer as tl
from twolayer import cli, demo
from twolayer import landscape as L
from twolayer._validation import SEED_MAX, as_float_array, boolean, integer, positive, real, seed_arg


@pytest.fixture(scope="module")
def pair():
    return tl.networks.teacher_student(2, 2, 10, "erf", seed=1)


@pytest.fixture(scope="module")
def overlaps(pair):
    return tl.Overlaps.from_networks(*pair)


# ------------------------------------------------------------------------------------------ the helpers
def test_helpers_accept_the_documented_types():
    assert integer(np.int8(3), "n", 1, 5) == 3 and type(integer(np.uint64(3), "n")) is int
    assert real(3, "x") == 3.0 and real(np.float32(0.5), "x") == 0.5 and real(np.array(2.0), "x") == 2.0
    assert real(Fraction(1, 4), "x") == 0.25
    assert boolean(np.bool_(True), "flag") is True
    assert seed_arg(SEED_MAX) == 2**64 - 1 and seed_arg(None, allow_none=True) is None
    assert as_float_array(np.arange(3, dtype=np.uint8), "x").dtype == np.float64
    assert as_float_array(np.array([1, 2**70], dtype=object), "x")[1] == 2.0**70


@pytest.mark.parametrize(("call", "exc", "match"), [
    (lambda: integer(True, "n"), TypeError, r"n: expected an integer, got True \(bool\)"),
    (lambda: integer(2.0, "n"), TypeError, r"n: expected an integer, got 2.0 \(float\)"),
    (lambda: integer("3", "n"), TypeError, r"n: expected an integer, got '3' \(str\)"),
    (lambda: integer(0, "n", 1, 2**31 - 1), ValueError, r"n: expected an integer in \[1, 2\*\*31-1\], got 0"),
    (lambda: real("0.5", "x"), TypeError, r"x: expected a real number, got '0.5' \(str\)"),
    (lambda: real(b"1", "x"), TypeError, "x: expected a real number"),
    (lambda: real(1 + 0j, "x"), TypeError, "x: expected a real number"),
    (lambda: real(False, "x"), TypeError, "x: expected a real number"),
    (lambda: real(10**400, "x"), ValueError, "x: expected a finite real number, got an integer of 1329 bits"),
    (lambda: positive(float("nan"), "x"), ValueError, "x: expected a finite"),
    (lambda: boolean("False", "flag"), TypeError, r"flag: expected True or False, got 'False' \(str\)"),
    (lambda: boolean(0, "flag"), TypeError, "flag: expected True or False"),
    (lambda: seed_arg(-1), ValueError, r"seed: expected an integer in \[0, 2\*\*64-1\], got -1"),
    (lambda: seed_arg(2**64), ValueError, r"seed: expected an integer in \[0, 2\*\*64-1\]"),
    (lambda: seed_arg(1.0), TypeError, "seed: expected an integer"),
    (lambda: as_float_array([1 + 2j], "x"), TypeError, "x: expected an array of real numbers, got complex"),
    (lambda: as_float_array(["1", "2"], "x"), TypeError, "x: expected an array of real numbers, got string"),
    (lambda: as_float_array([b"1"], "x"), TypeError, "x: expected an array of real numbers, got bytes"),
    (lambda: as_float_array([True, False], "x"), TypeError, "x: expected an array of real numbers, got boolean"),
    (lambda: as_float_array([1, None], "x"), TypeError, "x: expected an array of real numbers, got an entry None"),
    (lambda: as_float_array([[1, 2], [3]], "x"), ValueError, "x: expected an array of real numbers of a regular"),
])
def test_helpers_reject(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ----------------------------------------------- defect 1: complex, strings, truthiness, silent truncation
def test_complex_arrays_are_refused_not_truncated(pair, overlaps):
    student, teacher = pair
    with pytest.raises(TypeError, match="W: .*complex"):
        tl.Network(student.W + 1e-3j)
    with pytest.raises(TypeError, match="a: .*complex"):
        tl.Network(student.W, student.a.astype(complex))
    with pytest.raises(TypeError, match="C: .*complex"):
        tl.kernels.i2("erf", "erf", np.eye(2) * (1 + 0j))
    with pytest.raises(TypeError, match="Q: .*complex"):
        tl.Overlaps(overlaps.Q + 0j, overlaps.M, overlaps.P, overlaps.a, overlaps.v)
    with pytest.raises(TypeError, match="times: .*complex"):
        tl.ode.integrate(overlaps, lr=1.0, times=np.array([0.0, 1.0 + 1j]))
    with pytest.raises(TypeError, match="x: .*complex"):
        tl.activations.sigma("relu", [1j])
    with pytest.raises(TypeError, match="angles: .*complex"):
        L.alignment_determinants(np.array([1.0 + 0j]))


def test_strings_do_not_parse_as_numbers(pair, overlaps):
    student, teacher = pair
    with pytest.raises(TypeError, match=r"lr: expected a real number, got '0.5'"):
        tl.sgd.simulate(student, teacher, lr="0.5", t_max=1.0)
    with pytest.raises(TypeError, match="lr: expected a real number"):
        tl.ode.integrate(overlaps, lr="0.5", t_max=1.0)
    with pytest.raises(TypeError, match="noise: expected a real number"):
        tl.population.risk(student, teacher, noise="0")
    with pytest.raises(TypeError, match="t_max: expected a real number"):
        tl.ode.integrate(overlaps, lr=1.0, t_max="10")
    with pytest.raises(TypeError, match="W: .*string"):
        tl.Network([["1.0", "2.0"]])
    with pytest.raises(TypeError, match="C: .*string"):
        tl.kernels.j2("erf", np.array([["1", "0"], ["0", "1"]]))
    with pytest.raises(TypeError, match="lr: expected an array of real numbers, got string"):
        tl.ode.integrate_batch([overlaps, overlaps], lr=["0.5", "1"], t_max=1.0)
    with pytest.raises(TypeError, match="tol: expected a real number"):
        L.refine(*pair, tol="1e-12")


def test_booleans_are_not_truthiness(pair, overlaps):
    student, teacher = pair
    with pytest.raises(TypeError, match=r"train_readout: expected True or False, got 'False'"):
        tl.population.gradient(student, teacher, train_readout="False")
    with pytest.raises(TypeError, match="train_readout: expected True or False"):
        tl.population.hessian(student, teacher, train_readout=0)
    with pytest.raises(TypeError, match="spherical: expected True or False"):
        tl.ode.integrate(overlaps, lr=1.0, t_max=1.0, spherical="no")
    with pytest.raises(TypeError, match="spherical: expected True or False"):
        tl.ode.rhs(overlaps, lr=1.0, spherical=None)
    for flag in ("spherical", "shuffle", "train_first_layer", "keep_weights", "progress"):
        with pytest.raises(TypeError, match=f"{flag}: expected True or False"):
            tl.sgd.simulate(student, teacher, lr=0.5, t_max=1.0, **{flag: "False"})
    with pytest.raises(TypeError, match="train_readout: expected True or False"):
        L.FixedPointSpace((2, 1), train_readout="yes")
    with pytest.raises(TypeError, match="train_readout: expected True or False"):
        L.refine(student, teacher, train_readout=1)
    with pytest.raises(TypeError, match="train_readout: expected True or False"):
        L.multistart(2, 1, train_readout="False")
    # numpy booleans are booleans
    dW, da = tl.population.gradient(student, teacher, train_readout=np.bool_(False))
    assert da is None


def test_non_integer_sizes_are_not_rounded():
    with pytest.raises(TypeError, match=r"sizes\[0\]: expected an integer, got 1.5 \(float\)"):
        L.FixedPointSpace((1.5, 2))
    with pytest.raises(TypeError, match=r"sizes\[1\]: expected an integer, got 2.0"):
        L.FixedPointSpace((1, 2.0))
    with pytest.raises(TypeError, match="sizes: expected a sequence of integers"):
        L.FixedPointSpace("12")
    with pytest.raises(ValueError, match="sizes: expected at least one"):
        L.FixedPointSpace(())
    assert L.FixedPointSpace(np.array([2, 1])).sizes == (2, 1)
    with pytest.raises(TypeError, match="K: expected an integer, got 2.0"):
        tl.Network.random(2.0, 5)
    with pytest.raises(TypeError, match="batch_size: expected an integer, got 1.5"):
        tl.sgd.simulate(*tl.networks.teacher_student(1, 1, 4, seed=0), lr=0.5, t_max=1.0, batch_size=1.5)
    with pytest.raises(TypeError, match="steps: expected an integer"):
        tl.population.descend(*tl.networks.teacher_student(1, 1, 4, seed=0), lr=0.5, n_steps=10.0)
    with pytest.raises(TypeError, match="n_records: expected an integer"):
        tl.ode.plateau_example(t_max=1.0, n_records=True)
    with pytest.raises(TypeError, match=r"ks\[0\]: expected an integer"):
        L.continue_family(lambda k: (k - 1, 1), [6.0], np.zeros(5))


def test_choices_wrong_type_and_unknown_value(overlaps):
    with pytest.raises(TypeError, match="activation: expected one of"):
        tl.Network(np.ones((2, 3)), activation=None)
    with pytest.raises(ValueError, match="activation: expected one of"):
        tl.Network(np.ones((2, 3)), activation="swish")
    with pytest.raises(TypeError, match="scaling: expected one of"):
        tl.Network(np.ones((2, 3)), scaling=np.array(["sqrt_d", "none"]))
    with pytest.raises(TypeError, match="method: expected one of"):
        tl.ode.integrate(overlaps, lr=1.0, t_max=1.0, method=2)
    with pytest.raises(TypeError, match="init: expected one of"):
        L.multistart(2, 1, init=None)


# --------------------------------------------- defect 2: integers the core cannot hold, seeds, NaN weights
@pytest.mark.parametrize(("call", "match"), [
    (lambda: tl.Network.random(2**40, 3), r"K: expected an integer in \[1, 2\*\*31-1\], got 1099511627776"),
    (lambda: tl.Network.random(2, 2**40), r"d: expected an integer in \[1, 2\*\*31-1\], got 1099511627776"),
    (lambda: tl.networks.teacher_student(2**40, 2, 3), r"K: expected an integer in \[1, 2\*\*31-1\]"),
    (lambda: tl.networks.teacher_student(2, 2**40, 3), r"M: expected an integer in \[1, 2\*\*31-1\]"),
    (lambda: tl.networks.teacher_student(2, 2, 10, seed=2**70), r"seed: expected an integer in \[0, 2\*\*64-1\]"),
    (lambda: tl.Network.random(2, 3, seed=-1), r"seed: expected an integer in \[0, 2\*\*64-1\], got -1"),
    (lambda: L.multistart(2, 2, seed=2**70), r"seed: expected an integer in \[0, 2\*\*64-1\]"),
    (lambda: L.multistart(2, 2, max_iter=2**40), r"max_iter: expected an integer in \[0, 2\*\*31-1\]"),
    (lambda: L.multistart(2, 2, memory=0), r"memory: expected an integer in \[1, 2\*\*31-1\], got 0"),
    (lambda: L.multistart(2**40, 2), r"M: expected an integer in \[1, 2\*\*31-1\]"),
    (lambda: L.random_starts(2, 2, 2, "xavier", 2**64), r"seed: expected an integer in \[0, 2\*\*64-1\]"),
    (lambda: tl.ode.plateau_overlaps(seed=2**64), r"seed: expected an integer in \[0, 2\*\*64-1\]"),
    (lambda: L.identity_teacher(2**40), r"k: expected an integer in \[1, 2\*\*31-1\]"),
])
def test_out_of_range_integers_are_named_before_the_core(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_sgd_integer_ranges(pair):
    student, teacher = pair
    base = dict(lr=0.5, t_max=1.0)
    cases = [
        (dict(seed=2**70), r"seed: expected an integer in \[0, 2\*\*64-1\], got 1180591620717411303424"),
        (dict(seed=10**5000), r"seed: .*got an integer of 16610 bits"),
        (dict(batch_size=2**40), r"batch_size: expected an integer in \[1, 2\*\*31-1\]"),
        (dict(n_samples=2**40), r"n_samples: expected an integer in \[1, 2\*\*32-1\]"),
        (dict(seeds=2**40), r"seeds: expected an integer in \[1, 2\*\*32-1\]"),
        (dict(seeds=[0, 2**40]), r"seeds\[1\]: expected an integer in \[0, 2\*\*32-1\]"),
        (dict(n_records=2**40), r"n_records: expected an integer in \[2, 2\*\*31-1\]"),
    ]
    for change, match in cases:
        with pytest.raises(ValueError, match=match):
            tl.sgd.simulate(student, teacher, **{**base, **change})
    with pytest.raises(TypeError, match="seed: expected an integer"):
        tl.sgd.simulate(student, teacher, seed=np.random.default_rng(0), **base)
    with pytest.raises(TypeError, match="seeds: expected a sequence of integers"):
        tl.sgd.simulate(student, teacher, seeds=True, **base)
    with pytest.raises(TypeError, match="student: expected a Network or a sequence of Networks"):
        tl.sgd.simulate(5, teacher, **base)
    # the largest seed is accepted
    assert tl.sgd.simulate(student, teacher, seed=2**64 - 1, **base).status == "completed"


def test_ode_and_population_integer_ranges(pair, overlaps):
    with pytest.raises(ValueError, match=r"max_steps: expected an integer in \[1, 2\*\*63-1\]"):
        tl.ode.integrate(overlaps, lr=1.0, t_max=1.0, max_steps=2**63)
    with pytest.raises(ValueError, match=r"n_records: expected an integer in \[2, 2\*\*31-1\]"):
        tl.ode.integrate(overlaps, lr=1.0, t_max=1.0, n_records=2**40)
    with pytest.raises(ValueError, match=r"steps: expected an integer in \[0, 2\*\*63-1\]"):
        tl.population.descend(*pair, lr=0.1, n_steps=2**64)
    with pytest.raises(ValueError, match=r"lr: expected a finite real number"):
        tl.ode.integrate(overlaps, lr=10**400, t_max=1.0)


def test_nan_weights_are_named_up_front(pair):
    student, teacher = pair
    bad = tl.Network(student.W.copy(), student.a)
    bad.W[0, 0] = np.nan  # a Network's arrays can be edited in place after construction
    for call in (lambda: tl.population.risk(bad, teacher), lambda: tl.population.gradient(bad, teacher),
                 lambda: tl.population.hessian(bad, teacher), lambda: L.refine(bad, teacher),
                 lambda: tl.Overlaps.from_networks(bad, teacher)):
        with pytest.raises(ValueError, match=r"student\.W: entries must be finite"):
            call()
    with pytest.raises(ValueError, match=r"teacher\.W: entries must be finite"):
        tl.population.risk(teacher, bad)
    with pytest.raises(ValueError, match="W: entries must be finite"):
        tl.Network([[np.inf, 1.0]])


# ------------------------------------------------------------------------ defect 3: Isotropy.__repr__
def test_isotropy_repr_of_huge_groups():
    iso = L.isotropy(np.zeros((1800, 1)))  # S_1800 on identical rows: 1800! has 5080 digits
    assert iso.order == math.factorial(1800)
    assert repr(iso) == "Isotropy(S_1800(rows), order=~6.126156e+5079)"
    big = L.Isotropy(order=math.factorial(3000), description="ΔS_3000", classes=[tuple(range(3000))])
    assert "ΔS_3000" in repr(big) and "e+9130" in repr(big)
    assert repr(L.isotropy(np.eye(4))) == "Isotropy(ΔS_4, order=24)"
    assert "order=None" in repr(L.Isotropy(order=None, description="?", classes=[]))  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- defect 4: the CLI
def _run_cli(argv, capsys):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def test_cli_output_is_a_file(capsys):
    code, err = _run_cli(["demo", "--quick", "--no-progress", "--out", "/dev/full"], capsys)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("twolayer: cannot write demo.csv and demo.png to /dev/full")
    assert "Traceback" not in err


def test_cli_output_under_a_file(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = _run_cli(["demo", "--quick", "--no-progress", "--out", str(blocker / "sub")], capsys)
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"twolayer: cannot write demo.csv and demo.png to {blocker / 'sub'}: ")


@pytest.mark.skipif(os.geteuid() == 0 if hasattr(os, "geteuid") else True, reason="root ignores permissions")
def test_cli_output_not_writable(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        code, err = _run_cli(["demo", "--quick", "--no-progress", "--out", str(ro)], capsys)
    finally:
        ro.chmod(0o700)
    assert code == 1 and err.count("\n") == 1 and "Permission denied" in err


def test_cli_disk_full_while_writing(tmp_path, capsys, monkeypatch):
    """A write that fails after the runs (disk full): one line naming the file, no traceback. The runs are
    replaced by a small stand-in so the test takes no time."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    tiny = demo.DemoResult(demo.DemoConfig(seeds=(0,)))
    tiny.runs["gaussian"] = [tl.population.descend(*tl.networks.teacher_student(1, 1, 4, "step", seed=0), lr=0.1,
                                                   n_steps=2, n_records=2)]
    monkeypatch.setattr(demo, "run_symmetry_breaking", lambda config=None, progress=False: tiny)
    monkeypatch.setattr(demo, "run_plateau", lambda config=None, progress=False: None)
    os.symlink("/dev/full", tmp_path / "demo.csv")
    code, err = _run_cli(["demo", "--no-progress", "--out", str(tmp_path)], capsys)
    assert code == 1 and err.count("\n") == 1
    assert err == f"twolayer: cannot write demo.csv to {tmp_path}: No space left on device\n"


def test_cli_subprocess_prints_one_line():
    res = subprocess.run([sys.executable, "-m", "twolayer.cli", "demo", "--quick", "--out", "/dev/full"],
                         capture_output=True, text=True, timeout=120)
    # (an editable development install may print its rebuild log first: look at the last line)
    assert res.returncode == 1 and "Traceback" not in res.stderr and "Seed 000" not in res.stdout
    assert res.stderr.strip().splitlines()[-1].startswith("twolayer: cannot write demo.csv and demo.png to /dev/full")


def test_demo_api_checks_its_arguments_first(tmp_path):
    with pytest.raises(TypeError, match="out: expected a directory path"):
        demo.run(out=3)
    with pytest.raises(TypeError, match="progress: expected True or False"):
        demo.run(out=str(tmp_path), progress="no")
    with pytest.raises(TypeError, match=r"config.seeds\[0\]: expected an integer"):
        demo.run(out=str(tmp_path), config=demo.DemoConfig(seeds=(0.5,)))
    with pytest.raises(ValueError, match=r"plateau.d: expected an integer in \[4, 2\*\*31-1\]"):
        demo.run(out=str(tmp_path), plateau=demo.PlateauConfig(d=3))
    with pytest.raises(TypeError, match="config: expected a twolayer.demo.DemoConfig"):
        demo.run_symmetry_breaking(config={"units": 2})
    assert not os.listdir(tmp_path)  # nothing was computed or written


def test_demo_old_name_warns_and_runs_the_renamed_function():
    """run_seed000 (an internal seed number) is now run_symmetry_breaking, after the paper; the old name warns."""
    cfg = demo.DemoConfig(K=2, M=2, d=8, n_steps=10, seeds=(0,), n_records=3)
    with pytest.warns(DeprecationWarning, match="'run_seed000' of twolayer.demo is deprecated; use "
                                                "'run_symmetry_breaking'"):
        old = demo.run_seed000(cfg)
    new = demo.run_symmetry_breaking(cfg)
    assert np.array_equal(old.runs["gaussian"][0].risk, new.runs["gaussian"][0].risk)


def test_writers_name_the_path_they_cannot_write(tmp_path):
    """A full disk or a missing directory gave a raw OSError traceback naming no file (issue 26)."""
    import errno

    result = demo.run_symmetry_breaking(demo.DemoConfig(K=2, M=2, d=8, n_steps=10, seeds=(0,), n_records=3))
    if os.path.exists("/dev/full"):
        with pytest.raises(OSError, match=r"\[Errno 28\] No space left on device: '/dev/full'") as info:
            demo.write_csv(result, "/dev/full")
        assert info.value.errno == errno.ENOSPC
    missing = str(tmp_path / "missing" / "demo.csv")
    with pytest.raises(FileNotFoundError, match=f"No such file or directory: '{missing}'"):
        demo.write_csv(result, missing)
    pytest.importorskip("matplotlib")
    from twolayer import plot

    missing = str(tmp_path / "missing" / "demo.png")
    with pytest.raises(FileNotFoundError, match=f"No such file or directory: '{missing}'"):
        plot.demo_figure(result, missing)


def test_allocating_names_the_argument():
    from twolayer._validation import allocating

    with pytest.raises(MemoryError, match=r"steps: cannot allocate 1\.126e\+15 float64 values \(8\.39e\+06 GiB\)"):
        with allocating("steps", 2**50):
            np.empty(2**50)


def test_random_networks_name_the_sizes_they_cannot_allocate():
    """NumPy's 'Unable to allocate ... for an array with shape (...)' (or 'array is too big') named no argument."""
    big = 2**31 - 1
    with pytest.raises(MemoryError, match=r"K, d: cannot allocate 4\.612e\+18 float64 values"):
        tl.Network.random(big, big, "erf", seed=0)
    with pytest.raises(MemoryError, match=r"K, d: cannot allocate 1\.1e\+12 float64 values \(8\.19e\+03 GiB\)"):
        tl.networks.random_weights(2**20, 2**20, "orthogonal", np.random.default_rng(0))
