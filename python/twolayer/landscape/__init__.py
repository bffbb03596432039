"""Loss-landscape toolkit: critical points, symmetry, Hessian spectra, alignment.

Built for Mariantoni & Chizat (2022), Arjevani & Field (2021) and the alignment paper (see the documentation's
paper-reproduction pages).

- :func:`refine`, :class:`CriticalPoint`, :func:`spectrum` — Newton refinement and classification (critical).
- :func:`isotropy`, :class:`FixedPointSpace` — symmetry of weight matrices (symmetry).
- :func:`canonical`, :func:`orbit_tangents`, :func:`split_spectrum` — the rescaling orbit of homogeneous units:
  its canonical point and flat directions (orbit).
- :class:`SubspaceProblem`, :func:`continue_family` — critical points in fixed-point subspaces, continued in k.
- :class:`YoungProblem`, :func:`continue_real_k` — the risk on a Young fixed-point space at real block sizes
  with exact derivatives and the Hessian spectrum by isotypic component; families continued in real k and the
  k where they turn from saddle into minimum.
- :func:`saddle_search`, :func:`saddle_connections` — saddles of a given Morse index by eigenvector following,
  and the minima an index-1 saddle connects.
- :func:`multistart` — many parallel searches, refined and classified.
- :func:`to_json`, :func:`from_json`, :func:`to_dataframe`, :func:`to_xarray` — export (lossless JSON with
  symmetry compression, pandas, xarray); :mod:`twolayer.landscape.figures` draws spectra and family curves.
- :func:`alignment_determinants`, :func:`procrustes`, :func:`step_gradient_flow`, :func:`alignment_flow` —
  alignment and the comparison of Gaussian and orthogonal starts.

Networks with biases (student or teacher; trained with ``train_bias`` / ``lr_bias``) are taken throughout; the
rescaling orbit (w_i, b_i, a_i) -> (c w_i, c b_i, c^-p a_i) carries trained biases.
"""

from __future__ import annotations

from . import figures
from .alignment import (
    alignment_determinants,
    alignment_flow,
    procrustes,
    procrustes_distance,
    step_gradient_flow,
)
from .critical import CriticalPoint, classify, refine, spectrum
from .export import compress_point, decompress_point, from_json, to_dataframe, to_json, to_xarray
from .multistart import MultistartResult, multistart, numpy_relu_loss_grad, random_starts
from .orbit import canonical, canonical_weights, homogeneity_degree, orbit_tangents, split_spectrum
from .realk import Crossing, RealKFamily, continue_real_k, reduced_risk
from .saddle import saddle_connections, saddle_search
from .subspace import FamilyPoint, SubspaceProblem, continue_family, identity_teacher
from .symmetry import FixedPointSpace, Isotropy, isotropy
from .young import IsotypicSpectrum, YoungProblem

__all__ = [
    "CriticalPoint",
    "Crossing",
    "FamilyPoint",
    "FixedPointSpace",
    "IsotypicSpectrum",
    "Isotropy",
    "MultistartResult",
    "RealKFamily",
    "SubspaceProblem",
    "YoungProblem",
    "alignment_determinants",
    "alignment_flow",
    "canonical",
    "canonical_weights",
    "classify",
    "continue_family",
    "compress_point",
    "continue_real_k",
    "decompress_point",
    "figures",
    "homogeneity_degree",
    "from_json",
    "identity_teacher",
    "isotropy",
    "multistart",
    "numpy_relu_loss_grad",
    "orbit_tangents",
    "procrustes",
    "procrustes_distance",
    "random_starts",
    "reduced_risk",
    "refine",
    "saddle_connections",
    "saddle_search",
    "spectrum",
    "split_spectrum",
    "step_gradient_flow",
    "to_dataframe",
    "to_json",
    "to_xarray",
]
