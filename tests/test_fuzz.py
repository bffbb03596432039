"""Property-based fuzzing of every public entry point against the input contract (DESIGN.md §5, §6).

The contract: a call either returns a result in which every float is finite and shapes are right (a
Trajectory also has a status in STATUSES), or it raises TypeError, ValueError, MemoryError or
NotImplementedError (the documented error of kernel pairs without a closed form). A call with an invalid
argument (NaN/inf, complex, strings where numbers are expected, a non-PSD covariance, a wrong ndim, an unknown
activation or option name, a bad count or flag) must raise. Anything else fails: another exception, a warning
(e.g. a ComplexWarning from silent truncation), an invalid argument accepted, a non-finite output, a crash.

Entry points (the ENTRY_POINTS table below, one row each):
    twolayer.build_info, Network, Network.random, Network.__call__, Network.with_weights, Overlaps,
    Overlaps.from_networks; activations.check_activation, sigma, derivative;
    kernels.i2, i3, j2, i4, covariance; networks.random_weights, teacher_student;
    population.risk, gradient, hessian, descend; ode.rhs, integrate, integrate_batch, plateau_overlaps,
    plateau_example; sgd.simulate (Trajectory and Ensemble results, incl. mean/std/sem, to_xarray);
    landscape.refine (CriticalPoint), classify, spectrum, isotropy (Isotropy), FixedPointSpace (and its
    matrix, coordinates, containing), SubspaceProblem (risk, gradient, hessian, solve, critical_point),
    continue_family, continue_real_k, reduced_risk, identity_teacher, multistart (MultistartResult),
    random_starts, numpy_relu_loss_grad, alignment_determinants, procrustes, procrustes_distance,
    step_gradient_flow, alignment_flow (WeightPath), canonical, canonical_weights, orbit_tangents,
    split_spectrum, homogeneity_degree, compress_point, decompress_point, to_json, from_json, to_dataframe,
    to_xarray; cli.main.
    Added with issue 26: targets (hermite, staircase, hermite_single, function, committee, is_target, the
    HermiteTarget methods); sde.increment_covariance, simulate; theory (every function; times must not be
    negative); passage.first_passage_time, run_passage, first_passage; schedules (Schedule built directly and
    every factory, as_schedule; the schedule must evaluate to finite multipliers >= 0); large_batch.layerwise,
    iterate, ridge_readout, simulate_layerwise; scan.load, read_toml (TOML text), make_groups, run (in memory),
    initial_overlaps, initial_networks, engine_for; landscape.from_json[untrusted] (valid documents with one value
    replaced anywhere, and hostile ones: deep nesting, a bare value, a point that would expand to 1.6e9 entries).
    Defects found in modules outside that issue's scope are listed in KNOWN_DEFECTS (non-strict xfail; empty now:
    each has its fix and a case in tests/test_fuzz_regressions.py).
    (demo.* and plot.* run for seconds per call: they are reached through cli.main's argument handling only.)

How it runs: each case draws small dimensions, then every argument from its kind's strategy (one strategy per
argument kind: reals, counts, thread counts, flags, option names, activations, arrays, covariances, networks,
overlaps, times), with at most one argument drawn from the kind's *invalid* values. The hypothesis tests run
in child processes (``python tests/test_fuzz.py ENTRY...``, two shards in parallel) that print every case
before running it, so a segfault or abort is reported with its signal and the last case, and the remaining
entry points are run in a fresh child. ``FUZZ_EXAMPLES`` scales the number of examples (default 40 per entry).
Elementwise activations (sigma, derivative) are fed finite inputs up to 1e100 only: NaN in -> NaN out and
quadratic(1e200) = inf are IEEE semantics there, not contract breaches.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np
import pytest
import twolayer as tl
from twolayer import cli
from twolayer.landscape import FixedPointSpace, SubspaceProblem

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

ALLOWED_ERRORS = (TypeError, ValueError, MemoryError, NotImplementedError)
STATUSES = {"completed", "converged", "diverged", "max_steps", "interrupted"}
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
MARK = "@@fuzz"


# ----------------------------------------------------------------------------------------------- argument kinds
class Kind(NamedTuple):
    """The values of one argument: ``good`` ones (results must satisfy the contract, or an allowed error)
    and ``bad`` ones (the call must raise). OMIT leaves the argument at its default."""

    good: Any
    bad: Any = None


class _Omit:
    def __repr__(self) -> str:
        return "<default>"


OMIT = _Omit()
NAN, INF = float("nan"), float("inf")
MAGNITUDES = [1.0, 1e-300, 1e-160, 1e-20, 1e20, 1e160, 1e300]
NOT_NUMBERS = ["0.5", "abc", 1 + 1j, [0.5], b"1"]
BAD_COUNTS_ALWAYS = [-1, 1.5, 2.0, "2", 2**64, 2**70, NAN]


def _sampled(values: list[Any]) -> Any:
    return st.sampled_from(values)


def real(lo: float = 0.0, hi: float = 2.0, zero_ok: bool = False, optional: bool = False,
         extreme: tuple[float, ...] = (1e-300, 1e300), signed: bool = False) -> Kind:
    """A real scalar in (0, inf) (or [0, inf), or any sign): small draws, the extreme magnitudes, numpy
    scalars."""
    good = st.floats(lo, hi).filter(lambda v: zero_ok or v > 0) | _sampled(list(extreme))
    if signed:
        good = good | good.map(lambda v: -v)
    good = good | good.map(np.float64) | st.integers(1, 3)
    if zero_ok:
        good = good | st.just(0.0)
    if optional:
        good = good | st.just(None)
    bad = [NAN, INF, -INF, *NOT_NUMBERS] + ([] if signed else [-1.0, -1e-300]) + ([] if zero_ok or signed else [0.0])
    bad += [] if optional else [None]
    return Kind(good, _sampled(bad))


def count(lo: int, hi: int, huge: bool = True, optional: bool = False, python_only: bool = False) -> Kind:
    """An integer count in [lo, hi]; invalid: below lo, floats, strings, numbers no int64 holds (unless the
    count only bounds a Python loop: ``python_only``), and 2**40 for sizes (``huge``: must fail to allocate
    rather than crash)."""
    good = st.integers(lo, hi) | st.integers(lo, hi).map(np.int64)
    if optional:
        good = good | st.just(None)
    always = [v for v in BAD_COUNTS_ALWAYS if not (python_only and isinstance(v, int))]
    bad = [lo - 1, *always] + ([2**40] if huge else []) + ([] if optional else [None])
    return Kind(good, _sampled(bad))


def seed_kind(optional: bool = False, bits: int | None = None) -> Kind:
    """A seed: non-negative ints (below 2**bits for seeds the core takes; numpy's seeds have no bound)."""
    good = st.integers(0, 2**63) | st.just(2**64 - 1)
    good = good | st.none() if optional else good
    return Kind(good, _sampled([-1, 1.5, "1", NAN, [1.5]] + ([2**bits, 2**70] if bits else [])))


N_THREADS = Kind(_sampled([None, 1, 2, np.int64(2), 10**5, 2**31 - 1, 2**40]),
                 _sampled([0, -1, 1.5, 2.0, "2", NAN]))
FLAG = Kind(_sampled([True, False, np.True_, np.False_, 0, 1]), _sampled(["False", "True", "no", "", [False]]))
ACTIVATION = Kind(_sampled(list(tl.activations.CLOSED_FORM)),
                  _sampled(["swish", "ReLU", "", " relu", "relu\0", None, 1, b"relu", ["relu"]]))


def activation(*names: str) -> Kind:
    return Kind(_sampled(list(names)), ACTIVATION.bad) if names else ACTIVATION


def choice(*options: str, optional: bool = True) -> Kind:
    """An option name (method, regime, init, scaling, readout)."""
    good = _sampled(list(options)) | (st.just(OMIT) if optional else st.nothing())
    bad = ["", options[0].upper(), options[0] + " ", "nonsense", None, 1, options[0].encode(), [options[0]]]
    return Kind(good, _sampled(bad))


def _float_array(shape: Any, mags: list[float] = MAGNITUDES) -> Any:
    return st.builds(lambda a, m: a * m, hnp.arrays(np.float64, shape, elements=st.floats(-2, 2)),
                     _sampled(mags))


def _good_layout(a: np.ndarray, how: str) -> Any:
    """The same numbers in another valid container: dtype, memory layout, list."""
    with np.errstate(all="ignore"):
        if how == "float32" and np.all(np.isfinite(a.astype(np.float32))):
            return a.astype(np.float32)
        if how == "int" and np.all(np.abs(a) < 1e15):
            return np.round(a).astype(np.int64)
        if how == "bool":
            return a != 0
        if how == "fortran":
            return np.asfortranarray(a)
        if how == "strided" and a.ndim:
            return np.repeat(a, 2, axis=-1)[..., ::2]
        if how == "list":
            return a.tolist()
    return a


def _bad_layout(a: np.ndarray, how: str) -> Any:
    """The numbers made invalid: non-finite entries, complex, strings, one axis too many or a column too few."""
    if how in ("nan", "inf", "-inf"):
        b = a.astype(np.float64, copy=True)
        b.flat[0] = float(how)
        return b
    return {"complex": lambda: a + 1j, "str": lambda: a.astype(str), "object": lambda: a.astype(str).astype(object),
            "axis+1": lambda: a[..., None], "col-1": lambda: a[..., :-1], "none": lambda: None,
            "text": lambda: "abc", "ragged": lambda: [[1.0], [1.0, 2.0]], "scalar": lambda: 1.0}[how]()


GOOD_LAYOUTS = ["float64"] * 4 + ["float32", "int", "bool", "fortran", "strided", "list"]
BAD_LAYOUTS = ["nan", "inf", "-inf", "complex", "str", "object", "axis+1", "none", "text", "ragged"]


def array(shape: Any, mags: list[float] = MAGNITUDES, strict: bool = True, scalar_ok: bool = False,
          finite_only: bool = True, optional: bool = False, any_ndim: bool = False, none_ok: bool = False) -> Kind:
    """A float array of ``shape`` (a tuple or a strategy of tuples). ``strict``: a column too few is invalid
    (the shape is tied to other arguments); ``any_ndim``: every shape is valid (elementwise functions), so an
    extra axis is not invalid."""
    shapes = shape if isinstance(shape, st.SearchStrategy) else st.just(shape)
    base = shapes.flatmap(lambda s: _float_array(s, mags))
    good = st.builds(_good_layout, base, _sampled(GOOD_LAYOUTS))
    if optional:
        good = good | st.just(OMIT)
    if none_ok:  # None is the argument's default (e.g. "keep the current a")
        good = good | st.just(None)
    bad_how = [h for h in BAD_LAYOUTS if (finite_only or h not in ("nan", "inf", "-inf"))
               and not (any_ndim and h == "axis+1") and not (none_ok and h == "none")]
    bad_how += ["col-1"] if strict else []
    bad_how += [] if scalar_ok else ["scalar"]
    nonempty = shapes.filter(lambda s: math.prod(s) > 0 and (len(s) == 0 or s[-1] > 0))
    bad = st.builds(_bad_layout, nonempty.flatmap(lambda s: _float_array(s, mags)), _sampled(bad_how))
    if not strict:  # a column too few only matters when the shape is tied to something else
        bad = bad.filter(lambda v: not (isinstance(v, np.ndarray) and v.ndim == 0))
    return Kind(good, bad)


def _psd(n: int, batch: tuple[int, ...], rank: int) -> Any:
    return st.builds(lambda A, m: A @ np.swapaxes(A, -1, -2) * m,
                     hnp.arrays(np.float64, (*batch, n, rank), elements=st.floats(-2, 2)), _sampled(MAGNITUDES))


def _bad_cov(C: np.ndarray, how: str) -> Any:
    C = C.copy()
    big = max(float(np.max(np.abs(C))), 1e-300) if C.size else 1.0
    if how == "non-psd":
        C[..., 0, 0] = -big
    elif how == "asymmetric":
        C[..., 0, 1] += big
    elif how == "pad":
        C = np.pad(C, [(0, 0)] * (C.ndim - 2) + [(0, 1), (0, 1)]) + np.eye(C.shape[-1] + 1) * big
    else:
        return _bad_layout(C, how)
    return C


def covariance(n: int, batched: bool = True, symmetric_only: bool = False, asymmetric: bool = True) -> Kind:
    """Covariances C (..., n, n): PSD (possibly singular or zero), any magnitude, batched; invalid: non-PSD,
    asymmetric, (n+1) x (n+1), non-finite, complex, strings, wrong ndim. ``symmetric_only``: any symmetric
    matrix is valid (non-PSD ones too; non-square ones are not)."""
    batches = st.lists(st.integers(0, 3), max_size=2).map(tuple) if batched else st.just(())
    base = st.tuples(batches, st.integers(1, n)).flatmap(lambda br: _psd(n, br[0], br[1]))
    if symmetric_only:
        base = base | base.map(lambda C: C - 2 * np.diag(np.diag(C)))
    good = st.builds(_good_layout, base, _sampled(GOOD_LAYOUTS)) | _sampled([np.zeros((n, n)), np.eye(n)])
    nonempty = st.tuples(st.lists(st.integers(1, 3), max_size=2).map(tuple) if batched else st.just(()),
                         st.integers(1, n))
    hows = ["nan", "inf", "complex", "str", "object", "axis+1", "none", "text"]
    hows += ["col-1"] if symmetric_only else ["non-psd", "non-psd", "pad"]
    hows += ["asymmetric"] * 2 if n > 1 and asymmetric else []
    bad = st.builds(_bad_cov, nonempty.flatmap(lambda br: _psd(n, br[0], br[1])), _sampled(hows))
    return Kind(good, bad)


def _network(K: int, d: int, act: Any, scaling: str, readout: Any = None) -> Any:
    return st.builds(tl.Network, _float_array((K, d)), _float_array((K,), [1.0, 1e-300, 1e300]), act,
                     st.just(scaling), st.just("sum") if readout is None else readout)


def _spoil(net: tl.Network, how: str) -> Any:
    """A network whose (mutable) arrays were made invalid after construction, or no network at all."""
    if how in ("nan", "inf"):
        net.W.flat[0] = float(how)
    elif how == "a-nan":
        net.a[0] = NAN
    else:
        return {"none": None, "array": np.asarray(net.W), "text": "network"}[how]
    return net


def network(K: int, d: int, scaling: str, acts: Any = ACTIVATION.good, other_d: bool | None = True) -> Kind:
    """Networks of K units on d inputs (weights of any magnitude); invalid: NaN/inf weights put in after
    construction, not a Network (unless ``other_d`` is None: the receiver of a method call), another input
    dimension or scaling (``other_d``: the partner of a pair)."""
    good = _network(K, d, acts, scaling, _sampled(["sum", "mean"]))
    spoil = ["nan", "inf", "a-nan"] + (["none", "array", "text"] if other_d is not None else [])
    bad = st.builds(_spoil, _network(K, d, acts, scaling), _sampled(spoil))
    if other_d:
        other = "none" if scaling == "sqrt_d" else "sqrt_d"
        bad = bad | _network(K, d + 1, acts, scaling) | _network(K, d, acts, other)
    return Kind(good, bad)


def _overlaps(K: int, M: int, spherical_prob: bool = True) -> Any:
    def build(A: np.ndarray, m: float, a: np.ndarray, v: np.ndarray, sph: bool) -> tl.Overlaps:
        O = A @ A.T * m
        if sph:  # unit diagonal of Q for spherical runs
            s = np.sqrt(np.where(np.diag(O)[:K] > 0, np.diag(O)[:K], 1.0))
            D = np.concatenate([1 / s, np.ones(M)])
            O = O * D[:, None] * D[None, :]
            np.fill_diagonal(O[:K, :K], 1.0)
        try:
            return tl.Overlaps(O[:K, :K], O[:K, K:], O[K:, K:], a, v)
        except ValueError:
            hypothesis.reject()
            raise
    A = hnp.arrays(np.float64, (K + M, K + M), elements=st.floats(-2, 2))
    return st.builds(build, A, _sampled(MAGNITUDES), _float_array((K,), [1.0, 1e-300, 1e300]),
                     _float_array((M,), [1.0]), st.booleans() if spherical_prob else st.just(False))


def _spoil_overlaps(ov: tl.Overlaps, how: str) -> Any:
    if how == "nan":
        ov.Q[0, 0] = NAN
    elif how == "non-psd":
        ov.Q[0, 0] = -1.0 - abs(ov.Q[0, 0])
    elif how == "asymmetric" and ov.K > 1:
        ov.Q[0, 1] += 1.0 + abs(ov.Q).max()
    elif how == "v-inf":
        ov.v[0] = INF
    else:
        return {"none": None, "dict": {"Q": ov.Q}, "asymmetric": None}[how]
    return ov


def overlaps(K: int, M: int) -> Kind:
    """Order parameters of any magnitude (half of them with diag Q = 1, for spherical runs); invalid: NaN,
    non-PSD or asymmetric Q put in after construction, infinite v, not an Overlaps."""
    bad = st.builds(_spoil_overlaps, _overlaps(K, M), _sampled(["nan", "non-psd", "asymmetric", "v-inf", "none",
                                                                "dict"]))
    return Kind(_overlaps(K, M), bad)


def times(hi: float = 2.0, strictly: bool = False) -> Kind:
    """Output times: sorted non-negative small times (or t_max instead); invalid: decreasing, negative,
    non-finite, 2-d, empty, strings. Huge times ([0, 1e30]) are valid and must fail cleanly or finish."""
    ts = st.lists(st.floats(0, hi), min_size=1, max_size=4, unique=strictly).map(lambda v: np.array(sorted(v)))
    good = ts | st.just(np.array([0.0, 1e30])) | st.just(OMIT)
    bad = _sampled([np.array([1.0, 0.5]), np.array([-1.0, 1.0]), np.array([0.0, NAN]), np.array([0.0, INF]),
                    np.zeros((2, 2)), np.array([]), ["0", "1"], np.array([0.0, 1.0]) + 1j, "abc"])
    return Kind(good, bad)


# ------------------------------------------------------------------------------------------------ the contract
class Violation(AssertionError):
    """A breach of the contract (raised inside the hypothesis test, so that it shrinks the case)."""


def _short(x: Any) -> str:
    """A one-line repr, cut at 300 characters."""
    r = " ".join(repr(x).split())
    return r if len(r) < 300 else r[:300] + "..."


def check_finite(x: Any, where: str = "result", depth: int = 0) -> None:
    """Every float reachable from ``x`` (arrays, containers, dataclass fields except ``meta``) is finite."""
    if depth > 6 or x is None or isinstance(x, (bool, int, str, bytes, np.bool_, np.integer, type)):
        return
    if isinstance(x, (float, np.floating)):
        if not math.isfinite(float(x)):
            raise Violation(f"{where} = {x!r} is not finite")
    elif isinstance(x, (complex, np.complexfloating)):
        raise Violation(f"{where} is complex: {x!r}")
    elif isinstance(x, np.ndarray):
        if x.dtype.kind in "fc" and not np.all(np.isfinite(x)):
            raise Violation(f"{where} has non-finite entries: {_short(x)}")
        if x.dtype.kind == "O":
            for i, v in enumerate(x.flat):
                check_finite(v, f"{where}.flat[{i}]", depth + 1)
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            check_finite(v, f"{where}[{i}]", depth + 1)
    elif isinstance(x, dict):
        for k, v in x.items():
            check_finite(v, f"{where}[{k!r}]", depth + 1)
    elif isinstance(x, tl.BatchTrajectory):  # NaN fills rows after a stop and pads mixed K: checked per member
        for b, tr in enumerate(x):
            check_finite(tr, f"{where}[{b}]", depth + 1)
    elif dataclasses.is_dataclass(x):
        for f in dataclasses.fields(x):
            # meta: free-form; params: NaN marks a threshold that is off; stop_time: NaN when there was no stop
            # (check_trajectory holds it to that)
            if f.name not in ("meta", "params", "stop_time"):
                check_finite(getattr(x, f.name), f"{where}.{f.name}", depth + 1)


def check_trajectory(tr: tl.Trajectory, K: int | None = None, where: str = "result") -> None:
    if tr.status not in STATUSES:
        raise Violation(f"{where}.status = {tr.status!r} is not one of {sorted(STATUSES)}")
    T = tr.t.shape[0]
    k = tr.Q.shape[1] if tr.Q.ndim == 3 else -1
    shapes = {"Q": (T, k, k), "M": (T, k, tr.M.shape[-1]), "a": (T, k), "risk": (T,)}
    for name, shape in shapes.items():
        if getattr(tr, name).shape != shape or (K is not None and k != K):
            raise Violation(f"{where}.{name} has shape {getattr(tr, name).shape}, expected {shape} (K={K})")
    if T and np.any(np.diff(tr.t) < 0):
        raise Violation(f"{where}.t is not non-decreasing: {tr.t}")
    if math.isnan(tr.stop_time) != (tr.status == "completed"):
        raise Violation(f"{where}.stop_time = {tr.stop_time!r} with status {tr.status!r} (NaN iff completed)")
    tr.to_xarray()


def check_result(x: Any, where: str = "result") -> None:
    """The generic contract: finite floats, valid trajectories, result objects whose repr and summaries work."""
    check_finite(x, where)
    repr(x)
    if isinstance(x, tl.Trajectory):
        check_trajectory(x, where=where)
    elif isinstance(x, tl.sgd.Ensemble):
        for j, tr in enumerate(x.runs):
            check_trajectory(tr, where=f"{where}.runs[{j}]")
        if x.completed:
            for stat in ("mean", "std", "sem"):
                tr = getattr(x, stat)()
                check_finite(tr, f"{where}.{stat}()")
                check_trajectory(tr, where=f"{where}.{stat}()")
            x.to_xarray()
    elif isinstance(x, tl.BatchTrajectory):
        for b, tr in enumerate(x):
            check_trajectory(tr, where=f"{where}[{b}]")
        x.to_xarray()
    elif isinstance(x, tl.landscape.MultistartResult):
        x.table()
    elif isinstance(x, tl.landscape.CriticalPoint):
        check_finite(x.spectrum(), f"{where}.spectrum()")
    elif isinstance(x, tl.landscape.Isotropy):
        if not isinstance(x.order, int) or x.order < 1:
            raise Violation(f"{where}.order = {x.order!r} is not a positive int")
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            if isinstance(v, (tl.Trajectory, tl.landscape.CriticalPoint)):
                check_result(v, f"{where}[{i}]")


def assert_bool(x: Any) -> None:
    assert isinstance(x, bool), f"expected a bool, got {type(x).__name__}"


def expect_shape(x: Any, shape: tuple[int, ...], where: str = "result") -> None:
    if np.shape(x) != shape:
        raise Violation(f"{where} has shape {np.shape(x)}, expected {shape}")


def run_case(entry: Entry, values: dict[str, Any], invalid: str | None) -> None:
    """Call the entry point on one case and enforce the contract."""
    kwargs = {k: v for k, v in values.items() if v is not OMIT}
    print(f"{MARK} CASE {entry.name}({', '.join(f'{k}={_short(v)}' for k, v in kwargs.items())})"
          f"{f' [invalid: {invalid}]' if invalid else ''}", flush=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = entry.fn(**kwargs)
        except ALLOWED_ERRORS as exc:
            if "incompatible function arguments" in str(exc):
                raise Violation(f"{type(exc).__name__} from the binding layer, argument not validated in "
                                f"Python: {str(exc).splitlines()[0]}") from None
            return
    if caught:
        w = caught[0]
        raise Violation(f"{w.category.__name__} escaped: {w.message} ({os.path.basename(w.filename)}:{w.lineno})")
    if invalid is not None:
        raise Violation(f"invalid {invalid}={_short(values[invalid])} accepted, returned {_short(result)}")
    check_result(result)
    if entry.check is not None:
        entry.check(values, result)


# -------------------------------------------------------------------------------------- entry points and cases
class Entry(NamedTuple):
    name: str
    fn: Any
    kinds: Any  # dims -> {argument: Kind}
    dims: Any = st.fixed_dictionaries({})
    check: Any = None
    examples: int = EXAMPLES


def cases(entry: Entry) -> Any:
    """A case: dims, then every argument from its Kind; at most one (``invalid``) from the invalid values."""

    kinds_for = functools.lru_cache(maxsize=None)(lambda dims: entry.kinds(dict(dims)))  # build strategies once

    @st.composite
    def draw_case(draw: Any) -> tuple[dict[str, Any], str | None]:
        kinds = kinds_for(tuple(sorted(draw(entry.dims).items())))
        names = [n for n, k in kinds.items() if k.bad is not None]
        invalid = draw(st.none() | st.sampled_from(names)) if names else None
        return {n: draw(k.bad if n == invalid else k.good) for n, k in kinds.items()}, invalid

    return draw_case()


SMALL = st.fixed_dictionaries({"K": st.integers(1, 3), "M": st.integers(1, 3), "d": st.integers(1, 5),
                               "scaling": st.sampled_from(["sqrt_d", "none"])})
UP_TO_8 = st.fixed_dictionaries({"K": st.integers(1, 8), "M": st.integers(1, 4), "d": st.integers(1, 8),
                                 "scaling": st.sampled_from(["sqrt_d", "none"])})


def pair(D: dict[str, Any], acts: Any = ACTIVATION.good) -> dict[str, Kind]:
    return {"student": network(D["K"], D["d"], D["scaling"], acts, other_d=False),
            "teacher": network(D["M"], D["d"], D["scaling"], acts)}


def kernel_check(values: dict[str, Any], out: Any) -> None:
    expect_shape(out, np.shape(values["C"])[:-2])


def ode_kinds(D: dict[str, Any], batch: bool = False) -> dict[str, Kind]:
    K, M = D["K"], D["M"]
    ov = overlaps(K, M)
    if batch:
        members = st.lists(_overlaps(K, M) | _overlaps(1, 2), min_size=0, max_size=3)
        ov = Kind(members, ov.bad.map(lambda o: [o]) | ov.good | _sampled([None, "abc", [None]]))
    lr_scalar = real(zero_ok=True)
    lr = Kind(lr_scalar.good | st.just(np.array([0.5, 0.5, 0.5])), lr_scalar.bad) if batch else lr_scalar
    return {
        "overlaps": ov,
        "activation": Kind(ACTIVATION.good | st.just(OMIT), ACTIVATION.bad),
        "teacher_activation": Kind(ACTIVATION.good | st.just(None), ACTIVATION.bad.filter(lambda v: v is not None)),
        "lr": lr, "lr_readout": real(zero_ok=True), "noise": real(zero_ok=True),
        "regime": choice("online", "gradient_flow"), "spherical": FLAG,
        "t_max": real(0.0, 3.0, optional=True), "times": times(3.0),
        "method": choice("euler", "rk4", "adaptive"), "dt": real(1e-3, 0.5), "rtol": real(1e-12, 1e-3),
        "atol": real(1e-14, 1e-3), "readout": choice("sum", "mean"), "risk_tol": real(optional=True),
        "n_records": count(2, 20), "h_max": real(optional=True), "max_steps": count(1, 2000, huge=False),
        "n_threads": N_THREADS,
    }


def ode_check(values: dict[str, Any], out: Any) -> None:
    for j, tr in enumerate(out if isinstance(out, tl.BatchTrajectory) else [out]):
        ov = values["overlaps"][j] if isinstance(values["overlaps"], list) else values["overlaps"]
        check_trajectory(tr, ov.K, f"result[{j}]")


def rhs_check(values: dict[str, Any], out: Any) -> None:
    ov = values["overlaps"]
    for name, arr, shape in zip("QMa", out, [(ov.K, ov.K), (ov.K, ov.n_teacher), (ov.K,)], strict=True):
        expect_shape(arr, shape, f"d{name}/dt")


def network_method(method: str) -> Any:
    def call(net: Any, **kw: Any) -> Any:
        return getattr(net, method)(**kw) if method != "__call__" else net(**kw)
    return call


def pair_check(values: dict[str, Any], out: Any) -> None:
    K, d = values["student"].K, values["student"].d
    if isinstance(out, tuple):  # gradient
        expect_shape(out[0], (K, d), "dW")
        if out[1] is not None:
            expect_shape(out[1], (K,), "da")
    elif isinstance(out, np.ndarray):  # hessian
        n = K * d + (K if values.get("train_readout", True) else 0)
        expect_shape(out, (n, n))


def spectrum_check(values: dict[str, Any], out: Any) -> None:
    n = np.shape(values["H"])[0]
    if sum(m for _, m in out) != n or any(b[0] <= a[0] for a, b in zip(out, out[1:], strict=False)):
        raise Violation(f"multiplicities do not add up to {n} or eigenvalues not ascending: {out}")


def space_matrix(sizes: Any, x: Any) -> Any:
    return FixedPointSpace(sizes).matrix(x)


def space_coordinates(sizes: Any, train_readout: Any, **kw: Any) -> Any:
    return FixedPointSpace(sizes, train_readout).coordinates(**kw)


def make_overlaps(omega: Any, a: Any, v: Any, K: int) -> Any:
    """Overlaps(Q, M, P, a, v) from the blocks of one (K + M) x (K + M) matrix (passed whole if it is not
    a matrix); nested lists are split as lists."""
    O = np.asarray(omega, dtype=object) if isinstance(omega, list) else omega
    if not (isinstance(O, np.ndarray) and O.ndim == 2):
        return tl.Overlaps(omega, omega, omega, a, v)
    blocks = [O[:K, :K], O[:K, K:], O[K:, K:]]
    if isinstance(omega, list):
        blocks = [b.tolist() for b in blocks]
    return tl.Overlaps(*blocks, a, v)


def make_batch_overlaps(omega: Any, a: Any, v: Any, K: int) -> Any:
    """BatchOverlaps from a stack of (K + M) x (K + M) matrices (passed whole if it is not a stack), with a and
    v shared by every member."""
    if not (isinstance(omega, np.ndarray) and omega.ndim == 3):
        return tl.BatchOverlaps(omega, omega, omega, a, v)
    a_ = np.broadcast_to(a, (omega.shape[0], *np.shape(a))) if isinstance(a, np.ndarray) else a
    return tl.BatchOverlaps(omega[:, :K, :K], omega[:, :K, K:], omega[:, K:, K:], a_, v)


def subspace_method(sizes: Any, activation: Any, method: str, x: Any) -> Any:
    prob = SubspaceProblem(FixedPointSpace(sizes), activation=activation)
    if method == "solve":
        return prob.solve(x, max_iter=3)
    return getattr(prob, method)(x)


@functools.cache
def landscape_results() -> tuple[Any, ...]:
    """Small results of every exported kind (computed once per child process): a CriticalPoint with flat
    directions, a MultistartResult, a family, a RealKFamily."""
    teacher = tl.landscape.identity_teacher(2)
    cp = tl.landscape.refine(teacher.with_weights(np.diag([2.0, 0.5]) + 1e-3, [0.5, 2.0]), teacher,
                             train_readout=True)
    fam = tl.landscape.continue_family(lambda k: (k - 1, 1), [6], [0.9867, -0.0504, -0.6015, 0.308, 0.2245])
    real_k = tl.landscape.continue_real_k([0.9867, -0.0504, -0.6015, 0.308, 0.2245], 6.0, [6.0, 5.5])
    return cp, tl.landscape.multistart(2, 2, seed=0), fam, real_k


def landscape_result() -> Kind:
    # [] is an empty family (a list of FamilyPoint): valid
    return Kind(st.integers(0, 3).map(lambda i: landscape_results()[i]), _sampled([None, 1, "x", [1], {"W": 1}]))


def compressed(W: Any) -> Any:
    try:
        return tl.landscape.compress_point(W)
    except (TypeError, ValueError):  # e.g. a bool array
        return {"shape": [1, 1], "dense": [1.0]}


def young_method(sizes: Any, train_readout: Any, activation: Any, method: str, x: Any) -> Any:
    prob = tl.landscape.YoungProblem(2, train_readout, activation)
    if method == "solve":
        return prob.solve(x, sizes, max_iter=3)
    return getattr(prob, method)(x, sizes)


def saddle_connections_of(student: Any, teacher: Any, step: Any) -> Any:
    cp = tl.landscape.refine(student, teacher, max_iter=2)
    return tl.landscape.saddle_connections(cp, teacher, step=step, max_iter=50)


def continue_family(sizes: str, **kw: Any) -> Any:
    fn = {"(k-1, 1)": lambda k: (k - 1, 1), "(k,)": lambda k: (k,), "(1.5, k)": lambda k: (1.5, k)}[sizes]
    return tl.landscape.continue_family(fn, **kw)


def covariance_rows(rows: Any, scale: Any) -> Any:
    rows_ = list(rows) if isinstance(rows, np.ndarray) and rows.ndim else [rows]
    return tl.kernels.covariance(*rows_, **({} if scale is OMIT else {"scale": scale}))


def plateau_example(**kw: Any) -> Any:
    return tl.ode.plateau_example(n_records=10, max_steps=2000, **kw)


def cli_main(argv: list[str]) -> Any:
    try:
        return cli.main(argv)
    except SystemExit as exc:  # argparse's usage errors and --help: a clean exit, not a traceback
        return int(exc.code or 0)


def cli_check(values: dict[str, Any], out: Any) -> None:
    if not isinstance(out, int):
        raise Violation(f"cli.main returned {out!r}, not an exit code")


def sgd_times() -> Kind:
    """SGD record times: strictly increasing multiples of 1/4 (distinct steps for d >= 4), or huge."""
    ts = st.lists(st.integers(0, 8), min_size=1, max_size=3, unique=True).map(lambda v: np.array(sorted(v)) / 4)
    return Kind(ts | st.just(np.array([0.0, 1e30])) | st.just(OMIT), times().bad)


# ------------------------------------------------------------------ entry points added after the first fuzz suite
def nonnegative_times(values: dict[str, Any], out: Any) -> None:
    """Escape and passage times: never negative (NaN only where documented, see censored)."""
    arr = np.asarray(out, dtype=np.float64)
    if np.any(arr < 0):
        raise Violation(f"negative time {_short(out)}")


def censored(t: float) -> float | None:
    """first_passage_time's documented NaN (the level never reached) as None, so that check_finite holds the rest."""
    return None if isinstance(t, float) and math.isnan(t) else t


def first_passage_time(**kw: Any) -> Any:
    return censored(tl.passage.first_passage_time(**kw))


def passage_check(values: dict[str, Any], out: Any) -> None:
    if out is not None and out < float(np.min(np.asarray(values["t"], dtype=np.float64))):
        raise Violation(f"first passage {out!r} before the first record")


@functools.cache
def passage_runs() -> tuple[Any, ...]:
    """A few small trajectories (computed once per child process): a learning ODE run and an SDE ensemble."""
    ov = tl.Overlaps([[1.0]], [[0.2]], [[1.0]], [1.0], [1.0], "linear", "linear")
    return tl.ode.integrate(ov, lr=0.5, t_max=5.0, n_records=11), tl.sde.simulate(ov, lr=0.5, d=100, t_max=2.0,
                                                                                  n_records=5, seeds=2)


def run_passage(which: int, level: Any, relative: Any) -> Any:
    return censored(tl.passage.run_passage(passage_runs()[which], level, relative))


def first_passage(level: Any, relative: Any) -> Any:
    """The ensemble's FirstPassage as (crossed times, censored flags): NaN marks a censored run (documented)."""
    fp = tl.passage.first_passage(passage_runs()[1].runs, level, relative)
    if not np.array_equal(np.isnan(fp.times), fp.censored):
        raise Violation(f"NaN times {fp.times} do not mark the censored runs {fp.censored}")
    repr(fp)
    return fp.crossed, fp.censored


def schedule_check(values: dict[str, Any], out: Any) -> None:
    """A schedule (or None: the constant 1) evaluates to finite multipliers >= 0."""
    if out is None:
        return
    s = out(np.array([0.0, 0.5, 3.0, 1e6]))
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise Violation(f"{out!r} evaluates to {s}")


SCHEDULE_FUNCTIONS = {"decay": lambda t: 1.0 / (1.0 + t), "scalar": lambda t: 0.5,
                      "raises": lambda t: 1 / 0, "nan": lambda t: t * NAN, "negative": lambda t: -1.0 - t,
                      "shape": lambda t: np.ones(3), "text": lambda t: "x"}


def from_function(f: str, **kw: Any) -> Any:
    return tl.schedules.from_function(SCHEDULE_FUNCTIONS[f], **kw)


def as_schedule(schedule: Any, **kw: Any) -> Any:
    if isinstance(schedule, str) and schedule in SCHEDULE_FUNCTIONS:
        schedule = SCHEDULE_FUNCTIONS[schedule]
    return tl.schedules.as_schedule(schedule, **kw)


TARGET_D = Kind(st.integers(3, 6) | st.integers(3, 6).map(np.int64), _sampled([0, -1, 1.5, "3", 2**70, NAN]))
TARGET_FUNCTIONS = {"product": lambda z: z[:, 0] * z[:, -1], "tanh": lambda z: np.tanh(z[:, 0]),
                    "raises": lambda z: 1 / 0, "nan": lambda z: z[:, 0] * NAN, "shape": lambda z: np.ones(2),
                    "text": lambda z: "x"}


def target_function(fn: str, **kw: Any) -> Any:
    return tl.targets.function(TARGET_FUNCTIONS[fn], **kw)


def target_method(target: Any, method: str, X: Any) -> Any:
    return getattr(target, method)(X)


def _hermite_targets(d: int) -> Any:
    return st.builds(lambda deg, seed: tl.targets.hermite_single(deg, d=d, seed=seed), st.integers(1, 4),
                     st.integers(0, 9)) | st.builds(lambda seed: tl.targets.staircase(min(d, 3), d=d, seed=seed),
                                                     st.integers(0, 9))


HERMITE_COEFFICIENTS = Kind(_sampled([{(1,): 1.0}, {(2, 0): 0.5, (1, 1): -1.0}, {(1, 0, 0): 1.0, (1, 1, 1): 2.0},
                                      {(0,): 3.0}, {(4,): 1e150}, {(1,): 1e-300}]),
                            _sampled([{(1.5,): 1.0}, {(): 1.0}, {(-1,): 1.0}, {(1,): "x"}, {(1,): NAN}, "x", None,
                                      {}, {(1,): 1.0, (1, 0): 1.0}, {(61,): 1.0}, [((1,), 1.0)], {("1",): 1.0}]))


def sde_kinds(D: dict[str, Any]) -> dict[str, Kind]:
    return {"overlaps": overlaps(D["K"], D["M"]), "activation": activation("linear", "quadratic", "erf"),
            "lr": real(), "noise": real(zero_ok=True), "lr_readout": real(zero_ok=True), "spherical": FLAG}


def sde_simulate_check(values: dict[str, Any], out: Any) -> None:
    for j, tr in enumerate(out.runs):
        check_trajectory(tr, where=f"result.runs[{j}]")


def cosines(optional: bool = False) -> Kind:
    """Overlaps m = w . w* / d of unit weights: in [-1, 1] without 0 (m0 = 0 never escapes: +inf, documented)."""
    good = st.floats(-1, 1).filter(lambda v: v != 0) | _sampled([1.0, -1.0, 1e-300, 0.999999])
    return Kind(good | st.lists(good, min_size=1, max_size=3).map(np.array),
                _sampled([1.5, -2.0, [2.0], NAN, INF, "0.5", None, 1 + 1j, [0.1, NAN]]))


GAMMA = Kind(st.floats(0, 1) | _sampled([0.0, 1.0, np.float64(0.5)]),
             _sampled([NAN, INF, -INF, -0.5, 1.5, "0.5", None, 1 + 1j]))
THRESHOLD = Kind(st.floats(0, 1).filter(lambda v: 0 < v < 1) | _sampled([1e-300, 1e-12, 0.999999]),
                 _sampled([0.0, 1.0, -0.5, 2.0, NAN, "0.5", None]))
THEORY_LR = real(0.0, 0.2, extreme=(1e-300, 0.16, 0.17))


@functools.cache
def landscape_documents() -> tuple[str, ...]:
    return tuple(tl.landscape.to_json(r) for r in landscape_results())


def _mutate_json(doc: str, path_seed: int, value: Any) -> str:
    """The document with one value somewhere inside replaced (a field, an array's shape or data, a point)."""
    data = json.loads(doc)
    slots: list[tuple[Any, Any]] = []
    stack = [data["result"]]
    while stack:
        x = stack.pop()
        items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
        for key, y in items:
            slots.append((x, key))
            stack.append(y)
    holder, key = slots[path_seed % len(slots)]
    holder[key] = value
    return json.dumps(data)


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-3, 2**40) | st.floats(allow_nan=False)
                           | st.text(max_size=3) | _sampled(["nan", "inf", "a[0]", "diag[0]", 2**70]),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                               _sampled(["__array__", "__float__", "__tuple__", "__dict__", "__type__", "shape",
                                         "data", "fields", "x"]), inner, max_size=3), max_leaves=6)


