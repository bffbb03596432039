// The erf pair moments with means in closed form (gaussian_mean.hpp, "erf pairs"), s(x) = erf(x / sqrt 2), written
// once over L pairs at once ("lanes", batch_dynamics.hpp: the lane index innermost, lane l of an array at [l]): L = 1
// is the one-system pair_moment (gaussian_mean.cpp), L = kBatchLanes the erf committees with biases in SIMD lanes
// (batch_dynamics_bias.hpp). (l1, l2) ~ N((mu1, mu2), [[x, y], [y, z]]), a_k = sqrt(1 + C_kk), h_k = mu_k / a_k:
//   E[s(l1) s(l2)] = s(h1) s(h2) + 4 T(h1, h2; rho), rho = y / (a1 a2), T the Drezner-Wesolowsky integral
//     1/(2 pi) int_0^asin(rho) exp(-(h1^2 + h2^2 - 2 h1 h2 sin th) / (2 cos^2 th)) dth by Gauss-Legendre with Genz's
//     node counts (6, 12, 20 below |rho| = 0.3, 0.75, 0.925; the nodes of gauss_legendre_nodes): each lane sums over
//     the largest node count of the block, its own nodes beyond its count weighted 0 (adding +0 changes no sum), and
//     a lane with |rho| >= 0.925 takes erf_pair_moment00_near_one (scalar);
//   i >= 1: E[s^(i)(l1) s^(j)(l2)] = A sum_l binom(i - 1, l) He_(i-1-l) (-kappa)^l S^(j+l)(m, sd) (the mu1-derivatives
//     of the tilted law, Leibniz), A = 2 phi(h1) / a1, kappa = y / (1 + x), m = mu2 - kappa mu1,
//     sd^2 = (z + det C) / (1 + x), He_n = (-1)^n He_n(h1) / a1^n, S^(k) the erf smoothing's m-derivatives:
//     S = erf(w / sqrt 2), S' = g = sqrt(2/pi) e^(-w^2/2) / sqrt(v), S^(k) = g He_(k-1)(w) (-1)^(k-1) / v^((k-1)/2),
//     v = 1 + sd^2, w = m / sqrt(v).
// The elementary functions are a parameter: Libm (std::exp, sin, asin: the one-system values) or Simd (simd_math.hpp,
// vectorisable, within 2 ulp of those: the lanes). erf is libm's, called lane by lane. A lane's value is the same
// sequence of IEEE operations whatever L is where the including file is compiled with -ffp-contract=off (the lanes;
// gaussian_mean.cpp keeps the default contraction, so its values are these expressions as the compiler fuses them).
// Host only (a static node table, the scalar near-one branch).
#pragma once
#include <algorithm>
#include <cmath>

#include "twolayer/activation.hpp"
#include "twolayer/gaussian_mean.hpp"
#include "twolayer/simd_math.hpp"

namespace twolayer {

// The elementary functions of the erf pair moments: the C library's, or simd_math.hpp's branch-free ones.
struct LibmMath {
  static double exp(double x) { return std::exp(x); }
  static double sin(double x) { return std::sin(x); }
  static double asin(double x) { return std::asin(x); }
};
struct SimdMath {
  TWOLAYER_ALWAYS_INLINE static double exp(double x) { return exp_simd(x); }
  TWOLAYER_ALWAYS_INLINE static double sin(double x) { return sin_simd(x); }
  TWOLAYER_ALWAYS_INLINE static double asin(double x) { return asin_simd(x); }
};

// E[s(l1) s(l2)] for |rho| >= 0.925 (gaussian_mean.cpp): 4 P(X > -h1, Y > -h2) - 2 Phi(h1) - 2 Phi(h2) + 1 with the
// near-one branch of the bivariate orthant probability (acos |rho| = atan2(sqrt D, |y|), D = (1 + x)(1 + z) - y^2).
double erf_pair_moment00_near_one(double mu1, double mu2, double x, double y, double z);

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

// out[l] = E[s(l1) s(l2)] of lane l (see the header comment).
template <int L, class Math>
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
    half[l] = 0.5 * Math::asin(ar < 0.925 ? r : 0.0);
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
      const double sn = Math::sin(half[l] * (1.0 + xi));
      const double inv = 1.0 / ((1.0 - sn) * (1.0 + sn));
      const double wt = wi * half[l] * inv_two_pi;
      sum[l] += wt * Math::exp((sn * hk[l] - hs[l]) * inv);
    }
  }
  for (int l = 0; l < L; ++l) out[l] = std::erf(h1[l] / kSqrt2) * std::erf(h2[l] / kSqrt2) + 4.0 * sum[l];  // libm
  for (int l = 0; l < L; ++l)
    if (row[l] == 3) out[l] = erf_pair_moment00_near_one(mu1[l], mu2[l], x0[l], y[l], z0[l]);
}

