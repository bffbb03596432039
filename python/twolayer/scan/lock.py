"""One writer per scan store: an exclusive lock held by the process that runs a scan into a store.

The lock is the file ``<store>.lock`` next to the store (``scan.zarr`` -> ``scan.zarr.lock``), held with
``flock(LOCK_EX | LOCK_NB)`` for the whole store phase of :func:`twolayer.scan.run` and removed when it ends
(normally, by an exception or by Ctrl-C). It names its owner as plain JSON: ``{"pid", "host", "started" (UTC,
ISO 8601), "store"}``. A second process gets :class:`StoreLockedError` at once, naming the owner. The workers of an
executor (process pool, Dask) write their groups without the lock: the client holds it for them.

Stale locks: the kernel releases a ``flock`` when its process ends in any way (SIGKILL and a crash included), so a
lock file left behind by a dead process is locked again by the next scan, which takes it over with a warning
naming the previous owner. The lock is checked to be the file at ``<store>.lock`` once held, so removing it on
release cannot let two processes hold two different files.

Limits: ``flock`` excludes processes of one host on a local file system; on NFS (Linux >= 2.6.12) it is an NFS
byte-range lock, held across hosts through the server's lock manager (NFSv4, or NLM for NFSv3), and released by
the server when the lease of a dead client expires (NFSv4: about 90 s; until then the store reads as locked). A
mount with ``nolock`` or ``local_lock=flock|all``, and some cluster file systems (Lustre without ``-o flock``),
make it host-local: two hosts could then both write one store. Where the file system refuses locks (ENOLCK,
EOPNOTSUPP) the lock falls back to creating the file exclusively (``O_CREAT | O_EXCL``); a file left by a dead
process is then recognised only on the same host (its PID no longer alive): one left by another host must be
deleted by hand, as the message says.

>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp, tl.scan.lock.store_lock(f"{tmp}/s.zarr") as path:
...     path.name, sorted(tl.scan.lock.owner(path))
('s.zarr.lock', ['host', 'pid', 'started', 'store'])
"""

from __future__ import annotations

import datetime
import errno
import json
import os
import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["StoreLockedError", "lock_path", "owner", "store_lock"]

# errors of flock on a file system without locks (NFS mounted with nolock and no local_lock, some FUSE ones)
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class StoreLockedError(BlockingIOError):
    """Another process is writing the store (an OSError: the CLI prints its message).

    Parameters
    ----------
    message : str
        The store, the owner's PID, host and start time, and what to do.

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp, tl.scan.lock.store_lock(f"{tmp}/s.zarr"):
    ...     try:
    ...         with tl.scan.lock.store_lock(f"{tmp}/s.zarr"):
    ...             pass
    ...     except tl.scan.StoreLockedError as exc:
    ...         print(f"is being written by process {os.getpid()}" in str(exc))
    True
    """


def lock_path(store: str | Path) -> Path:
    """The lock file of a store: ``<store>.lock``, an absolute path next to it.

    Parameters
    ----------
    store : str or Path
        The store directory.

    Returns
    -------
    Path

    Examples
    --------
    >>> tl.scan.lock.lock_path("/data/scan.zarr/")
    PosixPath('/data/scan.zarr.lock')
    """
    p = Path(os.path.abspath(store))
    return p.with_name(p.name + ".lock")


def owner(path: str | Path) -> dict[str, Any] | None:
    """The owner a lock file names (``pid``, ``host``, ``started``, ``store``), or None when it is missing, empty
    (being written) or not such JSON.

    Parameters
    ----------
    path : str or Path
        The lock file.

    Returns
    -------
    dict or None

    Examples
    --------
    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as tmp, tl.scan.lock.store_lock(f"{tmp}/s.zarr") as path:
    ...     tl.scan.lock.owner(path)["pid"] == os.getpid()
    True
    """
    try:
        with open(path, encoding="utf-8") as f:
            return _parse(f.read())
    except OSError:
        return None


@contextmanager
def store_lock(store: str | Path) -> Iterator[Path]:
    """Hold the writer lock of ``store`` for the ``with`` block; yields the lock file's path.

    Parameters
    ----------
    store : str or Path
        The store directory (need not exist yet).

    Returns
    -------
    context manager
        Yields the lock file's path (:func:`lock_path`); the lock is released (and the file removed) on leaving.

    Raises
    ------
    StoreLockedError
        Another live process holds it; the message names the store, the owner's PID, host and start time, and
        what to do.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with tl.scan.lock.store_lock(f"{tmp}/s.zarr") as path:
    ...         held = path.exists()
    ...     held, path.exists()
    (True, False)
    """
    path = lock_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path, str(store))
    try:
        yield path
    finally:
        _release(fd, path)