def _nested(depth: int) -> str:
    return '{"format": "twolayer.landscape/1", "result": ' + "[" * depth + "]" * depth + "}"


def _huge_point_document() -> str:
    doc = json.loads(tl.landscape.to_json(landscape_results()[0]))
    doc["result"]["fields"]["student"]["__network__"]["point"] = {
        "shape": [40000, 40000], "blocks": [40000], "rows": [0], "cols": [0], "labels": ["diag[0]", "off[0]"],
        "values": [1.0, 0.0], "exceptions": []}
    return json.dumps(doc)


BAD_DOCUMENTS = ["", "{}", "[1]", "not json", None, 1, '{"format": "twolayer.landscape/1"}',
                 '{"format": "twolayer.landscape/1", "result": {"__type__": "X"}}',
                 '{"format": "twolayer.landscape/1", "result": true}', _nested(10_000), _nested(100)]


def scan_definition(engine: str, constants: dict[str, Any], axes: dict[str, Any]) -> dict[str, Any]:
    return {"engine": engine, "constants": constants, "axes": axes}


SCAN_CONSTANTS = st.fixed_dictionaries({"activation": _sampled(["erf", "linear", "swish", 1]),
                                        "K": _sampled([1, 2, 0, 2.5, "2"]), "M": _sampled([1, 2]),
                                        "t_max": _sampled([1.0, 0.0, -1.0, NAN, "1"])})
