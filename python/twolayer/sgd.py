"""Finite-d SGD of a two-layer student on samples from a teacher: the ground truth for the ODEs.

Conventions (the documentation's Conventions page). Inputs x ~ N(0, I_d); pre-activations lambda = W x / sqrt(s) (s = d
for ``scaling="sqrt_d"``, 1 for ``"none"``); f(x) = c sum_i a_i sigma(lambda_i) with c the readout factor
(1 for ``readout="sum"``, 1/K for ``"mean"``); y = sum_r v_r sigma*(lambda*_r) + sqrt(noise) xi. With
E = y - f, one step on a batch of B samples is plain SGD on the network's parameters W and a::

    w_i += (lr sqrt(s) / d) * mean_batch[c a_i sigma'(lambda_i) E x]     (lr / sqrt(d) for s = d)
    a_i += (lr_readout / d) * mean_batch[c sigma(lambda_i) E]            (fixed if lr_readout = 0)

both evaluated before the step. One online step of learning rate lr is in expectation one step of population
gradient descent with learning rate lr, and the d -> infinity limit is ``tl.ode.integrate`` with the same
``lr``, ``lr_readout``, ``noise`` and ``readout`` (in the ODE's effective units the readout moves with
c^2 lr_readout). ``spherical=True`` (spherical SGD, as in "Escaping mediocrity", Arnaboldi et al. 2023) then
rescales every w_i to ``|w_i|^2 = s``, i.e. Q_ii = 1 (the initial weights are projected too). Trajectory.a
holds the effective second layer c a, as Overlaps does.

Time is t = steps / d. Online (``n_samples=None``): every step draws B fresh samples. With ``n_samples=n``
(the correlated-samples regime of "First order optimization methods in two-layer neural networks training",
n = alpha d) one training set is drawn per run and visited in
batches of B, epoch after epoch, reshuffled every epoch unless ``shuffle=False``; ``batch_size=n_samples`` is
full-batch gradient descent. That paper's large-batch SGD (batches of n_b = alpha d, step gamma0 on
unit-norm weights, lambda = w.z) is ``lr = gamma0 * d, batch_size = alpha * d`` here (our weights have norm sqrt d); its
d -> infinity limit is ``tl.ode.integrate(..., lr=gamma0, regime="large_batch", batch_ratio=alpha, steps=T)``
(:mod:`twolayer.large_batch`), T steps being t_max = T / d. That paper's online SGD (n_b = 1, step
gamma0 / d) is ``lr = gamma0``.

Randomness comes from counter-based Philox4x32-10 streams keyed by (seed, run): a run's inputs, label noise,
training set and shuffles are fixed by those two numbers alone, so results are bit-identical whatever the
number of threads, and run j of an ensemble equals the single run with ``seeds=[j]``.

Recorded at the requested times: Q, M, the effective a and the exact excess population risk (noise/2 not
included) computed from the overlaps with the closed-form kernels -- not a test-set estimate. Every activation
pair has a closed-form I2, so no estimate is ever needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._core import DeviceUnavailable
from ._grid import record_steps
from ._interrupt import keep_partial, partial_result
from ._progress import progress_bar
from ._sgd_function import simulate_function_target
from ._validation import (
    INT32_MAX,
    Device,
    boolean,
    device_arg,
    integer,
    n_threads_arg,
    per_item,
    positive,
    run_indices,
    seed_arg,
)
from .networks import Network, check_network
from .overlaps import check_pair, gram
from .passage import FirstPassage, first_passage
from .results import Trajectory, dataset_parts, float_values, import_xarray, int_values, netcdf_attrs, variable_attrs
from .schedules import Schedule, as_schedule, core_arg
from .targets import FunctionTarget, HermiteTarget, is_target

__all__ = ["Ensemble", "grid", "simulate"]


@dataclass(eq=False)
class Ensemble:
    """Independent SGD runs of one problem: same teacher, sizes and regime; each run has its own stream key
    (seed, run id) and hyper-parameters (``params``).

    ``runs`` holds one :class:`~twolayer.Trajectory` per run, in call order. A run that stopped early is
    truncated at its stop: status ``"converged"`` (its recorded risk fell below ``risk_tol`` / ``risk_rtol``;
    the crossing record is its last row), ``"diverged"``, or ``"interrupted"`` (in the partial result of
    :class:`twolayer.Interrupted`). ``t`` holds the requested record times, ``run_ids`` the stream keys and
    ``params`` the per-run ``lr``, ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol`` (arrays of shape
    (R,); NaN where a tolerance is off). ``status`` and ``stop_time`` are per run (``stop_time``: see
    :func:`simulate`; NaN for completed runs).

    The stacked arrays ``Q`` (R_completed, T, K, K), ``M``, ``a``, ``risk`` and the statistics :meth:`mean`,
    :meth:`std`, :meth:`sem` use the runs that completed only: a converged run is a success, but its records
    end at its stop, so it has no value at later times (study it through ``stop_time``). The statistics are
    over repetitions of one experiment: they raise ValueError when the completed runs differ in their
    parameters (take a sub-ensemble of one grid point with :meth:`select`, or group ``to_xarray()``).

    Attributes
    ----------
    runs : list of Trajectory
        One per run, in call order.
    run_ids : ndarray of int, shape (R,)
        The stream keys (seed, run id).
    t : ndarray, shape (T,)
        The requested record times (t = steps / d).
    seed : int
        The master seed.
    meta : dict
        The parameters shared by every run.
    params : dict of ndarray, shape (R,)
        The per-run parameters.

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(2, 2, 100, "erf", seed=0)
    >>> ens = tl.sgd.simulate(s, t, lr=1.0, t_max=5, records=6, seeds=4)
    >>> ens
    Ensemble(runs=4, T=6, diverged=0, converged=0, seed=0)
    >>> ens.risk.shape, ens.Q.shape
    ((4, 6), (4, 6, 2, 2))
    >>> np.round(ens.mean().risk, 3)
    array([0.735, 0.353, 0.176, 0.101, 0.064, 0.048])
    """

    runs: list[Trajectory]
    run_ids: NDArray[np.int64]
    t: NDArray[np.float64]
    seed: int
    meta: dict[str, Any] = field(default_factory=dict)
    params: dict[str, NDArray[np.float64]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Iterator[Trajectory]:
        return iter(self.runs)

    def __getitem__(self, j: int) -> Trajectory:
        return self.runs[j]

    @property
    def status(self) -> list[str]:
        """The status of every run."""
        return [r.status for r in self.runs]

    @property
    def stop_time(self) -> NDArray[np.float64]:
        """(R,) per run: the interpolated early-stop crossing (converged), the time of the divergence or
        interruption, NaN for completed runs; in the clock of ``t`` (steps / d)."""
        return np.array([r.stop_time for r in self.runs], dtype=np.float64)

    @property
    def completed(self) -> list[Trajectory]:
        """The runs that completed (neither converged early, diverged nor were interrupted)."""
        return [r for r in self.runs if r.status == "completed"]

    @property
    def n_diverged(self) -> int:
        """Number of diverged runs."""
        return sum(r.status == "diverged" for r in self.runs)

    @property
    def n_converged(self) -> int:
        """Number of runs stopped early by ``risk_tol`` / ``risk_rtol``."""
        return sum(r.status == "converged" for r in self.runs)

    def first_passage(self, level: float, relative: bool = True) -> FirstPassage:
        """Per-run first passage of the risk with censoring (:mod:`twolayer.passage`)."""
        return first_passage(self.runs, level, relative)

    def select(self, **values: float) -> Ensemble:
        """The sub-ensemble of the runs whose parameters equal ``values`` (keywords among ``lr``,
        ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol``, ``run_id``), e.g. one point of a grid.

        Parameters
        ----------
        **values : float
            Parameter values to keep.

        Returns
        -------
        Ensemble
        """
        keep = np.ones(len(self.runs), dtype=bool)
        for name, value in values.items():
            column = self.run_ids if name == "run_id" else self.params.get(name)
            if column is None:
                raise ValueError(
                    f"{name}: expected one of {', '.join(map(repr, [*self.params, 'run_id']))}; got {name!r}"
                )
            keep &= column == value
        idx = np.flatnonzero(keep)
        if idx.size == 0:
            raise ValueError(f"values: no run has {values}")
        return Ensemble(
            runs=[self.runs[j] for j in idx],
            run_ids=self.run_ids[idx],
            t=self.t,
            seed=self.seed,
            meta=self.meta,
            params={k: v[idx] for k, v in self.params.items()},
        )

    def stack(self, name: str) -> NDArray[np.float64]:
        """``name`` ("Q", "M", "a" or "risk") of the completed runs, run first.

        Parameters
        ----------
        name : {"Q", "M", "a", "risk"}
            The field.

        Returns
        -------
        ndarray, shape (R_completed, T, ...)
        """
        if name not in ("Q", "M", "a", "risk"):
            raise ValueError(f"name: expected one of 'Q', 'M', 'a', 'risk'; got {name!r}")
        runs = self.completed
        if not runs:
            raise ValueError("seeds: no run completed (diverged, converged or interrupted), there is nothing to stack")
        return np.stack([getattr(r, name) for r in runs])

    Q = property(lambda self: self.stack("Q"), doc="(R_completed, T, K, K)")
    M = property(lambda self: self.stack("M"), doc="(R_completed, T, K, M)")
    a = property(lambda self: self.stack("a"), doc="(R_completed, T, K)")
    risk = property(lambda self: self.stack("risk"), doc="(R_completed, T)")

    def _statistic(self, fn: Any, label: str) -> Trajectory:
        done = np.array([r.status == "completed" for r in self.runs], dtype=bool)
        shared: dict[str, float] = {}
        for name, column in self.params.items():
            values = np.unique(column[done])
            if values.size > 1:
                raise ValueError(
                    f"{name}: {label} is over runs of identical parameters, but the completed runs have "
                    f"{values.size} different values of {name}; take one grid point with select({name}=...) "
                    "or group to_xarray()"
                )
            if values.size == 1:
                shared[name] = float(values[0])
        n = int(done.sum())
        fields = {k: fn(self.stack(k)) for k in ("Q", "M", "a", "risk")}
        msg = f"{label} over {n} of {len(self.runs)} runs" + (
            f" ({len(self.runs) - n} not completed: {self.n_diverged} diverged, {self.n_converged} converged)"
            if n < len(self.runs)
            else ""
        )
        return Trajectory(
            t=self.t.copy(),
            **fields,
            status="completed",
            message=msg,
            time_unit=self.runs[0].time_unit,
            meta={**self.meta, **shared, "statistic": label, "n_runs": n},
        )

    def mean(self) -> Trajectory:
        """Mean over the completed runs (of identical parameters), as a Trajectory."""
        return self._statistic(lambda x: x.mean(axis=0), "mean")

    def std(self) -> Trajectory:
        """Sample standard deviation (ddof = 1) over the completed runs (of identical parameters)."""
        return self._statistic(
            lambda x: x.std(axis=0, ddof=1) if x.shape[0] > 1 else np.zeros_like(x[0]), "std"
        )

    def sem(self) -> Trajectory:
        """Standard error of the mean over the completed runs (of identical parameters): std / sqrt(n)."""
        n = len(self.completed)
        return self._statistic(
            lambda x: (x.std(axis=0, ddof=1) if n > 1 else np.zeros_like(x[0])) / np.sqrt(n), "sem"
        )

    def _padded(self, name: str) -> NDArray[np.float64]:
        """``name`` of every run, (R, T, ...), NaN after a run's last record."""
        first = self.runs[0]
        out = np.full((len(self.runs), len(self.t), *getattr(first, name).shape[1:]), np.nan)
        for j, r in enumerate(self.runs):
            out[j, : len(r)] = getattr(r, name)
        return out

    def to_xarray(self) -> Any:
        """An ``xarray.Dataset`` of every run: dimensions ``run`` (call order), ``t``, ``student``,
        ``student2``, ``teacher``.

        Data ``Q``, ``M``, ``a``, ``risk`` (NaN after the last record of a run that stopped early), ``status``
        and ``stop_time`` per run, the teacher's ``P`` and ``v`` (so that overlaps can be rebuilt); coordinates
        ``t`` and, along ``run``, ``run_id``, ``lr``, ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol``.
        Every variable has ``long_name`` and ``units`` attributes (times in steps / d). A grid becomes labelled
        axes with
        ``ds.set_index(run=["lr", "noise", "run_id"]).unstack("run")``.
        """
        xr = import_xarray()
        unit = "steps / d"

        def var(name: str, dims: tuple[str, ...], values: Any) -> Any:
            return xr.Variable(dims, values, attrs=variable_attrs(name, unit))

        stop_step = [int(r.meta.get("stop_step", -1)) for r in self.runs]
        data = {
            "Q": var("Q", ("run", "t", "student", "student2"), self._padded("Q")),
            "M": var("M", ("run", "t", "student", "teacher"), self._padded("M")),
            "a": var("a", ("run", "t", "student"), self._padded("a")),
            "risk": var("risk", ("run", "t"), self._padded("risk")),
            "status": var("status", ("run",), np.array(self.status, dtype=str)),
            "stop_time": var("stop_time", ("run",), self.stop_time),
            "message": var("message", ("run",), np.array([r.message for r in self.runs], dtype=str)),
            "n_recorded": var("n_recorded", ("run",), np.array([len(r) for r in self.runs], dtype=np.int64)),
            "stop_step": var("stop_step", ("run",), np.array(stop_step, dtype=np.int64)),
        }
        first = self.runs[0]
        if first.P is not None and first.v is not None:  # one teacher for every run: rebuild overlaps from P, v
            data["P"] = var("P", ("teacher", "teacher2"), first.P)
            data["v"] = var("v", ("teacher",), first.v)
        coords = {
            "run": var("run", ("run",), np.arange(len(self.runs))),
            "t": var("t", ("t",), self.t),
            "run_id": var("run_id", ("run",), self.run_ids),
            **{k: var(k, ("run",), v) for k, v in self.params.items()},
        }
        attrs = netcdf_attrs(self.meta)
        return xr.Dataset(
            data,
            coords=coords,
            attrs={**attrs, "seed": self.seed, "time_unit": unit, "n_diverged": self.n_diverged,
                   "params": " ".join(self.params)},
        )

    @classmethod
    def from_xarray(cls, ds: Any) -> Ensemble:
        """The Ensemble a :meth:`to_xarray` Dataset (possibly saved and reopened) describes: every run's rows
        (up to its ``n_recorded``), status, message, stop time and parameters, and the teacher's ``P`` and ``v``
        (so that ``ens[j].overlaps_at(-1)`` restarts the ODE from run j's last state). The final student
        weights are not stored: ``student`` is None."""
        attrs, names, _ = dataset_parts(ds)
        seed = int(attrs["seed"])
        attrs.pop("n_diverged", None)
        t, run_ids = float_values(ds, "t"), int_values(ds, "run_id")
        params = {p: float_values(ds, p) for p in names}
        P = float_values(ds, "P") if "P" in ds else None
        v = float_values(ds, "v") if "v" in ds else None
        rows = {name: float_values(ds, name) for name in ("Q", "M", "a", "risk")}
        n_recorded, stop_step = int_values(ds, "n_recorded"), int_values(ds, "stop_step")
        stop_time = float_values(ds, "stop_time")
        status = np.array(ds["status"].values, dtype=str)
        message = np.array(ds["message"].values, dtype=str)
        runs = [
            Trajectory(
                t=t[: n_recorded[j]].copy(),
                **{name: x[j, : n_recorded[j]].copy() for name, x in rows.items()},
                status=str(status[j]),
                message=str(message[j]),
                time_unit=_TIME_UNIT,
                meta=_run_meta(attrs, params, j, int(run_ids[j]), str(status[j]), int(stop_step[j])),
                P=None if P is None else P.copy(),
                v=None if v is None else v.copy(),
                stop_time=float(stop_time[j]),
            )
            for j in range(run_ids.size)
        ]
        return cls(runs=runs, run_ids=run_ids, t=t, seed=seed, meta=attrs, params=params)

    def __repr__(self) -> str:
        return (
            f"Ensemble(runs={len(self.runs)}, T={len(self.t)}, diverged={self.n_diverged}, "
            f"converged={self.n_converged}, seed={self.seed})"
        )


