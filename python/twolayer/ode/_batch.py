"""Many systems: :func:`integrate_batch` (B independent systems in one core call per shape) and the assembly of
its :class:`~twolayer.BatchTrajectory`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _core
from .._deprecation import renamed
from .._interrupt import Interrupted, keep_partial
from .._overlap_args import check_spherical, resolve_activations, resolve_target
from .._progress import progress_bar
from .._validation import Device, boolean, device_arg, per_item
from ..activations import ActivationName, check_activation
from ..overlaps import BatchOverlaps, Overlaps
from ..results import BatchTrajectory
from ..schedules import Schedule, as_schedule, core_arg
from ._solver import TIME_UNIT, Method, Readout, Regime, check_choices, is_step_flow, model_meta, solver_options


def _per_member(x: Any, name: str, B: int, none: float | None = None) -> NDArray[np.float64]:
    """:func:`per_item` over the B members, 0 allowed; ``None`` -> ``none`` where given."""
    if x is None and none is not None:
        return np.full(B, none)
    return per_item(x, name, B, allow_zero=True, item="member")


def _thresholds_off_as_nan(params: dict[str, NDArray[np.float64]]) -> dict[str, NDArray[np.float64]]:
    """The parameters as results report them: a threshold of 0 (the core's "off") as NaN, as in Ensemble."""
    return {k: np.where(v > 0, v, np.nan) if k in ("risk_tol", "risk_rtol") else v for k, v in params.items()}


def _group_by_shape(overlaps: Sequence[Any], tgts: Sequence[Any] | None = None) -> dict[tuple[int, int, bool],
                                                                                      list[int]]:
    """Member indices by (K, M, has a polynomial target)."""
    groups: dict[tuple[int, int, bool], list[int]] = {}
    for b, ov in enumerate(overlaps):
        if not isinstance(ov, Overlaps):
            raise TypeError(f"overlaps[{b}]: expected a twolayer.Overlaps, got {type(ov).__name__}")
        groups.setdefault((ov.K, ov.n_teacher, tgts is not None and tgts[b] is not None), []).append(b)
    return groups


def _stack_label(j: int, field: str) -> str:
    """Error labels of a BatchOverlaps input: ``Q[17]``."""
    return f"{field}[{j}]"


def _list_label(idx: list[int]) -> Callable[[int, str], str]:
    """Error labels of a shape group of a list input: member j of the group is ``overlaps[idx[j]]``."""

    def label(j: int, field: str) -> str:
        return f"overlaps[{idx[j]}]: {field}"

    return label


def _batch_groups(overlaps: Any, tgts: list[Any] | None = None) -> tuple[list[tuple[BatchOverlaps,
                                                                                NDArray[np.int64]]], int, Any]:
    """The input of :func:`integrate_batch` as shape groups: (stack, member indices) pairs, the batch size, and
    the object whose remembered activations apply (the BatchOverlaps, or the first member of a list when every
    member remembers the same ones). With per-member targets (``tgts``), members with and without one are
    separate groups."""
    if isinstance(overlaps, BatchOverlaps):
        if tgts is not None and any(t is None for t in tgts):
            raise TypeError("target: a BatchOverlaps takes one target for every member (or none)")
        return [(overlaps, np.arange(len(overlaps)))], len(overlaps), overlaps
    if isinstance(overlaps, Overlaps) or not isinstance(overlaps, Sequence) or isinstance(overlaps, str):
        raise TypeError(f"overlaps: expected a twolayer.BatchOverlaps or a sequence of twolayer.Overlaps, got "
                        f"{type(overlaps).__name__}")
    groups = []
    for idx in _group_by_shape(overlaps, tgts).values():
        members = [overlaps[b] for b in idx]
        # Stacked copies, validated together (the Overlaps' own arrays are mutable: re-checked here).
        stack = BatchOverlaps(np.stack([o.Q for o in members]), np.stack([o.M for o in members]),
                              np.stack([o.P for o in members]), np.stack([o.a for o in members]),
                              np.stack([o.v for o in members]),
                              bias=np.stack([o.bias for o in members]),
                              teacher_bias=np.stack([o.teacher_bias for o in members]), _label=_list_label(idx))
        groups.append((stack, np.array(idx, dtype=np.int64)))
    acts = {(o.activation, o.teacher_activation) for o in overlaps}
    source = overlaps[0] if len(acts) == 1 else None
    return groups, len(overlaps), source


def _batch_targets(target: Any, overlaps: Any) -> list[Any] | None:
    """Each member's polynomial target (None: a committee member), or None when no member has one: ``target``
    (one for all, or a sequence of one per member), else what the members' overlaps remember."""
    if isinstance(overlaps, BatchOverlaps):
        B = len(overlaps)
        remembered: list[Any] = [None] * B
    elif isinstance(overlaps, Sequence) and not isinstance(overlaps, str):
        B = len(overlaps)
        remembered = [getattr(o, "target", None) for o in overlaps]
    else:
        return None  # _batch_groups raises the TypeError
    if target is None:
        tgts = remembered
    elif isinstance(target, Sequence) and not isinstance(target, str):
        if len(target) != B:
            raise ValueError(f"target: expected one target for all members or one per member ({B}), got "
                             f"{len(target)}")
        tgts = list(target)
    else:
        tgts = [target] * B
    if all(t is None for t in tgts):
        return None
    per_member = target is not None and isinstance(target, Sequence) and not isinstance(target, str)
    for b, t in enumerate(tgts):
        if t is not None:
            try:
                resolve_target(t, None)
            except TypeError as exc:
                if not per_member:
                    raise
                raise TypeError(f"target[{b}]: {str(exc).removeprefix('target: ')}") from None
    return tgts


def _target_activation(activation: Any, source: Any) -> str:
    """The student activation of a target batch (the argument, else what the overlaps remember)."""
    act = activation if activation is not None else getattr(source, "activation", None)
    if act is None:
        raise TypeError("activation: required (the overlaps do not remember one shared student activation)")
    return check_activation(act, "activation")


def _check_target_stack(stack: BatchOverlaps, tgts: list[Any], label: Callable[[int, str], str]) -> None:
    """Every member of a target group: M (K, k) for its target, P = I_k."""
    eye = np.eye(stack.n_teacher)
    for j, t in enumerate(tgts):
        if t.k != stack.n_teacher:
            raise ValueError(f"{label(j, 'M')}: must be (K, k) = ({stack.K}, {t.k}) for a target of k = {t.k} "
                             f"directions, got {(stack.K, stack.n_teacher)}")
        P = stack.P[0] if stack.shared_teacher else stack.P[j]
        if not np.allclose(P, eye, rtol=0.0, atol=1e-10):
            raise ValueError(f"{label(j, 'P')}: must be the identity I_k with a target (orthonormal directions)")


@renamed(n_points="n_records")
def integrate_batch(
    overlaps: BatchOverlaps | Sequence[Overlaps],
    activation: ActivationName | None = None,
    teacher_activation: ActivationName | None = None,
    *,
    lr: float | ArrayLike,
    lr_readout: float | ArrayLike = 0.0,
    noise: float | ArrayLike = 0.0,
    regime: Regime = "online",
    spherical: bool = False,
    t_max: float | None = None,
    times: ArrayLike | None = None,
    method: Method = "adaptive",
    dt: float = 0.01,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    readout: Readout = "sum",
    risk_tol: float | ArrayLike | None = None,
    risk_rtol: float | ArrayLike | None = None,
    n_records: int = 101,
    h_max: float | None = None,
    max_steps: int = 100_000_000,
    n_threads: int | None = None,
    progress: bool = False,
    schedule: Schedule | Callable[..., Any] | None = None,
    target: Any = None,
    device: Device = "cpu",
    lr_bias: float | ArrayLike = 0.0,
) -> BatchTrajectory:
    """Integrate B independent systems in one C++ call per shape.

    The GIL is released and members run in parallel (OpenMP).

    Parameters
    ----------
    overlaps : BatchOverlaps or sequence of Overlaps
        Stacked arrays (:class:`~twolayer.BatchOverlaps`: Q (B, K, K), M (B, K, M), P (B, M, M) or (M, M),
        a (B, K), v (B, M) or (M,), validated all at once), or a list of :class:`~twolayer.Overlaps`, whose K
        and M may differ: members of equal shape are stacked and integrated together, in one core call per
        shape.
    lr, lr_readout, noise, risk_tol, risk_rtol : float or array_like (B,)
        One value for all members or one per member (>= 0; for ``risk_tol``/``risk_rtol`` None or 0 means no
        threshold).
    lr_bias : float or array_like (B,), default 0.0
        Learning rate of the students' biases, as in :func:`integrate`. A member with a nonzero ``bias`` or
        ``teacher_bias`` (the overlaps') or ``lr_bias > 0`` runs the equations with means (``ode._bias``), exactly
        as :func:`integrate` runs it alone (bitwise): erf, sin and cos committees (K, M <= 4) in SIMD lanes of their
        own, the others on the one-system right-hand side, in parallel; the members without biases run as without.
        A batch with such members records ``bias`` (B, T, K) (zeros for the others), ``bias_final``, ``teacher_bias``
        (B, M) and the parameter ``lr_bias``.
    progress : bool
        Show a ``tqdm.auto`` bar of members finished (off by default; no effect on the results).
    schedule : Schedule or callable, optional
        Learning-rate multiplier s(t) shared by every member (each keeps its own base ``lr``), as in
        :func:`integrate`.
    target : HermiteTarget or sequence, optional
        A polynomial target of :mod:`twolayer.targets` shared by every
        member, or one per member (None for a committee member); without
        it, the targets the members' overlaps remember
        (``Overlaps.from_networks(student, target)``). Each target member
        runs exactly as ``integrate(..., target=)`` runs it (M (K, k),
        P = I_k); members of equal K and k share a core call. Regimes
        'online' and 'gradient_flow' ('large_batch' is per member:
        :func:`integrate`).
    device : {"cpu", "cuda"}
        ``"cuda"``: the optional CUDA backend (a build with ``TWOLAYER_CUDA=ON`` and a GPU, else
        :class:`twolayer.DeviceUnavailable` naming what is missing), one GPU thread per member with its own steps,
        status and stop rule, for committees whose student and teacher are both erf, relu, quadratic or linear,
        K = M in {2, 4, 8} (erf: {1, 2, 3, 4, 8}; relu: {2, 4}) or K, M <= 4, a constant learning rate and no
        target; ``n_threads`` is then unused. The GPU does the CPU lanes' operations in the same order (no fused
        multiply-add): rows agree with the CPU's to the last bits for the fixed-step methods (docs/layers/gpu.rst).

    Returns
    -------
    BatchTrajectory
        Arrays (B, T, ...) on the shared output times, rows after a member's stop filled with NaN (its own
        ``n_recorded`` rows are valid; the state at a located early stop is in the ``*_final`` arrays), members
        of a mixed-shape batch padded with NaN to the largest K and M; per-member ``status``, ``stop_time``
        (NaN: no stop), ``n_rhs``. Iterating or indexing it gives each member's :class:`~twolayer.Trajectory`.
        On Ctrl-C, :class:`twolayer.Interrupted`'s ``partial`` is the BatchTrajectory so far: finished members as
        they are, the others with ``status="interrupted"`` and the rows they reached (none if never started).

    Notes
    -----
    Activations (from the arguments, else from the overlaps as in :func:`integrate`), regime, method and output
    times are shared by every member; the other arguments are as in :func:`integrate`. Each member is integrated
    exactly as :func:`integrate` would integrate it alone (bitwise: same steps, same rows), with its own step
    sizes and its own status: a stiff or diverging member does not affect the others. Step units in the
    gradient-flow regime run the step-unit flow of :mod:`twolayer.step_flow`, member by member. Committees whose
    student and teacher are both erf, quadratic, linear, sin or cos (or sin and cos; K, M <= 4, a constant learning
    rate, no target) run 8 members at a time in SIMD lanes; the others (tanh, softplus, ... whose expectations are
    lattice quadratures; relu) one member at a time, so that a batch costs per member what a member alone costs
    (docs/layers/ode.rst, "Batches in SIMD lanes").

    Examples
    --------
    Two members with their own learning rate and threshold:

    >>> ov = tl.ode.plateau_overlaps()
    >>> batch = tl.ode.integrate_batch([ov, ov], "erf", lr=[1.0, 1.0],
    ...                                t_max=300, risk_tol=[1e-2, 1e-3])
    >>> batch
    BatchTrajectory(B=2, T=101, converged=2)
    >>> np.round(batch.stop_time, 3)
    array([166.818, 198.457])
    >>> batch[0].status, batch.risk.shape
    (<Status.converged: 'converged'>, (2, 101))

    A polynomial target shared by two students (or ``target=[t1, t2]``):

    >>> tgt = tl.targets.staircase(2, d=30, seed=0)
    >>> ovs = [tl.Overlaps.from_networks(tl.Network.random(2, 30, "relu", seed=s), tgt)
    ...        for s in (1, 2)]
    >>> tl.ode.integrate_batch(ovs, "relu", lr=0.5, t_max=1, n_records=3).M.shape
    (2, 3, 2, 2)
    """
    if regime == "large_batch":
        raise ValueError("regime: integrate_batch integrates the ODE ('online' or 'gradient_flow'); the "
                         "large-batch map counts iterations: run ode.integrate(..., regime='large_batch', "
                         "batch_ratio=..., n_steps=...) per member")
    tgts = _batch_targets(target, overlaps)
    groups, B, source = _batch_groups(overlaps, tgts)
    if tgts is None:
        act, t_act = resolve_activations(activation, teacher_activation, source)
    else:
        act = _target_activation(activation, source)
        committee = [o for o, t in zip(overlaps, tgts, strict=True) if t is None]
        t_act = "target" if not committee else resolve_activations(act, teacher_activation, committee[0])[1]
    reg, meth, ro = check_choices(act, regime, method, readout)
    spherical = boolean(spherical, "spherical")
    progress = boolean(progress, "progress")
    device = device_arg(device)
    for stack, idx in groups:
        label = _stack_label if isinstance(overlaps, BatchOverlaps) else _list_label(idx.tolist())
        check_spherical(stack.Q, spherical, label)
        if tgts is not None and tgts[idx[0]] is not None:
            _check_target_stack(stack, [tgts[b] for b in idx], label)
    params = {
        "lr": _per_member(lr, "lr", B),
        "lr_readout": _per_member(lr_readout, "lr_readout", B),
        "noise": _per_member(noise, "noise", B),
        "risk_tol": _per_member(risk_tol, "risk_tol", B, none=0.0),
        "risk_rtol": _per_member(risk_rtol, "risk_rtol", B, none=0.0),
    }
    lr_b = _per_member(lr_bias, "lr_bias", B)
    biased = bool(np.any(lr_b > 0) or any(np.any(s.has_bias) for s, _ in groups))
    if biased:  # the batch records the biases (ode/_bias.py: which members run with them)
        params["lr_bias"] = lr_b
    K, Mt = (max((getattr(s, n) for s, _ in groups), default=0) for n in ("K", "n_teacher"))
    tail, keywords, solver_meta = solver_options(meth, t_max, times, dt, rtol, atol, n_records, h_max, max_steps,
                                                 n_threads, row_bytes=B * (K * K + K * Mt + K * (1 + biased) + 1) * 8)
    sched = as_schedule(schedule, t_max=float(tail[0][-1]))
    meta = {**model_meta(act, t_act, reg, spherical, ro), **solver_meta,
            **({} if sched is None else {"schedule": repr(sched)}),
            **({"method": "step_events"} if is_step_flow(act, t_act, reg, spherical) else {}),
            **({"device": "cuda"} if device == "cuda" else {})}
    if tgts is not None:
        names = [repr(t) for t in tgts if t is not None]
        meta["target"] = names[0] if len(set(names)) == 1 else "[" + ", ".join(map(str, (
            repr(t) if t is not None else None for t in tgts))) + "]"
    ts = tail[0]
    outs: list[dict[str, Any] | None] = [None] * len(groups)
    shared: dict[str, NDArray[Any]] | None = None

    def result() -> BatchTrajectory:
        return _assemble(groups, outs, B, ts, params, meta, shared, biased)

    def run(report: Callable[[int], None] | None) -> None:
        done = 0
        for g, (stack, idx) in enumerate(groups):
            P, v = (stack.P[0], stack.v[0]) if stack.shared_teacher else (stack.P, stack.v)
            member_tgts = None if tgts is None or tgts[idx[0]] is None else [tgts[b]._arrays() for b in idx]
            if member_tgts is None:
                c2 = 1.0 if ro == "sum" else 1.0 / stack.K**2
                lr_a, teacher = params["lr_readout"][idx] * c2, t_act
            else:  # as ode.integrate(..., target=) runs each member: P = I_k exactly, v = 0, a linear zero committee
                c = 1.0 if ro == "sum" else 1.0 / stack.K
                lr_a, teacher = params["lr_readout"][idx] * c * c, "linear"
                P, v = np.eye(stack.n_teacher), np.zeros(stack.n_teacher)
            callback = None if report is None else (lambda n, done=done: report(done + n))
            biases: dict[str, Any] = {} if not biased else {"bias": stack.bias, "teacher_bias": stack.teacher_bias,
                                            "lr_bias": params["lr_bias"][idx]}
            try:
                outs[g] = _core.ode_integrate_batch(
                    stack.Q, stack.M, stack.a, P, v, act, teacher, reg, bool(spherical), params["lr"][idx],
                    lr_a, params["noise"][idx], *tail, 0.0, keywords["h_max"],
                    params["risk_tol"][idx], params["risk_rtol"][idx], keywords["max_steps"], keywords["n_threads"],
                    callback, schedule=core_arg(sched), targets=member_tgts, out=shared,
                    members=None if shared is None else idx, device=device, **biases)
            except Interrupted as exc:
                if exc.partial is not None:
                    outs[g] = exc.partial
                exc.partial = result()
                raise
            done += len(idx)

    # a Ctrl-C between two groups' core calls, or in the bar: the finished members (None before the first call)
    with keep_partial(lambda: None if all(o is None for o in outs) else result()):
        # several shapes: every group's rows go straight into one set of arrays padded to the largest K and M,
        # made (NaN) before the first run, so that neither the result nor a Ctrl-C's partial copies them afterwards
        shared = None if len(groups) == 1 else _padded_rows(B, ts.size, K, Mt, biased)
        with progress_bar(progress, B, "member", "ODE batch") as update:
            run(update)
        return result()


def _padded_rows(B: int, T: int, K: int, M: int, biased: bool = False) -> dict[str, NDArray[Any]]:
    """The row arrays of a mixed-shape batch, padded to the largest K and M, as the core fills them: NaN, no row
    recorded (filled in blocks of ~32 MB, so that a Ctrl-C is seen between them); ``bias`` and ``bias_final`` too
    in a batch with biases."""
    def nans(*shape: int) -> NDArray[np.float64]:
        out = np.empty(shape)
        step = max(1, (1 << 22) // max(1, out[:1].size))
        for i in range(0, shape[0], step):
            out[i:i + step] = math.nan
        return out

    return {"Q": nans(B, T, K, K), "M": nans(B, T, K, M), "a": nans(B, T, K), "risk": nans(B, T),
            "t_final": nans(B), "Q_final": nans(B, K, K), "M_final": nans(B, K, M), "a_final": nans(B, K),
            "risk_final": nans(B), "n_recorded": np.zeros(B, dtype=np.int64),
            **({"bias": nans(B, T, K), "bias_final": nans(B, K)} if biased else {})}


def _assemble(
    groups: list[tuple[BatchOverlaps, NDArray[np.int64]]],
    outs: list[dict[str, Any] | None],
    B: int,
    ts: NDArray[np.float64],
    params: dict[str, NDArray[np.float64]],
    meta: dict[str, Any],
    shared: dict[str, NDArray[Any]] | None = None,
    biased: bool = False,
) -> BatchTrajectory:
    """One BatchTrajectory from the core's per-group outputs (None: the group never ran, its members are
    "interrupted" with no rows). A single group is used as it is (no copy); several wrote their rows into the
    ``shared`` padded arrays (:func:`_padded_rows`), and only their per-member scalars are scattered here. With
    ``biased``, the rows carry ``bias`` and ``bias_final``, and the result the teacher's ``teacher_bias``."""
    T = ts.shape[0]
    gpu_seconds = [o["gpu_seconds"] for o in outs if o is not None and "gpu_seconds" in o]
    if gpu_seconds:  # device="cuda": the device's own time (kernels and copies), for benchmarks
        meta = {**meta, "gpu_seconds": float(sum(gpu_seconds))}
    if len(groups) == 1 and outs[0] is not None:
        stack, _ = groups[0]
        out = outs[0]
        assert out is not None
        arrays = {k: out[k] for k in ("Q", "M", "a", "risk", "t_final", "Q_final", "M_final", "a_final",
                                      "risk_final", "stop_time", "n_recorded", "n_rhs", "n_steps", "n_rejected",
                                      *(("bias", "bias_final") if biased else ()))}
        teacher_bias = stack.teacher_bias
        status, message = np.asarray(out["status"], dtype=str), np.asarray(out["message"], dtype=str)
        P, v = stack.P, stack.v
        n_student, n_teacher = np.full(B, stack.K, dtype=np.int64), np.full(B, stack.n_teacher, dtype=np.int64)
    else:
        K = max((s.K for s, _ in groups), default=0)
        Mt = max((s.n_teacher for s, _ in groups), default=0)
        nan = math.nan
        arrays = {**(shared if shared is not None else _padded_rows(B, T, K, Mt, biased)), "stop_time": np.zeros(B),
                  **{k: np.zeros(B, dtype=np.int64) for k in ("n_rhs", "n_steps", "n_rejected")}}
        status = np.full(B, "interrupted", dtype="<U11")
        message = np.full(B, "interrupted before it started", dtype=object)
        P, v, teacher_bias = np.full((B, Mt, Mt), nan), np.full((B, Mt), nan), np.full((B, Mt), nan)
        n_student, n_teacher = np.zeros(B, dtype=np.int64), np.zeros(B, dtype=np.int64)
        for (stack, idx), part in zip(groups, outs, strict=True):
            k, m = stack.K, stack.n_teacher
            P[idx, :m, :m], v[idx, :m], teacher_bias[idx, :m] = stack.P, stack.v, stack.teacher_bias
            n_student[idx], n_teacher[idx] = k, m
            if part is None:
                continue
            for name in ("stop_time", "n_rhs", "n_steps", "n_rejected"):
                arrays[name][idx] = part[name]
            status[idx] = part["status"]
            message[idx] = part["message"]
        message = message.astype(str)
    arrays = {("final_risk" if k == "risk_final" else k): x for k, x in arrays.items()}  # the core's name
    return BatchTrajectory(
        t=ts.copy(), P=P, v=v, status=status, message=message, n_student=n_student, n_teacher=n_teacher,
        params=_thresholds_off_as_nan(params), time_unit=TIME_UNIT, meta=meta,
        teacher_bias=np.array(teacher_bias) if biased else None, **arrays)