SCAN_AXES = st.dictionaries(_sampled(["lr", "d", "seed", "noise", "bogus"]),
                            _sampled([[0.5], [0.5, 1.0], [], [NAN], ["x"], 1.0, [[1.0]], [10, 100], [-1]]),
                            min_size=1, max_size=3)


def toml_text(text: str) -> Any:
    """Parse TOML text from a file (scan.read_toml) and load it as a scan definition (scan.load)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "scan.toml")
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as fh:
            fh.write(text)
        table = tl.scan.read_toml(path)
        return tl.scan.load(table)


TOML_TEXTS = st.text(max_size=40) | _sampled([
    'engine = "ode"\n[constants]\nK = 1\nM = 1\nactivation = "erf"\nt_max = 1.0\n[axes]\nlr = [0.5, 1.0]\n',
    'engine = "sde"\n[axes]\nlr = []\n', 'engine = 3\n', '[axes]\nlr = "x"\n', 'engine = "ode"\n[[axes]]\n',
    'engine = "ode"\n[constants]\nK = 1e400\n', '[constants]\n' + 'a = [' * 50 + ']' * 50 + '\n'])


def tiny_scan(lr: Any, d: Any, t_max: Any) -> Any:
    """An in-memory scan of two ODE runs (run, group, store nothing)."""
    return tl.scan.run({"engine": "ode", "constants": {"activation": "erf", "K": 1, "M": 1, "t_max": t_max},
                        "axes": {"lr": lr, "d": d, "seed": [0]}})



# Unwritable output directories for the CLI: a path below a regular file, /proc, and the empty path.
CLI_OUT = [os.path.join(os.path.abspath(__file__), "out"), "/proc/twolayer-fuzz", ""]

ENTRY_POINTS: list[Entry] = [
    Entry("build_info", lambda: tl.build_info(), lambda D: {}, examples=1),
    Entry("activations.check_activation", tl.activations.check_activation,
          lambda D: {"name": ACTIVATION, "argument": Kind(st.just(OMIT) | st.text(max_size=3))}),
    *[Entry(f"activations.{fn.__name__}", fn,
            lambda D: {"name": ACTIVATION, "x": array(st.lists(st.integers(0, 3), max_size=2).map(tuple),
                                                      [1.0, 1e-100, 1e100], scalar_ok=True, strict=False,
                                                      finite_only=False, any_ndim=True)},
            check=lambda v, out: expect_shape(out, np.shape(np.asarray(v["x"]))))
      for fn in (tl.activations.sigma, tl.activations.derivative)],
    Entry("activations.hermite", tl.activations.hermite,
          lambda D: {"coefficients": array(st.integers(1, 9).map(lambda n: (n,)), [1.0, 1e-100, 1e100])}),
    Entry("activations.is_hermite", tl.activations.is_hermite,
          lambda D: {"name": Kind(_sampled(["hermite(0,1)", "erf", "hermite", "", None, 1, b"hermite(1)"]))},
          check=lambda v, out: assert_bool(out)),
    Entry("activations.is_custom", tl.activations.is_custom,
          lambda D: {"name": Kind(_sampled(["custom(f)", "erf", "custom", "", None, 1, b"custom(f)"]))},
          check=lambda v, out: assert_bool(out)),
    Entry("activations.custom", tl.activations.custom,
          lambda D: {"name": Kind(_sampled(["fuzz_tanh"]), _sampled(["1x", "", "a b", None, 3, b"f"])),
                     "function": Kind(_sampled([np.tanh]), _sampled([None, 3.0, "tanh", np.abs,
                                                                     lambda s: np.tanh(s)[:-1], lambda s: s + 1j])),
                     "derivatives": Kind(st.just(OMIT), _sampled([3.0, "d", [None], [np.tanh] * 5, [np.tanh]])),
                     "domain": Kind(st.just(OMIT), _sampled([0.0, -1.0, NAN, INF, "30", 1e300]))}, examples=20),
    Entry("activations.custom_tables", tl.activations.custom_tables,
          lambda D: {"names": Kind(_sampled([[], ["erf", 1.0]]), _sampled([["custom(not_registered)"]]))}),
    Entry("activations.register_table", tl.activations.register_table,
          lambda D: {"name": Kind(_sampled(["fuzz_table"]), _sampled(["1x", ""])),
                     "edges": Kind(_sampled([np.array([-1.0, 1.0])]), _sampled([np.array([1.0, -1.0]),
                                                                                 np.array([0.0])])),
                     "coefficients": Kind(_sampled([np.array([[[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0],
                                                               [0.0, 0.0]]])]),
                                          _sampled([np.zeros((2, 5, 2)), np.full((1, 5, 2), NAN)])),
                     "strip": Kind(_sampled([1.0]), _sampled([0.0, -1.0, NAN]))}, examples=20),
    Entry("activations.hermite_coefficients", tl.activations.hermite_coefficients,
          lambda D: {"name": Kind(_sampled(["hermite(0,1)", "hermite(1, 0, 0.5)", "hermite(2)"]),
                                  _sampled(["hermite()", "hermite(1,", "hermite(nan)", "hermite(" + "1," * 9 + "1)",
                                            "erf", "", None, 1]))}),
    Entry("kernels.i2", tl.kernels.i2, lambda D: {"act_a": ACTIVATION, "act_b": ACTIVATION, "C": covariance(2),
                                                  "n_threads": N_THREADS}, check=kernel_check),
    Entry("kernels.i3", tl.kernels.i3, lambda D: {"act": ACTIVATION, "act_b": ACTIVATION, "C": covariance(3),
                                                  "n_threads": N_THREADS}, check=kernel_check),
    Entry("kernels.j2", tl.kernels.j2, lambda D: {"act": ACTIVATION, "C": covariance(2), "n_threads": N_THREADS},
          check=kernel_check),
    Entry("kernels.i4", tl.kernels.i4, lambda D: {"act": ACTIVATION, "act_a": ACTIVATION, "act_b": ACTIVATION,
                                                  "C": covariance(4), "n_threads": N_THREADS}, check=kernel_check),
    Entry("kernels.covariance", covariance_rows,
          lambda D: {"rows": array((D["K"], D["d"]), strict=False), "scale": real(extreme=(1e-300, 1e300))},
          SMALL, check=lambda v, out: expect_shape(out, (len(v["rows"]),) * 2)),
    Entry("Network", tl.Network,
          lambda D: {"W": array((D["K"], D["d"]), strict=False), "a": array((D["K"],), optional=True, none_ok=True),
                     "activation": ACTIVATION, "scaling": choice("sqrt_d", "none"), "readout": choice("sum", "mean")},
          SMALL),
    Entry("Network.random", tl.Network.random,
          lambda D: {"K": count(1, 4), "d": count(1, 5), "activation": ACTIVATION,
                     "init": choice("gaussian", "orthogonal"), "seed": seed_kind(optional=True),
                     "scaling": choice("sqrt_d", "none"), "readout": choice("sum", "mean")}),
    Entry("Network.__call__", network_method("__call__"),
          lambda D: {"net": network(D["K"], D["d"], D["scaling"], other_d=None),
                     "X": array((3, D["d"]), [1.0, 1e-300, 1e100])}, SMALL,
          check=lambda v, out: expect_shape(out, (3,))),
    Entry("Network.with_weights", network_method("with_weights"),
          lambda D: {"net": Kind(network(D["K"], D["d"], D["scaling"]).good),
                     "W": array((D["K"], D["d"]), strict=False), "a": array((D["K"],), optional=True, none_ok=True)},
          SMALL),
    Entry("networks.random_weights", tl.networks.random_weights,
          lambda D: {"K": count(1, 4), "d": count(1, 5), "init": choice("gaussian", "orthogonal", optional=False),
                     "rng": Kind(st.builds(np.random.default_rng, st.integers(0, 9)), _sampled([None, 0, "rng"])),
                     "scaling": choice("sqrt_d", "none")}),
    Entry("networks.teacher_student", tl.networks.teacher_student,
          lambda D: {"K": count(1, 3), "M": count(1, 3), "d": count(1, 6), "activation": ACTIVATION,
                     "teacher_activation": Kind(ACTIVATION.good | st.just(None), ACTIVATION.bad.filter(bool)),
                     "init": choice("gaussian", "orthogonal"), "seed": seed_kind(optional=True),
                     "scaling": choice("sqrt_d", "none"), "readout": choice("sum", "mean")}),
    Entry("Overlaps", make_overlaps,
          lambda D: {"omega": covariance(D["K"] + D["M"], batched=False, asymmetric=D["K"] > 1), "a": array((D["K"],)),
                     "v": array((D["M"],)), "K": Kind(st.just(D["K"]))}, SMALL),
    Entry("Overlaps.from_networks", tl.Overlaps.from_networks, lambda D: pair(D), SMALL),
    Entry("BatchOverlaps", make_batch_overlaps,
          lambda D: {"omega": covariance(D["K"] + D["M"], asymmetric=D["K"] > 1), "a": array((D["K"],)),
                     "v": array((D["M"],)), "K": Kind(st.just(D["K"]))}, SMALL),
    Entry("networks.check_network", tl.networks.check_network,
          lambda D: {"net": network(D["K"], D["d"], D["scaling"], other_d=False),
                     "name": Kind(st.just("student"))}, SMALL),
    Entry("population.aligned_step_units", tl.population.aligned_step_units,
          lambda D: pair(D, ACTIVATION.good | st.just("step")), SMALL),
    Entry("sgd.grid", tl.sgd.grid,
          lambda D: {"seeds": count(1, 3, huge=False), "lr": array((2,), strict=False),
                     "noise": array((3,), strict=False)}),
    Entry("population.risk", tl.population.risk,
          lambda D: {**pair(D), "noise": real(zero_ok=True), "n_threads": N_THREADS}, UP_TO_8,
          check=lambda v, out: expect_shape(out, ())),
    Entry("population.gradient", tl.population.gradient,
          lambda D: {**pair(D), "train_readout": FLAG, "n_threads": N_THREADS}, UP_TO_8, check=pair_check),
    Entry("population.hessian", tl.population.hessian,
          lambda D: {**pair(D), "train_readout": FLAG, "n_threads": N_THREADS}, SMALL, check=pair_check),
    Entry("population.descend", tl.population.descend,
          lambda D: {**pair(D), "lr": real(), "n_steps": count(0, 30, huge=False), "lr_readout": real(zero_ok=True),
                     "n_records": count(2, 8), "n_threads": N_THREADS}, SMALL,
          check=lambda v, out: check_trajectory(out, v["student"].K)),
    Entry("ode.rhs", tl.ode.rhs,
          lambda D: {k: v for k, v in ode_kinds(D).items() if k in (
              "overlaps", "activation", "teacher_activation", "lr", "lr_readout", "noise", "regime", "spherical",
              "readout", "n_threads")}, UP_TO_8, check=rhs_check),
    Entry("ode.integrate", tl.ode.integrate, ode_kinds, SMALL, check=ode_check),
    Entry("ode.integrate_batch", tl.ode.integrate_batch, lambda D: ode_kinds(D, batch=True), SMALL, check=ode_check),
    Entry("ode.plateau_overlaps", tl.ode.plateau_overlaps,
          lambda D: {"K": count(1, 4), "M": count(1, 4), "q0": real(), "m0": real(signed=True),
                     "seed": seed_kind()}),
    Entry("ode.plateau_example", plateau_example,
          lambda D: {"t_max": real(0.0, 5.0), "lr": real(zero_ok=True), "method": choice("euler", "rk4", "adaptive")},
          check=lambda v, out: check_trajectory(out, 2), examples=max(EXAMPLES // 2, 1)),
    Entry("sgd.simulate", tl.sgd.simulate,
          lambda D: {**pair(D), "lr": real(), "lr_readout": real(zero_ok=True), "noise": real(zero_ok=True),
                     "batch_size": count(1, 4, huge=False), "spherical": FLAG,
                     "t_max": real(0.0, 2.0, optional=True), "times": sgd_times(), "seed": seed_kind(bits=64),
                     "seeds": Kind(st.none() | st.integers(1, 3) | st.just([0, 5]), _sampled([0, -1, [], [1, 1], [-1],
                                                                                            1.5, "2", 2**40])),
                     "n_samples": count(4, 8, optional=True), "shuffle": FLAG, "train_first_layer": FLAG,
                     "n_records": count(2, 5), "keep_weights": FLAG, "n_threads": N_THREADS}, SMALL),
    Entry("landscape.refine", tl.landscape.refine,
          lambda D: {**pair(D), "tol": real(), "train_readout": FLAG,
                     "max_iter": count(0, 4, huge=False, python_only=True), "zero_tol": real(optional=True),
                     "global_tol": real(zero_ok=True)}, SMALL),
    Entry("landscape.classify", tl.landscape.classify,
          lambda D: {**pair(D), "train_readout": FLAG, "eigenvalues": array((4,), optional=True, strict=False),
                     "zero_tol": real(optional=True), "global_tol": real(zero_ok=True)}, SMALL),
    Entry("landscape.spectrum", tl.landscape.spectrum,
          lambda D: {"H": covariance(D["K"], batched=False, symmetric_only=True), "tol": real()},
          st.fixed_dictionaries({"K": st.integers(1, 6)}), check=spectrum_check),
    Entry("landscape.isotropy", tl.landscape.isotropy,
          lambda D: {"W": Kind(array((D["K"], D["d"]), strict=False).good | _sampled(
                         [np.eye(4), np.ones((3, 3)), np.zeros((2, 5)), np.eye(5) * 0.5 + 0.1]),
                         array((D["K"], D["d"]), strict=False).bad),
                     "tol": real(), "a": array((D["K"],), optional=True, none_ok=True),
                     "activation": Kind(ACTIVATION.good | st.just(None),
                                        ACTIVATION.bad.filter(lambda v: v is not None))},
          SMALL),
    Entry("landscape.FixedPointSpace", FixedPointSpace,
          lambda D: {"sizes": Kind(st.lists(st.integers(1, 3), min_size=1, max_size=3).map(tuple),
                                   _sampled([(1.5, 2), (0,), (), (-1, 2), ("2",), (2**40,), None, "22", (NAN,)])),
                     "train_readout": FLAG}),
    Entry("landscape.FixedPointSpace.matrix", space_matrix,
          lambda D: {"sizes": Kind(st.just((2, 1))), "x": array((5,))}),
    Entry("landscape.FixedPointSpace.coordinates", space_coordinates,
          lambda D: {"sizes": Kind(st.just((2, 1))), "train_readout": FLAG, "W": array((3, 3)),
                     "a": array((3,), optional=True, none_ok=True)}),
    Entry("landscape.FixedPointSpace.containing", FixedPointSpace.containing,
          lambda D: {"W": Kind(_sampled([np.eye(3), np.eye(4) * 2 - 0.1, np.ones((2, 2)), np.eye(3)[::-1],
                                         np.arange(9.0).reshape(3, 3)]) | array((D["K"], D["K"])).good,
                               array((D["K"], D["K"])).bad | st.just(np.ones((2, 3)))),
                     "tol": real(), "train_readout": FLAG, "a": array((D["K"],), optional=True)}, SMALL),
    Entry("landscape.SubspaceProblem", subspace_method,
          lambda D: {"sizes": Kind(_sampled([(2, 1), (1, 1), (3,)])), "activation": ACTIVATION,
                     "method": Kind(_sampled(["risk", "gradient", "hessian", "solve", "critical_point"])),
                     "x": Kind(_float_array((5,)) | _sampled([np.array([1.0, 0, 0, 0, 1])]), array((5,)).bad)},
          examples=max(EXAMPLES // 2, 1)),
    Entry("landscape.continue_family", continue_family,
          lambda D: {"sizes": Kind(_sampled(["(k-1, 1)", "(k,)"]), st.just("(1.5, k)")),
                     # at least one k: a sizes function is only checked by calling it
                     "ks": Kind(st.lists(st.integers(2, 4), min_size=1, max_size=2),
                                _sampled([[0], [-1], [1.5], ["3"], 3])),
                     "x0": array((5,)), "train_readout": FLAG, "activation": activation("relu"),
                     "tol": real(), "spectrum_tol": real()}, examples=max(EXAMPLES // 2, 1)),
    Entry("landscape.continue_real_k", tl.landscape.continue_real_k,
          lambda D: {"x0": Kind(_sampled([np.array([1.0, 0, 0, 0, 1]), np.array([0.9, -0.05, -0.05, -0.1, 1.0])])
                                | _float_array((5,), [1.0]), array((5,)).bad),
                     "k0": real(2.0, 6.0), "ks": Kind(st.lists(st.floats(3.0, 6.0), min_size=1, max_size=2),
                                                     array((2,)).bad)},
          examples=max(EXAMPLES // 4, 1)),
    Entry("landscape.YoungProblem", young_method,
          lambda D: {"sizes": Kind(_sampled([(2, 1), (4.5, 1.0), (3.7, 3.2)]),
                                   _sampled([(0.5, 1), (2,), "ab", None, (NAN, 1)])),
                     "train_readout": FLAG, "activation": ACTIVATION,
                     "method": Kind(_sampled(["risk", "gradient", "hessian", "solve", "spectrum", "gradient_norm",
                                              "symmetry_directions"])),
                     "x": Kind(_sampled([np.array([1.0, 0, 0, 0, 1]), np.array([1.0, 0.1, 0.9, 0.1, 0.2, 0.2])]),
                               array((5,)).bad)},
          examples=max(EXAMPLES // 2, 1)),
    Entry("landscape.saddle_search", tl.landscape.saddle_search,
          lambda D: {**pair(D), "index": count(1, 2, huge=False, python_only=True),
                     "direction": Kind(_sampled([1.0, -1.0]), _sampled([0.0, NAN, "up"])),
                     "train_readout": FLAG, "trust_radius": real(), "max_iter": count(0, 5, huge=False,
                                                                                      python_only=True),
                     "tol": real(), "switch_tol": real()}, SMALL),
    Entry("landscape.saddle_connections", saddle_connections_of,
          lambda D: {**pair(D), "step": real()}, SMALL),
    Entry("landscape.reduced_risk", tl.landscape.reduced_risk,
          lambda D: {"x": array((5,)), "sizes": Kind(st.lists(st.floats(1.0, 6.0), min_size=2, max_size=2),
                                                      array((2,)).bad)}),
    Entry("landscape.identity_teacher", tl.landscape.identity_teacher,
          lambda D: {"k": count(1, 5), "activation": ACTIVATION}),
    Entry("landscape.multistart", tl.landscape.multistart,
          lambda D: {"M": count(1, 3), "runs": count(1, 3), "init": choice("xavier", "gaussian", "orthogonal"),
                     "seed": seed_kind(), "d": count(3, 4, optional=True), "train_readout": FLAG,
                     "activation": activation("relu", "erf"), "max_iter": count(0, 50, huge=False),
                     "gtol": real(zero_ok=True), "memory": count(1, 5, huge=False), "tol": real(),
                     "n_threads": N_THREADS}, examples=max(EXAMPLES // 2, 1)),
    Entry("landscape.random_starts", tl.landscape.random_starts,
          lambda D: {"runs": count(1, 3), "k": count(1, 3), "d": count(3, 4),
                     "init": choice("xavier", "gaussian", "orthogonal", optional=False), "seed": seed_kind()}),
    Entry("landscape.numpy_relu_loss_grad", tl.landscape.numpy_relu_loss_grad,
          lambda D: {"W": array((D["K"], D["d"])), "V": array((D["M"], D["d"]))}, SMALL),
    Entry("landscape.alignment_determinants", tl.landscape.alignment_determinants,
          lambda D: {"angles": Kind(st.lists(st.floats(1e-3, 6.28), min_size=1, max_size=4, unique=True).map(sorted)
                                    .map(np.array),
                                    array((3,)).bad | _sampled([np.array([0.0, 1.0]), np.array([2.0, 1.0]),
                                                                np.array([1.0, 7.0]), np.array([1.0, 1.0])]))},
          check=lambda v, out: [expect_shape(o, np.shape(v["angles"])[:-1]) for o in out]),
    Entry("landscape.procrustes", tl.landscape.procrustes,
          lambda D: {"A": array((D["d"], D["K"]), strict=False), "B": array((D["d"], D["K"]))}, SMALL),
    Entry("landscape.procrustes_distance", tl.landscape.procrustes_distance,
          lambda D: {"A": array((D["d"], D["K"]), strict=False), "B": array((D["d"], D["K"])),
                     "P": array((D["d"], D["d"]), optional=True)}, SMALL),
    Entry("landscape.step_gradient_flow", tl.landscape.step_gradient_flow,
          lambda D: {**pair(D, acts=st.just("step")),
                     "times": Kind(times(1.0).good.filter(lambda t: t is not OMIT), times().bad),
                     "lr": real(1e-2, 0.5)}, SMALL, examples=max(EXAMPLES // 2, 1)),
    Entry("landscape.alignment_flow", tl.landscape.alignment_flow,
          lambda D: {**pair({**D, "d": 2}, acts=st.just("relu")),
                     "times": Kind(times(1.0).good.filter(lambda t: t is not OMIT), times().bad),
                     "lr": real(1e-2, 0.5)}, SMALL, examples=max(EXAMPLES // 2, 1)),
    Entry("landscape.canonical", tl.landscape.canonical,
          lambda D: {"student": network(D["K"], D["d"], D["scaling"], other_d=None), "train_readout": FLAG}, SMALL),
    Entry("landscape.orbit_tangents", tl.landscape.orbit_tangents,
          lambda D: {"student": network(D["K"], D["d"], D["scaling"], other_d=None), "train_readout": FLAG}, SMALL),
    Entry("landscape.canonical_weights", tl.landscape.canonical_weights,
          lambda D: {"W": array((D["K"], D["d"]), strict=False), "a": array((D["K"],)), "activation": ACTIVATION,
                     "train_readout": FLAG}, SMALL),
    Entry("landscape.homogeneity_degree", tl.landscape.homogeneity_degree, lambda D: {"activation": ACTIVATION}),
    Entry("landscape.split_spectrum", tl.landscape.split_spectrum,
          lambda D: {"H": covariance(D["K"], batched=False, symmetric_only=True),
                     "tangents": Kind(_sampled([np.eye(D["K"])[:, :1], np.zeros((D["K"], 0)), np.eye(D["K"])]),
                                      _sampled([2 * np.ones((D["K"], 1)), np.eye(D["K"] + 1)[:, :1], None, "x",
                                                np.full((D["K"], 1), NAN)]))},
          st.fixed_dictionaries({"K": st.integers(1, 5)})),
    Entry("landscape.compress_point", tl.landscape.compress_point,
          lambda D: {"W": array((D["K"], D["d"]), strict=False), "a": array((D["K"],), optional=True, none_ok=True),
                     "tol": real(), "symmetrize": FLAG}, SMALL),
    Entry("landscape.decompress_point", tl.landscape.decompress_point,
          lambda D: {"data": Kind(array((D["K"], D["K"])).good.map(compressed),
                                  _sampled([None, {}, "data", [1], {"shape": [2, 2]}, {"shape": [2, 2], "dense": [1.0]},
                                            {"shape": [1, 1], "dense": ["x"]}, {"shape": [2, 2], "blocks": [2]}]))},
          SMALL),
    Entry("landscape.to_json", tl.landscape.to_json,
          lambda D: {"result": landscape_result(), "symmetrize": FLAG}),
    Entry("landscape.from_json", tl.landscape.from_json,
          lambda D: {"text": Kind(st.integers(0, 3).map(lambda i: tl.landscape.to_json(landscape_results()[i])),
                                  _sampled(["", "{}", "[1]", "not json", None, 1, '{"format": "twolayer.landscape/1"}',
                                            '{"format": "twolayer.landscape/1", "result": {"__type__": "X"}}']))}),
    Entry("landscape.to_dataframe", tl.landscape.to_dataframe, lambda D: {"result": landscape_result()}),
    Entry("landscape.to_xarray", tl.landscape.to_xarray, lambda D: {"result": landscape_result()}),
    # ---- added with issue 26: targets, SDE, theory, passage, schedules, large batch, scan definitions, JSON import
    Entry("targets.hermite", tl.targets.hermite,
          lambda D: {"coefficients": HERMITE_COEFFICIENTS, "d": TARGET_D,
                     "seed": seed_kind(optional=True), "scaling": choice("sqrt_d", "none")}),
    Entry("targets.staircase", tl.targets.staircase,
          lambda D: {"k": count(1, 3), "d": TARGET_D, "seed": seed_kind(optional=True),
                     "scaling": choice("sqrt_d", "none")}),
    Entry("targets.hermite_single", tl.targets.hermite_single,
          lambda D: {"degree": count(1, 8, huge=False), "d": TARGET_D,
                     "seed": seed_kind(optional=True), "normalized": Kind(_sampled([True, False, np.True_]),
                                                                         _sampled([None, 0, 1, "False", [True]]))}),
    Entry("targets.function", target_function,
          lambda D: {"fn": Kind(_sampled(list(TARGET_FUNCTIONS))), "k": count(1, 3), "d": TARGET_D,
                     "seed": seed_kind(optional=True)}),
    Entry("targets.committee", tl.targets.committee,
          lambda D: {"W": array((D["M"], D["d"]), strict=False), "v": array((D["M"],), optional=True, none_ok=True),
                     "activation": ACTIVATION, "scaling": choice("sqrt_d", "none"), "readout": choice("sum", "mean")},
          SMALL),
    Entry("targets.is_target", tl.targets.is_target,
          lambda D: {"x": Kind(_hermite_targets(4) | _sampled([None, 1, "x", np.eye(2)]))}),
    Entry("targets.HermiteTarget", target_method,
          lambda D: {"target": Kind(_hermite_targets(D["d"] + 2)),
                     "method": Kind(_sampled(["function", "projections"])),
                     "X": array((3, D["d"] + 2), [1.0, 1e-300, 1e100])}, SMALL),
    Entry("sde.increment_covariance", tl.sde.increment_covariance,
          lambda D: {**sde_kinds(D), "n_nodes": count(1, 64, optional=True)}, SMALL, examples=max(EXAMPLES // 2, 1)),
    Entry("sde.simulate", tl.sde.simulate,
          lambda D: {**sde_kinds(D), "d": count(1, 200), "dt": real(0.01, 0.5), "t_max": real(0.0, 1.0),
                     "n_records": count(2, 5), "seeds": Kind(st.integers(1, 3) | st.just([0, 5]),
                                                           _sampled([0, -1, [], [1, 1], [-1], 1.5, "2", 2**40])),
                     "seed": seed_kind(bits=64), "risk_tol": real(optional=True), "n_threads": N_THREADS},
          SMALL, check=sde_simulate_check, examples=max(EXAMPLES // 4, 1)),
    Entry("theory.escape_time", tl.theory.escape_time,
          lambda D: {"d": count(2, 10**6, huge=False), "lr": THEORY_LR, "noise": real(zero_ok=True),
                     "threshold": THRESHOLD, "p": count(1, 8, huge=False),
                     "average": choice("annealed", "quenched"), "formula": choice("exact", "printed")},
          check=nonnegative_times),
    Entry("theory.escape_time_p1", tl.theory.escape_time_p1,
          lambda D: {"m0": cosines(), "lr": THEORY_LR, "noise": real(zero_ok=True), "threshold": THRESHOLD},
          check=nonnegative_times),
    Entry("theory.escape_time_wide", tl.theory.escape_time_wide,
          lambda D: {"mu0": real(0.0, 20.0), "tau0": real(0.0, 20.0, zero_ok=True),
                     "d": count(2, 10**6, huge=False), "p": count(1, 8, huge=False), "lr": real(),
                     "noise": real(zero_ok=True), "threshold": THRESHOLD}, check=nonnegative_times),
    Entry("theory.overlap_p1", tl.theory.overlap_p1,
          lambda D: {"t": Kind(st.lists(st.floats(0, 1e6), max_size=3).map(np.array) | st.floats(0, 1e300),
                               _sampled([NAN, INF, "1", [1.0, NAN], None])),
                     "m0": Kind(cosines().good.filter(lambda m: np.ndim(m) == 0), cosines().bad), "lr": THEORY_LR,
                     "noise": real(zero_ok=True)}),
    Entry("theory.risk_p1", tl.theory.risk_p1, lambda D: {"m": cosines()}),
    Entry("theory.fixed_point_risk", tl.theory.fixed_point_risk,
          lambda D: {"lr": THEORY_LR, "noise": real(zero_ok=True)}),
    Entry("theory.optimal_lr", tl.theory.optimal_lr,
          lambda D: {"p": count(1, 10**6, huge=False), "noise": real(zero_ok=True)}),
    Entry("theory.gain_factor", tl.theory.gain_factor, lambda D: {"noise": real(zero_ok=True)}),
    Entry("passage.first_passage_time", first_passage_time,
          lambda D: {"t": Kind(st.lists(st.floats(0, 10), min_size=1, max_size=4, unique=True).map(sorted)
                               .map(np.array), times().bad),
                     "risk": Kind(st.lists(st.floats(0, 2), min_size=1, max_size=4).map(np.array),
                                  _sampled([np.array([NAN]), "x", None, np.array([[1.0]])])),
                     "level": real(0.0, 1.5), "relative": Kind(_sampled([True]), FLAG.bad)},
          check=lambda v, out: passage_check(v, out) if np.shape(v["t"]) == np.shape(v["risk"]) else None),
    Entry("passage.run_passage", run_passage,
          lambda D: {"which": Kind(_sampled([0])), "level": real(0.0, 1.5), "relative": Kind(_sampled([True]),
                                                                                           FLAG.bad)},
          check=nonnegative_times, examples=max(EXAMPLES // 2, 1)),
    Entry("passage.first_passage", first_passage,
          lambda D: {"level": real(0.0, 1.5), "relative": Kind(_sampled([True]), FLAG.bad)},
          check=lambda v, out: nonnegative_times(v, out[0]), examples=max(EXAMPLES // 2, 1)),
    Entry("schedules.Schedule", tl.schedules.Schedule,
          lambda D: {"kind": Kind(_sampled(["constant", "step", "geometric", "inverse_time"]),
                                  _sampled(["table2", "", None, 1, "STEP"])),
                     "value": real(zero_ok=True), "gamma": Kind(GAMMA.good, GAMMA.bad | st.just(2.0)),
                     "every": real(), "start": real(zero_ok=True)}, check=schedule_check),
    Entry("schedules.constant", tl.schedules.constant, lambda D: {"value": real(zero_ok=True)}, check=schedule_check),
    Entry("schedules.step_decay", tl.schedules.step_decay,
          lambda D: {"gamma": GAMMA, "every": real(),
                     "start": real(zero_ok=True)}, check=schedule_check),
    Entry("schedules.geometric", tl.schedules.geometric,
          lambda D: {"gamma": GAMMA, "every": real(),
                     "start": real(zero_ok=True)}, check=schedule_check),
    Entry("schedules.inverse_time", tl.schedules.inverse_time,
          lambda D: {"t0": real(), "start": real(zero_ok=True)}, check=schedule_check),
    Entry("schedules.per_step", tl.schedules.per_step,
          lambda D: {"values": Kind(st.lists(st.floats(0, 2), min_size=1, max_size=5).map(np.array),
                                    _sampled([np.array([]), np.array([-1.0]), np.array([NAN]), "x", None,
                                              np.ones((2, 2))]))}, check=schedule_check),
    Entry("schedules.table", tl.schedules.table,
          lambda D: {"values": Kind(st.lists(st.floats(0, 2), min_size=1, max_size=5).map(np.array),
                                    _sampled([np.array([]), np.array([-1.0]), np.array([INF]), "x"])),
                     "dt": real(), "interpolation": choice("previous", "linear")}, check=schedule_check),
    Entry("schedules.from_function", from_function,
          lambda D: {"f": Kind(_sampled(list(SCHEDULE_FUNCTIONS))), "t_max": real(), "dt": real(optional=True),
                     "n": count(2, 50), "interpolation": choice("previous", "linear")}, check=schedule_check),
    Entry("schedules.as_schedule", as_schedule,
          lambda D: {"schedule": Kind(_sampled([None, "decay", "scalar", "nan", [1.0, 0.5], np.array([0.5]),
                                                tl.schedules.constant(), tl.schedules.geometric(0.5)]),
                                      _sampled([1.0, "fast", {"kind": "step"}, [-1.0], [NAN]])),
                     "n_steps": count(0, 20, optional=True, huge=False), "step_time": real(),
                     "t_max": real(zero_ok=True, optional=True)},
          check=schedule_check),
    Entry("large_batch.layerwise", tl.large_batch.layerwise,
          lambda D: {"overlaps": overlaps(D["K"], D["M"]), "activation": activation("linear", "erf", "relu"),
                     "lr": real(zero_ok=True), "batch_ratio": real(), "n_steps": count(0, 5, huge=False),
                     "ridge": real(zero_ok=True),
                     "noise": real(zero_ok=True), "spherical": FLAG}, SMALL, examples=max(EXAMPLES // 4, 1)),
    Entry("large_batch.iterate", tl.large_batch.iterate,
          lambda D: {"overlaps": Kind(_overlaps(D["K"], D["M"])), "activation": Kind(_sampled(["erf", "linear"])),
                     "teacher_activation": Kind(_sampled(["erf", "linear"])), "lr": real(zero_ok=True),
                     "batch_ratio": real(),
                     "n_steps": count(0, 5, huge=False), "noise": real(zero_ok=True)}, SMALL,
          examples=max(EXAMPLES // 4, 1)),
    Entry("large_batch.ridge_readout", tl.large_batch.ridge_readout,
          lambda D: {"overlaps": overlaps(D["K"], D["M"]), "activation": activation("linear", "erf", "relu"),
                     "teacher_activation": activation("linear", "erf", "relu"), "ridge": real(zero_ok=True)}, SMALL,
          examples=max(EXAMPLES // 4, 1)),
    Entry("large_batch.simulate_layerwise", tl.large_batch.simulate_layerwise,
          lambda D: {**pair(D, activation("linear", "erf", "relu").good), "lr": real(), "batch_size": count(1, 8),
                     "n_steps": count(0, 5, huge=False), "ridge": real(zero_ok=True),
                     "n_ridge": count(1, 8, optional=True), "noise": real(zero_ok=True), "seed": seed_kind(bits=64)},
          SMALL, examples=max(EXAMPLES // 4, 1)),
    Entry("scan.load", tl.scan.load,
          lambda D: {"definition": Kind(st.builds(scan_definition, _sampled(["ode", "sgd", "sde", "bogus", ""]),
                                                  SCAN_CONSTANTS, SCAN_AXES) | _sampled([None, 1, "", [1], {}]))}),
    Entry("scan.read_toml", toml_text, lambda D: {"text": Kind(TOML_TEXTS)}),
    Entry("scan.make_groups", lambda definition: tl.scan.make_groups(tl.scan.load(definition)),
          lambda D: {"definition": Kind(st.builds(scan_definition, _sampled(["ode", "sde"]), SCAN_CONSTANTS,
                                                  SCAN_AXES))}),
    Entry("scan.run", tiny_scan,
          lambda D: {"lr": Kind(_sampled([[0.5], [0.5, 1.0]]), _sampled([[NAN], ["x"], [-1.0], [[0.5]]])),
                     "d": Kind(_sampled([[100], [10, 1000]]), _sampled([[0], [1.5], ["10"]])),
                     "t_max": Kind(_sampled([0.5, 2.0]), _sampled([NAN, -1.0, "1"]))},
          examples=max(EXAMPLES // 8, 1)),
    Entry("scan.engine_for", tl.scan.engine_for,
          lambda D: {"engine": Kind(_sampled(["ode", "sgd", "descend", "multistart", "math:hypot"]),
                                    _sampled(["bogus", "", "os:system", None, 1, ["ode"]])),
                     "allow_import": Kind(_sampled([False, "math", ["math", "cmath"]]), _sampled([1, [1], None]))}),
    Entry("scan.initial_overlaps", tl.scan.initial_overlaps,
          lambda D: {"config": Kind(st.fixed_dictionaries({"K": _sampled([1, 2]), "M": _sampled([1, 2]),
                                                           "d": _sampled([10, 100, 1]), "seed": _sampled([0, 1]),
                                                           "activation": _sampled(["erf", "linear"])}),
                                    _sampled([{"K": 0, "M": 1, "d": 10, "seed": 0}, {"K": "2"}, None, 1]))}),
    Entry("scan.initial_networks", tl.scan.initial_networks,
          lambda D: {"config": Kind(st.fixed_dictionaries({"K": _sampled([1, 2]), "M": _sampled([1, 2]),
                                                           "d": _sampled([10, 100]), "seed": _sampled([0, 1]),
                                                           "activation": _sampled(["erf", "linear"])}),
                                    _sampled([{"K": -1, "M": 1, "d": 10, "seed": 0}, None, "x"]))}),
    Entry("landscape.from_json[untrusted]", tl.landscape.from_json,
          lambda D: {"text": Kind(st.builds(_mutate_json, st.integers(0, 3).map(lambda i: landscape_documents()[i]),
                                            st.integers(0, 10**6), JSON_VALUES),
                                  _sampled(BAD_DOCUMENTS) | st.builds(_huge_point_document))}),
    Entry("cli.main", cli_main,
          lambda D: {"argv": Kind(_sampled([["info"], ["--help"], ["demo", "--help"], [], ["bogus"],
                                            ["demo", "--quick", "--out"], ["info", "--quick"]])
                                  | _sampled(CLI_OUT).map(lambda o: ["demo", "--quick", "--no-progress", "--out", o]))},
          check=cli_check),
]
ENTRIES = {e.name: e for e in ENTRY_POINTS}


# ------------------------------------------------------------------------------------ child process (the driver)
def _describe(exc: BaseException) -> str:
    """One readable paragraph per distinct failure hypothesis found (with its shrunk falsifying example)."""
    out = []
    for e in getattr(exc, "exceptions", [exc]):  # an ExceptionGroup when there are several distinct failures
        head = f"{type(e).__name__}: {e}"
        origin = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        where = "" if origin is None or isinstance(e, Violation) else (
            f" [at {os.path.basename(origin.filename)}:{origin.lineno}]")
        notes = next(iter(getattr(e, "__notes__", [])), "")  # the (shrunk) failing case
        out.append(f"{head}{where}\n{notes}".strip())
    return "\n---\n".join(out)


def hypothesis_test(entry: Entry) -> Any:
    """The property-based test of one entry point (bounded, reproducible: derandomized, no database)."""

    @settings(max_examples=entry.examples, deadline=None, derandomize=True, database=None, print_blob=False,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate, Phase.shrink])
    @hypothesis.given(case=cases(entry))
    def test(case: tuple[dict[str, Any], str | None]) -> None:
        run_case(entry, *case)

    return test


def drive(names: list[str]) -> int:
    """Run the hypothesis test of each named entry point; one result line per entry point."""
    np.set_printoptions(threshold=20, edgeitems=2)
    for name in names:
        print(f"{MARK} ENTRY {name}", flush=True)
        try:
            hypothesis_test(ENTRIES[name])()
            message = None
        except Exception as exc:  # report every distinct failure, then go on with the next entry point
            message = _describe(exc)
        print(f"{MARK} RESULT {name} {json.dumps(message)}", flush=True)
    return 0


# ---------------------------------------------------------------------------------------- pytest side (parent)
def _signal_name(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit status {rc}"


def run_shard(names: list[str], timeout: float = 300.0) -> dict[str, str | None]:
    """Run entry points in child processes; after a crash or hang, report it and go on in a fresh child."""
    results: dict[str, str | None] = {}
    remaining = list(names)
    while remaining:
        with tempfile.TemporaryFile(mode="w+") as log:
            # a fixed hash seed (FUZZ_HASHSEED to vary it): the cases must not depend on the order of sets of strings
            proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), *remaining], stdout=log,
                                    stderr=subprocess.STDOUT, text=True,
                                    env={**os.environ, "PYTHONHASHSEED": os.environ.get("FUZZ_HASHSEED", "0")})
            try:
                rc: int | str = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc = f"hung (no result after {timeout:.0f} s)"
            log.seek(0)
            lines = log.read().splitlines()
        current, last_case, tail = None, None, []
        for line in lines:
            if line.startswith(f"{MARK} ENTRY "):
                current, last_case, tail = line.split()[2], None, []
            elif line.startswith(f"{MARK} CASE "):
                last_case, tail = line[len(MARK) + 6:], []
            elif line.startswith(f"{MARK} RESULT "):
                _, _, name, message = line.split(" ", 3)
                results[name], current = json.loads(message), None
            else:
                tail = (tail + [line])[-15:]
        if current is not None:
            why = rc if isinstance(rc, str) else _signal_name(rc)
            results[current] = (f"the child process {why} on the case\n  {last_case}\noutput after it:\n"
                                + "\n".join(tail))
        elif len(results) < len(names) and rc != 0:
            for name in remaining:
                results.setdefault(name, f"the child process failed before starting ({rc}):\n" + "\n".join(tail))
        remaining = [n for n in remaining if n not in results]
    return results


@pytest.fixture(scope="module")
def fuzz_results(request: pytest.FixtureRequest) -> dict[str, str | None]:
    """Run the selected entry points in two parallel shards of child processes."""
    selected = [item.callspec.params["name"] for item in request.session.items
                if getattr(item, "originalname", "") == "test_entry_point" and hasattr(item, "callspec")]
    names = [n for n in ENTRIES if n in selected] or list(ENTRIES)
    shards = [names[0::2], names[1::2]]
    results: dict[str, str | None] = {}
    with ThreadPoolExecutor(2) as pool:
        for part in pool.map(run_shard, shards):
            results.update(part)
    return results


# Contract breaches the fuzz suite found outside issue 26's validation scope, reported to the lead: expected to fail
# (not strict: a small budget does not always reach them; remove a line with its fix).
KNOWN_DEFECTS: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=KNOWN_DEFECTS[n], strict=False))
                                  if n in KNOWN_DEFECTS else n for n in ENTRIES])
def test_entry_point(name: str, fuzz_results: dict[str, str | None]) -> None:
    message = fuzz_results.get(name, "not run")
    if message is not None:
        pytest.fail(f"{name}: contract violated\n{message}", pytrace=False)


ISSUE_26_ENTRIES = [n for n in ENTRIES if n.split(".")[0] in ("targets", "sde", "theory", "passage", "schedules",
                                                               "large_batch", "scan") or "untrusted" in n]


@pytest.mark.slow
def test_issue_26_entry_points_with_a_larger_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows added with issue 26 at ten times the default number of examples (FUZZ_EXAMPLES=400)."""
    monkeypatch.setenv("FUZZ_EXAMPLES", os.environ.get("FUZZ_EXAMPLES_SLOW", "400"))
    results = run_shard([n for n in ISSUE_26_ENTRIES if n not in KNOWN_DEFECTS], timeout=1800.0)
    failed = {n: m for n, m in results.items() if m is not None}
    assert not failed, "\n\n".join(f"{n}: {m}" for n, m in failed.items())


