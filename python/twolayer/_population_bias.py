"""Population risk, gradient and Hessian of committees with biases, lambda_i = w_i . x / sqrt(s) + b_i (issue 23):
thin wrappers of the C++ core (population.hpp, the ``*_mean`` functions).

With pre-activations lambda ~ N(b, C) every expectation is a pair moment E[s^(p)(l_i) g^(q)(l_k)] of the kernels
with means (gaussian_mean.hpp; relu'' a delta, integrated out exactly), and Stein's lemma on x gives

    dR/dw_i = a_i / s [E[(f - y) s''(l_i)] w_i + sum_k a_k E[s'(l_i) s'(l_k)] w_k
                       - sum_r v_r E[s'(l_i) s*'(l*_r)] w*_r]
    dR/db_i = a_i E[(f - y) s'(l_i)],        dR/da_i = c E[(f - y) s(l_i)]   (c the readout factor),

with effective readouts a, v, and the Hessian likewise with orders p + q <= 4. The risk is the core's
overlap_risk_mean (what SGD records). Used by :mod:`twolayer.population` when either network has a nonzero bias
(or ``train_bias``). A unit with itself is one unit's expectation E[(s^2)^(n)(l_i)], so that step students work
too (step^2 = step: the deltas combine before they are integrated).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from . import _core
from .networks import Network

_F = NDArray[np.float64]
CoreArgs = tuple[_F, _F, str, _F, _F, str, float, _F, _F]


def core_args(student: Network, teacher: Network) -> CoreArgs:
    """The core's arguments of a pair: (W, effective a, activation, teacher W, v, activation, scale, b, b*)."""
    return (student.W, student.effective_a, student.activation, teacher.W, teacher.effective_a, teacher.activation,
            student.scale, student.bias, teacher.bias)


def risk(student: Network, teacher: Network, n_threads: int = 0) -> float:
    """The excess population risk with biases."""
    return float(_core.population_risk_mean(*core_args(student, teacher), n_threads=n_threads))


def gradient(student: Network, teacher: Network, n_threads: int = 0) -> tuple[_F, _F, _F]:
    """(dR/dW, dR/da, dR/db) with biases (see the module docstring)."""
    dW, da, db = _core.population_gradient_mean(*core_args(student, teacher), n_threads=n_threads)
    return dW, student.readout_factor * da, db


def hessian(student: Network, teacher: Network, train_readout: bool, train_bias: bool,
            n_threads: int = 0) -> _F:
    """The Hessian with biases on [vec(W) row-major, a (train_readout), b (train_bias)] (exactly symmetric)."""
    H = _core.population_hessian_mean(*core_args(student, teacher), train_readout=train_readout,
                                      train_bias=train_bias, n_threads=n_threads)
    if train_readout:  # the core's a is the effective c a
        n, c = student.K * student.d, student.readout_factor
        H[n: n + student.K, :] *= c
        H[:, n: n + student.K] *= c
    return np.asarray(H)
