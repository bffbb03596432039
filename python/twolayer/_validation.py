"""Argument checks shared by the public API: every error names the argument, what was expected and what was given.

A value of the wrong type raises TypeError; a value of the right type that is out of range raises ValueError.
The rules every public function follows through these helpers:

* integers (counts, sizes, indices): a Python ``int`` or a NumPy integer, never ``bool``, never a float (not
  even ``2.0``) or a string, within the range the C++ core can hold (``int``: up to 2**31-1, ``long long``: up
  to 2**63-1);
* real numbers: ``int``, ``float`` or a NumPy integer/floating scalar (or a 0-d array of one), never ``bool``,
  ``str``, ``bytes`` or complex; finite unless said otherwise;
* flags: ``bool`` or ``numpy.bool_`` only (so ``"False"`` is refused rather than taken as true);
* choices (activation, init, regime, ...): a ``str`` from the listed names;
* arrays: any integer or floating dtype, converted to C-contiguous float64; complex, string, bytes, boolean and
  object arrays of non-numbers are refused, never truncated or parsed;
* seeds: an integer in [0, 2**64-1] (:data:`SEED_MAX`).
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, overload

import numpy as np
from numpy.typing import NDArray

from . import _core

_THREAD_LIMIT: int = int(_core.build_info()["thread_limit"])

INT32_MAX = 2**31 - 1
"""The largest value of a C ``int`` (sizes and counts the core stores as int)."""
INT64_MAX = 2**63 - 1
"""The largest value of a C ``long long`` (step counts)."""
SEED_MAX = 2**64 - 1
"""The largest seed: seeds are unsigned 64-bit integers, 0 <= seed <= 2**64-1."""


def physical_memory() -> int:
    """This machine's physical memory in bytes (0 if unknown), as the core's check_buffer (memory.hpp) sees it."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return 0


def check_memory(n_bytes: int, name: str, what: str) -> None:
    """MemoryError, naming the argument ``name``, unless ``n_bytes`` (for ``what``) fit in physical memory: checked
    before anything is built, so that an impossible size fails at once instead of after minutes of work."""
    mem = physical_memory()
    if mem and n_bytes > mem:
        raise MemoryError(f"{name}: {what} would need {n_bytes / 2**30:.3g} GiB, more than this machine's "
                          f"{mem / 2**30:.3g} GiB of memory")


def describe(x: Any) -> str:
    """A short, always printable rendering of a given value for error messages: its repr (cut to 60
    characters; huge integers by their size) and its type."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        v = int(x)
        return str(v) if v.bit_length() <= 256 else f"{'-' if v < 0 else ''}an integer of {v.bit_length()} bits"
    try:
        text = repr(x)
    except Exception:  # a hostile __repr__ must not hide the real error
        text = "<unprintable>"
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({type(x).__name__})"


def _bound(v: int) -> str:
    """2**31-1 and friends in their readable form."""
    for n in (16, 31, 32, 63, 64):
        if v == 2**n - 1:
            return f"2**{n}-1"
        if v == 2**n:
            return f"2**{n}"
    return str(v)


def as_float_array(x: Any, name: str, ndim: int | None = None, finite: bool = True,
                   scalar_ok: bool = True) -> NDArray[np.float64]:
    """``x`` as a C-contiguous float64 array (at least 1-d: a scalar becomes shape (1,), unless ``scalar_ok`` is
    False: then a scalar raises, e.g. for a vector of K weights), checked for dtype, dimension and finiteness.

    Any integer or floating dtype is accepted (and object arrays whose entries are all real numbers); complex,
    string, bytes, boolean and other object arrays raise TypeError, never a silent truncation or parse."""
    try:
        raw = np.asarray(x)
    except ValueError:  # nested sequences of unequal lengths
        raise ValueError(f"{name}: expected an array of real numbers of a regular shape, got {describe(x)}") from None
    except Exception:
        raise TypeError(f"{name}: expected an array of real numbers, got {describe(x)}") from None
    kind = raw.dtype.kind
    if kind == "O":
        bad = [e for e in raw.flat if isinstance(e, (bool, np.bool_)) or not isinstance(e, numbers.Real)][:1]
        if bad:
            raise TypeError(f"{name}: expected an array of real numbers, got an entry {describe(bad[0])}")
        try:
            raw = raw.astype(np.float64)
        except OverflowError:
            raise ValueError(f"{name}: entries must be finite (an integer is too large for a float)") from None
    elif kind not in "iuf":
        what = {"c": "complex", "U": "string", "S": "bytes", "b": "boolean"}.get(kind, "non-numeric")
        raise TypeError(f"{name}: expected an array of real numbers, got {what} values (dtype {raw.dtype})")
    if raw.ndim == 0 and not scalar_ok:
        raise ValueError(f"{name}: expected a {ndim or 1}-d array, got the scalar {describe(x)}")
    arr = np.ascontiguousarray(raw, dtype=np.float64)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name}: expected a {ndim}-d array, got shape {arr.shape}")
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: entries must be finite (got NaN or inf)")
    return arr


def n_threads_arg(n_threads: Any) -> int:
    """None -> 0 (the OpenMP default, so OMP_NUM_THREADS applies); otherwise a positive integer, capped at the
    core's thread limit (4 threads per processor: more only costs)."""
    if n_threads is None:
        return 0
    if isinstance(n_threads, (bool, np.bool_)) or not isinstance(n_threads, (int, np.integer)) or n_threads < 1:
        raise ValueError(f"n_threads: expected None or a positive integer, got {n_threads!r}")
    return min(int(n_threads), _THREAD_LIMIT)


