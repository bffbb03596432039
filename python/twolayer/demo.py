"""The main job, ``twolayer demo``: Mariantoni & Chizat's symmetry-breaking experiment and the Saad-Solla plateau.

Mariantoni & Chizat (2022): step units (sigma = 1(s > 0)), m = 4 teacher and 4 student units in d = 50,
trained by gradient descent on the population loss. Students and teachers start either with i.i.d. Gaussian
entries or as one orthonormal set of 2m vectors ("orthogonal dynamics"). The orthogonal start is invariant under
permutations of the units, so descent stays on a symmetric fixed point (excess risk 0.356189... at m = 4);
Gaussian starts break the symmetry and mostly reach the global minimum, sometimes a spurious minimum. The loss
has a cusp at alignment (it grows linearly with the angle), so fixed steps oscillate there with an amplitude
~ lr (excess risk ~1e-3): as in the paper, the step is decayed after ``decay_start`` iterations (halved every
``decay_every``, :func:`twolayer.schedules.step_decay`), and the converging runs reach ~1e-13 (the paper's
"machine error, on the order of 1e-9"): the step pairs' angle comes from the chords of the unit vectors, resolved
down to ~1e-13 rad, where the arccosine of the overlaps' cosine stalls at theta ~ 1.5e-8 (risk ~2e-9 a pair).

Plateau panel: an erf student (K = 2) learns an erf teacher (M = 2, orthonormal rows) by online SGD. The
order-parameter ODE (d -> infinity) started from the same overlaps shows the symmetric plateau and the escape
as the students specialise; finite-d SGD (d = 1000, several seeds: mean and spread) follows it.
"""

from __future__ import annotations

import csv
import functools
import os
import tempfile
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import ode, population, sgd
from ._deprecation import REMOVED_IN, renamed, renamed_attribute, warn_renamed
from ._validation import INT32_MAX, SEED_MAX, boolean, choice, integer, integers, positive, writing
from .networks import Init, teacher_student
from .overlaps import Overlaps
from .plot import demo_figure, pyplot
from .results import Trajectory
from .schedules import Schedule, step_decay


@dataclass(kw_only=True)
class DemoConfig:
    """The symmetry-breaking experiment of Mariantoni & Chizat (2022).

    Keyword-only. The former fields ``units`` (K = M), ``steps`` and ``records`` are accepted, as keywords and
    attributes, until twolayer 0.3 with a ``DeprecationWarning``.

    Attributes
    ----------
    K, M : int, default 4
        Student and teacher units (the paper's m = K = M).
    d : int, default 50
        Input dimension.
    lr : float, default 1.0
        Step of population gradient descent.
    n_steps : int, default 20000
        Iterations.
    seeds : tuple of int
        One run per seed and initialisation.
    inits : tuple of str
        ``"gaussian"`` and/or ``"orthogonal"``.
    n_records : int, default 60
        Log-spaced records per run.
    decay : float, default 0.5
        The step's factor every ``decay_every`` iterations after ``decay_start`` (1: fixed steps); see
        :meth:`schedule`.
    decay_every : int, default 300
        Iterations between two decays of the step.
    decay_start : int, default 10000
        Iteration at which the step starts decaying.

    Examples
    --------
    >>> tl.demo.DemoConfig(K=2, M=2, d=8, n_steps=100)  # doctest: +NORMALIZE_WHITESPACE
    DemoConfig(K=2, M=2, d=8, lr=1.0, n_steps=100, seeds=(0, 1, 2, 3, 4), inits=('gaussian', 'orthogonal'),
               n_records=60, decay=0.5, decay_every=300, decay_start=10000)
    >>> tl.demo.DemoConfig().schedule()
    Schedule(step, value=1, gamma=0.5, every=300, start=10000)
    """

    K: int = 4
    M: int = 4
    d: int = 50
    lr: float = 1.0
    n_steps: int = 20_000
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    inits: tuple[Init, ...] = ("gaussian", "orthogonal")
    n_records: int = 60
    decay: float = 0.5  # the step's factor every decay_every iterations after decay_start (1: fixed steps)
    decay_every: int = 300
    decay_start: int = 10_000

    steps = renamed_attribute("n_steps", writable=True)
    records = renamed_attribute("n_records", writable=True)

    @property
    def units(self) -> int:
        """Deprecated: K = M (removed in twolayer 0.3)."""
        _warn_units()
        if self.K != self.M:
            raise ValueError(f"units: K = {self.K} and M = {self.M} differ; read K and M")
        return self.K

    @units.setter
    def units(self, value: int) -> None:
        _warn_units()
        self.K = self.M = value

    def schedule(self) -> Schedule:
        """The learning-rate schedule of the descent (:func:`twolayer.schedules.step_decay`)."""
        return step_decay(self.decay, float(self.decay_every), float(self.decay_start))


