// Scalar and batched Gaussian kernels built on the closed-form I2 of gaussian.hpp.
#include "twolayer/gaussian.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#if __has_include("twolayer/gaussian_relu_i4.hpp")  // TEMP until the relu I4 lands
#include "twolayer/gaussian_relu_i4.hpp"
#define TWOLAYER_HAVE_RELU_I4 1
#endif
#include "twolayer/parallel.hpp"
#include "twolayer/simd_math.hpp"

namespace twolayer {
namespace {

inline double at(const double* C, int n, int i, int j) { return C[n * i + j]; }

// Covariance of (l3, l4) after conditioning (l1, l2) on a Gaussian observation at 0 with noise variance
// `noise` (noise = 0: exact conditioning). Returns det(C_AA + noise I) through `det`.
void condition_on_first_pair(const double* C, double noise, double out[3], double& det) {
  const double a11 = C[0] + noise, a12 = C[1], a22 = C[5] + noise;
  det = a11 * a22 - a12 * a12;
  const double i11 = a22 / det, i12 = -a12 / det, i22 = a11 / det;
  // B = (3, 4), rows of C_BA: (C31, C32) and (C41, C42).
  const double b31 = C[8], b32 = C[9], b41 = C[12], b42 = C[13];
  auto quad = [&](double u1, double u2, double v1, double v2) {
    return u1 * (i11 * v1 + i12 * v2) + u2 * (i12 * v1 + i22 * v2);
  };
  out[0] = C[10] - quad(b31, b32, b31, b32);
  out[1] = C[11] - quad(b31, b32, b41, b42);
  out[2] = C[15] - quad(b41, b42, b41, b42);
  // Conditioning can only shrink variances; clip round-off below zero.
  out[0] = std::max(out[0], 0.0);
  out[2] = std::max(out[2], 0.0);
}

}  // namespace

double i2(Activation a, Activation b, const double* C) { return i2<double>(a, b, C[0], C[1], C[3]); }

double i3(Activation s, Activation b, const double* C) {
  // Stein on l2, then Price: E[s''(l1) b(l3)] = 2 dI2/dC11 and E[s'(l1) b'(l3)] = dI2/dC13.
  const Grad k = i2_jet<Grad>(s, b, at(C, 3, 0, 0), at(C, 3, 0, 2), at(C, 3, 2, 2));
  return 2.0 * at(C, 3, 0, 1) * k.g[0] + at(C, 3, 1, 2) * k.g[1];
}

double j2(Activation s, const double* C) {
  if (s == Activation::Step) {
    const double det = C[0] * C[3] - C[1] * C[1];
    if (!(det > 0.0))
      throw std::domain_error("C: E[delta(l1) delta(l2)] for the step activation needs a non-singular covariance");
    return 1.0 / (2.0 * kPi * std::sqrt(det));
  }
  return i2_jet<Grad>(s, s, C[0], C[1], C[3]).g[1];
}

double i4(Activation s, Activation a, Activation b, const double* C) {
  using A = Activation;
  switch (s) {
    case A::Linear: return i2<double>(a, b, C[10], C[11], C[15]);
    case A::Quadratic: {
      const Grad k = i2_jet<Grad>(a, b, C[10], C[11], C[15]);
      const double c12 = C[1], c13 = C[2], c14 = C[3], c23 = C[6], c24 = C[7];
      return 4.0 * (c12 * k.v + 2.0 * c13 * c23 * k.g[0] + (c13 * c24 + c14 * c23) * k.g[1] +
                    2.0 * c14 * c24 * k.g[2]);
    }
    case A::Erf: {
      double cond[3], det;
      condition_on_first_pair(C, 1.0, cond, det);
      return (2.0 / kPi) / std::sqrt(det) * i2<double>(a, b, cond[0], cond[1], cond[2]);
    }
    case A::Step: {
      double cond[3], det;
      condition_on_first_pair(C, 0.0, cond, det);
      if (!(det > 0.0))
        throw std::domain_error("C: the step activation's I4 = E[delta delta a b] needs C[:2, :2] non-singular");
      return 1.0 / (2.0 * kPi * std::sqrt(det)) * i2<double>(a, b, cond[0], cond[1], cond[2]);
    }
    case A::Relu:
#ifdef TWOLAYER_HAVE_RELU_I4
      if (a == A::Relu && b == A::Relu) return detail::relu_i4(C);
#endif
      break;
  }
  throw not_implemented(std::string("i4: no closed form or quadrature for (") + activation_name(s) + ", " +
                        activation_name(a) + ", " + activation_name(b) + ")");
}

namespace {
bool all_are(const Activation* acts, int n, Activation a) {
  for (int j = 0; j < n; ++j)
    if (acts[j] != a) return false;
  return true;
}
}  // namespace

void i2_grad_row(Activation a, double x, const Activation* acts, const double* y, const double* z, int n, double* val,
                 double* dx, double* dy, double* dz) {
  if (a == Activation::Erf && all_are(acts, n, Activation::Erf)) {
    // I2 = (2/pi) asin(c), c = y / sqrt((1 + x)(1 + z)); dI2/dc = (2/pi) / sqrt(1 - c^2).
    const double rx = 1.0 / (1.0 + x);
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
    for (int c = 0; c < n; ++c) {
      const double rz = 1.0 / (1.0 + z[c]);
      const double s = std::sqrt(rx * rz);
      const double arg = y[c] * s;
      const double d = (2.0 / kPi) / std::sqrt(1.0 - arg * arg);
      val[c] = (2.0 / kPi) * asin_simd(arg);
      dy[c] = d * s;
      dx[c] = -0.5 * d * arg * rx;
      dz[c] = -0.5 * d * arg * rz;
    }
    return;
  }
  for (int c = 0; c < n; ++c) {
    const Grad k = i2_jet<Grad>(a, acts[c], x, y[c], z[c]);
    val[c] = k.v;
    dx[c] = k.g[0];
    dy[c] = k.g[1];
    dz[c] = k.g[2];
  }
}

void i4_block(Activation s, const double caa[3], const double* cab, const double* cbb, int ld, const Activation* acts,
              int n, double* out, double* ws) {
  using A = Activation;
  auto xx = [&](int j, int l) { return cbb[static_cast<std::ptrdiff_t>(ld) * j + l]; };
  if (s == A::Linear) {
    for (int j = 0; j < n; ++j)
      for (int l = j; l < n; ++l) out[j * n + l] = i2<double>(acts[j], acts[l], xx(j, j), xx(j, l), xx(l, l));
    return;
  }
  if (s == A::Erf || s == A::Step) {
    // As in i4(): condition (x_j, x_l) on a Gaussian observation of (l1, l2) at 0 with noise 1 (erf) or 0 (step).
    const double noise = s == A::Erf ? 1.0 : 0.0;
    const double a11 = caa[0] + noise, a12 = caa[1], a22 = caa[2] + noise;
    const double det = a11 * a22 - a12 * a12;
    if (s == A::Step && !(det > 0.0))
      throw std::domain_error("C: the step activation's I4 = E[delta delta a b] needs C[:2, :2] non-singular");
    const double i11 = a22 / det, i12 = -a12 / det, i22 = a11 / det;
    const double pref = s == A::Erf ? (2.0 / kPi) / std::sqrt(det) : 1.0 / (2.0 * kPi * std::sqrt(det));
    // Structure of arrays: b1, b2 = Cov(x_j, l1), Cov(x_j, l2); t = (C_AA + noise I)^(-1) (b1, b2).
    double *b1 = ws, *b2 = ws + n, *t1 = ws + 2 * n, *t2 = ws + 3 * n, *var = ws + 4 * n, *r = ws + 5 * n;
    for (int j = 0; j < n; ++j) {
      b1[j] = cab[2 * j];
      b2[j] = cab[2 * j + 1];
      t1[j] = i11 * b1[j] + i12 * b2[j];
      t2[j] = i12 * b1[j] + i22 * b2[j];
      var[j] = std::max(xx(j, j) - (b1[j] * t1[j] + b2[j] * t2[j]), 0.0);  // clipped at 0 like i4()
    }
    if (s == A::Erf && all_are(acts, n, A::Erf)) {
      // Fast path: pref * (2/pi) asin(c_jl r_j r_l), r_j = (1 + var_j)^(-1/2); vectorised over l.
      for (int j = 0; j < n; ++j) r[j] = 1.0 / std::sqrt(1.0 + var[j]);
      const double p2 = pref * (2.0 / kPi);
      for (int j = 0; j < n; ++j) {
        const double* xj = cbb + static_cast<std::ptrdiff_t>(ld) * j;
        double* oj = out + static_cast<std::ptrdiff_t>(j) * n;
        const double bj1 = b1[j], bj2 = b2[j], rj = r[j];
#ifdef TWOLAYER_OPENMP
#pragma omp simd
#endif
        for (int l = j + 1; l < n; ++l) oj[l] = p2 * asin_simd((xj[l] - (bj1 * t1[l] + bj2 * t2[l])) * rj * r[l]);
        oj[j] = p2 * asin_simd(var[j] * rj * rj);
      }
      return;
    }
    for (int j = 0; j < n; ++j)
      for (int l = j; l < n; ++l) {
        const double c = l == j ? var[j] : xx(j, l) - (b1[j] * t1[l] + b2[j] * t2[l]);
        out[j * n + l] = pref * i2<double>(acts[j], acts[l], var[j], c, var[l]);
      }
    return;
  }
  // Generic: assemble each 4 x 4 covariance and call i4 (quadratic via Jets, relu via its own kernel).
  double C[16];
  C[0] = caa[0];
  C[1] = C[4] = caa[1];
  C[5] = caa[2];
  for (int j = 0; j < n; ++j)
    for (int l = j; l < n; ++l) {
      C[2] = C[8] = cab[2 * j];
      C[6] = C[9] = cab[2 * j + 1];
      C[3] = C[12] = cab[2 * l];
      C[7] = C[13] = cab[2 * l + 1];
      C[10] = xx(j, j);
      C[11] = C[14] = xx(j, l);
      C[15] = xx(l, l);
      out[j * n + l] = i4(s, acts[j], acts[l], C);
    }
}

const char* covariance_error(const double* C, int n) {
  double scale = 0.0;
  for (int i = 0; i < n * n; ++i)
    if (!std::isfinite(C[i])) return "entries must be finite (got NaN or inf)";
  for (int i = 0; i < n; ++i) scale = std::max(scale, std::fabs(C[n * i + i]));
  const double sym_tol = 1e-9 * std::max(scale, 1e-300);
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j)
      if (std::fabs(C[n * i + j] - C[n * j + i]) > sym_tol) return "covariance matrix must be symmetric";
  // LDL^T without pivoting; a pivot within tolerance of 0 must have a (numerically) zero column below it.
  const double tol = 1e-10 * scale, zero_tol = 1e-7 * std::max(scale, 1e-300);
  const char* not_psd = "covariance matrix must be positive semi-definite";
  double L[16] = {0}, D[4] = {0};
  for (int j = 0; j < n; ++j) {
    double d = C[n * j + j];
    for (int k = 0; k < j; ++k) d -= L[4 * j + k] * L[4 * j + k] * D[k];
    if (d < -tol) return not_psd;
    D[j] = d > tol ? d : 0.0;
    for (int i = j + 1; i < n; ++i) {
      double r = C[n * i + j];
      for (int k = 0; k < j; ++k) r -= L[4 * i + k] * L[4 * j + k] * D[k];
      if (D[j] > 0.0)
        L[4 * i + j] = r / D[j];
      else if (std::fabs(r) > zero_tol)
        return not_psd;
    }
  }
  return nullptr;
}

