"""Order parameters: the covariance of the pre-activations and the second layers.

Omega = [[Q, M], [M^T, P]] is the covariance of (lambda, lambda*) with Q = W W^T / s, M = W W*^T / s,
P = W* W*^T / s; ``a`` and ``v`` are the effective (readout-scaled) second layers of student and teacher.

:class:`Overlaps` holds one system; :class:`BatchOverlaps` holds B systems of equal K and M stacked along a
leading batch axis (the input of :func:`twolayer.ode.integrate_batch`). Both are validated on construction by the
same vectorised check (:func:`check_stack`): finite entries, symmetric Q and P (to 1e-8 of the largest diagonal
entry), and Omega positive semi-definite to the engines' own tolerance (smallest eigenvalue >= -delta, delta = 1e-8
of the largest diagonal entry, or for the rows of an adaptive run rtol max diag + atol where larger:
``integration_tol``; divergence.hpp): one stacked Cholesky factorisation of Omega + delta I over all members, and
``np.linalg.eigvalsh`` over the stack only when it fails, to name the first bad member. Both optionally remember
the activations of the networks they were measured on (``activation``, ``teacher_activation``; None for hand-built
overlaps), which the ODE uses when the caller gives none. :class:`Overlaps` also carries the biases of the units
(``bias`` of the students, ``teacher_bias``; zeros by default): with them the pre-activations have means (b, b*)
and covariance Omega.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core
from ._validation import as_float_array, check_memory
from .activations import check_activation
from .networks import Network, check_network
from .targets import is_target

__all__ = ["BatchOverlaps", "Overlaps", "check_pair", "check_stack", "refuse_bias"]

# Relative tolerance of the symmetry and positive semi-definiteness checks (of the largest diagonal entry): the
# engines' own (divergence.hpp, rule 3), so that every state a run accepted (a trajectory's rows near a student that
# has learnt its teacher, Omega singular to within the integration error) is a valid Overlaps.
_TOL = float(_core.PSD_TOL)


def _integration_tol(tol: Any) -> tuple[float, float]:
    """(rtol, atol) of ``integration_tol``: two finite numbers >= 0."""
    values = as_float_array(tol, "integration_tol", ndim=1)
    if values.shape != (2,) or np.any(values < 0.0):
        raise ValueError(f"integration_tol: expected (rtol, atol), two finite numbers >= 0, got {tol!r}")
    return float(values[0]), float(values[1])


def _optional_activation(name: Any, argument: str) -> str | None:
    return None if name is None else check_activation(name, argument)


def omega_stack(Q: NDArray[np.float64], M: NDArray[np.float64], P: NDArray[np.float64]) -> NDArray[np.float64]:
    """Omega = [[Q, M], [M^T, P]] of every member: Q (B, K, K), M (B, K, M), P (B, M, M) -> (B, K + M, K + M)."""
    top = np.concatenate([Q, M], axis=2)
    bottom = np.concatenate([np.swapaxes(M, 1, 2), P], axis=2)
    return np.concatenate([top, bottom], axis=1)


def check_stack(
    Q: NDArray[np.float64],
    M: NDArray[np.float64],
    P: NDArray[np.float64],
    a: NDArray[np.float64],
    v: NDArray[np.float64],
    label: Callable[[int, str], str],
    integration_tol: tuple[float, float] = (0.0, 0.0),
) -> None:
    """Validate B stacked systems at once (shapes already checked).

    Raises ValueError naming the first bad member through
    ``label(b, field)`` (e.g. ``"Q[17]"``): entries not finite, Q or P not
    symmetric, or Omega not positive semi-definite (then the message says
    whether Q or P alone already fails, or the cross overlaps M do).

    Parameters
    ----------
    Q, M, P : ndarray
        Shapes (B, K, K), (B, K, M), (B, M, M).
    a, v : ndarray
        Shapes (B, K), (B, M).
    label : callable
        ``label(b, field) -> str``: how an error names member b's field.
    integration_tol : (float, float), default (0, 0)
        An adaptive integration's (rtol, atol): Omega's smallest eigenvalue
        may be down to -max(1e-8 s, rtol s + atol), s = max diag (the
        engines' divergence rule, divergence.hpp psd_delta).

    Examples
    --------
    >>> Q = np.array([[[1.0, 2.0], [2.0, 1.0]]])          # not PSD
    >>> M, P = np.zeros((1, 2, 1)), np.ones((1, 1, 1))
    >>> tl.overlaps.check_stack(Q, M, P, np.ones((1, 2)), np.ones((1, 1)),
    ...                         lambda b, field: f"{field}[{b}]")
    Traceback (most recent call last):
        ...
    ValueError: Q[0]: expected a positive semi-definite matrix, got smallest eigenvalue -1
    """
    for name, arr in (("Q", Q), ("M", M), ("P", P), ("a", a), ("v", v)):
        bad = ~np.isfinite(arr).reshape(arr.shape[0], -1).all(axis=1)
        if bad.any():
            raise ValueError(f"{label(int(np.argmax(bad)), name)}: entries must be finite (got NaN or inf)")
    omega = omega_stack(Q, M, P)
    scale = np.maximum(np.max(np.abs(np.diagonal(omega, axis1=1, axis2=2)), axis=1), 1e-300)
    for name, arr in (("Q", Q), ("P", P)):
        asym = np.max(np.abs(arr - np.swapaxes(arr, 1, 2)), axis=(1, 2), initial=0.0)
        bad = asym > _TOL * scale
        if bad.any():
            b = int(np.argmax(bad))
            raise ValueError(f"{label(b, name)}: expected a symmetric matrix, got max |{name} - {name}^T| = "
                             f"{asym[b]:.3g}")
    # Fast path: Omega + delta I has a Cholesky factor iff Omega's smallest eigenvalue is above -delta (the core's
    # own test, delta = psd_delta); only when some member fails are the eigenvalues computed, to name it.
    rtol, atol = integration_tol
    delta = np.maximum(_TOL * scale, rtol * scale + atol)
    n = omega.shape[1]
    try:
        np.linalg.cholesky(omega + delta[:, None, None] * np.eye(n))
        return
    except np.linalg.LinAlgError:
        pass
    lam = np.linalg.eigvalsh(omega)[:, 0] / scale
    bad = lam < -delta / scale
    if bad.any():
        b = int(np.argmax(bad))
        for name, arr in (("Q", Q), ("P", P)):
            low = float(np.linalg.eigvalsh(arr[b])[0]) if arr.shape[1] else 0.0
            if low < -delta[b]:
                raise ValueError(f"{label(b, name)}: expected a positive semi-definite matrix, got smallest "
                                 f"eigenvalue {low:.3g}")
        raise ValueError(f"{label(b, 'M')}: the overlap matrix [[Q, M], [M^T, P]] is not positive semi-definite "
                         f"(smallest eigenvalue {lam[b] * scale[b]:.3g}): M is too large for Q and P")


@dataclass(frozen=True, eq=False)
class Overlaps:
    """One system's order parameters.

    Omega = [[Q, M], [M^T, P]] is the covariance of the student and teacher
    pre-activations (see the documentation's Conventions page). Validated on
    construction: finite, Q and P symmetric, Omega positive semi-definite.

    Parameters
    ----------
    Q : array_like, shape (K, K)
        Student-student overlaps W W^T / s.
    M : array_like, shape (K, M)
        Student-teacher overlaps W W*^T / s.
    P : array_like, shape (M, M)
        Teacher-teacher overlaps W* W*^T / s.
    a : array_like, shape (K,)
        The student's effective (readout-scaled) second layer.
    v : array_like, shape (M,)
        The teacher's effective second layer.
    bias, teacher_bias : array_like, shape (K,) and (M,), optional
        The units' biases b and b* (default: zeros): the pre-activations
        lambda_i = w_i . x / sqrt(s) + b_i have mean b_i. Functions that do
        not handle biases yet refuse nonzero ones (never drop them).
    activation, teacher_activation : str, optional
        The activations of the networks the overlaps describe (set by
        :meth:`from_networks`; None for overlaps built by hand):
        :func:`twolayer.ode.integrate` uses them when it is given none.
    integration_tol : (float, float), optional
        The tolerances (rtol, atol) of the adaptive integration these
        overlaps come from (set by ``Trajectory.overlaps_at``): Omega may
        then leave the PSD cone by rtol max diag + atol, the engines' own
        divergence rule (a run that learns its teacher ends at a singular
        Omega). Default: the engines' fixed 1e-8 of max diag.

    Examples
    --------
    >>> ov = tl.Overlaps(Q=0.5 * np.eye(2), M=np.zeros((2, 1)), P=np.eye(1),
    ...                  a=[1.0, 1.0], v=[1.0])
    >>> ov.K, ov.n_teacher, ov.omega.shape
    (2, 1, (3, 3))
    """

    Q: NDArray[np.float64]
    M: NDArray[np.float64]
    P: NDArray[np.float64]
    a: NDArray[np.float64]
    v: NDArray[np.float64]
    bias: NDArray[np.float64]
    teacher_bias: NDArray[np.float64]
    activation: str | None
    teacher_activation: str | None
    integration_tol: tuple[float, float]

    def __init__(
        self,
        Q: ArrayLike,
        M: ArrayLike,
        P: ArrayLike,
        a: ArrayLike,
        v: ArrayLike,
        activation: str | None = None,
        teacher_activation: str | None = None,
        *,
        bias: ArrayLike | None = None,
        teacher_bias: ArrayLike | None = None,
        integration_tol: Sequence[float] = (0.0, 0.0),
    ) -> None:
        Q_ = as_float_array(Q, "Q", ndim=2)
        M_ = as_float_array(M, "M", ndim=2)
        P_ = as_float_array(P, "P", ndim=2)
        a_ = as_float_array(a, "a", ndim=1, scalar_ok=False)
        v_ = as_float_array(v, "v", ndim=1, scalar_ok=False)
        K, Mt = a_.shape[0], v_.shape[0]
        for name, arr, shape in (("Q", Q_, (K, K)), ("M", M_, (K, Mt)), ("P", P_, (Mt, Mt))):
            if arr.shape != shape:
                raise ValueError(
                    f"{name}: expected shape {shape} for K={K} student and M={Mt} teacher units, got {arr.shape}")
        tol = _integration_tol(integration_tol)
        check_stack(Q_[None], M_[None], P_[None], a_[None], v_[None], lambda b, name: name, tol)
        b_, bt_ = _bias(bias, K, "bias"), _bias(teacher_bias, Mt, "teacher_bias")
        for name, value in (("Q", Q_), ("M", M_), ("P", P_), ("a", a_), ("v", v_), ("bias", b_),
                            ("teacher_bias", bt_)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "activation", _optional_activation(activation, "activation"))
        object.__setattr__(self, "teacher_activation",
                           _optional_activation(teacher_activation, "teacher_activation"))
        object.__setattr__(self, "integration_tol", tol)

    @property
    def K(self) -> int:
        """Number of student units."""
        return int(self.a.shape[0])

    @property
    def n_teacher(self) -> int:
        """Number of teacher units M."""
        return int(self.v.shape[0])

    @property
    def omega(self) -> NDArray[np.float64]:
        """The full (K + M) x (K + M) covariance [[Q, M], [M^T, P]]."""
        return np.block([[self.Q, self.M], [self.M.T, self.P]])

    @property
    def has_bias(self) -> bool:
        """Whether any student or teacher bias is nonzero."""
        return bool(np.any(self.bias != 0.0) or np.any(self.teacher_bias != 0.0))

    @classmethod
    def from_networks(cls, student: Network, teacher: Any) -> Overlaps:
        """The overlaps of a student and a teacher network.

        Parameters
        ----------
        student : Network
        teacher : Network or target
            Same input dimension and scaling as the student. A target of
            :mod:`twolayer.targets` (k directions W*) gives M = W W*^T / s
            (K, k), P = I_k, v = 0 (the committee part is the student's
            alone), and the overlaps remember it (``overlaps.target``), which
            :func:`twolayer.ode.integrate` then uses.

        Returns
        -------
        Overlaps
            Remembering the two activations and the biases.

        Examples
        --------
        >>> s, t = tl.networks.teacher_student(2, 2, 50, "erf", seed=0)
        >>> tl.Overlaps.from_networks(s, t).activation
        'erf'
        """
        if is_target(teacher):
            check_network(student, "student", biases=True)
            if teacher.d != student.d or teacher.scaling != student.scaling:
                raise ValueError(f"teacher: the target's d = {teacher.d}, scaling {teacher.scaling!r} do not match "
                                 f"the student's d = {student.d}, scaling {student.scaling!r}")
            W = student.W
            ov = cls(gram(W, W, student.scale, "student.W"), gram(W, teacher.directions, student.scale,
                                                                   "student.W, teacher.directions"),
                     np.eye(teacher.k), student.effective_a, np.zeros(teacher.k), activation=student.activation,
                     bias=student.bias)
            object.__setattr__(ov, "target", teacher)
            return ov
        check_pair(student, teacher, biases=True)
        W, Wt = student.W, teacher.W
        return cls(gram(W, W, student.scale, "student.W"), gram(W, Wt, student.scale, "student.W, teacher.W"),
                   gram(Wt, Wt, student.scale, "teacher.W"), student.effective_a, teacher.effective_a,
                   activation=student.activation, teacher_activation=teacher.activation, bias=student.bias,
                   teacher_bias=teacher.bias)


def _bias(bias: ArrayLike | None, n: int, name: str) -> NDArray[np.float64]:
    if bias is None:
        return np.zeros(n)
    b = as_float_array(bias, name, ndim=1, scalar_ok=False)
    if b.shape != (n,):
        raise ValueError(f"{name}: expected shape ({n},), got {b.shape}")
    if not np.all(np.isfinite(b)):
        raise ValueError(f"{name}: entries must be finite (got NaN or inf)")
    return b


def refuse_bias(ov: Overlaps, name: str) -> None:
    """Refuse overlaps with nonzero biases (for functions that do not handle them).

    Parameters
    ----------
    ov : Overlaps
        The overlaps to check.
    name : str
        The argument name the error message names.

    Raises
    ------
    NotImplementedError
        ``ov`` has a nonzero ``bias`` or ``teacher_bias``.

    Examples
    --------
    >>> ov = tl.Overlaps(np.eye(1), np.zeros((1, 1)), np.eye(1), [1.0], [1.0], bias=[0.5])
    >>> tl.overlaps.refuse_bias(ov, "overlaps")
    Traceback (most recent call last):
        ...
    NotImplementedError: overlaps: this function does not handle biases yet (nonzero bias [0.5], ...
    """
    if ov.has_bias:
        raise NotImplementedError(f"{name}: this function does not handle biases yet (nonzero bias "
                                  f"{ov.bias.tolist()}, teacher_bias {ov.teacher_bias.tolist()}); see the "
                                  "documentation's activations page for the ones that do")


def _read_only(x: NDArray[np.float64]) -> NDArray[np.float64]:
    x.setflags(write=False)
    return x


@dataclass(frozen=True, eq=False)
class BatchOverlaps:
    """B systems of equal K and M stacked along a leading batch axis.

    Q (B, K, K), M (B, K, M), P (B, M, M), a (B, K), v (B, M). The arrays are
    copied and made read-only, and validated once on construction, all
    members together (:func:`check_stack`); an error names the first bad
    member, e.g. ``"Q[17]: expected a positive semi-definite matrix, ..."``.
    ``len()`` is B, indexing gives the member's :class:`Overlaps`, and
    :meth:`stack` builds one from a sequence of :class:`Overlaps` of equal
    shape.

    Parameters
    ----------
    Q, M, a : array_like
        Per member, shapes (B, K, K), (B, K, M), (B, K).
    P, v : array_like
        Per member, (B, M, M) and (B, M), or one teacher shared by every
        member, (M, M) and (M,) (then stored as a broadcast view, no copy).
    activation, teacher_activation : str, optional
        The activations of the networks the overlaps describe (None: not
        known; the ODE then needs them).
    bias, teacher_bias : array_like, optional
        The units' biases per member, (B, K) and (B, M) (default: zeros),
        as :class:`Overlaps`' ``bias`` and ``teacher_bias``; a teacher's
        may be one (M,) shared by every member (a broadcast view).
    integration_tol : (float, float), optional
        As :class:`Overlaps`' (set by ``BatchTrajectory.overlaps_at``), for
        every member.

    Examples
    --------
    Three members sharing one teacher:

    >>> B, K = 3, 2
    >>> batch = tl.BatchOverlaps(Q=np.tile(0.5 * np.eye(K), (B, 1, 1)),
    ...                          M=np.zeros((B, K, 1)), P=np.eye(1),
    ...                          a=np.ones((B, K)), v=np.ones(1))
    >>> batch
    BatchOverlaps(B=3, K=2, M=1, activation=None)
    >>> batch.shared_teacher, batch[0].Q.shape
    (True, (2, 2))
    """

    Q: NDArray[np.float64]
    M: NDArray[np.float64]
    P: NDArray[np.float64]
    a: NDArray[np.float64]
    v: NDArray[np.float64]
    activation: str | None
    teacher_activation: str | None
    bias: NDArray[np.float64]
    teacher_bias: NDArray[np.float64]
    integration_tol: tuple[float, float]

    def __init__(
        self,
        Q: ArrayLike,
        M: ArrayLike,
        P: ArrayLike,
        a: ArrayLike,
        v: ArrayLike,
        activation: str | None = None,
        teacher_activation: str | None = None,
        *,
        bias: ArrayLike | None = None,
        teacher_bias: ArrayLike | None = None,
        integration_tol: Sequence[float] = (0.0, 0.0),
        _label: Callable[[int, str], str] | None = None,
    ) -> None:
        _check_stack_memory(Q, M, a)
        a_ = as_float_array(a, "a", ndim=2, finite=False).copy()
        B, K = a_.shape
        Q_ = as_float_array(Q, "Q", ndim=3, finite=False).copy()
        M_ = as_float_array(M, "M", ndim=3, finite=False).copy()
        Mt = M_.shape[2]
        P_ = as_float_array(P, "P", finite=False).copy()
        v_ = as_float_array(v, "v", finite=False).copy()
        for name, arr, shapes in (
            ("Q", Q_, [(B, K, K)]),
            ("M", M_, [(B, K, Mt)]),
            ("P", P_, [(B, Mt, Mt), (Mt, Mt)]),
            ("v", v_, [(B, Mt), (Mt,)]),
        ):
            if arr.shape not in shapes:
                raise ValueError(f"{name}: expected shape {' or '.join(map(str, shapes))} for B={B} members of "
                                 f"K={K} student and M={Mt} teacher units (from a and M), got {arr.shape}")
        if P_.ndim == 2:
            P_ = np.broadcast_to(P_, (B, Mt, Mt))
        if v_.ndim == 1:
            v_ = np.broadcast_to(v_, (B, Mt))
        label = _label or (lambda b, name: f"{name}[{b}]")
        tol = _integration_tol(integration_tol)
        check_stack(Q_, M_, P_, a_, v_, label, tol)
        b_ = _stack_bias(bias, (B, K), None, "bias", label)
        bt_ = _stack_bias(teacher_bias, (B, Mt), (Mt,), "teacher_bias", label)
        for name, value in (("Q", Q_), ("M", M_), ("P", P_), ("a", a_), ("v", v_), ("bias", b_),
                            ("teacher_bias", bt_)):
            object.__setattr__(self, name, _read_only(value) if value.flags.owndata else value)
        object.__setattr__(self, "activation", _optional_activation(activation, "activation"))
        object.__setattr__(self, "teacher_activation",
                           _optional_activation(teacher_activation, "teacher_activation"))
        object.__setattr__(self, "integration_tol", tol)

    @classmethod
    def stack(cls, members: Sequence[Overlaps], name: str = "overlaps") -> BatchOverlaps:
        """Stack :class:`Overlaps` of equal K and M.

        Parameters
        ----------
        members : sequence of Overlaps
            At least one, all of the same K and M.
        name : str, default "overlaps"
            Errors name the bad member ``name[b]``.

        Returns
        -------
        BatchOverlaps
            Keeping the activations when every member remembers the same
            ones (None otherwise).

        Examples
        --------
        >>> ov = tl.ode.plateau_overlaps()
        >>> len(tl.BatchOverlaps.stack([ov, ov]))
        2
        """
        ovs = list(members)
        if not ovs:
            raise ValueError(f"{name}: expected at least one Overlaps")
        for b, ov in enumerate(ovs):
            if not isinstance(ov, Overlaps):
                raise TypeError(f"{name}[{b}]: expected a twolayer.Overlaps, got {type(ov).__name__}")
            if (ov.K, ov.n_teacher) != (ovs[0].K, ovs[0].n_teacher):
                raise ValueError(f"{name}[{b}]: expected K={ovs[0].K}, M={ovs[0].n_teacher} like {name}[0], got "
                                 f"K={ov.K}, M={ov.n_teacher}")
        acts = {(ov.activation, ov.teacher_activation) for ov in ovs}
        act, t_act = acts.pop() if len(acts) == 1 else (None, None)
        return cls(np.stack([ov.Q for ov in ovs]), np.stack([ov.M for ov in ovs]), np.stack([ov.P for ov in ovs]),
                   np.stack([ov.a for ov in ovs]), np.stack([ov.v for ov in ovs]), act, t_act,
                   bias=np.stack([ov.bias for ov in ovs]), teacher_bias=np.stack([ov.teacher_bias for ov in ovs]),
                   integration_tol=tuple(np.max([ov.integration_tol for ov in ovs], axis=0)),
                   _label=lambda b, field: f"{name}[{b}]: {field}")

    def __len__(self) -> int:
        return int(self.a.shape[0])

    @property
    def K(self) -> int:
        """Number of student units of every member."""
        return int(self.a.shape[1])

    @property
    def n_teacher(self) -> int:
        """Number of teacher units M of every member."""
        return int(self.v.shape[1])

    @property
    def shared_teacher(self) -> bool:
        """Whether P and v are one teacher broadcast over the members (no per-member copy)."""
        return self.P.strides[0] == 0 and self.v.strides[0] == 0

    @property
    def has_bias(self) -> NDArray[np.bool_]:
        """Per member: whether any of its student or teacher biases is nonzero (B,)."""
        return np.any(self.bias != 0.0, axis=1) | np.any(self.teacher_bias != 0.0, axis=1)

    def __getitem__(self, b: int) -> Overlaps:
        return Overlaps(self.Q[b], self.M[b], self.P[b], self.a[b], self.v[b], self.activation,
                        self.teacher_activation, bias=self.bias[b], teacher_bias=self.teacher_bias[b],
                        integration_tol=self.integration_tol)

    def __iter__(self) -> Iterator[Overlaps]:
        return (self[b] for b in range(len(self)))

    def __repr__(self) -> str:
        return f"BatchOverlaps(B={len(self)}, K={self.K}, M={self.n_teacher}, activation={self.activation!r})"


def _stack_bias(bias: ArrayLike | None, shape: tuple[int, int], shared: tuple[int] | None, name: str,
                label: Callable[[int, str], str]) -> NDArray[np.float64]:
    """A stack's biases ``bias`` of shape ``shape`` (or ``shared``, broadcast), zeros for None: finite, read-only; an
    error names the first bad member by ``label``."""
    if bias is None:
        return np.broadcast_to(np.zeros(1), shape)
    b = as_float_array(bias, name, finite=False).copy()
    if b.shape != shape and (shared is None or b.shape != shared):
        allowed = " or ".join(map(str, (shape,) if shared is None else (shape, shared)))
        raise ValueError(f"{name}: expected shape {allowed}, got {b.shape}")
    full = np.broadcast_to(_read_only(b), shape)
    bad = np.flatnonzero(~np.all(np.isfinite(full), axis=1))
    if bad.size:
        raise ValueError(f"{label(int(bad[0]), name)}: entries must be finite (got NaN or inf)")
    return full if b.shape != shape else b


def _check_stack_memory(Q: ArrayLike, M: ArrayLike, a: ArrayLike) -> None:
    """MemoryError before anything is copied when B members (from the shapes alone) cannot fit: the copies of Q,
    M, a, P, v and the stacked Omega and its factor of :func:`check_stack` (a wrong shape is left to the checks
    that follow)."""
    try:
        (B, K), Mt = np.shape(a), np.shape(M)[2]
        np.shape(Q)
    except (ValueError, IndexError, TypeError):
        return
    u = K + Mt
    check_memory(8 * B * (K * K + K * Mt + K + Mt * Mt + Mt + 2 * u * u), "Q, M, a",
                 f"a batch of B = {B} members of K = {K}, M = {Mt} units")


def gram(A: NDArray[np.float64], B: NDArray[np.float64], scale: float, name: str) -> NDArray[np.float64]:
    """The overlaps A B^T / scale of two sets of weight rows; ValueError naming ``name`` where they exceed the
    double range."""
    with np.errstate(over="ignore", invalid="ignore"):
        G = A @ B.T / scale
    if not np.all(np.isfinite(G)):
        raise ValueError(f"{name}: weights out of range (their overlaps W W^T / s exceed the double range)")
    return G


def check_pair(student: Network, teacher: Network, biases: bool = False) -> None:
    """Check a (student, teacher) pair.

    Parameters
    ----------
    student, teacher : Network
        Must have finite weights, the same input dimension and scaling.
    biases : bool, default False
        Whether the caller handles biases (see :func:`check_network`).

    Raises
    ------
    TypeError, ValueError
        Naming ``student`` or ``teacher``.

    Examples
    --------
    >>> s, t = tl.Network(np.ones((2, 3))), tl.Network(np.ones((1, 4)))
    >>> tl.overlaps.check_pair(s, t)
    Traceback (most recent call last):
        ...
    ValueError: teacher: input dimension d=4 does not match the student's d=3
    """
    check_network(student, "student", biases)
    if is_target(teacher):
        raise TypeError(f"teacher: expected a committee twolayer.Network here, got a {type(teacher).__name__} "
                        "(polynomial targets are taken by population.risk/gradient/hessian, sgd.simulate, "
                        "Overlaps.from_networks and the ODE; the landscape tools need a committee teacher)")
    check_network(teacher, "teacher", biases)
    if student.d != teacher.d:
        raise ValueError(f"teacher: input dimension d={teacher.d} does not match the student's d={student.d}")
    if student.scaling != teacher.scaling:
        raise ValueError(f"teacher: scaling {teacher.scaling!r} does not match the student's {student.scaling!r}")
