// Gaussian angle kernels: expectations of products of activations over a small centred Gaussian.
//
//   I2(a, b; C)      = E[a(l1) b(l2)],                       C 2x2
//   self(a, b; q)    = E[a(l) b(l)],  l ~ N(0, q)             (the diagonal of I2, smooth in q)
//   I3(s, b; C)      = E[s'(l1) l2 b(l3)],                   C 3x3
//   J2(s; C)         = E[s'(l1) s'(l2)],                     C 2x2
//   I4(s, a, b; C)   = E[s'(l1) s'(l2) a(l3) b(l4)],         C 4x4
//
// Every I2 is a closed form written once as a template (double for values, Jet for exact covariance
// derivatives). The others follow from it:
//   * Stein + Price: I3 = 2 C12 dI2/dC11 + C23 dI2/dC12, with I2 = I2(s, b) on the (1,3) block;
//                    J2 = dI2(s, s)/dC12.
//   * I4, linear s:    I2(a, b) on the (3,4) block.
//   * I4, quadratic s: 4 [C12 I2 + 2 C13 C23 dI2/dC33 + (C13 C24 + C14 C23) dI2/dC34 + 2 C14 C24 dI2/dC44].
//   * I4, erf s:       s'(x) = sqrt(2/pi) exp(-x^2/2) acts as a Gaussian observation of (l1, l2) at 0:
//                      I4 = (2/pi) det(I + C_AA)^(-1/2) I2(a, b; C_BB - C_BA (I + C_AA)^(-1) C_AB).
//   * I4, step s:      s' = delta: I4 = p_A(0, 0) I2(a, b; C_BB - C_BA C_AA^(-1) C_AB).
//   * I4, relu s:      see gaussian_relu_i4.hpp (Price interpolation along C(t) = (1-t) C0 + t C) for relu and
//                      linear units; every other pair through orthant moments (gaussian_orthant.hpp).
#pragma once
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "twolayer/activation.hpp"
#include "twolayer/gaussian_smooth.hpp"
#include "twolayer/jet.hpp"
#include "twolayer/simd_math.hpp"