def positive(x: Any, name: str, allow_zero: bool = False) -> float:
    """``x`` as a finite float > 0 (or >= 0 with ``allow_zero``); types as in :func:`real`."""
    v = real(x, name)
    if v < 0 or (v == 0 and not allow_zero):
        raise ValueError(f"{name}: expected a finite number {'>=' if allow_zero else '>'} 0, got {describe(x)}")
    return v


def integer(x: Any, name: str, lo: int = 0, hi: int | None = INT64_MAX) -> int:
    """``x`` as a Python int in [lo, hi] (``hi=None``: no upper bound).

    Raises
    ------
    TypeError
        ``x`` is not a Python int or NumPy integer (bool, float, str, ... are refused).
    ValueError
        ``x`` is outside [lo, hi].
    """
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name}: expected an integer, got {describe(x)}")
    v = int(x)
    if v < lo or (hi is not None and v > hi):
        expected = f"in [{_bound(lo)}, {_bound(hi)}]" if hi is not None else f">= {_bound(lo)}"
        raise ValueError(f"{name}: expected an integer {expected}, got {describe(v)}")
    return v


def integers(xs: Any, name: str, lo: int = 0, hi: int | None = INT64_MAX) -> list[int]:
    """Every element of the sequence (or 1-d integer array) ``xs`` through :func:`integer`; elements are named
    ``name[i]``."""
    if isinstance(xs, (str, bytes)) or not isinstance(xs, (Iterable, np.ndarray)) or (
        isinstance(xs, np.ndarray) and xs.ndim != 1
    ):
        raise TypeError(f"{name}: expected a sequence of integers, got {describe(xs)}")
    return [integer(x, f"{name}[{i}]", lo, hi) for i, x in enumerate(xs)]


def real(x: Any, name: str, finite: bool = True) -> float:
    """``x`` as a float: ints, floats and NumPy real scalars (or 0-d real arrays); bool, str, bytes and complex
    raise TypeError, and non-finite values (including ints too large for a float) ValueError unless ``finite``
    is False."""
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "iuf":
        x = x[()]
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {describe(x)}")
    try:
        v = float(x)
    except OverflowError:
        raise ValueError(f"{name}: expected a finite real number, got {describe(x)}") from None
    if finite and not math.isfinite(v):
        raise ValueError(f"{name}: expected a finite real number, got {describe(x)}")
    return v


def boolean(x: Any, name: str) -> bool:
    """``x`` as a bool: only ``True``/``False`` (or ``numpy.bool_``); anything else (``"False"``, 0, 1, None)
    raises TypeError."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {describe(x)}")
    return bool(x)


def choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``choices``: TypeError for a non-string, ValueError for an unknown
    name."""
    listed = ", ".join(map(repr, choices))
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {listed}; got {describe(value)}")
    if value not in choices:
        raise ValueError(f"{name}: expected one of {listed}; got {describe(value)}")
    return str(value)


