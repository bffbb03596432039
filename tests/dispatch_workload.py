"""The workload tests/test_dispatch.py runs once per instruction level (TWOLAYER_SIMD set by the caller): kernels,
population gradient, ODE and SGD. Writes its results to the .npz file named by argv[1], the level to its entry
'level'."""

from __future__ import annotations

import sys

import numpy as np
import twolayer as tl


def workload() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    A = rng.standard_normal((4096, 4, 4))
    C4 = A @ np.swapaxes(A, -1, -2) / 4 + 0.1 * np.eye(4)
    out: dict[str, np.ndarray] = {}
    for act in ("erf", "relu", "linear", "quadratic"):
        out[f"i2_{act}"] = tl.kernels.i2(act, act, C4[:, :2, :2])
        out[f"i3_{act}"] = tl.kernels.i3(act, act, C4[:, :3, :3])
        out[f"j2_{act}"] = tl.kernels.j2(act, C4[:, :2, :2])
        out[f"i4_{act}"] = tl.kernels.i4(act, act, act, C4[:256] if act == "relu" else C4)
    out["i2_step"] = tl.kernels.i2("step", "step", C4[:, :2, :2])

    student, teacher = tl.networks.teacher_student(K=6, M=5, d=40, activation="relu", seed=3)
    dW, da = tl.population.gradient(student, teacher)
    out["pop_grad_W"], out["pop_grad_a"] = dW, da
    out["pop_risk"] = np.array(tl.population.risk(student, teacher))

    student, teacher = tl.networks.teacher_student(K=2, M=2, d=500, activation="erf", seed=1)
    overlaps = tl.Overlaps.from_networks(student, teacher)
    for method in ("rk4", "adaptive"):
        traj = tl.ode.integrate(overlaps, lr=1.0, t_max=50, method=method)
        out[f"ode_{method}_Q"], out[f"ode_{method}_risk"] = traj.Q, traj.risk
    ens = tl.sgd.simulate(student, teacher, lr=1.0, t_max=5, seeds=2)
    out["sgd_Q"] = np.stack([run.Q for run in ens])
    out["sgd_risk"] = np.stack([run.risk for run in ens])
    return out


if __name__ == "__main__":
    results = workload()
    np.savez(sys.argv[1], level=np.array(tl.build_info()["simd_level"]), **results)
