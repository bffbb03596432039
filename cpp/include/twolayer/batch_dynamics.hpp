// The order-parameter right-hand side (dynamics.hpp) of L systems at once, structure-of-arrays over the systems
// ("lanes"): every array is lane-major, entry e of lane l at [e * L + l], and every operation is written over the lane
// index l in the innermost loop, so that a lane's arithmetic is the same sequence of IEEE operations whatever L is
// (L = 1: one system; L = 8: eight systems in the SIMD registers) and whatever the other lanes hold. This is the
// order-parameter right-hand side's one per-lane implementation for committees whose student and teacher share one
// activation G (erf, relu, quadratic or linear): the CPU batch (lanes in SIMD registers), the single system (L = 1)
// and a GPU kernel (one thread per lane, L = 1 on strided pointers) all call it. Built with -ffp-contract=off
// (CMakeLists.txt) and nvcc -fmad=false: no fused multiply-add that the compiler could form in one instantiation and
// not in another.
//
// The equations are those of dynamics.hpp for student and teacher G, with its per-pair precomputation:
//   Omega = [[Q, M], [M^T, P]], w = (-a, v);
//   I2 and its derivatives for every (i < K, c < K + M), and dI2/dC_ik = J2(l_i, l_k) of the student pairs (Price)
//     for the noise term:
//     erf from its angle form (gaussian.hpp angle_pair_grad), r_c = (1 + Omega_cc)^(-1/2):
//       c = Omega_ic r_i r_c, val = (2/pi) asin c, dI2/dC_ic = (2/pi) r_i r_c / sqrt(1 - c^2),
//       dI2/dC_ii = -Omega_ic r_i^2 dI2/dC_ic / 2; at c = i the self pair's q-derivative 2 dI2/dC_ii + dI2/dC_ic;
//     relu from angle_pair_grad<Relu> (n_c = sqrt(Omega_cc), r_c = 1 / n_c); the self pair exactly: val = q / 2,
//       dS/dq = 1/2, J2 = 1/2 (the angle form at c = 1 would carry the rounding of c through sqrt(1 - c^2));
//     quadratic val = x z + 2 y^2, dI2/dC_ii = z, dI2/dC_ic = 4 y ((x, y, z) = (Omega_ii, Omega_ic, Omega_cc));
//     linear val = y, dI2/dC_ii = 0, dI2/dC_ic = 1; for both the self pair is 2 dI2/dC_ii + dI2/dC_ic as for erf;
//   Psi_ic = E[g'(l_i) l_c E] = 2 Omega_ic A_i + sum_q B_iq Omega_qc, A_i = sum_{q != i} w_q dI2_iq/dC_ii,
//     B_iq = w_q dI2_iq/dC_iq (B_ii = w_i dS_i/dq);
//   dM_ir = lr a_i Psi_i,K+r, Phi_ik = lr (a_i Psi_ik + a_k Psi_ki)
//     [+ online: lr^2 a_i a_k (sum_{j <= l} W_jl I4_ik,jl + Delta J2_ik), W_jl = (2 - [j = l]) w_j w_l];
//   I4 = E[G'(l_i) G'(l_k) G(l_j) G(l_l)], C = Omega on (i, k, j, l):
//     erf (4/pi^2) det(I + C_AA)^(-1/2) asin(c'_jl r'_j r'_l), c' = Omega conditioned on (l_i, l_k) observed at 0
//       with unit noise, r'_j = (1 + c'_jj)^(-1/2) (the diagonal term asin(c'_jj r'_j^2) = asin(1 - r'_j^2));
//     relu gaussian_relu_i4.hpp's relu_i4 (Price path integral) on the assembled 4 x 4 covariance, lane by lane;
//     quadratic (gaussian.hpp) 4 [C_ik I2 + 2 C_ij C_kj z + (C_ij C_kl + C_il C_kj) 4 y + 2 C_il C_kl x],
//       I2 = x z + 2 y^2, (x, y, z) = (C_jj, C_jl, C_ll); linear C_jl;
//   spherical: dQ_ik = Phi_ik - Q_ik (Phi_ii + Phi_kk) / 2 (0 on the diagonal), dM_ir -= M_ir Phi_ii / 2;
//   da_i = lr_readout sum_c w_c val_ic.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "twolayer/activation.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/gaussian_relu_i4.hpp"
#include "twolayer/hd.hpp"
#include "twolayer/simd_math.hpp"

// A loop over units, unrolled by kUnitsUnroll (a constant in scope) in device code and left to the compiler on the
// host. Triangular loops run over the full range with a guard: a count pragma fully unrolls only constant trip counts.
#if defined(__CUDA_ARCH__)
#define TWOLAYER_UNROLL_UNITS _Pragma("unroll kUnitsUnroll")
#else
#define TWOLAYER_UNROLL_UNITS
#endif

