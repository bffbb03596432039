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
