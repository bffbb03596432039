// The erf committee's order-parameter right-hand side and risk with biases (dynamics.hpp, "Biases") of L systems at
// once, in the lanes of batch_dynamics.hpp (lane-major arrays, the lane index innermost, the same IEEE operations in
// every lane whatever L is; included only by files compiled with -ffp-contract=off). The arithmetic is OdeRhs's
// eval_bias and risk_bias for student and teacher erf, s(x) = erf(x / sqrt 2):
//   the pair moments E[s'(l_i) s(l_c)], E[s'(l_i) s'(l_c)], E[s''(l_i) s(l_c)] and E[s(l_i) s(l_c)] with means are
//     gaussian_erf_mean.hpp's closed forms over the lanes, the one implementation that the one-system pair_moment
//     (L = 1) calls too, here with simd_math.hpp's exp, sin and asin (SimdMath) so that the lane loops vectorise;
//   I4 with means by conditioning the pair (l_i, l_k) observed at 0 with unit noise (gaussian_mean.cpp's
//     condition_first_pair): (2/pi) det(I + C_AA)^(-1/2) exp(-mu_A^T (I + C_AA)^-1 mu_A / 2) E[s s] of the
//     conditioned (l_j, l_l).
// The one-system path differs from these values in the last bits only (libm's exp, sin and asin; the zero-mean
// kernels where every mean is 0): tests/test_ode_lanes.py holds the two to 1e-14.
#pragma once
#include <algorithm>
#include <cmath>

#include "twolayer/activation.hpp"
#include "twolayer/batch_dynamics.hpp"
#include "twolayer/gaussian_erf_mean.hpp"
#include "twolayer/simd_math.hpp"

namespace twolayer {

// The per-lane parameters of the biases, lane-major: teacher_bias [r * L + l], lr_bias [l].
struct LaneBiasParams {
  const double* teacher_bias;
  const double* lr_bias;
};

// Steps 2 and 3 of the lane right-hand sides that sum per unit (erf with biases here, sin and cos in
// batch_dynamics_trig.hpp), over the u = K + M units (om(r, c): the lanes' Omega_rc):
//   Psi_ic = E[s'(l_i) c_c E] = Omega_ic A_i + sum_q B_iq Omega_qc,
//   Phi_ik = lr (a_i Psi_ik + a_k Psi_ki) (i <= k), dM_ir = lr a_i Psi_i,K+r.
template <int L, class Omega>
void first_order_lanes(const LaneShape& s, const LaneParams& p, const Omega& om, double (*Ai)[L],
                       double (*Bm)[2 * kLaneUnitsCap][L], const double* a, double (*phi)[kLaneUnitsCap][L],
                       double* dM) {
  const int K = s.K, M = s.M, u = K + M;
  double psi[kLaneUnitsCap][2 * kLaneUnitsCap][L];
  for (int i = 0; i < K; ++i)
    for (int c = 0; c < u; ++c) {
      const double* oic = om(i, c);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) psi[i][c][l] = oic[l] * Ai[i][l];
      for (int q = 0; q < u; ++q) {
        const double* oqc = om(q, c);
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) psi[i][c][l] += Bm[i][q][l] * oqc[l];
      }
    }
  for (int i = 0; i < K; ++i) {
    const double* ai = a + i * L;
    for (int k = i; k < K; ++k) {
      const double* ak = a + k * L;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) phi[i][k][l] = p.lr[l] * (ai[l] * psi[i][k][l] + ak[l] * psi[k][i][l]);
    }
    for (int r = 0; r < M; ++r) {
      double* d = dM + (i * M + r) * L;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) d[l] = p.lr[l] * ai[l] * psi[i][K + r][l];
    }
  }
}

// Steps 5 and 6 of the lane right-hand sides that sum per unit (erf with biases here, sin and cos in
// batch_dynamics_trig.hpp), from Phi_ik (phi), the readout pull V_i and the bias pull G_i:
//   dQ_ik = Phi_ik (symmetric), spherical: Phi_ik - Q_ik (Phi_ii + Phi_kk) / 2 and dQ_ii = 0, dM_ir -= M_ir Phi_ii / 2
//   (the biases are not projected); da_i = lr_readout V_i; db_i = lr_bias a_i G_i (lr_bias == nullptr: no biases).
template <int L>
void finish_unit_lanes(const LaneShape& s, const LaneParams& p, const double* lr_bias,
                       double (*phi)[kLaneUnitsCap][L], double (*V)[L], double (*G)[L], const double* Q,
                       const double* Mo, const double* a, double* dQ, double* dM, double* da, double* db) {
  const int K = s.K, M = s.M;
  for (int i = 0; i < K; ++i)
    for (int k = i; k < K; ++k) {
      const double* qik = Q + (i * K + k) * L;
      double *d1 = dQ + (i * K + k) * L, *d2 = dQ + (k * K + i) * L;
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        const double v = !s.spherical ? phi[i][k][l]
                         : i == k     ? 0.0
                                      : phi[i][k][l] - 0.5 * qik[l] * (phi[i][i][l] + phi[k][k][l]);
        d1[l] = d2[l] = v;
      }
    }
  if (s.spherical)
    for (int i = 0; i < K; ++i)
      for (int r = 0; r < M; ++r) {
        double* d = dM + (i * M + r) * L;
        const double* mr = Mo + (i * M + r) * L;
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) d[l] -= 0.5 * mr[l] * phi[i][i][l];
      }
  for (int i = 0; i < K; ++i) {
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) da[i * L + l] = p.lr_readout[l] != 0.0 ? p.lr_readout[l] * V[i][l] : 0.0;
  }
  if (lr_bias)
    for (int i = 0; i < K; ++i) {
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) db[i * L + l] = lr_bias[l] * a[i * L + l] * G[i][l];
    }
}

