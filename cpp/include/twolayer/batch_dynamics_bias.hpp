// The erf committee's order-parameter right-hand side and risk with biases (dynamics.hpp, "Biases") of L systems at
// once, in the lanes of batch_dynamics.hpp (lane-major arrays, the lane index innermost, the same IEEE operations in
// every lane whatever L is; included only by files compiled with -ffp-contract=off). The arithmetic is OdeRhs's
// eval_bias and risk_bias for student and teacher erf, with gaussian_mean.cpp's closed-form erf pair moments written
// over the lanes (s(x) = erf(x / sqrt 2), a_k = sqrt(1 + C_kk), h_k = mu_k / a_k):
//   E[s'(l1) g(l2)] = A E[g(m + sd u)], A = 2 phi(h1) / a1, m = mu2 - kappa mu1, kappa = C12 / (1 + C11),
//     sd^2 = (C22 + det C) / (1 + C11); the orders (1, 0), (1, 1) and (2, 0) (the mu1-derivative, Leibniz) through
//     the erf smoothing S(m, sd) = erf(w / sqrt 2), S' = sqrt(2/pi) e^(-w^2/2) / sqrt(1 + sd^2), w = m / sqrt(1 + sd^2);
//   E[s(l1) s(l2)] = s(h1) s(h2) + 4 T(h1, h2; rho), rho = C12 / (a1 a2), T the Drezner-Wesolowsky integral by
//     Gauss-Legendre with Genz's node counts (6, 12, 20 below |rho| = 0.3, 0.75, 0.925, the nodes of
//     gauss_legendre_nodes); each lane sums over the largest node count of the block, its own nodes beyond its count
//     weighted 0 (adding +0 changes no sum), and a lane with |rho| >= 0.925 takes the one-system pair_moment (the
//     near-one branch, scalar);
//   I4 with means by conditioning the pair (l_i, l_k) observed at 0 with unit noise (gaussian_mean.cpp's
//     condition_first_pair): (2/pi) det(I + C_AA)^(-1/2) exp(-mu_A^T (I + C_AA)^-1 mu_A / 2) E[s s] of the
//     conditioned (l_j, l_l).
// exp and sin are exp_simd and sin_simd (simd_math.hpp), arcsine asin_simd, so that the lane loops vectorise; erf is
// libm's, called lane by lane. The one-system path differs from these values in the last bits only (libm's exp, sin
// and asin; the zero-mean kernels where every mean is 0): tests/test_ode_lanes.py holds the two to 1e-13.
#pragma once
#include <algorithm>
#include <cmath>

#include "twolayer/activation.hpp"
#include "twolayer/batch_dynamics.hpp"
#include "twolayer/gaussian_mean.hpp"
#include "twolayer/simd_math.hpp"

namespace twolayer {

// The per-lane parameters of the biases, lane-major: teacher_bias [r * L + l], lr_bias [l].
struct LaneBiasParams {
  const double* teacher_bias;
  const double* lr_bias;
};

namespace detail {

// Genz's three rules padded to 20 nodes with weight 0 (row 3: no nodes, the near-one lanes).
struct GenzNodeTable {
  double x[4][20] = {}, w[4][20] = {};
  GenzNodeTable() {
    const int n[3] = {6, 12, 20};
    for (int r = 0; r < 3; ++r) {
      const GaussLegendreNodes g = gauss_legendre_nodes(n[r]);
      for (int i = 0; i < n[r]; ++i) x[r][i] = g.x[i], w[r][i] = g.w[i];
    }
  }
};
inline const GenzNodeTable& genz_node_table() {
  static const GenzNodeTable t;
  return t;
}

}  // namespace detail

// out[l] = E[s(l1) s(l2)], (l1, l2) ~ N((mu1, mu2), [[x, y], [y, z]]) for L lanes (see the header comment).
template <int L>
void erf_pair_moment00_lanes(const double* __restrict mu1, const double* __restrict mu2, const double* __restrict x0,
                             const double* __restrict y, const double* __restrict z0, double* __restrict out) {
  const detail::GenzNodeTable& T = detail::genz_node_table();
  double h1[L], h2[L], half[L], hs[L], hk[L], sum[L];
  int row[L];
  TWOLAYER_LANES
  for (int l = 0; l < L; ++l) {
    const double x = std::max(x0[l], 0.0), z = std::max(z0[l], 0.0);
    const double a1 = std::sqrt(1.0 + x), a2 = std::sqrt(1.0 + z);
    h1[l] = mu1[l] / a1;
    h2[l] = mu2[l] / a2;
    const double r = y[l] / (a1 * a2), ar = std::fabs(r);
    row[l] = ar < 0.3 ? 0 : ar < 0.75 ? 1 : ar < 0.925 ? 2 : 3;
    half[l] = 0.5 * asin_simd(ar < 0.925 ? r : 0.0);
    hs[l] = 0.5 * (h1[l] * h1[l] + h2[l] * h2[l]);
    hk[l] = h1[l] * h2[l];
    sum[l] = 0.0;
  }
  int nodes = 0;
  for (int l = 0; l < L; ++l) nodes = std::max(nodes, row[l] == 0 ? 6 : row[l] == 1 ? 12 : row[l] == 2 ? 20 : 0);
  constexpr double inv_two_pi = 1.0 / (2.0 * kPi);
  for (int i = 0; i < nodes; ++i) {
    const double x6 = T.x[0][i], x12 = T.x[1][i], x20 = T.x[2][i];
    const double w6 = T.w[0][i], w12 = T.w[1][i], w20 = T.w[2][i];
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) {
      const int r = row[l];
      const double xi = r == 0 ? x6 : r == 1 ? x12 : x20;
      const double wi = r == 0 ? w6 : r == 1 ? w12 : r == 2 ? w20 : 0.0;
      const double sn = sin_simd(half[l] * (1.0 + xi));
      const double inv = 1.0 / ((1.0 - sn) * (1.0 + sn));
      const double wt = wi * half[l] * inv_two_pi;
      sum[l] += wt * exp_simd((sn * hk[l] - hs[l]) * inv);
    }
  }
  for (int l = 0; l < L; ++l) out[l] = std::erf(h1[l] / kSqrt2) * std::erf(h2[l] / kSqrt2);  // libm, lane by lane
  TWOLAYER_LANES
  for (int l = 0; l < L; ++l) out[l] += 4.0 * sum[l];
  for (int l = 0; l < L; ++l)
    if (row[l] == 3) out[l] = pair_moment(Activation::Erf, 0, Activation::Erf, 0, mu1[l], mu2[l], x0[l], y[l], z0[l]);
}

