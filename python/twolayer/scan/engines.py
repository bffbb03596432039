"""The engines a scan runs, each as a table of its parameters (default, check) and one function that runs a
*group* of configurations — configurations that differ only in what one core call takes per member — in one
call, returning the group's arrays (configuration first).

* ``"ode"``: :func:`twolayer.ode.integrate_batch`; per member: the initial overlaps (from ``d``, ``init``,
  ``seed``, ``q0``, ``m0``, ``scaling``), ``lr``, ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol``, and the
  biases: ``bias`` (the students', a number for every unit or a list of K), ``teacher_bias`` (a number or a list
  of M) and ``lr_bias`` (scan :func:`twolayer.ode.integrate_batch`'s runs with biases; a scan that names any of
  the three stores ``bias`` (t, student), ``bias_final`` and ``teacher_bias`` (teacher));
  ``device="cuda"`` integrates the groups on the GPU (the CUDA backend, where built and present).
  ``regime="large_batch"`` (the large-batch map, :mod:`twolayer.large_batch`) takes ``batch_ratio``
  (alpha = n_b / d > 0, may be scanned) and ``steps`` (iterations; both required there, refused by the other
  regimes) instead of ``t_max`` and the solver options, and runs one :func:`twolayer.ode.integrate` per
  configuration (the map has no batched core call; an iteration is cheap); ``t`` is the iteration 0, 1, ...,
  ``steps`` (a run that diverged early is padded with NaN), and it cannot be mixed with the other regimes in one
  scan (another clock). It takes the biases too (the committee map with student and teacher biases, ``lr_bias``),
  stored as in the other regimes.
* ``"sgd"``: :func:`twolayer.sgd.simulate` with ``seeds`` runs per configuration (the ``run`` dimension); per
  run: ``lr``, ``lr_readout``, ``noise``, ``lr_bias`` (the configurations of a group share the initial networks,
  with their ``bias`` and ``teacher_bias`` as in the ODE engine; a scan that names any of the three bias parameters
  stores ``bias`` (member, t, student) and ``teacher_bias`` (teacher)).
* ``"dmft"``: :func:`twolayer.dmft.solve` (reused batches, d -> infinity), one call per configuration, on an
  orthonormal committee teacher of ``M`` units (``teacher_activation``, readout 1 or 1/M) from Q(0) = I, M(0) = 0
  with the student readout 1 (``readout="sum"``) or 1/K: ``alpha``, ``lr``, ``ridge``, ``noise``, ``n_steps``,
  ``n_mc``, ``n_groups``, ``seed``, and the biases ``bias``, ``teacher_bias``, ``lr_bias`` (as in the ODE engine;
  a scan that names one stores ``bias`` (step, student), its ``bias_se``, and ``teacher_bias``); records over
  ``step`` with Monte Carlo standard errors (``<name>_se``).
* ``"full_batch"``: :func:`twolayer.full_batch.simulate` (the same process at finite ``d``, ``seeds`` training
  sets, the ``run`` dimension), same teacher (orthonormal rows from ``seed``) and parameters, plus ``lr_readout``
  (the biases stored over (member, step, student)).
* ``"descend"``: :func:`twolayer.population.descend`, ``"multistart"``: :func:`twolayer.landscape.multistart`
  (one call per configuration: the core has no batch of these).
* a function of yours: ``function(**config) -> {name: array}``, once per configuration; given as the callable
  itself, or as ``"package.module:function"`` only where its module is trusted explicitly (``allow_import``, see
  :func:`engine_for`): a name read from a config or a store is never imported otherwise, and a store's recorded
  engine is only text (:func:`recorded_engine`).

Initial conditions (``ode``, ``sgd``, ``descend``) are derived from ``(K, M, d, init, seed)``: the student and
teacher of :func:`twolayer.networks.teacher_student` (``init`` "gaussian" or "orthogonal", activations,
``scaling``, ``readout``; with ``spherical=True`` every student and teacher row is scaled onto the sphere
``|w|^2 = s``, as in Arnaboldi et al.), and their overlaps for the ODE; the ODE also takes ``init="plateau"``:
:func:`twolayer.ode.plateau_overlaps` ``(K, M, q0, m0, seed)``. :func:`initial_overlaps` and
:func:`initial_networks` give a configuration's start, so that a scan can be checked against single calls.
"""

from __future__ import annotations

import importlib
import inspect
import math
import operator
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .._validation import INT32_MAX, boolean, choice, integer, positive, run_indices, seed_arg, suggest
from .._validation import integers as _integers
from ..activations import check_activation
from ..landscape.multistart import multistart
from ..networks import Network, random_weights
from ..ode import integrate, integrate_batch, plateau_overlaps
from ..overlaps import BatchOverlaps, Overlaps
from ..population import descend
from ..sgd import simulate

__all__ = ["Engine", "Part", "engine_for", "initial_networks", "initial_overlaps", "recorded_engine"]

REQUIRED = object()


@dataclass
class Part:
    """A group's results: ``data`` name -> (dims after the configuration axis, array (n_configs, ...)),
    ``coords`` name -> (dims, array) shared by the group (e.g. the output times ``t``).

    Attributes
    ----------
    data : dict
        name -> (dims, array with the configuration first).
    coords : dict
        name -> (dims, array) shared by the group.

    Examples
    --------
    >>> part = tl.scan.engines.Part({"loss": ((), np.zeros(2))}, {"t": (("t",), np.arange(3.0))})
    >>> part.data["loss"][1].shape, part.coords["t"][0]
    ((2,), ('t',))
    """

    data: dict[str, tuple[tuple[str, ...], NDArray[Any]]]
    coords: dict[str, tuple[tuple[str, ...], NDArray[Any]]] = field(default_factory=dict)


# ------------------------------------------------------------------------------------------ parameter checks


def _pos(x: Any, n: str) -> Any:
    return positive(x, n)


def _nonneg(x: Any, n: str) -> Any:
    return positive(x, n, allow_zero=True)


def _int(lo: int) -> Callable[[Any, str], Any]:
    return lambda x, n: integer(x, n, lo, INT32_MAX)


def _choice(*names: str) -> Callable[[Any, str], Any]:
    return lambda x, n: choice(x, n, names)


def _act(x: Any, n: str) -> Any:
    return check_activation(x, n)


def _seeds(x: Any, n: str) -> Any:
    if isinstance(x, list):
        return _integers(x, n, 0, 2**32 - 1)
    return integer(x, n, 1, 2**32 - 1)