# The clock of SGD trajectories.
_TIME_UNIT = "t = steps / d"


def _run_meta(meta: dict[str, Any], params: dict[str, NDArray[np.float64]], j: int, run: int, status: str,
              stop_step: int) -> dict[str, Any]:
    """The ``meta`` of run j (stream index ``run``): the ensemble's, its own parameters, and the step of its
    stop when it did not complete."""
    return {
        **meta,
        **{k: float(v[j]) for k, v in params.items()},
        "run": run,
        **({"stop_step": stop_step} if status != "completed" else {}),
    }


# The core's status codes of a run.
_STATUS = {0: "completed", 1: "diverged", 2: "interrupted", 3: "converged"}

# The positional arguments of _core.sgd_simulate: W, a, act, W_teacher, v, act_teacher, scale.
_SgdArgs: TypeAlias = tuple[
    NDArray[np.float64], NDArray[np.float64], str, NDArray[np.float64], NDArray[np.float64], str, float
]


def _check_distinct_runs(run_ids: NDArray[np.int64], params: dict[str, NDArray[np.float64]]) -> None:
    """Two runs of one call may share a run index (the same random samples) only with different lr,
    lr_readout or noise: identical runs are refused."""
    keys = np.stack([run_ids.astype(np.float64), params["lr"], params["lr_readout"], params["noise"]], axis=1)
    if np.unique(keys, axis=0).shape[0] != keys.shape[0]:
        raise ValueError(
            "seeds: run indices must be distinct (a run index may repeat only with different lr, lr_readout "
            "or noise)"
        )