# Result objects are checked through the entry points that return them.
RESULT_TYPES = {"Trajectory", "BatchTrajectory", "Interrupted", "Ensemble", "CriticalPoint", "Isotropy",
                "MultistartResult", "RealKFamily", "Crossing", "IsotypicSpectrum",
                "FamilyPoint", "WeightPath", "HermiteTarget", "FunctionTarget", "Target", "IncrementCovariance",
                "FirstPassage", "LayerwiseResult", "Scan", "Group", "Summary", "Engine",
                "StoreLockedError",  # an exception type (raised by scan.run; tests/test_scan_lock.py)
                "DeviceUnavailable",  # an exception type (device="cuda"; tests/test_gpu_*.py)
                "Status"}  # the status enumeration of every result (tests/test_vocabulary.py)
# Not fuzzed directly: scan.open_dataset reads stores (their safety and integrity: tests/test_scan_safety.py,
# tests/test_scan_store.py).
NOT_FUZZED = {"open_dataset"}


def test_table_covers_public_api() -> None:
    """Every public function and class of the package has a row in ENTRY_POINTS."""
    public = set()
    for m in (tl, tl.activations, tl.kernels, tl.networks, tl.population, tl.ode, tl.sgd, tl.landscape, cli,
              tl.targets, tl.sde, tl.theory, tl.passage, tl.schedules, tl.large_batch, tl.scan):
        names = getattr(m, "__all__", [n for n in vars(m) if not n.startswith("_")])
        public |= {n for n in names if callable(getattr(m, n)) and getattr(getattr(m, n), "__module__", "")
                   .startswith(m.__name__)}
    rows = {part for name in ENTRIES for part in name.split(".")}
    assert public - rows - RESULT_TYPES - NOT_FUZZED == set(), "public entry points without a row in ENTRY_POINTS"


if __name__ == "__main__":
    sys.exit(drive(sys.argv[1:]))
