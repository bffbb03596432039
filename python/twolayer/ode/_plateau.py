"""The Saad-Solla plateau: its near-symmetric erf start (:func:`plateau_overlaps`) and its escape
(:func:`plateau_example`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .._deprecation import renamed
from .._validation import INT32_MAX, integer, positive, real, seed_arg
from ..overlaps import Overlaps
from ..results import Trajectory
from ._integrate import integrate
from ._solver import Method


def plateau_overlaps(K: int = 2, M: int = 2, q0: float = 0.25, m0: float = 1e-3, seed: int = 0) -> Overlaps:
    """A near-symmetric erf start (Saad & Solla 1995): Q = q0 I, P = I, tiny M, a = v = 1.

    Parameters
    ----------
    K, M : int, default 2
        Student and teacher units.
    q0 : float, default 0.25
        Q = q0 I.
    m0 : float, default 1e-3
        M_ir = m0 (1 + 0.5 z_ir) with z_ir ~ N(0, 1) from ``seed``.
    seed : int, default 0
        Seed of the asymmetry.

    Returns
    -------
    Overlaps
        (Remembering no activation: pass ``"erf"`` to the ODE.)

    Examples
    --------
    >>> ov = tl.ode.plateau_overlaps()
    >>> ov.Q
    array([[0.25, 0.  ],
           [0.  , 0.25]])
    >>> bool(np.all(np.abs(ov.M) < 2e-3))
    True
    """
    K, M = integer(K, "K", 1, INT32_MAX), integer(M, "M", 1, INT32_MAX)
    q0, m0 = positive(q0, "q0"), real(m0, "m0")
    rng = np.random.default_rng(seed_arg(seed))
    Mo = m0 * (1.0 + 0.5 * rng.standard_normal((K, M)))
    return Overlaps(q0 * np.eye(K), Mo, np.eye(M), np.ones(K), np.ones(M))


@renamed(n_points="n_records")
def plateau_example(
    t_max: float = 2000.0, lr: float = 1.0, method: Method = "adaptive", **kwargs: Any
) -> Trajectory:
    """The erf K = M = 2 Saad-Solla plateau and its escape, by the online ODE.

    The excess risk falls quickly onto the symmetric plateau (students not
    yet specialised: all M_ir nearly equal), stays there for a time growing
    like log(1 / asymmetry), then escapes to 0 as each student specialises
    on one teacher unit.

    Parameters
    ----------
    t_max : float, default 2000.0
        Duration.
    lr : float, default 1.0
        Learning rate.
    method : {"adaptive", "rk4", "euler"}
        The integrator.
    **kwargs
        Passed to :func:`integrate` (``n_records`` defaults to 400; ``n_points``: its old spelling, deprecated).

    Returns
    -------
    Trajectory

    Examples
    --------
    >>> traj = tl.ode.plateau_example(t_max=50, n_records=3)
    >>> traj
    Trajectory(T=3, K=2, M=2, status='completed', final_risk=0.0207531)
    """
    return integrate(
        plateau_overlaps(),
        "erf",
        lr=lr,
        t_max=t_max,
        method=method,
        n_records=kwargs.pop("n_records", 400),
        **kwargs,
    )
