// Gaussian kernels with means (gaussian_mean.hpp): conditioning, closed-form smoothing and adaptive quadrature.
#include "twolayer/gaussian_mean.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "twolayer/cancel.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/gaussian_erf_mean.hpp"
#include "twolayer/gaussian_smooth.hpp"
#include "twolayer/parallel.hpp"

namespace twolayer {

namespace {

using A = Activation;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kT = smooth::kTrunc;  // |t| <= 9 for the outer standard normal variable

double npdf(double z) { return kInvSqrt2Pi * std::exp(-0.5 * z * z); }
double ncdf(double z) { return 0.5 * std::erfc(-z / kSqrt2); }

// E[(z + u)_+] = z Phi(z) + phi(z), u ~ N(0, 1). For z <= -3 the two terms cancel (to 1 / z^2 of each), so there it
// is phi(z) (1 - y M(y)) = phi(z) / (t1 t2), y = -z, from Laplace's continued fraction of the Mills ratio
// M(y) = 1 / t1, t1 = y + 1 / t2, t2 = y + 2 / (y + 3 / (y + ...)) (backward recurrence from 20 + 600 / y^2 terms:
// converged to double precision for y >= 3, measured against mpmath).
double relu_smoothing(double z) {
  if (z > -3.0) return z * ncdf(z) + npdf(z);
  const double y = -z;
  double t = y;
  for (int k = 20 + static_cast<int>(600.0 / (y * y)); k >= 2; --k) t = y + k / t;
  return npdf(z) / ((y + 1.0 / t) * t);
}

[[noreturn]] void delta_at_zero() {
  throw std::domain_error(
      "kernels with means: a delta (the derivative of step, or relu'') at a unit that is identically 0 is infinite "
      "(a singular covariance with a zero mean)");
}

// What a^(i) is: a function (smooth, or with a kink or jump at 0) or the distribution delta^(r) at 0.
struct Factor {
  bool delta;  // a^(i) = delta^(r)
  int r;
  bool kink;   // a function, not smooth at 0
};
Factor factor(A a, int i) {
  if (a == A::Relu) return i >= 2 ? Factor{true, i - 2, false} : Factor{false, 0, true};
  if (a == A::Step) return i >= 1 ? Factor{true, i - 1, false} : Factor{false, 0, true};
  return Factor{false, 0, false};
}

// a^(i)(x) at a point for a function factor (step(0) = 0, relu'(0) = step(0) = 0).
double pointwise(A a, int i, double x) {
  if (a == A::Relu) return i == 0 ? (x > 0.0 ? x : 0.0) : (x > 0.0 ? 1.0 : 0.0);
  if (a == A::Step) return x > 0.0 ? 1.0 : 0.0;
  if (is_hermite(a)) {
    const Polynomial P = polynomial_of(a);
    if (i > P.degree) return 0.0;
    double d[kMaxHermiteDegree + 1];
    polynomial_derivatives(P.p, P.degree, x, i, d);
    return d[i];
  }
  double d[5];
  if (i > 4) return 0.0;
  sigma_derivatives(a, x, i, d);
  return d[i];
}

// Gaussian smoothing S^(k)(m, s) = E[a^(k)(m + s u)], u ~ N(0, 1), for every activation; a delta at s = 0 gives 0
// away from its root and raises at it.
double smoothed(A a, int k, double m, double s) {
  const Factor f = factor(a, k);
  if (!(s > 0.0)) {
    if (!f.delta) return pointwise(a, k, m);
    if (m != 0.0) return 0.0;
    delta_at_zero();
  }
  const double z = m / s;
  switch (a) {
    case A::Linear: return k == 0 ? m : (k == 1 ? 1.0 : 0.0);
    case A::Quadratic: return k == 0 ? m * m + s * s : (k == 1 ? 2.0 * m : (k == 2 ? 2.0 : 0.0));
    case A::Relu:
    case A::Step: {
      const int q = a == A::Relu ? k : k + 1;  // derivative order of relu
      const double p = npdf(z);
      switch (q) {
        case 0: return s * relu_smoothing(z);
        case 1: return ncdf(z);
        case 2: return p / s;
        case 3: return -z * p / (s * s);
        default: return (z * z - 1.0) * p / (s * s * s);
      }
    }
    case A::Erf: {
      // E[erf((m + s u) / sqrt 2)] = erf(m / sqrt(2 v)), v = 1 + s^2; m-derivatives: g He_{k-1}(w) (-1)^(k-1) / v^...
      const double v = 1.0 + s * s, rv = std::sqrt(v), w = m / rv;
      if (k == 0) return std::erf(w / kSqrt2);
      const double g = kSqrt2OverPi / rv * std::exp(-0.5 * w * w);
      switch (k) {
        case 1: return g;
        case 2: return -w / rv * g;
        case 3: return (w * w - 1.0) / v * g;
        default: return (3.0 * w - w * w * w) / (v * rv) * g;
      }
    }
    default: break;
  }
  if (is_hermite(a)) {  // exact: sum_j P^(k+j)(m) s^j E[u^j] / j!, E[u^j] = (j - 1)!! for even j
    const Polynomial P = polynomial_of(a);
    double d[kMaxHermiteDegree + 1];
    polynomial_derivatives(P.p, P.degree, m, P.degree, d);
    double v = 0.0, w = 1.0;  // w = s^j (j - 1)!! / j! = s^j / (2^(j/2) (j/2)!)
    for (int j = 0; k + j <= P.degree; j += 2, w *= s * s / j) v += d[k + j] * w;
    return v;
  }
  // The smooth others: the certified trapezoidal rule of gaussian_smooth.hpp in u (2h rule from the even nodes).
  if (k > 4) throw std::logic_error("smoothed: derivative order above 4");
  double h = smooth::trapezoid_step(&a, &s, 1);
  for (int attempt = 0; attempt < 16; ++attempt, h *= 0.5) {
    const int n = smooth::half_nodes(h);
    if (n == 0) break;
    double fine = 0.0, coarse = 0.0, scale = 0.0;
    for (int j = -n; j <= n; ++j) {
      const double u = j * h, w = smooth::normal_weight(u, h);
      double d[5];
      sigma_derivatives(a, m + s * u, k, d);
      fine += w * d[k];
      scale += w * std::fabs(d[k]);
      coarse += (j & 1) == 0 ? 2.0 * w * d[k] : 0.0;
    }
    const double diff = fine - coarse;
    if (!(diff * diff > smooth::kAcceptSq * scale * scale)) return fine;
  }
  throw std::domain_error(
      "kernels with means: the Gaussian quadrature of a smooth activation could not reach its certified accuracy "
      "(a variance too large, or a custom table's rounding dominating at a variance near 0)");
}

// The n-point Gauss-Legendre rule on [-1, 1] by Newton's method on the Legendre recurrence (nodes and weights to a
// few ulps), built once: the 20-point rule of the adaptive quadratures and the orthant probability, Genz's 6 and 12.
template <int n>
struct GaussLegendreRule {
  std::array<double, n> x{}, w{};
  GaussLegendreRule() {
    for (int i = 0; i < n; ++i) {
      double z = std::cos(kPi * (i + 0.75) / (n + 0.5)), dp = 1.0;
      for (int it = 0; it < 100; ++it) {
        double p1 = 1.0, p2 = 0.0;
        for (int j = 1; j <= n; ++j) {
          const double p3 = p2;
          p2 = p1;
          p1 = ((2.0 * j - 1.0) * z * p2 - (j - 1.0) * p3) / j;
        }
        dp = n * (z * p1 - p2) / (z * z - 1.0);
        const double step = p1 / dp;
        z -= step;
        if (std::fabs(step) < 1e-16) break;
      }
      x[i] = z;
      w[i] = 2.0 / ((1.0 - z * z) * dp * dp);
    }
  }
};

template <int n>
const GaussLegendreRule<n>& gl_rule() {
  static const GaussLegendreRule<n> gl;
  return gl;
}
constexpr int kGL = 20;
using GaussLegendre = GaussLegendreRule<kGL>;
const GaussLegendre& gauss_legendre() { return gl_rule<kGL>(); }

// A value of an integrand with its envelope: |value| <= envelope, the scale its quadrature is certified against.
struct Enveloped {
  double value, envelope;
};

// 20-point Gauss-Legendre on [a, b] of f and of its envelope: f returns a double (its envelope |f|) or Enveloped.
// The plain accumulation is kept as its own branch (not f wrapped as {f, |f|}): it sums the rounded products w f and
// their moduli, the same operations whatever the compiler contracts into FMAs (this file has the default
// contraction), so that the plain quadrature stays bitwise what it was.
template <class F>
Enveloped gl_panel(F& f, double a, double b) {
  const GaussLegendre& gl = gauss_legendre();
  const double c = 0.5 * (a + b), r = 0.5 * (b - a);
  double v = 0.0, e = 0.0;
  for (int i = 0; i < kGL; ++i) {
    if constexpr (std::is_same_v<std::invoke_result_t<F&, double>, Enveloped>) {
      const Enveloped y = f(c + r * gl.x[i]);
      v += gl.w[i] * y.value;
      e += gl.w[i] * y.envelope;
    } else {
      const double y = gl.w[i] * f(c + r * gl.x[i]);
      v += y;
      e += std::fabs(y);
    }
  }
  return {r * v, r * e};
}

// The range of adaptive_normal: [-9, 9], widened to 9 beyond every break point (up to |t| = 40, where phi
// underflows): a kink far in the tail carries the whole integral with it (e.g. P(lambda1 > 0) at mu1 = -7 sqrt(C11)).
std::pair<double, double> normal_range(const std::vector<double>& breaks) {
  double lo = -kT, hi = kT;
  for (const double b : breaks) {
    lo = std::min(lo, std::max(b, -40.0) - kT);
    hi = std::max(hi, std::min(b, 40.0) + kT);
  }
  return {lo, hi};
}

// The integral of f (phi(t) times the rest; a double or Enveloped as in gl_panel) over normal_range(breaks), split
// at the sorted break points inside, and the integral of its envelope: adaptive 20-point Gauss-Legendre, a panel
// accepted when it agrees with the sum of its halves to `rel` of the envelope's integral (estimated first on the
// split panels). For nested quadrature the inner rule returns its envelope integral, so that the outer rule is
// certified against the inner rule's own error scale, not against a value that may cancel far below it.
template <class F>
Enveloped adaptive_normal(F&& f, std::vector<double> breaks, double rel) {
  const auto [lo, hi] = normal_range(breaks);
  breaks.push_back(lo);
  breaks.push_back(hi);
  std::sort(breaks.begin(), breaks.end());
  struct Item {
    double a, b, whole;
  };
  std::vector<Item> stack;
  double scale = 0.0;
  for (std::size_t i = 0; i + 1 < breaks.size(); ++i) {
    const double a = std::max(lo, breaks[i]), b = std::min(hi, breaks[i + 1]);
    if (!(b > a)) continue;
    const Enveloped p = gl_panel(f, a, b);
    scale += p.envelope;
    stack.push_back({a, b, p.value});
  }
  if (!std::isfinite(scale))
    throw std::domain_error("kernels with means: the value exceeds the double range (means or variances too large)");
  const double tol = rel * scale + 1e-300;
  double total = 0.0;
  int panels = 0;
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    const double m = 0.5 * (it.a + it.b);
    const double left = gl_panel(f, it.a, m).value, right = gl_panel(f, m, it.b).value;
    if (std::fabs(it.whole - (left + right)) <= tol || !(it.b - it.a > 1e-12 * (hi - lo))) {
      total += left + right;
    } else {
      stack.push_back({it.a, m, left});
      stack.push_back({m, it.b, right});
    }
    if (++panels > 200000) throw std::domain_error("kernels with means: the adaptive quadrature did not converge");
  }
  return {total, scale};
}

// Break points of a kink or jump at t0 smoothed over a layer of width w (0: a sharp kink): t0, t0 +- w, t0 +- 8 w
// while 8 w < 2; none for w >= 1/2 (a wide layer is smooth on the scale of the panels).
void add_layer(std::vector<double>& breaks, double t0, double w) {
  if (!(w < 0.5)) return;
  breaks.push_back(t0);
  for (const double k : {1.0, 8.0}) {
    if (!(k * w < 2.0) || !(w > 0.0)) break;
    breaks.push_back(t0 - k * w);
    breaks.push_back(t0 + k * w);
  }
}

// P(X > h, Y > k) for standard normal X, Y with correlation r (Plackett: dP/dr is the density at (h, k)), for one r
// and many (h, k) (the nodes depending on r alone are tabulated by the constructor):
//   |r| < 0.925: P = Phi(-h) Phi(-k) + 1/(2 pi) int_0^asin(r) exp(-(h^2 + k^2 - 2 h k sin th) / (2 cos^2 th)) dth,
//                20-point Gauss-Legendre (the Drezner-Wesolowsky form of Genz's BVNU, which needs 6 to 20 points);
//   r >= 0.925:  from r = 1, P = Phi(-max(h, k)) - 1/(2 pi) int_0^acos(r) exp(-((h - k)^2 + 4 h k sin^2(th/2))
//                / (2 sin^2 th)) dth, 20-point Gauss-Legendre on dyadic panels down to the layer of width
//                ~|h - k| at th = 0;
//   r <= -0.925: P = Phi(-h) - P(X > h, -Y > -k) at correlation -r.
// Absolute accuracy ~1e-16 (tests/test_kernels_relu_mean.py, against mpmath). acos |r| (the near-one branch's range)
// may be given when the caller knows it more accurately than from the rounded r (1 - |r| far below 1). (The erf
// pairs take the same Drezner-Wesolowsky integral with Genz's node counts, gaussian_erf_mean.hpp.)
class BivariateOrthant {
 public:
  explicit BivariateOrthant(double r) : BivariateOrthant(r, std::acos(std::fabs(r))) {}
  BivariateOrthant(double r, double acos_abs_r) : r_(r), top_(acos_abs_r) {
    if (!(std::fabs(r) < 0.925)) return;
    const double half = 0.5 * std::asin(r);
    const GaussLegendre& gl = gauss_legendre();
    for (int i = 0; i < kGL; ++i) {
      sn_[i] = std::sin(half * (1.0 + gl.x[i]));
      inv_[i] = 1.0 / ((1.0 - sn_[i]) * (1.0 + sn_[i]));
      w_[i] = gl.w[i] * half / (2.0 * kPi);
    }
  }
  double operator()(double h, double k) const {
    if (h > 40.0 || k > 40.0) return 0.0;  // Phi(-40) underflows
    const double r = r_;
    if (r >= 1.0) return ncdf(-std::max(h, k));
    if (r <= -1.0) return std::max(0.0, ncdf(-h) - ncdf(k));
    if (std::fabs(r) < 0.925) return std::clamp(ncdf(-h) * ncdf(-k) + excess(h, k), 0.0, 1.0);
    if (r < 0.0) return std::clamp(ncdf(-h) - near_one(h, -k, top_), 0.0, 1.0);
    return near_one(h, k, top_);
  }