namespace twolayer {

// A pair for which no closed form or quadrature is implemented (mapped to Python's NotImplementedError).
struct not_implemented : std::logic_error {
  using std::logic_error::logic_error;
};

// Below this value of 1 - cos^2 the second (relu) or first (step) angle derivative, whose contribution to any
// weight-space derivative vanishes like sin(theta), is set to its weight-space limit 0. Above it, the
// cancellation error of the chain rule is eps / sin(theta); both errors stay below 1e-8 relative.
inline constexpr double kAlignedSin2 = 1e-16;

// c clipped to [-1, 1] (NaN to -1, as fmax(-1, fmin(1, c))), written as selects so that loops vectorise.
TWOLAYER_HD inline double clip_correlation(double c) {
  c = c < 1.0 ? c : 1.0;
  return c > -1.0 ? c : -1.0;
}

// pi - acos(c) = pi/2 + asin(c) through the branch-free asin_simd (vectorisable, about 2 ulp).
TWOLAYER_HD inline double supplementary_angle(double c) { return 0.5 * kPi + asin_simd(c); }

// H(c) = sqrt(1 - c^2) + (pi - acos c) c, so that E[relu relu] = sqrt(C11 C22) H(c) / (2 pi).
TWOLAYER_HD inline double relu_angle(double c) {
  c = clip_correlation(c);
  return std::sqrt(1.0 - c * c) + supplementary_angle(c) * c;
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> relu_angle(const BasicJet<S>& cj) {
  const double c = clip_correlation(cj.v);
  const double w = 1.0 - c * c;
  const double h2 = w < kAlignedSin2 ? 0.0 : 1.0 / std::sqrt(w);
  const double h1 = supplementary_angle(c);
  return chain(cj, std::sqrt(w) + h1 * c, h1, h2);
}

// S(c) = (pi - acos c) / (2 pi) = E[step step] for correlation c.
TWOLAYER_HD inline double step_angle(double c) {
  c = std::fmax(-1.0, std::fmin(1.0, c));
  return (kPi - std::acos(c)) / (2.0 * kPi);
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> step_angle(const BasicJet<S>& cj) {
  const double c = std::fmax(-1.0, std::fmin(1.0, cj.v));
  const double w = 1.0 - c * c;
  const bool aligned = w < kAlignedSin2;
  const double s1 = aligned ? 0.0 : 1.0 / (2.0 * kPi * std::sqrt(w));
  const double s2 = aligned ? 0.0 : c * s1 / w;
  return chain(cj, (kPi - std::acos(c)) / (2.0 * kPi), s1, s2);
}

// Angle forms, for tables and rows of pairs that share units (population gradients, the ODE's kernel tables): the
// erf-erf, relu-relu and step-step I2 with their first derivatives in (x, y, z) = (C11, C12, C22), from a per-unit
// normaliser r (angle_norm) and n = sqrt(variance), computed once per unit so that a pair costs no division beyond
// the arcsine's. With c = y r_x r_z and s = sqrt(1 - c^2):
//   erf  (r = (1 + var)^-1/2): I2 = (2/pi) asin(c),    dI2/dy = (2/pi) r_x r_z / s,  dI2/dx = -y r_x^2 dI2/dy / 2;
//   relu (r = var^-1/2):       I2 = n_x n_z (s + phi c) / (2 pi),  dI2/dy = phi / (2 pi),  dI2/dx = n_z r_x s / (4 pi);
//   step (r = var^-1/2):       I2 = phi / (2 pi),   dI2/dy = r_x r_z / (2 pi s),  dI2/dx = -c r_x^2 / (4 pi s),
// phi = pi - acos(c), and dI2/dz as dI2/dx with the units swapped (the step derivatives set to their weight-space
// limit 0 at aligned pairs, as step_angle's). The same values as i2_jet<Grad> (tested); a zero-variance relu or step
// unit gives 0, as i2. TWOLAYER_HD (hd.hpp): the ODE's lane right-hand side (batch_dynamics.hpp) uses them on the host
// and in the CUDA backend.
TWOLAYER_HD inline double angle_norm(Activation a, double variance) {
  if (a == Activation::Erf) return 1.0 / std::sqrt(1.0 + variance);
  return variance > 0.0 ? 1.0 / std::sqrt(variance) : 0.0;
}
struct PairGrad {
  double v, gx, gy, gz;
};
// The step-step I2 = (pi - theta) / (2 pi) from the cosine c and sine s of the angle: its derivatives in
// (x, y, z) = (C11, C12, C22) (rx = x^-1/2, rz = z^-1/2): dI2/dy = rx rz / (2 pi s), dI2/dx = -c rx^2 / (4 pi s),
// dI2/dz = -c rz^2 / (4 pi s); all 0 at s = 0 (the cusp: pairs exactly aligned or antipodal exert no force).
// The value is the caller's (from c alone where s is sqrt(1 - c^2), from atan2(s, c) where s is accurate).
TWOLAYER_INLINE TWOLAYER_HD PairGrad step_pair_grad(double rx, double rz, double c, double s) {
  constexpr double inv_2pi = 1.0 / (2.0 * kPi);
  const double ds = s > 0.0 ? inv_2pi / s : 0.0;  // dI2/dc
  return {0.0, -0.5 * c * rx * rx * ds, ds * rx * rz, -0.5 * c * rz * rz * ds};
}

template <Activation A>
TWOLAYER_INLINE TWOLAYER_HD PairGrad angle_pair_grad(double nx, double rx, double nz, double rz, double y) {
  static_assert(A == Activation::Erf || A == Activation::Relu || A == Activation::Step,
                "angle forms: erf, relu or step pairs");
  const double c = clip_correlation(y * rx * rz), w = 1.0 - c * c, s = std::sqrt(w);
  constexpr double inv_2pi = 1.0 / (2.0 * kPi);  // multiplications: a division by a constant stays a division
  if constexpr (A == Activation::Erf) {
    (void)nx;
    (void)nz;
    const double gy = (2.0 / kPi) * rx * rz / s;
    return {(2.0 / kPi) * asin_simd(c), -0.5 * y * rx * rx * gy, gy, -0.5 * y * rz * rz * gy};
  } else {
    const bool live = rx > 0.0 && rz > 0.0;
    const double phi = supplementary_angle(c);
    double v, gx, gy, gz;
    if constexpr (A == Activation::Relu) {
      v = nx * nz * (s + phi * c) * inv_2pi;
      gy = phi * inv_2pi;
      gx = 0.5 * nz * rx * s * inv_2pi;
      gz = 0.5 * nx * rz * s * inv_2pi;
    } else {
      const PairGrad g = step_pair_grad(rx, rz, c, w < kAlignedSin2 ? 0.0 : s);
      v = phi * inv_2pi;
      gx = g.gx;
      gy = g.gy;
      gz = g.gz;
    }
    return {live ? v : 0.0, live ? gx : 0.0, live ? gy : 0.0, live ? gz : 0.0};
  }
}

// Cosine and sine of the angle between two rows x, y (length n; rx = 1 / |x|, ry = 1 / |y|), from the squared chords
// of the unit vectors u = x rx, v = y ry: dm = |u - v|^2, dp = |u + v|^2, c = (dp - dm) / 4, s = sqrt(dm dp) / 2.
// Unlike sqrt(1 - c^2) of the cosine x.y rx ry, which loses every digit below theta ~ 1.5e-8 (1 - c^2 then sits at
// the rounding error of c), these keep the relative accuracy of the chords, ~eps / theta: atan2(s, c) is the angle
// to about eps / theta relative at 0 and at pi (and 1 - c = dm / 2, 1 + c = dp / 2 to the same accuracy).
struct UnitChords {
  double dm, dp;
};
inline UnitChords unit_chords(const double* __restrict x, double rx, const double* __restrict y, double ry, int n) {
  double dm = 0.0, dp = 0.0;
#pragma omp simd reduction(+ : dm, dp)
  for (int j = 0; j < n; ++j) {
    const double u = x[j] * rx, v = y[j] * ry;
    dm += (u - v) * (u - v);
    dp += (u + v) * (u + v);
  }
  return {dm, dp};
}
struct CosSin {
  double c, s;
};
inline CosSin unit_cos_sin(const double* __restrict x, double rx, const double* __restrict y, double ry, int n) {
  const UnitChords h = unit_chords(x, rx, y, ry, n);
  return {0.25 * (h.dp - h.dm), 0.5 * std::sqrt(h.dm * h.dp)};
}

// Below this sine of the angle between two step units (from unit_cos_sin) their pair's force, the cusp of
// I2 = (pi - theta) / (2 pi), is set to 0 (its subgradient at alignment): there its direction, a difference of two
// nearly equal unit vectors, carries a relative rounding error eps / sin ~ 2e-3. It contributes ~1e-14 to the risk.
inline constexpr double kStepUnresolvedSin = 1e-13;

// The closed forms' arcsine on plain numbers (and in the Jets, jet.hpp) is the branch-free asin_simd (about 2 ulp):
// loops over many kernels of one activation pair then vectorise (batched erf I4; the kernel tables use it too).
TWOLAYER_HD inline double asin(double x) { return asin_simd(x); }
using std::atan;
using std::sqrt;

// Jets of the kernels of smooth units without a closed-form pair (gaussian_smooth.hpp): from the Price moments of the
// pair, composed with the input jets (x, y, z may themselves be jets of other variables).
template <class T>
struct JetOrder {
  static constexpr int value = 0;
};
template <bool S>
struct JetOrder<BasicJet<S>> {
  static constexpr int value = S ? 2 : 1;
};

// F(x, y, z) from its value f, gradient F[3] and packed Hessian H[6] (xx, xy, xz, yy, yz, zz) at the input values.
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> compose3(const BasicJet<S>& x, const BasicJet<S>& y, const BasicJet<S>& z,
                                                 double f, const double* F, const double* H) {
  const BasicJet<S>* X[3] = {&x, &y, &z};
  BasicJet<S> r(f);
  for (int p = 0; p < 3; ++p) r.g[p] = F[0] * x.g[p] + F[1] * y.g[p] + F[2] * z.g[p];
  if constexpr (S) {
    for (int p = 0; p < 3; ++p)
      for (int q = p; q < 3; ++q) {
        const int k = BasicJet<S>::hidx(p, q);
        double v = 0.0;
        for (int i = 0; i < 3; ++i) {
          v += F[i] * X[i]->h[k];
          for (int j = 0; j < 3; ++j) v += H[BasicJet<S>::hidx(i, j)] * X[i]->g[p] * X[j]->g[q];
        }
        r.h[k] = v;
      }
  } else {
    (void)X;
    (void)H;
  }
  return r;
}

#define TWOLAYER_SMOOTH_CHECK(a, b, T)                                                                              \
  if (!smooth::is_smooth(a) || !smooth::is_smooth(b))                                                              \
    TWOLAYER_HOST_THROW(not_implemented("kernels: relu and step units pair in closed form only with linear, erf, " \
                                        "relu, step and quadratic units"),                                         \
                        T(kNaN));

#define TWOLAYER_SMOOTH_FAIL(T)                                                                                      \
  TWOLAYER_HOST_THROW(std::domain_error("kernels: the Gaussian quadrature of a smooth activation could not reach its " \
                                        "certified accuracy at this covariance (a variance too large, or a custom "   \
                                        "table's rounding dominating at a variance near 0)"),                    \
                      T(kNaN))

// I2 = E[a(l1) b(l2)] with a or b a smooth unit without closed-form pair: Price, dI2/dC11 = E[a'' b] / 2,
// dI2/dC12 = E[a' b'], dI2/dC22 = E[a b''] / 2, and the second derivatives from the fourth-order moments.
template <class T>
TWOLAYER_HD T smooth_i2(Activation a, Activation b, const T& x, const T& y, const T& z) {
  TWOLAYER_SMOOTH_CHECK(a, b, T)
  constexpr int order = JetOrder<T>::value;
  double m[smooth::kMoments];
  if (!smooth::moments(a, b, 0.0, 0.0, value(x), value(y), value(z), order, m)) TWOLAYER_SMOOTH_FAIL(T);
  if constexpr (order == 0) {
    return m[0];
  } else {
    using smooth::moment_index;
    const double F[3] = {0.5 * m[moment_index(2, 0)], m[moment_index(1, 1)], 0.5 * m[moment_index(0, 2)]};
    double H[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    if constexpr (order == 2) {
      H[0] = 0.25 * m[moment_index(4, 0)];
      H[1] = 0.5 * m[moment_index(3, 1)];
      H[2] = 0.25 * m[moment_index(2, 2)];
      H[3] = m[moment_index(2, 2)];
      H[4] = 0.5 * m[moment_index(1, 3)];
      H[5] = 0.25 * m[moment_index(0, 4)];
    }
    return compose3(x, y, z, m[0], F, H);
  }
}

// E[a(l) b(l)], l ~ N(0, q), for the same pairs: its q-derivatives are E[(ab)^(2)] / 2 and E[(ab)^(4)] / 4
// (Leibniz on the product).
template <class T>
TWOLAYER_HD T smooth_i2_self(Activation a, Activation b, const T& q) {
  TWOLAYER_SMOOTH_CHECK(a, b, T)
  constexpr int order = JetOrder<T>::value;
  double m[smooth::kMoments];
  const double qv = value(q);
  if (!smooth::moments(a, b, 0.0, 0.0, qv, qv, qv, order, m)) TWOLAYER_SMOOTH_FAIL(T);
  if constexpr (order == 0) {
    return m[0];
  } else {
    using smooth::moment_index;
    const double d1 = 0.5 * (m[moment_index(2, 0)] + 2.0 * m[moment_index(1, 1)] + m[moment_index(0, 2)]);
    const double d2 = order == 2 ? 0.25 * (m[moment_index(4, 0)] + 4.0 * m[moment_index(3, 1)] +
                                           6.0 * m[moment_index(2, 2)] + 4.0 * m[moment_index(1, 3)] +
                                           m[moment_index(0, 4)])
                                 : 0.0;
    return chain(q, m[0], d1, d2);
  }
}

// E[a(l1) b(l2)] for (l1, l2) ~ N(0, [[x, y], [y, z]]). Zero variance means the unit is identically 0
// (and step(0) = 0); a smooth unit at zero variance is the constant sigma(0). TWOLAYER_HD: the CUDA backend's kernels use the same closed forms. i2_ordered takes a <= b.
template <class T>
TWOLAYER_HD T i2_ordered(Activation a, Activation b, const T& x, const T& y, const T& z) {
  if (!is_classic(a) || !is_classic(b)) return smooth_i2<T>(a, b, x, y, z);
  const bool x0 = !(value(x) > 0.0), z0 = !(value(z) > 0.0);
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * kPi);
  using A = Activation;
  switch (a) {
    case A::Linear:
      switch (b) {
        case A::Linear: return y;
        case A::Erf: return kSqrt2OverPi * y / sqrt(1.0 + z);
        case A::Relu: return 0.5 * y;
        case A::Step: return z0 ? T(0.0) : inv_sqrt_2pi * y / sqrt(z);
        case A::Quadratic: return T(0.0);
        default: break;
      }
      break;
    case A::Erf:
      switch (b) {
        case A::Erf: return (2.0 / kPi) * asin(y / sqrt((1.0 + x) * (1.0 + z)));
        case A::Relu: return 0.5 * kSqrt2OverPi * y / sqrt(1.0 + x);
        case A::Step: return z0 ? T(0.0) : (1.0 / kPi) * asin(y / sqrt((1.0 + x) * z));
        case A::Quadratic: return T(0.0);
        default: break;
      }
      break;
    case A::Relu:
      switch (b) {
        case A::Relu: {
          if (x0 || z0) return T(0.0);
          const T r = sqrt(x * z);
          return r * relu_angle(y / r) / (2.0 * kPi);
        }
        // x = 0: relu(l1) = 0 identically, and so are the derivatives (sqrt(x)'s would be infinite times C12 = 0)
        case A::Step: return (x0 || z0) ? T(0.0) : 0.5 * inv_sqrt_2pi * (y / sqrt(z) + sqrt(x));
        case A::Quadratic: return x0 ? T(0.0) : 0.5 * kSqrt2OverPi * (z * sqrt(x) + y * y / sqrt(x));
        default: break;
      }
      break;
    case A::Step:
      switch (b) {
        case A::Step: return (x0 || z0) ? T(0.0) : step_angle(y / sqrt(x * z));
        case A::Quadratic: return x0 ? T(0.0) : 0.5 * z;
        default: break;
      }
      break;
    case A::Quadratic: return x * z + 2.0 * y * y;
    default: break;
  }
  TWOLAYER_HOST_THROW(std::logic_error("i2: unreachable activation pair"), T(kNaN));
}
// Not recursive (device code needs a stack size known at compile time).
template <class T>
TWOLAYER_HD T i2(Activation a, Activation b, const T& x, const T& y, const T& z) {
  return static_cast<int>(a) > static_cast<int>(b) ? i2_ordered(b, a, z, y, x) : i2_ordered(a, b, x, y, z);
}

// E[a(l) b(l)] for l ~ N(0, q): the diagonal of I2, written so that its q-derivatives are exact at q > 0.
template <class T>
TWOLAYER_HD T i2_self(Activation a, Activation b, const T& q) {
  if (static_cast<int>(a) > static_cast<int>(b)) {  // std::swap is not a device function
    const Activation t = a;
    a = b;
    b = t;
  }
  if (!is_classic(a) || !is_classic(b)) return smooth_i2_self<T>(a, b, q);
  const bool q0 = !(value(q) > 0.0);
  const double inv_sqrt_2pi = 1.0 / std::sqrt(2.0 * kPi);
  using A = Activation;
  switch (a) {
    case A::Linear:
      switch (b) {
        case A::Linear: return q;
        case A::Erf: return kSqrt2OverPi * q / sqrt(1.0 + q);
        case A::Relu: return 0.5 * q;
        case A::Step: return q0 ? T(0.0) : inv_sqrt_2pi * sqrt(q);
        case A::Quadratic: return T(0.0);
        default: break;
      }
      break;
    case A::Erf:
      switch (b) {
        // asin(q / (1 + q)) and asin(sqrt(q / (1 + q))) as arctangents: no cancellation in 1 - c^2 at large q
        case A::Erf: return (2.0 / kPi) * atan(q / sqrt(1.0 + 2.0 * q));
        case A::Relu: return 0.5 * kSqrt2OverPi * q / sqrt(1.0 + q);
        case A::Step: return q0 ? T(0.0) : (1.0 / kPi) * atan(sqrt(q));
        case A::Quadratic: return T(0.0);
        default: break;
      }
      break;
    case A::Relu:
      switch (b) {
        case A::Relu: return 0.5 * q;
        case A::Step: return q0 ? T(0.0) : inv_sqrt_2pi * sqrt(q);
        case A::Quadratic: return q0 ? T(0.0) : kSqrt2OverPi * q * sqrt(q);
        default: break;
      }
      break;
    case A::Step:
      switch (b) {
        case A::Step: return T(q0 ? 0.0 : 0.5);
        case A::Quadratic: return 0.5 * q;
        default: break;
      }
      break;
    case A::Quadratic: return 3.0 * q * q;
    default: break;
  }
  TWOLAYER_HOST_THROW(std::logic_error("i2_self: unreachable activation pair"), T(kNaN));
}

// I2 and its exact first (J = Grad) or first and second (J = Jet) derivatives with respect to (C11, C12, C22).
template <class J = Jet>
TWOLAYER_HD J i2_jet(Activation a, Activation b, double x, double y, double z) {
  return i2(a, b, J::variable(x, 0), J::variable(y, 1), J::variable(z, 2));
}

// Scalar kernels on one row-major covariance matrix (no checks: see covariance_error).
double i2(Activation a, Activation b, const double* C);                   // C 2x2
double i3(Activation s, Activation b, const double* C);                   // C 3x3
double j2(Activation s, const double* C);                                 // C 2x2
double i4(Activation s, Activation a, Activation b, const double* C);     // C 4x4

// Why C (n x n, n <= 4) is not a valid covariance, or nullptr if it is finite, symmetric and positive
// semi-definite to a relative tolerance.
const char* covariance_error(const double* C, int n);

// Batched kernels over `count` contiguous matrices, OpenMP across matrices; each input matrix is checked.
void i2_batch(Activation a, Activation b, const double* C, std::size_t count, double* out, int n_threads);
void i3_batch(Activation s, Activation b, const double* C, std::size_t count, double* out, int n_threads);
void j2_batch(Activation s, const double* C, std::size_t count, double* out, int n_threads);
void i4_batch(Activation s, Activation a, Activation b, const double* C, std::size_t count, double* out,
              int n_threads);

// The matrices C[indices[0]], ..., C[indices[k - 1]] (ascending) of a batch as the batches above treat them, into the
// same places of out: all checked first (std::invalid_argument naming the first invalid one), extreme variances
// rescaled. The CUDA backend finishes here the matrices the device leaves to the host (cuda.hpp).
void i2_batch_at(Activation a, Activation b, const double* C, const std::size_t* indices, std::size_t k, double* out);
void i3_batch_at(Activation s, Activation b, const double* C, const std::size_t* indices, std::size_t k, double* out);
void j2_batch_at(Activation s, const double* C, const std::size_t* indices, std::size_t k, double* out);
void i4_batch_at(Activation s, Activation a, Activation b, const double* C, const std::size_t* indices, std::size_t k,
                 double* out);

}  // namespace twolayer
