"""Critical points inside fixed-point subspaces and their continuation in k (Arjevani & Field 2021).

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
from .._deprecation import renamed_attribute
from .._validation import INT32_MAX, as_float_array, boolean, integer, positive
from ..activations import ActivationName, check_activation
from ..networks import Network, check_network
from .critical import CriticalPoint, euclidean_norm, flat_gradient, group_eigenvalues
from .symmetry import FixedPointSpace, isotropy

__all__ = ["identity_teacher", "SubspaceProblem", "FamilyPoint", "continue_family"]


def identity_teacher(k: int, activation: ActivationName = "relu") -> Network:
    """The Safran-Shamir teacher: W* = I_k, unit second layer, lambda = w . x.

    Parameters
    ----------
    k : int
        Units (and input dimension).
    activation : str, default "relu"
        The activation.

    Returns
    -------
    Network
        With ``scaling="none"``.

    Examples
    --------
    >>> teacher = tl.landscape.identity_teacher(3)
    >>> teacher.W.shape, teacher.scaling
    ((3, 3), 'none')
    """
    return Network(np.eye(integer(k, "k", 1, INT32_MAX)), None, activation, scaling="none")


class SubspaceProblem:
    """The population risk restricted to a :class:`FixedPointSpace`.

    Because the risk is invariant under the group, its gradient at a fixed
    point lies in the fixed-point space: a point is critical in the full
    space iff the restricted gradient vanishes.

    Parameters
    ----------
    space : FixedPointSpace
        The subspace.
    teacher : Network, optional
        Default: :func:`identity_teacher` of size ``space.k``. It may have
        biases, all equal (so that the space stays invariant); the
        student's biases are zero.
    activation : str, default "relu"
        The student's activation.

    Examples
    --------
    The ΔS_5 spurious minimum at k = 6:

    >>> prob = tl.landscape.SubspaceProblem(tl.landscape.FixedPointSpace((5, 1)))
    >>> x, grad_norm, ok = prob.solve([1.0, -0.05, -0.6, 0.3, 0.2])
    >>> ok, np.round(x, 4)
    (True, array([ 0.9867, -0.0504, -0.6015,  0.308 ,  0.2245]))
    >>> prob.critical_point(x).kind
    'spurious minimum'
    """

    def __init__(
        self, space: FixedPointSpace, teacher: Network | None = None, activation: ActivationName = "relu"
    ) -> None:
        if not isinstance(space, FixedPointSpace):
            raise TypeError(f"space: expected a FixedPointSpace, got {type(space).__name__}")
        self.space = space
        check_activation(activation)
        self.activation = activation
        self.teacher = identity_teacher(space.k, activation) if teacher is None else check_network(teacher, "teacher",
                                                                                                   biases=True)
        if self.teacher.d != space.k:
            raise ValueError(f"teacher: expected input dimension {space.k}, got {self.teacher.d}")
        if np.ptp(self.teacher.bias) != 0.0:  # P b* = b* for every permutation: the space stays invariant
            raise ValueError(f"teacher.bias: expected equal biases (a teacher with unequal biases breaks the "
                             f"permutation symmetry the fixed-point space rests on), got {self.teacher.bias.tolist()}")

    def network(self, x: ArrayLike) -> Network:
        """The student at coordinates ``x``."""
        W, a = self.space.matrix(x)
        return Network(W, a, self.activation, scaling=self.teacher.scaling)

    def risk(self, x: ArrayLike) -> float:
        """The excess population risk at coordinates ``x``."""
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
        """Newton/Levenberg-Marquardt on the restricted gradient from ``x0``.

        Parameters
        ----------
        x0 : array_like, shape (dim,)
            Starting coordinates.
        tol : float, default 1e-12
            Target norm of the full gradient, which lies in the subspace (so
            ``tol`` means the same as in :func:`twolayer.landscape.refine`).
        max_iter : int, default 100
            Iterations at most.

        Returns
        -------
        x : ndarray
            The coordinates reached.
        grad_norm : float
            The norm of the full gradient there.
        converged : bool
            Whether ``grad_norm <= tol``.
        """
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
        """Classify the point x of the subspace by the full Hessian spectrum.

        Parameters
        ----------
        x : array_like
            Coordinates.
        global_tol : float, default 1e-10
            Loss at or below which a point is a global minimum.

        Returns
        -------
        CriticalPoint
        """
        global_tol = positive(global_tol, "global_tol", allow_zero=True)
        net = self.network(x)
        tr = self.space.train_readout
        lam = np.asarray(np.linalg.eigvalsh(population.hessian(net, self.teacher, train_readout=tr)), dtype=np.float64)
        gn = euclidean_norm(flat_gradient(net, self.teacher, tr))
        return CriticalPoint.classified(net, self.teacher, lam, gn, tr, global_tol=global_tol)


@dataclass(eq=False)
class FamilyPoint:
    """One member of a family continued by :func:`continue_family`.

    Attributes
    ----------
    k : int
        The size.
    x : ndarray
        Subspace coordinates.
    point : CriticalPoint
        The classified critical point.
    spectrum : list of (float, int)
        Its Hessian spectrum with multiplicities.
    isotropy : str
        Its isotropy group.

    Examples
    --------
    >>> x6 = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]
    >>> p, = tl.landscape.continue_family(lambda k: (k - 1, 1), [6], x6)
    >>> p.k, p.isotropy, round(p.risk, 6)
    (6, 'ΔS_5', 0.025081)
    """

    k: int
    x: NDArray[np.float64]
    point: CriticalPoint
    spectrum: list[tuple[float, int]]
    isotropy: str

    @property
    def risk(self) -> float:
        """The point's excess population risk."""
        return self.point.risk

    loss = renamed_attribute("risk")