 private:
  // P - Phi(-h) Phi(-k) = 1/(2 pi) int_0^asin(r) exp(-(h^2 + k^2 - 2 h k sin th) / (2 cos^2 th)) dth (|r| < 0.925).
  double excess(double h, double k) const {
    const double hs = 0.5 * (h * h + k * k), hk = h * k;
    double sum = 0.0;
    for (int i = 0; i < kGL; ++i) sum += w_[i] * std::exp((sn_[i] * hk - hs) * inv_[i]);
    return sum;
  }
  // The integral from r = 1 on dyadic panels [top 2^-(j+1), top 2^-j] of 20 Gauss-Legendre points each, down to the
  // layer of width |h - k| at th = 0 (below a ninth of it the integrand is < e^-40); no allocation.
  static double near_one(double h, double k, double top) {
    const double d2 = (h - k) * (h - k), hk4 = 4.0 * h * k;
    auto f = [&](double th) {
      const double sn = std::sin(th), sh = std::sin(0.5 * th);
      return sn > 0.0 ? std::exp(-(d2 + hk4 * sh * sh) / (2.0 * sn * sn)) : (d2 > 0.0 ? 0.0 : std::exp(-0.125 * hk4));
    };
    const double floor = std::max(std::sqrt(d2) / 9.0, 1e-300);
    double sum = 0.0, hi = top;
    for (int j = 0; j < 1100 && hi > floor; ++j) {
      const bool last = 0.5 * hi <= floor || d2 == 0.0;  // h = k: smooth down to 0, one panel
      const double lo = last ? 0.0 : 0.5 * hi;
      sum += gl_panel(f, lo, hi).value;
      hi = lo;
    }
    return std::clamp(ncdf(-std::max(h, k)) - sum / (2.0 * kPi), 0.0, 1.0);
  }
  double r_, top_;  // top_ = acos |r|
  double sn_[kGL]{}, inv_[kGL]{}, w_[kGL]{};
};

// E[s^(i)(lambda1) s^(j)(lambda2)] for s = erf(./sqrt 2) in closed form (gaussian_erf_mean.hpp, one lane).
double erf_pair_moment(int i, int j, double mu1, double mu2, double x, double y, double z) {
  if (i == 0 && j > 0) {
    std::swap(i, j);
    std::swap(mu1, mu2);
    std::swap(x, z);
  }
  double out[1][1];
  if (i == 0) {
    erf_pair_moment00_lanes<1, LibmMath>(&mu1, &mu2, &x, &y, &z, out[0]);
  } else {
    const int ij[1][2] = {{i, j}};
    ErfTiltFirst<1> first;
    erf_tilt_first_lanes<1, LibmMath>(i, &mu1, &x, first);
    erf_tilted_moments_lanes<1, LibmMath>(ij, 1, first, &mu1, &mu2, &y, &z, out);
  }
  return out[0][0];
}

}  // namespace

