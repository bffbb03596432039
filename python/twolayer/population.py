"""Population (infinite-data) risk, gradient, Hessian and gradient descent in weight space.

R = 1/2 E_x[(y(x) - f(x))^2] with x ~ N(0, I_d), computed exactly from the overlaps through the I2 kernels:
R = 1/2 sum_ik a_i a_k I2(Q) - sum_ir a_i v_r I2(Q, M, P) + 1/2 sum_rt v_r v_t I2(P), with effective (readout-scaled)
second layers. The returned risk is the *excess* risk; output noise of variance Delta adds Delta/2 and is
only included when ``noise`` is given. Everything is computed in the C++ core (Gram matrices, kernel Jets,
two GEMM-like contractions for the gradient, rank updates for the Hessian).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from . import _core
from ._interrupt import partial_result
from ._validation import INT32_MAX, boolean, integer, n_threads_arg, positive
from .networks import Network
from .overlaps import check_pair
from .results import Trajectory

_CoreArgs = tuple[NDArray[np.float64], NDArray[np.float64], str, NDArray[np.float64], NDArray[np.float64], str, float]


def _args(student: Network, teacher: Network) -> _CoreArgs:
    check_pair(student, teacher)
    return (student.W, student.effective_a, student.activation, teacher.W, teacher.effective_a,
            teacher.activation, student.scale)


def risk(student: Network, teacher: Network, noise: float = 0.0, n_threads: int | None = None) -> float:
    """Population risk 1/2 E[(y - f)^2]: the excess risk, plus noise/2 when the teacher's output noise variance
    ``noise`` is given."""
    noise_ = positive(noise, "noise", allow_zero=True)
    return float(_core.population_risk(*_args(student, teacher), n_threads=n_threads_arg(n_threads))) + 0.5 * noise_


def gradient(
    student: Network, teacher: Network, train_readout: bool = True, n_threads: int | None = None
) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
    """(dR/dW (K, d), dR/da (K,)) of the population risk; dR/da is None when ``train_readout`` is False."""
    train_readout = boolean(train_readout, "train_readout")
    dW, da = _core.population_gradient(*_args(student, teacher), n_threads=n_threads_arg(n_threads))
    return dW, (da * student.readout_factor if train_readout else None)


def hessian(
    student: Network, teacher: Network, train_readout: bool = True, n_threads: int | None = None
) -> NDArray[np.float64]:
    """The analytic Hessian of the population risk on [vec(W) row-major, a] (or vec(W) alone), size K d (+ K).

    Exactly aligned relu pairs (a student on a teacher, as at the global minimum) use the weight-space limit
    of the angle terms (they vanish like sin(theta)); exactly aligned step units make the Hessian undefined
    (ValueError)."""
    train_readout = boolean(train_readout, "train_readout")
    H = _core.population_hessian(*_args(student, teacher), train_readout=train_readout,
                                 n_threads=n_threads_arg(n_threads))
    if train_readout:
        c = student.readout_factor
        n = student.K * student.d
        H[n:, :] *= c
        H[:, n:] *= c
    return H


def descend(
    student: Network,
    teacher: Network,
    lr: float,
    steps: int,
    lr_readout: float = 0.0,
    records: int = 100,
    n_threads: int | None = None,
) -> Trajectory:
    """Gradient descent on the population risk in weight space (seed 000's experiment):
    W <- W - lr dR/dW, a <- a - lr_readout dR/da, for ``steps`` iterations, recording the overlaps and the excess
    risk at ``records`` log-spaced iterations (0 and ``steps`` included). ``t`` counts iterations. Ctrl-C raises
    :class:`twolayer.Interrupted` with the records so far as ``partial`` (``status="interrupted"``)."""
    lr_ = positive(lr, "lr")
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    steps = integer(steps, "steps", 0)
    records = integer(records, "records", 2, INT32_MAX)
    log_spaced = np.geomspace(1, max(steps, 1), records - 1).round() if records > 2 else np.array([steps])
    record_steps = np.unique(np.concatenate([[0], log_spaced]))
    record_steps = record_steps[record_steps <= steps].astype(np.int64)
    # The core steps the effective second layer c a; plain descent on a moves it by c^2 lr_readout dR/d(c a).
    def result(out: dict[str, Any]) -> Trajectory:
        T = out["risk"].shape[0]
        status = out["status"]
        message = {
            "diverged": f"diverged at iteration {out['stop_step']} (non-finite risk or gradient)",
            "interrupted": f"interrupted at iteration {out['stop_step']}",
        }.get(status, f"{steps} iterations of population gradient descent")
        final = student.with_weights(out["W"], out["a_final"] / student.readout_factor)
        return Trajectory(t=record_steps[:T].astype(np.float64), Q=out["Q"], M=out["M"], a=out["a"],
                          risk=out["risk"], status=status, message=message, time_unit="iterations", student=final,
                          meta={"lr": lr_, "lr_readout": lr_a})

    with partial_result(result):
        out = _core.population_descend(*_args(student, teacher), lr=lr_,
                                       lr_readout=lr_a * student.readout_factor**2, steps=int(steps),
                                       record_steps=record_steps.tolist(), n_threads=n_threads_arg(n_threads))
    return result(out)
