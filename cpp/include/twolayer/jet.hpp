// Second-order forward-mode automatic differentiation in three variables.
//
// A Jet carries a value, its gradient and its (packed, symmetric) Hessian with respect to the three entries
// (x, y, z) = (C11, C12, C22) of a 2x2 covariance. Writing each closed-form kernel once as a template over the
// scalar type gives the value (T = double) and exact first and second covariance derivatives (T = Jet) from the
// same source: Price's theorem turns those derivatives into I3, J2 and the quadratic I4, and the population
// gradient and Hessian use them through the chain rule C = Gram / s.
#pragma once
#include <cmath>

namespace twolayer {

struct Jet {
  double v = 0.0;
  double g[3] = {0.0, 0.0, 0.0};
  double h[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};  // xx, xy, xz, yy, yz, zz

  Jet() = default;
  Jet(double value) : v(value) {}  // NOLINT: constants promote implicitly
  static Jet variable(double value, int index) {
    Jet j(value);
    j.g[index] = 1.0;
    return j;
  }
  // Hessian entry (p, q) of the packed storage.
  static constexpr int hidx(int p, int q) {
    return p > q ? hidx(q, p) : (p == 0 ? q : (p == 1 ? 2 + q : 5));
  }
  double hess(int p, int q) const { return h[hidx(p, q)]; }
};

inline double value(double x) { return x; }
inline double value(const Jet& x) { return x.v; }

// f(x) given f, f', f'' at x.value.
inline Jet chain(const Jet& x, double f0, double f1, double f2) {
  Jet r(f0);
  for (int p = 0; p < 3; ++p) r.g[p] = f1 * x.g[p];
  for (int p = 0; p < 3; ++p)
    for (int q = p; q < 3; ++q) r.h[Jet::hidx(p, q)] = f1 * x.h[Jet::hidx(p, q)] + f2 * x.g[p] * x.g[q];
  return r;
}

inline Jet operator+(const Jet& a, const Jet& b) {
  Jet r(a.v + b.v);
  for (int p = 0; p < 3; ++p) r.g[p] = a.g[p] + b.g[p];
  for (int p = 0; p < 6; ++p) r.h[p] = a.h[p] + b.h[p];
  return r;
}
inline Jet operator-(const Jet& a) { return chain(a, -a.v, -1.0, 0.0); }
inline Jet operator-(const Jet& a, const Jet& b) { return a + (-b); }
inline Jet operator*(const Jet& a, const Jet& b) {
  Jet r(a.v * b.v);
  for (int p = 0; p < 3; ++p) r.g[p] = a.v * b.g[p] + b.v * a.g[p];
  for (int p = 0; p < 3; ++p)
    for (int q = p; q < 3; ++q) {
      const int k = Jet::hidx(p, q);
      r.h[k] = a.v * b.h[k] + b.v * a.h[k] + a.g[p] * b.g[q] + a.g[q] * b.g[p];
    }
  return r;
}
inline Jet reciprocal(const Jet& a) {
  const double i = 1.0 / a.v;
  return chain(a, i, -i * i, 2.0 * i * i * i);
}
inline Jet operator/(const Jet& a, const Jet& b) { return a * reciprocal(b); }
inline Jet sqrt(const Jet& a) {
  const double s = std::sqrt(a.v);
  return chain(a, s, 0.5 / s, -0.25 / (s * a.v));
}
inline Jet asin(const Jet& a) {
  const double w = 1.0 - a.v * a.v;
  const double d = 1.0 / std::sqrt(w);
  return chain(a, std::asin(a.v), d, a.v * d / w);
}

// First-order forward mode in the same three variables: value and gradient only. The population gradient needs
// no more, and skipping the packed Hessian makes each kernel evaluation several times cheaper.
struct Jet1 {
  double v = 0.0;
  double g[3] = {0.0, 0.0, 0.0};

  Jet1() = default;
  Jet1(double value) : v(value) {}  // NOLINT: constants promote implicitly
  static Jet1 variable(double value, int index) {
    Jet1 j(value);
    j.g[index] = 1.0;
    return j;
  }
};

inline double value(const Jet1& x) { return x.v; }

// f(x) given f, f' at x.value (f'' is accepted for interface parity with the Jet version and ignored).
inline Jet1 chain(const Jet1& x, double f0, double f1, double /*f2*/ = 0.0) {
  Jet1 r(f0);
  for (int p = 0; p < 3; ++p) r.g[p] = f1 * x.g[p];
  return r;
}

inline Jet1 operator+(const Jet1& a, const Jet1& b) {
  Jet1 r(a.v + b.v);
  for (int p = 0; p < 3; ++p) r.g[p] = a.g[p] + b.g[p];
  return r;
}
inline Jet1 operator-(const Jet1& a) { return chain(a, -a.v, -1.0); }
inline Jet1 operator-(const Jet1& a, const Jet1& b) {
  Jet1 r(a.v - b.v);
  for (int p = 0; p < 3; ++p) r.g[p] = a.g[p] - b.g[p];
  return r;
}
inline Jet1 operator*(const Jet1& a, const Jet1& b) {
  Jet1 r(a.v * b.v);
  for (int p = 0; p < 3; ++p) r.g[p] = a.v * b.g[p] + b.v * a.g[p];
  return r;
}
inline Jet1 operator/(const Jet1& a, const Jet1& b) {
  const double i = 1.0 / b.v, q = a.v * i;
  Jet1 r(q);
  for (int p = 0; p < 3; ++p) r.g[p] = (a.g[p] - q * b.g[p]) * i;
  return r;
}
inline Jet1 sqrt(const Jet1& a) {
  const double s = std::sqrt(a.v);
  return chain(a, s, 0.5 / s);
}
inline Jet1 asin(const Jet1& a) { return chain(a, std::asin(a.v), 1.0 / std::sqrt(1.0 - a.v * a.v)); }

}  // namespace twolayer
