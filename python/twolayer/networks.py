"""Two-layer networks f(x) = c * sum_i a_i sigma(w_i . x / sqrt(s) + b_i).

``scaling="sqrt_d"``: s = d (Saad-Solla/Goldt; overlaps Q = W W^T / d). ``scaling="none"``: s = 1 (lambda = w.x as in
Safran-Shamir; Q = W W^T). ``readout="sum"`` gives c = 1, ``readout="mean"`` gives c = 1/K (as in the
first-order-methods and escaping-mediocrity papers). See the documentation's Conventions page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._validation import INT32_MAX, allocating, as_float_array, choice, integer, seed_arg
from .activations import ActivationName, check_activation, sigma

Scaling = Literal["sqrt_d", "none"]
Readout = Literal["sum", "mean"]
Init = Literal["gaussian", "orthogonal"]


@dataclass(frozen=True, eq=False)
class Network:
    """A two-layer network f(x) = c sum_i a_i sigma(w_i . x / sqrt(s) + b_i).

    Frozen (immutable attributes) and validated on construction.

    Parameters
    ----------
    W : array_like, shape (K, d)
        First-layer weights, one row w_i per hidden unit.
    a : array_like, shape (K,), optional
        Second layer (default: ones).
    activation : str, default "erf"
        sigma: any activation of :mod:`twolayer.activations` (``"erf"``,
        ``"relu"``, ``"tanh"``, ..., a hermite or custom one).
    scaling : {"sqrt_d", "none"}
        Pre-activations lambda = w . x / sqrt(d) (``"sqrt_d"``) or w . x
        (``"none"``).
    readout : {"sum", "mean"}
        Readout factor c = 1 (``"sum"``) or 1/K (``"mean"``).
    bias : array_like, shape (K,), optional
        Per-unit biases b_i inside the activation (default: zeros). Engines
        that do not handle biases yet refuse a network with a nonzero bias
        (:func:`check_network`).

    Examples
    --------
    >>> net = tl.Network([[1.0, 0.0], [0.0, 1.0]], [1.0, -1.0], "relu",
    ...                  scaling="none")
    >>> net(np.array([[1.0, 2.0], [3.0, -1.0]]))
    array([-1.,  3.])
    >>> net.K, net.d
    (2, 2)
    """

    W: NDArray[np.float64]
    a: NDArray[np.float64]
    bias: NDArray[np.float64]
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
        bias: ArrayLike | None = None,
    ) -> None:
        W_ = as_float_array(W, "W", ndim=2)
        if W_.shape[0] < 1 or W_.shape[1] < 1:
            raise ValueError(f"W: expected shape (K, d) with K, d >= 1, got {W_.shape}")
        a_ = np.ones(W_.shape[0]) if a is None else as_float_array(a, "a", ndim=1, scalar_ok=False)
        if a_.shape != (W_.shape[0],):
            raise ValueError(f"a: expected shape ({W_.shape[0]},) to match W's {W_.shape[0]} rows, got {a_.shape}")
        b_ = np.zeros(W_.shape[0]) if bias is None else as_float_array(bias, "bias", ndim=1, scalar_ok=False)
        if b_.shape != (W_.shape[0],):
            raise ValueError(f"bias: expected shape ({W_.shape[0]},) to match W's {W_.shape[0]} rows, got {b_.shape}")
        if not np.all(np.isfinite(b_)):
            raise ValueError("bias: entries must be finite (got NaN or inf)")
        object.__setattr__(self, "W", W_)
        object.__setattr__(self, "a", a_)
        object.__setattr__(self, "bias", b_)
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

    @property
    def has_bias(self) -> bool:
        """Whether any bias b_i is nonzero."""
        return bool(np.any(self.bias != 0.0))

    def with_weights(self, W: ArrayLike, a: ArrayLike | None = None, bias: ArrayLike | None = None) -> Network:
        """The same architecture with new weights.

        Parameters
        ----------
        W : array_like, shape (K', d')
            First-layer weights.
        a : array_like, optional
            Second layer (default: this network's ``a``).
        bias : array_like, optional
            Biases (default: this network's when K' = K, else zeros).

        Returns
        -------
        Network
        """
        W_ = as_float_array(W, "W", ndim=2)
        if bias is None and W_.shape[0] == self.K:
            bias = self.bias
        return Network(W_, self.a if a is None else a, self.activation, self.scaling, self.readout, bias)

    def __call__(self, X: ArrayLike) -> NDArray[np.float64]:
        """Outputs f(x) on the rows of ``X`` (n, d): an array of shape (n,)."""
        X_ = as_float_array(X, "X", ndim=2)
        if X_.shape[1] != self.d:
            raise ValueError(f"X: expected {self.d} columns, got {X_.shape[1]}")
        with np.errstate(over="ignore", invalid="ignore"):
            pre = X_ @ self.W.T / np.sqrt(self.scale) + self.bias
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
        bias: ArrayLike | None = None,
    ) -> Network:
        """A random network.

        Parameters
        ----------
        K, d : int
            Hidden units and input dimension, in [1, 2**31-1].
        activation : str, default "erf"
            The activation.
        init : {"gaussian", "orthogonal"}
            ``"gaussian"``: W_ij ~ N(0, 1); ``"orthogonal"``: orthonormal
            rows scaled to norm sqrt(s), so that Q = I exactly (needs
            K <= d).
        seed : int, optional
            None or an integer in [0, 2**64-1].
        a : array_like, optional
            Second layer (default: ones).
        scaling, readout : str
            As in :class:`Network`.
        bias : array_like, optional
            Biases (default: zeros).

        Returns
        -------
        Network

        Examples
        --------
        >>> net = tl.Network.random(3, 10, init="orthogonal", seed=0)
        >>> bool(np.allclose(net.W @ net.W.T / 10, np.eye(3)))
        True
        """
        W = random_weights(K, d, init, np.random.default_rng(seed_arg(seed, allow_none=True)), scaling)
        return cls(W, a, activation, scaling, readout, bias)


def check_network(net: object, name: str, biases: bool = False) -> Network:
    """Check that ``net`` is a :class:`Network` with finite weights.

    Its arrays can be edited in place after construction, so the engines
    re-check them.

    Parameters
    ----------
    net : object
        The object to check.
    name : str
        The argument name the error message names.
    biases : bool, default False
        Whether the caller handles biases; without, a nonzero
        ``net.bias`` is refused (never silently dropped).

    Returns
    -------
    Network
        ``net`` itself.

    Raises
    ------
    TypeError
        ``net`` is not a Network.
    ValueError
        Its weights are not finite.
    NotImplementedError
        It has a nonzero bias and the caller does not handle biases.

    Examples
    --------
    >>> tl.networks.check_network(np.eye(2), "student")
    Traceback (most recent call last):
        ...
    TypeError: student: expected a twolayer.Network, got ndarray
    """
    if not isinstance(net, Network):
        raise TypeError(f"{name}: expected a twolayer.Network, got {type(net).__name__}")
    for field, arr in (("W", net.W), ("a", net.a), ("bias", net.bias)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}.{field}: entries must be finite (got NaN or inf)")
    if not biases and net.has_bias:
        raise NotImplementedError(f"{name}.bias: this function does not handle biases yet (nonzero biases "
                                  f"{net.bias.tolist()}); see the documentation's activations page for the ones "
                                  "that do")
    return net


def random_weights(K: int, d: int, init: str, rng: np.random.Generator, scaling: str = "sqrt_d") -> NDArray[np.float64]:
    """K random weight rows in R^d (see :meth:`Network.random`).

    Parameters
    ----------
    K, d : int
        Rows and their length.
    init : {"gaussian", "orthogonal"}
        N(0, 1) entries, or orthonormal rows (K <= d) scaled to norm sqrt(d)
        for ``scaling="sqrt_d"`` (norm 1 for ``"none"``).
    rng : numpy.random.Generator
        The random stream.
    scaling : {"sqrt_d", "none"}
        The scaling the rows are meant for.

    Returns
    -------
    ndarray, shape (K, d)

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> tl.networks.random_weights(2, 3, "gaussian", rng).shape
    (2, 3)
    """
    K, d = integer(K, "K", 1, INT32_MAX), integer(d, "d", 1, INT32_MAX)
    choice(init, "init", ("gaussian", "orthogonal"))
    choice(scaling, "scaling", ("sqrt_d", "none"))
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if init == "orthogonal" and K > d:
        raise ValueError(f"init: 'orthogonal' needs K <= d, got K={K}, d={d}")
    with allocating("K, d", K * d):  # the one place every random network and target direction is drawn
        if init == "gaussian":
            return rng.standard_normal((K, d))
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
    """A random (student, teacher) pair with unit second layers.

    Parameters
    ----------
    K, M, d : int
        Student units, teacher units and input dimension, in [1, 2**31-1].
    activation : str, default "erf"
        The student's activation.
    teacher_activation : str, optional
        The teacher's (default: the student's).
    init : {"gaussian", "orthogonal"}
        ``"gaussian"``: all entries N(0, 1); ``"orthogonal"``: the K + M rows
        of student and teacher together orthonormal (the "orthogonal
        dynamics" of Mariantoni & Chizat; needs K + M <= d).
    seed : int, optional
        None or an integer in [0, 2**64-1].
    scaling, readout : str
        As in :class:`Network`, for both networks.

    Returns
    -------
    student, teacher : Network

    Examples
    --------
    >>> student, teacher = tl.networks.teacher_student(
    ...     2, 3, 10, "relu", init="orthogonal", seed=1)
    >>> ov = tl.Overlaps.from_networks(student, teacher)
    >>> bool(np.allclose(ov.omega, np.eye(5)))
    True
    """
    K, M = integer(K, "K", 1, INT32_MAX), integer(M, "M", 1, INT32_MAX)
    rng = np.random.default_rng(seed_arg(seed, allow_none=True))
    W = random_weights(K + M, d, init, rng, scaling)
    student = Network(W[:K], None, activation, scaling, readout)
    teacher = Network(W[K:], None, teacher_activation or activation, scaling, readout)
    return student, teacher
