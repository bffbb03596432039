// Orthant moments of a small Gaussian (see gaussian_orthant.hpp for the method).
#include "twolayer/gaussian_orthant.hpp"

#include <algorithm>
#include <cmath>

#include "twolayer/gaussian_mean.hpp"
#include "twolayer/gaussian_relu_i4.hpp"

namespace twolayer::detail {

namespace {

// A variance below kZeroTol ref_j (ref: the variances before any conditioning) is zero; a pair whose 2x2 determinant,
// the squared minors of its rows of the square-root factor (no cancellation), is below kAlignTol C_jj C_kk (the
// current variances) is one variable.
constexpr double kAlignTol = 1e-15;
constexpr double kZeroTol = 1e-15;
// An aligned pair l_k - mu_k = g (l_j - mu_j) is merged into one variable when its offset delta = mu_k - g mu_j is
// below kOffsetTol sqrt(C_kk) (the alignment itself is only resolved to ~1e-7 of the scale); a larger offset keeps
// both variables (conditioning on one leaves the other a constant, a well-defined factor).
constexpr double kOffsetTol = 1e-7;

// A moment problem on up to four variables.
struct Problem {
  int n = 0;
  double C[16];
  unsigned S = 0;  // bit j: the factor 1(l_j > 0)
  int p[4] = {0, 0, 0, 0};
  double ref[4] = {0, 0, 0, 0};  // variances before conditioning
  double mu[4] = {0, 0, 0, 0};   // means
  // A square-root factor, l - mu = F v with v ~ N(0, I_R) (row i: F[4 i .. 4 i + R)): conditioning projects its rows,
  // which keeps a nearly parallel variable's small conditional variance (and the angles) to full relative accuracy.
  double F[16] = {};
  int R = 0;
  // Memoisation of the orthant probabilities of one top-level (C, mu): the original index of each variable, the
  // originals conditioned on (at 0) so far, and whether a merge happened (then the key does not fix the problem).
  int id[4] = {0, 1, 2, 3};
  unsigned cond = 0;
  bool merged = false;
  double* memo = nullptr;  // 256 entries (NaN: unknown), key cond | (indicator originals << 4)
  double& c(int i, int j) { return C[4 * i + j]; }
  // The sum of the squared 2x2 minors of rows j, k: C_jj C_kk - C_jk^2 without cancellation.
  double minors(int j, int k) const {
    double det = 0.0;
    for (int a = 0; a < R; ++a)
      for (int b = a + 1; b < R; ++b) {
        const double w = F[4 * j + a] * F[4 * k + b] - F[4 * j + b] * F[4 * k + a];
        det += w * w;
      }
    return det;
  }
  // acos |rho_jk| from the minors (accurate however close to +-1 the correlation is).
  double angle(int j, int k) const { return std::atan2(std::sqrt(minors(j, k)), std::fabs(c(j, k))); }
  double c(int i, int j) const { return C[4 * i + j]; }
  bool step(int j) const { return (S >> j) & 1u; }
};

// Removes variable k (the last variable moves into its slot).
void remove_var(Problem& P, int k) {
  const int last = P.n - 1;
  if (k != last) {
    for (int i = 0; i < P.n; ++i) {
      P.c(k, i) = P.c(last, i);
    }
    for (int i = 0; i < P.n; ++i) P.c(i, k) = P.c(i, last);
    P.c(k, k) = P.c(last, last);
    for (int a = 0; a < 4; ++a) P.F[4 * k + a] = P.F[4 * last + a];
    P.p[k] = P.p[last];
    P.ref[k] = P.ref[last];
    P.mu[k] = P.mu[last];
    P.id[k] = P.id[last];
    const bool s = P.step(last);
    P.S = (P.S & ~(1u << k)) | (s ? (1u << k) : 0u);
  }
  P.S &= ~(1u << last);
  P.p[last] = 0;
  P.mu[last] = 0.0;
  for (int a = 0; a < 4; ++a) P.F[4 * last + a] = 0.0;
  --P.n;
}

double orthant_probability(const Problem& P) {
  // only the step variables matter: gather them
  int idx[4], m = 0;
  bool centred = true;
  unsigned ids = 0;
  for (int j = 0; j < P.n; ++j)
    if (P.step(j)) {
      idx[m++] = j;
      centred = centred && P.mu[j] == 0.0;
      ids |= 1u << P.id[j];
    }
  const unsigned key = P.cond | (ids << 4);
  // memoised with means only (the zero-mean closed forms stay recomputed per problem, bitwise as before means)
  const bool memo = P.memo != nullptr && !P.merged && m >= 3 && !centred;
  if (memo && !std::isnan(P.memo[key])) return P.memo[key];
  auto r = [&](int a, int b) {
    const double v = P.c(idx[a], idx[b]) / std::sqrt(P.c(idx[a], idx[a]) * P.c(idx[b], idx[b]));
    return std::max(-1.0, std::min(1.0, v));
  };
  // asin(rho) = +-(pi/2 - acos |rho|), the angle from the minors where |rho| >= 0.9 (asin(rho) itself keeps only
  // eps / sqrt(1 - rho^2) there)
  auto arcsin = [&](int a, int b) {
    const double v = r(a, b);
    return std::fabs(v) < 0.9 ? std::asin(v) : std::copysign(0.5 * kPi - P.angle(idx[a], idx[b]), v);
  };
  double value;
  if (!centred) {  // with means: Phi, the bivariate normal orthant, or quadrature (gaussian_mean.hpp)
    double Cm[16] = {}, mm[4] = {};
    for (int a = 0; a < m; ++a) {
      mm[a] = P.mu[idx[a]];
      for (int b = 0; b < m; ++b) Cm[m * a + b] = P.c(idx[a], idx[b]);
    }
    if (m == 2) {
      value = bivariate_orthant(r(0, 1), P.angle(idx[0], idx[1]), -mm[0] / std::sqrt(Cm[0]), -mm[1] / std::sqrt(Cm[3]));
    } else if (m == 3) {  // the integral over the variable off the most nearly parallel pair, the rows projected
      int o[3] = {0, 1, 2};
      const double t01 = P.angle(idx[0], idx[1]), t02 = P.angle(idx[0], idx[2]), t12 = P.angle(idx[1], idx[2]);
      if (t01 <= t02 && t01 <= t12) o[0] = 2, o[1] = 0, o[2] = 1;
      else if (t02 <= t12) o[0] = 1, o[1] = 0, o[2] = 2;
      double F3[12], m3[3];
      for (int a = 0; a < 3; ++a) {
        m3[a] = mm[o[a]];
        for (int c = 0; c < P.R; ++c) F3[a * P.R + c] = P.F[4 * idx[o[a]] + c];
      }
      value = orthant3_probability_rows(F3, P.R, m3);
    } else {
      value = orthant_probability_mean(Cm, mm, m);
    }
  } else {
    switch (m) {
      case 0: value = 1.0; break;
      case 1: value = 0.5; break;
      case 2: value = 0.25 + arcsin(0, 1) / (2.0 * kPi); break;
      case 3: value = 0.125 + (arcsin(0, 1) + arcsin(0, 2) + arcsin(1, 2)) / (4.0 * kPi); break;
      default: {
        double C4[16];
        for (int a = 0; a < 4; ++a)
          for (int b = 0; b < 4; ++b) C4[4 * a + b] = P.c(idx[a], idx[b]);
        value = orthant4(C4);
      }
    }
  }
  if (memo) P.memo[key] = value;
  return value;
}

double moment(Problem P);

// Normalises degenerate variables (header, section 2) and evaluates; coef multiplies the result.
double normalised(Problem P) {
  double coef = 1.0;
  for (bool changed = true; changed;) {
    changed = false;
    for (int j = 0; j < P.n && !changed; ++j) {
      const double v = P.c(j, j);
      if (!(v > kZeroTol * P.ref[j])) {  // the constant mu_j: step(mu_j) mu_j^p_j (0 at mu_j = 0 with a factor)
        if (P.step(j) && !(P.mu[j] > 0.0)) return 0.0;
        if (P.p[j] > 0) {
          if (P.mu[j] == 0.0) return 0.0;
          coef *= std::pow(P.mu[j], P.p[j]);
        }
        remove_var(P, j);
        changed = true;
      } else if (!P.step(j) && P.p[j] == 0) {  // no factor of its own
        remove_var(P, j);
        changed = true;
      }
    }
    for (int j = 0; j < P.n && !changed; ++j)
      for (int k = j + 1; k < P.n && !changed; ++k) {
        const double cjk = P.c(j, k), vj = P.c(j, j), vk = P.c(k, k);
        if (P.minors(j, k) > kAlignTol * vj * vk) continue;
        const double c = std::sqrt(vk / vj);  // l_k - mu_k = sg c (l_j - mu_j)
        const bool pos = cjk > 0.0;
        if (!(std::fabs(P.mu[k] - (pos ? c : -c) * P.mu[j]) <= kOffsetTol * std::sqrt(vk))) continue;
        P.merged = true;
        coef *= std::pow(pos ? c : -c, P.p[k]);
        P.p[j] += P.p[k];
        if (pos) {
          if (P.step(k)) P.S |= 1u << j;
        } else if (P.step(k)) {
          if (P.step(j)) return 0.0;  // 1(l_j > 0) 1(-l_j > 0) = 0
          // 1(-l_j > 0) = 1 - 1(l_j > 0)
          Problem A = P;
          A.S &= ~(1u << k);
          remove_var(A, k);
          Problem B = A;
          B.S |= 1u << j;
          return coef * (normalised(A) - normalised(B));
        }
        P.S &= ~(1u << k);
        remove_var(P, k);
        changed = true;
      }
  }
  return coef * moment(P);
}

// The Stein step (header, section 1) on a normalised problem.
double moment(Problem P) {
  int m = -1;
  for (int j = 0; j < P.n; ++j)
    if (P.p[j] > 0 && (m < 0 || P.p[j] > P.p[m])) m = j;
  if (m < 0) return orthant_probability(P);
  --P.p[m];
  double total = P.mu[m] != 0.0 ? P.mu[m] * normalised(P) : 0.0;  // E[l_m G] = mu_m E[G] + sum_j C_mj E[d_j G]
  for (int j = 0; j < P.n; ++j) {
    const double cmj = P.c(m, j);
    if (cmj == 0.0) continue;
    double t = 0.0;
    if (P.p[j] > 0) {
      Problem A = P;
      --A.p[j];
      t += P.p[j] * normalised(A);
    } else if (P.step(j)) {  // the delta: p_j(0) E[... | l_j = 0]
      Problem B = P;
      const double vj = P.c(j, j), mj = P.mu[j];
      for (int a = 0; a < P.n; ++a) {  // the rows projected orthogonally to row j, the means shifted
        const double f = a == j ? 1.0 : P.c(a, j) / vj;
        for (int q = 0; q < P.R; ++q) B.F[4 * a + q] = P.F[4 * a + q] - f * P.F[4 * j + q];
        if (mj != 0.0) B.mu[a] = P.mu[a] - P.c(a, j) * mj / vj;
      }
      for (int a = 0; a < P.n; ++a)
        for (int b = 0; b <= a; ++b) {
          double v = 0.0;
          for (int q = 0; q < P.R; ++q) v += B.F[4 * a + q] * B.F[4 * b + q];
          B.c(a, b) = B.c(b, a) = v;
        }
      B.S &= ~(1u << j);
      B.cond |= 1u << P.id[j];
      remove_var(B, j);
      const double density = mj != 0.0 ? std::exp(-0.5 * mj * mj / vj) : 1.0;
      t += density * normalised(B) / std::sqrt(2.0 * kPi * vj);
    }
    total += cmj * t;
  }
  return total;
}

// The orthant-moment factors of sigma(l): sum of coef * [1(l' > 0) if step] * l^power, l' with variance + extra.
struct Factor {
  double coef;
  bool step;
  int power;
  double extra;
};
int factors(Activation a, Factor out[2]) {
  switch (a) {
    case Activation::Linear: out[0] = {1.0, false, 1, 0.0}; return 1;
    case Activation::Quadratic: out[0] = {1.0, false, 2, 0.0}; return 1;
    case Activation::Relu: out[0] = {1.0, true, 1, 0.0}; return 1;
    case Activation::Step: out[0] = {1.0, true, 0, 0.0}; return 1;
    case Activation::Erf:
      out[0] = {2.0, true, 0, 1.0};
      out[1] = {-1.0, false, 0, 0.0};
      return 2;
    default: break;
  }
  return 0;
}

}  // namespace

double orthant_moment(const double* C, int n, unsigned S, const int* p) {
  return orthant_moment(C, nullptr, n, S, p, nullptr);
}

double orthant_moment(const double* C, const double* mu, int n, unsigned S, const int* p, double* memo) {
  Problem P;
  P.n = n;
  P.memo = memo;
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    P.p[i] = p[i];
    P.ref[i] = C[n * i + i];
    P.mu[i] = mu != nullptr ? mu[i] : 0.0;
    sum += P.mu[i];
    for (int j = 0; j < n; ++j) {
      P.c(i, j) = 0.5 * (C[n * i + j] + C[n * j + i]);
      sum += C[n * i + j];
    }
  }
  if (std::isnan(sum)) return std::nan("");
  // the factor: Cholesky in the variables' order, a pivot below 1e-15 of its variance (an exact combination, or
  // zero) without a column
  for (int j = 0; j < n; ++j) {
    double d = P.c(j, j);
    for (int q = 0; q < P.R; ++q) d -= P.F[4 * j + q] * P.F[4 * j + q];
    if (!(d > 1e-15 * P.c(j, j))) continue;
    const int col = P.R++;
    const double piv = std::sqrt(d);
    P.F[4 * j + col] = piv;
    for (int i = j + 1; i < n; ++i) {
      double v = P.c(i, j);
      for (int q = 0; q < col; ++q) v -= P.F[4 * i + q] * P.F[4 * j + q];
      P.F[4 * i + col] = v / piv;
    }
  }
  P.S = S & ((1u << n) - 1u);
  return normalised(P);
}

double relu_i4_general(Activation a, Activation b, const double* C) {
  Factor fa[2], fb[2];
  const int na = factors(a, fa), nb = factors(b, fb);
  double total = 0.0;
  for (int x = 0; x < na; ++x)
    for (int y = 0; y < nb; ++y) {
      double D[16];
      std::copy(C, C + 16, D);
      D[10] += fa[x].extra;
      D[15] += fb[y].extra;
      const int p[4] = {0, 0, fa[x].power, fb[y].power};
      const unsigned S = 3u | (fa[x].step ? 4u : 0u) | (fb[y].step ? 8u : 0u);
      total += fa[x].coef * fb[y].coef * orthant_moment(D, 4, S, p);
    }
  return total;
}

}  // namespace twolayer::detail
