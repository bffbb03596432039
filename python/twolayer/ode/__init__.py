"""Order-parameter ODEs: online SGD in the high-dimensional limit (Saad-Solla) and population gradient flow.

Conventions (the documentation's Conventions page): student pre-activations l_i = w_i . x / sqrt(d),
x ~ N(0, I_d); Q = W W^T / d, M = W W*^T / d, P = W* W*^T / d; output f = sum_i a_i g(l_i) with the
*effective* (readout-scaled) second layer a held by :class:`~twolayer.Overlaps`; teacher
y = sum_r v_r t(l*_r) + sqrt(Delta) xi; error E = y - f. With E over (l, l*) ~ N(0, Omega), Omega = [[Q, M], [M^T, P]]:

* ``dM_ir/dt = lr a_i E[g'(l_i) l*_r E]``
* ``dQ_ik/dt = lr a_i E[g'(l_i) l_k E] + lr a_k E[g'(l_k) l_i E]
  + lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2] + Delta E[g'(l_i) g'(l_k)])`` (the last term in the online regime
  only)
* ``da_i/dt = lr_readout c^2 E[g(l_i) E]`` with c the readout factor (1 for ``readout="sum"``, 1/K for
  ``"mean"``).

``regime="online"``: the d -> infinity limit of online SGD (one fresh sample per step,
w_i += (lr / sqrt d) a_i g'(l_i) E x, a_i += (lr_readout / d) c g(l_i) E), time t = steps / d.
``regime="gradient_flow"``: the first-order terms only — the exact population gradient flow at any finite
d >= K + M (weight-space population GD with step eps, lambda = w.x / sqrt d, is Euler for this flow with
lr = 1 and dt = eps / d); output noise has no effect there. ``spherical=True``: projected SGD (as in
Arnaboldi, Krzakala, Loureiro & Stephan 2023, "Escaping mediocrity"), which keeps Q_ii = 1 exactly.
The recorded ``risk`` is the excess population risk (no Delta / 2).

Biases (``Overlaps(bias=, teacher_bias=)``; the student's trained with ``lr_bias``): l_i = w_i . x / sqrt(d) + b_i,
the overlaps those of the centred fields and every expectation over N((b, b*), Omega); the equations, with
``db_i/dt = lr_bias a_i E[g'(l_i) E]``, are in ``_bias`` and the documentation's ODE page, "Biases".

The package is split by idea: :func:`integrate` (one system, ``_integrate``), :func:`integrate_batch` (many,
``_batch``), :func:`rhs` (``_rhs``), polynomial targets (``_target``), biases (``_bias``), the Saad-Solla plateau
(``_plateau``) and the options they share (``_solver``); the arguments it shares with :mod:`twolayer.sde` and
:mod:`twolayer.large_batch` are checked in :mod:`twolayer._overlap_args`.
"""

from __future__ import annotations

from ..overlaps import BatchOverlaps
from ..results import BatchTrajectory
from ._batch import integrate_batch
from ._integrate import integrate
from ._plateau import plateau_example, plateau_overlaps
from ._rhs import rhs
from ._solver import Method as Method  # the argument types, as before the split
from ._solver import Readout as Readout
from ._solver import Regime as Regime

__all__ = ["BatchOverlaps", "BatchTrajectory", "integrate", "integrate_batch", "plateau_example", "plateau_overlaps",
           "rhs"]
