// Activation functions sigma and their derivatives, shared by every layer of the core.
#pragma once
#include <cstddef>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "twolayer/hd.hpp"

namespace twolayer {

// Order matters: kernels of a pair (a, b) are written once for a <= b and swapped otherwise. The first five have
// closed-form kernels (gaussian.hpp); the smooth ones from Tanh on go through gaussian_smooth.hpp (sin and cos in
// closed form through the characteristic function, the others by certified quadrature).
enum class Activation : int {
  Linear = 0, Erf = 1, Relu = 2, Step = 3, Quadratic = 4,
  Tanh = 5, Sigmoid = 6, Softplus = 7, Gelu = 8, Silu = 9, Sin = 10, Cos = 11
};
inline constexpr int kNumActivations = 12;
// The activations with closed-form kernels for every pair among them (the package's original five).
TWOLAYER_HD inline bool is_classic(Activation a) { return static_cast<int>(a) <= 4; }

// Hermite activations sigma(s) = sum_k c_k He_k(s) (probabilists' Hermite polynomials, He_0 = 1, He_1 = s,
// He_2 = s^2 - 1, ...; degree <= kMaxHermiteDegree), spelled "hermite(c_0,...,c_n)". Each distinct coefficient set
// is one Activation value >= kNumActivations in an append-only, thread-safe host registry (activation.cpp), so that
// every signature that takes an Activation by value carries it unchanged. The registry holds the monomial
// coefficients: sigma(s) = sum_k p_k s^k. Device code cannot read it (its sigma_derivatives returns NaN: the CUDA
// paths refuse these activations: bindings/device_arg.hpp, sgd_cuda_unsupported, ode_unsupported).
inline constexpr int kMaxHermiteDegree = 8;
inline constexpr int kMaxPolynomials = 4096;
struct Polynomial {
  int degree;
  double p[kMaxHermiteDegree + 1];  // monomial coefficients p_0..p_degree
};
namespace detail {
extern Polynomial g_polynomials[kMaxPolynomials];
}
TWOLAYER_HD inline bool is_hermite(Activation a) {
  return static_cast<int>(a) >= kNumActivations && static_cast<int>(a) < kNumActivations + kMaxPolynomials;
}

// Custom activations: a user function tabulated by the Python layer (activations.custom), spelled "custom(name)",
// one Activation value >= kNumActivations + kMaxPolynomials each in an append-only, thread-safe host registry
// (activation.cpp). On [edges[0], edges[panels]] sigma^(k), k = 0..4, is a Chebyshev series per panel (coefficients
// coef[(panel * 5 + k) * (degree + 1) + j], in x = 2 (s - mid) / width); outside, sigma continues as its tangent line
// at the nearer edge (higher derivatives 0). `strip` is the half-width of a strip of analyticity estimated from the
// series' decay (smooth::analytic). len[panel * 5 + k] is the length of that series without its trailing zero
// coefficients (the sums skip them: the same value). Host only, like hermite: device code returns NaN and the CUDA
// paths refuse.
inline constexpr int kMaxCustom = 256;
inline constexpr int kCustomOrders = 5;  // sigma, sigma', ..., sigma''''
struct CustomTable {
  const double* edges;  // panels + 1 increasing points
  const double* coef;   // panels * kCustomOrders * (degree + 1)
  const int* len;       // panels * kCustomOrders: the series' lengths, trailing zeros dropped (<= degree + 1)
  int panels, degree;
  double inv_width;     // panels / (hi - lo) when the panels are equal (direct lookup), else 0 (binary search)
  double strip;
  double tail[2][2];    // value and slope at the left and right edges
  bool odd;             // the table is odd, sigma(-s) = -sigma(s), to 1e-13 of its scale (mirrored panels)
};
namespace detail {
extern CustomTable g_custom[kMaxCustom];
}
inline constexpr int kFirstCustom = kNumActivations + kMaxPolynomials;
TWOLAYER_HD inline bool is_custom(Activation a) { return static_cast<int>(a) >= kFirstCustom; }
// Activations read from a host registry (hermite, custom): the device cannot evaluate them.
TWOLAYER_HD inline bool is_registered(Activation a) { return static_cast<int>(a) >= kNumActivations; }
inline const CustomTable& custom_table(Activation a) { return detail::g_custom[static_cast<int>(a) - kFirstCustom]; }
// sum_j c_j T_j(x), j = 0..n (Clenshaw's recurrence).
TWOLAYER_HD inline double chebyshev_sum(const double* c, int n, double x) {
  const double x2 = 2.0 * x;
  double b1 = 0.0, b2 = 0.0;
  for (int j = n; j >= 1; --j) {
    const double t = c[j] + x2 * b1 - b2;
    b2 = b1;
    b1 = t;
  }
  return c[0] + x * b1 - b2;
}
// The panel a of s in [edges[0], edges[panels]] of a custom table: edges[a] <= s < edges[a + 1] (the last panel
// includes hi).
inline int custom_panel(const CustomTable& T, double s) {
  const double lo = T.edges[0];
  int a = 0;
  if (T.inv_width > 0.0) {  // equal panels: the index, corrected by one where rounding put s across an edge
    a = static_cast<int>((s - lo) * T.inv_width);
    a = a < 0 ? 0 : (a >= T.panels ? T.panels - 1 : a);
    if (a > 0 && s < T.edges[a]) --a;
    else if (a + 1 < T.panels && s >= T.edges[a + 1]) ++a;
  } else {
    int b = T.panels;
    while (b - a > 1) {
      const int m = (a + b) / 2;
      if (s < T.edges[m]) b = m;
      else a = m;
    }
  }
  return a;
}
// d[k] = sum_j c[k n1 + j] T_j(x), j < top, k = 0..N: the orders' Clenshaw recurrences side by side (independent
// chains: chebyshev_sum's, interleaved).
template <int N>
inline void custom_clenshaw(const double* c, int n1, int top, double x, double* d) {
  const double x2 = 2.0 * x;
  double b1[N + 1] = {}, b2[N + 1] = {};
  for (int j = top - 1; j >= 1; --j)
    for (int k = 0; k <= N; ++k) {
      const double t = c[k * n1 + j] + x2 * b1[k] - b2[k];
      b2[k] = b1[k];
      b1[k] = t;
    }
  for (int k = 0; k <= N; ++k) d[k] = c[k * n1] + x * b1[k] - b2[k];
}
// d[k] = sigma^(k)(s), k = 0..order (<= 4), of a custom table: panel lookup and Clenshaw's recurrence.
inline void custom_derivatives(const CustomTable& T, double s, int order, double* d) {
  const double lo = T.edges[0], hi = T.edges[T.panels];
  if (!(s >= lo && s <= hi)) {
    if (s != s) {
      for (int k = 0; k <= order; ++k) d[k] = s;
      return;
    }
    const int side = s < lo ? 0 : 1;
    const double e = side ? hi : lo, slope = T.tail[side][1];
    d[0] = T.tail[side][0] + (slope != 0.0 ? slope * (s - e) : 0.0);  // a flat tail stays flat at +-inf
    if (order >= 1) d[1] = slope;
    for (int k = 2; k <= order; ++k) d[k] = 0.0;
    return;
  }
  const int a = custom_panel(T, s);
  const double x = (2.0 * s - T.edges[a] - T.edges[a + 1]) / (T.edges[a + 1] - T.edges[a]);
  const int n1 = T.degree + 1;
  const double* c = T.coef + static_cast<std::size_t>(a) * kCustomOrders * n1;
  const int* len = T.len + a * kCustomOrders;
  int top = 1;  // the longest of the orders' series (a shorter one's zeros keep its recurrence at 0)
  for (int k = 0; k <= order; ++k) top = len[k] > top ? len[k] : top;
  switch (order) {  // (the order fixed at compile time: the recurrences stay in registers)
    case 0: return custom_clenshaw<0>(c, n1, top, x, d);
    case 1: return custom_clenshaw<1>(c, n1, top, x, d);
    case 2: return custom_clenshaw<2>(c, n1, top, x, d);
    case 3: return custom_clenshaw<3>(c, n1, top, x, d);
    default: return custom_clenshaw<4>(c, n1, top, x, d);
  }
}
// Registers the custom activation `name` (identifier characters) from its table (edges: panels + 1 increasing
// finite points; coef as in CustomTable; strip > 0) and returns it; the same name with the same table returns the
// same value, with another table throws std::invalid_argument naming `argument`.
Activation register_custom(const std::string& name, const double* edges, int panels, const double* coef, int degree,
                           double strip, const char* argument = "name");
// The spelling "custom(name)".
const char* custom_name(Activation a);

// Whether sigma is a polynomial (linear, quadratic, hermite): its Gaussian moments are exact (gaussian_poly_moments.hpp).
TWOLAYER_HD inline bool is_polynomial(Activation a) {
  return a == Activation::Linear || a == Activation::Quadratic || is_hermite(a);
}
// The monomial coefficients of a polynomial activation (host only).
inline Polynomial polynomial_of(Activation a) {
  if (a == Activation::Linear) return {1, {0.0, 1.0}};
  if (a == Activation::Quadratic) return {2, {0.0, 0.0, 1.0}};
  return detail::g_polynomials[static_cast<int>(a) - kNumActivations];
}
// d[k] = P^(k)(s), k = 0..order (any order), of the monomial coefficients p_0..p_n.
TWOLAYER_HD inline void polynomial_derivatives(const double* p, int n, double s, int order, double* d) {
  for (int k = 0; k <= order; ++k) {
    // P^(k)(s) = sum_{j >= k} p_j j! / (j - k)! s^(j - k), by Horner
    double v = 0.0;
    for (int j = n; j >= k; --j) {
      double f = 1.0;
      for (int r = 0; r < k; ++r) f *= static_cast<double>(j - r);
      v = v * s + f * p[j];
    }
    d[k] = v;
  }
}
// A hermite activation from its Hermite coefficients c_0..c_n (n <= kMaxHermiteDegree; finite; deduplicated by
// value); std::invalid_argument naming `argument` otherwise.
Activation register_hermite(const double* c, int n, const char* argument = "activation");
// The canonical spelling "hermite(c_0,...,c_n)" (trailing zero coefficients dropped, shortest round-trip decimals).
const char* hermite_name(Activation a);

inline constexpr double kPi = 3.14159265358979323846;
inline constexpr double kSqrt2 = 1.41421356237309504880;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// d[k] = sigma^(k)(s) for k = 0..order (order <= 4; any order for hermite; custom: custom_derivatives) of the smooth activations (all but relu and step, whose
// derivatives are not functions):
//   tanh; sigmoid 1 / (1 + e^-s); softplus log(1 + e^s); gelu s Phi(s); silu s sigmoid(s); sin; cos;
//   linear s; quadratic s^2; erf erf(s / sqrt 2).
// Every derivative is written through quantities that neither overflow nor cancel at large |s| (tanh and the
// logistic function p = sigmoid(s) and 1 - p = sigmoid(-s) computed separately).
TWOLAYER_HD inline void sigma_derivatives(Activation a, double s, int order, double* d) {
  double v[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
  switch (a) {
    case Activation::Linear: v[0] = s; v[1] = 1.0; break;
    case Activation::Quadratic: v[0] = s * s; v[1] = 2.0 * s; v[2] = 2.0; break;
    case Activation::Erf: {
      const double g = kSqrt2OverPi * std::exp(-0.5 * s * s);  // sigma' = sqrt(2/pi) e^(-s^2/2): He_k times it
      v[0] = std::erf(s / kSqrt2);
      v[1] = g;
      v[2] = -s * g;
      v[3] = (s * s - 1.0) * g;
      v[4] = (3.0 * s - s * s * s) * g;
      break;
    }
    case Activation::Tanh: {
      // t = tanh(s) and u = sech^2(s) = 4 e / (1 + e)^2 from e = exp(-2|s|) (1 - t^2 would cancel at large |s|)
      const double e = std::exp(-2.0 * std::fabs(s)), r = 1.0 / (1.0 + e);
      const double t = std::tanh(s), u = 4.0 * e * r * r;
      v[0] = t;
      v[1] = u;
      v[2] = -2.0 * t * u;
      v[3] = u * (6.0 * t * t - 2.0);
      v[4] = u * t * (16.0 - 24.0 * t * t);
      break;
    }
    case Activation::Sigmoid:
    case Activation::Softplus:
    case Activation::Silu: {
      // p = sigmoid(s), q = 1 - p = sigmoid(-s), each from the exponential of -|s| (no overflow, no cancellation).
      const double e = std::exp(-std::fabs(s)), r = 1.0 / (1.0 + e);
      const double p = s >= 0.0 ? r : e * r, q = s >= 0.0 ? e * r : r;
      const double p1 = p * q, p2 = p1 * (q - p), p3 = p1 * (1.0 - 6.0 * p1), p4 = p2 * (1.0 - 12.0 * p1);
      if (a == Activation::Sigmoid) {
        v[0] = p; v[1] = p1; v[2] = p2; v[3] = p3; v[4] = p4;
      } else if (a == Activation::Softplus) {
        v[0] = (s > 0.0 ? s : 0.0) + std::log1p(e); v[1] = p; v[2] = p1; v[3] = p2; v[4] = p3;
      } else {  // silu = s p: (s p)^(k) = s p^(k) + k p^(k-1)
        v[0] = s * p; v[1] = s * p1 + p; v[2] = s * p2 + 2.0 * p1; v[3] = s * p3 + 3.0 * p2; v[4] = s * p4 + 4.0 * p3;
      }
      break;
    }
    case Activation::Gelu: {
      // s Phi(s): derivatives s Phi^(k) + k Phi^(k-1), with Phi' = phi, phi^(k) = (-1)^k He_k(s) phi.
      const double ph = 0.5 * kSqrt2OverPi * std::exp(-0.5 * s * s), Ph = 0.5 * std::erfc(-s / kSqrt2);
      v[0] = s * Ph;
      v[1] = s * ph + Ph;
      v[2] = -s * s * ph + 2.0 * ph;
      v[3] = s * (s * s - 1.0) * ph - 3.0 * s * ph;
      v[4] = -s * (s * s * s - 3.0 * s) * ph + 4.0 * (s * s - 1.0) * ph;
      break;
    }
    case Activation::Sin: {
      const double sn = std::sin(s), cs = std::cos(s);
      v[0] = sn; v[1] = cs; v[2] = -sn; v[3] = -cs; v[4] = sn;
      break;
    }
    case Activation::Cos: {
      const double sn = std::sin(s), cs = std::cos(s);
      v[0] = cs; v[1] = -sn; v[2] = -cs; v[3] = sn; v[4] = cs;
      break;
    }
    default:
      if (is_registered(a)) {
#if defined(__CUDA_ARCH__)
        for (int k = 0; k <= order; ++k) d[k] = kNaN;  // the registries are host memory (the CUDA paths refuse)
#else
        if (is_custom(a)) {
          custom_derivatives(custom_table(a), s, order, d);
        } else {
          const Polynomial& P = detail::g_polynomials[static_cast<int>(a) - kNumActivations];
          polynomial_derivatives(P.p, P.degree, s, order, d);
        }
#endif
        return;
      }
      for (int k = 0; k < 5; ++k) v[k] = kNaN;  // relu, step: not smooth (the kernels never ask)
      break;
  }
  for (int k = 0; k <= order; ++k) d[k] = v[k];
}

// sigma(s) (host and device, hd.hpp): linear s, erf(s/sqrt2), relu max(s,0), step 1(s>0), quadratic s^2.
TWOLAYER_HD inline double sigma(Activation a, double s) {
  switch (a) {
    case Activation::Linear: return s;
    case Activation::Erf: return std::erf(s / kSqrt2);
    case Activation::Relu: return s > 0.0 ? s : 0.0;
    case Activation::Step: return s > 0.0 ? 1.0 : 0.0;
    case Activation::Quadratic: return s * s;
    case Activation::Tanh: return std::tanh(s);  // sigma_derivatives' value without its sech^2 (one exp less)
    default: break;
  }
  double d[1];
  sigma_derivatives(a, s, 0, d);
  return d[0];
}

// sigma'(s); for step the derivative is a delta and this returns 0 (use the kernels, not samples).
TWOLAYER_HD inline double dsigma(Activation a, double s) {
  switch (a) {
    case Activation::Linear: return 1.0;
    case Activation::Erf: return kSqrt2OverPi * std::exp(-0.5 * s * s);
    case Activation::Relu: return s > 0.0 ? 1.0 : 0.0;
    case Activation::Step: return 0.0;
    case Activation::Quadratic: return 2.0 * s;
    default: break;
  }
  double d[2];
  sigma_derivatives(a, s, 1, d);
  return d[1];
}

inline const char* activation_name(Activation a) {
  switch (a) {
    case Activation::Linear: return "linear";
    case Activation::Erf: return "erf";
    case Activation::Relu: return "relu";
    case Activation::Step: return "step";
    case Activation::Quadratic: return "quadratic";
    case Activation::Tanh: return "tanh";
    case Activation::Sigmoid: return "sigmoid";
    case Activation::Softplus: return "softplus";
    case Activation::Gelu: return "gelu";
    case Activation::Silu: return "silu";
    case Activation::Sin: return "sin";
    case Activation::Cos: return "cos";
  }
  return is_custom(a) ? custom_name(a) : (is_hermite(a) ? hermite_name(a) : "?");
}

// The activation of a name, of a hermite spelling "hermite(c_0, ..., c_n)" or of a registered custom spelling
// "custom(name)" (activation.cpp: the one parser);
// std::invalid_argument naming `argument` otherwise.
Activation parse_activation(const std::string& name, const char* argument = "activation");

}  // namespace twolayer