double erf_pair_moment00_near_one(double mu1, double mu2, double x, double y, double z) {
  x = std::max(x, 0.0);
  z = std::max(z, 0.0);
  const double yy = y * y, det = std::max(std::fma(x, z, -yy) + std::fma(-y, y, yy), 0.0);
  const double a1 = std::sqrt(1.0 + x), a2 = std::sqrt(1.0 + z), h1 = mu1 / a1, h2 = mu2 / a2;
  const double D = 1.0 + x + z + det;  // (1 + x)(1 + z) - y^2
  const BivariateOrthant bvn(y / (a1 * a2), std::atan2(std::sqrt(D), std::fabs(y)));
  return 4.0 * bvn(-h1, -h2) - 2.0 * ncdf(h1) - 2.0 * ncdf(h2) + 1.0;
}

GaussLegendreNodes gauss_legendre_nodes(int n) {
  switch (n) {
    case 6: return {gl_rule<6>().x.data(), gl_rule<6>().w.data()};
    case 12: return {gl_rule<12>().x.data(), gl_rule<12>().w.data()};
    case 20: return {gl_rule<20>().x.data(), gl_rule<20>().w.data()};
    default: throw std::logic_error("gauss_legendre_nodes: n must be 6, 12 or 20");
  }
}

double pair_moment(A a, int i, A b, int j, double mu1, double mu2, double x, double y, double z) {
  if (i < 0 || j < 0 || i + j > 4) throw std::logic_error("pair_moment: derivative orders i, j >= 0, i + j <= 4");
  if (a == A::Erf && b == A::Erf) return erf_pair_moment(i, j, mu1, mu2, x, y, z);
  if (a == A::Step && b == A::Step && i == 0 && j == 0 && x > 0.0 && z > 0.0) {
    // P(l1 > 0, l2 > 0): the bivariate normal orthant (the quadrature's boundary layer, of width sqrt(1 - rho^2),
    // defeated it near rho = -1), acos |rho| from the determinant; a determinant within the rounding of the Gram
    // entries (as the quadrature's conditional variance below 1e-14 of the variance) is an aligned or opposite pair,
    // exactly (from the rounded entries acos |rho| ~ 1.5e-8 would put ~1e-9 into the risk of a merged pair)
    const double yy = y * y, det = std::max(std::fma(x, z, -yy) + std::fma(-y, y, yy), 0.0);
    const double rx = std::sqrt(x), rz = std::sqrt(z), h1 = mu1 / rx, h2 = mu2 / rz;
    if (det <= 1e-14 * x * z) return y > 0.0 ? ncdf(std::min(h1, h2)) : std::max(ncdf(h1) + ncdf(h2) - 1.0, 0.0);
    return bivariate_orthant(y / (rx * rz), std::atan2(std::sqrt(det), std::fabs(y)), -h1, -h2);
  }
  if (smooth::is_trig(a) && smooth::is_trig(b)) return smooth::TrigPair(mu1, mu2, x, y, z)(a, i, b, j);
  return pair_moment_quadrature(a, i, b, j, mu1, mu2, x, y, z);
}