namespace twolayer {

constexpr int kLaneUnitsCap = 4;  // K, M <= this in the lanes (batch_integrators.hpp kLaneMaxUnits)

// The shape and flags shared by the lanes of one block.
struct LaneShape {
  int K = 1, M = 1;
  bool online = true;     // Regime::Online (else gradient flow: no lr^2 and noise terms)
  bool spherical = false;
  double psd_rtol = 0.0, psd_atol = 0.0;  // an adaptive integration's tolerances, for the divergence rule's delta
                                          // (divergence.hpp psd_delta; 0: the fixed kDivergencePsdTol)
  std::size_t state_size() const {
    return static_cast<std::size_t>(K) * K + static_cast<std::size_t>(K) * M + static_cast<std::size_t>(K);
  }
};

// Per-lane parameters, lane-major: P [(r * M + s) * L + l], v [r * L + l], lr, lr_readout, noise [l].
struct LaneParams {
  const double* P;
  const double* v;
  const double* lr;
  const double* lr_readout;
  const double* noise;
};

// Whether the lanes implement committees whose student and teacher share the activation g.
TWOLAYER_HD constexpr bool committee_lanes_activation(Activation g) {
  return g == Activation::Erf || g == Activation::Relu || g == Activation::Quadratic || g == Activation::Linear;
}

// Scratch doubles committee_rhs_lanes<L, G> needs.
constexpr std::size_t committee_rhs_lanes_workspace(const LaneShape& s, int L, Activation G) {
  const std::size_t K = static_cast<std::size_t>(s.K), u = K + static_cast<std::size_t>(s.M);
  return static_cast<std::size_t>(L) * (2 * u + 4 * K * u + 2 * K * K + 3 * u + 8 + (G == Activation::Relu ? u : 0));
}
inline std::size_t erf_rhs_lanes_workspace(const LaneShape& s, int L) {
  return committee_rhs_lanes_workspace(s, L, Activation::Erf);
}

// E[G'(l_i) G'(l_k) E^2] = sum_{j <= l} W_jl I4(G; l_i, l_k, l_j, l_l), W_jl = (2 - [j = l]) w_j w_l, for the relu,
// quadratic and linear lanes (the header comment's I4; erf's conditioning is written out in committee_rhs_lanes).
// om(r, c): the lanes of Omega_rc; w: the unit weights (u x L, lane-major); out: L values. The 4 x 4 covariance of
// (l_i, l_k, l_j, l_l) is assembled as OdeRhs's kernel table does (gaussian_tables.cpp i4_table).
template <int L, Activation G, class Om>
TWOLAYER_HD void committee_i4_contract(const Om& om, int i, int k, int u, const double* __restrict w,
                                       double* __restrict out) {
  static_assert(G == Activation::Relu || G == Activation::Quadratic || G == Activation::Linear,
                "I4 contraction: relu, quadratic or linear");
  for (int l = 0; l < L; ++l) out[l] = 0.0;
  const double *oii = om(i, i), *oik = om(i, k), *okk = om(k, k);
  for (int j = 0; j < u; ++j) {
    const double *oji = om(j, i), *ojk = om(j, k), *ojj = om(j, j), *wj = w + j * L;
    for (int m = j; m < u; ++m) {
      const double *omi = om(m, i), *omk = om(m, k), *ojm = om(j, m), *omm = om(m, m), *wm = w + m * L;
      const double f = j == m ? 1.0 : 2.0;
      if constexpr (G == Activation::Relu) {  // the path integral per lane (its node count depends on the lane)
        for (int l = 0; l < L; ++l) {
          const double C[16] = {oii[l], oik[l], oji[l], omi[l], oik[l], okk[l], ojk[l], omk[l],
                                oji[l], ojk[l], ojj[l], ojm[l], omi[l], omk[l], ojm[l], omm[l]};
          out[l] += f * wj[l] * wm[l] * detail::relu_i4(C);
        }
      } else {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) {
          double i4 = ojm[l];  // linear
          if constexpr (G == Activation::Quadratic) {
            const double x = ojj[l], y = ojm[l], z = omm[l];
            const double c12 = oik[l], c13 = oji[l], c14 = omi[l], c23 = ojk[l], c24 = omk[l];
            i4 = 4.0 * (c12 * (x * z + 2.0 * y * y) + 2.0 * c13 * c23 * z + (c13 * c24 + c14 * c23) * (4.0 * y) +
                        2.0 * c14 * c24 * x);
          }
          out[l] += f * wj[l] * wm[l] * i4;
        }
      }
    }
  }
}