_Params = dict[str, tuple[Any, Any]]
_NETWORK: _Params = {
    "K": (2, _int(1)), "M": (2, _int(1)), "d": (1000, _int(1)), "init": ("gaussian", None), "seed": (0, seed_arg),
    "activation": ("erf", _act), "teacher_activation": (None, _act), "scaling": ("sqrt_d", _choice("sqrt_d", "none")),
    "readout": ("sum", _choice("sum", "mean")),
}
_RATES: _Params = {"lr": (REQUIRED, _nonneg), "lr_readout": (0.0, _nonneg), "noise": (0.0, _nonneg)}
_STOP: _Params = {"risk_tol": (None, _pos), "risk_rtol": (None, _pos)}


@dataclass(frozen=True)
class Engine:
    """An engine: its ``params`` (name -> (default or REQUIRED, check)), the parameters that may differ inside
    one group (``batched``; None: everything but ``shape_keys``), its default ``group_size``, and ``run``, which
    computes one group (list of full configurations) into a :class:`Part`.

    Attributes
    ----------
    name : str
        ``"ode"``, ``"sgd"``, ``"descend"``, ``"multistart"`` or ``"module:function"``.
    params : dict
        name -> (default or REQUIRED, check(value, where) or None).
    run : callable
        list of full configurations -> :class:`Part`.
    group_size : int
        Default most configurations per group.
    batched : frozenset of str or None
        Parameters that may differ inside a group (None: all but ``shape_keys``).
    shape_keys : tuple of str
        Parameters that set array shapes.
    open_params : bool
        Any parameter name is accepted (a function with ``**kwargs``).
    check_together : callable or None
        ``(given, values)`` -> None or ValueError: rules between parameters (``given``: name -> where it is
        given, ``values``: name -> every value it takes), after the per-value checks.
    function : callable or None
        The user function of a function engine (None for the package's engines).
    renamed : dict
        Old parameter names -> their new spelling (docs: conventions, "Vocabulary"): accepted with a
        ``DeprecationWarning`` for one release.

    Examples
    --------
    >>> eng = tl.scan.engines.engine_for("ode")
    >>> eng.name, eng.complete({"lr": 0.5})["K"]
    ('ode', 2)
    >>> part = eng.run([eng.complete({"K": 1, "M": 1, "d": 10, "lr": 0.5, "t_max": 1.0, "n_records": 3})])
    >>> part.data["risk"][1].shape
    (1, 3)
    """

    name: str
    params: Mapping[str, tuple[Any, Any]]  # (default or REQUIRED, check(value, where) or None)
    run: Callable[[list[dict[str, Any]]], Part]
    group_size: int
    batched: frozenset[str] | None = None
    shape_keys: tuple[str, ...] = ()
    open_params: bool = False  # a function with **kwargs: any name is accepted
    check_together: Callable[[Mapping[str, str], Mapping[str, list[Any]]], None] | None = None
    function: Callable[..., Any] | None = None
    renamed: Mapping[str, str] = field(default_factory=dict)

    @property
    def portable(self) -> Any:
        """What a worker process rebuilds this engine from with :func:`engine_for` (no import by name): the
        package engine's name, the user function (pickled by reference), or the engine itself."""
        if self.function is not None:
            return self.function
        return self.name if ENGINES.get(self.name) is self else self

    def check_names(self, given: Mapping[str, str]) -> None:
        """Unknown parameter names (with the closest known one) and missing required ones raise ValueError."""
        known = list(self.params)
        if not self.open_params:
            for name, where in given.items():
                if name not in self.params:
                    raise ValueError(f"{where}.{name}: unknown parameter of engine {self.name!r}{suggest(name, known)}"
                                     f" (known: {', '.join(known)})")
        for name, (default, _) in self.params.items():
            if default is REQUIRED and name not in given:
                raise ValueError(f"{name}: engine {self.name!r} needs it (give it in constants or as an axis)")

    def check_values(self, constants: Mapping[str, Any], axes: Mapping[str, tuple[str, list[Any]]]) -> None:
        """Every given value through its parameter's check; ``axes``: name -> (where, values). Errors name
        ``constants.x``, ``axes.x[i]`` or ``zip.dim.x[i]``."""
        for name, value in constants.items():
            self._check(name, value, f"constants.{name}")
        for name, (where, values) in axes.items():
            for i, value in enumerate(values):
                self._check(name, value, f"{where}[{i}]")

    def check_combination(self, given: Mapping[str, str], values: Mapping[str, list[Any]]) -> None:
        """Rules between parameters (e.g. the ODE's ``steps`` only with ``regime="large_batch"``); ``given``:
        name -> where (``constants``, ``axes``, ``zip.dim``), ``values``: name -> every value it takes."""
        if self.check_together is not None:
            self.check_together(given, values)

    def _check(self, name: str, value: Any, where: str) -> None:
        spec = self.params.get(name)
        if spec is not None and spec[1] is not None:
            spec[1](value, where)

    def complete(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """The configuration with every default filled in."""
        out = {k: d for k, (d, _) in self.params.items() if d is not REQUIRED}
        out.update(config)
        return out

    def group_names(self, config: Mapping[str, Any]) -> tuple[str, ...]:
        """The parameters whose values must agree inside one group (for configurations with these keys)."""
        if self.batched is None:
            return self.shape_keys
        return tuple(sorted(k for k in config if k not in self.batched))

    def group_key(self, config: Mapping[str, Any], names: tuple[str, ...] | None = None) -> tuple[Any, ...]:
        """Configurations with equal keys may run in one call (``names``: :meth:`group_names`, if known)."""
        return tuple(_hashable(config.get(k)) for k in (self.group_names(config) if names is None else names))


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


# ------------------------------------------------------------------------------------------ initial conditions


def _network_config(config: Mapping[str, Any]) -> dict[str, Any]:
    c = {k: d for k, (d, _) in _NETWORK.items()}
    c.update({k: v for k, v in config.items() if k in _NETWORK})
    c["spherical"] = bool(config.get("spherical", False))
    return c


def _checked_config(config: Any, params: Mapping[str, tuple[Any, Any]]) -> Mapping[str, Any]:
    """``config`` (a dict) with every value of a parameter in ``params`` through that parameter's check (errors
    name ``config.x``; None passes where it is the default); other keys are left to their engine."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config: expected a dict of parameters, got {type(config).__name__}")
    for name, value in config.items():
        spec = params.get(name)
        if spec is not None and spec[1] is not None and not (value is None and spec[0] is None):
            spec[1](value, f"config.{name}")
    return config


def _weights(c: Mapping[str, Any]) -> tuple[NDArray[np.float64], NDArray[np.float64], float]:
    """Student and teacher weight rows of a configuration, drawn exactly as
    :func:`twolayer.networks.teacher_student` draws them (one (K + M, d) block from ``default_rng(seed)``), put on
    the sphere ``|w|^2 = s`` where ``spherical``; and s."""
    K, d = c["K"], c["d"]
    rng = np.random.default_rng(c["seed"])
    if c["init"] == "gaussian":  # random_weights' Gaussian draw, without its per-call checks (done by the Scan)
        W = rng.standard_normal((K + c["M"], d))
    else:
        W = random_weights(K + c["M"], d, c["init"], rng, c["scaling"])
    s = float(d) if c["scaling"] == "sqrt_d" else 1.0
    if c["spherical"]:  # Arnaboldi et al.: student and teacher rows on the sphere |w|^2 = s
        W = W * (np.sqrt(s) / np.linalg.norm(W, axis=1))[:, None]
    return W[:K], W[K:], s


def initial_networks(config: Mapping[str, Any]) -> tuple[Any, Any]:
    """(student, teacher) of a configuration: :func:`twolayer.networks.teacher_student` with its K, M, d,
    activation, teacher_activation, init, seed, scaling, readout (defaults as in the ``ode``/``sgd`` engines) and
    biases ``bias``, ``teacher_bias`` (zero when not given); with ``spherical=True`` every row scaled onto the sphere
    ``|w|^2 = s``.

    Parameters
    ----------
    config : dict
        A configuration (missing parameters take their defaults).

    Returns
    -------
    student, teacher : Network

    Examples
    --------
    >>> student, teacher = tl.scan.initial_networks({"K": 2, "M": 1, "d": 50})
    >>> student.K, teacher.K, student.d
    (2, 1, 50)
    """
    c = _network_config(_checked_config(config, {k: _SGD_PARAMS[k] for k in (*_NETWORK, "spherical", "bias",
                                                                               "teacher_bias")}))
    W, Wt, _ = _weights(c)
    act = c["activation"]
    return (Network(W, None, act, c["scaling"], c["readout"], bias=_units(config.get("bias") or 0.0, c["K"], "bias")),
            Network(Wt, None, c["teacher_activation"] or act, c["scaling"], c["readout"],
                    bias=_units(config.get("teacher_bias") or 0.0, c["M"], "teacher_bias")))


def initial_overlaps(config: Mapping[str, Any]) -> Any:
    """The :class:`~twolayer.Overlaps` an ``ode`` configuration starts from (see the module docstring; with its
    ``bias`` and ``teacher_bias``, zero when not given); for
    ``init`` "gaussian"/"orthogonal" without ``spherical`` they equal
    ``Overlaps.from_networks(*initial_networks(config))`` bit for bit.

    Parameters
    ----------
    config : dict
        An ``ode`` configuration (missing parameters take their defaults).

    Returns
    -------
    Overlaps

    Examples
    --------
    >>> config = {"K": 2, "M": 1, "d": 50}
    >>> ov = tl.scan.initial_overlaps(config)
    >>> ov.Q.shape, bool(np.array_equal(ov.M, tl.Overlaps.from_networks(*tl.scan.initial_networks(config)).M))
    ((2, 2), True)
    """
    c = ENGINES["ode"].complete(_checked_config(config, ENGINES["ode"].params))
    Q, M, P, a, v = _overlap_arrays(c)
    act = config.get("activation", "erf")
    biases = _group_biases([c], len(a), len(v))[0]
    return Overlaps(Q, M, P, a, v, act, config.get("teacher_activation") or act, **biases)


def _overlap_arrays(c: Mapping[str, Any]) -> tuple[NDArray[np.float64], ...]:
    if c["init"] == "plateau":
        ov = plateau_overlaps(c["K"], c["M"], c["q0"], c["m0"], c["seed"])
        return ov.Q, ov.M, ov.P, ov.a, ov.v
    W, Wt, s = _weights(c)
    # the products of overlaps.gram (W W^T / s), unchecked here: BatchOverlaps checks the whole stack at once
    Q, P = W @ W.T / s, Wt @ Wt.T / s
    if c["spherical"]:  # |w_i|^2 = s up to rounding: exactly on the sphere
        np.fill_diagonal(Q, 1.0)
        np.fill_diagonal(P, 1.0)
    mean = c["readout"] == "mean"
    a = np.full(c["K"], 1.0 / c["K"] if mean else 1.0)
    v = np.full(c["M"], 1.0 / c["M"] if mean else 1.0)
    return Q, W @ Wt.T / s, P, a, v


# ------------------------------------------------------------------------------------------ ode


def _per(configs: list[dict[str, Any]], name: str, none: float = 0.0) -> NDArray[np.float64]:
    values = list(map(operator.itemgetter(name), configs))
    return np.array([none if x is None else x for x in values] if None in values else values, dtype=np.float64)


_START_KEYS = ("K", "M", "d", "init", "seed", "q0", "m0", "scaling", "readout", "spherical")


class _StartCache:
    """The initial overlaps of recent starts, by their :data:`_START_KEYS` values: an ``lr x seed`` grid derives
    each seed's networks once per process, not once per group. Bounded by ``max_floats`` (then emptied)."""

    def __init__(self, max_floats: int = 4_000_000) -> None:
        self.max_floats, self.floats = max_floats, 0
        self.arrays: dict[tuple[Any, ...], tuple[NDArray[np.float64], ...]] = {}

    def get(self, key: tuple[Any, ...], config: Mapping[str, Any]) -> tuple[NDArray[np.float64], ...]:
        found = self.arrays.get(key)
        if found is None:
            found = _overlap_arrays(config)
            size = sum(x.size for x in found)
            if self.floats + size > self.max_floats:
                self.arrays.clear()
                self.floats = 0
            self.arrays[key] = found
            self.floats += size
        return found


_STARTS = _StartCache()


def _start_stack(configs: list[dict[str, Any]]) -> tuple[NDArray[np.float64], ...]:
    """(Q, M, P, a, v) of a group stacked along the configurations: each distinct start derived once (cached
    across groups), stacked once, then spread to its configurations by one gather."""
    index: dict[tuple[Any, ...], int] = {}
    firsts: list[dict[str, Any]] = []
    inverse = np.empty(len(configs), dtype=np.intp)
    start_of = operator.itemgetter(*_START_KEYS)
    for i, c in enumerate(configs):
        key = start_of(c)
        j = index.get(key)
        if j is None:
            j = index[key] = len(firsts)
            firsts.append(c)
        inverse[i] = j
    unique = [_STARTS.get(k, c) for k, c in zip(index, firsts, strict=True)]
    stacked = tuple(np.stack([u[f] for u in unique]) for f in range(5))
    if len(unique) == len(configs):  # every start distinct: in order already
        return stacked
    return tuple(x[inverse] for x in stacked)


_BIAS_KEYS = ("bias", "teacher_bias", "lr_bias")


def _units(value: Any, n: int, name: str) -> list[float]:
    """A configuration's biases of ``n`` units: a number for every unit, or a list of ``n`` (ValueError naming
    ``name`` otherwise)."""
    if isinstance(value, list):
        if len(value) != n:
            raise ValueError(f"{name}: expected a number or a list of {n} (one per unit), got a list of "
                             f"{len(value)}")
        return [float(x) for x in value]
    return [float(value)] * n


def _bias(x: Any, n: str) -> Any:
    """A bias parameter: a finite number, or a non-empty list of them (one per unit)."""
    values = x if isinstance(x, list) else [x]
    if not values:
        raise ValueError(f"{n}: expected a number or a list of one per unit, got an empty list")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            where = f"{n}[{i}]" if isinstance(x, list) else n
            raise ValueError(f"{where}: expected a finite number, got {v!r}")
    return x


def _biased(configs: list[dict[str, Any]]) -> bool:
    """Whether a group records biases: its scan names a bias parameter (every configuration then has it)."""
    return any(configs[0].get(k) is not None for k in _BIAS_KEYS)


def _group_biases(configs: list[dict[str, Any]], K: int, Mt: int) -> tuple[dict[str, list[float]], ...]:
    """Per configuration, its ``bias`` (K) and ``teacher_bias`` (Mt) as lists (zeros where not given)."""
    return tuple({"bias": _units(c.get("bias") or 0.0, K, "bias"),
                  "teacher_bias": _units(c.get("teacher_bias") or 0.0, Mt, "teacher_bias")} for c in configs)


def _recorded_bias(bias: NDArray[np.float64] | None, a: NDArray[np.float64]) -> NDArray[np.float64]:
    """The student biases a group with biases records: ``bias``, or, where its runs had none (None), zeros shaped
    as the recorded readout ``a`` (NaN where ``a`` is, after a stop, as Q)."""
    return np.where(np.isnan(a), np.nan, 0.0) if bias is None else bias


def _run_ode(configs: list[dict[str, Any]]) -> Part:

    c0 = configs[0]
    if c0["regime"] == "large_batch":
        return _run_large_batch(configs)
    Q, M, P, a, v = _start_stack(configs)
    biased = _biased(configs)
    biases: dict[str, Any] = {}
    if biased:
        per = _group_biases(configs, a.shape[1], v.shape[1])
        biases = {k: [b[k] for b in per] for k in ("bias", "teacher_bias")}
    stack = BatchOverlaps(Q, M, P, a, v, _label=lambda b, f: f"configuration {b} of the group: {f}", **biases)
    act = c0["activation"]
    res = integrate_batch(
        stack, act, c0["teacher_activation"] or act, lr=_per(configs, "lr"), lr_readout=_per(configs, "lr_readout"),
        noise=_per(configs, "noise"), regime=c0["regime"], spherical=c0["spherical"], t_max=c0["t_max"],
        method=c0["method"], dt=c0["dt"], rtol=c0["rtol"], atol=c0["atol"], readout=c0["readout"],
        risk_tol=_per(configs, "risk_tol"), risk_rtol=_per(configs, "risk_rtol"), n_records=c0["n_records"],
        h_max=c0["h_max"], max_steps=c0["max_steps"], n_threads=c0["n_threads"], device=c0["device"],
        lr_bias=_per(configs, "lr_bias"))
    data: dict[str, tuple[tuple[str, ...], NDArray[Any]]] = {
        "risk": (("t",), res.risk), "Q": (("t", "student", "student2"), res.Q),
        "M": (("t", "student", "teacher"), res.M),
        "a": (("t", "student"), res.a), "P": (("teacher", "teacher2"), np.ascontiguousarray(res.P)),
        "v": (("teacher",), np.ascontiguousarray(res.v)),
    }
    for name in ("status", "message", "stop_time", "t_final", "final_risk", "n_recorded", "n_rhs", "n_steps",
                 "n_rejected"):
        data[name] = ((), getattr(res, name))
    if biased:
        data["bias"] = (("t", "student"), _recorded_bias(res.bias, res.a))
        data["bias_final"] = (("student",), _recorded_bias(res.bias_final, res.a_final))
        data["teacher_bias"] = (("teacher",), np.ascontiguousarray(stack.teacher_bias))
    return Part(data, {"t": (("t",), res.t)})


def _run_large_batch(configs: list[dict[str, Any]]) -> Part:
    """One :func:`twolayer.ode.integrate` (``regime="large_batch"``) per configuration of a group sharing
    ``n_steps``; rows past a divergence are NaN, so every configuration has ``t = 0, 1, ..., n_steps``. With
    biases the map takes the student's and the teacher's (``lr_bias``: trained) and the group records them as
    :func:`_run_ode` does."""
    Q, M, P, a, v = _start_stack(configs)
    T = configs[0]["n_steps"] + 1
    biased = _biased(configs)
    biases = _group_biases(configs, a.shape[1], v.shape[1])
    rows: list[dict[str, tuple[tuple[str, ...], Any]]] = []
    for i, c in enumerate(configs):
        act = c["activation"]
        t_act = c["teacher_activation"] or act
        tr = integrate(Overlaps(Q[i], M[i], P[i], a[i], v[i], act, t_act, **biases[i]), act, t_act, lr=c["lr"],
                       noise=c["noise"], regime="large_batch", spherical=c["spherical"], batch_ratio=c["batch_ratio"],
                       n_steps=c["n_steps"], n_threads=c["n_threads"], lr_bias=c["lr_bias"] or 0.0)
        if biased:
            b = _recorded_bias(tr.bias, tr.a)
            final = b[-1] if len(b) else np.full(a.shape[1], np.nan)  # (a start that diverged has no rows)
            rows.append({"bias": (("t", "student"), _pad_rows(b, T)), "bias_final": (("student",), final),
                         "teacher_bias": (("teacher",), np.array(biases[i]["teacher_bias"]))})
        else:
            rows.append({})
        rows[-1].update({"risk": (("t",), _pad_rows(tr.risk, T)),
                     "Q": (("t", "student", "student2"), _pad_rows(tr.Q, T)),
                     "M": (("t", "student", "teacher"), _pad_rows(tr.M, T)),
                     "a": (("t", "student"), _pad_rows(tr.a, T)),
                     "P": (("teacher", "teacher2"), P[i]), "v": (("teacher",), v[i]),
                     "status": ((), np.array(tr.status)), "message": ((), np.array(tr.message)),
                     "stop_time": ((), np.array(tr.stop_time)), "n_recorded": ((), np.array(len(tr.t))),
                     "n_steps": ((), np.array(tr.meta["n_steps"]))})
    return Part(_stack_parts(rows), {"t": (("t",), np.arange(T, dtype=np.float64))})


def _pad_rows(x: NDArray[np.float64], n: int) -> NDArray[np.float64]:
    """``x`` with NaN rows appended up to ``n`` rows (a run that stopped early)."""
    if len(x) == n:
        return x
    out = np.full((n, *x.shape[1:]), np.nan)
    out[:len(x)] = x
    return out


_SOLVER_KEYS = ("t_max", "method", "dt", "rtol", "atol", "n_records", "h_max", "max_steps", "risk_tol", "risk_rtol",
                "device")
_LARGE_BATCH_KEYS = ("batch_ratio", "n_steps")


def _bias_sizes(given: Mapping[str, str], values: Mapping[str, list[Any]]) -> None:
    """A list of biases has one per unit: ``bias`` K entries, ``teacher_bias`` M entries."""
    for name, units in (("bias", "K"), ("teacher_bias", "M")):
        sizes = set(values.get(units, [_NETWORK[units][0]]))
        for x in values.get(name, []):
            if isinstance(x, list) and len(x) not in sizes:
                raise ValueError(f"{given[name]}.{name}: a list of {len(x)} biases, but {units} is "
                                 f"{' or '.join(map(str, sorted(sizes)))} (expected a number or one per unit)")


def _ode_together(given: Mapping[str, str], values: Mapping[str, list[Any]]) -> None:
    """The ODE's rules between parameters: the bias lists' lengths (:func:`_bias_sizes`); ``regime="large_batch"``
    needs ``batch_ratio`` and ``n_steps``, takes none of the time-integration options and a zero ``lr_readout``,
    and is not mixed with the other regimes; the other regimes need ``t_max`` and take neither ``batch_ratio`` nor
    ``n_steps``."""
    _bias_sizes(given, values)
    regimes = list(values.get("regime", ["online"]))
    where = given.get("regime", "constants")
    if "large_batch" in regimes:
        if len(regimes) > 1:
            raise ValueError(f"{where}.regime: 'large_batch' cannot be scanned together with "
                             f"{', '.join(repr(r) for r in regimes if r != 'large_batch')} (its clock counts "
                             "iterations, not t = steps / d): run separate scans")
        for name in _LARGE_BATCH_KEYS:
            if name not in given:
                raise ValueError(f"{name}: engine 'ode' with regime 'large_batch' needs it (give it in constants or "
                                 "as an axis)")
        for name in _SOLVER_KEYS:
            if name in given:
                raise ValueError(f"{given[name]}.{name}: regime 'large_batch' does not take it (it iterates the map "
                                 "`steps` times)")
        if any(x != 0 for x in values.get("lr_readout", [])):
            raise ValueError(f"{given['lr_readout']}.lr_readout: regime 'large_batch' keeps the second layer fixed "
                             "(expected 0)")
        return
    if "t_max" not in given:
        raise ValueError(f"t_max: engine 'ode' needs it for regime {regimes[0]!r} (give it in constants or as an axis)")
    for name in _LARGE_BATCH_KEYS:
        if name in given:
            raise ValueError(f"{given[name]}.{name}: only regime 'large_batch' takes it (this scan's regime: "
                             f"{regimes[0]!r})")


_ODE_PARAMS: _Params = {
    **_NETWORK, "init": ("gaussian", _choice("gaussian", "orthogonal", "plateau")), "q0": (0.25, _pos),
    "m0": (1e-3, None), **_RATES, **_STOP,
    "regime": ("online", _choice("online", "gradient_flow", "large_batch")),
    "spherical": (False, boolean), "t_max": (None, _pos), "method": ("adaptive", _choice("euler", "rk4",
                                                                                           "adaptive")),
    "dt": (0.01, _pos), "rtol": (1e-8, _nonneg), "atol": (1e-10, _nonneg), "n_records": (101, _int(2)),
    "h_max": (None, _pos), "max_steps": (100_000_000, lambda x, n: integer(x, n, 1)),
    "n_threads": (None, _int(1)), "batch_ratio": (None, _pos), "n_steps": (None, _int(1)),
    "device": ("cpu", _choice("cpu", "cuda")),
    "bias": (None, _bias), "teacher_bias": (None, _bias), "lr_bias": (None, _nonneg),
}

# ------------------------------------------------------------------------------------------ sgd


def _run_sgd(configs: list[dict[str, Any]]) -> Part:
    c0 = configs[0]
    student, teacher = initial_networks(c0)
    ids = run_indices(c0["seeds"]).tolist()
    R, n = len(ids), len(configs)

    def per_run(name: str) -> NDArray[np.float64]:
        return np.repeat(_per(configs, name), R)

    biased = _biased(configs)
    ens = simulate(student, teacher, lr=per_run("lr"), lr_readout=per_run("lr_readout"), noise=per_run("noise"),
                   lr_bias=per_run("lr_bias"),
                   batch_size=c0["batch_size"], spherical=c0["spherical"], t_max=c0["t_max"], seed=c0["seed"],
                   seeds=ids * n, n_samples=c0["n_samples"], shuffle=c0["shuffle"],
                   train_first_layer=c0["train_first_layer"], n_records=c0["n_records"], keep_weights=False,
                   n_threads=c0["n_threads"], risk_tol=c0["risk_tol"], risk_rtol=c0["risk_rtol"])

    def grid(x: NDArray[Any]) -> NDArray[Any]:
        return x.reshape(n, R, *x.shape[1:])

    member = ("member",)
    data: dict[str, tuple[tuple[str, ...], NDArray[Any]]] = {
        "risk": (("member", "t"), grid(ens._padded("risk"))), "Q": (("member", "t", "student", "student2"),
                                                                    grid(ens._padded("Q"))),
        "M": (("member", "t", "student", "teacher"), grid(ens._padded("M"))),
        "a": (("member", "t", "student"), grid(ens._padded("a"))),
        "status": (member, grid(np.array(ens.status, dtype=str))), "stop_time": (member, grid(ens.stop_time)),
    }
    if biased:  # the group shares its networks: one teacher_bias per configuration
        data["bias"] = (("member", "t", "student"),
                        grid(_recorded_bias(ens._padded("bias") if ens.runs[0].bias is not None else None,
                                            ens._padded("a"))))
        data["teacher_bias"] = (("teacher",), np.tile(teacher.bias, (n, 1)))
    return Part(data, {"t": (("t",), ens.t), "run_id": (member, np.array(ids, dtype=np.int64))})


_SGD_PARAMS: _Params = {
    **_NETWORK, "init": ("gaussian", _choice("gaussian", "orthogonal")), **_RATES,
    "risk_tol": (None, _pos), "risk_rtol": (None, _pos), "batch_size": (1, _int(1)), "spherical": (False, boolean),
    "t_max": (REQUIRED, _pos), "seeds": (1, _seeds), "n_samples": (None, lambda x, n: integer(x, n, 1, 2**32 - 1)),
    "shuffle": (True, boolean), "train_first_layer": (True, boolean), "n_records": (101, _int(2)),
    "n_threads": (None, _int(1)),
    "bias": (None, _bias), "teacher_bias": (None, _bias), "lr_bias": (None, _nonneg),
}

# ------------------------------------------------------------------------------------------ dmft, full_batch


def _reuse_problem(c: Mapping[str, Any], d: int) -> tuple[Any, NDArray[np.float64]]:
    """The orthonormal committee teacher (d, seed, with its ``teacher_bias``) and the student readout of a
    dmft/full_batch configuration."""
    from ..networks import Network

    mean = c["readout"] == "mean"
    rng = np.random.Generator(np.random.Philox(key=[c["seed"], 3]))
    Wt = np.linalg.qr(rng.standard_normal((d, c["M"])))[0].T * math.sqrt(d)
    teacher = Network(Wt, np.full(c["M"], 1.0 / c["M"] if mean else 1.0), c["teacher_activation"] or c["activation"],
                      bias=_units(c.get("teacher_bias") or 0.0, c["M"], "teacher_bias"))
    return teacher, np.full(c["K"], 1.0 / c["K"] if mean else 1.0)


def _run_dmft(configs: list[dict[str, Any]]) -> Part:
    from ..dmft import solve

    rows: list[dict[str, tuple[tuple[str, ...], Any]]] = []
    for c in configs:
        teacher, a = _reuse_problem(c, max(c["M"], 1))
        r = solve(teacher, activation=c["activation"], a=a, alpha=c["alpha"], lr=c["lr"], ridge=c["ridge"],
                  noise=c["noise"], n_steps=c["n_steps"], n_mc=c["n_mc"], n_groups=c["n_groups"], seed=c["seed"],
                  n_threads=c["n_threads"], bias=_units(c.get("bias") or 0.0, c["K"], "bias"),
                  lr_bias=c.get("lr_bias") or 0.0)
        T = c["n_steps"] + 1
        row: dict[str, tuple[tuple[str, ...], Any]] = {"status": ((), np.array(r.status))}
        curves = (("M", ("step", "student", "teacher")), ("Q", ("step", "student", "student2")),
                  ("train_risk", ("step",)), ("test_risk", ("step",)))
        if _biased(configs):  # as the ODE engine: every member of a scan that names a bias parameter
            zero = np.zeros((len(r.M), c["K"]))  # a run without biases: zero and fixed (no Monte Carlo error)
            row["bias"] = (("step", "student"), _pad_rows(zero if r.bias is None else r.bias, T))
            row["bias_se"] = (("step", "student"), _pad_rows(zero if r.bias is None else r.se["bias"], T))
            row["teacher_bias"] = (("teacher",), teacher.bias)
        for name, dims in curves:
            row[name] = (dims, _pad_rows(getattr(r, name), T))
            row[name + "_se"] = (dims, _pad_rows(r.se[name], T))
        rows.append(row)
    return Part(_stack_parts(rows), {"step": (("step",), np.arange(configs[0]["n_steps"] + 1))})


def _run_full_batch(configs: list[dict[str, Any]]) -> Part:
    from ..full_batch import simulate
    from ..networks import Network

    rows: list[dict[str, tuple[tuple[str, ...], Any]]] = []
    for c in configs:
        teacher, a = _reuse_problem(c, c["d"])
        student = Network.random(c["K"], c["d"], c["activation"], seed=c["seed"])
        student = Network(student.W, a, c["activation"], bias=_units(c.get("bias") or 0.0, c["K"], "bias"))
        r = simulate(student, teacher, alpha=c["alpha"], lr=c["lr"], ridge=c["ridge"], noise=c["noise"],
                     n_steps=c["n_steps"], seeds=c["seeds"], seed=c["seed"], project_init=True,
                     lr_readout=c["lr_readout"], lr_bias=c.get("lr_bias") or 0.0)
        row = {"M": (("member", "step", "student", "teacher"), r.M),
               "Q": (("member", "step", "student", "student2"), r.Q), "a": (("member", "step", "student"), r.a),
               "train_risk": (("member", "step"), r.train_risk), "test_risk": (("member", "step"), r.test_risk)}
        if _biased(configs):  # zeros where the run had none (as the ODE engine)
            row["bias"] = (("member", "step", "student"), _recorded_bias(r.bias, r.a))
            row["teacher_bias"] = (("teacher",), teacher.bias)
        rows.append(row)
    return Part(_stack_parts(rows), {"step": (("step",), np.arange(configs[0]["n_steps"] + 1))})


_REUSE_PARAMS: _Params = {
    "K": (2, _int(1)), "M": (2, _int(1)), "activation": ("erf", _act), "teacher_activation": (None, _act),
    "readout": ("sum", _choice("sum", "mean")), "alpha": (REQUIRED, _pos), "lr": (REQUIRED, _pos),
    "ridge": (0.0, _nonneg), "noise": (0.0, _nonneg), "n_steps": (REQUIRED, _int(0)), "seed": (0, seed_arg),
    "bias": (None, _bias), "teacher_bias": (None, _bias), "lr_bias": (None, _nonneg),
}
_DMFT_PARAMS: _Params = {**_REUSE_PARAMS, "n_mc": (100_000, _int(1)), "n_groups": (8, _int(2)),
                         "n_threads": (None, _int(1))}
_FULL_BATCH_PARAMS: _Params = {**_REUSE_PARAMS, "d": (1000, _int(1)), "seeds": (1, _int(1)),
                               "lr_readout": (0.0, _nonneg)}

# ------------------------------------------------------------------------------------------ descend, multistart


def _stack_parts(rows: list[dict[str, tuple[tuple[str, ...], Any]]]) -> dict[str, tuple[tuple[str, ...], Any]]:
    # rows: name -> (dims, array) per configuration
    """The rows of a group stacked, each padded to the largest shape (a run that stopped early has fewer
    records) with :func:`fill_value`."""
    out = {}
    for k, (dims, _) in rows[0].items():
        arrays = [np.asarray(r[k][1]) for r in rows]
        shape = tuple(max(s) for s in zip(*(a.shape for a in arrays), strict=True))
        full = np.full((len(arrays), *shape), fill_value(arrays[0].dtype), dtype=np.result_type(*arrays))
        for i, a in enumerate(arrays):
            full[(i,) + tuple(slice(0, n) for n in a.shape)] = a
        out[k] = (dims, full)
    return out


def _run_descend(configs: list[dict[str, Any]]) -> Part:
    rows: list[dict[str, tuple[tuple[str, ...], Any]]] = []
    t = None
    for c in configs:  # the group shares n_steps and n_records: every run records at the same iterations
        student, teacher = initial_networks(c)
        tr = descend(student, teacher, c["lr"], c["n_steps"], c["lr_readout"], c["n_records"], c["n_threads"])
        t = tr.t if t is None or len(tr.t) > len(t) else t
        rows.append({"risk": (("t",), tr.risk), "Q": (("t", "student", "student2"), tr.Q),
                     "M": (("t", "student", "teacher"), tr.M), "a": (("t", "student"), tr.a),
                     "status": ((), np.array(tr.status)), "stop_time": ((), np.array(tr.stop_time))})
    assert t is not None
    return Part(_stack_parts(rows), {"t": (("t",), t)})


_DESCEND_PARAMS: _Params = {
    **_NETWORK, "init": ("gaussian", _choice("gaussian", "orthogonal")), "lr": (REQUIRED, _pos),
    "lr_readout": (0.0, _nonneg), "n_steps": (REQUIRED, lambda x, n: integer(x, n, 0)), "n_records": (101, _int(2)),
    "n_threads": (None, _int(1)),
}


def _run_multistart(configs: list[dict[str, Any]]) -> Part:
    rows: list[dict[str, tuple[tuple[str, ...], Any]]] = []
    names = ("M", "runs", "init", "seed", "d", "train_readout", "activation", "max_iter", "gtol", "memory", "tol",
             "n_threads")
    member = ("member",)
    for c in configs:
        r = multistart(**{k: c[k] for k in names})
        rows.append({"risk": (member, r.risk), "grad_norm": (member, r.grad_norm),
                     "index": (member, r.index), "kind": (member, np.array(r.kind, dtype=str)),
                     "isotropy": (member, np.array(r.isotropy, dtype=str)),
                     "status": (member, np.array(r.status, dtype=str)), "iterations": (member, r.iterations)})
    return Part(_stack_parts(rows))


_MULTISTART_PARAMS: _Params = {
    "M": (REQUIRED, _int(1)), "runs": (REQUIRED, _int(1)), "init": ("xavier", _choice("xavier", "gaussian",
                                                                                        "orthogonal")),
    "seed": (0, seed_arg), "d": (None, _int(1)), "train_readout": (False, boolean), "activation": ("relu", _act),
    "max_iter": (5000, _int(0)), "gtol": (1e-8, _nonneg), "memory": (10, _int(1)), "tol": (1e-12, _pos),
    "n_threads": (None, _int(1)),
}

ENGINES: dict[str, Engine] = {
    "ode": Engine("ode", _ODE_PARAMS, _run_ode, 1000,
                  batched=frozenset({"d", "init", "seed", "q0", "m0", "scaling", "lr", "lr_readout", "noise",
                                     "risk_tol", "risk_rtol", "batch_ratio", *_BIAS_KEYS}),
                  check_together=_ode_together,
                  renamed={"n_points": "n_records", "records": "n_records", "steps": "n_steps"}),
    "sgd": Engine("sgd", _SGD_PARAMS, _run_sgd, 64, batched=frozenset({"lr", "lr_readout", "noise", "lr_bias"}),
                  check_together=_bias_sizes,
                  renamed={"records": "n_records", "n_points": "n_records"}),
    "dmft": Engine("dmft", _DMFT_PARAMS, _run_dmft, 4, shape_keys=("K", "M", "n_steps"), check_together=_bias_sizes),
    "full_batch": Engine("full_batch", _FULL_BATCH_PARAMS, _run_full_batch, 4, shape_keys=("K", "M", "n_steps",
                                                                                           "seeds"),
                         check_together=_bias_sizes),
    "descend": Engine("descend", _DESCEND_PARAMS, _run_descend, 16, shape_keys=("K", "M", "n_steps", "n_records"),
                      renamed={"steps": "n_steps", "records": "n_records", "n_points": "n_records"}),
    "multistart": Engine("multistart", _MULTISTART_PARAMS, _run_multistart, 4, shape_keys=("runs",),
                         renamed={"k": "M"}),
}


# ------------------------------------------------------------------------------------------ user functions

_FUNCTION_GROUP_SIZE = 16


def _function_engine(fn: Callable[..., Any], name: str) -> Engine:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return Engine(name, {}, _function_runner(fn), _FUNCTION_GROUP_SIZE, open_params=True, function=fn)
    params: dict[str, tuple[Any, Any]] = {}
    open_params = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            open_params = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
            params[p.name] = (REQUIRED if p.default is p.empty else p.default, None)
    return Engine(name, params, _function_runner(fn), _FUNCTION_GROUP_SIZE, open_params=open_params, function=fn)


def _function_runner(fn: Callable[..., Any]) -> Callable[[list[dict[str, Any]]], Part]:
    def run(configs: list[dict[str, Any]]) -> Part:
        rows: list[dict[str, tuple[tuple[str, ...], Any]]] = []
        for i, c in enumerate(configs):
            out = fn(**c)
            if not isinstance(out, Mapping):
                raise TypeError(f"engine: the function must return a dict of arrays, got {type(out).__name__}")
            row: dict[str, tuple[tuple[str, ...], Any]] = {}
            for k, v in out.items():
                arr = np.asarray(v)
                if arr.dtype.kind not in "biufU":
                    raise TypeError(f"engine: output {k!r} must be numbers or strings, got dtype {arr.dtype}")
                row[str(k)] = (tuple(f"{k}_{j}" for j in range(arr.ndim)), arr)
            if rows and {k: v[1].shape for k, v in row.items()} != {k: v[1].shape for k, v in rows[0].items()}:
                raise ValueError(f"engine: configuration {i} of the group returned other names or shapes than the "
                                 "first")
            rows.append(row)
        return Part(_stack_parts(rows))

    return run


def _module_name(name: Any) -> bool:
    return isinstance(name, str) and all(part.isidentifier() for part in name.split("."))


def trusted_modules(allow_import: Any) -> bool | tuple[str, ...]:
    """``allow_import`` checked: True (trust every module), False, or the names of the trusted modules.

    Parameters
    ----------
    allow_import : bool, str or list of str
        True, False, a module name (``"package.module"``) or a list of them.

    Returns
    -------
    bool or tuple of str

    Examples
    --------
    >>> tl.scan.engines.trusted_modules("mylab.engines"), tl.scan.engines.trusted_modules(False)
    (('mylab.engines',), False)
    """
    if isinstance(allow_import, (bool, np.bool_)):
        return bool(allow_import)
    names = [allow_import] if isinstance(allow_import, str) else allow_import
    if not isinstance(names, (list, tuple, set, frozenset)):
        raise TypeError("allow_import: expected True, False, a module name or a list of module names, got "
                        f"{type(allow_import).__name__}")
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"allow_import: expected module names (str), got {type(name).__name__}")
        if not _module_name(name):
            raise ValueError(f"allow_import: expected a module name such as 'mylab.engines', got {name!r}")
    return tuple(sorted(set(names)))