double pair_moment_quadrature(A a, int i, A b, int j, double mu1, double mu2, double x, double y, double z) {
  if (i < 0 || j < 0 || i + j > 4) throw std::logic_error("pair_moment: derivative orders i, j >= 0, i + j <= 4");
  Factor fa = factor(a, i), fb = factor(b, j);
  if (is_polynomial(a) && is_polynomial(b)) {  // exact (gaussian_smooth.hpp): hermite, linear and quadratic pairs
    const Polynomial P = polynomial_of(a), Q = polynomial_of(b);
    double M[kMaxHermiteDegree + 1][kMaxHermiteDegree + 1], dp[kMaxHermiteDegree + 1], dq[kMaxHermiteDegree + 1];
    smooth::bivariate_moments(x, y, z, M);
    polynomial_derivatives(P.p, P.degree, mu1, P.degree, dp);
    polynomial_derivatives(Q.p, Q.degree, mu2, Q.degree, dq);
    const double v = smooth::poly_pair_moment(dp, P.degree, i, dq, Q.degree, j, M);
    if (!std::isfinite(v))
      throw std::domain_error("kernels with means: the value exceeds the double range (means or variances too large)");
    return v;
  }
  // A constant unit: its value times the other's smoothing.
  if (!(x > 0.0)) return smoothed(a, i, mu1, 0.0) * smoothed(b, j, mu2, std::sqrt(std::max(z, 0.0)));
  if (!(z > 0.0)) return smoothed(b, j, mu2, 0.0) * smoothed(a, i, mu1, std::sqrt(x));
  // Orientation: the delta outside (integrated out exactly), otherwise the classic unit inside (closed smoothing).
  const bool swap = (fb.delta && !fa.delta) || (!fa.delta && !fb.delta && is_classic(a) && !is_classic(b));
  if (swap) {
    std::swap(a, b);
    std::swap(i, j);
    std::swap(fa, fb);
    std::swap(mu1, mu2);
    std::swap(x, z);
  }
  const double rx = std::sqrt(x), c = y / rx, s2 = z - c * c;
  const double s = s2 > 1e-14 * z ? std::sqrt(s2) : 0.0;
  if (fa.delta) {
    // E_t[delta^(r)(mu1 + rx t) H(t)], H(t) = S_b^(j)(mu2 + c t, s): at the root t0 = -mu1 / rx.
    const double t0 = -mu1 / rx, p = npdf(t0), m0 = mu2 + c * t0;
    if (fb.delta && s == 0.0) {
      if (m0 != 0.0) return 0.0;
      delta_at_zero();
    }
    // (-1)^r G^(r)(t0) / rx^(r + 1) of G = phi H: G' = phi (H' - t H), G'' = phi (H'' - 2 t H' + (t^2 - 1) H),
    // G''' = phi (H''' - 3 t H'' + 3 (t^2 - 1) H' - (t^3 - 3 t) H).
    if (fa.r > 3) throw std::domain_error("kernels with means: a delta derivative above the third is not implemented");
    const double H = smoothed(b, j, m0, s);
    if (fa.r == 0) return p / rx * H;
    const double dH = c == 0.0 ? 0.0 : c * smoothed(b, j + 1, m0, s);
    if (fa.r == 1) return -(p / x) * (dH - t0 * H);
    const double ddH = c == 0.0 ? 0.0 : c * c * smoothed(b, j + 2, m0, s);
    if (fa.r == 2) return p / (x * rx) * (ddH - 2.0 * t0 * dH + (t0 * t0 - 1.0) * H);
    const double dddH = c == 0.0 ? 0.0 : c * c * c * smoothed(b, j + 3, m0, s);
    return -(p / (x * x)) * (dddH - 3.0 * t0 * ddH + 3.0 * (t0 * t0 - 1.0) * dH - (t0 * t0 * t0 - 3.0 * t0) * H);
  }
  // Both are functions (b not a delta: a delta inner factor was swapped outside).
  // A smooth non-polynomial factor varies on a unit scale of its field (erf' is a bump of width 1 in lambda): with a
  // large variance a layer of width 1 / rx in t (of the outer factor) or sqrt(1 + s^2) / |c| (of the inner
  // smoothing), which the first panels' nodes could miss (their envelope then far below the integral's, a tolerance
  // no bisection reaches): its break points (add_layer: none below a variance of about 4).
  std::vector<double> breaks;
  if (fa.kink) breaks.push_back(-mu1 / rx);
  else if (!is_polynomial(a)) add_layer(breaks, -mu1 / rx, 1.0 / rx);
  if ((fb.kink || fb.delta) && c != 0.0) {
    const double t1 = -mu2 / c, wl = s / std::fabs(c);
    breaks.push_back(t1);
    for (const double k : {1.0, 8.0}) {
      if (!(k * wl < 2.0)) break;  // a wide layer is smooth on the scale of the panels
      breaks.push_back(t1 - k * wl);
      breaks.push_back(t1 + k * wl);
    }
  } else if (c != 0.0 && !is_polynomial(b)) {
    add_layer(breaks, -mu2 / c, std::sqrt(1.0 + s * s) / std::fabs(c));
  }
  auto integrand = [&](double t) { return npdf(t) * pointwise(a, i, mu1 + rx * t) * smoothed(b, j, mu2 + c * t, s); };
  return adaptive_normal(integrand, std::move(breaks), 1e-14).value;
}