// dy = f(y) for L lanes of systems of shape s whose student and teacher units are all G (see the header comment).
// y, dy: state_size() entries per lane, lane-major; ws: committee_rhs_lanes_workspace(s, L, G) doubles. KC, MC > 0:
// K = KC and M = MC at compile time (the loops over units unroll; the same operations as at run time). For erf the
// table of I2 values (val, for da) is computed only when a lane has lr_readout != 0: a lane with lr_readout = 0 gets
// da = 0 either way.
template <int L, Activation G, int KC = 0, int MC = 0>
TWOLAYER_HD void committee_rhs_lanes(const LaneShape& s, const LaneParams& p, const double* __restrict y,
                                     double* __restrict dy, double* __restrict ws) {
  static_assert((KC > 0) == (MC > 0), "both sizes fixed or both at run time");
  static_assert(committee_lanes_activation(G), "lanes: erf, relu, quadratic or linear committees");
  constexpr bool kErf = G == Activation::Erf, kRelu = G == Activation::Relu, kQuad = G == Activation::Quadratic;
  // In a GPU kernel of fixed small sizes every loop over units unrolls, so that the workspace's indices are constants
  // and it lives in registers; larger or run-time sizes keep their loops (ptxas time, instruction cache).
  [[maybe_unused]] constexpr int kUnitsUnroll = KC > 0 && KC + MC <= 4 ? 64 : 1;
  const int K = KC > 0 ? KC : s.K, M = MC > 0 ? MC : s.M, u = K + M;
  bool readout = false;
  for (int l = 0; l < L; ++l) readout = readout || p.lr_readout[l] != 0.0;
  constexpr double two_over_pi = 2.0 / kPi, four_over_pi2 = 4.0 / (kPi * kPi);
  double* __restrict w = ws;                  // u
  double* __restrict r = w + u * L;           // u: erf (1 + Omega_cc)^(-1/2), relu Omega_cc^(-1/2)
  double* __restrict val = r + u * L;         // K x u
  double* __restrict D = val + K * u * L;     // K x u: dI2/dC_ii
  double* __restrict B = D + K * u * L;       // K x u: dI2/dC_ic, then weighted
  double* __restrict psi = B + K * u * L;     // K x u
  double* __restrict phi = psi + K * u * L;   // K x K
  double* __restrict j2 = phi + K * K * L;    // K x K (student pairs, for the noise term)
  double* __restrict t1 = j2 + K * K * L;     // u: conditioning on a pair (i, k)
  double* __restrict t2 = t1 + u * L;
  double* __restrict rr = t2 + u * L;         // u: (1 + c'_jj)^(-1/2)
  double* __restrict nrm = rr + u * L;        // u (relu only): Omega_cc^(1/2)
  const double* Q = y;
  const double* Mo = y + K * K * L;
  const double* a = Mo + K * M * L;
  auto at = [&](double* base, int row, int col, int ncol) { return base + (row * ncol + col) * L; };
  // Omega_cd's lanes, read in place from y and P (no copy; with K, M fixed at compile time, constant offsets).
  auto om = [&](int row, int col) {
    return row < K ? (col < K ? Q + (row * K + col) * L : Mo + (row * M + col - K) * L)
                   : (col < K ? Mo + (col * M + row - K) * L : p.P + ((row - K) * M + col - K) * L);
  };
  // The unit weights.
  TWOLAYER_UNROLL_UNITS
  for (int j = 0; j < K; ++j) {
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) w[j * L + l] = -a[j * L + l];
  }
  TWOLAYER_UNROLL_UNITS
  for (int q = 0; q < M; ++q) {
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) w[(K + q) * L + l] = p.v[q * L + l];
  }
  TWOLAYER_UNROLL_UNITS
  for (int c = 0; c < u; ++c) {
    const double* occ = om(c, c);
    if constexpr (kErf) {
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) r[c * L + l] = 1.0 / std::sqrt(1.0 + occ[l]);
    } else if constexpr (kRelu) {
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        r[c * L + l] = angle_norm(Activation::Relu, occ[l]);
        nrm[c * L + l] = occ[l] * r[c * L + l];
      }
    }
  }
  // 1. I2 and its derivatives for every (i, c); the self pair; J2 of the student pairs; B weighted.
  TWOLAYER_UNROLL_UNITS
  for (int i = 0; i < K; ++i) {
    TWOLAYER_UNROLL_UNITS
    for (int c = 0; c < u; ++c) {
      const double *o = om(i, c), *ri = r + i * L, *rc = r + c * L;
      double *vv = at(val, i, c, u), *dd = at(D, i, c, u), *bb = at(B, i, c, u);
      if constexpr (kErf) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) {
          // the value's arcsine is left unused here (dead code): the readout's values below take it from vv
          const PairGrad g = angle_pair_grad<Activation::Erf>(0.0, ri[l], 0.0, rc[l], o[l]);
          vv[l] = clip_correlation(o[l] * ri[l] * rc[l]);  // the I2 argument, for the readout's values below
          dd[l] = g.gx;
          bb[l] = g.gy;
        }
      } else if constexpr (kRelu) {
        const double *ni = nrm + i * L, *nc = nrm + c * L;
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) {
          const PairGrad g = angle_pair_grad<Activation::Relu>(ni[l], ri[l], nc[l], rc[l], o[l]);
          vv[l] = g.v;
          dd[l] = g.gx;
          bb[l] = g.gy;
        }
      } else {
        const double *oii = om(i, i), *occ = om(c, c);
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) {
          vv[l] = kQuad ? oii[l] * occ[l] + 2.0 * o[l] * o[l] : o[l];
          dd[l] = kQuad ? occ[l] : 0.0;
          bb[l] = kQuad ? 4.0 * o[l] : 1.0;
        }
      }
    }
  }
  if (kErf && readout) {
    TWOLAYER_UNROLL_UNITS
    for (int e = 0; e < K * u; ++e) {
      double* ve = val + e * L;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) ve[l] = two_over_pi * asin_simd(ve[l]);
    }
  }
  TWOLAYER_UNROLL_UNITS
  for (int i = 0; i < K; ++i) {
    double *vv = at(val, i, i, u), *dd = at(D, i, i, u), *bb = at(B, i, i, u);
    if constexpr (kRelu) {
      const double* oii = om(i, i);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        vv[l] = 0.5 * oii[l];
        dd[l] = 0.5;
        bb[l] = oii[l] > 0.0 ? 0.5 : 0.0;
      }
    } else {
      (void)vv;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) dd[l] = 2.0 * dd[l] + bb[l];  // the self pair's dS/dq; bb stays J2(l_i, l_i)
    }
  }
  TWOLAYER_UNROLL_UNITS
  for (int i = 0; i < K; ++i) {
    TWOLAYER_UNROLL_UNITS
    for (int k = 0; k < K; ++k) {
      if (k < i) continue;
      const double *bb = at(B, i, k, u), *nz = p.noise;
      double* jj = at(j2, i, k, K);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) jj[l] = nz[l] > 0.0 ? bb[l] : 0.0;
    }
  }
  TWOLAYER_UNROLL_UNITS
  for (int i = 0; i < K; ++i) {
    TWOLAYER_UNROLL_UNITS
    for (int c = 0; c < u; ++c) {
      double* bb = at(B, i, c, u);
      const double* wc = w + c * L;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) bb[l] *= wc[l];
    }
    double *bb = at(B, i, i, u), *dd = at(D, i, i, u);
    const double* wi = w + i * L;
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) {
      bb[l] = wi[l] * dd[l];
      dd[l] = 0.0;
    }
  }
  // 2. Psi_ic = 2 Omega_ic A_i + sum_q B_iq Omega_qc, A_i = sum_q w_q D_iq (D_ii = 0).
  TWOLAYER_UNROLL_UNITS
  for (int i = 0; i < K; ++i) {
    double A[L];
    for (int l = 0; l < L; ++l) A[l] = 0.0;
    TWOLAYER_UNROLL_UNITS
    for (int q = 0; q < u; ++q) {
      const double *wq = w + q * L, *dq = at(D, i, q, u);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) A[l] += wq[l] * dq[l];
    }
    TWOLAYER_UNROLL_UNITS
    for (int c = 0; c < u; ++c) {
      const double* oic = om(i, c);
      double* ps = at(psi, i, c, u);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) ps[l] = 2.0 * oic[l] * A[l];
      TWOLAYER_UNROLL_UNITS
      for (int q = 0; q < u; ++q) {
        const double *bq = at(B, i, q, u), *oq = om(q, c);
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) ps[l] += bq[l] * oq[l];
      }
    }
  }
  // 3. First-order terms.
  double* dQ = dy;
  double* dM = dy + K * K * L;
  double* da = dM + K * M * L;
  TWOLAYER_UNROLL_UNITS
  for (int i = 0; i < K; ++i) {
    const double* ai = a + i * L;
    TWOLAYER_UNROLL_UNITS
    for (int k = 0; k < K; ++k) {
      if (k < i) continue;
      const double *ak = a + k * L, *pik = at(psi, i, k, u), *pki = at(psi, k, i, u);
      double* ph = at(phi, i, k, K);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) ph[l] = p.lr[l] * (ai[l] * pik[l] + ak[l] * pki[l]);
    }
    TWOLAYER_UNROLL_UNITS
    for (int q = 0; q < M; ++q) {
      const double* pq = at(psi, i, K + q, u);
      double* d = dM + (i * M + q) * L;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) d[l] = p.lr[l] * ai[l] * pq[l];
    }
  }
  // 4. Online: lr^2 a_i a_k (E[g'(l_i) g'(l_k) E^2] + Delta J2) for the pairs i <= k; erf's I4 by conditioning on the
  //    pair, the others' through committee_i4_contract.
  if (s.online) {
    TWOLAYER_UNROLL_UNITS
    for (int i = 0; i < K; ++i) {
      TWOLAYER_UNROLL_UNITS
      for (int k = 0; k < K; ++k) {
        if (k < i) continue;
        double quad[L];  // E[G'(l_i) G'(l_k) E^2] = sum_{j <= l} W_jl I4_ik,jl
        if constexpr (kErf) {
          double det[L], acc[L];
          {
            const double *oii = om(i, i), *oik = om(i, k), *okk = om(k, k);
            double i11[L], i12[L], i22[L];
            TWOLAYER_LANES
            for (int l = 0; l < L; ++l) {
              const double a11 = oii[l] + 1.0, a12 = oik[l], a22 = okk[l] + 1.0;
              det[l] = a11 * a22 - a12 * a12;
              const double idet = 1.0 / det[l];
              i11[l] = a22 * idet;
              i12[l] = -a12 * idet;
              i22[l] = a11 * idet;
              acc[l] = 0.0;
            }
            TWOLAYER_UNROLL_UNITS
            for (int j = 0; j < u; ++j) {
              const double *u1 = om(i, j), *u2 = om(k, j), *ojj = om(j, j);
              double *v1 = t1 + j * L, *v2 = t2 + j * L, *rj = rr + j * L;
              TWOLAYER_LANES
              for (int l = 0; l < L; ++l) {
                v1[l] = i11[l] * u1[l] + i12[l] * u2[l];
                v2[l] = i12[l] * u1[l] + i22[l] * u2[l];
                const double var = std::max(ojj[l] - (u1[l] * v1[l] + u2[l] * v2[l]), 0.0);
                rj[l] = 1.0 / std::sqrt(1.0 + var);
              }
            }
          }
          TWOLAYER_UNROLL_UNITS
          for (int j = 0; j < u; ++j) {
            const double *u1 = om(i, j), *u2 = om(k, j), *rj = rr + j * L, *wj = w + j * L;
            TWOLAYER_LANES
            for (int l = 0; l < L; ++l) acc[l] += wj[l] * wj[l] * asin_one_minus_sq_simd(rj[l]);
            TWOLAYER_UNROLL_UNITS
            for (int m = 0; m < u; ++m) {
              if (m <= j) continue;
              const double *ojm = om(j, m), *v1 = t1 + m * L, *v2 = t2 + m * L, *rm = rr + m * L,
                           *wm = w + m * L;
              if constexpr (L == 1) {  // one lane: no data-dependent branch
                const double x0 = (ojm[0] - (u1[0] * v1[0] + u2[0] * v2[0])) * rj[0] * rm[0];
                acc[0] += 2.0 * wj[0] * wm[0] * asin_simd(x0);
                continue;
              }
              double x[L];
              int big = 0;  // a lane with |x| > 1/2 (or NaN: asin_simd's NaN either way)
              TWOLAYER_LANES_OR(big)
              for (int l = 0; l < L; ++l) {
                x[l] = (ojm[l] - (u1[l] * v1[l] + u2[l] * v2[l])) * rj[l] * rm[l];
                big |= !(std::fabs(x[l]) <= 0.5);
              }
              if (big) {
                TWOLAYER_LANES
                for (int l = 0; l < L; ++l) acc[l] += 2.0 * wj[l] * wm[l] * asin_simd(x[l]);
              } else {  // no lane needs the half-angle branch (its square root): asin_simd's arithmetic, |x| <= 1/2
                TWOLAYER_LANES
                for (int l = 0; l < L; ++l) {
                  const double a = std::fabs(x[l]);
                  acc[l] += 2.0 * wj[l] * wm[l] * std::copysign(asin_half_simd(a, a * a), x[l]);
                }
              }
            }
          }
          TWOLAYER_LANES
          for (int l = 0; l < L; ++l) quad[l] = four_over_pi2 / std::sqrt(det[l]) * acc[l];
        } else {
          committee_i4_contract<L, G>(om, i, k, u, w, quad);
        }
        const double *ai = a + i * L, *ak = a + k * L, *jj = at(j2, i, k, K);
        double* ph = at(phi, i, k, K);
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) ph[l] += p.lr[l] * p.lr[l] * ai[l] * ak[l] * (quad[l] + p.noise[l] * jj[l]);
      }
    }
  }
  // 5. dQ (symmetric), with the spherical projection if asked (phi keeps the unconstrained Phi).
  TWOLAYER_UNROLL_UNITS
  for (int i = 0; i < K; ++i) {
    TWOLAYER_UNROLL_UNITS
    for (int k = 0; k < K; ++k) {
      if (k < i) continue;
      const double *ph = at(phi, i, k, K), *pii = at(phi, i, i, K), *pkk = at(phi, k, k, K), *qik = Q + (i * K + k) * L;
      double *d1 = dQ + (i * K + k) * L, *d2 = dQ + (k * K + i) * L;
      if (!s.spherical) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) d1[l] = d2[l] = ph[l];
      } else if (i == k) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) d1[l] = 0.0;
      } else {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) d1[l] = d2[l] = ph[l] - 0.5 * qik[l] * (pii[l] + pkk[l]);
      }
    }
  }
  if (s.spherical) {
    TWOLAYER_UNROLL_UNITS
    for (int i = 0; i < K; ++i) {
      const double* pii = at(phi, i, i, K);
      TWOLAYER_UNROLL_UNITS
      for (int q = 0; q < M; ++q) {
        double* d = dM + (i * M + q) * L;
        const double* mq = Mo + (i * M + q) * L;
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) d[l] -= 0.5 * mq[l] * pii[l];
      }
    }
  }
  // 6. Second layer: da_i = lr_readout E[g(l_i) E].
  if (readout) {
    TWOLAYER_UNROLL_UNITS
    for (int i = 0; i < K; ++i) {
      double sum[L];
      for (int l = 0; l < L; ++l) sum[l] = 0.0;
      TWOLAYER_UNROLL_UNITS
      for (int c = 0; c < u; ++c) {
        const double *wc = w + c * L, *vc = at(val, i, c, u);
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) sum[l] += wc[l] * vc[l];
      }
      double* d = da + i * L;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) d[l] = p.lr_readout[l] != 0.0 ? p.lr_readout[l] * sum[l] : 0.0;
    }
  } else {
    for (int i = 0; i < K * L; ++i) da[i] = 0.0;
  }
}

