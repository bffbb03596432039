"""Order parameters: the covariance of the pre-activations and the second layers.

Omega = [[Q, M], [M^T, P]] is the covariance of (lambda, lambda*) with Q = W W^T / s, M = W W*^T / s,
P = W* W*^T / s; ``a`` and ``v`` are the effective (readout-scaled) second layers of student and teacher.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import as_float_array
from .networks import Network, check_network


@dataclass(frozen=True, eq=False)
class Overlaps:
    """Q (K, K), M (K, M), P (M, M), a (K,), v (M,)."""

    Q: NDArray[np.float64]
    M: NDArray[np.float64]
    P: NDArray[np.float64]
    a: NDArray[np.float64]
    v: NDArray[np.float64]

    def __init__(self, Q: ArrayLike, M: ArrayLike, P: ArrayLike, a: ArrayLike, v: ArrayLike) -> None:
        Q_ = as_float_array(Q, "Q", ndim=2)
        M_ = as_float_array(M, "M", ndim=2)
        P_ = as_float_array(P, "P", ndim=2)
        a_ = as_float_array(a, "a", ndim=1)
        v_ = as_float_array(v, "v", ndim=1)
        K, Mt = a_.shape[0], v_.shape[0]
        for name, arr, shape in (("Q", Q_, (K, K)), ("M", M_, (K, Mt)), ("P", P_, (Mt, Mt))):
            if arr.shape != shape:
                raise ValueError(
                    f"{name}: expected shape {shape} for K={K} student and M={Mt} teacher units, got {arr.shape}")
        omega = np.block([[Q_, M_], [M_.T, P_]])
        scale = max(float(np.max(np.abs(np.diag(omega)))), 1e-300)
        if not np.allclose(omega, omega.T, rtol=0, atol=1e-9 * scale):
            raise ValueError("Q, P: overlap matrices must be symmetric")
        if np.linalg.eigvalsh(omega)[0] < -1e-9 * scale:
            raise ValueError("Q, M, P: the overlap matrix [[Q, M], [M^T, P]] must be positive semi-definite")
        for name, value in (("Q", Q_), ("M", M_), ("P", P_), ("a", a_), ("v", v_)):
            object.__setattr__(self, name, value)

    @property
    def K(self) -> int:
        return int(self.a.shape[0])

    @property
    def n_teacher(self) -> int:
        return int(self.v.shape[0])

    @property
    def omega(self) -> NDArray[np.float64]:
        """The full (K + M) x (K + M) covariance [[Q, M], [M^T, P]]."""
        return np.block([[self.Q, self.M], [self.M.T, self.P]])

    @classmethod
    def from_networks(cls, student: Network, teacher: Network) -> Overlaps:
        """Overlaps of a student and a teacher with the same input dimension and scaling."""
        check_pair(student, teacher)
        s = student.scale
        W, Wt = student.W, teacher.W
        return cls(W @ W.T / s, W @ Wt.T / s, Wt @ Wt.T / s, student.effective_a, teacher.effective_a)


def check_pair(student: Network, teacher: Network) -> None:
    """Raise unless student and teacher are Networks with finite weights, the same input dimension and scaling."""
    check_network(student, "student")
    check_network(teacher, "teacher")
    if student.d != teacher.d:
        raise ValueError(f"teacher: input dimension d={teacher.d} does not match the student's d={student.d}")
    if student.scaling != teacher.scaling:
        raise ValueError(f"teacher: scaling {teacher.scaling!r} does not match the student's {student.scaling!r}")