void pair_moments(A a, A b, const int (*ij)[2], int n, double mu1, double mu2, double x, double y, double z,
                  double* out) {
  int top = 0;
  for (int e = 0; e < n; ++e) top = std::max(top, ij[e][0] + ij[e][1]);
  double even[smooth::kMoments], odd[smooth::kOddMoments];
  const bool lattice = smooth::is_smooth(a) && !is_classic(a) && smooth::is_smooth(b) && !is_classic(b) && top <= 4 &&
                       smooth::moments(a, b, mu1, mu2, x, y, z, (top + 1) / 2, even, odd);
  for (int e = 0; e < n; ++e) {
    const int i = ij[e][0], j = ij[e][1];
    out[e] = !lattice ? pair_moment(a, i, b, j, mu1, mu2, x, y, z)
                      : ((i + j) & 1 ? odd[smooth::odd_moment_index(i, j)] : even[smooth::moment_index(i, j)]);
  }
}

bool zero_mean_pair(A a, A b) {
  return (is_classic(a) && is_classic(b)) || (smooth::is_smooth(a) && smooth::is_smooth(b));
}
bool zero_mean_i4(A s, A a, A b) {
  if (s == A::Relu) return is_classic(a) && is_classic(b);
  return is_classic(s) ? zero_mean_pair(a, b) : smooth::is_smooth(a) && smooth::is_smooth(b);
}

namespace {
bool all_zero(const double* mu, int n) {
  for (int k = 0; k < n; ++k)
    if (mu[k] != 0.0) return false;
  return true;
}
bool smooth_pair(A a, A b) { return smooth::is_smooth(a) && smooth::is_smooth(b); }

// (mu_B | lambda_A observed at 0 with noise variance `noise`), cov_B the conditioned (3, 4) block, and the density
// factor N(0; mu_A, C_AA + noise I) times 2 pi.
struct Conditioned {
  double mu[2], cov[3], density;
};
Conditioned condition_first_pair(const double* C, const double* mu, double noise) {
  const double a11 = C[0] + noise, a12 = C[1], a22 = C[5] + noise, det = a11 * a22 - a12 * a12;
  if (!(det > 0.0))
    throw std::domain_error("C: the step activation's I4 = E[delta delta a b] needs C[:2, :2] non-singular");
  const double i11 = a22 / det, i12 = -a12 / det, i22 = a11 / det;
  const double b31 = C[8], b32 = C[9], b41 = C[12], b42 = C[13];
  auto quad = [&](double u1, double u2, double v1, double v2) {
    return u1 * (i11 * v1 + i12 * v2) + u2 * (i12 * v1 + i22 * v2);
  };
  Conditioned r{};
  r.cov[0] = std::max(0.0, C[10] - quad(b31, b32, b31, b32));
  r.cov[1] = C[11] - quad(b31, b32, b41, b42);
  r.cov[2] = std::max(0.0, C[15] - quad(b41, b42, b41, b42));
  r.mu[0] = mu[2] - quad(b31, b32, mu[0], mu[1]);
  r.mu[1] = mu[3] - quad(b41, b42, mu[0], mu[1]);
  r.density = std::exp(-0.5 * quad(mu[0], mu[1], mu[0], mu[1])) / std::sqrt(det);
  return r;
}
}  // namespace

