"""The main job, ``twolayer demo``: seed 000's experiment and the Saad-Solla plateau (ODE and SGD).

Seed 000 (Mariantoni & Chizat): step units (sigma = 1(s > 0)), m = 4 teacher and 4 student units in d = 50,
trained by gradient descent on the population loss. Students and teachers start either with i.i.d. Gaussian
entries or as one orthonormal set of 2m vectors ("orthogonal dynamics"). The orthogonal start is invariant under
permutations of the units, so descent stays on a symmetric saddle (excess risk ~0.356) for a long time; Gaussian
starts break the symmetry and mostly reach the global minimum (up to the oscillation floor of fixed-step descent
on the loss's cusp), sometimes a spurious minimum.

Plateau panel: an erf student (K = 2) learns an erf teacher (M = 2, orthonormal rows) by online SGD. The
order-parameter ODE (d -> infinity) started from the same overlaps shows the symmetric plateau and the escape
as the students specialise; finite-d SGD (d = 1000, several seeds: mean and spread) follows it.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from . import ode, population, sgd
from .networks import Init, teacher_student
from .overlaps import Overlaps
from .results import Trajectory


@dataclass
class DemoConfig:
    units: int = 4
    d: int = 50
    lr: float = 1.0
    steps: int = 20_000
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    inits: tuple[Init, ...] = ("gaussian", "orthogonal")
    records: int = 60


@dataclass
class PlateauConfig:
    d: int = 1000
    lr: float = 1.0
    t_max: float = 200.0
    seeds: int = 5
    student_scale: float = 0.3  # student entries N(0, scale^2): Q ~ scale^2 I, M ~ scale / sqrt(d)
    records: int = 201


@dataclass
class PlateauResult:
    config: PlateauConfig
    ode: Trajectory
    sgd: sgd.Ensemble


@dataclass
class DemoResult:
    config: DemoConfig
    runs: dict[str, list[Trajectory]] = field(default_factory=dict)
    plateau: PlateauResult | None = None

    def table(self) -> str:
        """A short text table: final excess risk per initialisation."""
        lines = [f"{'init':<12}{'seeds':>6}{'median':>12}{'min':>12}{'max':>12}{'  reached < 1e-2':>17}"]
        for init, runs in self.runs.items():
            final = np.array([r.final_risk for r in runs])
            lines.append(f"{init:<12}{len(final):>6}{np.median(final):>12.4g}{final.min():>12.4g}"
                         f"{final.max():>12.4g}{int(np.sum(final < 1e-2)):>10d} of {len(final)}")
        if self.plateau is not None:
            p, c = self.plateau, self.plateau.config
            final = p.sgd.risk[:, -1]
            lines += ["", f"erf plateau (K = M = 2, lr = {c.lr}): excess risk at t = {c.t_max:g}",
                      f"{'ODE':<12}{p.ode.final_risk:>12.4g}",
                      f"{'SGD d=' + str(c.d):<12}{final.mean():>12.4g} +- {final.std(ddof=1):.2g} "
                      f"({len(final)} seeds)"]
        return "\n".join(lines)


def run_seed000(config: DemoConfig | None = None, progress: bool = False) -> DemoResult:
    """Population gradient descent for every (init, seed) of ``config``."""
    cfg = config or DemoConfig()
    result = DemoResult(cfg)
    jobs = [(init, seed) for init in cfg.inits for seed in cfg.seeds]
    iterator: Iterable[tuple[Init, int]] = jobs
    if progress:
        from tqdm import tqdm

        iterator = tqdm(jobs, desc="seed 000: population descent", unit="run")
    for init, seed in iterator:
        student, teacher = teacher_student(cfg.units, cfg.units, cfg.d, "step", init=init, seed=seed)
        result.runs.setdefault(init, []).append(
            population.descend(student, teacher, lr=cfg.lr, steps=cfg.steps, records=cfg.records))
    return result


def run_plateau(config: PlateauConfig | None = None, progress: bool = False) -> PlateauResult:
    """The erf K = M = 2 plateau: SGD ensemble at finite d and the ODE from the same initial overlaps."""
    cfg = config or PlateauConfig()
    student, teacher = teacher_student(2, 2, cfg.d, "erf", init="orthogonal", seed=7)
    W = np.random.default_rng(8).standard_normal((2, cfg.d)) * cfg.student_scale
    student = student.with_weights(W)
    ens = sgd.simulate(student, teacher, lr=cfg.lr, t_max=cfg.t_max, records=cfg.records, seed=11, seeds=cfg.seeds,
                       progress=progress)
    assert isinstance(ens, sgd.Ensemble)
    traj = ode.integrate(Overlaps.from_networks(student, teacher), "erf", lr=cfg.lr, times=ens.t, method="adaptive")
    return PlateauResult(cfg, traj, ens)


def write_csv(result: DemoResult, path: str) -> None:
    """Long format: panel, series, seed (or -1), time (iterations or t = steps / d), excess risk."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["panel", "series", "seed", "time", "risk"])
        for init, runs in result.runs.items():
            for seed, tr in zip(result.config.seeds, runs, strict=True):
                for t, r in zip(tr.t, tr.risk, strict=True):
                    w.writerow(["seed000", init, seed, int(t), f"{r:.10g}"])
        if result.plateau is not None:
            p = result.plateau
            for t, r in zip(p.ode.t, p.ode.risk, strict=True):
                w.writerow(["plateau", "ode", -1, f"{t:.6g}", f"{r:.10g}"])
            for run_id, tr in zip(p.sgd.run_ids, p.sgd.runs, strict=True):
                for t, r in zip(tr.t, tr.risk, strict=True):
                    w.writerow(["plateau", f"sgd_d{p.config.d}", int(run_id), f"{t:.6g}", f"{r:.10g}"])


def run(out: str = ".", progress: bool = False, config: DemoConfig | None = None,
        plateau: PlateauConfig | None = None) -> DemoResult:
    """Run the demo, print nothing, write demo.csv and demo.png into ``out``; return the results."""
    os.makedirs(out, exist_ok=True)
    result = run_seed000(config, progress=progress)
    result.plateau = run_plateau(plateau, progress=progress)
    write_csv(result, os.path.join(out, "demo.csv"))
    from .plot import demo_figure

    demo_figure(result, os.path.join(out, "demo.png"))
    return result
