"""Type stubs for the compiled core (twolayer._core). Arrays are float64, C-contiguous."""

# ODE engine entries (bind_ode.cpp); the foundation's entries live beside these on main.
from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

_F = NDArray[np.float64]
# A learning-rate schedule (kind, value, gamma, every, start, dt, linear, per_step, table): schedules.Schedule._core()
_Schedule = tuple[int, float, float, float, float, float, bool, bool, _F]

class KernelNotImplemented(NotImplementedError): ...
class DeviceUnavailable(RuntimeError): ...

class Interrupted(KeyboardInterrupt):
    partial: Any

PSD_TOL: float

def build_info() -> dict[str, Any]: ...
def sigma(act: str, x: _F) -> _F: ...
def dsigma(act: str, x: _F) -> _F: ...
def canonical_activation(name: str, argument: str = "activation") -> str: ...
def register_custom(name: str, edges: _F, coefficients: _F, strip: float) -> str: ...
def asin_simd(x: _F) -> _F: ...
def exp_simd(x: _F) -> _F: ...
def sin_simd(x: _F) -> _F: ...
def tanh_sech2_simd(x: _F) -> tuple[_F, _F, _F]: ...
def i2(act_a: str, act_b: str, C: _F, n_threads: int = 0, device: str = "cpu") -> _F: ...
def i2_jet(act_a: str, act_b: str, C: _F) -> tuple[_F, _F, _F]: ...
def i2_self_jet(act_a: str, act_b: str, q: _F) -> tuple[_F, _F, _F]: ...
def i3(act: str, act_b: str, C: _F, n_threads: int = 0, device: str = "cpu") -> _F: ...
def j2(act: str, C: _F, n_threads: int = 0, device: str = "cpu") -> _F: ...
def i4(act: str, act_a: str, act_b: str, C: _F, n_threads: int = 0, device: str = "cpu") -> _F: ...
def i2_mean(act_a: str, act_b: str, C: _F, mean: _F, n_threads: int = 0) -> _F: ...
def j2_mean(act: str, C: _F, mean: _F, n_threads: int = 0) -> _F: ...
def i3_mean(act: str, act_b: str, C: _F, mean: _F, n_threads: int = 0) -> _F: ...
def i4_mean(act: str, act_a: str, act_b: str, C: _F, mean: _F, n_threads: int = 0) -> _F: ...
def pair_moment(act_a: str, i: int, act_b: str, j: int, mean: _F, C: _F, quadrature: bool = False) -> _F: ...
def error_square_moments(
    act: str, acts: list[str], C: _F, mean: _F, w: _F, pairs: list[tuple[int, int]], n_threads: int = 1
) -> _F | None: ...
def overlap_risk_mean(
    Q: _F, M: _F, P: _F, a: _F, v: _F, bias: _F, teacher_bias: _F, act: str, act_teacher: str
) -> float: ...
def population_risk(
    W: _F, a: _F, act: str, W_teacher: _F, v: _F, act_teacher: str, scale: float, n_threads: int = 0
) -> float: ...
def population_gradient(
    W: _F, a: _F, act: str, W_teacher: _F, v: _F, act_teacher: str, scale: float, n_threads: int = 0
) -> tuple[_F, _F]: ...
def population_hessian(
    W: _F,
    a: _F,
    act: str,
    W_teacher: _F,
    v: _F,
    act_teacher: str,
    scale: float,
    train_readout: bool,
    n_threads: int = 0,
) -> _F: ...
def population_descend(
    W: _F,
    a: _F,
    act: str,
    W_teacher: _F,
    v: _F,
    act_teacher: str,
    scale: float,
    lr: float,
    lr_readout: float,
    steps: int,
    record_steps: list[int],
    n_threads: int = 0,
    schedule: _Schedule | None = None,
) -> dict[str, Any]: ...
def population_risk_mean(
    W: _F, a: _F, act: str, W_teacher: _F, v: _F, act_teacher: str, scale: float, bias: _F, teacher_bias: _F,
    n_threads: int = 0,
) -> float: ...
def population_gradient_mean(
    W: _F, a: _F, act: str, W_teacher: _F, v: _F, act_teacher: str, scale: float, bias: _F, teacher_bias: _F,
    n_threads: int = 0,
) -> tuple[_F, _F, _F]: ...
def population_hessian_mean(
    W: _F,
    a: _F,
    act: str,
    W_teacher: _F,
    v: _F,
    act_teacher: str,
    scale: float,
    bias: _F,
    teacher_bias: _F,
    train_readout: bool,
    train_bias: bool,
    n_threads: int = 0,
) -> _F: ...
def population_descend_mean(
    W: _F,
    a: _F,
    act: str,
    W_teacher: _F,
    v: _F,
    act_teacher: str,
    scale: float,
    bias: _F,
    teacher_bias: _F,
    lr: float,
    lr_readout: float,
    lr_bias: float,
    steps: int,
    record_steps: list[int],
    n_threads: int = 0,
    schedule: _Schedule | None = None,
) -> dict[str, Any]: ...

