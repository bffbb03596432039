"""Finite-d SGD of a two-layer student on samples from a teacher: the ground truth for the ODEs.

Conventions (the documentation's Conventions page). Inputs x ~ N(0, I_d); pre-activations lambda = W x / sqrt(s) (s = d
for ``scaling="sqrt_d"``, 1 for ``"none"``); f(x) = c sum_i a_i sigma(lambda_i) with c the readout factor
(1 for ``readout="sum"``, 1/K for ``"mean"``); y = sum_r v_r sigma*(lambda*_r) + sqrt(noise) xi. With
E = y - f, one step on a batch of B samples is plain SGD on the network's parameters W and a::

    w_i += (lr sqrt(s) / d) * mean_batch[c a_i sigma'(lambda_i) E x]     (lr / sqrt(d) for s = d)
    a_i += (lr_readout / d) * mean_batch[c sigma(lambda_i) E]            (fixed if lr_readout = 0)
    b_i += (lr_bias / d) * mean_batch[c a_i sigma'(lambda_i) E]          (fixed if lr_bias = 0)

all evaluated before the step. Biases (``Network(..., bias=)``, student and teacher): lambda_i = w_i . x / sqrt(s) +
b_i, lambda*_r = w*_r . x / sqrt(s) + b*_r; in time t = steps / d the student's biases move as db_i/dt = lr_bias E[c
a_i sigma'(lambda_i) E], the ODE's convention. A run with biases (a nonzero student or teacher bias, or ``lr_bias >
0``) records them (``Trajectory.bias``, (T, K); the teacher's in ``teacher_bias``) and draws the same samples as
without; its recorded ``risk`` is the exact excess risk with means (the kernels with means, :mod:`twolayer.kernels`:
equal to :func:`twolayer.population.risk` of the recorded weights), early stop included. Against a polynomial target
a student with biases records the exact risk with its biases too (the target engine's, target.hpp; every
activation), early stop included. The divergence rule also checks the biases. A run without biases is bitwise the
same as before biases existed.

One online step of learning rate lr is in expectation one step of population gradient descent with learning rate lr,
and the d -> infinity limit is ``tl.ode.integrate`` with the same ``lr``, ``lr_readout``, ``noise`` and ``readout``
(in the ODE's effective units the readout moves with c^2 lr_readout). ``spherical=True`` (spherical SGD, as in
"Escaping mediocrity", Arnaboldi et al. 2023) then rescales every w_i to ``|w_i|^2 = s``, i.e. Q_ii = 1 (the initial
weights are projected too). Trajectory.a holds the effective second layer c a, as Overlaps does.

Time is t = steps / d. Online (``n_samples=None``): every step draws B fresh samples. With ``n_samples=n``
(the correlated-samples regime of "First order optimization methods in two-layer neural networks training",
n = alpha d) one training set is drawn per run and visited in
batches of B, epoch after epoch, reshuffled every epoch unless ``shuffle=False``; ``batch_size=n_samples`` is
full-batch gradient descent. That paper's large-batch SGD (batches of n_b = alpha d, step gamma0 on
unit-norm weights, lambda = w.z) is ``lr = gamma0 * d, batch_size = alpha * d`` here (our weights have norm sqrt d); its
d -> infinity limit is ``tl.ode.integrate(..., lr=gamma0, regime="large_batch", batch_ratio=alpha, n_steps=T)``
(:mod:`twolayer.large_batch`), T steps being t_max = T / d. That paper's online SGD (n_b = 1, step
gamma0 / d) is ``lr = gamma0``.

Randomness comes from counter-based Philox4x32-10 streams keyed by (seed, run): a run's inputs, label noise,
training set and shuffles are fixed by those two numbers alone, so results are bit-identical whatever the
number of threads, and run j of an ensemble equals the single run with ``seeds=[j]``.

Recorded at the requested times: Q, M, the effective a (and the biases b) and the exact excess population risk
(noise/2 not included) computed from the overlaps with the closed-form kernels -- not a test-set estimate. Every
activation pair has a closed-form I2, so no estimate is ever needed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeAlias, overload

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._core import DeviceUnavailable
from ._deprecation import renamed
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
from .results import SIMULATION_STATUS, SIMULATION_TIME_UNIT, Ensemble, Status, Trajectory, run_meta
from .schedules import Schedule, as_schedule, core_arg
from .targets import FunctionTarget, HermiteTarget, is_target

__all__ = ["grid", "simulate"]  # Ensemble (results.py) is importable from here too


def _message(status: Status, out: dict[str, Any], j: int, steps: int, batch_size: int, n_samples: int,
             params: dict[str, NDArray[np.float64]]) -> str:
    """The message of run j (run_messages.hpp, the text every engine shares)."""
    stop_step, stop_time = int(out["stop_step"][j]), float(out["stop_time"][j])
    if status == Status.diverged:
        return _core.diverged_message(stop_time, str(out["reason"][j]))
    if status == Status.interrupted:
        return _core.interrupted_message(stop_time, stop_step)
    if status == Status.converged:
        return converged_message(out["risk"][j, : int(out["recorded"][j])], params, j, stop_time)
    return _core.sgd_completed_message(steps, steps * batch_size, n_samples)


def converged_message(risk: NDArray[np.float64], params: dict[str, NDArray[np.float64]], j: int,
                      stop_time: float) -> str:
    """The message of a run j of a simulator stopped by its early-stop rule: its recorded ``risk`` rows end at the
    first one below max(risk_tol, risk_rtol R(0)) (a NaN tolerance is off)."""
    tol, rtol = float(params["risk_tol"][j]), float(params["risk_rtol"][j])
    tol, rtol = (0.0 if np.isnan(tol) else tol), (0.0 if np.isnan(rtol) else rtol)
    return _core.converged_message(float(risk[-1]), max(tol, rtol * float(risk[0])), tol, rtol, stop_time)


# The positional arguments of _core.sgd_simulate: W, a, act, W_teacher, v, act_teacher, scale.
_SgdArgs: TypeAlias = tuple[
    NDArray[np.float64], NDArray[np.float64], str, NDArray[np.float64], NDArray[np.float64], str, float
]


def _check_distinct_runs(run_ids: NDArray[np.int64], params: dict[str, NDArray[np.float64]]) -> None:
    """Two runs of one call may share a run index (the same random samples) only with different lr,
    lr_readout, noise or lr_bias: identical runs are refused."""
    names = [k for k in ("lr", "lr_readout", "noise", "lr_bias") if k in params]
    keys = np.stack([run_ids.astype(np.float64), *(params[k] for k in names)], axis=1)
    if np.unique(keys, axis=0).shape[0] != keys.shape[0]:
        raise ValueError(
            "seeds: run indices must be distinct (a run index may repeat only with different lr, lr_readout, "
            "noise or lr_bias)"
        )


def _risk_method(biased: bool, target: bool) -> str:
    """``meta["risk_method"]``: how the recorded risk is computed (module docstring)."""
    if not biased:
        return "exact (closed-form kernels)"
    return "exact (target kernels with means)" if target else "exact (kernels with means)"


def _initial_students(student: Any) -> tuple[list[Network] | None, Network]:
    """(the per-run starts or None, the first start) of ``student``: a Network, or a non-empty sequence of Networks of
    the same K, d, activation, scaling and readout (biases handled)."""
    if isinstance(student, Network):
        return None, student
    if not isinstance(student, Sequence):
        raise TypeError(f"student: expected a Network or a sequence of Networks, got {type(student).__name__}")
    students = list(student)
    if not students:
        raise ValueError("student: expected a Network or a non-empty sequence of Networks")
    for j, s in enumerate(students):
        check_network(s, f"student[{j}]", biases=True)
        if (s.K, s.d, s.activation, s.scaling, s.readout) != (
            students[0].K, students[0].d, students[0].activation, students[0].scaling, students[0].readout
        ):
            raise ValueError(
                f"student[{j}]: every initial network must have the same K, d, activation, scaling and readout"
            )
    return students, students[0]


def _teacher_network(teacher: Any, first: Network) -> tuple[Network, HermiteTarget | None]:
    """The teacher as the core takes it (a HermiteTarget: its directions, v = 0 unused, labels from the target) and
    the target (None for a committee); checks both networks (finite, same d and scaling; biases handled)."""
    target = teacher if isinstance(teacher, HermiteTarget) else None
    if target is not None:
        check_network(first, "student", biases=True)
        if target.d != first.d or target.scaling != first.scaling:
            raise ValueError(f"teacher: the target's d = {target.d}, scaling {target.scaling!r} do not match the "
                             f"student's d = {first.d}, scaling {first.scaling!r}")
        teacher = Network(target.directions, np.zeros(target.k), first.activation, first.scaling)
    elif is_target(teacher):  # pragma: no cover - every target type is handled above
        raise TypeError(f"teacher: unsupported target {type(teacher).__name__}")
    check_pair(first, teacher, biases=True)
    return teacher, target


def _check_spherical_starts(students: list[Network] | None, first: Network) -> None:
    for j, s in enumerate(students or [first]):
        if np.any(np.linalg.norm(s.W, axis=1) == 0):
            raise ValueError(
                f"student{'' if students is None else f'[{j}]'}: spherical SGD needs every row of W to be nonzero"
            )


def _run_ids(seeds: int | Sequence[int] | None, students: list[Network] | None) -> NDArray[np.int64]:
    run_ids = np.array([0], dtype=np.int64) if seeds is None else run_indices(seeds)
    if run_ids.size == 0:
        raise ValueError("seeds: expected at least one run")
    if students is not None and len(students) != run_ids.size:
        raise ValueError(f"student: got {len(students)} initial networks for {run_ids.size} runs")
    return run_ids


def _run_params(R: int, single: bool, **values: Any) -> dict[str, NDArray[np.float64]]:
    """The per-run parameters (R,): ``lr`` > 0, ``lr_readout``, ``noise``, ``lr_bias`` >= 0, the tolerances > 0
    (None: off, NaN)."""
    hint = "; give seeds= for several runs" if single else " of seeds"
    out = {}
    for name in ("lr", "lr_readout", "noise", "risk_tol", "risk_rtol", "lr_bias"):
        x = values[name]
        if x is None and name.startswith("risk_"):  # a tolerance that is off
            out[name] = np.full(R, np.nan)
        else:
            out[name] = per_item(x, name, R, allow_zero=name not in ("lr", "risk_tol", "risk_rtol"), item="run",
                                 hint=hint)
    return out


def _core_kwargs(students: list[Network] | None, first: Network, teacher: Network, target: HermiteTarget | None,
                 params: dict[str, NDArray[np.float64]], biased: bool, flags: dict[str, bool], *, B: int, n: int,
                 steps: int, rec: NDArray[np.int64], seed: int, run_ids: NDArray[np.int64], n_threads: int | None,
                 sched: Schedule | None, device: str) -> dict[str, Any]:
    """The keyword arguments of ``_core.sgd_simulate`` (and the starts ``W``, ``a``; ``bias``, ``teacher_bias``,
    ``lr_bias`` only with biases)."""
    starts = students or [first]
    stacked = students is not None
    kwargs: dict[str, Any] = dict(
        W=np.stack([s.W for s in starts]) if stacked else first.W,
        a=np.stack([s.effective_a for s in starts]) if stacked else first.effective_a,
        lr=params["lr"],
        train_first=flags["train_first_layer"],
        lr_readout=params["lr_readout"] * first.readout_factor**2,
        noise=params["noise"],
        risk_tol=np.nan_to_num(params["risk_tol"], nan=-1.0),
        risk_rtol=np.nan_to_num(params["risk_rtol"], nan=-1.0),
        batch=B,
        spherical=flags["spherical"],
        n_samples=n,
        shuffle=flags["shuffle"],
        steps=steps,
        record_steps=rec,
        seed=seed,
        runs=run_ids.astype(np.uint32),
        keep_weights=flags["keep_weights"],
        n_threads=n_threads_arg(n_threads),
        schedule=core_arg(sched),
        device=device,
    )
    if biased:
        kwargs["bias"] = np.stack([s.bias for s in starts]) if stacked else first.bias
        kwargs["teacher_bias"] = teacher.bias if target is None else None
        kwargs["lr_bias"] = params["lr_bias"]
    if target is not None:
        kwargs["target_alpha"], kwargs["target_coef"] = target._arrays()
    return kwargs


class _Results:
    """The Trajectory of every run (an Ensemble with ``seeds``) from the core's output dict."""

    def __init__(self, first: Network, students: list[Network] | None, teacher: Network, teacher_bias: bool,
                 params: dict[str, NDArray[np.float64]], meta: dict[str, Any], run_ids: NDArray[np.int64],
                 ensemble: bool, t: NDArray[np.float64], keep_weights: bool) -> None:
        self.first, self.students, self.params, self.meta = first, students, params, meta
        self.run_ids, self.ensemble, self.t, self.keep_weights = run_ids, ensemble, t, keep_weights
        self.P = gram(teacher.W, teacher.W, teacher.scale, "teacher.W")  # with v: what overlaps_at needs
        self.v = teacher.effective_a.copy()
        self.teacher_bias = teacher.bias.copy() if teacher_bias else None

    def run(self, out: dict[str, Any], j: int) -> Trajectory:
        T = int(out["recorded"][j])
        status = SIMULATION_STATUS[int(out["status"][j])]
        meta = self.meta
        msg = _message(status, out, j, meta["steps"], meta["batch_size"], meta["n_samples"], self.params)
        biased = out.get("bias") is not None
        final = None
        if self.keep_weights and status.success:
            base = self.first if self.students is None else self.students[j]
            final = base.with_weights(out["W"][j], out["a_final"][j] / self.first.readout_factor,
                                      bias=out["b_final"][j].copy() if biased else None)
        return Trajectory(
            t=self.t[:T].copy(),
            Q=out["Q"][j, :T].copy(),
            M=out["M"][j, :T].copy(),
            a=out["a"][j, :T].copy(),
            risk=out["risk"][j, :T].copy(),
            status=status,
            message=msg,
            time_unit=SIMULATION_TIME_UNIT,
            student=final,
            meta=run_meta(meta, self.params, j, int(self.run_ids[j]), status, int(out["stop_step"][j])),
            P=self.P,
            v=self.v.copy(),
            stop_time=float(out["stop_time"][j]),
            bias=out["bias"][j, :T].copy() if biased else None,
            teacher_bias=None if self.teacher_bias is None or not biased else self.teacher_bias.copy(),
        )

    def __call__(self, out: dict[str, Any]) -> Trajectory | Ensemble:
        trajs = [self.run(out, j) for j in range(self.run_ids.size)]
        if not self.ensemble:
            return trajs[0]
        return Ensemble(runs=trajs, run_ids=self.run_ids, t=self.t, seed=self.meta["seed"], meta=self.meta,
                        params=self.params)


