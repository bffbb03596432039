"""The NumPy reference of the step-unit flow (session 4's Python implementation of what is now the core's
cpp/src/step_flow.cpp, without its handling of students meeting each other): the side-by-side reference of
bench/test_bench_step_flow.py. ``integrate(ov, lr, lr_readout, times, schedule)`` returns the arrays
``twolayer.ode.integrate`` builds its Trajectory from; its right-hand side is NumPy, called once per stage.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray
from twolayer.overlaps import Overlaps
from twolayer.schedules import Schedule

SNAP = 1e-10  # rad: below this a student is set exactly onto the teacher it approaches
_MET = 1e-7  # rad: two students this close to aligned or antipodal stop the run (not merged)
_NEAR, _SLACK = 1e-4, 0.05  # error slack near arrival (see integrate)
_APPROACH = 0.5  # a step covers at most this fraction of the time to reach the nearest approached unit

# Dormand-Prince 5(4)
_C = np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0])
_A = [
    [],
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
    [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
]
_B5 = np.array([35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0])
_B4 = np.array([5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40])


def realisation(ov: Overlaps) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Rows (K, n) for the students and (M, n) for the teachers, n = K + M, with the Gram matrix Omega.

    Parameters
    ----------
    ov : Overlaps
        The order parameters (Q, M, P; second layers unused).

    Returns
    -------
    W : ndarray, shape (K, K + M)
        Student rows, W W^T = Q.
    T : ndarray, shape (M, K + M)
        Teacher rows, T T^T = P and W T^T = M.

    """
    M = ov.n_teacher
    omega = np.block([[ov.P, ov.M.T], [ov.M, ov.Q]])
    lam, V = np.linalg.eigh(0.5 * (omega + omega.T))
    X = V * np.sqrt(np.clip(lam, 0.0, None))
    return X[M:].copy(), X[:M].copy()


def _angles(U: NDArray[np.float64], V: NDArray[np.float64]) -> NDArray[np.float64]:
    """theta between unit rows of U (p, n) and V (q, n): 2 atan2(|u - v|, |u + v|) (accurate at 0 and pi)."""
    diff = np.linalg.norm(U[:, None, :] - V[None, :, :], axis=2)
    summ = np.linalg.norm(U[:, None, :] + V[None, :, :], axis=2)
    return 2.0 * np.arctan2(diff, summ)


