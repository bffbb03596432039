"""Alignment and symmetry breaking along training (the alignment paper; Mariantoni & Chizat 2022).

- :func:`alignment_determinants` (alignment paper, Theorem 5.1): for student polar angles
  0 = theta_0 < theta_1 < ... < theta_m < 2 pi (d = 2, one teacher at angle 0), f(t) = sin t + (pi - t) cos t
  of the angular distances gives M = [f(theta_ij)]_{i,j=1..m} and M_i = M with column i replaced by
  [f(theta_j0)]_j. The determinant condition is det M > 0 and min_i det M_i <= 0 (then no non-aligned
  critical point exists).
- :func:`alignment_flow` (alignment paper, Figure 1): population gradient descent in d = 2 recording student
  directions.
- :func:`step_gradient_flow` (Mariantoni & Chizat): weight-space gradient flow of step units, recording the
  weights.
- :func:`procrustes`, :func:`procrustes_distance` (Mariantoni & Chizat, section 3): the orthogonal P minimising
  ``|A - P B|_F`` is P = U V^T from the SVD A B^T = U S V^T. (The report writes V U^T with its SVD of
  theta(0) = U S V^T; for theta_O(0) = I our formula gives U V^T of that same SVD — the report's transposition
  is a typo, checked numerically in the tests.) When B has orthonormal columns,
  ``min_P |A - P B|_F^2 = sum_i (s_i - 1)^2`` over the singular values of A (Lemma 2; the report's
  "s_i^2 - 2 s_i - 1" should read "+ 1").

See the documentation's paper-reproduction pages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import population
from .._validation import as_float_array, positive
from ..networks import Network
from ..overlaps import check_pair
from ..schedules import Schedule, as_schedule, per_step

__all__ = [
    "alignment_determinants",
    "alignment_determinants_direct",
    "ad_function",
    "procrustes",
    "procrustes_distance",
    "WeightPath",
    "step_gradient_flow",
    "alignment_flow",
]


def ad_function(t: ArrayLike) -> NDArray[np.float64]:
    """The angular-distance function f(t) = sin t + (pi - t) cos t.

    Parameters
    ----------
    t : array_like
        Angular distances in [0, pi].

    Returns
    -------
    ndarray
        f(t) in the shape of ``t``.

    Examples
    --------
    >>> tl.landscape.alignment.ad_function(np.array([0.0, np.pi / 2]))
    array([3.14159265, 1.        ])
    """
    t_ = as_float_array(t, "t", finite=False).reshape(np.shape(t))  # a scalar stays a scalar
    return np.sin(t_) + (np.pi - t_) * np.cos(t_)


def alignment_determinants(angles: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The determinant condition of the alignment paper's Theorem 5.1.

    Vectorised over the leading axes (one batched solve; Cramer's rule).

    Parameters
    ----------
    angles : array_like, shape (..., m)
        Student polar angles, each set strictly increasing in (0, 2 pi) (the
        teacher sits at theta_0 = 0).

    Returns
    -------
    det_M, min_det_Mi : ndarray, shape (...)
        det M and min_i det M_i (see the module docstring).

    Examples
    --------
    >>> det_M, min_det_Mi = tl.landscape.alignment_determinants([1.0, 2.0, 4.0])
    >>> print(f"{det_M:.6f} {min_det_Mi:.6f}")
    17.867042 -8.528654
    """
    th = as_float_array(angles, "angles")
    if np.ndim(angles) < 1 or th.shape[-1] < 1:
        raise ValueError(f"angles: expected shape (..., m) with m >= 1, got {th.shape}")
    if np.any(th <= 0.0) or np.any(th >= 2 * np.pi):
        raise ValueError("angles: every angle must lie in (0, 2 pi) (theta_0 = 0 is the teacher)")
    if th.shape[-1] > 1 and np.any(np.diff(th, axis=-1) <= 0.0):
        raise ValueError("angles: each angle set must be sorted strictly increasing")
    diff = np.abs(th[..., :, None] - th[..., None, :])
    M = ad_function(np.minimum(diff, 2 * np.pi - diff))  # (..., m, m)
    f0 = ad_function(np.minimum(th, 2 * np.pi - th))  # (..., m): f(theta_j0)
    det_M = np.linalg.det(M)
    m = th.shape[-1]
    # Cramer's rule: det M_i = det M * rho_i with M rho = f0 (one batched solve instead of m determinants);
    # sets whose M is singular to working precision get the m determinants directly.
    flatM = M.reshape(-1, m, m)
    flat_f0 = f0.reshape(-1, m)
    flat_det = det_M.reshape(-1)
    det_Mi = np.empty_like(flat_f0)
    cond_ok = np.isfinite(flat_det) & (np.abs(flat_det) > 0.0)
    if np.any(cond_ok):
        rho = np.linalg.solve(flatM[cond_ok], flat_f0[cond_ok][..., None])[..., 0]
        det_Mi[cond_ok] = flat_det[cond_ok, None] * rho
    bad = np.flatnonzero(~cond_ok)
    if bad.size:
        Mi = np.repeat(flatM[bad, None, :, :], m, axis=1)
        for i in range(m):
            Mi[:, i, :, i] = flat_f0[bad]
        det_Mi[bad] = np.linalg.det(Mi)
    return det_M, det_Mi.min(axis=-1).reshape(det_M.shape)