// The erf committee's lanes (the one implementation above).
template <int L, int KC = 0, int MC = 0>
TWOLAYER_HD void erf_rhs_lanes(const LaneShape& s, const LaneParams& p, const double* __restrict y,
                               double* __restrict dy, double* __restrict ws) {
  committee_rhs_lanes<L, Activation::Erf, KC, MC>(s, p, y, dy, ws);
}

// The divergence rule (divergence.hpp divergence_code) for L lanes: code[l] = 0 (acceptable), 1 (an entry not
// finite), 2 (an entry above bound[l] in magnitude), 3 (Omega + delta I, delta = psd_delta(max|diag Omega|, s.psd_rtol,
// s.psd_atol), is not positive definite: an LDL^T pivot is not > 0; the pivots are the squares of state_error's Cholesky
// diagonal, computed without square roots). Codes 1 and 2: the first offending entry in state order decides, as in
// divergence_code. y: state_size() entries per lane, lane-major; P: lane-major M x M; ws: (K + M)^2 L doubles. KC, MC > 0:
// sizes fixed at compile time (as erf_rhs_lanes).
template <int L, int KC = 0, int MC = 0>
TWOLAYER_HD void omega_check_lanes(const LaneShape& s, const double* __restrict P, const double* __restrict y,
                                   const double* __restrict bound, double* __restrict ws, int* code) {
  constexpr int UM = KC > 0 ? KC + MC : 2 * kLaneUnitsCap;
  const int K = KC > 0 ? KC : s.K, M = MC > 0 ? MC : s.M, u = std::min(K + M, UM);
  const int n = K * K + K * M + K;
  // Entries: one pass of max |y| (non-finite entries make the sum y - y NaN); the exact first-offender order only
  // when a lane has an offending entry.
  double nan_sum[L], big[L];
  for (int l = 0; l < L; ++l) nan_sum[l] = 0.0, big[l] = 0.0;
  for (int e = 0; e < n; ++e) {
    const double* ye = y + e * L;
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) {
      nan_sum[l] += ye[l] - ye[l];
      const double m = std::fabs(ye[l]);
      big[l] = m > big[l] ? m : big[l];
    }
  }
  double flag = 0.0;
  TWOLAYER_LANES
  for (int l = 0; l < L; ++l) flag += (nan_sum[l] == 0.0 && big[l] <= bound[l]) ? 0.0 : 1.0;
  for (int l = 0; l < L; ++l) code[l] = 0;
  const bool any = flag != 0.0;
  if (any)
    for (int l = 0; l < L; ++l)
      for (int e = 0; e < n && code[l] == 0; ++e) {
        const double x = y[e * L + l];
        code[l] = !std::isfinite(x) ? kNotFinite : (std::fabs(x) > bound[l] ? kGrew : kStateOk);
      }
  // LDL^T of Omega + delta I (e_ij = L_ij d_j, i > j; inv_j = 1 / d_j), lane loops innermost.
  const double* Mo = y + K * K * L;
  auto om = [&](int i, int j) {  // Omega_ij's lanes, i >= j
    return i < K ? y + (i * K + j) * L : j < K ? Mo + (j * M + (i - K)) * L : P + ((i - K) * M + (j - K)) * L;
  };
  double e[UM * UM][L], inv[UM][L], delta[L], bad[L];
  for (int l = 0; l < L; ++l) delta[l] = 0.0, bad[l] = 0.0;
  TWOLAYER_UNROLL
  for (int i = 0; i < u; ++i) {
    const double* o = om(i, i);
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) delta[l] = std::max(delta[l], std::fabs(o[l]));
  }
  TWOLAYER_LANES
  for (int l = 0; l < L; ++l) delta[l] = psd_delta(delta[l], s.psd_rtol, s.psd_atol);
  TWOLAYER_UNROLL
  for (int j = 0; j < u; ++j) {
    double d[L];
    const double* o = om(j, j);
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) d[l] = o[l] + delta[l];
    TWOLAYER_UNROLL
    for (int k = 0; k < j; ++k) {
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) d[l] -= e[j * UM + k][l] * e[j * UM + k][l] * inv[k][l];
    }
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) {
      bad[l] = !(d[l] > 0.0) ? 1.0 : bad[l];
      inv[j][l] = 1.0 / (d[l] > 0.0 ? d[l] : 1.0);
    }
    TWOLAYER_UNROLL
    for (int i = j + 1; i < u; ++i) {
      double r[L];
      const double* oij = om(i, j);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) r[l] = oij[l];
      TWOLAYER_UNROLL
      for (int k = 0; k < j; ++k) {
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) r[l] -= e[i * UM + k][l] * e[j * UM + k][l] * inv[k][l];
      }
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) e[i * UM + j][l] = r[l];
    }
  }
  (void)ws;
  for (int l = 0; l < L; ++l) code[l] = code[l] ? code[l] : (bad[l] != 0.0 ? kNotPsd : kStateOk);
}