namespace {
// I4 = E[s'(l1) s'(l2) a(l3) b(l4)] for a relu student (s' = step, any a, b) or a smooth student with a relu or step
// unit among a, b. Cholesky in the order (l3, l4, l1, l2) (zero pivots dropped): l3 = m3 + L00 t,
// l4 = m4 + L10 t + L11 u, and given (t, u) the student pair is E[s'(l1) s'(l2) | t, u] at the conditioned means
// and the fixed conditioned covariance: for relu the bivariate orthant probability (BivariateOrthant), for a smooth
// s the certified pair moment of gaussian_smooth.hpp (smooth::moments, m11). t and u by nested adaptive
// Gauss-Legendre (adaptive_normal), split at the kinks of a and b and around the boundary layer of every kinked
// field whose remaining variance is small (a near-singular covariance: a kink sharpened over a width sd / slope).
// Tolerances (relative to the integral of |f|): the inner rule finer than the outer, whose check would otherwise
// chase the inner rule's rounding-level noise.
constexpr double kOuterTol = 1e-12, kInnerTol = 1e-13;
double kinked_i4(A st, A a, A b, const double* C, const double* mu) {
  static constexpr int kOrder[4] = {2, 3, 0, 1};
  double P[16], L[16], m[4];
  for (int r = 0; r < 4; ++r) {
    m[r] = mu[kOrder[r]];
    for (int q = 0; q < 4; ++q) P[r * 4 + q] = C[kOrder[r] * 4 + kOrder[q]];
  }
  smooth::psd_cholesky(P, 4, L);
  const double s1 = L[10], s2 = std::hypot(L[14], L[15]);
  double rho = s1 > 0.0 && s2 > 0.0 ? std::clamp(L[10] * L[14] / (s1 * s2), -1.0, 1.0) : 0.0;
  constexpr double kUnit = 1.0 - 8.0 * 2.220446049250313e-16;  // an exactly repeated unit (i = k) is rho = 1
  rho = rho >= kUnit ? 1.0 : (rho <= -kUnit ? -1.0 : rho);
  const bool relu = st == A::Relu;
  const BivariateOrthant bvn(relu ? rho : 0.0);
  // the pair E[s'(m1 + X) s'(m2 + Y)] with its envelope: the orthant probability is known to ~1e-16 absolute, its
  // envelope P + 1e-2 (the rule certified to 1e-2 E|b| where P is tiny, not to its rounding); a smooth pair moment is
  // certified to its own scale, its envelope |v| + 1e-2 sqrt(E[s'(l1)^2] E[s'(l2)^2]) (cancelling s': sin, gelu, ...)
  const double cx = L[10] * L[10], cy = L[10] * L[14], cz = L[14] * L[14] + L[15] * L[15];
  double floor = 0.0;
  if (!relu) {
    double m1[smooth::kMoments], m2[smooth::kMoments];
    if (!smooth::moments(st, st, mu[0], mu[0], C[0], C[0], C[0], 1, m1) ||
        !smooth::moments(st, st, mu[1], mu[1], C[5], C[5], C[5], 1, m2))
      throw std::domain_error("kernels with means: the Gaussian quadrature could not reach its certified accuracy");
    floor = 1e-2 * std::sqrt(std::fabs(m1[smooth::moment_index(1, 1)] * m2[smooth::moment_index(1, 1)]));
  }
  auto pair = [&](double m1, double m2) {
    if (!relu) {
      double mm[smooth::kMoments];
      if (!smooth::moments(st, st, m1, m2, cx, cy, cz, 1, mm))
        throw std::domain_error("kernels with means: the Gaussian quadrature could not reach its certified accuracy");
      const double v = mm[smooth::moment_index(1, 1)];
      return Enveloped{v, std::fabs(v) + floor};
    }
    double p;  // P(m1 + X > 0, m2 + Y > 0)
    if (!(s1 > 0.0)) p = m1 > 0.0 ? (s2 > 0.0 ? ncdf(m2 / s2) : (m2 > 0.0 ? 1.0 : 0.0)) : 0.0;
    else if (!(s2 > 0.0)) p = m2 > 0.0 ? ncdf(m1 / s1) : 0.0;
    else p = bvn(-m1 / s1, -m2 / s2);
    return Enveloped{p, p + 1e-2};
  };
  const bool kinked[4] = {factor(a, 0).kink, factor(b, 0).kink, relu, relu};
  // the remaining standard deviation of field f beyond the first `from` Cholesky variables
  auto rest = [&](int f, int from) {
    double v = 0.0;
    for (int j = from; j <= f; ++j) v += L[f * 4 + j] * L[f * 4 + j];
    return std::sqrt(v);
  };
  std::vector<double> outer;
  if (kinked[0] && L[0] > 0.0) outer.push_back(-m[0] / L[0]);
  for (int f = 1; f < 4; ++f)
    if (kinked[f] && L[f * 4] != 0.0) add_layer(outer, -m[f] / L[f * 4], rest(f, 1) / std::fabs(L[f * 4]));
  double wrest[4] = {0.0, 0.0, rest(2, 2) / std::fabs(L[9]), rest(3, 2) / std::fabs(L[13])};  // layers in u
  // For |rho| -> 1 the step pair's probability has a kink where h = k (rho > 0: Phi(-max(h, k))) or h = -k (rho < 0)
  // smoothed over sqrt(2 (1 - |rho|)): the field g = m1 / s1 - sg m2 / s2 = g0 + gt t + gu u is a kinked one too.
  const bool pair_layer = relu && s1 > 0.0 && s2 > 0.0 && std::fabs(rho) >= 0.5;
  const double sg = rho < 0.0 ? -1.0 : 1.0, gw = std::sqrt(2.0 * (1.0 - std::fabs(rho)));
  const double g0 = m[2] / s1 - sg * m[3] / s2, gt = L[8] / s1 - sg * L[12] / s2, gu = L[9] / s1 - sg * L[13] / s2;
  if (pair_layer && gt != 0.0) add_layer(outer, -g0 / gt, std::hypot(gw, gu) / std::fabs(gt));
  auto inner = [&](double t) {
    const double c4 = m[1] + L[4] * t, c1 = m[2] + L[8] * t, c2 = m[3] + L[12] * t;
    std::vector<double> breaks;
    if (kinked[1] && L[5] > 0.0) breaks.push_back(-c4 / L[5]);
    if (relu && L[9] != 0.0) add_layer(breaks, -c1 / L[9], wrest[2]);
    if (relu && L[13] != 0.0) add_layer(breaks, -c2 / L[13], wrest[3]);
    if (pair_layer && gu != 0.0) add_layer(breaks, -(g0 + gt * t) / gu, gw / std::fabs(gu));
    auto f = [&](double u) {
      const double hb = npdf(u) * pointwise(b, 0, c4 + L[5] * u);
      if (hb == 0.0) return Enveloped{0.0, 0.0};
      const Enveloped p = pair(c1 + L[9] * u, c2 + L[13] * u);
      return Enveloped{hb * p.value, std::fabs(hb) * p.envelope};
    };
    return adaptive_normal(f, std::move(breaks), kInnerTol);
  };
  auto f = [&](double t) {
    throw_if_cancelled();  // up to seconds per call (smooth students): Ctrl-C between outer nodes
    const double ha = npdf(t) * pointwise(a, 0, m[0] + L[0] * t);
    if (ha == 0.0) return Enveloped{0.0, 0.0};
    const Enveloped in = inner(t);
    return Enveloped{ha * in.value, std::fabs(ha) * in.envelope};
  };
  return adaptive_normal(f, std::move(outer), kOuterTol).value;
}
}  // namespace