@dataclass
class PlateauConfig:
    """The Saad-Solla plateau panel: an erf K = M = 2 student by online SGD and the ODE.

    Attributes
    ----------
    d : int, default 1000
        Input dimension of the SGD runs.
    lr : float, default 1.0
        Learning rate.
    t_max : float, default 200.0
        Duration (t = steps / d).
    seeds : int, default 5
        SGD runs.
    student_scale : float, default 0.3
        Student entries N(0, scale^2): Q ~ scale^2 I, M ~ scale / sqrt(d).
    n_records : int, default 201
        Recorded times (``records``: the former spelling, deprecated).

    Examples
    --------
    >>> tl.demo.PlateauConfig(d=20, t_max=5.0, seeds=2, n_records=6).t_max
    5.0
    """

    d: int = 1000
    lr: float = 1.0
    t_max: float = 200.0
    seeds: int = 5
    student_scale: float = 0.3  # student entries N(0, scale^2): Q ~ scale^2 I, M ~ scale / sqrt(d)
    n_records: int = 201

    records = renamed_attribute("n_records", writable=True)


def _warn_units(stacklevel: int = 3) -> None:
    warnings.warn("argument or attribute 'units' of twolayer.demo.DemoConfig is deprecated; use 'K' and 'M' (the "
                  f"old spelling is removed in twolayer {REMOVED_IN})", DeprecationWarning, stacklevel=stacklevel)


def _accept_units(init: Callable[..., None]) -> Callable[..., None]:
    """``DemoConfig(units=m)``, the former spelling of ``K=m, M=m``, with a DeprecationWarning."""
    @functools.wraps(init)
    def __init__(self: DemoConfig, **kwargs: Any) -> None:
        if "units" in kwargs:
            if "K" in kwargs or "M" in kwargs:
                raise TypeError("twolayer.demo.DemoConfig() got both 'units' and its new spelling 'K'/'M'; pass "
                                "only 'K' and 'M'")
            _warn_units(stacklevel=4)
            kwargs["K"] = kwargs["M"] = kwargs.pop("units")
        init(self, **kwargs)

    return __init__


DemoConfig.__init__ = renamed(steps="n_steps", records="n_records")(  # type: ignore[method-assign]
    _accept_units(DemoConfig.__init__))
PlateauConfig.__init__ = renamed(records="n_records")(PlateauConfig.__init__)  # type: ignore[method-assign]


@dataclass
class PlateauResult:
    """What :func:`run_plateau` returns.

    Attributes
    ----------
    config : PlateauConfig
        The configuration.
    ode : Trajectory
        The ODE from the SGD runs' initial overlaps.
    sgd : twolayer.sgd.Ensemble
        The SGD runs.

    Examples
    --------
    >>> cfg = tl.demo.PlateauConfig(d=20, t_max=5.0, seeds=2, n_records=6)
    >>> tl.demo.run_plateau(cfg).sgd
    Ensemble(runs=2, T=6, diverged=0, converged=0, seed=11)
    """

    config: PlateauConfig
    ode: Trajectory
    sgd: sgd.Ensemble


