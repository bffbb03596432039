// Kernel tables for the order-parameter ODE (see gaussian_tables.hpp). Compiled with -fno-math-errno and
// -fno-trapping-math (CMakeLists.txt) so that the erf fast paths vectorise; results are unchanged.
#include "twolayer/gaussian_tables.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <type_traits>

#include "twolayer/jet.hpp"
#include "twolayer/simd_math.hpp"

namespace twolayer {

namespace {
bool all_are(const Activation* acts, int n, Activation a) {
  for (int j = 0; j < n; ++j)
    if (acts[j] != a) return false;
  return true;
}

// f(std::integral_constant<int, NC>{}) with NC = n for the small sizes that get their own compiled loops (short loops
// unroll), NC = 0 (run-time n) otherwise.
template <class F>
void with_static_size(int n, F&& f) {
  switch (n) {
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return f(std::integral_constant<int, 0>{});
  }
}

// As in i4(): condition every unit j on a Gaussian observation of a pair (x_i, x_k) at 0 with noise variance `noise`
// (1 for erf's s', 0 for step's delta), for L pairs at once (lane l: i = ip[l], k = kp[l]). Outputs are lane-major,
// [j * L + l]: b1, b2 = C_ij, C_kj; t1, t2 = the rows of (C_AA + noise I)^(-1) C_A.; var = the conditioned
// variances clipped at 0; det[l] = det(C_AA + noise I) (the outputs are meaningful only where it is positive).
template <int NC, int L>
inline void condition_on_pairs(const double* C, int n_rt, const int* ip, const int* kp, double noise, double* b1,
                               double* b2, double* t1, double* t2, double* var, double* det) {
  const int n = NC > 0 ? NC : n_rt;
  double i11[L], i12[L], i22[L];
  for (int l = 0; l < L; ++l) {
    const double *ci = C + static_cast<std::ptrdiff_t>(n) * ip[l], *ck = C + static_cast<std::ptrdiff_t>(n) * kp[l];
    const double a11 = ci[ip[l]] + noise, a12 = ci[kp[l]], a22 = ck[kp[l]] + noise;
    det[l] = a11 * a22 - a12 * a12;
    const double idet = 1.0 / det[l];
    i11[l] = a22 * idet;
    i12[l] = -a12 * idet;
    i22[l] = a11 * idet;
    for (int j = 0; j < n; ++j) {
      b1[j * L + l] = ci[j];
      b2[j * L + l] = ck[j];
    }
  }
  for (int j = 0; j < n; ++j) {
    const double cjj = C[static_cast<std::ptrdiff_t>(n + 1) * j];
    double *u1 = b1 + j * L, *u2 = b2 + j * L, *v1 = t1 + j * L, *v2 = t2 + j * L, *vj = var + j * L;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
    for (int l = 0; l < L; ++l) {
      v1[l] = i11[l] * u1[l] + i12[l] * u2[l];
      v2[l] = i12[l] * u1[l] + i22[l] * u2[l];
      vj[l] = std::max(cjj - (u1[l] * v1[l] + u2[l] * v2[l]), 0.0);
    }
  }
}
}  // namespace

std::size_t i2_grad_table_workspace(int n, int /*m*/) { return static_cast<std::size_t>(n) + 8; }

namespace {
// The all-erf table from the erf angle form (angle_pair_grad, gaussian.hpp: r = (1 + C_cc)^(-1/2) per unit), rows
// vectorised over c. The self pair is the same formula at x = y = z = q, whose q-derivative is the sum of the three
// partial derivatives (2 dx + dy). NC > 0: n = NC at compile time.
template <int NC>
void i2_grad_table_erf(const double* C, int n_rt, int m, double* __restrict val, double* __restrict dx,
                       double* __restrict dy, double* __restrict r) {
  const int n = NC > 0 ? NC : n_rt;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
  for (int c = 0; c < n; ++c) r[c] = angle_norm(Activation::Erf, C[c * (n + 1)]);
  for (int i = 0; i < m; ++i) {
    const double ri = r[i];
    const double* ci = C + static_cast<std::ptrdiff_t>(n) * i;
    double *vi = val + static_cast<std::ptrdiff_t>(n) * i, *xi = dx + static_cast<std::ptrdiff_t>(n) * i,
           *yi = dy + static_cast<std::ptrdiff_t>(n) * i;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
    for (int c = 0; c < n; ++c) {
      const PairGrad g = angle_pair_grad<Activation::Erf>(0.0, ri, 0.0, r[c], ci[c]);
      vi[c] = g.v;
      xi[c] = g.gx;
      yi[c] = g.gy;
    }
    xi[i] = 2.0 * xi[i] + yi[i];  // yi[i] stays dI2/dC12 at the degenerate covariance: J2
  }
}
}  // namespace

void i2_grad_table(Activation a, const double* C, int n, int m, const Activation* acts, double* val, double* dx,
                   double* dy, double* ws) {
  if (a == Activation::Erf && all_are(acts, n, Activation::Erf)) {
    return with_static_size(n, [&](auto nc) { i2_grad_table_erf<nc.value>(C, n, m, val, dx, dy, ws); });
  }
  for (int i = 0; i < m; ++i) {
    const double x = C[i * n + i];
    for (int c = 0; c < n; ++c) {
      const int o = i * n + c;
      if (c == i) {
        const Grad self = i2_self(a, acts[i], Grad::variable(x, 0));
        val[o] = self.v;
        dx[o] = self.g[0];
        dy[o] = i2_jet<Grad>(a, acts[i], x, x, x).g[1];
      } else {
        const Grad k = i2_jet<Grad>(a, acts[c], x, C[i * n + c], C[c * n + c]);
        val[o] = k.v;
        dx[o] = k.g[0];
        dy[o] = k.g[1];
      }
    }
  }
}

namespace {
constexpr int kLanes = 4;  // pairs per SIMD group in the erf contraction

// The all-erf contraction of i4_contract, I4 = (4/pi^2) det(C_AA + I)^(-1/2) asin(c'_jl / sqrt((1 + c'_jj)(1 +
// c'_ll))) with c' the covariance conditioned on (x_i, x_k) (as in i4()), vectorised across pairs: one SIMD lane per
// pair (the last group padded by repeating its last pair), so that every step (conditioning, r_j = (1 +
// c'_jj)^(-1/2), the T weighted arcsines) is a straight vector operation with no horizontal sums, and the long-
// latency square roots, divisions and arcsines of different (j, l) overlap. NC > 0: n = NC at compile time.
template <int NC>
void i4_contract_erf(const double* C, int n_rt, const int* pairs, int np, const double* W, double* out, double* ws) {
  constexpr int L = kLanes;
  const int n = NC > 0 ? NC : n_rt;
  double *b1 = ws, *b2 = b1 + n * L, *t1 = b2 + n * L, *t2 = t1 + n * L, *r = t2 + n * L;
  for (int p0 = 0; p0 < np; p0 += L) {
    int ip[L], kp[L];
    for (int l = 0; l < L; ++l) {
      const int p = std::min(p0 + l, np - 1);
      ip[l] = pairs[2 * p];
      kp[l] = pairs[2 * p + 1];
    }
    double det[L], acc[L];
    condition_on_pairs<NC, L>(C, n, ip, kp, 1.0, b1, b2, t1, t2, r, det);
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
    for (int e = 0; e < n * L; ++e) r[e] = angle_norm(Activation::Erf, r[e]);  // c'_jj -> r_j = (1 + c'_jj)^-1/2
    for (int l = 0; l < L; ++l) acc[l] = 0.0;
    for (int j = 0; j < n; ++j) {
      const double* cj = C + static_cast<std::ptrdiff_t>(n) * j;
      const double *bj1 = b1 + j * L, *bj2 = b2 + j * L, *rj = r + j * L;
      const double* wj = W + tri(n, j, j);
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
      for (int l = 0; l < L; ++l) acc[l] += wj[0] * asin_simd(1.0 - rj[l] * rj[l]);  // c'_jj r_j^2
      for (int m = j + 1; m < n; ++m) {
        const double *tm1 = t1 + m * L, *tm2 = t2 + m * L, *rm = r + m * L;
        const double cjm = cj[m], w = wj[m - j];
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
        for (int l = 0; l < L; ++l)
          acc[l] += w * asin_simd((cjm - (bj1[l] * tm1[l] + bj2[l] * tm2[l])) * rj[l] * rm[l]);
      }
    }
    for (int l = 0; l < L && p0 + l < np; ++l) out[p0 + l] = (4.0 / (kPi * kPi)) / std::sqrt(det[l]) * acc[l];
  }
}
}  // namespace

std::size_t i4_table_workspace(int n, int /*np*/) { return 5 * static_cast<std::size_t>(n) + 8; }

void i4_table(Activation s, const double* C, int n, const Activation* acts, const int* pairs, int np, double* out,
              double* ws) {
  using A = Activation;
  const int T = n * (n + 1) / 2;
  auto xx = [&](int j, int l) { return C[static_cast<std::ptrdiff_t>(n) * j + l]; };
  if (s == A::Linear) {  // s' = 1: I4 = I2(a, b) on the (3, 4) block, the same for every first pair
    for (int j = 0; j < n; ++j)
      for (int l = j; l < n; ++l) out[tri(n, j, l)] = i2<double>(acts[j], acts[l], xx(j, j), xx(j, l), xx(l, l));
    for (int p = 1; p < np; ++p) std::copy(out, out + T, out + static_cast<std::ptrdiff_t>(p) * T);
    return;
  }
  if (s == A::Erf || s == A::Step) {
    // As in i4(): condition (x_j, x_l) on a Gaussian observation of (x_i, x_k) at 0 with noise 1 (erf) or 0 (step).
    const double noise = s == A::Erf ? 1.0 : 0.0;
    double *b1 = ws, *b2 = ws + n, *t1 = ws + 2 * n, *t2 = ws + 3 * n, *var = ws + 4 * n;
    for (int p = 0; p < np; ++p) {
      double det;
      condition_on_pairs<0, 1>(C, n, &pairs[2 * p], &pairs[2 * p + 1], noise, b1, b2, t1, t2, var, &det);
      if (s == A::Step && !(det > 0.0))
        throw std::domain_error("C: the step activation's I4 = E[delta delta a b] needs C[:2, :2] non-singular");
      const double pref = s == A::Erf ? (2.0 / kPi) / std::sqrt(det) : 1.0 / (2.0 * kPi * std::sqrt(det));
      double* op = out + static_cast<std::ptrdiff_t>(p) * T;
      for (int j = 0; j < n; ++j)
        for (int l = j; l < n; ++l) {
          const double c = l == j ? var[j] : xx(j, l) - (b1[j] * t1[l] + b2[j] * t2[l]);
          op[tri(n, j, l)] = pref * i2<double>(acts[j], acts[l], var[j], c, var[l]);
        }
    }
    return;
  }
  // Generic: assemble each 4 x 4 covariance and call i4 (quadratic via Grad jets, relu via its own kernel).
  double C4[16];
  for (int p = 0; p < np; ++p) {
    const int i = pairs[2 * p], k = pairs[2 * p + 1];
    C4[0] = xx(i, i);
    C4[1] = C4[4] = xx(i, k);
    C4[5] = xx(k, k);
    double* op = out + static_cast<std::ptrdiff_t>(p) * T;
    for (int j = 0; j < n; ++j)
      for (int l = j; l < n; ++l) {
        C4[2] = C4[8] = xx(j, i);
        C4[6] = C4[9] = xx(j, k);
        C4[3] = C4[12] = xx(l, i);
        C4[7] = C4[13] = xx(l, k);
        C4[10] = xx(j, j);
        C4[11] = C4[14] = xx(j, l);
        C4[15] = xx(l, l);
        op[tri(n, j, l)] = i4(s, acts[j], acts[l], C4);
      }
  }
}

std::size_t i4_contract_workspace(int n, int np) {
  // The larger of the erf path's needs (i4_contract_erf) and the table's plus i4_table's scratch.
  const std::size_t T = static_cast<std::size_t>(n) * (n + 1) / 2;
  const std::size_t N = static_cast<std::size_t>(n), P = static_cast<std::size_t>(np);
  return std::max(5 * N * kLanes, P * T + i4_table_workspace(n, np));
}

void i4_contract(Activation s, const double* C, int n, const Activation* acts, const int* pairs, int np,
                 const double* W, double* out, double* ws) {
  if (s == Activation::Erf && all_are(acts, n, Activation::Erf)) {
    return with_static_size(n, [&](auto nc) { i4_contract_erf<nc.value>(C, n, pairs, np, W, out, ws); });
  }
  const int T = n * (n + 1) / 2;
  double* table = ws;
  i4_table(s, C, n, acts, pairs, np, table, ws + static_cast<std::ptrdiff_t>(np) * T);
  for (int p = 0; p < np; ++p) {
    const double* op = table + static_cast<std::ptrdiff_t>(p) * T;
    double t = 0.0;
    for (int e = 0; e < T; ++e) t += W[e] * op[e];
    out[p] = t;
  }
}

}  // namespace twolayer
