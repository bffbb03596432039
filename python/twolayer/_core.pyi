"""Type stubs for the compiled core (twolayer._core). Arrays are float64, C-contiguous."""

# ODE engine entries (bind_ode.cpp); the foundation's entries live beside these on main.
from typing import Any

import numpy as np
from numpy.typing import NDArray

_F = NDArray[np.float64]

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
) -> tuple[_F, _F, _F]: ...
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
    max_steps: int = 100000000,
    n_threads: int = 1,
) -> dict[str, Any]: ...
def ode_integrate_batch(
    Q: list[_F],
    M: list[_F],
    a: list[_F],
    P: list[_F],
    v: list[_F],
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
    h0: float = 0.0,
    h_max: float = 0.0,
    risk_tol: float = 0.0,
    max_steps: int = 100000000,
    n_threads: int = 0,
) -> list[dict[str, Any]]: ...