@dataclass
class DemoResult:
    """What :func:`run_symmetry_breaking` and :func:`run` return.

    Attributes
    ----------
    config : DemoConfig
        The configuration.
    runs : dict of str to list of Trajectory
        The descent runs per initialisation, one per seed.
    plateau : PlateauResult or None
        The plateau panel (filled by :func:`run`).

    Examples
    --------
    >>> cfg = tl.demo.DemoConfig(K=2, M=2, d=8, n_steps=100, seeds=(0, 1), n_records=5)
    >>> print(tl.demo.run_symmetry_breaking(cfg).table())
    init         seeds      median         min         max   reached < 1e-8
    gaussian         2     0.05131    0.008911     0.09371         0 of 2
    orthogonal       2      0.1647      0.1647      0.1647         0 of 2
    """

    config: DemoConfig
    runs: dict[str, list[Trajectory]] = field(default_factory=dict)
    plateau: PlateauResult | None = None

    def table(self) -> str:
        """A short text table: final excess risk per initialisation (and the plateau's)."""
        lines = [f"{'init':<12}{'seeds':>6}{'median':>12}{'min':>12}{'max':>12}{'  reached < 1e-8':>17}"]
        for init, runs in self.runs.items():
            final = np.array([r.final_risk for r in runs])
            lines.append(f"{init:<12}{len(final):>6}{np.median(final):>12.4g}{final.min():>12.4g}"
                         f"{final.max():>12.4g}{int(np.sum(final < 1e-8)):>10d} of {len(final)}")
        if self.plateau is not None:
            p, c = self.plateau, self.plateau.config
            final = p.sgd.risk[:, -1]
            lines += ["", f"erf plateau (K = M = 2, lr = {c.lr}): excess risk at t = {c.t_max:g}",
                      f"{'ODE':<12}{p.ode.final_risk:>12.4g}",
                      f"{'SGD d=' + str(c.d):<12}{final.mean():>12.4g} +- {final.std(ddof=1):.2g} "
                      f"({len(final)} seeds)"]
        return "\n".join(lines)


def _check_config(config: object, cls: type, name: str) -> None:
    """Check every field of a DemoConfig / PlateauConfig (they are plain, mutable dataclasses), naming it
    ``config.<field>``."""
    if not isinstance(config, cls):
        raise TypeError(f"{name}: expected a twolayer.demo.{cls.__name__} or None, got {type(config).__name__}")
    if isinstance(config, DemoConfig):
        integer(config.K, f"{name}.K", 1, INT32_MAX)
        integer(config.M, f"{name}.M", 1, INT32_MAX)
        integer(config.d, f"{name}.d", 1, INT32_MAX)
        positive(config.lr, f"{name}.lr")
        integer(config.n_steps, f"{name}.n_steps", 0)
        integer(config.n_records, f"{name}.n_records", 2, INT32_MAX)
        integer(config.decay_every, f"{name}.decay_every", 1)
        integer(config.decay_start, f"{name}.decay_start", 0)
        if not positive(config.decay, f"{name}.decay", allow_zero=True) <= 1.0:
            raise ValueError(f"{name}.decay: expected a factor in [0, 1], got {config.decay!r}")
        if not integers(config.seeds, f"{name}.seeds", 0, SEED_MAX):
            raise ValueError(f"{name}.seeds: expected at least one seed")
        if isinstance(config.inits, str) or not isinstance(config.inits, Iterable):
            raise TypeError(f"{name}.inits: expected a sequence of 'gaussian'/'orthogonal', got {config.inits!r}")
        for i, init in enumerate(config.inits):
            choice(init, f"{name}.inits[{i}]", ("gaussian", "orthogonal"))
    elif isinstance(config, PlateauConfig):
        integer(config.d, f"{name}.d", 4, INT32_MAX)  # K + M = 4 orthonormal teacher and student rows
        positive(config.lr, f"{name}.lr")
        positive(config.t_max, f"{name}.t_max")
        integer(config.seeds, f"{name}.seeds", 1, 2**32 - 1)
        positive(config.student_scale, f"{name}.student_scale")
        integer(config.n_records, f"{name}.n_records", 2, INT32_MAX)


