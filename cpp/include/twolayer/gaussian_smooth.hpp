// Gaussian expectations of smooth activations (tanh, sigmoid, softplus, gelu, silu, sin, cos, and the smooth ones
// among the original five: linear, erf, quadratic), the generic engine behind the kernels of gaussian.hpp wherever
// a unit without a closed-form pair is involved.
//
// Building block: the moments m_ij = E[f^(i)(mu1 + l1) g^(j)(mu2 + l2)], (l1, l2) ~ N(0, [[x, y], [y, z]]), for the
// pairs i + j in {0, 2, 4} that the I2 jets need (Price: dI2/dC11 = m20 / 2, dI2/dC12 = m11, dI2/dC22 = m02 / 2, and
// the second derivatives from the fourth-order moments).
//   * sin and cos pairs: closed form through the characteristic function,
//       E[cos(A + l1) cos(B + l2)] = (cos(A - B) e^(-(x + z - 2y)/2) + cos(A + B) e^(-(x + z + 2y)/2)) / 2,
//     every derivative being a cosine with a phase shifted by pi/2.
//   * otherwise: a lattice trapezoidal rule (moments() below) in the sum and difference variables,
//     l1 = sqrt(x) (X + Y), l2 = sqrt(z) (X - Y), X and Y independent, on 9 standard deviations each (the Gaussian
//     tail beyond is < 1e-18).
//     For a function analytic in a strip of half-width v around the real axis and growing at most like
//     e^(G v^2 / 2) there, the rule with step h errs by ~e^(G v^2 / 2 - 2 pi v / h) (exponentially small); the strip
//     and the growth follow from each activation's singularities (tanh: poles at +-i pi/2; sigmoid, softplus, silu:
//     +-i pi; erf, gelu: entire with Gaussian growth; sin, cos: entire with exponential growth; custom: the strip
//     estimated from its Chebyshev series, activations.custom) scaled by the
//     slopes of the arguments. The first step is chosen so that the rule at 2h errs by ~e^-20 (values; e^-22 and
//     e^-25 for gradient and Hessian jets) and the result is the rule at h, whose error is then about the square
//     (strip-limited) or the fourth power (Gaussian-limited) of that.
//     Run-time check: the 2h rule is the subset of even nodes, so both come out of one pass; the result is accepted
//     when (|I_h - I_2h| / S)^2 <= 1e-13, S = the same rule applied to |integrand| (the scale of cancellations),
//     and the steps shrink by kRetry otherwise (up to kMaxHalfNodes per side; beyond, the kernel reports failure).
//     Measured: within 2.1e-12 of the former nested rule (certified 1e-10 against mpmath) over 42000 moments with
//     means and all pairs, 5-100x faster (docs/layers/activations.rst, "Cost").
//   * polynomial pairs (linear, quadratic, hermite): exact (poly_moments below), the Taylor coefficients at the
//     means times the bivariate moments E[l1^k l2^l] = sum_r C(k,r) C(l,r) r! (k-r-1)!! (l-r-1)!! y^r
//     x^((k-r)/2) z^((l-r)/2) (Isserlis), to rounding. Host only (the hermite registry is host memory).
//   I4 = E[s'(l1) s'(l2) a(l3) b(l4)]: the outer (l1, l2) by a nested trapezoidal rule with the same certificate
//   (Cholesky of C, zero pivots dropped, steps halved on failure), the inner E[a(l3) b(l4) | l1, l2] as a moment
//   with means (all four trigonometric: one closed form over the sign patterns of the characteristic function).
//
// TWOLAYER_HD (hd.hpp): no allocation, no exceptions (failure is a return value), bounded loops.
#pragma once
#include <cmath>

#include "twolayer/activation.hpp"
#include "twolayer/activation_points.hpp"
#include "twolayer/hd.hpp"

