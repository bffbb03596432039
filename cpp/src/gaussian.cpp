// Scalar and batched Gaussian kernels built on the closed-form I2 of gaussian.hpp.
#include "twolayer/gaussian.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "twolayer/format.hpp"
#include "twolayer/gaussian_kernels.hpp"
#include "twolayer/parallel.hpp"

namespace twolayer {

double i2(Activation a, Activation b, const double* C) { return kernels::i2(a, b, C); }
double i3(Activation s, Activation b, const double* C) { return kernels::i3(s, b, C); }
double j2(Activation s, const double* C) { return kernels::j2(s, C); }
double i4(Activation s, Activation a, Activation b, const double* C) { return kernels::i4(s, a, b, C); }

namespace {

using kernels::asymmetries;
using kernels::covariance_failures;
using kernels::diagonal_scale;
using kernels::i4_erf;
using kernels::kVarHi;
using kernels::kVarLo;

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

// Extreme scales (kernels::kVarLo, kVarHi): a matrix with a variance outside goes to rescaled(). The check is one
// vectorised comparison per diagonal entry, inside the block's check pass.

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
    default: break;  // smooth units are never rescaled (rescaled())
  }
  return u.use == Use::Deriv ? k - 1 : k;
}

// A kernel at a covariance with extreme variances, by positive homogeneity variable by variable: with a power of
// two c_i = 2^e_i per variable (bringing homogeneous variances into [0.5, 2), erf ones to 2^+-64), the kernel at C
// is prod_i c_i^k_i times the kernel at C'_ij = C_ij / (c_i c_j) (exact scalings). A value beyond the double range
// throws (the contract is finite or an error); one below it underflows towards 0, its correct rounding.
template <int n, class F>
double rescaled(const std::array<Unit, n>& units, F&& kernel, const double* C, std::size_t index) {
  int e[n];
  long total = 0;
  for (int i = 0; i < n; ++i) {
    const double v = C[n * i + i];
    e[i] = 0;
    if (!(v > 0.0) || (!is_classic(units[i].act) && units[i].use != Use::Identity)) continue;
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
void batch(const double* C, std::size_t count, double* out, int n_threads, F&& kernel_block,
           const std::array<Unit, n>& units, G&& scalar) {
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
    default: break;
  }
}

// The units each kernel applies its activations to (rescaled()).
std::array<Unit, 2> i2_units(Activation a, Activation b) { return {{{a, Use::Sigma}, {b, Use::Sigma}}}; }
std::array<Unit, 3> i3_units(Activation s, Activation b) {
  return {{{s, Use::Deriv}, {Activation::Linear, Use::Identity}, {b, Use::Sigma}}};
}
std::array<Unit, 2> j2_units(Activation s) { return {{{s, Use::Deriv}, {s, Use::Deriv}}}; }
std::array<Unit, 4> i4_units(Activation s, Activation a, Activation b) {
  return {{{s, Use::Deriv}, {s, Use::Deriv}, {a, Use::Sigma}, {b, Use::Sigma}}};
}

// The matrices indices[0..k) (ascending) as batch() treats them: every one checked first (the first invalid one
// raises, naming it), then each evaluated, rescaled where a variance is extreme.
template <int n, class G>
void at_indices(const double* C, const std::size_t* indices, std::size_t k, double* out,
                const std::array<Unit, n>& units, G&& scalar) {
  for (std::size_t j = 0; j < k; ++j)
    if (const char* why = covariance_error_n<n>(C + indices[j] * n * n))
      throw std::invalid_argument("C[" + std::to_string(indices[j]) + "]: " + why);
  for (std::size_t j = 0; j < k; ++j) {
    const double* Cj = C + indices[j] * n * n;
    bool ext = false;
    for (int i = 0; i < n; ++i) ext = ext || !kernels::ordinary_variance(Cj[n * i + i]);
    out[indices[j]] = ext ? rescaled<n>(units, scalar, Cj, indices[j]) : scalar(Cj);
  }
}

}  // namespace

void i2_batch(Activation a, Activation b, const double* C, std::size_t count, double* out, int n_threads) {
  const auto k = [=](const double* Ci) { return i2(a, b, Ci); };
  batch<2>(C, count, out, n_threads, each<2>(k), i2_units(a, b), k);
}
void i3_batch(Activation s, Activation b, const double* C, std::size_t count, double* out, int n_threads) {
  const auto k = [=](const double* Ci) { return i3(s, b, Ci); };
  batch<3>(C, count, out, n_threads, each<3>(k), i3_units(s, b), k);
}
void j2_batch(Activation s, const double* C, std::size_t count, double* out, int n_threads) {
  const auto k = [=](const double* Ci) { return j2(s, Ci); };
  batch<2>(C, count, out, n_threads, each<2>(k), j2_units(s), k);
}
void i4_batch(Activation s, Activation a, Activation b, const double* C, std::size_t count, double* out,
              int n_threads) {
  const auto k = [=](const double* Ci) { return i4(s, a, b, Ci); };
  const auto u = i4_units(s, a, b);
  if (s == Activation::Erf && is_classic(a) && is_classic(b)) {
    with_activation(a, [&](auto A) {
      with_activation(b, [&](auto B) { batch<4>(C, count, out, n_threads, i4_erf_block<A(), B()>, u, k); });
    });
    return;
  }
  batch<4>(C, count, out, n_threads, each<4>(k), u, k);
}

void i2_batch_at(Activation a, Activation b, const double* C, const std::size_t* indices, std::size_t k, double* out) {
  at_indices<2>(C, indices, k, out, i2_units(a, b), [=](const double* Ci) { return i2(a, b, Ci); });
}
void i3_batch_at(Activation s, Activation b, const double* C, const std::size_t* indices, std::size_t k, double* out) {
  at_indices<3>(C, indices, k, out, i3_units(s, b), [=](const double* Ci) { return i3(s, b, Ci); });
}
void j2_batch_at(Activation s, const double* C, const std::size_t* indices, std::size_t k, double* out) {
  at_indices<2>(C, indices, k, out, j2_units(s), [=](const double* Ci) { return j2(s, Ci); });
}
void i4_batch_at(Activation s, Activation a, Activation b, const double* C, const std::size_t* indices, std::size_t k,
                 double* out) {
  at_indices<4>(C, indices, k, out, i4_units(s, a, b), [=](const double* Ci) { return i4(s, a, b, Ci); });
}

}  // namespace twolayer