def alignment_determinants_direct(angles: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """:func:`alignment_determinants` by m + 1 explicit determinants per set.

    The reference :func:`alignment_determinants` is tested against.

    Parameters
    ----------
    angles : array_like, shape (..., m)
        As in :func:`alignment_determinants`.

    Returns
    -------
    det_M, min_det_Mi : ndarray, shape (...)

    Examples
    --------
    >>> from twolayer.landscape.alignment import alignment_determinants_direct
    >>> det_M, min_det_Mi = alignment_determinants_direct([1.0, 2.0, 4.0])
    >>> print(f"{det_M:.6f} {min_det_Mi:.6f}")
    17.867042 -8.528654
    """
    th = as_float_array(angles, "angles")
    diff = np.abs(th[..., :, None] - th[..., None, :])
    M = ad_function(np.minimum(diff, 2 * np.pi - diff))
    f0 = ad_function(np.minimum(th, 2 * np.pi - th))
    m = th.shape[-1]
    Mi = np.repeat(M[..., None, :, :], m, axis=-3)
    for i in range(m):
        Mi[..., i, :, i] = f0
    return np.linalg.det(M), np.linalg.det(Mi).min(axis=-1)


def procrustes(A: ArrayLike, B: ArrayLike) -> NDArray[np.float64]:
    """The orthogonal P minimising the Frobenius norm of A - P B.

    P = U V^T with A B^T = U S V^T (orthogonal Procrustes).

    Parameters
    ----------
    A, B : array_like, shape (d, n)
        The two configurations.

    Returns
    -------
    ndarray, shape (d, d)

    Examples
    --------
    >>> R = np.array([[0.0, -1.0], [1.0, 0.0]])      # a rotation by pi / 2
    >>> B = np.array([[1.0, 2.0], [0.5, -1.0]])
    >>> bool(np.allclose(tl.landscape.procrustes(R @ B, B), R))
    True
    """
    A_ = as_float_array(A, "A", ndim=2)
    B_ = as_float_array(B, "B", ndim=2)
    if A_.shape != B_.shape:
        raise ValueError(f"B: expected the shape of A {A_.shape}, got {B_.shape}")
    # P depends on A and B only through the directions of A B^T: at the unit scale, no overflow
    U, _, Vt = np.linalg.svd(_unit(A_) @ _unit(B_).T)
    return U @ Vt


def _unit(X: NDArray[np.float64]) -> NDArray[np.float64]:
    """X divided by its largest |entry| (X itself if zero)."""
    m = float(np.max(np.abs(X), initial=0.0))
    return X / m if m > 0 else X


def procrustes_distance(A: ArrayLike, B: ArrayLike, P: ArrayLike | None = None) -> float:
    """The Frobenius norm of A - P B, with the minimising orthogonal P unless given.

    Without P this needs no d x d work:
    ``min_P |A - P B|_F^2 = |A|_F^2 + |B|_F^2 - 2 sum sigma(A B^T)``, and with
    thin QR factors A = Q_A R_A, B = Q_B R_B the singular values of A B^T are
    those of R_A R_B^T (n x n).

    Parameters
    ----------
    A, B : array_like, shape (d, n)
        The two configurations.
    P : array_like, shape (d, d), optional
        A given rotation (default: the minimising one).

    Returns
    -------
    float

    Examples
    --------
    Lemma 2 of Mariantoni & Chizat: for B with orthonormal columns the
    squared distance is sum_i (s_i - 1)^2 over the singular values of A.

    >>> rng = np.random.default_rng(1)
    >>> A = rng.standard_normal((50, 6)) / np.sqrt(50)
    >>> B, _ = np.linalg.qr(rng.standard_normal((50, 6)))
    >>> s = np.linalg.svd(A, compute_uv=False)
    >>> bool(np.isclose(tl.landscape.procrustes_distance(A, B) ** 2,
    ...                 np.sum((s - 1) ** 2)))
    True
    """
    A_ = as_float_array(A, "A", ndim=2)
    B_ = as_float_array(B, "B", ndim=2)
    if A_.shape != B_.shape:
        raise ValueError(f"B: expected the shape of A {A_.shape}, got {B_.shape}")
    # at unit scale (the distance is homogeneous of degree 1 in (A, B)): no overflow of the squared norms
    s = max(float(np.max(np.abs(A_), initial=0.0)), float(np.max(np.abs(B_), initial=0.0))) or 1.0
    A_, B_ = A_ / s, B_ / s
    if P is not None:
        dist = s * float(np.linalg.norm(A_ - as_float_array(P, "P", ndim=2) @ B_))
    else:
        # mode="r" returns the R factor alone (numpy's stubs type every mode as the (Q, R) result)
        Ra = cast(NDArray[np.float64], np.linalg.qr(A_, mode="r"))
        Rb = cast(NDArray[np.float64], np.linalg.qr(B_, mode="r"))
        nuclear = np.linalg.svd(Ra @ Rb.T, compute_uv=False).sum()
        dist = s * float(np.sqrt(max(np.sum(A_ * A_) + np.sum(B_ * B_) - 2.0 * nuclear, 0.0)))
    if not np.isfinite(dist):
        raise ValueError("A, B, P: the distance exceeds the double range")
    return dist


@dataclass(eq=False)
class WeightPath:
    """Weights along population gradient descent.

    Attributes
    ----------
    tau : ndarray, shape (T,)
        Flow time lr * iterations.
    W : ndarray, shape (T, K, d)
        The student's weights.
    risk : ndarray, shape (T,)
        The excess risk.
    teacher : Network
        The teacher.
    status : str
        "completed" or "diverged".
    bias : ndarray, shape (T, K), or None
        The student's biases (with biases: either network's, or
        ``lr_bias > 0``; None without).

    Examples
    --------
    >>> teacher = tl.Network([[1.0, 0.0]], None, "relu", scaling="none")
    >>> student = tl.Network([[0.6, 0.8]], None, "relu", scaling="none")
    >>> path = tl.landscape.alignment_flow(student, teacher, [0.0, 50.0], lr=0.1)
    >>> path.W.shape, path.theta.shape
    ((2, 1, 2), (2, 2, 2))
    """

    tau: NDArray[np.float64]
    W: NDArray[np.float64]
    risk: NDArray[np.float64]
    teacher: Network
    status: str
    bias: NDArray[np.float64] | None = None

    @property
    def theta(self) -> NDArray[np.float64]:
        """(T, d, K + M): Mariantoni & Chizat's matrix of teacher and student weight vectors (teacher columns first)."""
        Wt = np.broadcast_to(self.teacher.W, (self.W.shape[0],) + self.teacher.W.shape)
        return np.concatenate([Wt, self.W], axis=1).transpose(0, 2, 1)

    @property
    def angles(self) -> NDArray[np.float64]:
        """Polar angles (T, K) in [0, 2 pi) of the student rows (d = 2 only)."""
        if self.W.shape[2] != 2:
            raise ValueError("angles: only defined for d = 2")
        return np.mod(np.arctan2(self.W[..., 1], self.W[..., 0]), 2 * np.pi)


# Flow times are counted in whole iterations (int64, exact below 2^53): more cannot be run or represented.
_MAX_ITERATIONS = 2.0**53
# A scheduled flow keeps its multipliers s(n), one per iteration, in memory: at most this many.
_MAX_SCHEDULED = 1 << 24


def _rate_function(schedule: object) -> Callable[[NDArray[np.float64]], NDArray[np.float64]] | None:
    """s(n) of iterations n (an array) from a Schedule, a per-step array or a vectorised callable; None: s = 1."""
    if schedule is None or isinstance(schedule, (Schedule, list, tuple, np.ndarray)):
        sched = as_schedule(schedule)
        return None if sched is None else sched.__call__
    if not callable(schedule):
        raise TypeError(f"schedule: expected a twolayer.schedules.Schedule, an array or a callable s(n), got "
                        f"{type(schedule).__name__}")

    def rate(n: NDArray[np.float64]) -> NDArray[np.float64]:
        out = np.asarray(schedule(n), dtype=np.float64)
        if out.shape != n.shape or not np.all(np.isfinite(out)) or np.any(out < 0):
            raise ValueError("schedule: the callable must map an array of iterations to finite values >= 0")
        return out

    return rate


def _flow_iterations(t: NDArray[np.float64], lr: float,
                     sched: Callable[[NDArray[np.float64]], NDArray[np.float64]] | None
                     ) -> tuple[NDArray[np.int64], NDArray[np.float64] | None]:
    """The iteration reaching each flow time of ``t``, and (scheduled runs) the multipliers s(n) up to the last.

    Unscheduled: tau = lr n, n = round(t / lr). Scheduled: tau_n = lr sum_{j < n} s(j), n the iteration whose
    tau_n is nearest to t."""
    if sched is None:
        with np.errstate(over="ignore"):
            iterations = np.round(t / lr)
        if not np.all(iterations <= _MAX_ITERATIONS):
            raise ValueError(f"times, lr: times[-1] / lr = {t[-1] / lr:.3g} iterations is beyond the usable range "
                             f"(at most {_MAX_ITERATIONS:.0e}; raise lr or shorten times)")
        return iterations.astype(np.int64), None
    rates: list[NDArray[np.float64]] = []
    total, n = 0.0, 0
    chunk = 1 << 14
    while total < t[-1] * (1 - 1e-12):
        if n >= _MAX_SCHEDULED:
            raise ValueError(f"times, schedule: the flow time lr * sum_n s(n) reaches only {total:.6g} after "
                             f"{n} iterations, short of times[-1] = {t[-1]:.6g} (the schedule decays too fast)")
        s = sched(np.arange(n, n + chunk, dtype=np.float64))
        rates.append(s)
        total += lr * float(np.sum(s))
        n += chunk
        chunk = min(chunk * 2, 1 << 22)
    s_all = np.concatenate(rates) if rates else np.zeros(0)
    tau = np.concatenate([[0.0], lr * np.cumsum(s_all)])
    idx = np.clip(np.searchsorted(tau, t), 1, tau.size - 1) if tau.size > 1 else np.zeros(t.size, np.int64)
    nearest = np.where(np.abs(tau[idx - 1] - t) <= np.abs(tau[np.minimum(idx, tau.size - 1)] - t), idx - 1, idx)
    return np.asarray(nearest, dtype=np.int64), s_all


def _path(student: Network, teacher: Network, lr: float, times: ArrayLike, schedule: object = None,
          lr_bias: float = 0.0) -> WeightPath:
    """Population gradient descent with step ``lr`` (times the schedule's s(n) at iteration n; the biases with
    ``lr_bias``), recording W (and b) at flow times ``times`` (rounded to iterations)."""
    check_pair(student, teacher, biases=True)
    lr_ = positive(lr, "lr")
    lr_b = positive(lr_bias, "lr_bias", allow_zero=True)
    biased = lr_b > 0 or student.has_bias or teacher.has_bias
    t = as_float_array(times, "times", ndim=1)
    if t.size == 0 or np.any(t < 0) or np.any(np.diff(t) < 0):
        raise ValueError("times: expected a non-empty non-decreasing array of non-negative flow times")
    steps, rates = _flow_iterations(t, lr_, _rate_function(schedule))
    Ws, bs, risks, taus = [], [], [], []
    net, done, status = student, 0, "completed"
    tau_of = (lambda n: n * lr_) if rates is None else (lambda n: lr_ * float(np.sum(rates[:n])))
    for s in steps:
        if s > done:
            traj = population.descend(net, teacher, lr=lr_, n_steps=int(s - done), n_records=2,
                                      schedule=None if rates is None else per_step(rates[done:s]), lr_bias=lr_b)
            if traj.status != "completed":
                status = "diverged"
                break
            net, done = traj.student, int(s)
        Ws.append(net.W.copy())
        bs.append(net.bias.copy())
        risks.append(population.risk(net, teacher))
        taus.append(tau_of(done))
    return WeightPath(np.asarray(taus), np.asarray(Ws), np.asarray(risks), teacher, status,
                      np.asarray(bs) if biased else None)


def step_gradient_flow(student: Network, teacher: Network, times: ArrayLike, lr: float = 1e-2,
                       schedule: Schedule | object | None = None, lr_bias: float = 0.0) -> WeightPath:
    """Weight-space gradient flow of step units (Mariantoni & Chizat).

    dW/dtau = -grad R for sigma = 1(s > 0), by population gradient descent
    with step ``lr`` (Euler; tau = lr * iterations).

    Parameters
    ----------
    student, teacher : Network
        Both with the ``"step"`` activation.
    times : array_like
        Flow times at which the weights are recorded (rounded to steps).
    lr : float, default 1e-2
        The Euler step.
    schedule : Schedule or callable, optional
        (:mod:`twolayer.schedules`, or a vectorised callable s(n)):
        iteration n takes the step lr s(n), and the flow time is
        tau_n = lr sum_{j < n} s(j); ``times`` are flow times, each recorded
        at the iteration whose tau_n is nearest. A decaying schedule lets
        the Euler steps resolve the cusp of the step units' loss at
        alignment (fixed steps oscillate there with an amplitude ~ lr); its
        total flow time must reach ``times[-1]``.
    lr_bias : float, default 0.0
        The step of the student's biases (0: fixed; either network may
        have biases, recorded in :attr:`WeightPath.bias`).

    Returns
    -------
    WeightPath

    Examples
    --------
    >>> teacher = tl.Network([[1.0, 0.0]], None, "step", scaling="none")
    >>> student = tl.Network([[0.6, 0.8], [0.0, 1.0]], None, "step",
    ...                      scaling="none")
    >>> path = tl.landscape.step_gradient_flow(student, teacher, [0.0, 1.0], lr=0.1)
    >>> path.tau, np.round(path.risk, 6)
    (array([0., 1.]), array([0.545167, 0.444338]))
    """
    for name, net in (("student", student), ("teacher", teacher)):
        if isinstance(net, Network) and net.activation != "step":
            raise ValueError(f"{name}: expected the 'step' activation, got {net.activation!r}")
    return _path(student, teacher, lr, times, schedule, lr_bias)


def alignment_flow(student: Network, teacher: Network, times: ArrayLike, lr: float = 1e-2,
                   lr_bias: float = 0.0) -> WeightPath:
    """Population gradient descent of relu units in d = 2 (alignment paper, Figure 1).

    Parameters
    ----------
    student, teacher : Network
        relu networks with d = 2.
    times : array_like
        Flow times (lr * iterations) at which the weights are recorded.
    lr : float, default 1e-2
        The step.
    lr_bias : float, default 0.0
        The step of the student's biases (0: fixed; either network may
        have biases, recorded in :attr:`WeightPath.bias`).

    Returns
    -------
    WeightPath
        Use :attr:`WeightPath.angles` for the student directions.

    Examples
    --------
    A student unit turns onto the teacher direction (angle 0):

    >>> teacher = tl.Network([[1.0, 0.0]], None, "relu", scaling="none")
    >>> student = tl.Network([[0.6, 0.8]], None, "relu", scaling="none")
    >>> path = tl.landscape.alignment_flow(student, teacher, [0.0, 50.0], lr=0.1)
    >>> np.round(path.angles[:, 0], 4)
    array([0.9273, 0.    ])
    """
    if isinstance(student, Network) and student.d != 2:
        raise ValueError(f"student: expected d = 2, got d = {student.d}")
    return _path(student, teacher, lr, times, lr_bias=lr_bias)