// Scratch doubles omega_check_lanes<L> needs.
inline std::size_t omega_check_lanes_workspace(const LaneShape& s, int L) {
  const std::size_t u = static_cast<std::size_t>(s.K) + static_cast<std::size_t>(s.M);
  return static_cast<std::size_t>(L) * (u * u + u);
}

// The excess risk of L lanes of committees of activation G (student and teacher), population.cpp overlap_risk in its
// order of terms: sum_i [a_i^2 I2_ii / 2 + sum_{k > i} a_i a_k I2_ik - sum_q a_i v_q I2_iq] + sum_q [v_q^2 I2_qq / 2 +
// sum_{t > q} v_q v_t I2_qt]; I2 for erf in its arcsine form I2(c, d) = (2/pi) asin(Omega_cd r_c r_d), r_c = (1 +
// Omega_cc)^(-1/2) (the diagonal too), for relu angle_pair_grad<Relu>'s value (diagonal Omega_cc / 2), quadratic
// Omega_cc Omega_dd + 2 Omega_cd^2 (diagonal 3 Omega_cc^2), linear Omega_cd. y: state lanes (lane-major); P, v:
// lane-major teacher; risk: L values.
template <int L, Activation G, int KC = 0, int MC = 0>
TWOLAYER_HD void committee_risk_lanes(const LaneShape& s, const double* __restrict P, const double* __restrict v,
                                      const double* __restrict y, double* __restrict risk) {
  static_assert(committee_lanes_activation(G), "lanes: erf, relu, quadratic or linear committees");
  constexpr int UM = KC > 0 ? KC + MC : 2 * kLaneUnitsCap;
  const int K = KC > 0 ? KC : s.K, M = MC > 0 ? MC : s.M, u = std::min(K + M, UM);
  constexpr double two_over_pi = 2.0 / kPi;
  const double* Mo = y + K * K * L;
  const double* a = Mo + K * M * L;
  auto om = [&](int i, int j) {  // Omega_ij's lanes, i <= j
    return j < K ? y + (i * K + j) * L : i < K ? Mo + (i * M + (j - K)) * L : P + ((i - K) * M + (j - K)) * L;
  };
  double r[UM][L], nrm[UM][L], acc[L];  // erf: (1 + Omega_cc)^(-1/2); relu: Omega_cc^(-1/2), Omega_cc^(1/2)
  TWOLAYER_UNROLL
  for (int c = 0; c < u; ++c) {
    const double* o = om(c, c);
    if constexpr (G == Activation::Erf) {
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) r[c][l] = 1.0 / std::sqrt(1.0 + o[l]);
    } else if constexpr (G == Activation::Relu) {
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        r[c][l] = angle_norm(Activation::Relu, o[l]);
        nrm[c][l] = o[l] * r[c][l];
      }
    }
  }
  (void)r;
  (void)nrm;
  for (int l = 0; l < L; ++l) acc[l] = 0.0;
  TWOLAYER_UNROLL
  for (int c = 0; c < u; ++c) {
    const double* wc = c < K ? a + c * L : v + (c - K) * L;
    TWOLAYER_UNROLL
    for (int d = c; d < u; ++d) {
      const double* wd = d < K ? a + d * L : v + (d - K) * L;
      const double *o = om(c, d), *occ = om(c, c), *odd = om(d, d);
      const double f = c == d ? 0.5 : (c < K && d >= K ? -1.0 : 1.0);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        double i2;
        if constexpr (G == Activation::Erf) {
          i2 = two_over_pi * asin_simd(o[l] * r[c][l] * r[d][l]);
        } else if constexpr (G == Activation::Relu) {
          i2 = c == d ? 0.5 * o[l] : angle_pair_grad<Activation::Relu>(nrm[c][l], r[c][l], nrm[d][l], r[d][l], o[l]).v;
        } else if constexpr (G == Activation::Quadratic) {
          i2 = c == d ? 3.0 * o[l] * o[l] : occ[l] * odd[l] + 2.0 * o[l] * o[l];
        } else {
          i2 = o[l];
        }
        acc[l] += f * wc[l] * wd[l] * i2;
      }
    }
  }
  for (int l = 0; l < L; ++l) risk[l] = acc[l];
}