def run_symmetry_breaking(config: DemoConfig | None = None, progress: bool = False) -> DemoResult:
    """Population gradient descent for every (init, seed) of ``config``.

    Parameters
    ----------
    config : DemoConfig, optional
        Default: ``DemoConfig()`` (m = 4, d = 50, five seeds).
    progress : bool, default False
        A tqdm bar over the runs.

    Returns
    -------
    DemoResult
        Without the plateau panel.

    Examples
    --------
    >>> cfg = tl.demo.DemoConfig(K=2, M=2, d=8, n_steps=100, seeds=(0,), n_records=5)
    >>> res = tl.demo.run_symmetry_breaking(cfg)
    >>> sorted(res.runs), len(res.runs["gaussian"][0].t)
    (['gaussian', 'orthogonal'], 5)
    """
    cfg = DemoConfig() if config is None else config
    _check_config(cfg, DemoConfig, "config")
    progress = boolean(progress, "progress")
    result = DemoResult(cfg)
    jobs = [(init, seed) for init in cfg.inits for seed in cfg.seeds]
    iterator: Iterable[tuple[Init, int]] = jobs
    if progress:
        from tqdm import tqdm

        iterator = tqdm(jobs, desc="Mariantoni-Chizat: population descent", unit="run")
    for init, seed in iterator:
        student, teacher = teacher_student(cfg.K, cfg.M, cfg.d, "step", init=init, seed=seed)
        result.runs.setdefault(init, []).append(
            population.descend(student, teacher, lr=cfg.lr, n_steps=cfg.n_steps, n_records=cfg.n_records,
                               schedule=cfg.schedule()))
    return result


def run_plateau(config: PlateauConfig | None = None, progress: bool = False) -> PlateauResult:
    """The erf K = M = 2 plateau: SGD ensemble at finite d and the ODE from the same initial overlaps.

    Parameters
    ----------
    config : PlateauConfig, optional
        Default: ``PlateauConfig()`` (d = 1000, five seeds).
    progress : bool, default False
        A tqdm bar over the SGD steps.

    Returns
    -------
    PlateauResult

    Examples
    --------
    >>> cfg = tl.demo.PlateauConfig(d=20, t_max=5.0, seeds=2, n_records=6)
    >>> res = tl.demo.run_plateau(cfg)
    >>> bool(np.array_equal(res.ode.t, res.sgd.t))
    True
    """
    cfg = PlateauConfig() if config is None else config
    _check_config(cfg, PlateauConfig, "config")
    student, teacher = teacher_student(2, 2, cfg.d, "erf", init="orthogonal", seed=7)
    W = np.random.default_rng(8).standard_normal((2, cfg.d)) * cfg.student_scale
    student = student.with_weights(W)
    ens = sgd.simulate(student, teacher, lr=cfg.lr, t_max=cfg.t_max, n_records=cfg.n_records, seed=11, seeds=cfg.seeds,
                       progress=progress)
    assert isinstance(ens, sgd.Ensemble)
    traj = ode.integrate(Overlaps.from_networks(student, teacher), "erf", lr=cfg.lr, times=ens.t, method="adaptive")
    return PlateauResult(cfg, traj, ens)


def write_csv(result: DemoResult, path: str) -> None:
    """Write the demo's data as CSV.

    Long format: panel, series, seed (or -1), time (iterations or
    t = steps / d), excess risk.

    Parameters
    ----------
    result : DemoResult
        The results.
    path : str
        The file to write.

    Examples
    --------
    >>> import os, tempfile
    >>> cfg = tl.demo.DemoConfig(K=2, M=2, d=8, n_steps=10, seeds=(0,), n_records=3)
    >>> with tempfile.TemporaryDirectory() as out:
    ...     tl.demo.write_csv(tl.demo.run_symmetry_breaking(cfg), os.path.join(out, "demo.csv"))
    ...     with open(os.path.join(out, "demo.csv")) as fh:
    ...         print(fh.readline().strip())
    panel,series,seed,time,risk
    """
    with writing(path), open(path, "w", newline="") as fh:  # errors name the path
        w = csv.writer(fh)
        w.writerow(["panel", "series", "seed", "time", "risk"])
        for init, runs in result.runs.items():
            for seed, tr in zip(result.config.seeds, runs, strict=True):
                for t, r in zip(tr.t, tr.risk, strict=True):
                    w.writerow(["symmetry_breaking", init, seed, int(t), f"{r:.10g}"])
        if result.plateau is not None:
            p = result.plateau
            for t, r in zip(p.ode.t, p.ode.risk, strict=True):
                w.writerow(["plateau", "ode", -1, f"{t:.6g}", f"{r:.10g}"])
            for run_id, tr in zip(p.sgd.run_ids, p.sgd.runs, strict=True):
                for t, r in zip(tr.t, tr.risk, strict=True):
                    w.writerow(["plateau", f"sgd_d{p.config.d}", int(run_id), f"{t:.6g}", f"{r:.10g}"])