// dy = f(y) for L lanes of erf committees with biases of shape s (see the header comment; dynamics.hpp "Biases").
// y, dy: the state with biases, [Q (K x K), M (K x M), a (K), b (K)] per lane, lane-major; K, M <= kLaneUnitsCap.
template <int L>
void erf_bias_rhs_lanes(const LaneShape& s, const LaneParams& p, const LaneBiasParams& pb, const double* __restrict y,
                        double* __restrict dy) {
  constexpr int UM = 2 * kLaneUnitsCap, KM = kLaneUnitsCap;
  constexpr double two_over_pi = 2.0 / kPi;
  const int K = s.K, M = s.M, u = K + M;
  const double* Q = y;
  const double* Mo = y + K * K * L;
  const double* a = Mo + K * M * L;
  const double* b = a + K * L;
  auto om = [&](int row, int col) {
    return row < K ? (col < K ? Q + (row * K + col) * L : Mo + (row * M + col - K) * L)
                   : (col < K ? Mo + (col * M + row - K) * L : p.P + ((row - K) * M + col - K) * L);
  };
  bool readout = false;
  for (int l = 0; l < L; ++l) readout = readout || p.lr_readout[l] != 0.0;
  double w[UM][L], mu[UM][L];
  for (int j = 0; j < K; ++j)
    for (int l = 0; l < L; ++l) w[j][l] = -a[j * L + l], mu[j][l] = b[j * L + l];
  for (int r = 0; r < M; ++r)
    for (int l = 0; l < L; ++l) w[K + r][l] = p.v[r * L + l], mu[K + r][l] = pb.teacher_bias[r * L + l];
  // 1. Per student i: A_i = sum_c w_c E[s''(l_i) s(l_c)], B_ic = w_c E[s'(l_i) s'(l_c)] (J_ik unweighted: the noise
  //    term), the bias pull G_i = sum_c w_c E[s'(l_i) s(l_c)], the readout pull V_i = sum_c w_c E[s(l_i) s(l_c)].
  double Ai[KM][L], Bm[KM][UM][L], J[KM][KM][L], G[KM][L], V[KM][L];
  static constexpr int kOrders[3][2] = {{1, 0}, {1, 1}, {2, 0}};
  for (int i = 0; i < K; ++i) {
    const double* oii = om(i, i);
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) Ai[i][l] = 0.0, G[i][l] = 0.0, V[i][l] = 0.0;
    ErfTiltFirst<L> first;
    erf_tilt_first_lanes<L, SimdMath>(2, mu[i], oii, first);
    for (int c = 0; c < u; ++c) {
      const double *oic = om(i, c), *occ = om(c, c);
      double m[3][L];  // E[s'(l_i) s(l_c)], E[s'(l_i) s'(l_c)], E[s''(l_i) s(l_c)]
      erf_tilted_moments_lanes<L, SimdMath>(kOrders, 3, first, mu[i], mu[c], oic, occ, m);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        Ai[i][l] += w[c][l] * m[2][l];
        Bm[i][c][l] = w[c][l] * m[1][l];
        if (c < K) J[i][c][l] = m[1][l];
        G[i][l] += w[c][l] * m[0][l];
      }
      if (readout) {
        double m00[L];
        erf_pair_moment00_lanes<L, SimdMath>(mu[i], mu[c], oii, oic, occ, m00);
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) V[i][l] += w[c][l] * m00[l];
      }
    }
  }
  double phi[KM][KM][L];
  double* dQ = dy;
  double* dM = dy + K * K * L;
  double* da = dM + K * M * L;
  double* db = da + K * L;
  first_order_lanes<L>(s, p, om, Ai, Bm, a, phi, dM);
  // 4. Online: lr^2 a_i a_k (sum_{j <= m} (2 - [j = m]) w_j w_m I4(l_i, l_k, l_j, l_m) + Delta J_ik), i <= k.
  if (s.online) {
    for (int i = 0; i < K; ++i)
      for (int k = i; k < K; ++k) {
        const double *oii = om(i, i), *oik = om(i, k), *okk = om(k, k);
        double i11[L], i12[L], i22[L], dens[L], quad[L];
        auto qf = [&](int l, double u1, double u2, double v1, double v2) {
          return u1 * (i11[l] * v1 + i12[l] * v2) + u2 * (i12[l] * v1 + i22[l] * v2);
        };
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) {
          const double a11 = oii[l] + 1.0, a12 = oik[l], a22 = okk[l] + 1.0, det = a11 * a22 - a12 * a12;
          i11[l] = a22 / det;
          i12[l] = -a12 / det;
          i22[l] = a11 / det;
          dens[l] = two_over_pi * (exp_simd(-0.5 * qf(l, mu[i][l], mu[k][l], mu[i][l], mu[k][l])) / std::sqrt(det));
          quad[l] = 0.0;
        }
        // the conditioned means and variances of every unit j
        double cm[UM][L], cv[UM][L];
        for (int j = 0; j < u; ++j) {
          const double *bj1 = om(j, i), *bj2 = om(j, k), *ojj = om(j, j);
          TWOLAYER_LANES
          for (int l = 0; l < L; ++l) {
            cv[j][l] = std::max(0.0, ojj[l] - qf(l, bj1[l], bj2[l], bj1[l], bj2[l]));
            cm[j][l] = mu[j][l] - qf(l, bj1[l], bj2[l], mu[i][l], mu[k][l]);
          }
        }
        for (int j = 0; j < u; ++j)
          for (int m = j; m < u; ++m) {
            const double *bj1 = om(j, i), *bj2 = om(j, k), *bm1 = om(m, i), *bm2 = om(m, k), *ojm = om(j, m);
            double cjm[L], e2[L];
            TWOLAYER_LANES
            for (int l = 0; l < L; ++l) cjm[l] = ojm[l] - qf(l, bj1[l], bj2[l], bm1[l], bm2[l]);
            erf_pair_moment00_lanes<L, SimdMath>(cm[j], cm[m], cv[j], cjm, cv[m], e2);
            const double f = j == m ? 1.0 : 2.0;
            TWOLAYER_LANES
            for (int l = 0; l < L; ++l) quad[l] += f * w[j][l] * w[m][l] * (dens[l] * e2[l]);
          }
        const double *ai = a + i * L, *ak = a + k * L;
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l)
          phi[i][k][l] += p.lr[l] * p.lr[l] * ai[l] * ak[l] * (quad[l] + p.noise[l] * J[i][k][l]);
      }
  }
  finish_unit_lanes<L>(s, p, pb.lr_bias, phi, V, G, Q, Mo, a, dQ, dM, da, db);
}