def grid(seeds: int | Sequence[int], **axes: ArrayLike) -> dict[str, Any]:
    """The per-run arguments of :func:`simulate` for a Cartesian grid of parameters times runs.

    ``axes``: 1-d values of per-run parameters (``lr``, ``lr_readout``, ``noise``, ``risk_tol``,
    ``risk_rtol``, ``lr_bias``); ``seeds``: the run indices repeated at every grid point (an int n: 0..n-1), so
    that every point sees the same random samples. Run order is C order over the axes as given, then the run indices
    (fastest). Returns ``{"seeds": [...], name: array, ...}`` to pass as ``simulate(..., **grid(...))``;
    ``Ensemble.to_xarray().set_index(member=[*axes, "run_id"]).unstack("member")`` restores the grid.

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
    >>> ens = tl.sgd.simulate(s, t, t_max=5, n_records=6, **g)
    >>> ens.select(lr=0.2)
    Ensemble(runs=2, T=6, diverged=0, converged=0, seed=0)
    """
    allowed = ("lr", "lr_readout", "noise", "risk_tol", "risk_rtol", "lr_bias")
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
    n_records: int = ...,
    risk_tol: ArrayLike | None = ...,
    risk_rtol: ArrayLike | None = ...,
    n_threads: int | None = ...,
    progress: bool = ...,
    n_samples: int | None = ...,
    shuffle: bool = ...,
    train_first_layer: bool = ...,
    keep_weights: bool = ...,
    schedule: Schedule | ArrayLike | Callable[..., Any] | None = ...,
    device: Device = ...,
    lr_bias: ArrayLike = ...,
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
    n_records: int = ...,
    risk_tol: ArrayLike | None = ...,
    risk_rtol: ArrayLike | None = ...,
    n_threads: int | None = ...,
    progress: bool = ...,
    n_samples: int | None = ...,
    shuffle: bool = ...,
    train_first_layer: bool = ...,
    keep_weights: bool = ...,
    schedule: Schedule | ArrayLike | Callable[..., Any] | None = ...,
    device: Device = ...,
    lr_bias: ArrayLike = ...,
) -> Ensemble: ...