def grid(seeds: int | Sequence[int], **axes: ArrayLike) -> dict[str, Any]:
    """The per-run arguments of :func:`simulate` for a Cartesian grid of parameters times runs.

    ``axes``: 1-d values of per-run parameters (``lr``, ``lr_readout``, ``noise``, ``risk_tol``,
    ``risk_rtol``); ``seeds``: the run indices repeated at every grid point (an int n: 0..n-1), so that every
    point sees the same random samples. Run order is C order over the axes as given, then the run indices
    (fastest). Returns ``{"seeds": [...], name: array, ...}`` to pass as ``simulate(..., **grid(...))``;
    ``Ensemble.to_xarray().set_index(run=[*axes, "run_id"]).unstack("run")`` restores the grid.

    Parameters
    ----------
    seeds : int or sequence of int
        Run indices repeated at every grid point (an int n: 0..n-1).
    **axes : array_like
        1-d grid values of per-run parameters.

    Returns
    -------
    dict
        ``{"seeds": [...], name: array, ...}``, one entry per run.

    Examples
    --------
    >>> g = tl.sgd.grid(seeds=2, lr=[0.1, 0.2], noise=[0.0])
    >>> g["seeds"], g["lr"]
    ([0, 1, 0, 1], array([0.1, 0.1, 0.2, 0.2]))
    >>> s, t = tl.networks.teacher_student(2, 2, 100, "erf", seed=0)
    >>> ens = tl.sgd.simulate(s, t, t_max=5, records=6, **g)
    >>> ens.select(lr=0.2)
    Ensemble(runs=2, T=6, diverged=0, converged=0, seed=0)
    """
    allowed = ("lr", "lr_readout", "noise", "risk_tol", "risk_rtol")
    for name in axes:
        if name not in allowed:
            raise ValueError(f"{name}: expected grid axes among {', '.join(map(repr, allowed))}; got {name!r}")
    ids = run_indices(seeds).tolist()
    # each axis checked as simulate checks one value per run: lr > 0, the others >= 0
    for name, v in axes.items():
        if np.ndim(v) != 1:
            raise ValueError(f"{name}: expected a 1-d array of grid values, got {np.ndim(v)} dimensions")
    values = [per_item(v, name, np.size(v), allow_zero=name != "lr", item="grid point") for name, v in axes.items()]
    mesh = np.meshgrid(*values, np.arange(len(ids)), indexing="ij")
    out: dict[str, Any] = {"seeds": [ids[int(k)] for k in mesh[-1].ravel()]}
    out.update({name: m.ravel() for name, m in zip(axes, mesh[:-1], strict=True)})
    return out


