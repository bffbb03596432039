// Kernel tables for the order-parameter ODE (see gaussian_tables.hpp). Compiled with -fno-math-errno and
// -fno-trapping-math (CMakeLists.txt) so that the erf fast paths vectorise; results are unchanged.
#include "twolayer/gaussian_tables.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "twolayer/jet.hpp"
#include "twolayer/simd_math.hpp"

namespace twolayer {

namespace {
bool all_are(const Activation* acts, int n, Activation a) {
  for (int j = 0; j < n; ++j)
    if (acts[j] != a) return false;
  return true;
}

// As in i4(): condition every unit j on a Gaussian observation of the pair (x_i, x_k) at 0 with noise variance
// `noise` (1 for erf's s', 0 for step's delta). b1, b2 receive rows i and k of C (its columns, by symmetry),
// t1, t2 the rows of (C_AA + noise I)^(-1) C_A., var the conditioned variances clipped at 0. Returns
// det(C_AA + noise I); the outputs are meaningful only when it is positive.
template <int NC>
inline double condition_on_pair(const double* C, int n_rt, int i, int k, double noise, double* b1, double* b2,
                                double* t1, double* t2, double* var) {
  const int n = NC > 0 ? NC : n_rt;
  const double *ci = C + static_cast<std::ptrdiff_t>(n) * i, *ck = C + static_cast<std::ptrdiff_t>(n) * k;
  const double a11 = ci[i] + noise, a12 = ci[k], a22 = ck[k] + noise;
  const double det = a11 * a22 - a12 * a12;
  const double idet = 1.0 / det, i11 = a22 * idet, i12 = -a12 * idet, i22 = a11 * idet;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
  for (int j = 0; j < n; ++j) {
    b1[j] = ci[j];
    b2[j] = ck[j];
    t1[j] = i11 * b1[j] + i12 * b2[j];
    t2[j] = i12 * b1[j] + i22 * b2[j];
    var[j] = std::max(C[static_cast<std::ptrdiff_t>(n + 1) * j] - (b1[j] * t1[j] + b2[j] * t2[j]), 0.0);
  }
  return det;
}
}  // namespace

std::size_t i2_grad_table_workspace(int n, int m) {
  return 4 * static_cast<std::size_t>(n) * static_cast<std::size_t>(m) + static_cast<std::size_t>(n) + 8;
}

void i2_grad_table(Activation a, const double* C, int n, int m, const Activation* acts, double* val, double* dx,
                   double* dy, double* dz, double* ws) {
  if (a == Activation::Erf && all_are(acts, n, Activation::Erf)) {
    // I2 = (2/pi) asin(c), c = y r_x r_z with r = (1 + C_cc)^(-1/2); dI2/dy = (2/pi) / sqrt((1 + x)(1 + z) - y^2),
    // dI2/dx = -y dI2/dy r_x^2 / 2 (and x <-> z). The self pair is the same formula at x = y = z = q, whose
    // q-derivative is the sum of the three partial derivatives.
    double* r = ws;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
    for (int c = 0; c < n; ++c) r[c] = 1.0 / std::sqrt(1.0 + C[c * (n + 1)]);
    // Flatten the pairs: one vectorised pass over all of them.
    double* y = ws + n;
    double* rx = y + static_cast<std::size_t>(n) * m;
    double* rz = rx + static_cast<std::size_t>(n) * m;
    int cnt = 0;
    for (int i = 0; i < m; ++i)
      for (int c = i; c < n; ++c) {
        y[cnt] = C[i * n + c];
        rx[cnt] = r[i];
        rz[cnt] = r[c];
        ++cnt;
      }
    double* v = rz + static_cast<std::size_t>(n) * m;  // reuse: outputs into the first arrays after reading them
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
    for (int e = 0; e < cnt; ++e) {
      const double ax = rx[e] * rx[e], az = rz[e] * rz[e];  // 1 / (1 + x), 1 / (1 + z)
      const double arg = y[e] * rx[e] * rz[e];
      const double g = (2.0 / kPi) / std::sqrt((1.0 - arg * arg) / (ax * az));
      v[e] = (2.0 / kPi) * asin_simd(arg);
      const double h = -0.5 * g * y[e];
      y[e] = g;  // dy
      rx[e] = h * ax;
      rz[e] = h * az;
    }
    cnt = 0;
    for (int i = 0; i < m; ++i)
      for (int c = i; c < n; ++c) {
        const int o = i * n + c;
        val[o] = v[cnt];
        if (c == i) {
          dx[o] = rx[cnt] + y[cnt] + rz[cnt];
          dy[o] = dz[o] = 0.0;
        } else {
          dx[o] = rx[cnt];
          dy[o] = y[cnt];
          dz[o] = rz[cnt];
        }
        ++cnt;
      }
    return;
  }
  for (int i = 0; i < m; ++i) {
    const double x = C[i * n + i];
    const Grad self = i2_self(a, acts[i], Grad::variable(x, 0));
    val[i * n + i] = self.v;
    dx[i * n + i] = self.g[0];
    dy[i * n + i] = dz[i * n + i] = 0.0;
    for (int c = i + 1; c < n; ++c) {
      const Grad k = i2_jet<Grad>(a, acts[c], x, C[i * n + c], C[c * n + c]);
      const int o = i * n + c;
      val[o] = k.v;
      dx[o] = k.g[0];
      dy[o] = k.g[1];
      dz[o] = k.g[2];
    }
  }
}

namespace {
// The all-erf I4 table (see i4_table). NC > 0: the number of variables is the compile-time constant NC, so that the
// short loops of small systems unroll; NC = 0: runtime n.
template <int NC>
// W != nullptr: instead of the table, contract each pair's block with the weights W (packed like the table) into
// contr[p]; out is then scratch for the asin arguments.
void i4_table_erf(const double* C, int n_rt, const int* pairs, int np, double* out, double* ws,
                  const double* W = nullptr, double* contr = nullptr) {
  const int n = NC > 0 ? NC : n_rt;
  const int T = n * (n + 1) / 2;
  double *b1 = ws, *b2 = ws + n, *t1 = ws + 2 * n, *t2 = ws + 3 * n, *r = ws + 4 * n, *var = ws + 5 * n;
  double* pref = ws + 6 * n;
  for (int p = 0; p < np; ++p) {
    const double det = condition_on_pair<NC>(C, n, pairs[2 * p], pairs[2 * p + 1], 1.0, b1, b2, t1, t2, var);
    pref[p] = (4.0 / (kPi * kPi)) / std::sqrt(det);
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
    for (int j = 0; j < n; ++j) r[j] = 1.0 / std::sqrt(1.0 + var[j]);  // r_j = (1 + var_j)^(-1/2)
    double* op = out + static_cast<std::ptrdiff_t>(p) * T;
    for (int j = 0; j < n; ++j) {
      const double* xj = C + static_cast<std::ptrdiff_t>(n) * j;
      double* oj = op + tri(n, j, j);
      const double bj1 = b1[j], bj2 = b2[j], rj = r[j];
      oj[0] = (1.0 - rj * rj);  // var_j r_j^2 = 1 - r_j^2
      for (int l = j + 1; l < n; ++l) oj[l - j] = (xj[l] - (bj1 * t1[l] + bj2 * t2[l])) * rj * r[l];
    }
  }
  if (W != nullptr) {
    for (int p = 0; p < np; ++p) {
      const double* op = out + static_cast<std::ptrdiff_t>(p) * T;
      double t = 0.0;
#ifdef TWOLAYER_OPENMP
#pragma omp simd reduction(+ : t)
#endif
      for (int e = 0; e < T; ++e) t += W[e] * asin_simd(op[e]);
      contr[p] = pref[p] * t;
    }
    return;
  }
  const std::ptrdiff_t total = static_cast<std::ptrdiff_t>(np) * T;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
  for (std::ptrdiff_t e = 0; e < total; ++e) out[e] = asin_simd(out[e]);
  for (int p = 0; p < np; ++p) {
    const double f = pref[p];
    double* op = out + static_cast<std::ptrdiff_t>(p) * T;
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
    for (int e = 0; e < T; ++e) op[e] *= f;
  }
}
}  // namespace

std::size_t i4_table_workspace(int n, int np) {
  return 6 * static_cast<std::size_t>(n) + static_cast<std::size_t>(np) + 8;
}

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
  if (s == A::Erf && all_are(acts, n, A::Erf)) {
    switch (n) {  // small systems: compile-time sizes unroll the short loops
      case 2: return i4_table_erf<2>(C, n, pairs, np, out, ws);
      case 3: return i4_table_erf<3>(C, n, pairs, np, out, ws);
      case 4: return i4_table_erf<4>(C, n, pairs, np, out, ws);
      case 5: return i4_table_erf<5>(C, n, pairs, np, out, ws);
      case 6: return i4_table_erf<6>(C, n, pairs, np, out, ws);
      case 8: return i4_table_erf<8>(C, n, pairs, np, out, ws);
      default: return i4_table_erf<0>(C, n, pairs, np, out, ws);
    }
  }
  if (s == A::Erf || s == A::Step) {
    // As in i4(): condition (x_j, x_l) on a Gaussian observation of (x_i, x_k) at 0 with noise 1 (erf) or 0 (step).
    const double noise = s == A::Erf ? 1.0 : 0.0;
    double *b1 = ws, *b2 = ws + n, *t1 = ws + 2 * n, *t2 = ws + 3 * n, *var = ws + 4 * n;
    double* pref = ws + 6 * n;
    for (int p = 0; p < np; ++p) {
      const double det = condition_on_pair<0>(C, n, pairs[2 * p], pairs[2 * p + 1], noise, b1, b2, t1, t2, var);
      if (s == A::Step && !(det > 0.0))
        throw std::domain_error("C: the step activation's I4 = E[delta delta a b] needs C[:2, :2] non-singular");
      pref[p] = s == A::Erf ? (2.0 / kPi) / std::sqrt(det) : 1.0 / (2.0 * kPi * std::sqrt(det));
      double* op = out + static_cast<std::ptrdiff_t>(p) * T;
      for (int j = 0; j < n; ++j)
        for (int l = j; l < n; ++l) {
          const double c = l == j ? var[j] : xx(j, l) - (b1[j] * t1[l] + b2[j] * t2[l]);
          op[tri(n, j, l)] = pref[p] * i2<double>(acts[j], acts[l], var[j], c, var[l]);
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

void j2_table(Activation s, const double* C, int n, const int* pairs, int np, double* out) {
  for (int p = 0; p < np; ++p) {
    const int i = pairs[2 * p], k = pairs[2 * p + 1];
    const double c11 = C[i * n + i], c12 = C[i * n + k], c22 = C[k * n + k];
    if (s == Activation::Erf) {  // J2 = dI2/dC12 of (2/pi) asin(C12 / sqrt((1 + C11)(1 + C22)))
      out[p] = (2.0 / kPi) / std::sqrt((1.0 + c11) * (1.0 + c22) - c12 * c12);
    } else {
      const double C2[4] = {c11, c12, c12, c22};
      out[p] = j2(s, C2);
    }
  }
}

std::size_t i4_contract_workspace(int n, int np) {
  return static_cast<std::size_t>(np) * static_cast<std::size_t>(n * (n + 1) / 2) + i4_table_workspace(n, np);
}

void i4_contract(Activation s, const double* C, int n, const Activation* acts, const int* pairs, int np,
                 const double* W, double* out, double* ws) {
  const int T = n * (n + 1) / 2;
  double* table = ws;
  double* rest = ws + static_cast<std::ptrdiff_t>(np) * T;
  if (s == Activation::Erf && all_are(acts, n, Activation::Erf)) {
    switch (n) {
      case 2: return i4_table_erf<2>(C, n, pairs, np, table, rest, W, out);
      case 3: return i4_table_erf<3>(C, n, pairs, np, table, rest, W, out);
      case 4: return i4_table_erf<4>(C, n, pairs, np, table, rest, W, out);
      case 5: return i4_table_erf<5>(C, n, pairs, np, table, rest, W, out);
      case 6: return i4_table_erf<6>(C, n, pairs, np, table, rest, W, out);
      case 8: return i4_table_erf<8>(C, n, pairs, np, table, rest, W, out);
      default: return i4_table_erf<0>(C, n, pairs, np, table, rest, W, out);
    }
  }
  i4_table(s, C, n, acts, pairs, np, table, rest);
  for (int p = 0; p < np; ++p) {
    const double* op = table + static_cast<std::ptrdiff_t>(p) * T;
    double t = 0.0;
    for (int e = 0; e < T; ++e) t += W[e] * op[e];
    out[p] = t;
  }
}

}  // namespace twolayer