void check_covariance(const double* C, int n, const std::string& name) {
  if (const char* why = covariance_error(C, n)) throw std::invalid_argument(name + ": " + why);
}

namespace {
template <class F>
void batch(const double* C, int n, std::size_t count, double* out, int n_threads, F&& kernel) {
  parallel_for(count, n_threads, [&](std::size_t i) {
    const double* Ci = C + i * n * n;
    if (const char* why = covariance_error(Ci, n))
      throw std::invalid_argument("C[" + std::to_string(i) + "]: " + why);
    out[i] = kernel(Ci);
  }, 256);
}
}  // namespace

void i2_batch(Activation a, Activation b, const double* C, std::size_t count, double* out, int n_threads) {
  batch(C, 2, count, out, n_threads, [=](const double* Ci) { return i2(a, b, Ci); });
}
void i3_batch(Activation s, Activation b, const double* C, std::size_t count, double* out, int n_threads) {
  batch(C, 3, count, out, n_threads, [=](const double* Ci) { return i3(s, b, Ci); });
}
void j2_batch(Activation s, const double* C, std::size_t count, double* out, int n_threads) {
  batch(C, 2, count, out, n_threads, [=](const double* Ci) { return j2(s, Ci); });
}
void i4_batch(Activation s, Activation a, Activation b, const double* C, std::size_t count, double* out,
              int n_threads) {
  batch(C, 4, count, out, n_threads, [=](const double* Ci) { return i4(s, a, b, Ci); });
}

}  // namespace twolayer
