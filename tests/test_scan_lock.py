"""One writer per scan store (issue 27): a second process is refused at once with a message naming the owner, a
lock left by a killed process is taken over with a warning, and the lock is released on Ctrl-C and on errors."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import twolayer as tl
from twolayer.scan.lock import StoreLockedError, lock_path, owner, store_lock

pytest.importorskip("zarr")
pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX processes and signals")

# groups of one configuration, each an Euler run of minutes: a scan that is still writing its store
SLOW = {"engine": "ode", "group_size": 1, "constants": {"M": 1, "d": 10, "t_max": 1e7, "n_records": 3,
                                                        "method": "euler", "dt": 1e-3, "lr": 0.5},
        "axes": {"K": [1, 2]}}
FAST = tl.scan.Scan("ode", constants={"M": 1, "d": 10, "t_max": 1.0, "n_records": 3, "lr": 0.5}, axes={"K": [1, 2]})


def _start(code: str) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)


def _wait_for_owner(proc: subprocess.Popen[str], path: Path, timeout: float = 60.0) -> dict[str, Any]:
    """The owner the lock file names, once the process has written it."""
    deadline = time.perf_counter() + timeout
    while (data := owner(path)) is None or data["pid"] != proc.pid:
        assert proc.poll() is None, proc.communicate()
        assert time.perf_counter() < deadline, "the lock was never taken"
        time.sleep(0.02)
    return data


def _kill(proc: subprocess.Popen[str], sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, sig)
    proc.communicate(timeout=30)


def test_lock_file_is_plain_json_and_removed(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    with store_lock(store) as path:
        assert path == tmp_path / "s.zarr.lock"
        data = json.loads(path.read_text())
        assert data["pid"] == os.getpid() and data["host"] == socket.gethostname()
        assert data["store"] == str(store)
        assert time.strptime(data["started"][:19], "%Y-%m-%dT%H:%M:%S")
        with pytest.raises(StoreLockedError, match="being written by process"):  # one holder in one process too
            with store_lock(store):
                pass
    assert not path.exists()
    with store_lock(store):  # free again
        pass


def test_second_process_is_refused_promptly(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    proc = _start(f"import twolayer as tl; tl.scan.run({SLOW!r}, {str(store)!r}, load_result=False)")
    try:
        first = _wait_for_owner(proc, lock_path(store))
        start = time.perf_counter()
        with pytest.raises(StoreLockedError) as info:
            tl.scan.run(SLOW, store, resume=True, load_result=False)
        elapsed = time.perf_counter() - start
        message = str(info.value)
        assert isinstance(info.value, OSError)  # the CLI prints it as one line
        assert str(store) in message and f"process {proc.pid} on host {socket.gethostname()}" in message
        assert first["started"] in message and "--resume" in message
        # promptly: refused at once, not after waiting for the lock (the first writer runs for hours: 1e10 Euler
        # steps); a generous bound, since a loaded machine takes seconds to import and open a store
        assert elapsed < 30.0, elapsed
        assert proc.poll() is None  # the first writer goes on
    finally:
        _kill(proc)


def test_lock_of_a_killed_process_is_taken_over(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    proc = _start("import time\nfrom twolayer.scan.lock import store_lock\n"
                  f"with store_lock({str(store)!r}):\n    time.sleep(600)\n")
    try:
        _wait_for_owner(proc, lock_path(store))
        with pytest.raises(StoreLockedError):
            tl.scan.run(FAST, store, load_result=False)
    finally:
        _kill(proc)  # SIGKILL: the lock file stays, its flock goes with the process
    assert owner(lock_path(store))["pid"] == proc.pid
    with pytest.warns(UserWarning, match=rf"taking over the lock .* left by process {proc.pid} on host"):
        ds = tl.scan.run(FAST, store)
    assert ds.risk.equals(tl.scan.run(FAST).risk)
    assert not lock_path(store).exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # released properly: no warning the next time
        with store_lock(store):
            pass


def test_lock_is_released_on_ctrl_c(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            tl.scan.run(SLOW, store, load_result=False)
    finally:
        timer.cancel()
        timer.join()
    assert not lock_path(store).exists()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = tl.scan.run(FAST, tmp_path / "other.zarr", load_result=False)  # nothing left held
        with store_lock(store):
            pass
    assert summary.computed == summary.groups == 2


def test_lock_is_released_on_error(tmp_path: Path) -> None:
    store = tmp_path / "s.zarr"
    tl.scan.run(FAST, store, load_result=False)
    other = tl.scan.Scan("ode", constants={"M": 1, "d": 10, "t_max": 2.0, "n_records": 3, "lr": 0.5},
                         axes={"K": [1, 2]})
    with pytest.raises(ValueError, match="different scan definition"):
        tl.scan.run(other, store, resume=True)
    assert not lock_path(store).exists()


def test_cli_names_the_owner(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('engine = "ode"\n[constants]\nM = 1\nd = 10\nt_max = 1.0\nn_points = 3\nlr = 0.5\n'
                   '[axes]\nK = [1, 2]\n')
    store = tmp_path / "c.zarr"
    with store_lock(store):
        res = subprocess.run([sys.executable, "-m", "twolayer.cli", "scan", str(cfg), "--resume", "--no-progress"],
                             capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    last = res.stderr.splitlines()[-1]  # (after an editable install's rebuild messages)
    assert last.startswith(f"twolayer: store: {store} is being written by process {os.getpid()} on host"), last
    assert not store.exists()  # refused before touching the store


def test_file_system_without_locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    store = tmp_path / "s.zarr"
    path = lock_path(store)
    with store_lock(store):  # the file's existence is the lock
        assert owner(path)["pid"] == os.getpid()
        with pytest.raises(StoreLockedError, match=rf"being written by process {os.getpid()} .* no locks: if that "
                                                   rf"process is gone, delete {path}"):
            with store_lock(store):
                pass
    assert not path.exists()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "x", "store": "s"}))
    with pytest.warns(UserWarning, match=f"left by process {dead.pid} on host"):  # this host, no longer alive
        with store_lock(store):
            assert owner(path)["pid"] == os.getpid()
    path.write_text(json.dumps({"pid": dead.pid, "host": "elsewhere", "started": "x", "store": "s"}))
    with pytest.raises(StoreLockedError, match="on host elsewhere"):  # cannot be told from here: refused
        with store_lock(store):
            pass