def _import_function(engine: str, allow_import: bool | tuple[str, ...]) -> Callable[..., Any]:
    """The function ``"package.module:function"`` names, imported only from a trusted module."""
    module, _, attr = engine.partition(":")
    if not (_module_name(module) and attr.isidentifier()):
        raise ValueError(f"engine: expected one of {', '.join(map(repr, ENGINES))} or 'package.module:function', "
                         f"got {engine!r}")
    if allow_import is not True and module not in (allow_import or ()):
        trusted = f", which allow_import does not name (it trusts {', '.join(map(repr, allow_import))})" \
            if allow_import else ""
        raise ValueError(f"engine: {engine!r} would import module {module!r}{trusted}: a scan definition runs the "
                         f"package's engines ({', '.join(map(repr, ENGINES))}) and imports code only from a module "
                         f"you trust: give the function itself (Scan(engine=function)), or pass "
                         f"allow_import={module!r} (command line: --allow-import {module})")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ValueError(f"engine: cannot import {engine!r}: {exc} (the module must be importable: installed, or "
                         "on PYTHONPATH)") from None
    except AttributeError as exc:
        raise ValueError(f"engine: cannot import {engine!r}: {exc}") from None
    if not callable(fn):
        raise TypeError(f"engine: {engine!r} is not callable (a {type(fn).__name__})")
    return fn