namespace {
// P(l0 > 0, l1 > 0, l2 > 0), l ~ N(mu, C): l0 = mu0 + s0 t, and given t the pair (l1, l2) has the means
// mu_f + (C_f0 / s0) t and the fixed Schur complement, whose orthant probability is BivariateOrthant; t by adaptive
// Gauss-Legendre from the kink -mu0 / s0, split around the boundary layers of a field with a small remaining variance
// and, for |rho| -> 1, of the pair's own kink (as in kinked_i4).
// The core: l0 = mu0 + s0 t, and given t, l_f = mu_f + c_f t + s_f e_f (f = 1, 2) with corr(e1, e2) = rho,
// acos |rho| = top (given: accurate where the caller knows it better than from the rounded rho).
double orthant3_core(double s0, double c1, double c2, double s1, double s2, double rho, double top, const double* mu) {
  const BivariateOrthant bvn(rho, top);
  const double t0 = -mu[0] / s0;
  std::vector<double> breaks{t0};
  if (c1 != 0.0) add_layer(breaks, -mu[1] / c1, s1 / std::fabs(c1));
  if (c2 != 0.0) add_layer(breaks, -mu[2] / c2, s2 / std::fabs(c2));
  if (s1 > 0.0 && s2 > 0.0 && std::fabs(rho) >= 0.5) {
    const double sg = rho < 0.0 ? -1.0 : 1.0, gt = c1 / s1 - sg * c2 / s2;
    if (gt != 0.0)
      add_layer(breaks, -(mu[1] / s1 - sg * mu[2] / s2) / gt, std::sqrt(2.0 * (1.0 - std::fabs(rho))) / std::fabs(gt));
  }
  auto f = [&](double t) {
    if (!(t > t0)) return Enveloped{0.0, 0.0};
    const double m1 = mu[1] + c1 * t, m2 = mu[2] + c2 * t, ph = npdf(t);
    double p;
    if (!(s1 > 0.0)) p = m1 > 0.0 ? (s2 > 0.0 ? ncdf(m2 / s2) : (m2 > 0.0 ? 1.0 : 0.0)) : 0.0;
    else if (!(s2 > 0.0)) p = m2 > 0.0 ? ncdf(m1 / s1) : 0.0;
    else p = bvn(-m1 / s1, -m2 / s2);
    return Enveloped{ph * p, ph * (p + 1e-2)};
  };
  return std::clamp(adaptive_normal(f, std::move(breaks), kInnerTol).value, 0.0, 1.0);
}

double orthant3_mean(const double* C, const double* mu) {
  const double s0 = std::sqrt(C[0]), c1 = C[3] / s0, c2 = C[6] / s0;
  const double x = std::max(0.0, C[4] - c1 * c1), y = C[5] - c1 * c2, z = std::max(0.0, C[8] - c2 * c2);
  const double s1 = x > 1e-14 * C[4] ? std::sqrt(x) : 0.0, s2 = z > 1e-14 * C[8] ? std::sqrt(z) : 0.0;
  double rho = s1 > 0.0 && s2 > 0.0 ? std::clamp(y / (s1 * s2), -1.0, 1.0) : 0.0;
  constexpr double kUnit = 1.0 - 8.0 * 2.220446049250313e-16;
  rho = rho >= kUnit ? 1.0 : (rho <= -kUnit ? -1.0 : rho);
  return orthant3_core(s0, c1, c2, s1, s2, rho, std::acos(std::fabs(rho)), mu);
}
}  // namespace

double orthant_probability_mean(const double* C, const double* mu, int n) {
  switch (n) {
    case 0: return 1.0;
    case 1: return ncdf(mu[0] / std::sqrt(C[0]));
    case 2: {
      const double s1 = std::sqrt(C[0]), s2 = std::sqrt(C[3]);
      return BivariateOrthant(std::clamp(C[1] / (s1 * s2), -1.0, 1.0))(-mu[0] / s1, -mu[1] / s2);
    }
    case 3: return orthant3_mean(C, mu);
    case 4: return kinked_i4(A::Relu, A::Step, A::Step, C, mu);
    default: throw std::logic_error("orthant_probability_mean: n must be 0 to 4");
  }
}

namespace {
// r clamped to [-1, 1], and kept off +-1 (exact alignment) where its angle acos |r| is known to be positive (r rounds
// to +-1 below an angle of ~1.5e-8; the near-one branch of BivariateOrthant takes the angle).
double unit_correlation(double r, double acos_abs_r) {
  r = std::clamp(r, -1.0, 1.0);
  if (std::fabs(r) == 1.0 && acos_abs_r > 0.0) r = std::copysign(1.0 - 1.1102230246251565e-16, r);
  return r;
}
}  // namespace

double orthant3_probability_rows(const double* F, int R, const double* mu) {
  auto dot = [&](int a, int b) {
    double v = 0.0;
    for (int c = 0; c < R; ++c) v += F[a * R + c] * F[b * R + c];
    return v;
  };
  const double v0 = dot(0, 0), s0 = std::sqrt(v0), c1 = dot(1, 0) / s0, c2 = dot(2, 0) / s0;
  double r1[8], r2[8];  // the rows of l1, l2 projected orthogonally to row 0
  for (int c = 0; c < R; ++c) {
    r1[c] = F[R + c] - c1 / s0 * F[c];
    r2[c] = F[2 * R + c] - c2 / s0 * F[c];
  }
  double x = 0.0, y = 0.0, z = 0.0, det = 0.0;
  for (int c = 0; c < R; ++c) {
    x += r1[c] * r1[c];
    y += r1[c] * r2[c];
    z += r2[c] * r2[c];
    for (int d = c + 1; d < R; ++d) {
      const double w = r1[c] * r2[d] - r1[d] * r2[c];
      det += w * w;
    }
  }
  const double s1 = x > 1e-15 * dot(1, 1) ? std::sqrt(x) : 0.0, s2 = z > 1e-15 * dot(2, 2) ? std::sqrt(z) : 0.0;
  const double top = s1 > 0.0 && s2 > 0.0 ? std::atan2(std::sqrt(det), std::fabs(y)) : 0.5 * kPi;
  const double rho = s1 > 0.0 && s2 > 0.0 ? unit_correlation(y / (s1 * s2), top) : 0.0;
  return orthant3_core(s0, c1, c2, s1, s2, rho, top, mu);
}

double bivariate_orthant(double r, double acos_abs_r, double h, double k) {
  return BivariateOrthant(unit_correlation(r, acos_abs_r), acos_abs_r)(h, k);
}