// The erf committee's risk lanes (the one implementation above).
template <int L, int KC = 0, int MC = 0>
TWOLAYER_HD void erf_risk_lanes(const LaneShape& s, const double* __restrict P, const double* __restrict v,
                                const double* __restrict y, double* __restrict risk) {
  committee_risk_lanes<L, Activation::Erf, KC, MC>(s, P, v, y, risk);
}

// committee_rhs_lanes<L, G, KC, MC> and committee_risk_lanes<L, G, KC, MC> for the sizes compiled with fixed K and M
// (K, M <= 4), the run-time size otherwise; nullptr for an activation the lanes do not implement.
using CommitteeRhsLanesFn = void (*)(const LaneShape&, const LaneParams&, const double*, double*, double*);
using CommitteeRiskLanesFn = void (*)(const LaneShape&, const double*, const double*, const double*, double*);
template <int L, Activation G>
CommitteeRhsLanesFn select_committee_rhs_lanes(int K, int M) {
  static constexpr CommitteeRhsLanesFn small[4][4] = {
      {&committee_rhs_lanes<L, G, 1, 1>, &committee_rhs_lanes<L, G, 1, 2>, &committee_rhs_lanes<L, G, 1, 3>,
       &committee_rhs_lanes<L, G, 1, 4>},
      {&committee_rhs_lanes<L, G, 2, 1>, &committee_rhs_lanes<L, G, 2, 2>, &committee_rhs_lanes<L, G, 2, 3>,
       &committee_rhs_lanes<L, G, 2, 4>},
      {&committee_rhs_lanes<L, G, 3, 1>, &committee_rhs_lanes<L, G, 3, 2>, &committee_rhs_lanes<L, G, 3, 3>,
       &committee_rhs_lanes<L, G, 3, 4>},
      {&committee_rhs_lanes<L, G, 4, 1>, &committee_rhs_lanes<L, G, 4, 2>, &committee_rhs_lanes<L, G, 4, 3>,
       &committee_rhs_lanes<L, G, 4, 4>}};
  if (K <= 4 && M <= 4) return small[K - 1][M - 1];
  return &committee_rhs_lanes<L, G, 0, 0>;
}
template <int L, Activation G>
CommitteeRiskLanesFn select_committee_risk_lanes(int K, int M) {
  static constexpr CommitteeRiskLanesFn small[4][4] = {
      {&committee_risk_lanes<L, G, 1, 1>, &committee_risk_lanes<L, G, 1, 2>, &committee_risk_lanes<L, G, 1, 3>,
       &committee_risk_lanes<L, G, 1, 4>},
      {&committee_risk_lanes<L, G, 2, 1>, &committee_risk_lanes<L, G, 2, 2>, &committee_risk_lanes<L, G, 2, 3>,
       &committee_risk_lanes<L, G, 2, 4>},
      {&committee_risk_lanes<L, G, 3, 1>, &committee_risk_lanes<L, G, 3, 2>, &committee_risk_lanes<L, G, 3, 3>,
       &committee_risk_lanes<L, G, 3, 4>},
      {&committee_risk_lanes<L, G, 4, 1>, &committee_risk_lanes<L, G, 4, 2>, &committee_risk_lanes<L, G, 4, 3>,
       &committee_risk_lanes<L, G, 4, 4>}};
  if (K <= 4 && M <= 4) return small[K - 1][M - 1];
  return &committee_risk_lanes<L, G, 0, 0>;
}
template <int L>
CommitteeRhsLanesFn select_committee_rhs_lanes(Activation g, int K, int M) {
  switch (g) {
    case Activation::Erf: return select_committee_rhs_lanes<L, Activation::Erf>(K, M);
    case Activation::Relu: return select_committee_rhs_lanes<L, Activation::Relu>(K, M);
    case Activation::Quadratic: return select_committee_rhs_lanes<L, Activation::Quadratic>(K, M);
    case Activation::Linear: return select_committee_rhs_lanes<L, Activation::Linear>(K, M);
    default: return nullptr;
  }
}
template <int L>
CommitteeRiskLanesFn select_committee_risk_lanes(Activation g, int K, int M) {
  switch (g) {
    case Activation::Erf: return select_committee_risk_lanes<L, Activation::Erf>(K, M);
    case Activation::Relu: return select_committee_risk_lanes<L, Activation::Relu>(K, M);
    case Activation::Quadratic: return select_committee_risk_lanes<L, Activation::Quadratic>(K, M);
    case Activation::Linear: return select_committee_risk_lanes<L, Activation::Linear>(K, M);
    default: return nullptr;
  }
}