def engine_for(engine: Any, allow_import: bool | str | Collection[str] = False) -> Engine:
    """The :class:`Engine` of a name (``"ode"``, ...), a callable, or a ``"package.module:function"`` string.

    A string is data (it may come from a config file): it names one of the package's engines, or a function
    that is imported only when its module is trusted by ``allow_import``; otherwise ValueError, and nothing is
    imported.

    Parameters
    ----------
    engine : Engine, str or callable
        A built-in name, a function of one configuration's keyword arguments returning a dict of arrays, or
        ``"package.module:function"`` (only with ``allow_import``).
    allow_import : bool, str or list of str, default False
        The modules a ``"package.module:function"`` may be imported from: True (any), a module name or a list
        of them (exactly as written before the colon).

    Returns
    -------
    Engine

    Examples
    --------
    >>> tl.scan.engines.engine_for("sgd").name
    'sgd'
    >>> def square(x=1.0):
    ...     return {"y": x * x}
    >>> eng = tl.scan.engines.engine_for(square)
    >>> eng.run([{"x": 2.0}, {"x": 3.0}]).data["y"][1].tolist()
    [4.0, 9.0]
    >>> tl.scan.engines.engine_for("os:system")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: engine: 'os:system' would import module 'os': ...
    >>> tl.scan.engines.engine_for("math:hypot", allow_import="math").name
    'math:hypot'
    """
    trust = trusted_modules(allow_import)
    if isinstance(engine, Engine):
        return engine
    if callable(engine):
        return _function_engine(engine, f"{engine.__module__}:{engine.__qualname__}")
    if not isinstance(engine, str):
        raise TypeError(f"engine: expected a name ({', '.join(map(repr, ENGINES))}), a callable or "
                        f"'package.module:function', got {type(engine).__name__}")
    if engine in ENGINES:
        return ENGINES[engine]
    if ":" not in engine:
        raise ValueError(f"engine: unknown engine {engine!r}{suggest(engine, list(ENGINES))} (expected one of "
                         f"{', '.join(map(repr, ENGINES))}, a callable, or 'package.module:function' with "
                         "allow_import)")
    return _function_engine(_import_function(engine, trust), engine)