@overload
def simulate(
    student: Network | Sequence[Network],
    teacher: Any,
    lr: ArrayLike,
    lr_readout: ArrayLike = ...,
    noise: ArrayLike = ...,
    batch_size: int = ...,
    spherical: bool = ...,
    t_max: float | None = ...,
    times: ArrayLike | None = ...,
    seed: int = ...,
    *,
    seeds: None = ...,
    n_samples: int | None = ...,
    shuffle: bool = ...,
    train_first_layer: bool = ...,
    records: int = ...,
    keep_weights: bool = ...,
    n_threads: int | None = ...,
    progress: bool = ...,
    risk_tol: ArrayLike | None = ...,
    risk_rtol: ArrayLike | None = ...,
    schedule: Schedule | ArrayLike | Callable[..., Any] | None = ...,
    device: Device = ...,
) -> Trajectory: ...
@overload
def simulate(
    student: Network | Sequence[Network],
    teacher: Any,
    lr: ArrayLike,
    lr_readout: ArrayLike = ...,
    noise: ArrayLike = ...,
    batch_size: int = ...,
    spherical: bool = ...,
    t_max: float | None = ...,
    times: ArrayLike | None = ...,
    seed: int = ...,
    *,
    seeds: int | Sequence[int],
    n_samples: int | None = ...,
    shuffle: bool = ...,
    train_first_layer: bool = ...,
    records: int = ...,
    keep_weights: bool = ...,
    n_threads: int | None = ...,
    progress: bool = ...,
    risk_tol: ArrayLike | None = ...,
    risk_rtol: ArrayLike | None = ...,
    schedule: Schedule | ArrayLike | Callable[..., Any] | None = ...,
    device: Device = ...,
) -> Ensemble: ...