namespace twolayer::smooth {

inline constexpr double kTrunc = 9.0;        // |t| <= 9 for a standard normal variable
inline constexpr double kCoarseExp = 18.0;   // the 2h rule errs by ~e^-18
inline constexpr double kAcceptSq = 1e-13;   // (|I_h - I_2h| / S)^2 bound
inline constexpr int kMaxHalfNodes = 4096;   // nodes per side of one variable at most
inline constexpr double kInfStrip = 1e300;

TWOLAYER_HD inline bool is_trig(Activation a) { return a == Activation::Sin || a == Activation::Cos; }
TWOLAYER_HD inline bool is_smooth(Activation a) { return a != Activation::Relu && a != Activation::Step; }

// Half-width of the strip of analyticity of sigma (in its argument) and the coefficient G of its growth e^(G v^2/2)
// at imaginary part v.
struct Analytic {
  double strip, growth;
};
TWOLAYER_HD inline Analytic analytic(Activation a) {
  switch (a) {
    case Activation::Tanh: return {0.5 * kPi, 0.0};
    case Activation::Sigmoid:
    case Activation::Softplus:
    case Activation::Silu: return {kPi, 0.0};
    case Activation::Erf:
    case Activation::Gelu: return {kInfStrip, 1.0};
    case Activation::Sin:
    case Activation::Cos: return {kInfStrip, 1.0};  // e^|v| <= e^((v^2 + 1) / 2)
    default:
#if !defined(__CUDA_ARCH__)
      if (is_custom(a)) return {custom_table(a).strip, 0.0};  // estimated from its series; affine tails
#endif
      return {kInfStrip, 0.0};  // polynomials
  }
}

// Trapezoidal step h (the fine rule; 2h errs by ~e^-kCoarseExp) for an integrand phi(t) prod_k sigma_k(slope_k t + ...).
TWOLAYER_HD inline double trapezoid_step(const Activation* acts, const double* slopes, int n,
                                          double coarse_exp = kCoarseExp) {
  double strip = kInfStrip, G = 1.0;
  for (int k = 0; k < n; ++k) {
    const double c = std::fabs(slopes[k]);
    if (!(c > 0.0)) continue;
    const Analytic an = analytic(acts[k]);
    if (an.strip < kInfStrip) strip = std::fmin(strip, an.strip / c);
    G += an.growth * c * c;
  }
  double v = std::sqrt(2.0 * coarse_exp / G);
  if (0.9 * strip < v) v = 0.9 * strip;
  return 0.5 * (2.0 * kPi * v / (coarse_exp + 0.5 * G * v * v));
}

// Nodes per side for step h (even, so that the 2h rule is the even-indexed subset, symmetric about 0); 0 if too many.
TWOLAYER_HD inline int half_nodes(double h) {
  const double n = std::ceil(kTrunc / h);
  if (!(n <= kMaxHalfNodes)) return 0;
  const int k = static_cast<int>(n);
  return k + (k & 1);
}

TWOLAYER_HD inline double normal_weight(double t, double h) { return h * 0.39894228040143267794 * std::exp(-0.5 * t * t); }

// The moments requested for jets of order `order` (0: value, 1: gradient, 2: Hessian): all (i, j) with i + j even
// and at most 2 order, indexed by moment_index.
inline constexpr int kMoments = 9;
TWOLAYER_HD constexpr int moment_index(int i, int j) {
  // (0,0) | (2,0) (1,1) (0,2) | (4,0) (3,1) (2,2) (1,3) (0,4)
  return (i + j) == 0 ? 0 : ((i + j) == 2 ? 1 + (2 - i) : 4 + (4 - i));
}
TWOLAYER_HD constexpr int moment_count(int order) { return order == 0 ? 1 : (order == 1 ? 4 : 9); }
// The odd moments (i + j odd, at most 2 order - 1) on request: (1,0) (0,1) | (3,0) (2,1) (1,2) (0,3).
inline constexpr int kOddMoments = 6;
TWOLAYER_HD constexpr int odd_moment_index(int i, int j) { return (i + j) == 1 ? j : 2 + j; }
// Slot of (i, j) in one array of the even moments followed by the odd ones.
TWOLAYER_HD constexpr int moment_slot(int i, int j) {
  return ((i + j) & 1) == 0 ? moment_index(i, j) : kMoments + odd_moment_index(i, j);
}

// cos(theta + k pi / 2) for an integer k (exact zeros and signs).
TWOLAYER_HD inline double cos_shift(double c, double s, int k) {
  switch (((k % 4) + 4) % 4) {
    case 0: return c;
    case 1: return -s;
    case 2: return -c;
    default: return s;
  }
}
// Phase (in quarter turns) of the k-th derivative of sin or cos written as cos(theta + phase pi / 2).
TWOLAYER_HD inline int trig_phase(Activation a, int k) { return (a == Activation::Sin ? -1 : 0) + k; }

// The closed form of the header for one (mu, C), f and g sin or cos: E[f^(i)(mu1 + l1) g^(j)(mu2 + l2)] =
// em cos(mu1 - mu2 + (pf - pg) pi / 2) + ep cos(mu1 + mu2 + (pf + pg) pi / 2), pf = trig_phase(f, i),
// pg = trig_phase(g, j), em, ep = e^(-(x + z -+ 2 y) / 2) / 2: every order at any PSD covariance (singular, zero
// variances: no division), the exponentials and the cosines of the means taken once for all orders.
struct TrigPair {
  double em, ep, cd, sd, cp, sp;
  TWOLAYER_HD TrigPair(double mu1, double mu2, double x, double y, double z)
      : em(0.5 * std::exp(-0.5 * (x + z - 2.0 * y))), ep(0.5 * std::exp(-0.5 * (x + z + 2.0 * y))),
        cd(std::cos(mu1 - mu2)), sd(std::sin(mu1 - mu2)), cp(std::cos(mu1 + mu2)), sp(std::sin(mu1 + mu2)) {}
  TWOLAYER_HD double operator()(Activation f, int i, Activation g, int j) const {
    const int pf = trig_phase(f, i), pg = trig_phase(g, j);
    return em * cos_shift(cd, sd, pf - pg) + ep * cos_shift(cp, sp, pf + pg);
  }
};

// Closed-form trigonometric moments (see the header).
TWOLAYER_HD inline void trig_moments(Activation f, Activation g, double mu1, double mu2, double x, double y, double z,
                                     int order, double* m, double* odd = nullptr) {
  const TrigPair pair(mu1, mu2, x, y, z);
  for (int q = 0; q <= 2 * order; q += odd ? 1 : 2)
    for (int i = q; i >= 0; --i)
      (q & 1 ? odd[odd_moment_index(i, q - i)] : m[moment_index(i, q - i)]) = pair(f, i, g, q - i);
}

// Pairs whose moments are taken exactly: a hermite unit with a polynomial one (the pairs of the classic linear and
// quadratic units keep their own closed forms and quadratures, bitwise as before).
TWOLAYER_HD inline bool exact_polynomial_pair(Activation f, Activation g) {
  return (is_hermite(f) || is_hermite(g)) && is_polynomial(f) && is_polynomial(g);
}

// E[l1^k l2^l] for (l1, l2) ~ N(0, [[x, y], [y, z]]), k, l <= kMaxHermiteDegree (Isserlis: r cross pairs).
TWOLAYER_HD inline void bivariate_moments(double x, double y, double z, double M[][kMaxHermiteDegree + 1]) {
  constexpr int N = kMaxHermiteDegree;
  double px[N + 1], pz[N + 1], py[N + 1], df[N + 2], binom[N + 1][N + 1], fact[N + 1];
  px[0] = pz[0] = py[0] = fact[0] = 1.0;
  for (int k = 1; k <= N; ++k) {
    px[k] = px[k - 1] * x;
    pz[k] = pz[k - 1] * z;
    py[k] = py[k - 1] * y;
    fact[k] = fact[k - 1] * k;
  }
  df[0] = 1.0;  // df[m] = (m - 1)!!, (-1)!! = 0!! = 1
  df[1] = 1.0;
  for (int m = 2; m <= N + 1; ++m) df[m] = (m - 1) * df[m - 2];
  for (int k = 0; k <= N; ++k)
    for (int r = 0; r <= k; ++r) binom[k][r] = (r == 0 || r == k) ? 1.0 : binom[k - 1][r - 1] + binom[k - 1][r];
  for (int k = 0; k <= N; ++k)
    for (int l = 0; l <= N; ++l) {
      double v = 0.0;
      if (((k + l) & 1) == 0)
        for (int r = (k & 1); r <= (k < l ? k : l); r += 2)
          v += binom[k][r] * binom[l][r] * fact[r] * df[k - r] * df[l - r] * py[r] * px[(k - r) / 2] * pz[(l - r) / 2];
      M[k][l] = v;
    }
}

// E[P^(i)(mu1 + l1) Q^(j)(mu2 + l2)] from dp[k] = P^(k)(mu1), dq[k] = Q^(k)(mu2) and M = bivariate_moments:
// P^(i)(mu1 + l) = sum_k P^(i+k)(mu1) / k! l^k.
TWOLAYER_HD inline double poly_pair_moment(const double* dp, int np, int i, const double* dq, int nq, int j,
                                           const double M[][kMaxHermiteDegree + 1]) {
  double v = 0.0, fk = 1.0;
  for (int k = 0; i + k <= np; ++k) {
    fk = k ? fk * k : 1.0;
    double w = 0.0, fl = 1.0;
    for (int l = 0; j + l <= nq; ++l) {
      fl = l ? fl * l : 1.0;
      w += dq[j + l] / fl * M[k][l];
    }
    v += dp[i + k] / fk * w;
  }
  return v;
}

// The moments m[moment_index(i, j)] of `order` (moments()) for polynomials P and Q (monomial coefficients
// p_0..p_np, q_0..q_nq), exactly.
TWOLAYER_HD inline void poly_moments(const double* p, int np, const double* q, int nq, double mu1, double mu2, double x,
                                     double y, double z, int order, double* m, double* odd = nullptr) {
  double M[kMaxHermiteDegree + 1][kMaxHermiteDegree + 1];
  bivariate_moments(x, y, z, M);
  double dp[kMaxHermiteDegree + 1], dq[kMaxHermiteDegree + 1];
  polynomial_derivatives(p, np, mu1, np, dp);
  polynomial_derivatives(q, nq, mu2, nq, dq);
  for (int t = 0; t <= 2 * order; t += odd ? 1 : 2)
    for (int i = t; i >= 0; --i)
      (t & 1 ? odd[odd_moment_index(i, t - i)] : m[moment_index(i, t - i)]) =
          poly_pair_moment(dp, np, i, dq, nq, t - i, M);
}

// Tile buffer of the lattice rule in moments() (doubles per derivative order and function): bounded so that the
// frame stays small (device code: local memory per thread).
#ifdef __CUDA_ARCH__
inline constexpr int kTile = 64;
#else
inline constexpr int kTile = 512;
#endif
inline constexpr double kRetry = 0.75;  // step factor after a failed check
// Exponent of the coarse rule's error for the first step of the jets of `order` (the higher derivatives of
// activations with poles are larger near the strip's edge: a finer first step spares a retry).
TWOLAYER_HD constexpr double coarse_exp(int order) { return order == 0 ? 20.0 : (order == 1 ? 22.0 : 25.0); }

// m[moment_index(i, j)] = E[f^(i)(mu1 + l1) g^(j)(mu2 + l2)] for (l1, l2) ~ N(0, [[x, y], [y, z]]) (PSD), the moments
// of `order`, and when odd is given also odd[odd_moment_index(i, j)] for i + j odd (the same certificate over all).
// Returns false when the quadrature could not certify the result within kMaxHalfNodes nodes per side.
//
// Lattice rule: with r = y / sqrt(x z), l1 = sqrt(x) (X + Y), l2 = sqrt(z) (X - Y), X ~ N(0, (1 + r) / 2) and
// Y ~ N(0, (1 - r) / 2) independent. The variable O of the larger trapezoidal step gets the step p delta (p >= 1 an
// integer, delta the other's step), the other I the step delta: on the node (k, j) the arguments are
// f: mu1 + sqrt(x) delta (p k + j) and g: mu2 +- sqrt(z) delta (p k - j), points of two one-dimensional lattices. The
// activations are evaluated once per lattice point (tiles of kTile points), not once per node: about 4 (no + ni)
// evaluations instead of (2 no + 1)(2 ni + 1), whatever the correlation (a near-singular C shrinks ni, never grows
// the lattice). The node sums are products of table entries.
TWOLAYER_HD inline bool moments(Activation f, Activation g, double mu1, double mu2, double x, double y, double z,
                                int order, double* m, double* odd = nullptr) {
  const int nd = 2 * order, qstep = odd && order > 0 ? 1 : 2;
  if (is_trig(f) && is_trig(g)) {
    trig_moments(f, g, mu1, mu2, x, y, z, order, m, order > 0 ? odd : nullptr);
    return true;
  }
#if !defined(__CUDA_ARCH__)
  if (exact_polynomial_pair(f, g)) {
    const Polynomial P = polynomial_of(f), Q = polynomial_of(g);
    poly_moments(P.p, P.degree, Q.p, Q.degree, mu1, mu2, x, y, z, order, m, order > 0 ? odd : nullptr);
    return true;
  }
#endif
  const double sx = x > 0.0 ? std::sqrt(x) : 0.0, sz = z > 0.0 ? std::sqrt(z) : 0.0;
  if (!(sx > 0.0) && !(sz > 0.0)) {  // l = 0
    double df[5], dg[5];
    sigma_derivatives(f, mu1, nd, df);
    sigma_derivatives(g, mu2, nd, dg);
    for (int q = 0; q <= nd; q += qstep)
      for (int i = q; i >= 0; --i) (q & 1 ? odd[odd_moment_index(i, q - i)] : m[moment_index(i, q - i)]) = df[i] * dg[q - i];
    return true;
  }
  // one variance 0: r = 1 (only X, of variance 1). A correlation within a few rounding errors of +-1 (the self
  // pairs x = y = z, whose r carries the rounding of sqrt(x) sqrt(z)) is +-1: it is known no better.
  double r = (sx > 0.0 && sz > 0.0) ? y / (sx * sz) : 1.0;
  constexpr double kUnitCorr = 1.0 - 8.0 * 2.220446049250313e-16;
  r = r >= kUnitCorr ? 1.0 : (r <= -kUnitCorr ? -1.0 : r);
  const double vx = 0.5 * (1.0 + r), vy = 0.5 * (1.0 - r), rvx = std::sqrt(vx), rvy = std::sqrt(vy);
  const Activation acts[2] = {f, g};
  const double slx[2] = {sx * rvx, sz * rvx}, sly[2] = {sx * rvy, sz * rvy};
  double hx = vx > 0.0 ? trapezoid_step(acts, slx, 2, coarse_exp(order)) : 0.0;  // standard-normal steps
  double hy = vy > 0.0 ? trapezoid_step(acts, sly, 2, coarse_exp(order)) : 0.0;
  for (int attempt = 0; attempt < 16; ++attempt, hx *= kRetry, hy *= kRetry) {
    // O: the variable of the larger step in l-units (sign +1 for X, -1 for Y in l2 = sqrt(z) (X - Y))
    const double HX = rvx * hx, HY = rvy * hy;
    const bool ox = HX >= HY;
    const double HO = ox ? HX : HY, HI = ox ? HY : HX, ro = ox ? rvx : rvy, ri = ox ? rvy : rvx;
    const double sgn = ox ? 1.0 : -1.0;
    // p: the lattice's step ratio; when the windows of consecutive k are disjoint (a near-singular C) there is
    // nothing to share, the O step stays HO and the tiles take one k each (shared = false)
    int p = 1, ni = 0;
    double delta = HO, hi = 0.0, step_o = HO;
    bool shared = true;
    if (HI > 0.0) {
      delta = HI;
      hi = HI / ri;
      ni = half_nodes(hi);
      if (ni == 0) return false;
      const double q = std::floor(HO / HI);
      shared = q <= 2.0 * ni;
      p = !shared ? 1 : (q < 1.0 ? 1 : static_cast<int>(q));
      step_o = shared ? p * delta : HO;
    }
    const double ho = step_o / ro;
    const int no = half_nodes(ho);
    if (no == 0) return false;
    const bool two = ni > 0;
    double fine[kMoments + kOddMoments] = {}, coarse[kMoments + kOddMoments] = {}, scale[kMoments + kOddMoments] = {};
    // tiles: j in [ja, ja + jt), k in [ka, ka + kt) with p (kt - 1) + jt <= kTile lattice points (jt at most half a
    // tile, so that consecutive k share points whenever p is small)
    const int jt_max = 2 * ni + 1 < kTile / 2 ? 2 * ni + 1 : kTile / 2;
    const int kt_max = (!shared || p > kTile - jt_max) ? 1 : 1 + (kTile - jt_max) / p;
    // F: f's derivatives along the tile's lattice, G: g's in reverse order (both read forward in j); wi: the
    // I weights, we: the same on even j (the coarse rule), 0 on odd j
    double F[5 * kTile], G[5 * kTile], wi[kTile], we[kTile];
    for (int ja = -ni; ja <= ni; ja += jt_max) {
      const int jt = (ni - ja + 1) < jt_max ? (ni - ja + 1) : jt_max;
      for (int j = 0; j < jt; ++j) {
        wi[j] = two ? normal_weight((ja + j) * hi, hi) : 1.0;
        we[j] = ((ja + j) & 1) == 0 ? wi[j] : 0.0;
      }
      for (int ka = -no; ka <= no; ka += kt_max) {
        const int kt = (no - ka + 1) < kt_max ? (no - ka + 1) : kt_max;
        // point e in [0, np): f at l-offset ka step_o + (ja + e) delta, g at ka step_o + (e - ja - jt + 1) delta
        // (stored at np - 1 - e); node (ka + kk, ja + j) reads F[p kk + j] and G[np - jt - p kk + j]
        const int np = p * (kt - 1) + jt;
        const double o = ka * step_o;
#if defined(__CUDA_ARCH__)
        for (int e = 0; e < np; ++e) {
          double d[5];
          sigma_derivatives(f, mu1 + sx * (o + delta * (ja + e)), nd, d);
          for (int q = 0; q <= nd; ++q) F[q * kTile + e] = d[q];
          sigma_derivatives(g, mu2 + sgn * sz * (o + delta * (e - ja - jt + 1)), nd, d);
          for (int q = 0; q <= nd; ++q) G[q * kTile + np - 1 - e] = d[q];
        }
#else
        {  // the same points, each function's in one pass (activation_points.hpp); G's stored from its end
          double xf[kTile], xg[kTile];
          for (int e = 0; e < np; ++e) {
            xf[e] = mu1 + sx * (o + delta * (ja + e));
            xg[np - 1 - e] = mu2 + sgn * sz * (o + delta * (e - ja - jt + 1));
          }
          double* of[5] = {};
          double* og[5] = {};
          for (int q = 0; q <= nd; ++q) of[q] = F + q * kTile, og[q] = G + q * kTile;
          sigma_derivatives_at(f, xf, np, nd, of);
          sigma_derivatives_at(g, xg, np, nd, og);
        }
#endif
        for (int kk = 0; kk < kt; ++kk) {
          const int k = ka + kk;
          const double wo = normal_weight(k * ho, ho), wc = ((k & 1) == 0) ? (two ? 4.0 : 2.0) * wo : 0.0;
          for (int q = 0; q <= nd; q += qstep)
            for (int i = q; i >= 0; --i) {
              const double* Fi = F + i * kTile + p * kk;
              const double* Gj = G + (q - i) * kTile + np - jt - p * kk;
              double sf = 0.0, se = 0.0, sa = 0.0;
#ifdef TWOLAYER_OPENMP
#pragma omp simd reduction(+ : sf, se, sa)
#endif
              for (int j = 0; j < jt; ++j) {
                const double v = Fi[j] * Gj[j];
                sf += wi[j] * v;
                se += we[j] * v;
                sa += wi[j] * std::fabs(v);
              }
              const int e = moment_slot(i, q - i);
              fine[e] += wo * sf;
              scale[e] += wo * sa;
              coarse[e] += wc * se;
            }
        }
      }
    }
    bool ok = true;
    for (int q = 0; q <= nd; q += qstep)
      for (int i = q; i >= 0; --i) {
        const int e = moment_slot(i, q - i);
        const double d = fine[e] - coarse[e];
        ok = ok && !(d * d > kAcceptSq * scale[e] * scale[e]);
        (q & 1 ? odd[odd_moment_index(i, q - i)] : m[e]) = fine[e];
      }
    if (ok) return true;
  }
  return false;
}

// Lower Cholesky factor of a PSD n x n matrix (n <= 4), zero pivots (relative 1e-14 of the diagonal) giving zero columns.
// In a row whose pivot is dropped (a repeated field l_i = l_k, or a combination of the earlier ones), the entries
// at the rounding level, |L_ij| <= kRoundingEntry sqrt(C_ii), are exact zeros, not the rounding of r / L_jj (~1e-17,
// a spurious conditional variance ~1e-34 that the inner rules of i4 integrated over: a custom table's absolute
// rounding at its zeros is then the whole integrand, and the rule never certified it). A nearly repeated field
// (w2 = w1 + eps g) keeps its entries (~eps: first-order covariances; zeroing the whole remainder once its variance
// fell below the pivot's 1e-14 moved the biased relu target RHS by 3e-10 at eps = 1e-7). No other entry reads a row
// whose pivot is dropped, so they are zeroed after the factorisation (a full rank C is factored exactly as before).
inline constexpr double kRoundingEntry = 8.0 * 2.220446049250313e-16;
TWOLAYER_HD inline void psd_cholesky(const double* C, int n, double* L) {
  for (int i = 0; i < n * n; ++i) L[i] = 0.0;
  for (int j = 0; j < n; ++j) {
    double d = C[j * n + j];
    for (int k = 0; k < j; ++k) d -= L[j * n + k] * L[j * n + k];
    const double tol = 1e-14 * std::fabs(C[j * n + j]);
    if (!(d > tol)) continue;
    const double ljj = std::sqrt(d);
    L[j * n + j] = ljj;
    for (int i = j + 1; i < n; ++i) {
      double r = C[i * n + j];
      for (int k = 0; k < j; ++k) r -= L[i * n + k] * L[j * n + k];
      L[i * n + j] = r / ljj;
    }
  }
  for (int i = 1; i < n; ++i) {
    if (L[i * n + i] > 0.0) continue;
    const double tol = kRoundingEntry * std::sqrt(std::fabs(C[i * n + i]));
    for (int j = 0; j < i; ++j)
      if (std::fabs(L[i * n + j]) <= tol) L[i * n + j] = 0.0;
  }
}

// E[prod_k cos(A_k + l_k)] over four variables l ~ N(0, C) (the all-trigonometric I4), over the sign patterns.
TWOLAYER_HD inline double trig_product4(const double* A, const double* C) {
  double sum = 0.0;
  for (int p = 0; p < 8; ++p) {
    const double e[4] = {1.0, (p & 1) ? -1.0 : 1.0, (p & 2) ? -1.0 : 1.0, (p & 4) ? -1.0 : 1.0};
    double q = 0.0, ph = 0.0;
    for (int i = 0; i < 4; ++i) {
      ph += e[i] * A[i];
      for (int k = 0; k < 4; ++k) q += e[i] * e[k] * C[4 * i + k];
    }
    sum += std::cos(ph) * std::exp(-0.5 * q);
  }
  return sum / 8.0;
}

// (host only) E[prod_k P_k^(d_k)(mu_k + l_k)] over four variables l ~ N(0, C) (row-major 4 x 4 PSD) for polynomials P_k
// (monomial coefficients p[k], degrees n[k] <= kMaxHermiteDegree), exactly: the Taylor coefficients at the means
// times the moments E[l^q] over the box q_k <= n_k - d_k, from Stein's recursion
// E[l^(q + e_i)] = sum_j C_ij q_j E[l^(q - e_j)] (in increasing flat index: every entry it reads precedes it).
inline double poly_product4(const double* const* p, const int* n, const int* dord, const double* mu,
                                        const double* C) {
  constexpr int N = kMaxHermiteDegree + 1;
  int box[4], stride[4];
  double t[4][N];  // t[k][q] = P_k^(d_k + q)(mu_k) / q!
  int total = 1;  // the box's size (strides: variable 3 fastest)
  for (int k = 3; k >= 0; --k) {
    box[k] = n[k] - dord[k] + 1;
    if (box[k] <= 0) return 0.0;
    stride[k] = total;
    total *= box[k];
    double d[N];
    polynomial_derivatives(p[k], n[k], mu ? mu[k] : 0.0, n[k], d);
    double f = 1.0;
    for (int q = 0; q < box[k]; ++q) {
      f = q ? f * q : 1.0;
      t[k][q] = d[dord[k] + q] / f;
    }
  }
  double E[N * N * N * N];
  double sum = 0.0;
  int idx = 0, q[4];
  for (q[0] = 0; q[0] < box[0]; ++q[0])
    for (q[1] = 0; q[1] < box[1]; ++q[1]) {
      const double t01 = t[0][q[0]] * t[1][q[1]];
      for (q[2] = 0; q[2] < box[2]; ++q[2]) {
        const double t012 = t01 * t[2][q[2]];
        for (q[3] = 0; q[3] < box[3]; ++q[3], ++idx) {
          const int deg = q[0] + q[1] + q[2] + q[3];
          double v = 0.0;
          if (deg == 0) {
            v = 1.0;
          } else if ((deg & 1) == 0) {
            int i = 0;
            while (q[i] == 0) ++i;
            const int base = idx - stride[i];  // q - e_i
            for (int j = 0; j < 4; ++j) {
              const int qj = q[j] - (j == i ? 1 : 0);
              if (qj > 0) v += C[4 * i + j] * qj * E[base - stride[j]];
            }
          }
          E[idx] = v;
          sum += t012 * t[3][q[3]] * v;
        }
      }
    }
  return sum;
}

// I4 = E[s'(mu1 + l1) s'(mu2 + l2) a(mu3 + l3) b(mu4 + l4)] for smooth s, a, b (row-major 4 x 4 PSD C; mu = nullptr:
// zero means); false if not certified. Three polynomial units (linear, quadratic, hermite: the quadratic student
// with means, whose zero-mean I4 is in closed form, ends here) exactly by poly_product4.
TWOLAYER_HD inline bool i4(Activation s, Activation a, Activation b, const double* C, double& out,
                           const double* mu = nullptr) {
#if !defined(__CUDA_ARCH__)
  if (is_polynomial(s) && is_polynomial(a) && is_polynomial(b)) {  // exact (poly_product4)
    const Polynomial P[3] = {polynomial_of(s), polynomial_of(a), polynomial_of(b)};
    const double* p[4] = {P[0].p, P[0].p, P[1].p, P[2].p};
    const int n[4] = {P[0].degree, P[0].degree, P[1].degree, P[2].degree}, dord[4] = {1, 1, 0, 0};
    out = poly_product4(p, n, dord, mu, C);
    return true;
  }
#endif
  if (is_trig(s) && is_trig(a) && is_trig(b)) {
    double A[4] = {0.5 * kPi * trig_phase(s, 1), 0.5 * kPi * trig_phase(s, 1), 0.5 * kPi * trig_phase(a, 0),
                   0.5 * kPi * trig_phase(b, 0)};
    if (mu)
      for (int k = 0; k < 4; ++k) A[k] += mu[k];
    out = trig_product4(A, C);
    return true;
  }
  double L[16];
  psd_cholesky(C, 4, L);
  // Given the standard normal (t, u) of the first two columns: l1 = L11 t, l2 = L21 t + L22 u, (l3, l4) with means
  // L31 t + L32 u, L41 t + L42 u and covariance from the last two columns.
  const double x = L[10] * L[10], y = L[10] * L[14], z = L[14] * L[14] + L[15] * L[15];
  const Activation ta[4] = {s, s, a, b};
  const double st[4] = {L[0], L[4], L[8], L[12]}, su[4] = {0.0, L[5], L[9], L[13]};
  double h1 = trapezoid_step(ta, st, 4), h2 = trapezoid_step(ta, su, 4);
  const bool two = L[5] != 0.0 || L[9] != 0.0 || L[13] != 0.0;
  for (int attempt = 0; attempt < 16; ++attempt, h1 *= 0.5, h2 *= 0.5) {
    const int n1 = half_nodes(h1), n2 = two ? half_nodes(h2) : 0;
    if (n1 == 0 || (two && n2 == 0)) return false;
    double fine = 0.0, coarse = 0.0, scale = 0.0;
    for (int k = -n1; k <= n1; ++k) {
      const double t = k * h1, wt = normal_weight(t, h1);
      for (int j = -n2; j <= n2; ++j) {
        const double u = j * h2, w = wt * (two ? normal_weight(u, h2) : 1.0);
        // (the zero-mean arguments exactly as written before means existed: bitwise the same kernel)
        const double l1 = L[0] * t, l2 = L[4] * t + L[5] * u, l3 = L[8] * t + L[9] * u, l4 = L[12] * t + L[13] * u;
        const double v = dsigma(s, mu ? mu[0] + l1 : l1) * dsigma(s, mu ? mu[1] + l2 : l2);
        double inner;
        if (!moments(a, b, mu ? mu[2] + l3 : l3, mu ? mu[3] + l4 : l4, x, y, z, 0, &inner)) return false;
        fine += w * v * inner;
        scale += w * std::fabs(v * inner);
        coarse += ((k & 1) == 0 && (j & 1) == 0) ? (two ? 4.0 : 2.0) * w * v * inner : 0.0;
      }
    }
    const double d = fine - coarse;
    if (!(d * d > kAcceptSq * scale * scale)) {
      out = fine;
      return true;
    }
  }
  return false;
}

}  // namespace twolayer::smooth