def _acquire(path: Path, store: str) -> int:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return _acquire_exclusive(path, store)
    while True:
        opened = _open(path)
        if opened is None:  # removed between our two tries to open it: again
            continue
        fd, created = opened
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked, here = True, _is_file_at(fd, path)
        except BlockingIOError:
            text = _read(fd)
            os.close(fd)
            raise StoreLockedError(_busy(store, path, text)) from None
        except OSError as exc:
            if exc.errno not in _NO_LOCKS:
                os.close(fd)
                raise
            locked = here = False
        except BaseException:
            os.close(fd)
            raise
        if not locked:  # a file system without locks: the lock is the file's existence
            if created:
                return _claim(fd, path, store)
            os.close(fd)
            return _acquire_exclusive(path, store)
        if not here:  # its holder released and removed it after we opened it: again, on the new file
            os.close(fd)
            continue
        try:
            previous = _parse(_read(fd))
            if previous is not None:  # flock is released by the kernel when its process ends: it ended
                _warn_stale(store, path, previous, stacklevel=6)
            _write(fd, store)
        except BaseException:
            _release(fd, path)
            raise
        return fd


def _acquire_exclusive(path: Path, store: str) -> int:
    """The fallback on a file system without locks: the lock is the file's existence."""
    for _ in range(3):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
        except FileExistsError:
            previous = owner(path)
            if previous is not None and previous.get("host") == socket.gethostname() \
                    and not _alive(previous.get("pid")):
                _warn_stale(store, path, previous, stacklevel=7)
                path.unlink(missing_ok=True)
                continue
            raise StoreLockedError(_busy(store, path, json.dumps(previous) if previous else "") +
                                   f" (this file system has no locks: if that process is gone, delete {path})") \
                from None
        return _claim(fd, path, store)
    raise StoreLockedError(_busy(store, path, ""))


def _open(path: Path) -> tuple[int, bool] | None:
    """The lock file opened for reading and writing, and whether this call created it (None: it was removed
    between the two tries)."""
    flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644), True
    except FileExistsError:
        try:
            return os.open(path, flags), False
        except FileNotFoundError:
            return None


def _claim(fd: int, path: Path, store: str) -> int:
    """Writes this process as the owner of the lock file created exclusively as ``fd``."""
    try:
        _write(fd, store)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    return fd


def _release(fd: int, path: Path) -> None:
    try:
        if _is_file_at(fd, path):  # ours (not one that replaced it after it was deleted by hand)
            path.unlink(missing_ok=True)
    finally:
        os.close(fd)  # releases the flock


def _is_file_at(fd: int, path: Path) -> bool:
    try:
        here = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (here.st_dev, here.st_ino)


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 1 << 16).decode("utf-8", "replace")


def _write(fd: int, store: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    text = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": now,
                       "store": os.path.abspath(store)})
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, text.encode("utf-8"))
    os.fsync(fd)


def _parse(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _alive(pid: Any) -> bool:
    """Whether a process of this host has the id ``pid`` (True when it cannot be told)."""
    if not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. EPERM: it exists, owned by another user
        return True
    return True


def _describe(data: dict[str, Any] | None) -> str:
    if data is None:
        return "another process (it has not written its name into the lock yet)"
    return f"process {data.get('pid')} on host {data.get('host')}, started {data.get('started')}"


def _busy(store: str, path: Path, text: str) -> str:
    return (f"store: {store} is being written by {_describe(_parse(text))} (lock {path}); two writers would "
            "corrupt it: wait for that scan to finish or stop it, then run again with --resume (resume=True) to "
            "complete the store")


def _warn_stale(store: str, path: Path, previous: dict[str, Any], stacklevel: int) -> None:
    """Warns that the lock of a dead process is taken over (``stacklevel``: the caller of :func:`twolayer.scan.run`)."""
    warnings.warn(f"store: taking over the lock {path} of {store} left by {_describe(previous)}, which ended "
                  "without releasing it (killed?); its unfinished groups are computed again", stacklevel=stacklevel)
