"""The biases of an ODE run (issue 23): when a run takes the with-means right-hand side, and its core arguments.

With biases the pre-activations are l_i = w_i . x / sqrt(d) + b_i and l*_r = w*_r . x / sqrt(d) + b*_r: the centred
fields keep the covariance Omega = [[Q, M], [M^T, P]] and the units see the means (b, b*). With E = y - f over
N((b, b*), Omega) and c_k = l_k - b_k the centred student field (t = steps / d, effective second layers a, v):

    dM_ir/dt = lr a_i E[g'(l_i) c*_r E]
    dQ_ik/dt = lr a_i E[g'(l_i) c_k E] + lr a_k E[g'(l_k) c_i E]
               + [online] lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2] + noise E[g'(l_i) g'(l_k)])
    db_i/dt  = lr_bias a_i E[g'(l_i) E]          (the teacher's b* fixed)
    da_i/dt  = lr_readout_eff E[g(l_i) E]

and the risk 1/2 E[E^2] with the means. A run is "with biases" when the overlaps have a nonzero ``bias`` or
``teacher_bias`` or ``lr_bias > 0``; every other run takes the paths without biases, bitwise as before.
"""

from __future__ import annotations

from .._overlap_args import bias_kwargs

__all__ = ["bias_kwargs"]