class _Flow:
    def __init__(self, ov: Overlaps, lr: float, lr_readout: float, schedule: Schedule | None) -> None:
        W, T = realisation(ov)
        self.K, self.M = W.shape[0], T.shape[0]
        self.norm = np.linalg.norm(W, axis=1)
        tnorm = np.linalg.norm(T, axis=1)
        if np.any(self.norm <= 0) or np.any(tnorm <= 0):
            raise ValueError("overlaps: step units need Q_ii > 0 and P_rr > 0 (a zero weight vector has no "
                             "direction)")
        self.U0 = W / self.norm[:, None]
        self.T = T / tnorm[:, None]
        self.tnorm = tnorm
        self.v = np.asarray(ov.v, dtype=np.float64)
        self.lr, self.lr_a, self.schedule = lr, lr_readout, schedule
        self.attached = np.full(self.K, -1)  # teacher index a student is pinned to (-1: free)
        # I2 among teachers is constant
        th = _angles(self.T, self.T)
        self.r_tt = 0.5 * float(self.v @ ((np.pi - th) / (2 * np.pi)) @ self.v)

    def rate(self, t: float) -> float:
        return 1.0 if self.schedule is None else float(self.schedule(t))

    def forces(self, U: NDArray[np.float64], a: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """F (K, n) with exactly coincident units left out (their cusp is handled by the caller), and the
        cusp weight c (K,) of the units exactly at each student's position. Keeps the unit tangents towards the
        teachers and the angles to them (``self.E_t``, ``self.th_t``) for the approach limiter."""
        X = np.concatenate([self.T, U])  # teachers, then students
        w = np.concatenate([self.v, -a])
        D = X[None, :, :] - U[:, None, :]  # (K, M + K, n): u_u - u_i
        proj = np.einsum("kun,kn->ku", D, U)  # u_i . (u_u - u_i) = cos - 1 (exactly 0 when coincident)
        tang = D - proj[..., None] * U[:, None, :]
        nrm = np.sqrt(np.einsum("kun,kun->ku", tang, tang))
        inv = np.divide(1.0, nrm, out=np.zeros_like(nrm), where=nrm > 0)  # coincident / antipodal: no direction
        F = np.einsum("ku,kun->kn", w * inv, tang)
        same = (nrm == 0) & (proj == 0)
        same[np.arange(self.K), self.M + np.arange(self.K)] = False
        self.E_t = tang[:, :self.M] * inv[:, :self.M, None]
        self.th_t = 2.0 * np.arctan2(np.linalg.norm(D[:, :self.M], axis=2),
                                     np.linalg.norm(X[None, :self.M] + U[:, None], axis=2))
        return F, same @ w

    def velocity(self, t: float, U: NDArray[np.float64], a: NDArray[np.float64]) -> tuple[NDArray[np.float64],
                                                                                          NDArray[np.float64]]:
        s = self.rate(t)
        F, c = self.forces(U, a)
        coef = self.lr * s * a / (2 * np.pi * self.norm**2)
        pinned = self.attached >= 0
        if np.any(pinned):
            # Filippov: an attached student stays while the cusp (weight c) dominates the other forces
            ok = pinned & (a * c > 0) & (np.linalg.norm(F, axis=1) <= np.abs(c))
            F = np.where(ok[:, None], 0.0, F)
        dU = coef[:, None] * F
        if self.lr_a != 0.0:
            i2_s = (np.pi - _angles(U, U)) / (2 * np.pi)
            i2_t = (np.pi - _angles(U, self.T)) / (2 * np.pi)
            da = self.lr_a * s * (i2_t @ self.v - i2_s @ a)
        else:
            da = np.zeros(self.K)
        return dU, da

    def risk(self, U: NDArray[np.float64], a: NDArray[np.float64]) -> float:
        i2_s = (np.pi - _angles(U, U)) / (2 * np.pi)
        i2_t = (np.pi - _angles(U, self.T)) / (2 * np.pi)
        return 0.5 * float(a @ i2_s @ a) - float(a @ i2_t @ self.v) + self.r_tt

    def events(self, U: NDArray[np.float64], a: NDArray[np.float64]) -> NDArray[np.float64]:
        """Attach students that came within SNAP of a teacher; release those whose sliding condition fails
        (moved off by 10 SNAP along their other forces). Returns the new U (a copy)."""
        th = _angles(U, self.T)
        U = U.copy()
        for i in range(self.K):
            if self.attached[i] < 0:
                r = int(np.argmin(th[i]))
                if th[i, r] < SNAP:
                    U[i] = self.T[r]
                    self.attached[i] = r
        if np.any(self.attached >= 0):
            F, c = self.forces(U, a)
            for j in map(int, np.flatnonzero(self.attached >= 0)):
                fn = float(np.linalg.norm(F[j]))
                if not (a[j] * c[j] > 0 and fn <= abs(c[j])) and fn > 0:
                    direction = np.sign(a[j]) * F[j] / fn
                    U[j] = U[j] + 10 * SNAP * direction
                    U[j] /= np.linalg.norm(U[j])
                    self.attached[j] = -1
        return U

    def students_met(self, U: NDArray[np.float64]) -> tuple[int, int, str] | None:
        """Two students aligned or antipodal (an antipodal pair of step units with equal readouts is the
        constant a: its repulsive cusp pins it there) — the one alignment this integrator does not merge."""
        if self.K < 2:
            return None
        th = _angles(U, U)
        iu = np.triu_indices(self.K, 1)
        close = np.minimum(th[iu], np.pi - th[iu])
        j = int(np.argmin(close))
        if close[j] < _MET:
            return int(iu[0][j]), int(iu[1][j]), "aligned" if th[iu][j] < 1.0 else "antipodal"
        return None

    def limit(self, dU: NDArray[np.float64]) -> float:
        """The largest step allowed by the approach limiter, from the last :meth:`velocity` state: for each free
        student and teacher it approaches (rate = -dtheta/dt = du_i . e(i -> r) > 0), the time to arrive
        theta / rate; a step covers half of it, or (theta < 1e-3, where the arrival is nearly linear in t) 0.98
        of it, so that the alignment is located in a few steps and then snapped (``SNAP``)."""
        rate = np.einsum("kn,krn->kr", dU, self.E_t)
        th = self.th_t
        ok = (rate > 0) & (th > SNAP) & (self.attached < 0)[:, None]
        if not np.any(ok):
            return math.inf
        arrive = th[ok] / rate[ok]
        frac = np.where(th[ok] < 1e-3, 0.98, _APPROACH)
        return float(np.min(frac * arrive))


def integrate(ov: Overlaps, lr: float, lr_readout: float, times: NDArray[np.float64], schedule: Schedule | None,
              rtol: float = 1e-8, atol: float = 1e-10, risk_tol: float = 0.0, risk_rtol: float = 0.0,
              max_steps: int = 1_000_000, h_max: float = 0.0) -> dict[str, Any]:
    """Integrate the step-unit gradient flow from ``ov`` to the output ``times`` (see the module docstring).
    Returns the arrays and counters :func:`twolayer.ode.integrate` makes its Trajectory from (which is the way to
    call it: ``ode.integrate`` routes step units in the gradient-flow regime here).

    Parameters
    ----------
    ov : Overlaps
        Initial order parameters of step units (Q_ii > 0, P_rr > 0).
    lr, lr_readout : float
        Rates of the first layer and of the second layer (0: second layer fixed).
    times : ndarray
        Increasing output times.
    schedule : Schedule or None
        Learning-rate multiplier s(t) (:mod:`twolayer.schedules`).
    rtol, atol : float
        Error tolerances of the Dormand-Prince steps.
    risk_tol, risk_rtol : float
        Early stop at risk <= max(risk_tol, risk_rtol R(0)) (0: off).
    max_steps : int
        Accepted steps before stopping with status "max_steps".
    h_max : float
        Largest step (0: unlimited).

    Returns
    -------
    dict
        ``t``, ``Q``, ``M``, ``a``, ``risk`` arrays at the recorded times, ``status``, ``message``, ``stop_time``
        and the counters ``n_rhs``, ``n_steps``, ``n_rejected``.

    """
    flow = _Flow(ov, lr, lr_readout, schedule)
    K, M = flow.K, flow.M
    U, a = flow.U0.copy(), np.asarray(ov.a, dtype=np.float64).copy()
    U = flow.events(U, a)
    rows: list[tuple[float, NDArray[np.float64], NDArray[np.float64], float]] = []
    n_rhs = n_steps = n_rej = 0
    status, message, stop_time = "completed", "", math.nan
    r0 = flow.risk(U, a)
    threshold = max(risk_tol, risk_rtol * r0) if (risk_tol > 0 or risk_rtol > 0) else -math.inf

    def record(t: float, U_: NDArray[np.float64], a_: NDArray[np.float64]) -> float:
        r = flow.risk(U_, a_)
        rows.append((t, U_.copy(), a_.copy(), r))
        return r

    t = 0.0
    nxt = 0
    while nxt < len(times) and times[nxt] <= 0.0:
        record(float(times[nxt]), U, a)
        nxt += 1
    if r0 <= threshold:
        status, stop_time = "converged", 0.0
        message = f"excess risk {r0:.3g} reached the threshold {threshold:.3g} at t = 0"
        nxt = len(times)
    t_end = float(times[-1]) if len(times) else 0.0
    dU, da = flow.velocity(t, U, a)
    n_rhs += 1
    h = 1e-3
    scale_y = lambda U_, a_: np.concatenate([U_.ravel(), a_])  # noqa: E731
    while nxt < len(times):
        if n_steps >= max_steps:
            status, stop_time = "max_steps", t
            message = f"max_steps = {max_steps} steps taken, stopped at t = {t:g}"
            break
        h = min(h, flow.limit(dU), t_end - t)
        if h_max > 0:
            h = min(h, h_max)
        h = max(h, 1e-300)
        ks_U, ks_a = [dU], [da]
        for st in range(1, 7):
            Us = U + h * sum(c * k for c, k in zip(_A[st], ks_U, strict=False))
            As = a + h * sum(c * k for c, k in zip(_A[st], ks_a, strict=False))
            if st == 6:
                U_new, a_new = Us, As
            k1, k2 = flow.velocity(t + _C[st] * h, Us, As)
            n_rhs += 1
            ks_U.append(k1)
            ks_a.append(k2)
        err_U = h * sum((b5 - b4) * k for b5, b4, k in zip(_B5, _B4, ks_U, strict=True))
        err_a = h * sum((b5 - b4) * k for b5, b4, k in zip(_B5, _B4, ks_a, strict=True))
        y_old, y_new = scale_y(U, a), scale_y(U_new, a_new)
        sc = atol + rtol * np.maximum(np.abs(y_old), np.abs(y_new))
        # within _NEAR of its teacher a student's path is only Hoelder at the arrival: its error is measured
        # relative to its distance theta (slack _SLACK theta), so the approach takes a few steps per decade; the
        # snap then puts it exactly on the teacher (the arrival time is located to ~_SLACK of the last step)
        near = np.min(flow.th_t, axis=1)
        slack = np.where((near < _NEAR) & (flow.attached < 0), _SLACK * near, 0.0)
        sc[:K * U.shape[1]] += np.repeat(slack, U.shape[1])
        e = float(np.sqrt(np.mean((scale_y(err_U, err_a) / sc) ** 2)))
        if not np.isfinite(e):
            e = np.inf
        if e > 1.0:
            n_rej += 1
            h *= max(0.2, 0.9 * e**-0.2) if np.isfinite(e) else 0.2
            continue
        n_steps += 1
        t_new = t + h
        U_new /= np.linalg.norm(U_new, axis=1, keepdims=True)
        pinned = flow.attached >= 0
        U_new[pinned] = flow.T[flow.attached[pinned]]  # bitwise on their teacher
        U_new = flow.events(U_new, a_new)
        pair = flow.students_met(U_new)
        if pair is not None:
            status, stop_time = "diverged", t_new
            message = (f"stopped at t = {t_new:g}: students {pair[0]} and {pair[1]} became {pair[2]} (angle within "
                       f"{_MET:g} rad of {'0' if pair[2] == 'aligned' else 'pi'}); merging two students into one "
                       "sliding pair is not implemented")
            record(t_new, U_new, a_new)
            break
        # outputs inside (t, t_new]: linear interpolation of the directions between the two states
        stop = False
        r_new = flow.risk(U_new, a_new) if threshold > -math.inf else math.inf
        if r_new <= threshold:
            # locate the crossing on the chord in (risk) between the two states
            r_old = flow.risk(U, a)
            th = 1.0 if r_old == r_new else min(1.0, max(0.0, (r_old - threshold) / (r_old - r_new)))
            t_stop = t + th * h
            while nxt < len(times) and times[nxt] < t_stop:
                w = (times[nxt] - t) / h
                Ui = (1 - w) * U + w * U_new
                record(float(times[nxt]), Ui / np.linalg.norm(Ui, axis=1, keepdims=True), (1 - w) * a + w * a_new)
                nxt += 1
            record(t_stop, U_new, a_new)
            status, stop_time = "converged", t_stop
            message = f"excess risk {r_new:.3g} reached the threshold {threshold:.3g} at t = {t_stop:g}"
            stop = True
        else:
            while nxt < len(times) and times[nxt] <= t_new:
                w = (times[nxt] - t) / h
                if w >= 1.0:
                    Ui, ai = U_new, a_new
                else:
                    Ui = (1 - w) * U + w * U_new
                    Ui = Ui / np.linalg.norm(Ui, axis=1, keepdims=True)
                    ai = (1 - w) * a + w * a_new
                record(float(times[nxt]), Ui, ai)
                nxt += 1
        if stop:
            break
        t, U, a = t_new, U_new, a_new
        dU, da = flow.velocity(t, U, a)
        n_rhs += 1
        h *= 5.0 if e == 0 else min(5.0, max(0.2, 0.9 * e**-0.2))
    if status == "completed":
        message = (f"integrated to t = {t_end:g} in {n_steps} steps ({n_rhs} right-hand sides; step units: event "
                   f"location at alignment, Filippov sliding; {int(np.sum(flow.attached >= 0))} of {K} students "
                   f"aligned on a teacher at the end)")
    T = len(rows)
    Q = np.empty((T, K, K))
    Mo = np.empty((T, K, M))
    A = np.empty((T, K))
    risk = np.empty(T)
    tt = np.empty(T)
    Tn = flow.T * flow.tnorm[:, None]
    for j, (tj, Uj, aj, rj) in enumerate(rows):
        Wj = Uj * flow.norm[:, None]
        Q[j] = Wj @ Wj.T
        Mo[j] = Wj @ Tn.T
        A[j], risk[j], tt[j] = aj, rj, tj
    return {"t": tt, "Q": Q, "M": Mo, "a": A, "risk": risk, "status": status, "message": message,
            "stop_time": stop_time, "n_rhs": n_rhs, "n_steps": n_steps, "n_rejected": n_rej}