// The erf committee's selections (the CPU batch path's lanes, batch_integrators.cpp).
using ErfRhsLanesFn = CommitteeRhsLanesFn;
using ErfRiskLanesFn = CommitteeRiskLanesFn;
template <int L>
ErfRhsLanesFn select_erf_rhs_lanes(int K, int M) {
  return select_committee_rhs_lanes<L, Activation::Erf>(K, M);
}
template <int L>
ErfRiskLanesFn select_erf_risk_lanes(int K, int M) {
  return select_committee_risk_lanes<L, Activation::Erf>(K, M);
}

// omega_check_lanes<L, KC, MC> likewise.
using OmegaCheckLanesFn = void (*)(const LaneShape&, const double*, const double*, const double*, double*, int*);
template <int L>
OmegaCheckLanesFn select_omega_check_lanes(int K, int M) {
  static constexpr OmegaCheckLanesFn small[4][4] = {
      {&omega_check_lanes<L, 1, 1>, &omega_check_lanes<L, 1, 2>, &omega_check_lanes<L, 1, 3>, &omega_check_lanes<L, 1, 4>},
      {&omega_check_lanes<L, 2, 1>, &omega_check_lanes<L, 2, 2>, &omega_check_lanes<L, 2, 3>, &omega_check_lanes<L, 2, 4>},
      {&omega_check_lanes<L, 3, 1>, &omega_check_lanes<L, 3, 2>, &omega_check_lanes<L, 3, 3>, &omega_check_lanes<L, 3, 4>},
      {&omega_check_lanes<L, 4, 1>, &omega_check_lanes<L, 4, 2>, &omega_check_lanes<L, 4, 3>, &omega_check_lanes<L, 4, 4>}};
  if (K <= 4 && M <= 4) return small[K - 1][M - 1];
  return &omega_check_lanes<L, 0, 0>;
}

}  // namespace twolayer

