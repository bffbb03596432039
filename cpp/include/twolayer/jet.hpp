// Forward-mode automatic differentiation in three variables, to first or second order.
// TWOLAYER_HD (hd.hpp): the same jets in the CUDA backend's kernels.
//
// A jet carries a value, its gradient and (for Jet) its packed symmetric Hessian with respect to the three
// entries (x, y, z) = (C11, C12, C22) of a 2x2 covariance. Writing each closed-form kernel once as a template
// over the scalar type gives the value (double), exact first derivatives (Grad) or first and second derivatives
// (Jet) from the same source: Price's theorem turns those derivatives into I3, J2 and the quadratic I4, and the
// population gradient and Hessian use them through the chain rule C = Gram / s.
#pragma once
#include <cmath>

#include "twolayer/hd.hpp"
#include "twolayer/simd_math.hpp"

// Jet arithmetic is tiny and called in the innermost loops: always inline it.
#if defined(__GNUC__)
#define TWOLAYER_INLINE inline __attribute__((always_inline))
#else
#define TWOLAYER_INLINE inline
#endif

namespace twolayer {

template <bool Second>
struct BasicJet {
  static constexpr int kH = Second ? 6 : 0;
  double v = 0.0;
  double g[3] = {0.0, 0.0, 0.0};
  double h[Second ? 6 : 1] = {};  // xx, xy, xz, yy, yz, zz

  BasicJet() = default;
  TWOLAYER_HD BasicJet(double value) : v(value) {}  // NOLINT: constants promote implicitly
  TWOLAYER_HD static BasicJet variable(double value, int index) {
    BasicJet j(value);
    j.g[index] = 1.0;
    return j;
  }
  // Index of Hessian entry (p, q) in the packed storage.
  TWOLAYER_HD static constexpr int hidx(int p, int q) {  // not recursive: device code needs a static stack size
    const int lo = p < q ? p : q, hi = p < q ? q : p;
    return lo == 0 ? hi : (lo == 1 ? 2 + hi : 5);
  }
  TWOLAYER_HD double hess(int p, int q) const { return h[hidx(p, q)]; }
};

using Jet = BasicJet<true>;    // value, gradient, Hessian
using Grad = BasicJet<false>;  // value, gradient

TWOLAYER_HD inline double value(double x) { return x; }
template <bool S>
TWOLAYER_HD double value(const BasicJet<S>& x) { return x.v; }

// f(x) given f, f', f'' at x.v.
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> chain(const BasicJet<S>& x, double f0, double f1, double f2) {
  BasicJet<S> r(f0);
  for (int p = 0; p < 3; ++p) r.g[p] = f1 * x.g[p];
  if constexpr (S) {
    for (int p = 0; p < 3; ++p)
      for (int q = p; q < 3; ++q) {
        const int k = BasicJet<S>::hidx(p, q);
        r.h[k] = f1 * x.h[k] + f2 * x.g[p] * x.g[q];
      }
  } else {
    (void)f2;
  }
  return r;
}

template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> operator+(const BasicJet<S>& a, const BasicJet<S>& b) {
  BasicJet<S> r(a.v + b.v);
  for (int p = 0; p < 3; ++p) r.g[p] = a.g[p] + b.g[p];
  for (int p = 0; p < BasicJet<S>::kH; ++p) r.h[p] = a.h[p] + b.h[p];
  return r;
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> operator-(const BasicJet<S>& a) {
  return chain(a, -a.v, -1.0, 0.0);
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> operator-(const BasicJet<S>& a, const BasicJet<S>& b) {
  return a + (-b);
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> operator*(const BasicJet<S>& a, const BasicJet<S>& b) {
  BasicJet<S> r(a.v * b.v);
  for (int p = 0; p < 3; ++p) r.g[p] = a.v * b.g[p] + b.v * a.g[p];
  if constexpr (S) {
    for (int p = 0; p < 3; ++p)
      for (int q = p; q < 3; ++q) {
        const int k = BasicJet<S>::hidx(p, q);
        r.h[k] = a.v * b.h[k] + b.v * a.h[k] + a.g[p] * b.g[q] + a.g[q] * b.g[p];
      }
  }
  return r;
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> reciprocal(const BasicJet<S>& a) {
  const double i = 1.0 / a.v;
  return chain(a, i, -i * i, 2.0 * i * i * i);
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> operator/(const BasicJet<S>& a, const BasicJet<S>& b) {
  return a * reciprocal(b);
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> sqrt(const BasicJet<S>& a) {
  const double s = std::sqrt(a.v);
  return chain(a, s, 0.5 / s, -0.25 / (s * a.v));
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> asin(const BasicJet<S>& a) {
  const double w = 1.0 - a.v * a.v;
  const double d = 1.0 / std::sqrt(w);
  return chain(a, asin_simd(a.v), d, a.v * d / w);
}
template <bool S>
TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> atan(const BasicJet<S>& a) {
  const double d = 1.0 / (1.0 + a.v * a.v);
  return chain(a, std::atan(a.v), d, -2.0 * a.v * d * d);
}

// Mixed operations with plain numbers (templates do not convert implicitly).
#define TWOLAYER_JET_SCALAR_OPS(OP)                                                             \
  template <bool S>                                                                             \
  TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> operator OP(double a, const BasicJet<S>& b) { return BasicJet<S>(a) OP b; }       \
  template <bool S>                                                                             \
  TWOLAYER_INLINE TWOLAYER_HD BasicJet<S> operator OP(const BasicJet<S>& a, double b) { return a OP BasicJet<S>(b); }
TWOLAYER_JET_SCALAR_OPS(+)
TWOLAYER_JET_SCALAR_OPS(-)
TWOLAYER_JET_SCALAR_OPS(*)
TWOLAYER_JET_SCALAR_OPS(/)
#undef TWOLAYER_JET_SCALAR_OPS

}  // namespace twolayer
