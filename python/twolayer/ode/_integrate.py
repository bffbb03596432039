"""One system: :func:`integrate` (the order-parameter ODE from one :class:`~twolayer.Overlaps`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

from numpy.typing import ArrayLike

from .. import _core
from .._deprecation import renamed
from .._interrupt import partial_result
from .._overlap_args import check_overlaps, resolve_activations, resolve_target
from .._validation import boolean, positive
from ..activations import ActivationName
from ..large_batch import iterate_checked
from ..overlaps import Overlaps
from ..results import Trajectory
from ..schedules import Schedule, as_schedule, core_arg
from ._bias import bias_kwargs
from ._solver import Method, Readout, Regime, check_choices, is_step_flow, model_meta, solver_options, to_trajectory
from ._target import integrate_target


@renamed(n_points="n_records", steps="n_steps")
def integrate(
    overlaps: Overlaps,
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float,
    lr_readout: float = 0.0,
    noise: float = 0.0,
    regime: Regime | Literal["large_batch"] = "online",
    spherical: bool = False,
    t_max: float | None = None,
    times: ArrayLike | None = None,
    method: Method = "adaptive",
    dt: float = 0.01,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    readout: Readout = "sum",
    risk_tol: float | None = None,
    risk_rtol: float | None = None,
    n_records: int = 101,
    h_max: float | None = None,
    max_steps: int = 100_000_000,
    n_threads: int | None = None,
    batch_ratio: float | None = None,
    n_steps: int | None = None,
    target: Any = None,
    schedule: Schedule | Callable[..., Any] | None = None,
    lr_bias: float = 0.0,
) -> Trajectory:
    """Integrate the order-parameter ODE from ``overlaps``.

    The equations, time t = steps / d and the effective second layers a, v
    are those of the module docstring and the documentation's Conventions
    page.

    Parameters
    ----------
    overlaps : Overlaps
        The initial Q, M, a and the teacher's P, v.
    activation, teacher_activation : str, optional
        The student's and teacher's activations. When ``activation`` is not
        given, both come from the overlaps (``Overlaps.from_networks``
        records them; ``teacher_activation`` may still override the
        teacher's); overlaps built by hand remember none, and then
        ``activation`` is required (TypeError). When it is given,
        ``teacher_activation`` defaults to it.
    lr : float
        First-layer learning rate eta (>= 0).
    lr_readout : float, default 0.0
        Second-layer learning rate (0: the readout is fixed).
    noise : float, default 0.0
        Label-noise variance Delta (no effect for ``"gradient_flow"``).
    regime : {"online", "gradient_flow", "large_batch"}
        Online SGD as d -> infinity, or population gradient flow (the same
        ODE without the eta^2 and noise terms), or ``"large_batch"``: the
        d -> infinity map of SGD with fresh batches of ``batch_ratio`` * d
        samples and step ``lr`` = gamma0 (the simulator's ``lr / d``),
        iterated ``n_steps`` times with the second layer fixed; one row per
        iteration, t = iteration (:mod:`twolayer.large_batch`). Only
        ``noise``, ``spherical`` and ``n_threads`` of the other options
        apply.
    spherical : bool, default False
        Projected SGD on the sphere (needs diag(Q) = 1).
    t_max : float, optional
        Integrate to this time (give ``t_max`` or ``times``).
    times : array_like, optional
        Output times (non-decreasing, >= 0). Default: ``n_records`` equally
        spaced times t_k = k t_max / (n_records - 1), each the correctly
        rounded double, the grid :func:`twolayer.sgd.simulate` records on,
        so that ODE and SGD results align point by point in xarray (for the
        fixed-step methods, default times off the dt grid move to the
        nearest multiple of dt).
    method : {"adaptive", "rk4", "euler"}
        ``"adaptive"``: Dormand-Prince 5(4) with error control ``rtol``,
        ``atol`` (weighted RMS norm over the state); ``"euler"``, ``"rk4"``:
        fixed step ``dt`` (shortened only to land on an output time off the
        dt grid).
    dt : float, default 0.01
        Step of the fixed-step methods.
    rtol, atol : float
        Tolerances of the adaptive method (default 1e-8, 1e-10).
    readout : {"sum", "mean"}
        The readout factor c (1 or 1/K) of the trained second layer.
    risk_tol, risk_rtol : float, optional
        Stop early, with ``status="converged"``, at the first time the
        excess risk R(t) falls to ``max(risk_tol, risk_rtol * R(0))`` (None:
        no threshold of that kind). The crossing is located inside the step:
        on the adaptive method's 4th-order dense output (Illinois root
        finding to a few ulps of t), and for ``"euler"``/``"rk4"`` on the
        straight line between the last two states (an O(dt^2)
        approximation). The last recorded row is the state there and
        ``stop_time`` its time; later output times are not recorded.
    n_records : int, default 101
        Number of default output times.
    h_max : float, optional
        Largest step of the adaptive method.
    max_steps : int, default 100_000_000
        Step budget; when spent the run stops with ``status="max_steps"``.
    n_threads : int, optional
        Threads inside the right-hand side (the committee's kernels at
        K >= 8, the smooth units' online lattices, a target's tuples of
        fields; None: the OpenMP default); the path is bitwise the same on
        any number of threads.
    batch_ratio : float, optional
        alpha = n_b / d of ``regime="large_batch"`` (required there).
    n_steps : int, optional
        Number of iterations of ``regime="large_batch"`` (required there).
    schedule : Schedule or callable, optional
        A learning-rate multiplier s(t) (:mod:`twolayer.schedules`):
        lr(t) = lr s(t) and lr_readout(t) = lr_readout s(t), evaluated at
        every stage's time inside the core (a callable is evaluated once, on
        4097 points of [0, t_end], and linearly interpolated); the adaptive
        method ends its steps at the jumps of a piecewise-constant one.
    target : HermiteTarget, optional
        A polynomial target of :mod:`twolayer.targets` instead of the
        committee teacher (default: the one ``Overlaps.from_networks(student,
        target)`` remembers). Then M is (K, k), P = I_k, v = 0, the error is
        E = f(z) - sum_j a_j g(l_j), and every expectation with the target is
        exact (Gaussian conditioning on the student fields, closed-form
        orthant moments); ``teacher_activation`` is unused. A
        :class:`~twolayer.targets.FunctionTarget` has no ODE (TypeError).
    lr_bias : float, default 0.0
        Learning rate of the student's biases, db_i/dt = lr_bias a_i
        E[g'(l_i) E] (0: fixed). The biases themselves are the overlaps'
        ``bias`` and ``teacher_bias`` (fixed); a run with biases (a nonzero
        one, or ``lr_bias > 0``) integrates the equations with means of the
        documentation's ODE page, "Biases" (gradient flow and online SGD,
        spherical too: the biases are not projected; against a polynomial
        target too; step students: NotImplementedError).

    Returns
    -------
    Trajectory
        ``t``, ``Q``, ``M``, ``a``, ``risk`` (the excess risk) at the output
        times, the teacher's ``P`` and ``v`` (``traj.overlaps_at(-1)``
        continues the run), ``status``, ``message``, ``stop_time`` (NaN when
        the run completed), and ``meta`` with the parameters and the cost
        (``n_rhs`` right-hand-side evaluations, ``n_steps``); in a run with
        biases also ``bias`` (T, K) and ``teacher_bias`` (M,).

    Notes
    -----
    A run whose state becomes non-finite, overflows or leaves the positive
    semi-definite cone stops with ``status="diverged"``; the trajectory then
    holds the outputs reached and ``message`` / ``stop_time`` say when.
    Ctrl-C stops the integration within a fraction of a second and raises
    :class:`twolayer.Interrupted`, whose ``partial`` is the trajectory so far
    (``status="interrupted"``).

    Step units (student and teacher) in the gradient-flow regime are
    integrated by :mod:`twolayer.step_flow` whatever ``method`` (event
    location at alignment and Filippov sliding: their right-hand side is
    discontinuous there), with error control ``rtol``, ``atol``.

    Examples
    --------
    The Saad-Solla plateau of two erf students and its escape:

    >>> ov = tl.ode.plateau_overlaps(K=2, M=2)
    >>> traj = tl.ode.integrate(ov, "erf", lr=1.0, t_max=300, n_records=4)
    >>> traj.t
    array([  0., 100., 200., 300.])
    >>> np.round(traj.risk, 4)
    array([0.4598, 0.0207, 0.0009, 0.    ])

    Stop where the excess risk reaches 1e-2:

    >>> traj = tl.ode.integrate(ov, "erf", lr=1.0, t_max=300, risk_tol=1e-2)
    >>> traj.status, round(traj.stop_time, 3)
    (<Status.converged: 'converged'>, 166.818)
    """
    tgt = resolve_target(target, overlaps)
    if regime == "large_batch":  # the map takes the biases itself (twolayer.large_batch)
        return iterate_checked(overlaps, activation, teacher_activation, tgt, lr=lr, lr_readout=lr_readout,
                               batch_ratio=batch_ratio, n_steps=n_steps, noise=noise, spherical=spherical,
                               n_threads=n_threads, t_max=t_max, times=times, schedule=schedule, lr_bias=lr_bias)
    if tgt is not None:
        return integrate_target(overlaps, activation, tgt, lr=lr, lr_readout=lr_readout, noise=noise, regime=regime,
                                spherical=spherical, t_max=t_max, times=times, method=method, dt=dt, rtol=rtol,
                                atol=atol, readout=readout, risk_tol=risk_tol, risk_rtol=risk_rtol,
                                n_records=n_records, h_max=h_max, max_steps=max_steps, schedule=schedule,
                                lr_bias=lr_bias)
    act, t_act = resolve_activations(activation, teacher_activation, overlaps)
    reg, meth, ro = check_choices(act, regime, method, readout)
    spherical = boolean(spherical, "spherical")
    ov = check_overlaps(overlaps, spherical=spherical)
    biases = bias_kwargs(ov, lr_bias)
    lr_ = positive(lr, "lr", allow_zero=True)
    lr_a = positive(lr_readout, "lr_readout", allow_zero=True)
    noise_ = positive(noise, "noise", allow_zero=True)
    tol = 0.0 if risk_tol is None else positive(risk_tol, "risk_tol")
    rtol_r = 0.0 if risk_rtol is None else positive(risk_rtol, "risk_rtol")
    row_bytes = (ov.K * ov.K + ov.K * ov.n_teacher + ov.K * (2 if biases else 1) + 1) * 8
    tail, keywords, solver_meta = solver_options(meth, t_max, times, dt, rtol, atol, n_records, h_max, max_steps,
                                                 n_threads, row_bytes=row_bytes)
    c = 1.0 if ro == "sum" else 1.0 / ov.K
    sched = as_schedule(schedule, t_max=float(tail[0][-1]))
    meta = {**model_meta(act, t_act, reg, spherical, ro), **solver_meta, "lr": lr_, "lr_readout": lr_a,
            "noise": noise_, "risk_tol": tol or math.nan, "risk_rtol": rtol_r or math.nan,
            **({} if sched is None else {"schedule": repr(sched)}),
            **({"lr_bias": biases["lr_bias"]} if biases else {})}
    if is_step_flow(act, t_act, reg, spherical):
        meta["method"] = "step_events"
    with partial_result(lambda out: to_trajectory(out, meta, ov)):
        out = _core.ode_integrate(ov.Q, ov.M, ov.a, ov.P, ov.v, act, t_act, reg, bool(spherical), lr_,
                                  lr_a * c * c, noise_, *tail, 0.0, keywords["h_max"], tol, rtol_r,
                                  keywords["max_steps"], keywords["n_threads"], schedule=core_arg(sched),
                                  **biases)
    return to_trajectory(out, meta, ov)