def simulate(  # noqa: C901 (28)
    student: Network | Sequence[Network],
    teacher: Any,
    lr: ArrayLike,
    lr_readout: ArrayLike = 0.0,
    noise: ArrayLike = 0.0,
    batch_size: int = 1,
    spherical: bool = False,
    t_max: float | None = None,
    times: ArrayLike | None = None,
    seed: int = 0,
    *,
    seeds: int | Sequence[int] | None = None,
    n_samples: int | None = None,
    shuffle: bool = True,
    train_first_layer: bool = True,
    records: int = 101,
    keep_weights: bool = True,
    n_threads: int | None = None,
    progress: bool = False,
    risk_tol: ArrayLike | None = None,
    risk_rtol: ArrayLike | None = None,
    schedule: Schedule | ArrayLike | Callable[..., Any] | None = None,
    device: Device = "cpu",
) -> Trajectory | Ensemble:
    """Simulate SGD of ``student`` on samples labelled by ``teacher`` (conventions in the module docstring).

    Parameters
    ----------
    student, teacher : Network
        Same input dimension d and scaling. ``teacher`` may also be a target of :mod:`twolayer.targets`: a
        polynomial HermiteTarget (labels f(W* x / sqrt(s)) in the core; M is then (K, k), the recorded risk
        exact), or a FunctionTarget (a NumPy function of the projections: a slower pure-NumPy simulator, see
        :mod:`twolayer._sgd_function`). ``student`` may be a sequence of Networks, one initial
        condition per run (then ``seeds`` must give as many runs).
    lr : float > 0, or array (R,)
        First-layer learning rate (per-sample step lr / sqrt(d) on w for ``sqrt_d`` scaling).
    lr_readout : float >= 0, or array (R,)
        Second-layer learning rate (plain SGD step lr_readout / d on the network's a); 0 keeps it fixed.
    noise : float >= 0, or array (R,)
        Variance Delta of the label noise.

        Per-run parameters (``lr``, ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol``): a number is
        used by every run; a 1-d array holds one value per run, entry j for the j-th run of ``seeds`` (so
        arrays need ``seeds``, and R = the number of runs it gives). All the runs of a call share the
        problem (K, M, d, activations, batch size, regime, record times, ``seed``) and run in one call to
        the core, OpenMP across runs; each run's result depends only on its own parameters, start and
        (seed, run id), so it is bitwise the same as the run done alone. :func:`grid` flattens an
        lr x noise x ... x seeds grid into these arrays.
    batch_size : int >= 1
        Samples averaged per step.
    spherical : bool
        Project every w_i back to ``|w_i|^2 = s`` after each step (spherical SGD).
    t_max, times, records
        Run until t_max = steps / d, recording at ``records`` equally spaced times (0 and t_max
        included), or at the given ``times`` (rounded to whole steps; the returned ``t`` holds the exact
        steps / d).
    seed : int
        Master seed (64-bit). Run j uses the streams keyed by (seed, j).
    seeds : int or sequence of int, optional
        Ensemble: an int n runs j = 0..n-1; a sequence runs exactly those run indices (each < 2^32), in
        that order. A run index may repeat only with different ``lr``, ``lr_readout`` or ``noise`` (the
        same random samples for several parameters: common random numbers across a grid). Returns an
        :class:`Ensemble`; without it a single run j = 0 is returned as a Trajectory.
    n_samples : int, optional
        Size of a fixed training set reused across epochs (None: online SGD).
    shuffle : bool
        Reshuffle the training set every epoch (ignored online and for full batches).
    train_first_layer : bool
        False freezes W (train the readout only, with ``lr_readout``).
    keep_weights : bool
        Attach the final Network of every run (``Trajectory.student``).
    n_threads : int, optional
        OpenMP threads across runs (None: the OpenMP default). Results do not depend on it.
    progress : bool
        Show a tqdm progress bar (steps of all runs); no effect on the results.
    risk_tol, risk_rtol : float > 0 or array (R,), optional
        Early stop of each run, status ``"converged"``: a run stops at the first *recorded* step whose
        excess risk is below max(risk_tol, risk_rtol * R0), R0 its excess risk at step 0 (None: that
        criterion is off). The risk is evaluated at the record times only (no extra cost; a finer ``records``
        or ``times`` grid locates the stop more finely); that record is the run's last row, its final
        weights are attached, and ``stop_time`` (``Ensemble.stop_time``) is the crossing time
        interpolated linearly in t between that record and the previous one (the record's own time when it
        is the first). ``stop_time`` of a diverged or interrupted run is the time it stopped; NaN for a run
        that ran to the end. A run diverges by the rule every engine shares (docs: conventions, "Divergence"):
        its overlaps (Q, M, a) not finite, grown past 1e8 times the scale of its start and teacher, or out of the
        positive semi-definite cone, checked at every record and every d steps (or a sample's error overflowing
        within a step); its ``message`` says which.
    schedule : Schedule, array or callable, optional
        Learning-rate multiplier (:mod:`twolayer.schedules`): step n uses lr s(n / d) and lr_readout s(n / d),
        evaluated in the core's loop, the same s(t) as :func:`twolayer.ode.integrate`'s; an array holds one
        value per step, a callable is evaluated once at t = n / d, n = 0 .. steps - 1. Shared by all runs.
    device : {"cpu", "cuda"}
        Where the runs are computed. ``"cuda"`` (a build with the CUDA backend and an NVIDIA GPU, else
        :class:`twolayer.DeviceUnavailable`) runs every run as one thread block with its weights on the GPU: the
        same Philox samples, statuses and divergence rule as the CPU, the rows equal to the CPU's up to the order
        of the sums over d (floating-point reassociation). It runs the online committee problem only (any
        activations, ``batch_size``, ``spherical``, early stop, noise); ``n_samples``, polynomial or function
        targets and ``schedule`` raise :class:`twolayer.DeviceUnavailable` naming the option. ``n_threads`` is
        ignored there.

    Returns
    -------
    Trajectory or Ensemble
        Without ``seeds``: the single run j = 0 as a :class:`~twolayer.Trajectory` (``t`` in steps / d, ``Q``,
        ``M``, the effective ``a``, the exact excess ``risk``, ``status``, the final network as ``student``).
        With ``seeds``: an :class:`Ensemble`. Ctrl-C raises :class:`twolayer.Interrupted` whose ``partial``
        is the result so far.

    Examples
    --------
    >>> s, t = tl.networks.teacher_student(2, 2, 100, "erf", seed=0)
    >>> run = tl.sgd.simulate(s, t, lr=1.0, t_max=5, records=6, seed=3)
    >>> run.t, run.meta["steps"]
    (array([0., 1., 2., 3., 4., 5.]), 500)

    Runs stopped when their recorded risk falls to 5 % of the initial one:

    >>> ens = tl.sgd.simulate(s, t, lr=1.0, t_max=50, records=51, seeds=2,
    ...                       risk_rtol=0.05)
    >>> ens.status, np.round(ens.stop_time, 2)
    (['converged', 'converged'], array([7.19, 6.11]))
    """
    if isinstance(student, Network):
        students: list[Network] | None = None
        first = student
    else:
        if not isinstance(student, Sequence):
            raise TypeError(f"student: expected a Network or a sequence of Networks, got {type(student).__name__}")
        students = list(student)
        if not students:
            raise ValueError("student: expected a Network or a non-empty sequence of Networks")
        for j, s in enumerate(students):
            check_network(s, f"student[{j}]")
            if (s.K, s.d, s.activation, s.scaling, s.readout) != (
                students[0].K,
                students[0].d,
                students[0].activation,
                students[0].scaling,
                students[0].readout,
            ):
                raise ValueError(
                    f"student[{j}]: every initial network must have the same K, d, activation, "
                    "scaling and readout"
                )
        first = students[0]
    device = device_arg(device)
    if isinstance(teacher, FunctionTarget):
        if device != "cpu":
            raise DeviceUnavailable(
                "device='cuda': SGD on the GPU runs online committee teachers only; a FunctionTarget teacher "
                "(the NumPy simulator) is not supported (use device='cpu')"
            )
        runs, fields = simulate_function_target(student, teacher, lr=lr, lr_readout=lr_readout, noise=noise,
                                                batch_size=batch_size, spherical=spherical, t_max=t_max,
                                                times=times, seed=seed, seeds=seeds, n_samples=n_samples,
                                                records=records, train_first_layer=train_first_layer,
                                                shuffle=shuffle)
        return runs[0] if seeds is None else Ensemble(runs=runs, **fields)
    target = teacher if isinstance(teacher, HermiteTarget) else None
    if target is not None:
        check_network(first, "student")
        if target.d != first.d or target.scaling != first.scaling:
            raise ValueError(f"teacher: the target's d = {target.d}, scaling {target.scaling!r} do not match the "
                             f"student's d = {first.d}, scaling {first.scaling!r}")
        # the core's teacher rows are the directions, v = 0 unused; labels f(z) from the target
        teacher = Network(target.directions, np.zeros(target.k), first.activation, first.scaling)
    elif is_target(teacher):  # pragma: no cover - every target type is handled above
        raise TypeError(f"teacher: unsupported target {type(teacher).__name__}")
    check_pair(first, teacher)  # finite weights, same d and scaling
    spherical = boolean(spherical, "spherical")
    shuffle = boolean(shuffle, "shuffle")
    train_first_layer = boolean(train_first_layer, "train_first_layer")
    keep_weights = boolean(keep_weights, "keep_weights")
    progress = boolean(progress, "progress")
    if spherical:
        for j, s in enumerate(students or [first]):
            if np.any(np.linalg.norm(s.W, axis=1) == 0):
                raise ValueError(
                    f"student{'' if students is None else f'[{j}]'}: spherical SGD needs every row "
                    "of W to be nonzero"
                )
    d = first.d
    B = integer(batch_size, "batch_size", 1, INT32_MAX)
    seed_ = seed_arg(seed)
    n = 0 if n_samples is None else integer(n_samples, "n_samples", 1, 2**32 - 1)
    if n and B > n:
        raise ValueError(f"batch_size: {B} exceeds the training set size n_samples={n}")
    run_ids = np.array([0], dtype=np.int64) if seeds is None else run_indices(seeds)
    if run_ids.size == 0:
        raise ValueError("seeds: expected at least one run")
    if students is not None and len(students) != run_ids.size:
        raise ValueError(f"student: got {len(students)} initial networks for {run_ids.size} runs")
    R = int(run_ids.size)
    hint = "; give seeds= for several runs" if seeds is None else " of seeds"

    def per_run(x: Any, name: str, allow_zero: bool = False) -> NDArray[np.float64]:
        if x is None and name.startswith("risk_"):  # a tolerance that is off
            return np.full(R, np.nan)
        return per_item(x, name, R, allow_zero=allow_zero, item="run", hint=hint)

    params = {
        "lr": per_run(lr, "lr"),
        "lr_readout": per_run(lr_readout, "lr_readout", allow_zero=True),
        "noise": per_run(noise, "noise", allow_zero=True),
        "risk_tol": per_run(risk_tol, "risk_tol"),
        "risk_rtol": per_run(risk_rtol, "risk_rtol"),
    }
    _check_distinct_runs(run_ids, params)
    rec = record_steps(d, t_max, times, records)
    steps = int(round(positive(t_max, "t_max") * d)) if t_max is not None else int(rec[-1])
    steps = max(steps, int(rec[-1]))
    sched = as_schedule(schedule, steps=steps, step_time=1.0 / d)

    if students is None:
        W0, a0 = first.W, first.effective_a
    else:
        W0 = np.stack([s.W for s in students])
        a0 = np.stack([s.effective_a for s in students])
    kwargs: dict[str, Any] = dict(
        lr=params["lr"],
        train_first=bool(train_first_layer),
        lr_readout=params["lr_readout"] * first.readout_factor**2,
        noise=params["noise"],
        risk_tol=np.nan_to_num(params["risk_tol"], nan=-1.0),
        risk_rtol=np.nan_to_num(params["risk_rtol"], nan=-1.0),
        batch=B,
        spherical=bool(spherical),
        n_samples=n,
        shuffle=bool(shuffle),
        steps=steps,
        record_steps=rec,
        seed=seed_,
        runs=run_ids.astype(np.uint32),
        keep_weights=bool(keep_weights),
        n_threads=n_threads_arg(n_threads),
        schedule=core_arg(sched),
        device=device,
    )
    t_all = rec.astype(np.float64) / d
    meta: dict[str, Any] = {
        "batch_size": B,
        "spherical": bool(spherical),
        "d": d,
        "seed": seed_,
        "steps": steps,
        "n_samples": n,
        "regime": "training_set" if n else "online",
        "train_first_layer": bool(train_first_layer),
        "risk_method": "exact (closed-form kernels)",
        "activation": first.activation,
        "teacher_activation": teacher.activation if target is None else "target",
        **({} if sched is None else {"schedule": repr(sched)}),
    }
    if target is not None:
        kwargs["target_alpha"], kwargs["target_coef"] = target._arrays()
        meta["target"] = repr(target)
    c = first.readout_factor
    P_teacher = gram(teacher.W, teacher.W, teacher.scale, "teacher.W")  # with v: what overlaps_at needs

    def run_result(out: dict[str, Any], j: int, run: int) -> Trajectory:
        T = int(out["recorded"][j])
        status = _STATUS[int(out["status"][j])]
        stop = int(out["stop_step"][j])
        stop_time = float(out["stop_time"][j])
        if status == "diverged":
            msg = f"diverged at step {stop} (t = {stop / d:g}): {out['reason'][j]}"
        elif status == "converged":
            msg = (
                f"converged: the excess risk recorded at step {stop} (t = {stop / d:g}) is below the early-stop "
                f"threshold (risk_tol / risk_rtol); interpolated crossing at t = {stop_time:g}"
            )
        elif status == "interrupted":
            msg = f"interrupted at step {stop} (t = {stop / d:g})"
        else:
            msg = f"{steps} SGD steps ({steps * B} samples{'' if not n else f', training set of {n}'})"
        final = None
        if keep_weights and status in ("completed", "converged"):
            base = first if students is None else students[j]
            final = base.with_weights(out["W"][j], out["a_final"][j] / c)
        return Trajectory(
            t=t_all[:T].copy(),
            Q=out["Q"][j, :T].copy(),
            M=out["M"][j, :T].copy(),
            a=out["a"][j, :T].copy(),
            risk=out["risk"][j, :T].copy(),
            status=status,
            message=msg,
            time_unit=_TIME_UNIT,
            student=final,
            meta=_run_meta(meta, params, j, int(run), status, stop),
            P=P_teacher,
            v=teacher.effective_a.copy(),
            stop_time=stop_time,
        )

    def results(out: dict[str, Any]) -> Trajectory | Ensemble:
        trajs = [run_result(out, j, int(run)) for j, run in enumerate(run_ids)]
        if seeds is None:
            return trajs[0]
        return Ensemble(runs=trajs, run_ids=run_ids, t=t_all, seed=seed_, meta=meta, params=params)

    args: _SgdArgs = (W0, a0, first.activation, teacher.W, teacher.effective_a, teacher.activation, first.scale)
    out: dict[str, Any] | None = None
    with keep_partial(lambda: None if out is None else results(out)):  # a Ctrl-C in the bar or the conversion
        with partial_result(results), progress_bar(progress, steps * run_ids.size, "step", "SGD", True) as update:
            out = _core.sgd_simulate(*args, **kwargs, progress=update)
        return results(out)
