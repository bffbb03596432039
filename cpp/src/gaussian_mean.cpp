// Gaussian kernels with means (gaussian_mean.hpp): conditioning, closed-form smoothing and adaptive quadrature.
#include "twolayer/gaussian_mean.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "twolayer/gaussian.hpp"
#include "twolayer/gaussian_relu_i4.hpp"
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
      "(variance too large)");
}

// The 20-point Gauss-Legendre rule on [-1, 1], from the half table on [0, 1] of gaussian_relu_i4.hpp (node t and
// its mirror 1 - t map to 2 t - 1 and 1 - 2 t), built once.
constexpr int kGL = 20;
struct GaussLegendre {
  std::array<double, kGL> x{}, w{};
  GaussLegendre() {
    const auto half = detail::relu_i4_impl::gl20();
    for (int i = 0; i < kGL / 2; ++i) {
      x[i] = 2.0 * half.x[i] - 1.0;
      x[kGL - 1 - i] = 1.0 - 2.0 * half.x[i];
      w[i] = w[kGL - 1 - i] = 2.0 * half.w[i];
    }
  }
};
const GaussLegendre& gauss_legendre() {
  static const GaussLegendre gl;
  return gl;
}

struct Panel {
  double value, abs;
};
template <class F>
Panel gl_panel(F& f, double a, double b) {
  const GaussLegendre& gl = gauss_legendre();
  const double c = 0.5 * (a + b), r = 0.5 * (b - a);
  double v = 0.0, s = 0.0;
  for (int i = 0; i < kGL; ++i) {
    const double y = gl.w[i] * f(c + r * gl.x[i]);
    v += y;
    s += std::fabs(y);
  }
  return {r * v, r * s};
}

// The integral of f over [lo, hi], split at the sorted break points inside, adaptive: a panel is accepted when it
// agrees with the sum of its halves to 1e-14 of the integral of |f| (estimated first on the split panels).
template <class F>
double adaptive(F&& f, double lo, double hi, std::vector<double> breaks) {
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
    const Panel p = gl_panel(f, a, b);
    scale += p.abs;
    stack.push_back({a, b, p.value});
  }
  if (!std::isfinite(scale))
    throw std::domain_error("kernels with means: the value exceeds the double range (means or variances too large)");
  const double tol = 1e-14 * scale + 1e-300;
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
  return total;
}

}  // namespace

double pair_moment(A a, int i, A b, int j, double mu1, double mu2, double x, double y, double z) {
  if (i < 0 || j < 0 || i + j > 4) throw std::logic_error("pair_moment: derivative orders i, j >= 0, i + j <= 4");
  Factor fa = factor(a, i), fb = factor(b, j);
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
  std::vector<double> breaks;
  if (fa.kink) breaks.push_back(-mu1 / rx);
  if ((fb.kink || fb.delta) && c != 0.0) {
    const double t1 = -mu2 / c, wl = s / std::fabs(c);
    breaks.push_back(t1);
    for (const double k : {1.0, 8.0}) {
      if (!(k * wl < 2.0)) break;  // a wide layer is smooth on the scale of the panels
      breaks.push_back(t1 - k * wl);
      breaks.push_back(t1 + k * wl);
    }
  }
  auto integrand = [&](double t) { return npdf(t) * pointwise(a, i, mu1 + rx * t) * smoothed(b, j, mu2 + c * t, s); };
  // [-9, 9], widened to 9 beyond every break point (up to |t| = 40, where phi underflows): a kink far in the tail
  // carries the whole integral with it (e.g. P(lambda1 > 0) at mu1 = -7 sqrt(C11)).
  double lo = -kT, hi = kT;
  for (const double b : breaks) {
    lo = std::min(lo, std::max(b, -40.0) - kT);
    hi = std::max(hi, std::min(b, 40.0) + kT);
  }
  return adaptive(integrand, lo, hi, breaks);
}

namespace {
bool all_zero(const double* mu, int n) {
  for (int k = 0; k < n; ++k)
    if (mu[k] != 0.0) return false;
  return true;
}
bool smooth_pair(A a, A b) { return smooth::is_smooth(a) && smooth::is_smooth(b); }
// Whether the zero-mean kernels of gaussian.hpp have the pair (a relu or step unit with a smooth non-classic one
// has none: with zero means such pairs go through the engine here too).
bool zero_mean_pair(A a, A b) { return (is_classic(a) && is_classic(b)) || smooth_pair(a, b); }
bool zero_mean_i4(A s, A a, A b) {
  if (s == A::Relu) return is_classic(a) && is_classic(b);
  return is_classic(s) ? zero_mean_pair(a, b) : smooth_pair(a, b);
}

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
  if (!smooth::is_smooth(s) || !smooth::is_smooth(a) || !smooth::is_smooth(b))
    throw not_implemented(
        "i4 with means: the relu student, and relu or step teacher units of a smooth student, are not implemented "
        "with nonzero means yet");
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