def recorded_engine(name: Any) -> Engine:
    """The engine a store's definition records, read as text: a package engine by its name; any other name
    (a user function's ``"module:function"``) a stand-in that accepts every parameter and runs nothing, so that
    reading a store never imports a module.

    Parameters
    ----------
    name : str
        The recorded engine name.

    Returns
    -------
    Engine

    Examples
    --------
    >>> eng = tl.scan.engines.recorded_engine("mylab.engines:plateau")
    >>> eng.name, eng.function is None
    ('mylab.engines:plateau', True)
    """
    if not isinstance(name, str):
        raise ValueError(f"engine: a store records the engine's name, got {type(name).__name__}")
    if name in ENGINES:
        return ENGINES[name]

    def refuse(configs: list[dict[str, Any]]) -> Part:
        raise ValueError(f"engine: {name!r} is recorded in a store as text and is never imported from it: to "
                         "compute, give the function itself (Scan(engine=function)) or load the scan's config "
                         "with allow_import")

    return Engine(name, {}, refuse, _FUNCTION_GROUP_SIZE, open_params=True)


def fill_value(dtype: np.dtype[Any]) -> Any:
    """The fill of configurations not (yet) computed: NaN for floats, -1 for integers, "" for strings."""
    return {"f": math.nan, "U": "", "b": False}.get(dtype.kind, -1)