def suggest(name: str, known: list[str] | tuple[str, ...]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``known`` to ``name`` (empty when none is close).

    Parameters
    ----------
    name : str
        The unknown name.
    known : list or tuple of str
        The valid names.

    Returns
    -------
    str

    Examples
    --------
    >>> tl.scan.spec.suggest("lrr", ["lr", "noise"])
    "; did you mean 'lr'?"
    >>> tl.scan.spec.suggest("x", ["lr"])
    ''
    """
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


Device = Literal["cpu", "cuda"]
"""Where a batched computation runs: ``"cpu"`` (OpenMP) or ``"cuda"`` (the optional CUDA backend)."""


def device_arg(device: Any) -> Device:
    """``device``: ``"cpu"`` or ``"cuda"`` (the core raises :class:`twolayer.DeviceUnavailable` for ``"cuda"``
    without a CUDA build or a GPU, naming which is missing)."""
    return choice(device, "device", ("cpu", "cuda"))  # type: ignore[return-value]


def cuda_unavailable() -> str | None:
    """Why ``device="cuda"`` cannot run here (None: it can): a build without the CUDA backend, or no usable GPU (the
    gpu tests and benchmarks skip with this reason)."""
    info = _core.build_info()
    if not info["cuda"]:
        return "twolayer was built without the CUDA backend"
    return None if info.get("cuda_device") else f"no CUDA device: {info.get('cuda_error')}"


@overload
def seed_arg(seed: Any, name: str = ..., allow_none: Literal[False] = ...) -> int: ...
@overload
def seed_arg(seed: Any, name: str = ..., allow_none: bool = ...) -> int | None: ...
def seed_arg(seed: Any, name: str = "seed", allow_none: bool = False) -> int | None:
    """A seed: an integer in [0, 2**64-1] (:data:`SEED_MAX`), or None where ``allow_none`` (fresh entropy)."""
    if seed is None and allow_none:
        return None
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        expected = "None or an integer" if allow_none else "an integer"
        raise TypeError(f"{name}: expected {expected} in [0, 2**64-1], got {describe(seed)}")
    return integer(seed, name, 0, SEED_MAX)


def run_indices(seeds: Any) -> NDArray[np.int64]:
    """Run indices from ``seeds``: an int n gives 0..n-1, a sequence its entries (each in [0, 2^32))."""
    if isinstance(seeds, (int, np.integer)) and not isinstance(seeds, (bool, np.bool_)):
        return np.arange(integer(seeds, "seeds", 1, 2**32 - 1), dtype=np.int64)
    return np.array(integers(seeds, "seeds", 0, 2**32 - 1), dtype=np.int64)


def per_item(
    x: Any, name: str, n: int, allow_zero: bool = False, item: str = "item", hint: str = ""
) -> NDArray[np.float64]:
    """A per-item parameter (per run, per batch member) as a float64 array of shape (n,): a real number (the
    same for every item, checked as by :func:`positive`) or a 1-d array of exactly ``n`` finite numbers, each
    > 0 (>= 0 with ``allow_zero``); a bad entry is named ``name[i]``. ``item`` names what there is one value
    per and ``hint`` is appended to the wrong-length message (e.g. how the number of items is set)."""
    if x is None or isinstance(x, (numbers.Number, np.generic, str, bytes)) or (
        isinstance(x, np.ndarray) and x.ndim == 0
    ):  # a single value (strings and None are refused there as not real numbers)
        return np.full(n, positive(x, name, allow_zero))
    arr = as_float_array(x, name, finite=False)
    if arr.shape != (n,):
        raise ValueError(
            f"{name}: expected a number or a 1-d array of {n} values (one per {item}{hint}), got shape {arr.shape}"
        )
    bad = np.flatnonzero(~np.isfinite(arr) | (arr <= 0 if not allow_zero else arr < 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{name}[{i}]: expected a finite number {'>=' if allow_zero else '>'} 0, got {describe(float(arr[i]))}"
        )
    return arr


@contextmanager
def allocating(name: str, n: float, what: str = "float64 values", itemsize: int = 8) -> Iterator[None]:
    """Re-raise a MemoryError of the block (NumPy's names no argument) as one that names the argument ``name``
    that asked for ``n`` items of ``what``, and their size."""
    try:
        yield
    except (MemoryError, ValueError) as exc:
        # NumPy: MemoryError "Unable to allocate ...", or ValueError "array is too big" beyond the address space
        if isinstance(exc, ValueError) and not str(exc).startswith("array is too big"):
            raise
        raise MemoryError(f"{name}: cannot allocate {n:.4g} {what} ({n * itemsize / 2**30:.3g} GiB): not enough "
                          "memory; expected a smaller value") from None


@contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise an OSError of the block (a full disk, a missing directory, no permission) as one that names the
    ``path`` being written (as its ``filename``; ``errno`` and ``strerror`` kept), e.g. ``[Errno 28] No space left
    on device: 'out/demo.csv'``, however deep in a library the write failed."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None and os.fspath(exc.filename) == os.fspath(path):
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from None