def continue_family(
    sizes: Callable[[int], tuple[int, ...]],
    ks: Iterable[int],
    x0: ArrayLike,
    train_readout: bool = False,
    activation: ActivationName = "relu",
    tol: float = 1e-12,
    spectrum_tol: float = 1e-6,
) -> list[FamilyPoint]:
    """Continue a family of critical points in k.

    At each k in ``ks`` solve the restricted system in
    ``FixedPointSpace(sizes(k))`` starting from the previous solution.
    Stops at the first k where Newton fails to converge.

    Parameters
    ----------
    sizes : callable
        k -> block sizes, e.g. ``lambda k: (k - 1, 1)`` (coordinates keep
        their meaning across k when the block structure does).
    ks : iterable of int
        The values of k, in order.
    x0 : array_like
        Coordinates of the critical point at the first k.
    train_readout : bool, default False
        Include the second layer.
    activation : str, default "relu"
        The activation.
    tol : float, default 1e-12
        Target gradient norm.
    spectrum_tol : float, default 1e-6
        Relative gap of the grouped spectrum.

    Returns
    -------
    list of FamilyPoint
        Each with the full Hessian spectrum and its isotropy.

    Examples
    --------
    >>> x6 = [0.986704, -0.050413, -0.601512, 0.308011, 0.224516]
    >>> for p in tl.landscape.continue_family(lambda k: (k - 1, 1), [6, 7], x6):
    ...     print(p.k, f"{p.risk:.6f}", p.point.kind, p.isotropy)
    6 0.025081 spurious minimum ΔS_5
    7 0.023203 spurious minimum ΔS_6
    """
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
        if cp.flat_eigenvalues.size:  # the point was moved to the canonical point of its rescaling orbit
            x = prob.space.coordinates(cp.student.W, cp.student.a)
        iso = isotropy(cp.student.W, tol=1e-8, a=cp.student.a if train_readout else None)
        out.append(FamilyPoint(int(k), x.copy(), cp, group_eigenvalues(cp.eigenvalues, spectrum_tol), iso.description))
    return out
