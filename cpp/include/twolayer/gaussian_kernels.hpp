// The Gaussian kernels on one row-major covariance matrix, and the batches' per-matrix test, as TWOLAYER_HD functions
// (hd.hpp): the one source of this maths for the CPU batches (gaussian.cpp, which defines the public i2/i3/j2/i4 of
// gaussian.hpp through them) and the CUDA backend (cpp/cuda/kernels.cu). No checks here: see covariance_failures.
// Where the host throws (a singular step covariance), device code returns NaN (TWOLAYER_HOST_THROW): the CUDA
// backend hands every matrix whose value is not finite back to the host, which raises the host's error.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "twolayer/gaussian.hpp"
#include "twolayer/gaussian_orthant.hpp"
#include "twolayer/gaussian_relu_i4.hpp"
#include "twolayer/hd.hpp"

namespace twolayer::kernels {

// Covariance of (l3, l4) after conditioning (l1, l2) on a Gaussian observation at 0 with noise variance
// `noise` (noise = 0: exact conditioning). Returns det(C_AA + noise I) through `det`.
TWOLAYER_ALWAYS_INLINE TWOLAYER_HD void condition_on_first_pair(const double* C, double noise, double out[3],
                                                                 double& det) {
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

// I4 for s = erf (gaussian.hpp): inline, so that batches with a fixed activation pair vectorise (i4_batch).
TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double i4_erf(Activation a, Activation b, const double* C) {
  double cond[3], det;
  condition_on_first_pair(C, 1.0, cond, det);
  return (2.0 / kPi) / std::sqrt(det) * i2<double>(a, b, cond[0], cond[1], cond[2]);
}

TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double i2(Activation a, Activation b, const double* C) {
  return twolayer::i2<double>(a, b, C[0], C[1], C[3]);
}

TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double i3(Activation s, Activation b, const double* C) {
  // Stein on l2, then Price: E[s''(l1) b(l3)] = 2 dI2/dC11 and E[s'(l1) b'(l3)] = dI2/dC13.
  const Grad k = i2_jet<Grad>(s, b, C[0], C[2], C[8]);
  return 2.0 * C[1] * k.g[0] + C[5] * k.g[1];
}

TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double j2(Activation s, const double* C) {
  if (s == Activation::Step) {
    const double det = C[0] * C[3] - C[1] * C[1];
    if (!(det > 0.0))
      TWOLAYER_HOST_THROW(
          std::domain_error("C: E[delta(l1) delta(l2)] for the step activation needs a non-singular covariance"),
          kNaN);
    return 1.0 / (2.0 * kPi * std::sqrt(det));
  }
  return i2_jet<Grad>(s, s, C[0], C[1], C[3]).g[1];
}

// Whether the CUDA backend evaluates this I4: all but the relu student with a teacher pair other than linear and
// relu units, which goes through the orthant-moment recursion (gaussian_orthant.cpp, host only).
TWOLAYER_HD inline bool i4_on_device(Activation s, Activation a, Activation b) {
  using A = Activation;
  return s != A::Relu || ((a == A::Linear || a == A::Relu) && (b == A::Linear || b == A::Relu));
}

// I4 through the generic engine (gaussian_smooth.hpp) for a smooth student s without a closed form.
TWOLAYER_HD inline double i4_smooth(Activation s, Activation a, Activation b, const double* C) {
  if (!smooth::is_smooth(s) || !smooth::is_smooth(a) || !smooth::is_smooth(b))
    TWOLAYER_HOST_THROW(not_implemented("i4: relu and step units pair in closed form only with linear, erf, relu, "
                                        "step and quadratic units"),
                        kNaN);
  double out = kNaN;
  if (!smooth::i4(s, a, b, C, out)) TWOLAYER_SMOOTH_FAIL(double);
  return out;
}

TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double i4(Activation s, Activation a, Activation b, const double* C) {
  using A = Activation;
  // linear, erf, quadratic and step students reduce I4 to an I2 exactly, whatever a and b
  if (!is_classic(s) || (s == A::Relu && !(is_classic(a) && is_classic(b)))) return i4_smooth(s, a, b, C);
  switch (s) {
    case A::Linear: return twolayer::i2<double>(a, b, C[10], C[11], C[15]);
    case A::Quadratic: {
      const Grad k = i2_jet<Grad>(a, b, C[10], C[11], C[15]);
      const double c12 = C[1], c13 = C[2], c14 = C[3], c23 = C[6], c24 = C[7];
      return 4.0 * (c12 * k.v + 2.0 * c13 * c23 * k.g[0] + (c13 * c24 + c14 * c23) * k.g[1] +
                    2.0 * c14 * c24 * k.g[2]);
    }
    case A::Erf: return i4_erf(a, b, C);
    case A::Step: {
      double cond[3], det;
      condition_on_first_pair(C, 0.0, cond, det);
      if (!(det > 0.0))
        TWOLAYER_HOST_THROW(
            std::domain_error("C: the step activation's I4 = E[delta delta a b] needs C[:2, :2] non-singular"), kNaN);
      return 1.0 / (2.0 * kPi * std::sqrt(det)) * twolayer::i2<double>(a, b, cond[0], cond[1], cond[2]);
    }
    case A::Relu:
      if (a == A::Relu && b == A::Relu) return detail::relu_i4(C);
      if (a == A::Linear && b == A::Linear) return detail::relu_i4_linear_linear(C);
      if (a == A::Linear && b == A::Relu) return detail::relu_i4_linear_relu(C);
      if (a == A::Relu && b == A::Linear) {
        // Swap l3 and l4 so that the linear unit comes first.
        constexpr int perm[4] = {0, 1, 3, 2};
        double S[16];
        for (int i = 0; i < 4; ++i)
          for (int k = 0; k < 4; ++k) S[4 * i + k] = C[4 * perm[i] + perm[k]];
        return detail::relu_i4_linear_relu(S);
      }
#ifdef __CUDA_ARCH__
      return kNaN;  // not launched (i4_on_device)
#else
      return detail::relu_i4_general(a, b, C);  // orthant moments (gaussian_orthant.hpp)
#endif
    default: break;
  }
  TWOLAYER_HOST_THROW(std::logic_error("i4: unreachable activation"), kNaN);
}

// f(0), f(1), ..., f(E - 1) with compile-time indices: loops the compiler must unroll completely (before it
// vectorises across matrices, which #pragma GCC unroll does not ensure).
template <int B, int E, class F>
TWOLAYER_INLINE TWOLAYER_HD void unrolled(F&& f) {
  if constexpr (B < E) {
    f(std::integral_constant<int, B>{});
    unrolled<B + 1, E>(f);
  }
}

// The covariance test, fully unrolled (N <= 4) and branch-free so that the batches check whole blocks of matrices in
// one vectorised loop. Entry (i, j) is C[(N i + j) stride]: stride 1 for one row-major matrix, the block length for
// a block stored matrix-entry-major (unit-stride loads across matrices). Failed conditions are counted in a double
// (not and-ed bools: their byte-wide masks keep GCC from vectorising next to the doubles). NaN fails every
// comparison below, inf on the diagonal fails the scale test.
template <int N>
TWOLAYER_INLINE TWOLAYER_HD double diagonal_scale(const double* C, std::size_t stride) {
  double scale = 0.0;
  unrolled<0, N>([&](auto i) {
    const double a = std::fabs(C[(N * i + i) * stride]);
    scale = scale < a ? a : scale;  // std::max by value (its reference result keeps loops from vectorising)
  });
  return scale;
}

// The number of failed symmetry conditions (0: symmetric).
template <int N>
TWOLAYER_INLINE TWOLAYER_HD double asymmetries(const double* C, std::size_t stride, double scale) {
  const double sym_tol = 1e-9 * (scale < 1e-300 ? 1e-300 : scale);
  double fails = scale <= std::numeric_limits<double>::max() ? 0.0 : 1.0;
  unrolled<0, N>([&](auto i) {
    unrolled<i + 1, N>([&](auto j) {
      fails += std::fabs(C[(N * i + j) * stride] - C[(N * j + i) * stride]) <= sym_tol ? 0.0 : 1.0;
    });
  });
  return fails;
}

// The number of failed conditions (0: a valid covariance).
template <int N>
TWOLAYER_INLINE TWOLAYER_HD double covariance_failures(const double* C, std::size_t stride) {
  const double scale = diagonal_scale<N>(C, stride);
  // LDL^T without pivoting; a pivot within tolerance of 0 must have a (numerically) zero column below it.
  // A pivot below tol counts as zero; the column below it must then be within what PSD allows for such a pivot,
  // |r| <= sqrt(pivot * C_ii) <= sqrt(tol * scale) (Cauchy-Schwarz on the Schur complement).
  const double tol = 1e-10 * scale, zero_tol = 2.0 * std::sqrt(tol * scale) + 1e-300;
  double L[N][N] = {}, D[N] = {};
  double fails = asymmetries<N>(C, stride, scale);
  unrolled<0, N>([&](auto j) {
    double d = C[(N * j + j) * stride];
    unrolled<0, j>([&](auto k) { d -= L[j][k] * L[j][k] * D[k]; });
    fails += d >= -tol ? 0.0 : 1.0;
    D[j] = d > tol ? d : 0.0;
    const double inv = D[j] > 0.0 ? 1.0 / D[j] : 0.0;
    unrolled<j + 1, N>([&](auto i) {
      double r = C[(N * i + j) * stride];
      unrolled<0, j>([&](auto k) { r -= L[i][k] * L[j][k] * D[k]; });
      fails += D[j] > 0.0 ? 0.0 : (std::fabs(r) <= zero_tol ? 0.0 : 1.0);
      L[i][j] = r * inv;
    });
  });
  return fails;
}

// Extreme scales. The closed forms are evaluated as written for variances in [kVarLo, kVarHi] (or 0), where no
// intermediate over- or underflows; a matrix with a variance outside goes to the batches' rescaling (gaussian.cpp).
inline constexpr double kVarLo = 1e-60, kVarHi = 1e60;
TWOLAYER_HD inline bool ordinary_variance(double v) { return v == 0.0 || (v >= kVarLo && v <= kVarHi); }

}  // namespace twolayer::kernels