@renamed(records="n_records")
def simulate(
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
    n_records: int = 101,
    risk_tol: ArrayLike | None = None,
    risk_rtol: ArrayLike | None = None,
    n_threads: int | None = None,
    progress: bool = False,
    n_samples: int | None = None,
    shuffle: bool = True,
    train_first_layer: bool = True,
    keep_weights: bool = True,
    schedule: Schedule | ArrayLike | Callable[..., Any] | None = None,
    device: Device = "cpu",
    lr_bias: ArrayLike = 0.0,
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
    lr_bias : float >= 0, or array (R,)
        Learning rate of the student's biases (step lr_bias / d on b, module docstring); 0 (default) keeps them
        fixed. Any value > 0 makes the run one with biases (zeros when the student has none).
    noise : float >= 0, or array (R,)
        Variance Delta of the label noise.

        Per-run parameters (``lr``, ``lr_readout``, ``noise``, ``risk_tol``, ``risk_rtol``, ``lr_bias``): a number is
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
    t_max, times, n_records
        Run until t_max = steps / d, recording at ``n_records`` equally spaced times (0 and t_max
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
        criterion is off). The risk is evaluated at the record times only (no extra cost; a finer ``n_records``
        or ``times`` grid locates the stop more finely); that record is the run's last row, its final
        weights are attached, and ``stop_time`` (``Ensemble.stop_time``) is the crossing time
        interpolated linearly in t between that record and the previous one (the record's own time when it
        is the first). ``stop_time`` of a diverged or interrupted run is the time it stopped; NaN for a run
        that ran to the end. A run diverges by the rule every engine shares (docs: conventions, "Divergence"):
        its overlaps (Q, M, a) not finite, grown past 1e8 times the scale of its start and teacher, or out of the
        positive semi-definite cone, checked at every record and every d steps (or a sample's error overflowing
        within a step); its ``message`` says which.
    schedule : Schedule, array or callable, optional
        Learning-rate multiplier (:mod:`twolayer.schedules`): step n uses lr s(n / d), lr_readout s(n / d)
        and lr_bias s(n / d), evaluated in the core's loop, the same s(t) as :func:`twolayer.ode.integrate`'s; an
        array holds one value per step, a callable is evaluated once at t = n / d, n = 0 .. steps - 1. Shared by
        all runs.
    device : {"cpu", "cuda"}
        Where the runs are computed. ``"cuda"`` (a build with the CUDA backend and an NVIDIA GPU, else
        :class:`twolayer.DeviceUnavailable`) runs every run as one thread block with its weights on the GPU: the
        same Philox samples, statuses and divergence rule as the CPU, the rows equal to the CPU's up to the order
        of the sums over d (floating-point reassociation). It runs the online committee problem only (any
        activations, ``batch_size``, ``spherical``, early stop, noise, biases); ``n_samples``, polynomial or function
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
    >>> run = tl.sgd.simulate(s, t, lr=1.0, t_max=5, n_records=6, seed=3)
    >>> run.t, run.meta["steps"]
    (array([0., 1., 2., 3., 4., 5.]), 500)

    Runs stopped when their recorded risk falls to 5 % of the initial one:

    >>> ens = tl.sgd.simulate(s, t, lr=1.0, t_max=50, n_records=51, seeds=2,
    ...                       risk_rtol=0.05)
    >>> ens.status, np.round(ens.stop_time, 2)
    ([<Status.converged: 'converged'>, <Status.converged: 'converged'>], array([7.19, 6.11]))
    """
    students, first = _initial_students(student)
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
                                                n_records=n_records, train_first_layer=train_first_layer,
                                                shuffle=shuffle, lr_bias=lr_bias)
        return runs[0] if seeds is None else Ensemble(runs=runs, **fields)
    teacher, target = _teacher_network(teacher, first)
    flags = {name: boolean(value, name) for name, value in (
        ("spherical", spherical), ("shuffle", shuffle), ("train_first_layer", train_first_layer),
        ("keep_weights", keep_weights), ("progress", progress))}
    if flags["spherical"]:
        _check_spherical_starts(students, first)
    d = first.d
    B = integer(batch_size, "batch_size", 1, INT32_MAX)
    seed_ = seed_arg(seed)
    n = 0 if n_samples is None else integer(n_samples, "n_samples", 1, 2**32 - 1)
    if n and B > n:
        raise ValueError(f"batch_size: {B} exceeds the training set size n_samples={n}")
    run_ids = _run_ids(seeds, students)
    params = _run_params(run_ids.size, seeds is None, lr=lr, lr_readout=lr_readout, noise=noise,
                         risk_tol=risk_tol, risk_rtol=risk_rtol, lr_bias=lr_bias)
    biased = any(s.has_bias for s in students or [first]) or teacher.has_bias or bool(np.any(params["lr_bias"]))
    if not biased:
        del params["lr_bias"]  # a run without biases: its parameters, results and exports as before biases existed
    _check_distinct_runs(run_ids, params)
    rec = record_steps(d, t_max, times, n_records)
    steps = int(round(positive(t_max, "t_max") * d)) if t_max is not None else int(rec[-1])
    steps = max(steps, int(rec[-1]))
    sched = as_schedule(schedule, n_steps=steps, step_time=1.0 / d)
    kwargs = _core_kwargs(students, first, teacher, target, params, biased, flags, B=B, n=n, steps=steps, rec=rec,
                          seed=seed_, run_ids=run_ids, n_threads=n_threads, sched=sched, device=device)
    meta: dict[str, Any] = {
        "batch_size": B,
        "spherical": flags["spherical"],
        "d": d,
        "seed": seed_,
        "steps": steps,
        "n_samples": n,
        "regime": "training_set" if n else "online",
        "train_first_layer": flags["train_first_layer"],
        "risk_method": _risk_method(biased, target is not None),
        "activation": first.activation,
        "teacher_activation": teacher.activation if target is None else "target",
        **({} if sched is None else {"schedule": repr(sched)}),
        **({} if target is None else {"target": repr(target)}),
    }
    build = _Results(first, students, teacher, target is None and biased, params, meta, run_ids, seeds is not None,
                     rec.astype(np.float64) / d, flags["keep_weights"])
    args: _SgdArgs = (kwargs.pop("W"), kwargs.pop("a"), first.activation, teacher.W, teacher.effective_a,
                      teacher.activation, first.scale)
    out: dict[str, Any] | None = None
    with keep_partial(lambda: None if out is None else build(out)):  # a Ctrl-C in the bar or the conversion
        with partial_result(build), progress_bar(flags["progress"], steps * run_ids.size, "step", "SGD",
                                                 True) as update:
            out = _core.sgd_simulate(*args, **kwargs, progress=update)
        return build(out)