def sgd_simulate(
    W: _F,
    a: _F,
    act: str,
    W_teacher: _F,
    v: _F,
    act_teacher: str,
    scale: float,
    lr: _F,
    train_first: bool,
    lr_readout: _F,
    noise: _F,
    risk_tol: _F,
    risk_rtol: _F,
    batch: int,
    spherical: bool,
    n_samples: int,
    shuffle: bool,
    steps: int,
    record_steps: NDArray[np.int64],
    seed: int,
    runs: NDArray[np.uint32],
    keep_weights: bool = True,
    n_threads: int = 0,
    progress: Callable[[int], object] | None = None,
    target_alpha: NDArray[np.int64] | None = None,
    target_coef: _F | None = None,
    schedule: _Schedule | None = None,
    device: str = "cpu",
    bias: _F | None = None,
    teacher_bias: _F | None = None,
    lr_bias: _F | None = None,
) -> dict[str, Any]: ...
def philox4x32(counter: NDArray[np.uint32], key: NDArray[np.uint32]) -> NDArray[np.uint32]: ...
def rng_gaussians(
    seed: int, run: int, stream: int, first: int, n: int, scalar: bool = False, device: str = "cpu"
) -> _F: ...
def rng_vectorised() -> bool: ...
def dmft_solve(
    a: _F,
    act: str,
    z: _F,
    y: _F,
    z_test: _F,
    y_test: _F,
    M0: _F,
    C0: _F,
    lr: float,
    ridge: float,
    alpha: float,
    n_steps: int,
    seed: int,
    n_threads: int = 0,
    bias: _F | None = None,
    lr_bias: float = 0.0,
) -> dict[str, Any]: ...
def divergence(Q: _F, M: _F, a: _F, P: _F, v: _F, Q0: _F, M0: _F, a0: _F) -> str: ...
def ode_rhs(
    Q: _F,
    M: _F,
    a: _F,
    P: _F,
    v: _F,
    act: str,
    act_teacher: str,
    regime: str,
    spherical: bool,
    lr: float,
    lr_readout: float,
    noise: float,
    n_threads: int = 1,
    bias: _F | None = None,
    teacher_bias: _F | None = None,
    lr_bias: float = 0.0,
) -> tuple[_F, ...]: ...
def ode_rhs_lanes(
    Q: _F,
    M: _F,
    a: _F,
    P: _F,
    v: _F,
    act: str,
    regime: str,
    spherical: bool,
    lr: _F,
    lr_readout: _F,
    noise: _F,
    lanes: int,
    bias: _F | None = None,
    teacher_bias: _F | None = None,
    lr_bias: _F | None = None,
    teacher_act: str | None = None,
) -> tuple[_F, ...]: ...
def ode_rhs_timing(
    Q: _F,
    M: _F,
    a: _F,
    P: _F,
    v: _F,
    act: str,
    act_teacher: str,
    regime: str,
    lr: float,
    noise: float,
    evals: int,
    n_threads: int = 1,
) -> float: ...
def ode_integrate(
    Q: _F,
    M: _F,
    a: _F,
    P: _F,
    v: _F,
    act: str,
    act_teacher: str,
    regime: str,
    spherical: bool,
    lr: float,
    lr_readout: float,
    noise: float,
    times: _F,
    method: str,
    dt: float,
    rtol: float,
    atol: float,
    h0: float = 0.0,
    h_max: float = 0.0,
    risk_tol: float = 0.0,
    risk_rtol: float = 0.0,
    max_steps: int = 100000000,
    n_threads: int = 1,
    schedule: _Schedule | None = None,
    bias: _F | None = None,
    teacher_bias: _F | None = None,
    lr_bias: float = 0.0,
) -> dict[str, Any]: ...
def large_batch_iterate(
    Q: _F,
    M: _F,
    a: _F,
    P: _F,
    v: _F,
    act: str,
    act_teacher: str,
    gamma0: float,
    alpha: float,
    steps: int,
    noise: float,
    spherical: bool,
    n_threads: int = 1,
    bias: _F | None = None,
    teacher_bias: _F | None = None,
    lr_bias: float = 0.0,
) -> dict[str, Any]: ...
def ode_integrate_batch(
    Q: _F,
    M: _F,
    a: _F,
    P: _F,
    v: _F,
    act: str,
    act_teacher: str,
    regime: str,
    spherical: bool,
    lr: _F,
    lr_readout: _F,
    noise: _F,
    times: _F,
    method: str,
    dt: float,
    rtol: float,
    atol: float,
    h0: float,
    h_max: float,
    risk_tol: _F,
    risk_rtol: _F,
    max_steps: int,
    n_threads: int = 0,
    progress: Callable[[int], object] | None = None,
    schedule: _Schedule | None = None,
    targets: Sequence[tuple[NDArray[np.int64], _F]] | None = None,
    out: dict[str, NDArray[Any]] | None = None,
    members: NDArray[np.int64] | None = None,
    device: str = "cpu",
    bias: _F | None = None,
    teacher_bias: _F | None = None,
    lr_bias: _F | None = None,
) -> dict[str, Any]: ...
def multistart_lbfgs(
    W: _F,
    a: _F,
    act: str,
    W_teacher: _F,
    v: _F,
    act_teacher: str,
    scale: float,
    train_readout: bool,
    max_iter: int,
    gtol: float,
    memory: int,
    n_threads: int = 0,
    progress: Callable[[int], object] | None = None,
    b: _F | None = None,
    teacher_bias: _F | None = None,
    train_bias: bool = False,
) -> dict[str, Any]: ...