// What the pair moments with s^(i)(l1), i >= 1, take from the first unit l1 ~ N(mu1, x) alone, for i <= top_i:
// a1 = sqrt(1 + x), A = 2 phi(h1) / a1 and the Hermite factors He_n (n < top_i), formed once per first unit.
template <int L>
struct ErfTiltFirst {
  int top_i;
  double x[L], a1[L], A[L], he[4][L];
};
template <int L, class Math>
void erf_tilt_first_lanes(int top_i, const double* __restrict mu1, const double* __restrict x0, ErfTiltFirst<L>& f) {
  constexpr double inv_sqrt_2pi = 0.39894228040143267794;
  double h1[L];
  f.top_i = top_i;
  TWOLAYER_LANES
  for (int l = 0; l < L; ++l) {
    f.x[l] = std::max(x0[l], 0.0);
    f.a1[l] = std::sqrt(1.0 + f.x[l]);
    h1[l] = mu1[l] / f.a1[l];
    f.A[l] = 2.0 * (inv_sqrt_2pi * Math::exp(-0.5 * h1[l] * h1[l])) / f.a1[l];
    f.he[0][l] = 1.0;
    f.he[1][l] = -h1[l] / f.a1[l];
  }
  // one loop per order (no product shared between the orders' expressions: the same contractions as one order alone)
  if (top_i > 2) {
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) f.he[2][l] = (h1[l] * h1[l] - 1.0) / (1.0 + f.x[l]);
  }
  if (top_i > 3) {
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) f.he[3][l] = -(h1[l] * h1[l] - 3.0) * h1[l] / ((1.0 + f.x[l]) * f.a1[l]);
  }
}

// out[e][l] = E[s^(i)(l1) s^(j)(l2)] of lane l for the n orders (i, j) = ij[e], 1 <= i <= f.top_i, i + j <= 4 (see
// the header comment), f = erf_tilt_first_lanes of (mu1, x): one tilt per lane for all the orders. Only the smoothing
// derivatives that the orders use are formed (S only where some j = 0).
template <int L, class Math>
void erf_tilted_moments_lanes(const int (*ij)[2], int n, const ErfTiltFirst<L>& f, const double* __restrict mu1,
                              const double* __restrict mu2, const double* __restrict y, const double* __restrict z0,
                              double (*out)[L]) {
  static constexpr double kBinomial[4][4] = {{1, 0, 0, 0}, {1, 1, 0, 0}, {1, 2, 1, 0}, {1, 3, 3, 1}};
  int top_k = 1;
  bool value = false;
  for (int e = 0; e < n; ++e) {
    top_k = std::max(top_k, ij[e][1] + ij[e][0] - 1);
    value = value || ij[e][1] == 0;
  }
  double kappa[L], w[L], v[L], rv[L], S[5][L];
  TWOLAYER_LANES
  for (int l = 0; l < L; ++l) {
    const double x = f.x[l], z = std::max(z0[l], 0.0), yv = y[l], yy = yv * yv;
    // det C = x z - y^2 to a few ulps of itself (Kahan's fma form: exact for an exactly singular C given in doubles),
    // so that the tilted variance keeps its relative accuracy when large variances nearly cancel
    const double det = std::max(std::fma(x, z, -yy) + std::fma(-yv, yv, yy), 0.0);
    kappa[l] = yv / (1.0 + x);
    const double m = mu2[l] - kappa[l] * mu1[l], sd = std::sqrt((z + det) / (1.0 + x));
    v[l] = 1.0 + sd * sd;
    rv[l] = std::sqrt(v[l]);
    w[l] = m / rv[l];
    S[1][l] = kSqrt2OverPi / rv[l] * Math::exp(-0.5 * w[l] * w[l]);
  }
  if (value)
    for (int l = 0; l < L; ++l) S[0][l] = std::erf(w[l] / kSqrt2);  // libm, lane by lane
  if (top_k > 1) {
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) S[2][l] = -w[l] / rv[l] * S[1][l];
  }
  if (top_k > 2) {
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) S[3][l] = (w[l] * w[l] - 1.0) / v[l] * S[1][l];
  }
  if (top_k > 3) {
    TWOLAYER_LANES
    for (int l = 0; l < L; ++l) S[4][l] = (3.0 * w[l] - w[l] * w[l] * w[l]) / (v[l] * rv[l]) * S[1][l];
  }
  // one lane loop over all the orders (their terms unrolled where the orders are constants, as in the lanes)
  TWOLAYER_LANES
  for (int l = 0; l < L; ++l) {
    for (int e = 0; e < n; ++e) {
      const int i = ij[e][0], j = ij[e][1];
      double r = 0.0, dm = 1.0;  // dm = (-kappa)^t
      for (int t = 0; t < i; ++t) {
        r += kBinomial[i - 1][t] * f.he[i - 1 - t][l] * dm * S[j + t][l];
        dm *= -kappa[l];
      }
      out[e][l] = f.A[l] == 0.0 ? 0.0 : f.A[l] * r;  // every term carries phi(h1)
    }
  }
}

}  // namespace twolayer