// dy = f(y) for L lanes of erf committees with biases of shape s (see the header comment; dynamics.hpp "Biases").
// y, dy: the state with biases, [Q (K x K), M (K x M), a (K), b (K)] per lane, lane-major; K, M <= kLaneUnitsCap.
template <int L>
void erf_bias_rhs_lanes(const LaneShape& s, const LaneParams& p, const LaneBiasParams& pb, const double* __restrict y,
                        double* __restrict dy) {
  constexpr int UM = 2 * kLaneUnitsCap, KM = kLaneUnitsCap;
  constexpr double inv_sqrt_2pi = 0.39894228040143267794, two_over_pi = 2.0 / kPi;
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
  for (int i = 0; i < K; ++i) {
    const double* oii = om(i, i);
    double x[L], a1[L], h1[L], Aw[L], he1[L];
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) {
      x[l] = std::max(oii[l], 0.0);
      a1[l] = std::sqrt(1.0 + x[l]);
      h1[l] = mu[i][l] / a1[l];
      Aw[l] = 2.0 * (inv_sqrt_2pi * exp_simd(-0.5 * h1[l] * h1[l])) / a1[l];
      he1[l] = -h1[l] / a1[l];
      Ai[i][l] = 0.0, G[i][l] = 0.0, V[i][l] = 0.0;
    }
    for (int c = 0; c < u; ++c) {
      const double *oic = om(i, c), *occ = om(c, c);
      double wv[L], kappa[L], g[L], S0[L];
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        const double z = std::max(occ[l], 0.0), yv = oic[l], yy = yv * yv;
        const double det = std::max(std::fma(x[l], z, -yy) + std::fma(-yv, yv, yy), 0.0);
        kappa[l] = yv / (1.0 + x[l]);
        const double m = mu[c][l] - kappa[l] * mu[i][l], sd = std::sqrt((z + det) / (1.0 + x[l]));
        const double rv = std::sqrt(1.0 + sd * sd);
        wv[l] = m / rv;
        g[l] = kSqrt2OverPi / rv * exp_simd(-0.5 * wv[l] * wv[l]);
      }
      for (int l = 0; l < L; ++l) S0[l] = std::erf(wv[l] / kSqrt2);  // libm, lane by lane
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) {
        const bool zero = Aw[l] == 0.0;  // every moment carries phi(h1)
        const double m10 = zero ? 0.0 : Aw[l] * (0.0 + S0[l]), m11 = zero ? 0.0 : Aw[l] * (0.0 + g[l]);
        const double m20 = zero ? 0.0 : Aw[l] * ((0.0 + he1[l] * S0[l]) + -kappa[l] * g[l]);
        Ai[i][l] += w[c][l] * m20;
        Bm[i][c][l] = w[c][l] * m11;
        if (c < K) J[i][c][l] = m11;
        G[i][l] += w[c][l] * m10;
      }
      if (readout) {
        double m00[L];
        erf_pair_moment00_lanes<L>(mu[i], mu[c], oii, oic, occ, m00);
        TWOLAYER_LANES
        for (int l = 0; l < L; ++l) V[i][l] += w[c][l] * m00[l];
      }
    }
  }
  // 2. Psi_ic = E[s'(l_i) c_c E] = Omega_ic A_i + sum_q B_iq Omega_qc; 3. the first-order terms.
  double psi[KM][UM][L], phi[KM][KM][L];
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
  double* dQ = dy;
  double* dM = dy + K * K * L;
  double* da = dM + K * M * L;
  double* db = da + K * L;
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
            erf_pair_moment00_lanes<L>(cm[j], cm[m], cv[j], cjm, cv[m], e2);
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
  // 5. dQ (symmetric), spherical: the projection of the weights (Q_ii fixed; the biases are not projected).
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
  // 6. The readout and the biases: da_i = lr_readout V_i, db_i = lr_bias a_i G_i.
  for (int i = 0; i < K; ++i) {
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) {
      da[i * L + l] = p.lr_readout[l] != 0.0 ? p.lr_readout[l] * V[i][l] : 0.0;
      db[i * L + l] = pb.lr_bias[l] * a[i * L + l] * G[i][l];
    }
  }
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
      erf_pair_moment00_lanes<L>(mean(i), mean(c), om(i, i), om(i, c), occ, pm);
      const double f = c == i ? 0.5 : 1.0, si = -1.0, sc = c < K ? -1.0 : 1.0;
      const double *wi = wt(i), *wc = wt(c);
      TWOLAYER_LANES
      for (int l = 0; l < L; ++l) acc[l] += f * (si * wi[l]) * (sc * wc[l]) * pm[l];
    }
  for (int l = 0; l < L; ++l) risk[l] = acc[l];
}

}  // namespace twolayer