def sde_increment_moments(
    y: _F, K: int, P: _F, v: _F, act: str, act_teacher: str, spherical: bool, lr: float, lr_readout: float,
    noise: float, nodes: _F, weights: _F, target_alpha: Any = None, target_coef: Any = None,
    teacher_bias: _F | None = None, lr_bias: float = 0.0,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]: ...
def sde_simulate(
    y0: _F, K: int, P: _F, v: _F, act: str, act_teacher: str, spherical: bool, lr: float, lr_readout: float,
    noise: float, d: int, dt: float, steps: int, record_steps: Any, nodes: _F, weights: _F, seed: int, runs: Any,
    risk_tol: float, risk_rtol: float, n_threads: int = 0, progress: Any = None, target_alpha: Any = None,
    target_coef: Any = None, teacher_bias: _F | None = None, lr_bias: float = 0.0,
) -> dict[str, Any]: ...
# Polynomial multi-index targets (bind_target.cpp, bind_ode.cpp): exponents (n_terms, k), coefficients (n_terms,).
_I = NDArray[np.int64]

def target_eval(alpha: _I, coef: _F, z: _F) -> _F: ...
def target_expectation(
    act: str, Qs: _F, Ms: _F, factors: Any, alpha: _I, coef: _F, mu: _F | None = None
) -> float | _F: ...
def target_risk(alpha: _I, coef: _F, Q: _F, M: _F, a: _F, act: str, bias: _F | None = None) -> float: ...
def target_cross_grad(
    alpha: _I, coef: _F, Q: _F, M: _F, a: _F, act: str, bias: _F | None = None
) -> tuple[_F, _F, _F, _F]: ...
@overload
def target_unit_jet(
    alpha: _I, coef: _F, q: _F, M: _F, act: str, bias: None = None
) -> tuple[_F, _F, _F, _F, _F, _F]: ...
@overload
def target_unit_jet(
    alpha: _I, coef: _F, q: _F, M: _F, act: str, bias: _F
) -> tuple[_F, _F, _F, _F, _F, _F, _F, _F, _F, _F]: ...
def ode_rhs_target(
    Q: _F, M: _F, a: _F, alpha: _I, coef: _F, act: str, regime: str, spherical: bool, lr: float,
    lr_readout: float, noise: float, evals: int = 1, n_threads: int = 1, bias: _F | None = None,
    teacher_bias: _F | None = None, lr_bias: float = 0.0,
) -> tuple[_F, _F, _F, float] | tuple[_F, _F, _F, float, _F]: ...
def large_batch_iterate_target(
    Q: _F, M: _F, a: _F, alpha: _I, coef: _F, act: str, gamma0: float, batch_ratio: float, steps: int,
    noise: float, spherical: bool, bias: _F | None = None, lr_bias: float = 0.0, n_threads: int = 1,
) -> dict[str, Any]: ...
def ode_integrate_target(
    Q: _F, M: _F, a: _F, alpha: _I, coef: _F, act: str, regime: str, spherical: bool, lr: float,
    lr_readout: float, noise: float, times: _F, method: str, dt: float, rtol: float, atol: float, h_max: float,
    risk_tol: float, risk_rtol: float, max_steps: int, schedule: _Schedule | None = None,
    bias: _F | None = None, teacher_bias: _F | None = None, lr_bias: float = 0.0,
) -> dict[str, Any]: ...
def completed_message(t_end: float, steps: int, rhs: int) -> str: ...
def diverged_message(t: float, why: str) -> str: ...
def interrupted_message(t: float, steps: int) -> str: ...
def max_steps_message(max_steps: int, t: float) -> str: ...
def converged_message(risk: float, threshold: float, risk_tol: float, risk_rtol: float, t: float) -> str: ...
def sgd_completed_message(steps: int, samples: int, n_samples: int) -> str: ...
def sde_completed_message(steps: int, dt: float) -> str: ...
