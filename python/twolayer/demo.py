"""The main job, ``twolayer demo``: seed 000's experiment and the panels later capabilities add.

Seed 000 (Mariantoni & Chizat): step units (sigma = 1(s > 0)), m = 4 teacher and 4 student units in d = 50,
trained by gradient descent on the population loss. Students and teachers start either with i.i.d. Gaussian
entries or as one orthonormal set of 2m vectors ("orthogonal dynamics"). The orthogonal start is invariant under
permutations of the units, so descent stays on a symmetric saddle (excess risk ~0.356) for a long time; Gaussian
starts break the symmetry and mostly reach the global minimum (up to the oscillation floor of fixed-step descent
on the loss's cusp), sometimes a spurious minimum.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import population
from .networks import teacher_student
from .results import Trajectory


@dataclass
class DemoConfig:
    units: int = 4
    d: int = 50
    lr: float = 1.0
    steps: int = 20_000
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    inits: tuple[str, ...] = ("gaussian", "orthogonal")
    records: int = 60


@dataclass
class DemoResult:
    config: DemoConfig
    runs: dict[str, list[Trajectory]] = field(default_factory=dict)

    def table(self) -> str:
        """A short text table: final excess risk per initialisation."""
        lines = [f"{'init':<12}{'seeds':>6}{'median':>12}{'min':>12}{'max':>12}{'  reached < 1e-2':>17}"]
        for init, runs in self.runs.items():
            final = np.array([r.final_risk for r in runs])
            lines.append(f"{init:<12}{len(final):>6}{np.median(final):>12.4g}{final.min():>12.4g}"
                         f"{final.max():>12.4g}{int(np.sum(final < 1e-2)):>10d} of {len(final)}")
        return "\n".join(lines)


def run_seed000(config: DemoConfig | None = None, progress: bool = False) -> DemoResult:
    """Population gradient descent for every (init, seed) of ``config``."""
    cfg = config or DemoConfig()
    result = DemoResult(cfg)
    jobs = [(init, seed) for init in cfg.inits for seed in cfg.seeds]
    iterator: Any = jobs
    if progress:
        from tqdm import tqdm

        iterator = tqdm(jobs, desc="seed 000: population descent", unit="run")
    for init, seed in iterator:
        student, teacher = teacher_student(cfg.units, cfg.units, cfg.d, "step", init=init, seed=seed)  # type: ignore[arg-type]
        result.runs.setdefault(init, []).append(
            population.descend(student, teacher, lr=cfg.lr, steps=cfg.steps, records=cfg.records))
    return result


def write_csv(result: DemoResult, path: str) -> None:
    """Long format: init, seed, iteration, excess risk."""
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["panel", "init", "seed", "iteration", "risk"])
        for init, runs in result.runs.items():
            for seed, tr in zip(result.config.seeds, runs, strict=True):
                for t, r in zip(tr.t, tr.risk, strict=True):
                    w.writerow(["seed000", init, seed, int(t), f"{r:.10g}"])


def run(out: str = ".", progress: bool = False, config: DemoConfig | None = None) -> DemoResult:
    """Run the demo, print nothing, write demo.csv and demo.png into ``out``; return the results."""
    os.makedirs(out, exist_ok=True)
    result = run_seed000(config, progress=progress)
    write_csv(result, os.path.join(out, "demo.csv"))
    from .plot import demo_figure

    demo_figure(result, os.path.join(out, "demo.png"))
    return result
