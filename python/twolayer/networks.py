"""Two-layer networks f(x) = c * sum_i a_i sigma(w_i . x / sqrt(s)).

``scaling="sqrt_d"``: s = d (Saad-Solla/Goldt; overlaps Q = W W^T / d). ``scaling="none"``: s = 1 (lambda = w.x as in
Safran-Shamir; Q = W W^T). ``readout="sum"`` gives c = 1, ``readout="mean"`` gives c = 1/K (seeds 002-003).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import INT32_MAX, as_float_array, choice, integer, seed_arg
from .activations import ActivationName, check_activation

Scaling = Literal["sqrt_d", "none"]
Readout = Literal["sum", "mean"]
Init = Literal["gaussian", "orthogonal"]


@dataclass(frozen=True, eq=False)
class Network:
    """First-layer weights ``W`` (K, d), second layer ``a`` (K,), activation, pre-activation scaling, readout."""

    W: NDArray[np.float64]
    a: NDArray[np.float64]
    activation: ActivationName
    scaling: Scaling = "sqrt_d"
    readout: Readout = "sum"

    def __init__(
        self,
        W: ArrayLike,
        a: ArrayLike | None = None,
        activation: ActivationName = "erf",
        scaling: Scaling = "sqrt_d",
        readout: Readout = "sum",
    ) -> None:
        W_ = as_float_array(W, "W", ndim=2)
        if W_.shape[0] < 1 or W_.shape[1] < 1:
            raise ValueError(f"W: expected shape (K, d) with K, d >= 1, got {W_.shape}")
        a_ = np.ones(W_.shape[0]) if a is None else as_float_array(a, "a", ndim=1)
        if a_.shape != (W_.shape[0],):
            raise ValueError(f"a: expected shape ({W_.shape[0]},) to match W's {W_.shape[0]} rows, got {a_.shape}")
        object.__setattr__(self, "W", W_)
        object.__setattr__(self, "a", a_)
        object.__setattr__(self, "activation", check_activation(activation))
        object.__setattr__(self, "scaling", choice(scaling, "scaling", ("sqrt_d", "none")))
        object.__setattr__(self, "readout", choice(readout, "readout", ("sum", "mean")))

    @property
    def K(self) -> int:
        """Number of hidden units."""
        return int(self.W.shape[0])

    @property
    def d(self) -> int:
        """Input dimension."""
        return int(self.W.shape[1])

    @property
    def scale(self) -> float:
        """s in lambda = w . x / sqrt(s): d for ``sqrt_d``, 1 for ``none``."""
        return float(self.d) if self.scaling == "sqrt_d" else 1.0

    @property
    def readout_factor(self) -> float:
        """c in f = c * sum_i a_i sigma(lambda_i)."""
        return 1.0 if self.readout == "sum" else 1.0 / self.K

    @property
    def effective_a(self) -> NDArray[np.float64]:
        """c * a: the second layer the kernels see."""
        return self.a * self.readout_factor

    def with_weights(self, W: ArrayLike, a: ArrayLike | None = None) -> Network:
        """The same architecture with new weights."""
        return Network(W, self.a if a is None else a, self.activation, self.scaling, self.readout)

    def __call__(self, X: ArrayLike) -> NDArray[np.float64]:
        """Outputs on inputs X (n, d)."""
        from .activations import sigma

        X_ = as_float_array(X, "X", ndim=2)
        if X_.shape[1] != self.d:
            raise ValueError(f"X: expected {self.d} columns, got {X_.shape[1]}")
        with np.errstate(over="ignore", invalid="ignore"):
            pre = X_ @ self.W.T / np.sqrt(self.scale)
            out = sigma(self.activation, pre) @ self.effective_a if np.all(np.isfinite(pre)) else pre[:, 0]
        if not np.all(np.isfinite(out)):
            raise ValueError("X: the outputs on these inputs exceed the double range (pre-activations or outputs "
                             "overflow)")
        return np.asarray(out, dtype=np.float64)

    @classmethod
    def random(
        cls,
        K: int,
        d: int,
        activation: ActivationName = "erf",
        init: Init = "gaussian",
        seed: int | None = None,
        a: ArrayLike | None = None,
        scaling: Scaling = "sqrt_d",
        readout: Readout = "sum",
    ) -> Network:
        """A random network: ``gaussian`` draws W_ij ~ N(0, 1); ``orthogonal`` draws orthonormal rows scaled to
        norm sqrt(s), so that Q = I exactly (needs K <= d). ``a`` defaults to ones. ``K``, ``d``: integers in
        [1, 2**31-1]; ``seed``: None or an integer in [0, 2**64-1]."""
        W = random_weights(K, d, init, np.random.default_rng(seed_arg(seed, allow_none=True)), scaling)
        return cls(W, a, activation, scaling, readout)


def check_network(net: object, name: str) -> Network:
    """``net`` if it is a :class:`Network` with finite weights (its arrays can be edited in place after
    construction, so engines re-check them): TypeError / ValueError naming ``name`` otherwise."""
    if not isinstance(net, Network):
        raise TypeError(f"{name}: expected a twolayer.Network, got {type(net).__name__}")
    for field, arr in (("W", net.W), ("a", net.a)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}.{field}: entries must be finite (got NaN or inf)")
    return net


def random_weights(K: int, d: int, init: str, rng: np.random.Generator, scaling: str = "sqrt_d") -> NDArray[np.float64]:
    """K random weight rows in R^d (see :meth:`Network.random`)."""
    K, d = integer(K, "K", 1, INT32_MAX), integer(d, "d", 1, INT32_MAX)
    choice(init, "init", ("gaussian", "orthogonal"))
    choice(scaling, "scaling", ("sqrt_d", "none"))
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if init == "gaussian":
        return rng.standard_normal((K, d))
    if K > d:
        raise ValueError(f"init: 'orthogonal' needs K <= d, got K={K}, d={d}")
    q, r = np.linalg.qr(rng.standard_normal((d, K)))
    rows = (q * np.sign(np.diag(r))).T  # Haar-distributed orthonormal rows
    return rows * (np.sqrt(d) if scaling == "sqrt_d" else 1.0)


def teacher_student(
    K: int,
    M: int,
    d: int,
    activation: ActivationName = "erf",
    teacher_activation: ActivationName | None = None,
    init: Init = "gaussian",
    seed: int | None = None,
    scaling: Scaling = "sqrt_d",
    readout: Readout = "sum",
) -> tuple[Network, Network]:
    """A (student, teacher) pair. With ``init="orthogonal"`` the K + M rows of student and teacher together are
    orthonormal (seed 000's "orthogonal dynamics", needs K + M <= d); otherwise all entries are N(0, 1).
    ``K``, ``M``, ``d``: integers in [1, 2**31-1]; ``seed``: None or an integer in [0, 2**64-1]."""
    K, M = integer(K, "K", 1, INT32_MAX), integer(M, "M", 1, INT32_MAX)
    rng = np.random.default_rng(seed_arg(seed, allow_none=True))
    W = random_weights(K + M, d, init, rng, scaling)
    student = Network(W[:K], None, activation, scaling, readout)
    teacher = Network(W[K:], None, teacher_activation or activation, scaling, readout)
    return student, teacher