def _prepare_output(out: object) -> str:
    """Create the output directory ``out`` (and its parents) and make sure files can be created in it, before
    any work is done: OSError with one readable line (naming the directory) otherwise."""
    if not isinstance(out, (str, os.PathLike)):
        raise TypeError(f"out: expected a directory path, got {type(out).__name__}")
    path = os.fspath(out)
    if not isinstance(path, str):
        raise TypeError(f"out: expected a str path, got {type(path).__name__}")
    if os.path.exists(path) and not os.path.isdir(path):
        raise NotADirectoryError(f"cannot write demo.csv and demo.png to {path}: it exists and is not a directory")
    try:
        os.makedirs(path, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".twolayer-write-test-")
        probe.close()
    except OSError as exc:
        raise type(exc)(exc.errno, f"cannot write demo.csv and demo.png to {path}: {exc.strerror or exc}") from exc
    return path


def _write(path: str, writer: Callable[[str], object]) -> None:
    """``writer(path)``, turning a failure (disk full, permissions, ...) into one readable OSError line."""
    try:
        writer(path)
    except OSError as exc:
        raise type(exc)(exc.errno, f"cannot write {os.path.basename(path)} to {os.path.dirname(path) or '.'}: "
                                   f"{exc.strerror or exc}") from exc


def run(out: str = ".", progress: bool = False, config: DemoConfig | None = None,
        plateau: PlateauConfig | None = None) -> DemoResult:
    """Run the demo, print nothing, write demo.csv and demo.png into ``out``.

    The arguments are checked and ``out`` is created and tested for writing
    before the runs start; a failure to write raises OSError whose message
    names the file and the directory. Needs matplotlib (the ``plot`` extra).

    Parameters
    ----------
    out : str, default "."
        Output directory (created if needed).
    progress : bool, default False
        Progress bars.
    config : DemoConfig, optional
        The symmetry-breaking experiment (default ``DemoConfig()``).
    plateau : PlateauConfig, optional
        The plateau panel (default ``PlateauConfig()``).

    Returns
    -------
    DemoResult

    Examples
    --------
    >>> import os, tempfile
    >>> cfg = tl.demo.DemoConfig(K=2, M=2, d=8, n_steps=10, seeds=(0,), n_records=3)
    >>> plateau = tl.demo.PlateauConfig(d=20, t_max=2.0, seeds=2, n_records=3)
    >>> with tempfile.TemporaryDirectory() as out:  # doctest: +SKIP
    ...     res = tl.demo.run(out, config=cfg, plateau=plateau)
    ...     sorted(os.listdir(out))
    ['demo.csv', 'demo.png']

    (Not run by the doctests, it takes seconds: ``tests/test_cli.py`` runs
    the demo.)
    """
    progress = boolean(progress, "progress")
    _check_config(DemoConfig() if config is None else config, DemoConfig, "config")
    _check_config(PlateauConfig() if plateau is None else plateau, PlateauConfig, "plateau")
    out = _prepare_output(out)
    pyplot()  # ImportError (matplotlib missing) before the runs, not after them

    result = run_symmetry_breaking(config, progress=progress)
    result.plateau = run_plateau(plateau, progress=progress)
    _write(os.path.join(out, "demo.csv"), lambda p: write_csv(result, p))
    _write(os.path.join(out, "demo.png"), lambda p: demo_figure(result, p))
    return result


def __getattr__(name: str) -> Callable[..., DemoResult]:
    """``run_seed000``, the former name of :func:`run_symmetry_breaking` (an internal seed number; removed in
    twolayer 0.3), with a DeprecationWarning."""
    if name == "run_seed000":
        warn_renamed("twolayer.demo", "run_seed000", "run_symmetry_breaking", what="function")
        return run_symmetry_breaking
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