// The excess risk of L lanes of erf committees with biases, OdeRhs::risk_bias's order of terms: risk_tt (the fixed
// teacher-teacher part, per lane) + sum_i sum_{c >= i} (1/2 if c = i) w_i w_c E[s(l_i) s(l_c)], w = (-a, v).
template <int L>
void erf_bias_risk_lanes(const LaneShape& s, const double* __restrict P, const double* __restrict v,
                         const double* __restrict teacher_bias, const double* __restrict risk_tt,
                         const double* __restrict y, double* __restrict risk) {
  const int K = s.K, M = s.M, u = K + M;
  const double* Q = y;
  const double* Mo = y + K * K * L;
  const double* a = Mo + K * M * L;
  const double* b = a + K * L;
  auto om = [&](int row, int col) {  // row < K
    return col < K ? Q + (row * K + col) * L : Mo + (row * M + col - K) * L;
  };
  auto wt = [&](int c) { return c < K ? a + c * L : v + (c - K) * L; };
  auto mean = [&](int c) { return c < K ? b + c * L : teacher_bias + (c - K) * L; };
  double acc[L];
  for (int l = 0; l < L; ++l) acc[l] = risk_tt[l];
  for (int i = 0; i < K; ++i)
    for (int c = i; c < u; ++c) {
      const double* occ = c < K ? om(c, c) : P + ((c - K) * M + c - K) * L;
      double pm[L];
      erf_pair_moment00_lanes<L, SimdMath>(mean(i), mean(c), om(i, i), om(i, c), occ, pm);
      const double f = c == i ? 0.5 : 1.0, si = -1.0, sc = c < K ? -1.0 : 1.0;
      const double *wi = wt(i), *wc = wt(c);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) acc[l] += f * (si * wi[l]) * (sc * wc[l]) * pm[l];
    }
  for (int l = 0; l < L; ++l) risk[l] = acc[l];
}

}  // namespace twolayer
