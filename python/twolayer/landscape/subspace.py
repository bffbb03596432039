"""Critical points inside fixed-point subspaces and their continuation in k (seed 001, Safran-Shamir setting).

Because the risk is invariant under the diagonal permutation action, its gradient at a point fixed by a group
G is fixed by G too: it lies in the fixed-point subspace. So a point of the subspace is critical in the full
space iff the gradient restricted to the subspace (B^T grad R, B the subspace basis) vanishes, a system with a
handful of unknowns whatever k is. The Hessian restricted to the subspace is B^T H B.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import population
from .._validation import INT32_MAX, as_float_array, boolean, integer, positive
from ..activations import ActivationName, check_activation
from ..networks import Network, check_network
from .critical import CriticalPoint, _group, euclidean_norm, flat_gradient
from .symmetry import FixedPointSpace, isotropy

__all__ = ["identity_teacher", "SubspaceProblem", "FamilyPoint", "continue_family"]


def identity_teacher(k: int, activation: ActivationName = "relu") -> Network:
    """The Safran-Shamir teacher: W* = I_k, unit second layer, lambda = w.x (scaling "none")."""
    return Network(np.eye(integer(k, "k", 1, INT32_MAX)), None, activation, scaling="none")


class SubspaceProblem:
    """The population risk restricted to a :class:`FixedPointSpace` (teacher W* = I by default)."""

    def __init__(
        self, space: FixedPointSpace, teacher: Network | None = None, activation: ActivationName = "relu"
    ) -> None:
        if not isinstance(space, FixedPointSpace):
            raise TypeError(f"space: expected a FixedPointSpace, got {type(space).__name__}")
        self.space = space
        check_activation(activation)
        self.activation = activation
        self.teacher = identity_teacher(space.k, activation) if teacher is None else check_network(teacher, "teacher")
        if self.teacher.d != space.k:
            raise ValueError(f"teacher: expected input dimension {space.k}, got {self.teacher.d}")

    def network(self, x: ArrayLike) -> Network:
        W, a = self.space.matrix(x)
        return Network(W, a, self.activation, scaling=self.teacher.scaling)

    def risk(self, x: ArrayLike) -> float:
        return population.risk(self.network(x), self.teacher)

    def gradient(self, x: ArrayLike) -> NDArray[np.float64]:
        """B^T grad R: the gradient of x -> R(W(x), a(x))."""
        return self.space.basis.T @ flat_gradient(self.network(x), self.teacher, self.space.train_readout)

    def hessian(self, x: ArrayLike) -> NDArray[np.float64]:
        """B^T H B: the Hessian of x -> R(W(x), a(x))."""
        H = population.hessian(self.network(x), self.teacher, train_readout=self.space.train_readout)
        return self.space.basis.T @ H @ self.space.basis

    def solve(
        self, x0: ArrayLike, tol: float = 1e-12, max_iter: int = 100
    ) -> tuple[NDArray[np.float64], float, bool]:
        """Newton/Levenberg-Marquardt on the restricted gradient from ``x0``: (x, |grad|, converged).

        |grad| is the norm of the full gradient, which lies in the subspace (so tol means the same as in
        :func:`twolayer.landscape.refine`)."""
        tol_ = positive(tol, "tol")
        max_iter = integer(max_iter, "max_iter", 0)
        x = as_float_array(x0, "x0", ndim=1).copy()
        if x.shape[0] != self.space.dim:
            raise ValueError(f"x0: expected {self.space.dim} coordinates, got {x.shape[0]}")
        G = self.space.basis.T @ self.space.basis  # metric: |B y|^2 = y^T G y
        Ginv = np.linalg.inv(G)

        def full_norm(y: NDArray[np.float64]) -> float:
            g = self.gradient(y)
            return float(np.sqrt(g @ Ginv @ g))  # the full gradient is B G^-1 B^T grad

        g = self.gradient(x)
        gn = full_norm(x)
        mu = 1e-6
        for _ in range(max_iter):
            if gn <= tol_:
                break
            Hr = self.hessian(x)
            scale = max(1.0, float(np.max(np.abs(Hr))))
            accepted = False
            for _ in range(30):
                try:
                    step = -np.linalg.solve(Hr.T @ Hr + mu * scale * scale * G, Hr.T @ g)
                    gn_new = full_norm(x + step)
                except (ValueError, np.linalg.LinAlgError):
                    mu *= 10.0
                    continue
                if np.isfinite(gn_new) and gn_new < gn:
                    accepted = True
                    break
                mu *= 10.0
            if not accepted:
                break
            x = x + step
            g = self.gradient(x)
            gn = gn_new
            mu = max(mu * 1e-3, 1e-30)
        return x, gn, gn <= tol_

    def critical_point(self, x: ArrayLike, global_tol: float = 1e-10) -> CriticalPoint:
        """Classify the point x of the subspace by the full Hessian spectrum."""
        global_tol = positive(global_tol, "global_tol", allow_zero=True)
        net = self.network(x)
        tr = self.space.train_readout
        lam = np.asarray(np.linalg.eigvalsh(population.hessian(net, self.teacher, train_readout=tr)), dtype=np.float64)
        gn = euclidean_norm(flat_gradient(net, self.teacher, tr))
        return CriticalPoint.classified(net, self.teacher, lam, gn, tr, global_tol=global_tol)


@dataclass(eq=False)
class FamilyPoint:
    """One member of a continued family: k, subspace coordinates, the critical point and its spectrum."""

    k: int
    x: NDArray[np.float64]
    point: CriticalPoint
    spectrum: list[tuple[float, int]]
    isotropy: str

    @property
    def loss(self) -> float:
        return self.point.loss


def continue_family(
    sizes: Callable[[int], tuple[int, ...]],
    ks: Iterable[int],
    x0: ArrayLike,
    train_readout: bool = False,
    activation: ActivationName = "relu",
    tol: float = 1e-12,
    spectrum_tol: float = 1e-6,
) -> list[FamilyPoint]:
    """Continue a family of critical points in k: at each k in ``ks`` (increasing) solve the restricted system
    in ``FixedPointSpace(sizes(k))`` starting from the previous solution (``x0`` at the first k; coordinates
    keep their meaning across k when the block structure does, e.g. sizes(k) = (k - 1, 1)). Stops at the first
    k where Newton fails to converge. Each point carries the full Hessian spectrum and its isotropy."""
    if not callable(sizes):
        raise TypeError(f"sizes: expected a function k -> block sizes, got {type(sizes).__name__}")
    train_readout = boolean(train_readout, "train_readout")
    positive(tol, "tol")
    positive(spectrum_tol, "spectrum_tol")
    check_activation(activation)
    out: list[FamilyPoint] = []
    x = as_float_array(x0, "x0", ndim=1)
    if not isinstance(ks, Iterable):
        raise TypeError(f"ks: expected an iterable of integers, got {type(ks).__name__}")
    for i, k_ in enumerate(ks):
        k = integer(k_, f"ks[{i}]", 1, INT32_MAX)
        prob = SubspaceProblem(FixedPointSpace(sizes(k), train_readout), activation=activation)
        x, gn, ok = prob.solve(x, tol=tol)
        if not ok:
            break
        cp = prob.critical_point(x)
        iso = isotropy(cp.student.W, tol=1e-8, a=cp.student.a if train_readout else None)
        out.append(FamilyPoint(int(k), x.copy(), cp, _group(cp.eigenvalues, spectrum_tol), iso.description))
    return out
