// Scalar and batched Gaussian kernels built on the closed-form I2 of gaussian.hpp.
#include "twolayer/gaussian.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "twolayer/format.hpp"
#include "twolayer/gaussian_orthant.hpp"
#include "twolayer/gaussian_relu_i4.hpp"
#include "twolayer/parallel.hpp"

namespace twolayer {
namespace {

inline double at(const double* C, int n, int i, int j) { return C[n * i + j]; }

// Covariance of (l3, l4) after conditioning (l1, l2) on a Gaussian observation at 0 with noise variance
// `noise` (noise = 0: exact conditioning). Returns det(C_AA + noise I) through `det`.
TWOLAYER_INLINE void condition_on_first_pair(const double* C, double noise, double out[3], double& det) {
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
TWOLAYER_INLINE double i4_erf(Activation a, Activation b, const double* C) {
  double cond[3], det;
  condition_on_first_pair(C, 1.0, cond, det);
  return (2.0 / kPi) / std::sqrt(det) * i2<double>(a, b, cond[0], cond[1], cond[2]);
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
    case A::Erf: return i4_erf(a, b, C);
    case A::Step: {
      double cond[3], det;
      condition_on_first_pair(C, 0.0, cond, det);
      if (!(det > 0.0))
        throw std::domain_error("C: the step activation's I4 = E[delta delta a b] needs C[:2, :2] non-singular");
      return 1.0 / (2.0 * kPi * std::sqrt(det)) * i2<double>(a, b, cond[0], cond[1], cond[2]);
    }
    case A::Relu:
      if (a == A::Relu && b == A::Relu) return detail::relu_i4(C);
      if (a == A::Linear && b == A::Linear) return detail::relu_i4_linear_linear(C);
      if (a == A::Linear && b == A::Relu) return detail::relu_i4_linear_relu(C);
      if (a == A::Relu && b == A::Linear) {
        // Swap l3 and l4 so that the linear unit comes first.
        static constexpr int perm[4] = {0, 1, 3, 2};
        double S[16];
        for (int i = 0; i < 4; ++i)
          for (int k = 0; k < 4; ++k) S[4 * i + k] = C[4 * perm[i] + perm[k]];
        return detail::relu_i4_linear_relu(S);
      }
      return detail::relu_i4_general(a, b, C);  // orthant moments (gaussian_orthant.hpp)
  }
  throw not_implemented(std::string("i4: no closed form or quadrature for (") + activation_name(s) + ", " +
                        activation_name(a) + ", " + activation_name(b) + ")");
}

namespace {

// f(0), f(1), ..., f(E - 1) with compile-time indices: loops the compiler must unroll completely (before it
// vectorises across matrices, which #pragma GCC unroll does not ensure).
template <int B, int E, class F>
TWOLAYER_INLINE void unrolled(F&& f) {
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
TWOLAYER_INLINE double diagonal_scale(const double* C, std::size_t stride) {
  double scale = 0.0;
  unrolled<0, N>([&](auto i) {
    const double a = std::fabs(C[(N * i + i) * stride]);
    scale = scale < a ? a : scale;  // std::max by value (its reference result keeps loops from vectorising)
  });
  return scale;
}

// The number of failed symmetry conditions (0: symmetric).
template <int N>
TWOLAYER_INLINE double asymmetries(const double* C, std::size_t stride, double scale) {
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
TWOLAYER_INLINE double covariance_failures(const double* C, std::size_t stride) {
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

// covariance_error for a compile-time size; the reason is worked out only on failure.
template <int N>
const char* covariance_error_n(const double* C) {
  if (covariance_failures<N>(C, 1) == 0.0) return nullptr;
  for (int i = 0; i < N * N; ++i)
    if (!std::isfinite(C[i])) return "entries must be finite (got NaN or inf)";
  return asymmetries<N>(C, 1, diagonal_scale<N>(C, 1)) == 0.0 ? "covariance matrix must be positive semi-definite"
                                                              : "covariance matrix must be symmetric";
}

}  // namespace

const char* covariance_error(const double* C, int n) {
  switch (n) {
    case 1: return covariance_error_n<1>(C);
    case 2: return covariance_error_n<2>(C);
    case 3: return covariance_error_n<3>(C);
    case 4: return covariance_error_n<4>(C);
  }
  throw std::invalid_argument("covariance_error: only sizes 1 to 4 are supported");
}

namespace {

// Matrices per block: the check pass and the kernel pass of a block stay in L1.
constexpr std::size_t kBlock = 256;

// Extreme scales. The closed forms are evaluated as written for variances in [kVarLo, kVarHi] (or 0), where no
// intermediate over- or underflows; a matrix with a variance outside goes to rescaled(). The check is one
// vectorised comparison per diagonal entry, inside the block's check pass.
constexpr double kVarLo = 1e-60, kVarHi = 1e60;

// What a kernel applies to one Gaussian variable: sigma, sigma' or the identity (I3's l2).
enum class Use { Sigma, Deriv, Identity };
struct Unit {
  Activation act;
  Use use;
};

// The degree k of f(c x) = c^k f(x) for the function `u` applies, exactly for linear, relu, step and quadratic
// (sigma' of step is a delta: -1). erf is not homogeneous, but at variance 2^64 (erf = sign to ~1e-19, erf' =
// 2 delta) and 2^-64 (erf and erf' linear and constant to ~1e-19) it is to double precision: rescaled() moves erf
// variances outside [2^-64, 2^64] to those ends and uses these limiting degrees.
int degree(Unit u, bool huge) {
  using A = Activation;
  if (u.use == Use::Identity) return 1;
  int k = 0;
  switch (u.act) {
    case A::Linear: case A::Relu: k = 1; break;
    case A::Step: k = 0; break;
    case A::Quadratic: k = 2; break;
    case A::Erf: k = huge ? 0 : 1; break;
  }
  return u.use == Use::Deriv ? k - 1 : k;
}

// A kernel at a covariance with extreme variances, by positive homogeneity variable by variable: with a power of
// two c_i = 2^e_i per variable (bringing homogeneous variances into [0.5, 2), erf ones to 2^+-64), the kernel at C
// is prod_i c_i^k_i times the kernel at C'_ij = C_ij / (c_i c_j) (exact scalings). A value beyond the double range
// throws (the contract is finite or an error); one below it underflows towards 0, its correct rounding.
template <int n, class F>
double rescaled(const Unit (&units)[n], F&& kernel, const double* C, std::size_t index) {
  int e[n];
  long total = 0;
  for (int i = 0; i < n; ++i) {
    const double v = C[n * i + i];
    e[i] = 0;
    if (!(v > 0.0)) continue;
    int ex;
    std::frexp(v, &ex);  // v = f 2^ex, f in [0.5, 1)
    const bool huge = v > 1.0;
    if (units[i].act == Activation::Erf) {
      if (v > 0x1p64) e[i] = (ex - 64) / 2;
      else if (v < 0x1p-64) e[i] = (ex + 64) / 2;
      else continue;
    } else {
      e[i] = ex >= 0 ? ex / 2 : -((1 - ex) / 2);  // floor(ex / 2)
    }
    total += static_cast<long>(degree(units[i], huge)) * e[i];
  }
  double S[n * n];
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < n; ++k) S[n * i + k] = std::ldexp(C[n * i + k], -(e[i] + e[k]));
  const double v = kernel(S);
  const double r = std::ldexp(v, static_cast<int>(std::max(-100000L, std::min(100000L, total))));
  if (!std::isfinite(r)) {
    throw std::domain_error(concat("C[", index,
                                   "]: the kernel's value exceeds the double range at this covariance scale (max |C_ii| = ",
                                   diagonal_scale<n>(C, 1), ")"));
  }
  return r;
}

// Blocks in parallel; each block first checks all its matrices (one vectorised loop over a matrix-entry-major
// copy), naming the first invalid one, then calls kernel_block(C, m, out) on its m matrices.
template <int n, class F, class G>
void batch(const double* C, std::size_t count, double* out, int n_threads, F&& kernel_block, const Unit (&units)[n],
           G&& scalar) {
  const std::size_t blocks = (count + kBlock - 1) / kBlock;
  parallel_for(blocks, n_threads, [&](std::size_t b) {
    const std::size_t i0 = b * kBlock, m = std::min(kBlock, count - i0);
    const double* Cb = C + i0 * n * n;
    double T[n * n * kBlock];
    for (std::size_t j = 0; j < m; ++j)
      for (int e = 0; e < n * n; ++e) T[e * kBlock + j] = Cb[j * n * n + e];
    double fails = 0.0;
    for (std::size_t j = 0; j < m; ++j) fails += covariance_failures<n>(T + j, kBlock);
    if (fails != 0.0)
      for (std::size_t j = 0; j < m; ++j)
        if (const char* why = covariance_error_n<n>(Cb + j * n * n))
          throw std::invalid_argument("C[" + std::to_string(i0 + j) + "]: " + why);
    int extreme = 0;  // an OR over the diagonal entries, one vectorised pass per variable
    for (int i = 0; i < n; ++i) {
      const double* diag = T + (n * i + i) * kBlock;
#pragma omp simd reduction(| : extreme)
      for (std::size_t j = 0; j < m; ++j) {
        const double v = diag[j];
        extreme |= (v == 0.0 || (v >= kVarLo && v <= kVarHi)) ? 0 : 1;
      }
    }
    if (extreme == 0) {
      kernel_block(Cb, m, out + i0);
      return;
    }
    for (std::size_t j = 0; j < m; ++j) {  // a block with extreme scales: matrix by matrix
      const double* Cj = Cb + j * n * n;
      bool ext = false;
      for (int i = 0; i < n; ++i) {
        const double v = Cj[n * i + i];
        ext = ext || !(v == 0.0 || (v >= kVarLo && v <= kVarHi));
      }
      out[i0 + j] = ext ? rescaled<n>(units, scalar, Cj, i0 + j) : scalar(Cj);
    }
  }, 1, 1);  // one block at a time: blocks are already large enough, and the slow kernels must spread evenly
}

// A scalar kernel applied to each matrix of a block.
template <int n, class F>
auto each(F kernel) {
  return [=](const double* C, std::size_t m, double* out) {
    for (std::size_t j = 0; j < m; ++j) out[j] = kernel(C + j * n * n);
  };
}

// erf I4 with the activation switch hoisted out of the loop: i4_erf and the closed-form I2 inline with constant
// activations, and the loop vectorises (asin_simd, see gaussian.hpp).
template <Activation A, Activation B>
[[gnu::flatten]] void i4_erf_block(const double* C, std::size_t m, double* out) {
  for (std::size_t j = 0; j < m; ++j) out[j] = i4_erf(A, B, C + 16 * j);
}

// f(std::integral_constant<Activation, a>) for a runtime activation a.
template <class F>
void with_activation(Activation a, F&& f) {
  using A = Activation;
  switch (a) {
    case A::Linear: return f(std::integral_constant<A, A::Linear>{});
    case A::Erf: return f(std::integral_constant<A, A::Erf>{});
    case A::Relu: return f(std::integral_constant<A, A::Relu>{});
    case A::Step: return f(std::integral_constant<A, A::Step>{});
    case A::Quadratic: return f(std::integral_constant<A, A::Quadratic>{});
  }
}

}  // namespace

void i2_batch(Activation a, Activation b, const double* C, std::size_t count, double* out, int n_threads) {
  const auto k = [=](const double* Ci) { return i2(a, b, Ci); };
  const Unit u[2] = {{a, Use::Sigma}, {b, Use::Sigma}};
  batch<2>(C, count, out, n_threads, each<2>(k), u, k);
}
void i3_batch(Activation s, Activation b, const double* C, std::size_t count, double* out, int n_threads) {
  const auto k = [=](const double* Ci) { return i3(s, b, Ci); };
  const Unit u[3] = {{s, Use::Deriv}, {Activation::Linear, Use::Identity}, {b, Use::Sigma}};
  batch<3>(C, count, out, n_threads, each<3>(k), u, k);
}
void j2_batch(Activation s, const double* C, std::size_t count, double* out, int n_threads) {
  const auto k = [=](const double* Ci) { return j2(s, Ci); };
  const Unit u[2] = {{s, Use::Deriv}, {s, Use::Deriv}};
  batch<2>(C, count, out, n_threads, each<2>(k), u, k);
}
void i4_batch(Activation s, Activation a, Activation b, const double* C, std::size_t count, double* out,
              int n_threads) {
  const auto k = [=](const double* Ci) { return i4(s, a, b, Ci); };
  const Unit u[4] = {{s, Use::Deriv}, {s, Use::Deriv}, {a, Use::Sigma}, {b, Use::Sigma}};
  if (s == Activation::Erf) {
    with_activation(a, [&](auto A) {
      with_activation(b, [&](auto B) { batch<4>(C, count, out, n_threads, i4_erf_block<A(), B()>, u, k); });
    });
    return;
  }
  batch<4>(C, count, out, n_threads, each<4>(k), u, k);
}

}  // namespace twolayer