double i2_mean(A a, A b, const double* C, const double* mu) {
  if (all_zero(mu, 2) && zero_mean_pair(a, b)) return i2(a, b, C);
  if (smooth_pair(a, b) && !is_classic(a) && !is_classic(b)) {  // a classic unit: its smoothing in closed form
    double m[smooth::kMoments];
    if (!smooth::moments(a, b, mu[0], mu[1], C[0], C[1], C[3], 0, m))
      throw std::domain_error("kernels with means: the Gaussian quadrature could not reach its certified accuracy");
    return m[0];
  }
  return pair_moment(a, 0, b, 0, mu[0], mu[1], C[0], C[1], C[3]);
}

double j2_mean(A s, const double* C, const double* mu) {
  if (all_zero(mu, 2)) return j2(s, C);
  if (smooth::is_smooth(s) && !is_classic(s)) {
    double m[smooth::kMoments];
    if (!smooth::moments(s, s, mu[0], mu[1], C[0], C[1], C[3], 1, m))
      throw std::domain_error("kernels with means: the Gaussian quadrature could not reach its certified accuracy");
    return m[smooth::moment_index(1, 1)];
  }
  return pair_moment(s, 1, s, 1, mu[0], mu[1], C[0], C[1], C[3]);
}

double i3_mean(A s, A b, const double* C, const double* mu) {
  if (all_zero(mu, 3) && zero_mean_pair(s, b)) return i3(s, b, C);
  // Stein on l2 = lambda2 - mu2 over the (1, 3) block (a zero coefficient skips its moment).
  const double x = C[0], y = C[2], z = C[8], c12 = C[1], c23 = C[5];
  double r = 0.0;
  if (mu[1] != 0.0) r += mu[1] * pair_moment(s, 1, b, 0, mu[0], mu[2], x, y, z);
  if (c12 != 0.0) r += c12 * pair_moment(s, 2, b, 0, mu[0], mu[2], x, y, z);
  if (c23 != 0.0) r += c23 * pair_moment(s, 1, b, 1, mu[0], mu[2], x, y, z);
  return r;
}

double i4_mean(A s, A a, A b, const double* C, const double* mu) {
  if (all_zero(mu, 4) && zero_mean_i4(s, a, b)) return i4(s, a, b, C);
  switch (s) {
    case A::Linear: {
      const double C2[4] = {C[10], C[11], C[14], C[15]}, m2[2] = {mu[2], mu[3]};
      return i2_mean(a, b, C2, m2);
    }
    case A::Step:
    case A::Erf: {
      const bool erf = s == A::Erf;
      const Conditioned k = condition_first_pair(C, mu, erf ? 1.0 : 0.0);
      const double C2[4] = {k.cov[0], k.cov[1], k.cov[1], k.cov[2]};
      return (erf ? 2.0 / kPi : 1.0 / (2.0 * kPi)) * k.density * i2_mean(a, b, C2, k.mu);
    }
    default: break;
  }
  if (s == A::Relu || !smooth::is_smooth(a) || !smooth::is_smooth(b)) return kinked_i4(s, a, b, C, mu);
  double out = kNaN;
  if (!smooth::i4(s, a, b, C, out, mu))
    throw std::domain_error("kernels with means: the Gaussian quadrature could not reach its certified accuracy");
  return out;
}

namespace {

const char* mean_error(const double* mu, int n) {
  for (int k = 0; k < n; ++k)
    if (!std::isfinite(mu[k])) return "the mean is not finite";
  return nullptr;
}

// Check everything first, then the zero-mean matrices through the zero-mean batch path, the others in parallel.
template <int n, class Zero, class Mean>
void mean_batch(const double* C, const double* mu, std::size_t count, double* out, int n_threads, bool has_zero,
                Zero&& zero, Mean&& with_mean) {
  std::vector<std::size_t> zeros, others;
  for (std::size_t j = 0; j < count; ++j) {
    if (const char* why = covariance_error(C + j * n * n, n))
      throw std::invalid_argument("C[" + std::to_string(j) + "]: " + why);
    if (const char* why = mean_error(mu + j * n, n))
      throw std::invalid_argument("mean[" + std::to_string(j) + "]: " + why);
    (has_zero && all_zero(mu + j * n, n) ? zeros : others).push_back(j);
  }
  if (!zeros.empty()) zero(zeros.data(), zeros.size());
  parallel_for(others.size(), n_threads, [&](std::size_t k) {
    const std::size_t j = others[k];
    out[j] = with_mean(C + j * n * n, mu + j * n);
  }, 1, 1);
}

}  // namespace

void i2_mean_batch(A a, A b, const double* C, const double* mu, std::size_t count, double* out, int n_threads) {
  mean_batch<2>(C, mu, count, out, n_threads, zero_mean_pair(a, b),
                [&](const std::size_t* at, std::size_t k) { i2_batch_at(a, b, C, at, k, out); },
                [&](const double* Ci, const double* mi) { return i2_mean(a, b, Ci, mi); });
}
void j2_mean_batch(A s, const double* C, const double* mu, std::size_t count, double* out, int n_threads) {
  mean_batch<2>(C, mu, count, out, n_threads, true,
                [&](const std::size_t* at, std::size_t k) { j2_batch_at(s, C, at, k, out); },
                [&](const double* Ci, const double* mi) { return j2_mean(s, Ci, mi); });
}
void i3_mean_batch(A s, A b, const double* C, const double* mu, std::size_t count, double* out, int n_threads) {
  mean_batch<3>(C, mu, count, out, n_threads, zero_mean_pair(s, b),
                [&](const std::size_t* at, std::size_t k) { i3_batch_at(s, b, C, at, k, out); },
                [&](const double* Ci, const double* mi) { return i3_mean(s, b, Ci, mi); });
}
void i4_mean_batch(A s, A a, A b, const double* C, const double* mu, std::size_t count, double* out,
                   int n_threads) {
  mean_batch<4>(C, mu, count, out, n_threads, zero_mean_i4(s, a, b),
                [&](const std::size_t* at, std::size_t k) { i4_batch_at(s, a, b, C, at, k, out); },
                [&](const double* Ci, const double* mi) { return i4_mean(s, a, b, Ci, mi); });
}

}  // namespace twolayer
