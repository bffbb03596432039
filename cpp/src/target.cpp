// Exact expectations of polynomial multi-index targets against student units (see target.hpp for the method).
#include "twolayer/target.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>

#include "twolayer/activation_points.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/gaussian_mean.hpp"
#include "twolayer/gaussian_orthant.hpp"
#include "twolayer/gaussian_smooth.hpp"
#include "twolayer/linalg.hpp"
#include "twolayer/parallel.hpp"
#include "twolayer/population.hpp"

namespace twolayer {

namespace {

constexpr int kMaxFields = 3;  // distinct student fields of one expectation
constexpr int kMaxVars = 7;    // plus one auxiliary variable for an erf sigma and up to 3 Cholesky coordinates

double factorial(int n) {
  double f = 1.0;
  for (int j = 2; j <= n; ++j) f *= j;
  return f;
}

double binomial(int n, int j) {
  double b = 1.0;
  for (int q = 1; q <= j; ++q) b = b * (n - j + q) / q;
  return b;
}

// Dense polynomial in n <= 3 variables of total degree <= D (index e0 + (D + 1) (e1 + (D + 1) e2)).
struct LPoly {
  int n = 0, D = 0;
  std::vector<double> c;
  LPoly() = default;
  LPoly(int n_, int D_) : n(n_), D(D_), c(size(n_, D_), 0.0) {}
  static std::size_t size(int n, int D) {
    std::size_t s = 1;
    for (int q = 0; q < n; ++q) s *= static_cast<std::size_t>(D + 1);
    return s;
  }
  std::size_t idx(const int* e) const {
    std::size_t s = 0;
    for (int q = n - 1; q >= 0; --q) s = s * (D + 1) + e[q];
    return s;
  }
};

// Orthant moments E[x^beta prod_{a in A} 1(x_a > 0)] of x = mean + F v, v ~ N(0, I_R) (m <= 7 variables: the
// fields, an erf auxiliary and the Cholesky coordinates u; R <= 4 columns) by Stein's lemma on C = F F^T,
//   E[x_a g(x)] = mean_a E[g] + sum_b C_ab E[d_b g],
// memoised. The derivative of 1(x_b > 0) is the delta: the density N(0; mean_b, C_bb) times the law given x_b = 0,
// whose rows are projected orthogonally to row b (its row becomes 0) and whose means shift by -C_.b mean_b / C_bb,
// so a nearly parallel field keeps its small conditional variance to full relative accuracy (the Schur complement
// C_aa - C_ab^2 / C_bb would keep only eps_mach / (1 - cos^2) of it). ref: the variances before any conditioning; an
// indicator pair whose 2x2 determinant (the squared minors of its two rows: accurate to rounding however small) is
// below 1e-15 ref_a ref_b is one variable (x_b - mean_b = c (x_a - mean_a)): aligned (c > 0), the product is the
// indicator of the larger threshold -mean / sd (1(x_a > 0)^2 = 1(x_a > 0) at equal ones); opposite, it is 0 when
// the two half-lines do not meet (at zero means always), else both stay (an interval: conditioning on one leaves
// the other a constant of definite sign). An indicator of conditional variance below 1e-15 ref is the constant
// 1(mean_b > 0) (0 at zero means; a pair not merged keeps a conditional variance above it, so the limits agree; the
// tolerance of cholesky_basis, so the rank and the merges agree). The recursion ends at orthant probabilities: the
// closed forms 1/2, 1/4 + asin(rho)/(2 pi), 1/8 + sum asin(rho_ab)/(4 pi) at zero means, with means Phi, the
// bivariate normal orthant (its angle acos |rho| from the minors, accurate near +-1) and, for three indicators,
// gaussian_mean.hpp's certified one-dimensional integral.
constexpr int kMaxCols = 4;
class Orthant {
 public:
  Orthant(int m, const double* F, int R, unsigned A, const double* ref, const double* mean = nullptr)
      : m_(m), R_(R), A_(A) {
    std::copy(F, F + m * kMaxCols, F_.begin());
    if (mean) std::copy(mean, mean + m, mean_.begin());
    for (int i = 0; i < m_; ++i)
      for (int j = 0; j < m_; ++j) {
        double v = 0.0;
        for (int c = 0; c < R_; ++c) v += F_[i * kMaxCols + c] * F_[j * kMaxCols + c];
        C_[i * m_ + j] = v;
      }
    if (ref) {
      std::copy(ref, ref + m, ref_.begin());
    } else {
      for (int i = 0; i < m_; ++i) ref_[i] = C_[i * m_ + i];
    }
    for (int b = 0; b < m_ && !zero_; ++b)
      if ((A_ >> b & 1u) && !(C_[b * m_ + b] > kZeroTol * ref_[b])) {  // the constant x_b = mean_b
        if (mean_[b] > 0.0) A_ &= ~(1u << b);
        else zero_ = true;
      }
    for (int a = 0; a < m_ && !zero_; ++a)
      for (int b = a + 1; b < m_; ++b) {
        if (!(A_ >> a & 1u) || !(A_ >> b & 1u)) continue;
        const double cab = C_[a * m_ + b];
        double det = 0.0;  // |F_a|^2 |F_b|^2 - (F_a . F_b)^2 as the sum of the squared 2x2 minors (no cancellation)
        for (int c = 0; c < R_; ++c)
          for (int d = c + 1; d < R_; ++d) {
            const double w = F_[a * kMaxCols + c] * F_[b * kMaxCols + d] - F_[a * kMaxCols + d] * F_[b * kMaxCols + c];
            det += w * w;
          }
        if (det > kAlignTol * C_[a * m_ + a] * C_[b * m_ + b]) continue;
        // the standardised means: x_a > 0 <=> t > -ta, x_b > 0 <=> t > -tb (aligned) or t < tb (opposite)
        const double ta = mean_[a] / std::sqrt(C_[a * m_ + a]), tb = mean_[b] / std::sqrt(C_[b * m_ + b]);
        if (cab > 0.0) {
          if (tb < ta) {
            A_ &= ~(1u << a);
            break;
          }
          A_ &= ~(1u << b);
        } else if (!(ta + tb > 0.0)) {
          zero_ = true;
          break;
        }
      }
  }

  double moment(const std::array<int, kMaxVars>& beta) {
    if (zero_) return 0.0;
    int a = -1;
    for (int q = 0; q < m_; ++q)
      if (beta[q] > 0) {
        a = q;
        break;
      }
    if (a < 0) return probability();
    std::uint64_t key = 0;
    for (int q = 0; q < m_; ++q) key = key * 128u + static_cast<std::uint64_t>(beta[q]);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    std::array<int, kMaxVars> bp = beta;
    --bp[a];
    double s = mean_[a] != 0.0 ? mean_[a] * moment(bp) : 0.0;
    for (int b = 0; b < m_; ++b) {
      const double cab = C_[a * m_ + b];
      if (cab == 0.0) continue;
      if (bp[b] > 0) {
        std::array<int, kMaxVars> bq = bp;
        --bq[b];
        s += cab * bp[b] * moment(bq);
      } else if (A_ >> b & 1u) {
        const double cbb = C_[b * m_ + b], mb = mean_[b];
        const double density = (mb != 0.0 ? std::exp(-0.5 * mb * mb / cbb) : 1.0) / std::sqrt(2.0 * kPi * cbb);
        if (density != 0.0) s += cab * density * child(b).moment(bp);
      }
    }
    memo_.emplace(key, s);
    return s;
  }

 private:
  static constexpr double kAlignTol = 1e-15, kZeroTol = 1e-15;
  int m_, R_;
  unsigned A_;
  bool zero_ = false;
  double prob_ = std::nan("");
  std::array<double, kMaxVars * kMaxCols> F_{};
  std::array<double, kMaxVars * kMaxVars> C_{};
  std::array<double, kMaxVars> ref_{}, mean_{};
  std::unordered_map<std::uint64_t, double> memo_;
  std::array<std::unique_ptr<Orthant>, kMaxVars> children_;

  // The law given x_b = 0, indicator b dropped: the rows projected orthogonally to row b, the means shifted.
  Orthant& child(int b) {
    if (!children_[b]) {
      std::array<double, kMaxVars * kMaxCols> Fc = F_;
      std::array<double, kMaxVars> mc = mean_;
      const double cbb = C_[b * m_ + b], mb = mean_[b];
      for (int i = 0; i < m_; ++i) {
        if (i == b) continue;
        const double f = C_[i * m_ + b] / cbb;
        if (f == 0.0) continue;
        for (int c = 0; c < R_; ++c) Fc[i * kMaxCols + c] -= f * F_[b * kMaxCols + c];
        mc[i] -= f * mb;
      }
      for (int c = 0; c < R_; ++c) Fc[b * kMaxCols + c] = 0.0;
      mc[b] = 0.0;
      children_[b] = std::make_unique<Orthant>(m_, Fc.data(), R_, A_ & ~(1u << b), ref_.data(), mc.data());
    }
    return *children_[b];
  }

  double rho(int a, int b) const {
    const double r = C_[a * m_ + b] / std::sqrt(C_[a * m_ + a] * C_[b * m_ + b]);
    return std::max(-1.0, std::min(1.0, r));
  }

  // acos |rho_ab| from the minors of the two rows (accurate however close to +-1 the correlation is).
  double angle(int a, int b) const {
    double det = 0.0;
    for (int c = 0; c < R_; ++c)
      for (int d = c + 1; d < R_; ++d) {
        const double w = F_[a * kMaxCols + c] * F_[b * kMaxCols + d] - F_[a * kMaxCols + d] * F_[b * kMaxCols + c];
        det += w * w;
      }
    return std::atan2(std::sqrt(det), std::fabs(C_[a * m_ + b]));
  }

  // asin(rho_ab) = +-(pi/2 - acos |rho|), the angle from the minors where |rho| >= 0.9 (asin(rho) itself keeps only
  // eps / sqrt(1 - rho^2) there).
  double arcsin(int a, int b) const {
    const double r = rho(a, b);
    return std::fabs(r) < 0.9 ? std::asin(r) : std::copysign(0.5 * kPi - angle(a, b), r);
  }

  double probability() {
    if (!std::isnan(prob_)) return prob_;
    int v[kMaxVars], n = 0;
    bool centred = true;
    for (int b = 0; b < m_; ++b)
      if (A_ >> b & 1u) {
        v[n++] = b;
        centred = centred && mean_[b] == 0.0;
      }
    if (centred) {
      switch (n) {
        case 0: prob_ = 1.0; break;
        case 1: prob_ = 0.5; break;
        case 2: prob_ = 0.25 + arcsin(v[0], v[1]) / (2.0 * kPi); break;
        case 3: prob_ = 0.125 + (arcsin(v[0], v[1]) + arcsin(v[0], v[2]) + arcsin(v[1], v[2])) / (4.0 * kPi); break;
        default: throw std::logic_error("orthant probability of more than three variables");
      }
      return prob_;
    }
    double sd[3];
    for (int q = 0; q < n && q < 3; ++q) sd[q] = std::sqrt(C_[v[q] * m_ + v[q]]);
    switch (n) {
      case 1: prob_ = 0.5 * std::erfc(-mean_[v[0]] / (sd[0] * std::sqrt(2.0))); break;
      case 2:
        prob_ = bivariate_orthant(rho(v[0], v[1]), angle(v[0], v[1]), -mean_[v[0]] / sd[0], -mean_[v[1]] / sd[1]);
        break;
      case 3: {  // the integral over the variable off the most nearly parallel pair (rows projected: accurate)
        int o[3] = {v[0], v[1], v[2]};
        const double t01 = angle(v[0], v[1]), t02 = angle(v[0], v[2]), t12 = angle(v[1], v[2]);
        if (t01 <= t02 && t01 <= t12) o[0] = v[2], o[1] = v[0], o[2] = v[1];
        else if (t02 <= t12) o[0] = v[1], o[1] = v[0], o[2] = v[2];
        double F3[3 * kMaxCols], m3[3];
        for (int p = 0; p < 3; ++p) {
          m3[p] = mean_[o[p]];
          for (int c = 0; c < R_; ++c) F3[p * R_ + c] = F_[o[p] * kMaxCols + c];
        }
        prob_ = orthant3_probability_rows(F3, R_, m3);
        break;
      }
      default: throw std::logic_error("orthant probability with means of more than three variables");
    }
    return prob_;
  }
};

// Symmetric eigen-decomposition of an n x n (n <= 3) matrix: A = V diag(w) V^T (linalg.hpp's Jacobi).
void jacobi_eigen(int n, const double* A, double* w, double* V) {
  double a[9];
  std::copy(A, A + n * n, a);
  twolayer::jacobi_eigen(a, V, n);
  for (int i = 0; i < n; ++i) w[i] = a[i * n + i];
}

// Moore-Penrose pseudo-inverse of a symmetric positive semi-definite n x n matrix (n <= 3).
void psd_pinv(int n, const double* A, double* out) {
  double w[3], V[9];
  jacobi_eigen(n, A, w, V);
  double wmax = 0.0;
  for (int i = 0; i < n; ++i) wmax = std::max(wmax, std::fabs(w[i]));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0.0;
      for (int q = 0; q < n; ++q)
        if (w[q] > 1e-12 * wmax) s += V[i * n + q] * V[j * n + q] / w[q];
      out[i * n + j] = s;
    }
}

// Inverse and determinant of an n x n matrix (n <= 3) by Gauss-Jordan with partial pivoting.
double invert(int n, const double* A, double* inv) {
  double a[9], b[9];
  std::copy(A, A + n * n, a);
  for (int i = 0; i < n * n; ++i) b[i] = 0.0;
  for (int i = 0; i < n; ++i) b[i * n + i] = 1.0;
  double det = 1.0;
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[p * n + c])) p = r;
    if (a[p * n + c] == 0.0) throw std::domain_error("target expectation: singular reweighting matrix");
    if (p != c) {
      for (int j = 0; j < n; ++j) {
        std::swap(a[p * n + j], a[c * n + j]);
        std::swap(b[p * n + j], b[c * n + j]);
      }
      det = -det;
    }
    const double piv = a[c * n + c];
    det *= piv;
    for (int j = 0; j < n; ++j) {
      a[c * n + j] /= piv;
      b[c * n + j] /= piv;
    }
    for (int r = 0; r < n; ++r)
      if (r != c) {
        const double f = a[r * n + c];
        if (f == 0.0) continue;
        for (int j = 0; j < n; ++j) {
          a[r * n + j] -= f * a[c * n + j];
          b[r * n + j] -= f * b[c * n + j];
        }
      }
  }
  std::copy(b, b + n * n, inv);
  return det;
}

// The student fields in coordinates u ~ N(0, I_r): l_S = L u, the Cholesky factor of Q_S in the fields' order; a
// field whose variance given the earlier ones is below 1e-15 of its own (round-off of the Schur complement: an
// exact combination) gets no column (rank r < n). A larger remainder keeps its column however small: the target's
// correlation with it, Cov(z, u_c), stays of order one (nearly parallel students differ at first order in M). L is
// n x r (row stride 3); piv[c] is the field of column c (L's rows piv[0..r) are lower triangular). Nearly parallel
// fields give a small pivot, but every entry stays bounded by its field's standard deviation (|L_sc| <= sqrt(Q_ss)).
struct Basis {
  int n = 0, r = 0;
  double L[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
  int piv[3] = {0, 0, 0};
};

Basis cholesky_basis(int n, const double* Qs) {
  Basis b;
  b.n = n;
  for (int j = 0; j < n; ++j) {
    double d = Qs[j * n + j];
    for (int q = 0; q < b.r; ++q) d -= b.L[j * 3 + q] * b.L[j * 3 + q];
    if (!(d > 1e-15 * Qs[j * n + j])) continue;
    const int c = b.r;
    const double piv = std::sqrt(d);
    b.L[j * 3 + c] = piv;
    for (int i = j + 1; i < n; ++i) {
      double v = Qs[i * n + j];
      for (int q = 0; q < c; ++q) v -= b.L[i * 3 + q] * b.L[j * 3 + q];
      b.L[i * 3 + c] = v / piv;
    }
    b.piv[b.r++] = j;
  }
  return b;
}

// E[He_alpha(z) | y] as polynomials in r variables y, for z | y ~ N(A y, I - G): the multivariate Hermite
// polynomials of covariance G at mu = A y (A k x r, G k x k).
class ConditionalHermite {
 public:
  ConditionalHermite(int r, std::vector<double> A, std::vector<double> G, int k, int D)
      : n_(r), k_(k), D_(D), A_(std::move(A)), G_(std::move(G)) {}

  // y = l_S: A = M_S^T Q_S^+, G = A M_S (= A Q_S A^T). Badly conditioned for nearly parallel fields (A is of the
  // order of M / (1 - rho^2) and its polynomial cancels against the moments): one field only (target_unit_jet).
  static ConditionalHermite in_fields(int n, const double* Qs, const double* Ms, int k, int D) {
    double Qp[9];
    psd_pinv(n, Qs, Qp);
    std::vector<double> A(static_cast<std::size_t>(k) * n, 0.0), G(static_cast<std::size_t>(k) * k, 0.0);
    for (int r = 0; r < k; ++r)
      for (int s = 0; s < n; ++s) {
        double v = 0.0;
        for (int q = 0; q < n; ++q) v += Ms[q * k + r] * Qp[q * n + s];
        A[r * n + s] = v;
      }
    for (int r = 0; r < k; ++r)
      for (int t = 0; t < k; ++t) {
        double v = 0.0;
        for (int q = 0; q < n; ++q) v += A[r * n + q] * Ms[q * k + t];
        G[r * k + t] = v;
      }
    return ConditionalHermite(n, std::move(A), std::move(G), k, D);
  }

  // y = u of the Cholesky basis: A = Cov(z, u) (forward substitution through L's pivot rows: entries bounded by
  // the correlations, however close to parallel the fields), G = A A^T.
  static ConditionalHermite in_basis(const Basis& b, const double* Ms, int k, int D) {
    const int r = b.r;
    std::vector<double> A(static_cast<std::size_t>(k) * r, 0.0), G(static_cast<std::size_t>(k) * k, 0.0);
    for (int t = 0; t < k; ++t)
      for (int c = 0; c < r; ++c) {
        const int j = b.piv[c];
        double v = Ms[j * k + t];
        for (int q = 0; q < c; ++q) v -= b.L[j * 3 + q] * A[t * r + q];
        A[t * r + c] = v / b.L[j * 3 + c];
      }
    for (int t = 0; t < k; ++t)
      for (int q = 0; q < k; ++q) {
        double v = 0.0;
        for (int c = 0; c < r; ++c) v += A[t * r + c] * A[q * r + c];
        G[t * k + q] = v;
      }
    return ConditionalHermite(r, std::move(A), std::move(G), k, D);
  }

  const LPoly& get(const std::vector<int>& alpha) {
    auto it = memo_.find(alpha);
    if (it != memo_.end()) return it->second;
    LPoly h(n_, D_);
    int r = -1;
    for (int q = 0; q < k_; ++q)
      if (alpha[q] > 0) {
        r = q;
        break;
      }
    if (r < 0) {
      h.c[0] = 1.0;
    } else {
      std::vector<int> beta = alpha;
      --beta[r];
      const LPoly& hb = get(beta);  // std::map: references stay valid through later insertions
      // mu_r H_beta
      int e[3] = {0, 0, 0};
      for (std::size_t id = 0; id < hb.c.size(); ++id) {
        if (hb.c[id] == 0.0) continue;
        std::size_t rem = id;
        for (int q = 0; q < n_; ++q) {
          e[q] = static_cast<int>(rem % (D_ + 1));
          rem /= (D_ + 1);
        }
        for (int s = 0; s < n_; ++s) {
          const double as = A_[r * n_ + s];
          if (as == 0.0) continue;
          ++e[s];
          h.c[h.idx(e)] += as * hb.c[id];
          --e[s];
        }
      }
      for (int q = 0; q < k_; ++q) {
        if (beta[q] == 0 || G_[r * k_ + q] == 0.0) continue;
        const double f = G_[r * k_ + q] * beta[q];
        --beta[q];  // beta - e_q (get copies the key it stores)
        const LPoly& hg = get(beta);
        ++beta[q];
        for (std::size_t id = 0; id < hg.c.size(); ++id) h.c[id] -= f * hg.c[id];
      }
    }
    return memo_.emplace(alpha, std::move(h)).first->second;
  }

 private:
  int n_, k_, D_;
  std::vector<double> A_, G_;
  std::map<std::vector<int>, LPoly> memo_;
};

// A field factor split into its law part (what shapes the Gaussian law: indicators, deltas, the erf reweighting and
// auxiliary) and what only multiplies: a power of l and a constant (relu sigma = l 1(l > 0), sigma' = 1(l > 0);
// linear and quadratic are polynomials). Patterns with equal law parts share their moments (FieldTuple).
struct FactorSplit {
  FieldFactor law;
  int power;
  double c;
};

// How the moments E[prod_s F_s(mu_s + l_s) l^beta] are taken: the five classic activations at zero means in closed
// form (Closed); relu and step with means exactly too, as orthant moments with means (Kinked); every other smooth
// activation, and linear, quadratic, erf with means, by the certified quadrature of SmoothMoments (Quadrature).
enum class MomentPath { Closed, Kinked, Quadrature };

bool any_nonzero(const double* mu, int n) {
  if (!mu) return false;
  for (int s = 0; s < n; ++s)
    if (mu[s] != 0.0) return true;
  return false;
}

MomentPath moment_path(Activation act, const double* mu, int n) {
  if (!is_classic(act)) return MomentPath::Quadrature;
  if (!any_nonzero(mu, n)) return MomentPath::Closed;
  return smooth::is_smooth(act) ? MomentPath::Quadrature : MomentPath::Kinked;
}

// E[prod_s F_s(mu_s + l_s) y^beta], l ~ N(0, Q_S), for every beta in [0, B]^ny at once, F_s = sigma'^n_deriv
// sigma^n_sigma of a smooth activation, y the Cholesky coordinates u (ny = r; l = L u, Basis) or, for one field, the
// field itself (ny = 1, l = L_00 u): the tensor trapezoidal rule in u on the ball |u| <= 12 (gaussian_smooth.hpp's
// step for the activations' strips of analyticity, the rule at 2h its even-node subset) accepted when every moment
// satisfies
// (|I_h - I_2h| / S)^2 <= 1e-13 with S the rule on |integrand|, the steps times kRetry otherwise. The truncation at 12
// keeps the monomials' Gaussian tails below 1e-16 relative up to total degree ~20. The monomials of u factorise over
// the coordinates, so the rule is contracted one coordinate at a time: the factor along each line of the last
// coordinate (the fields constant along it evaluated once per line, the others in one batched pass), contracted with
// the weights times u^b, then each outer coordinate the same way: ~(2N)^r (B + 1) operations for all the moments
// instead of (2N)^r (B + 1)^r.
//
// Several factor patterns on the same fields (a tuple's patterns: sigma' sigma' sigma on each of a triple's pairs)
// are taken in one pass when they start from the same step (the same count of factors per field) and depend on the
// same fields: the activation's values along a line, the costliest part, are computed once for all of them, and each
// pattern's table is the one it gets alone (the same steps, nodes and sums; each pattern accepted at its own first
// certified step, the others go on to the next).
class SmoothMoments {
 public:
  SmoothMoments(Activation act, const Basis& basis, const FieldFactor* fac, const double* mu, int B, bool u_powers)
      : SmoothMoments(std::move(batch(act, basis, &fac, 1, mu, B, u_powers)[0])) {}

  // The tables of np patterns (facs[p]: one factor per field of the basis), in order.
  static std::vector<SmoothMoments> batch(Activation act, const Basis& basis, const FieldFactor* const* facs, int np,
                                          const double* mu, int B, bool u_powers) {
    if (!u_powers && basis.n != 1)
      throw std::logic_error("target expectation: the smooth moments in the fields take one field");
    std::vector<SmoothMoments> out(static_cast<std::size_t>(np), SmoothMoments(u_powers ? basis.r : basis.n, B));
    std::vector<bool> done(static_cast<std::size_t>(np), false);
    for (int p = 0; p < np; ++p) {  // the patterns that share p's first step and fields, with p
      if (done[p]) continue;
      std::vector<int> group;
      for (int q = p; q < np; ++q)
        if (!done[q] && same_lattice(basis.n, facs[p], facs[q])) group.push_back(q), done[q] = true;
      std::vector<const FieldFactor*> gf;
      for (int q : group) gf.push_back(facs[q]);
      Rule rule(act, basis, gf.data(), static_cast<int>(gf.size()), mu, B);
      for (std::size_t g = 0; g < group.size(); ++g) {
        SmoothMoments& sm = out[static_cast<std::size_t>(group[g])];
        sm.table_ = std::move(rule.tables[g]);
        if (!u_powers) {  // one field: l^b = L_00^b u^b (r = 0: l = 0, only b = 0 survives)
          sm.table_.resize(B + 1, 0.0);
          double f = 1.0;
          for (int b = 0; b <= B; ++b, f *= basis.L[0])
            sm.table_[b] = basis.r == 0 ? (b == 0 ? sm.table_[0] : 0.0) : f * sm.table_[b];
        }
      }
    }
    return out;
  }

  double operator()(const int* beta) const {
    std::size_t id = 0;
    for (int q = n_ - 1; q >= 0; --q) {
      if (beta[q] > B_) throw std::logic_error("target expectation: moment above the quadrature table");
      id = id * (B_ + 1) + beta[q];
    }
    return table_[id];
  }

 private:
  SmoothMoments(int n, int B) : n_(n), B_(B) {}
  int n_, B_;
  std::vector<double> table_;

  static bool has_factor(const FieldFactor& f) { return f.n_deriv || f.n_sigma; }

  // Whether the patterns a and b run on one lattice: the same first step (factors per field) and the same fields.
  static bool same_lattice(int n, const FieldFactor* a, const FieldFactor* b) {
    for (int s = 0; s < n; ++s)
      if (std::max(1, a[s].n_deriv + a[s].n_sigma) != std::max(1, b[s].n_deriv + b[s].n_sigma) ||
          has_factor(a[s]) != has_factor(b[s]))
        return false;
    return true;
  }

  // The rule of one lattice: the tables of its patterns (moments in u, (B + 1)^r each).
  class Rule {
   public:
    std::vector<std::vector<double>> tables;

    Rule(Activation act, const Basis& basis, const FieldFactor* const* facs, int np, const double* mu, int B)
        : B_(B), act_(act), n_fields_(basis.n), r_(basis.r), facs_(facs, facs + np) {
      if (np < 1 || np > kMaxLive) throw std::logic_error("target expectation: 1 to 16 patterns per lattice");
      const int n = basis.n, r = basis.r;
      for (int s = 0; s < n; ++s) {
        mu_[s] = mu ? mu[s] : 0.0;
        for (int c = 0; c < 3; ++c) L_[s * 3 + c] = basis.L[s * 3 + c];
      }
      const FieldFactor* first = facs[0];  // (every pattern of the lattice: the same counts)
      // the first step: each field counted once per factor (sigma'^2 sigma: three times)
      Activation acts[16];
      double h = 1e300;
      for (int c = 0; c < r; ++c) {
        double slopes[16];
        int m = 0;
        for (int s = 0; s < n; ++s)
          for (int q = 0; q < std::max(1, first[s].n_deriv + first[s].n_sigma) && m < 16; ++q) {
            acts[m] = act;
            slopes[m++] = L_[s * 3 + c];
          }
        h = std::min(h, smooth::trapezoid_step(acts, slopes, m, kFirstExp));
      }
      const int nb1 = B + 1;
      std::size_t nb = 1;
      for (int c = 0; c < r; ++c) nb *= nb1;
      tables.resize(static_cast<std::size_t>(np));
      for (int p = 0; p < np; ++p) live_.push_back(p);
      for (;;) {
        const int N = r == 0 ? 0 : static_cast<int>(std::ceil(kT / h / 2.0)) * 2;  // even: the 2h rule is a subset
        if (N > 4096) throw std::domain_error("target expectation: the quadrature did not converge");
        // the three rules' weights times the powers, per coordinate: row b of P[k] = w_m t_m^b (k = 0, the rule at
        // h), 2 w_m t_m^b on even m (k = 1, the rule at 2h), w_m |t_m|^b (k = 2, the rule on |integrand|)
        nodes_ = 2 * N + 1;
        h_ = h;
        t_.resize(nodes_);
        for (auto& P : P_) P.assign(static_cast<std::size_t>(nb1) * nodes_, 0.0);
        for (int m = 0; m < nodes_; ++m) {
          const double t = (m - N) * h, w = h * std::exp(-0.5 * t * t) / std::sqrt(2.0 * kPi);
          t_[m] = t;
          double p = w, pa = w;
          for (int b = 0; b <= B; ++b) {
            P_[0][b * nodes_ + m] = p;
            P_[1][b * nodes_ + m] = (m - N) % 2 == 0 ? 2.0 * p : 0.0;
            P_[2][b * nodes_ + m] = pa;
            p *= t;
            pa *= std::fabs(t);
          }
        }
        const int nl = static_cast<int>(live_.size());
        // the line: the fields' arguments and sigma, sigma' (per field), then each pattern's factor
        line_.resize((1 + 2 * static_cast<std::size_t>(n_fields_) + nl) * nodes_);
        for (int e = 0; e < r; ++e) {
          std::size_t inner = 1;
          for (int c = e + 1; c < r; ++c) inner *= nb1;
          sub_[e].resize(3 * inner * nl);
        }
        std::vector<double> out(3 * nb * nl);
        double arg[3] = {mu_[0], mu_[1], mu_[2]};
        double Fc[kMaxLive];
        std::fill(Fc, Fc + nl, kUnknown);
        contract(0, arg, 0.0, Fc, out.data());
        std::vector<int> left;
        for (int q = 0; q < nl; ++q) {
          const double* Ih = out.data() + 3 * nb * q;
          const double* I2h = Ih + nb;
          const double* S = I2h + nb;
          bool ok = true;
          for (std::size_t id = 0; id < nb; ++id) {
            const double e = Ih[id] - I2h[id];
            if (e * e > smooth::kAcceptSq * S[id] * S[id]) ok = false;
          }
          if (ok || r == 0)
            tables[static_cast<std::size_t>(live_[q])].assign(Ih, Ih + nb);
          else
            left.push_back(live_[q]);
        }
        if (left.empty()) return;
        live_ = left;
        h *= smooth::kRetry;
      }
    }

   private:
    static constexpr int kMaxLive = 16;  // patterns of one lattice at most (a tuple has at most 9)
    int B_;
    Activation act_;
    int n_fields_, r_;
    std::vector<const FieldFactor*> facs_;
    std::vector<int> live_;  // the patterns not yet accepted
    double mu_[3] = {0, 0, 0}, L_[9] = {0, 0, 0, 0, 0, 0, 0, 0, 0};
    static constexpr double kT = 12.0;
    // The first step's 2h rule errs by ~e^-22: at the kernels' e^-18 the certificate refused the first step of almost
    // every table (the monomials up to degree 12 weigh the poles more); measured on the staircase's online RHS at
    // K = 3 with biases (ms, e^-18 -> e^-22): tanh 113 -> 62, softplus 30 -> 16, gelu 57 -> 25, sigmoid 24 -> 14,
    // silu 24 -> 15, sin 17 -> 22 (e^-20, e^-21 and e^-24 in between or above).
    static constexpr double kFirstExp = 22.0;
    static constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
    int nodes_ = 1;
    double h_ = 1.0;
    std::vector<double> t_, P_[3], line_, sub_[3];  // sub_[e]: the rules over the coordinates after e

    const FieldFactor& fac(int q, int s) const { return facs_[static_cast<std::size_t>(live_[q])][s]; }
    double factor_of(const FieldFactor& f, double x) const { return SmoothMoments::factor_of(f, x, act_); }

    // The product of pattern q's factors at the arguments x (one per field).
    double factor_at(int q, const double* x) const {
      double F = 1.0;
      for (int s = 0; s < n_fields_; ++s)
        if (has_factor(fac(q, s))) F *= factor_of(fac(q, s), x[s]);
      return F;
    }

    // out[(q * 3 + k) * nb + id] (q: the live patterns, k: the rules at h, 2h and on |.|;
    // id = sum_{c >= e} b_c (B + 1)^(c - e)): the rules over the coordinates e..r-1 on the ball |u| <= 12, the
    // earlier ones fixed (the fields' arguments arg, r2 = their sum of squares; Fc[q]: the factor when no factor
    // depends on them, or kUnknown). Where no factor depends on these coordinates the factor is taken once and the
    // rules sum the weights times the powers alone (the patterns of a lattice depend on the same fields).
    void contract(int e, const double* arg, double r2, const double* Fc_in, double* out) {
      const int nb1 = B_ + 1, M = nodes_, N = (M - 1) / 2, nl = static_cast<int>(live_.size());
      std::size_t nb = 1;
      for (int c = e; c < r_; ++c) nb *= nb1;
      const double room = kT * kT - r2;
      const int jm = room > 0.0 ? std::min(N, static_cast<int>(std::floor(std::sqrt(room) / h_))) : 0;
      const int m0 = N - jm, m1 = N + jm + 1;  // the nodes of this coordinate inside the ball
      bool varies = false;  // a factor depends on the coordinates e..r-1
      for (int s = 0; s < n_fields_; ++s)
        for (int c = e; c < r_; ++c) varies = varies || (has_factor(fac(0, s)) && L_[s * 3 + c] != 0.0);
      double Fc[kMaxLive];
      std::copy(Fc_in, Fc_in + nl, Fc);
      if (!varies) {
        for (int q = 0; q < nl; ++q) {
          const double F = Fc[q] = std::isnan(Fc[q]) ? factor_at(q, arg) : Fc[q];
          double* o = out + 3 * nb * q;
          if (e == r_) {
            o[0] = o[1] = F;
            o[2] = std::fabs(F);
          } else if (e == r_ - 1) {
            for (int k = 0; k < 3; ++k)
              for (int b = 0; b < nb1; ++b) {
                const double* p = P_[k].data() + static_cast<std::size_t>(b) * M;
                double sum = 0.0;
                for (int m = m0; m < m1; ++m) sum += p[m];
                o[k * nb + b] = (k < 2 ? F : std::fabs(F)) * sum;
              }
          }
        }
        if (e >= r_ - 1) return;
      }
      if (e == r_ - 1) {  // the line of the last coordinate: the factors at every node, then the three contractions
        const int len = m1 - m0;
        double* xs = line_.data();
        double* v = xs + M;  // sigma, sigma' of field s at v + 2 s M, v + (2 s + 1) M
        double* F = v + 2 * static_cast<std::size_t>(n_fields_) * M;  // pattern q's at F + q M
        for (int s = 0; s < n_fields_; ++s) {  // the fields that move along the line, once for every pattern
          if (!has_factor(fac(0, s)) || L_[s * 3 + e] == 0.0) continue;
          const double slope = L_[s * 3 + e];
          for (int m = 0; m < len; ++m) xs[m] = arg[s] + slope * t_[m0 + m];
          double* const o[2] = {v + 2 * s * M, v + (2 * s + 1) * M};
          sigma_derivatives_at(act_, xs, len, 1, o);
        }
        for (int q = 0; q < nl; ++q) {
          double* Fq = F + static_cast<std::size_t>(q) * M;
          for (int m = 0; m < len; ++m) Fq[m] = 1.0;
          for (int s = 0; s < n_fields_; ++s) {
            const FieldFactor& f = fac(q, s);
            if (!has_factor(f)) continue;
            if (L_[s * 3 + e] == 0.0) {
              const double c = factor_of(f, arg[s]);
              for (int m = 0; m < len; ++m) Fq[m] *= c;
              continue;
            }
            const double *vs = v + 2 * s * M, *ds = vs + M;
            for (int m = 0; m < len; ++m) Fq[m] *= power_product(f, vs[m], ds[m]);
          }
          double* o = out + 3 * nb * q;
          for (int k = 0; k < 3; ++k)
            for (int b = 0; b < nb1; ++b) {
              const double* p = P_[k].data() + static_cast<std::size_t>(b) * M + m0;
              double sum = 0.0;
              if (k < 2) {
#ifdef TWOLAYER_OPENMP
#pragma omp simd reduction(+ : sum)
#endif
                for (int m = 0; m < len; ++m) sum += p[m] * Fq[m];
              } else {
#ifdef TWOLAYER_OPENMP
#pragma omp simd reduction(+ : sum)
#endif
                for (int m = 0; m < len; ++m) sum += p[m] * std::fabs(Fq[m]);
              }
              o[k * nb + b] = sum;
            }
        }
        return;
      }
      const std::size_t inner = nb / nb1;
      double* sub = sub_[e].data();  // (sized by the constructor: 3 inner per live pattern)
      std::fill(out, out + 3 * nb * nl, 0.0);
      for (int m = m0; m < m1; ++m) {
        double a2[3];
        for (int s = 0; s < n_fields_; ++s) a2[s] = arg[s] + L_[s * 3 + e] * t_[m];
        contract(e + 1, a2, r2 + t_[m] * t_[m], Fc, sub);
        for (int q = 0; q < nl; ++q)
          for (int k = 0; k < 3; ++k)
            for (std::size_t id = 0; id < inner; ++id) {
              const double x = sub[(q * 3 + k) * inner + id];
              double* o = out + (q * 3 + k) * nb + id * nb1;
              for (int b = 0; b < nb1; ++b) o[b] += P_[k][static_cast<std::size_t>(b) * M + m] * x;
            }
      }
    }
  };

  // sigma'^n_deriv sigma^n_sigma of a factor f from sigma and sigma'.
  static double power_product(const FieldFactor& f, double sigma, double dsigma) {
    double c = 1.0;
    for (int q = 0; q < f.n_deriv; ++q) c *= dsigma;
    for (int q = 0; q < f.n_sigma; ++q) c *= sigma;
    return c;
  }

  // The factor f at x.
  static double factor_of(const FieldFactor& f, double x, Activation act) {
    double d[2];
    sigma_derivatives(act, x, 1, d);
    return power_product(f, d[0], d[1]);
  }
};

// The law part of one field factor on a path: on the quadrature path the whole activation factor; with means
// (Kinked) the relu factor is 1(x > 0) x^n_sigma in x = mu + l (law {1, n_sigma, 0}), which is not a power of the
// centred l; at zero means (Closed) relu sigma = l 1(l > 0) moves its l into the power.
FactorSplit split_factor(Activation act, const FieldFactor& f, MomentPath path) {
  if (f.n_sigma > 1 || f.n_deriv < 0 || f.n_sigma < 0 || f.power < 0)
    throw std::invalid_argument("target expectation: unsupported field factor");
  if (path == MomentPath::Quadrature) return {{f.n_deriv, f.n_sigma, 0}, f.power, 1.0};
  switch (act) {
    case Activation::Linear: return {{0, 0, 0}, f.power + f.n_sigma, 1.0};
    case Activation::Quadratic: return {{0, 0, 0}, f.power + f.n_deriv + 2 * f.n_sigma, std::pow(2.0, f.n_deriv)};
    case Activation::Relu:
      if (path == MomentPath::Kinked) return {{f.n_deriv + f.n_sigma > 0 ? 1 : 0, f.n_sigma, 0}, f.power, 1.0};
      return {{f.n_deriv + f.n_sigma > 0 ? 1 : 0, 0, 0}, f.power + f.n_sigma, 1.0};
    default: break;
  }
  return {{f.n_deriv, f.n_sigma, 0}, f.power, 1.0};
}

// E[prod_s F_s(mu_s + l_s) y^beta] for every beta, y the fields l (the factors' powers added to beta) or, given a
// Basis, its coordinates u (l = L u; the factors must then be law parts, without powers): the factors turned into a
// constant, a reweighted covariance, deltas, indicators and erf auxiliaries (see target.hpp). The u are extra
// variables of the orthant moments: Cov(l, u) = L, Cov(u) = I, after the erf reweighting (u's law times
// exp(-u^T L^T D L u / 2)) Cov(u) = S = (I + L^T D L)^-1 and Cov(l, u) = L S, and the deltas condition all of them.
// Relu and step with means (Kinked): the variables are x = mu + l (means mu, rows L) and the centred u, relu
// sigma = x 1(x > 0) a power of x; the deltas shift every mean (the u's too) and a step unit's delta carries the
// density N(0; m_s, C_ss). The centred powers stay polynomials in the centred u (no binomial expansion around a
// large mean), so these moments are always taken in a basis; in the fields (no basis) one field, l = L_00 u.
class FactorMoments {
 public:
  // mu: n means, or null for zero; B (the largest exponent asked for, with the field powers) serves the quadrature
  // path; basis: the moments in its u, or null for the fields.
  FactorMoments(Activation act, int n, const double* Qs, const FieldFactor* fac, const double* mu = nullptr,
                int B = 0, const Basis* basis = nullptr)
      : n_(n) {
    const MomentPath path = moment_path(act, mu, n);
    if (path == MomentPath::Quadrature) {
      smooth_ = std::make_unique<SmoothMoments>(act, basis ? *basis : cholesky_basis(n, Qs), fac, mu, B, basis);
      return;
    }
    const bool kinked = path == MomentPath::Kinked;
    if (kinked && !basis) {
      if (n != 1) throw std::logic_error("target expectation: the kinked moments in the fields take one field");
      own_ = cholesky_basis(n, Qs);
      basis = &own_;
      scaled_ = true;
    }
    const int r = basis ? basis->r : 0, nx = n + r;
    nu_ = r;
    ub_ = basis != nullptr;
    std::array<double, 9> C{};
    std::copy(Qs, Qs + n * n, C.begin());
    // the (fields, u) as rows of a factor, (fields, u) = X v with v ~ N(0, I_r): fields L, u the identity
    std::array<double, kMaxVars * kMaxCols> X{};
    for (int c = 0; c < r; ++c) {
      X[(n + c) * kMaxCols + c] = 1.0;
      for (int s = 0; s < n; ++s) X[s * kMaxCols + c] = basis->L[s * 3 + c];
    }
    double ref[kMaxVars];
    for (int s = 0; s < n; ++s) ref[s] = C[s * n + s];
    double scale = 0.0;
    for (int s = 0; s < n; ++s) scale = std::max(scale, std::fabs(C[s * n + s]));
    scale = std::max(scale, 1e-300);
    double Dw[3] = {0, 0, 0};
    bool reweight = false;
    unsigned ind = 0;
    std::vector<int> deltas, erfs;
    for (int s = 0; s < n; ++s) {
      const FactorSplit sp = split_factor(act, fac[s], path);
      const FieldFactor& f = sp.law;
      pw_[s] = sp.power;
      if (basis && sp.power != 0) throw std::logic_error("target expectation: a field power with a basis");
      c0_ *= sp.c;
      switch (act) {
        case Activation::Linear:
        case Activation::Quadratic: break;
        case Activation::Relu:
          if (f.n_deriv) ind |= 1u << s;
          xpw_[s] = f.n_sigma;  // with means: relu sigma(x) = x 1(x > 0) (law n_sigma 0 at zero means)
          break;
        case Activation::Step:
          if (f.n_deriv > 1) throw std::invalid_argument("target expectation: step units have delta derivatives");
          if (f.n_deriv == 1 && f.n_sigma == 1)
            throw std::invalid_argument("target expectation: delta(l) 1(l > 0) is undefined");
          if (f.n_sigma) ind |= 1u << s;
          if (f.n_deriv) deltas.push_back(s);
          break;
        case Activation::Erf:
          if (f.n_deriv) {
            c0_ *= std::pow(2.0 / kPi, 0.5 * f.n_deriv);
            Dw[s] = f.n_deriv;
            reweight = true;
          }
          if (f.n_sigma) erfs.push_back(s);
          break;
        default: break;  // rejected by split_factor
      }
    }
    if (reweight) {  // C' = (I + C D)^-1 C, factor det(I + C D)^-1/2
      double B[9], Bi[9];
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) B[i * n + j] = (i == j ? 1.0 : 0.0) + C[i * n + j] * Dw[j];
      const double det = invert(n, B, Bi);
      c0_ /= std::sqrt(det);
      std::array<double, 9> Cn{};
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          double v = 0.0;
          for (int q = 0; q < n; ++q) v += Bi[i * n + q] * C[q * n + j];
          Cn[i * n + j] = v;
        }
      for (int i = 0; i < n; ++i)
        for (int j = i + 1; j < n; ++j) Cn[i * n + j] = Cn[j * n + i] = 0.5 * (Cn[i * n + j] + Cn[j * n + i]);
      C = Cn;
      if (r > 0) {  // u ~ N(0, S), S = (I + L^T D L)^-1 = Ls Ls^T: rows u = Ls, l = L Ls
        double R[9], S[9];
        for (int a = 0; a < r; ++a)
          for (int b = 0; b < r; ++b) {
            double v = a == b ? 1.0 : 0.0;
            for (int s = 0; s < n; ++s) v += basis->L[s * 3 + a] * Dw[s] * basis->L[s * 3 + b];
            R[a * r + b] = v;
          }
        invert(r, R, S);
        for (int a = 0; a < r; ++a)
          for (int b = a + 1; b < r; ++b) S[a * r + b] = S[b * r + a] = 0.5 * (S[a * r + b] + S[b * r + a]);
        const Basis sb = cholesky_basis(r, S);  // S is positive definite: full rank, in order
        for (int a = 0; a < r; ++a)
          for (int c = 0; c < r; ++c) X[(n + a) * kMaxCols + c] = sb.L[a * 3 + c];
        for (int s = 0; s < n; ++s)
          for (int c = 0; c < r; ++c) {
            double v = 0.0;
            for (int a = 0; a < r; ++a) v += basis->L[s * 3 + a] * sb.L[a * 3 + c];
            X[s * kMaxCols + c] = v;
          }
      }
    }
    // the means of the rows (fields x = mu + l, then u): with means their law after the deltas
    std::array<double, kMaxVars> m{};
    if (kinked) std::copy(mu, mu + n, m.begin());
    for (int s : deltas) {  // E[delta(x_s) g] = N(0; m_s, C_ss) E[g | x_s = 0]
      double css = C[s * n + s];
      if (r > 0) {  // from the row: accurate where an earlier delta left a small conditional variance
        css = 0.0;
        for (int c = 0; c < r; ++c) css += X[s * kMaxCols + c] * X[s * kMaxCols + c];
      }
      if (!(css > 1e-13 * scale))
        throw std::domain_error("target expectation: a step unit's field has zero variance (delta undefined)");
      const double ms = m[s];
      c0_ /= std::sqrt(2.0 * kPi * css);
      if (ms != 0.0) c0_ *= std::exp(-0.5 * ms * ms / css);
      std::array<double, 9> Cc{};
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) Cc[i * n + j] = C[i * n + j] - C[i * n + s] * C[s * n + j] / css;
      for (int i = 0; i < n; ++i) Cc[i * n + s] = Cc[s * n + i] = 0.0;
      for (int i = 0; i < nx && r > 0; ++i) {  // the rows projected orthogonally to row s, the means shifted
        if (i == s) continue;
        double xs = 0.0;
        for (int c = 0; c < r; ++c) xs += X[i * kMaxCols + c] * X[s * kMaxCols + c];
        for (int c = 0; c < r; ++c) X[i * kMaxCols + c] -= xs / css * X[s * kMaxCols + c];
        m[i] -= xs / css * ms;
      }
      for (int c = 0; c < r; ++c) X[s * kMaxCols + c] = 0.0;
      m[s] = 0.0;  // x_s = 0 exactly
      C = Cc;
      zeroed_ |= 1u << s;
    }
    if (erfs.size() > 1) throw std::invalid_argument("target expectation: at most one erf sigma factor");
    // The orthant variables as rows of a factor (R columns): fields, then u = l_e - xi for the erf sigma (xi its own
    // column), then the basis coordinates; in the fields (no basis) the factor of C.
    const int ne = static_cast<int>(erfs.size());
    int R = r;
    if (!basis) {
      const Basis cb = cholesky_basis(n, C.data());
      R = cb.r;
      for (int s = 0; s < n; ++s)
        for (int c = 0; c < R; ++c) X[s * kMaxCols + c] = cb.L[s * 3 + c];
    }
    const int mv = n + ne + r;
    u0_ = n + ne;
    std::array<double, kMaxVars * kMaxCols> Fa{};
    double ma[kMaxVars] = {0, 0, 0, 0, 0, 0, 0};
    for (int i = 0; i < mv; ++i) {
      if (i >= n && i < u0_) continue;
      const int xi = i < n ? i : i - ne;
      ma[i] = m[xi];
      for (int c = 0; c < R; ++c) Fa[i * kMaxCols + c] = X[xi * kMaxCols + c];
    }
    for (int c = 0; c < r; ++c) ref[u0_ + c] = 1.0;
    const double* mean = kinked ? ma : nullptr;
    if (!erfs.empty()) {
      const int e = erfs[0];
      for (int c = 0; c < R; ++c) Fa[n * kMaxCols + c] = Fa[e * kMaxCols + c];
      Fa[n * kMaxCols + R] = 1.0;
      ref[n] = ref[e] + 1.0;
      // erf(l / sqrt2) = 2 P(u > 0 | l) - 1
      parts_.push_back({2.0, std::make_unique<Orthant>(mv, Fa.data(), R + 1, ind | (1u << n), ref, mean)});
      parts_.push_back({-1.0, std::make_unique<Orthant>(mv, Fa.data(), R + 1, ind, ref, mean)});
    } else {
      parts_.push_back({1.0, std::make_unique<Orthant>(mv, Fa.data(), R, ind, ref, mean)});
    }
  }

  // The quadrature path's moments, taken already (SmoothMoments::batch).
  FactorMoments(int n, SmoothMoments sm) : n_(n), smooth_(std::make_unique<SmoothMoments>(std::move(sm))) {}

  // c0 E[... y^beta] with the field powers added.
  double operator()(const int* beta) {
    std::array<int, kMaxVars> b{};
    if (smooth_) return (*smooth_)(beta);
    double scale = 1.0;
    if (ub_) {
      for (int s = 0; s < n_; ++s) {  // relu with means: x^xpw
        b[s] = xpw_[s];
        if ((zeroed_ >> s & 1u) && b[s] > 0) return 0.0;
      }
      if (scaled_) {  // one field in its own basis: l^j = L_00^j u^j
        if (nu_ == 0) {
          if (beta[0] > 0) return 0.0;
        } else {
          b[u0_] = beta[0];
          scale = std::pow(own_.L[0], beta[0]);
        }
      } else {
        for (int c = 0; c < nu_; ++c) b[u0_ + c] = beta[c];
      }
    } else {
      for (int s = 0; s < n_; ++s) {
        b[s] = beta[s] + pw_[s];
        if ((zeroed_ >> s & 1u) && b[s] > 0) return 0.0;
      }
    }
    double v = 0.0;
    for (auto& [w, o] : parts_) v += w * o->moment(b);
    return c0_ * scale * v;
  }

 private:
  int n_, nu_ = 0, u0_ = 0;  // the basis coordinates: nu_ of them, from augmented variable u0_
  bool ub_ = false;           // moments in the basis coordinates
  bool scaled_ = false;       // one field with means asked in the fields: its own basis own_
  Basis own_;
  double c0_ = 1.0;
  int pw_[3] = {0, 0, 0}, xpw_[3] = {0, 0, 0};
  unsigned zeroed_ = 0;
  std::vector<std::pair<double, std::unique_ptr<Orthant>>> parts_;
  std::unique_ptr<SmoothMoments> smooth_;
};

int poly_degree(const HermitePoly& p) {
  int D = 0;
  for (const auto& [alpha, c] : p) {
    int s = 0;
    for (int e : alpha) s += e;
    D = std::max(D, s);
  }
  return D;
}

// One tuple of n <= 3 student fields l_S, conditioned once: every factor pattern and every polynomial on these
// fields shares the conditional Hermite polynomials E[He_alpha(z) | u] (ConditionalHermite), and each polynomial p
// is summed to one conditional polynomial E[p(z) | u] and multiplied by the pattern's field powers before it meets
// the moments, so an expectation costs one dot product with the pattern's moments E[law factors u^beta]
// (FactorMoments, the only per-pattern work). The coordinates are the Cholesky coordinates u of the fields
// (l_S = L u, Basis) on every path: the conditioning A = Cov(z, u) has entries bounded by the correlations
// (|A| <= 1) and the field powers (L u)^p bounded coefficients, so nearly parallel (and identical: rank r < n) fields
// cost no accuracy, with biases too (the orthant moments with means take u as extra variables; in the fields
// themselves, A = M_S^T Q_S^+ grows like 1 / (1 - cos^2) and its polynomial cancels against the moments: 80 wrong at
// cos = 1 - 2e-11 before, when such states were refused).
class FieldTuple {
 public:
  // D: the largest degree of the polynomials that will be asked for; mu: the fields' means (null: zero).
  FieldTuple(Activation act, int n, const double* Qs, const double* Ms, int k, int D, const double* mu = nullptr)
      : act_(act), n_(n), D_(D), path_(moment_path(act, mu, n)), basis_(cholesky_basis(n, Qs)),
        ch_(ConditionalHermite::in_basis(basis_, Ms, k, D)) {
    std::copy(Qs, Qs + n * n, Qs_.begin());
    if (mu) std::copy(mu, mu + n, mu_.begin());
    r_ = basis_.r;
  }

  // Takes at once the moments of the patterns' laws not taken yet (patterns[j]: one factor per field): on the
  // quadrature path one lattice serves the patterns of equal steps (SmoothMoments::batch); the other paths take
  // theirs when first asked (expect).
  void prepare(const FieldFactor* const* patterns, int count) {
    if (path_ != MomentPath::Quadrature) return;
    std::map<int, std::vector<std::pair<std::uint32_t, std::array<FieldFactor, 3>>>> by_degree;  // by B
    for (int j = 0; j < count; ++j) {
      const LawOf lo = law_of(patterns[j]);
      auto& v = by_degree[D_ + std::max(1, lo.P)];
      bool seen = laws_.count(lo.key) > 0;
      for (const auto& kv : v) seen = seen || kv.first == lo.key;
      if (!seen) v.push_back({lo.key, lo.law});
    }
    for (auto& [B, v] : by_degree) {
      if (v.empty()) continue;
      std::vector<const FieldFactor*> facs;
      for (const auto& kv : v) facs.push_back(kv.second.data());
      std::vector<SmoothMoments> sm =
          SmoothMoments::batch(act_, basis_, facs.data(), static_cast<int>(facs.size()), mu_.data(), B, true);
      for (std::size_t q = 0; q < v.size(); ++q)
        laws_.emplace(v[q].first, Law{FactorMoments(n_, std::move(sm[q])), {}});
    }
  }

  // out[j] = E[prod_s F_s(l_s) ps[j](z)].
  void expect(const FieldFactor* factors, const HermitePoly* const* ps, std::size_t np, double* out) {
    // the law part of the pattern: its moments are shared with every pattern of the same law on these fields
    const LawOf lo = law_of(factors);
    const int* pw = lo.pw.data();
    const int P = lo.P;
    const double c = lo.c;
    auto it = laws_.find(lo.key);
    if (it == laws_.end())
      it = laws_.emplace(lo.key, Law{FactorMoments(act_, n_, Qs_.data(), lo.law.data(),
                                                   path_ != MomentPath::Closed ? mu_.data() : nullptr,
                                                   D_ + std::max(1, P), &basis_),
                                     {}}).first;
    Law& L = it->second;
    const int Dp = D_ + P;
    int e[3] = {0, 0, 0};
    for (std::size_t j = 0; j < np; ++j) {
      const LPoly h = with_powers(conditional(*ps[j]), pw, P);
      double s = 0.0;
      for (std::size_t id = 0; id < h.c.size(); ++id) {
        if (h.c[id] == 0.0) continue;
        std::size_t rem = id;
        std::uint32_t bkey = 0;
        for (int q = 0; q < r_; ++q) {
          e[q] = static_cast<int>(rem % (Dp + 1));
          rem /= (Dp + 1);
          bkey = bkey * 128u + static_cast<std::uint32_t>(e[q]);
        }
        auto m = L.moments.find(bkey);
        if (m == L.moments.end()) m = L.moments.emplace(bkey, L.fm(e)).first;
        s += h.c[id] * m->second;
      }
      out[j] = c * s;
    }
  }

  double expect(const FieldFactor* factors, const HermitePoly& p) {
    const HermitePoly* q = &p;
    double v;
    expect(factors, &q, 1, &v);
    return v;
  }

 private:
  Activation act_;
  int n_, D_;
  MomentPath path_;
  Basis basis_;
  ConditionalHermite ch_;
  int r_ = 0;  // the coordinates u: r_ of them
  std::array<double, 9> Qs_{};
  std::array<double, 3> mu_{};
  std::map<const HermitePoly*, LPoly> cond_poly_;
  struct Law {
    FactorMoments fm;                                  // E[law factors u^beta]
    std::unordered_map<std::uint32_t, double> moments;  // by beta
  };
  std::unordered_map<std::uint32_t, Law> laws_;

  // A pattern split into its law part (keyed: the key also counts the field powers above 1, which widen the
  // quadrature's table), the powers of the fields and the constant.
  struct LawOf {
    std::uint32_t key = 0;
    std::array<FieldFactor, 3> law{};
    std::array<int, 3> pw{};
    int P = 0;
    double c = 1.0;
  };
  LawOf law_of(const FieldFactor* factors) const {
    LawOf lo;
    for (int q = 0; q < n_; ++q) {
      const FactorSplit sp = split_factor(act_, factors[q], path_);
      lo.law[q] = sp.law;
      lo.pw[q] = sp.power;
      lo.P += sp.power;
      lo.c *= sp.c;
      if (lo.law[q].n_deriv > 15) throw std::invalid_argument("target expectation: unsupported field factor");
      lo.key = lo.key * 32u + static_cast<std::uint32_t>(lo.law[q].n_deriv * 2 + lo.law[q].n_sigma);
    }
    if (lo.P > 1) lo.key += static_cast<std::uint32_t>(lo.P) << 16;  // the table: exponents up to D + max(1, P)
    return lo;
  }

  // h times prod_s l_s^pw_s, l_s = sum_c L_sc y_c (y = l: L = I), as a polynomial of per-variable degree D + P.
  LPoly with_powers(const LPoly& h, const int* pw, int P) const {
    LPoly g(r_, D_ + P);
    int e[3] = {0, 0, 0};
    for (std::size_t id = 0; id < h.c.size(); ++id) {
      if (h.c[id] == 0.0) continue;
      std::size_t rem = id;
      for (int q = 0; q < r_; ++q) {
        e[q] = static_cast<int>(rem % (D_ + 1));
        rem /= (D_ + 1);
      }
      g.c[g.idx(e)] = h.c[id];
    }
    for (int s = 0; s < n_; ++s)
      for (int t = 0; t < pw[s]; ++t) {
        LPoly next(r_, D_ + P);
        for (std::size_t id = 0; id < g.c.size(); ++id) {
          if (g.c[id] == 0.0) continue;
          std::size_t rem = id;
          for (int q = 0; q < r_; ++q) {
            e[q] = static_cast<int>(rem % (D_ + P + 1));
            rem /= (D_ + P + 1);
          }
          for (int q = 0; q < r_; ++q) {
            const double l = basis_.L[s * 3 + q];
            if (l == 0.0) continue;
            ++e[q];
            next.c[next.idx(e)] += l * g.c[id];
            --e[q];
          }
        }
        g = std::move(next);
      }
    return g;
  }

  // E[p(z) | y] = sum_alpha c_alpha E[He_alpha(z) | y], a polynomial in y (memoised per polynomial).
  const LPoly& conditional(const HermitePoly& p) {
    auto it = cond_poly_.find(&p);
    if (it != cond_poly_.end()) return it->second;
    if (poly_degree(p) > D_) throw std::logic_error("target expectation: polynomial above the tuple's degree");
    LPoly h(r_, D_);
    for (const auto& [alpha, c] : p) {
      if (c == 0.0) continue;
      const LPoly& ha = ch_.get(alpha);
      for (std::size_t id = 0; id < ha.c.size(); ++id) h.c[id] += c * ha.c[id];
    }
    return cond_poly_.emplace(&p, std::move(h)).first->second;
  }
};

}  // namespace

void PolyTarget::validate() const {
  if (k < 1) throw std::invalid_argument("target: needs at least one direction");
  for (const auto& [alpha, c] : f) {
    if (static_cast<int>(alpha.size()) != k)
      throw std::invalid_argument("target: every exponent tuple must have k = " + std::to_string(k) + " entries");
    for (int e : alpha)
      if (e < 0 || e > 60) throw std::invalid_argument("target: exponents must lie in [0, 60]");
    if (!std::isfinite(c)) throw std::invalid_argument("target: coefficients must be finite");
  }
}

int PolyTarget::degree() const { return poly_degree(f); }

double PolyTarget::eval(const double* z) const {
  const int D = degree();
  double he[8 * 61];
  double* H = D <= 60 && k <= 8 ? he : nullptr;
  std::vector<double> heap;
  if (!H) {
    heap.resize(static_cast<std::size_t>(k) * (D + 1));
    H = heap.data();
  }
  for (int r = 0; r < k; ++r) {
    double* h = H + static_cast<std::size_t>(r) * (D + 1);
    h[0] = 1.0;
    if (D >= 1) h[1] = z[r];
    for (int n = 1; n < D; ++n) h[n + 1] = z[r] * h[n] - n * h[n - 1];
  }
  double y = 0.0;
  for (const auto& [alpha, c] : f) {
    double t = c;
    for (int r = 0; r < k; ++r) t *= H[static_cast<std::size_t>(r) * (D + 1) + alpha[r]];
    y += t;
  }
  return y;
}

double PolyTarget::second_moment() const {
  double s = 0.0;
  for (const auto& [alpha, c] : f) {
    double fa = 1.0;
    for (int e : alpha) fa *= factorial(e);
    s += c * c * fa;
  }
  return s;
}

HermitePoly hermite_product(const HermitePoly& p, const HermitePoly& q) {
  HermitePoly out;
  for (const auto& [a, ca] : p)
    for (const auto& [b, cb] : q) {
      // product over coordinates of sum_j C(m,j) C(n,j) j! He_{m+n-2j}
      std::vector<std::pair<std::vector<int>, double>> terms{{std::vector<int>(), ca * cb}};
      for (std::size_t r = 0; r < a.size(); ++r) {
        std::vector<std::pair<std::vector<int>, double>> next;
        const int m = a[r], n = b[r];
        for (const auto& [e, c] : terms)
          for (int j = 0; j <= std::min(m, n); ++j) {
            std::vector<int> e2 = e;
            e2.push_back(m + n - 2 * j);
            next.push_back({e2, c * binomial(m, j) * binomial(n, j) * factorial(j)});
          }
        terms.swap(next);
      }
      for (const auto& [e, c] : terms) out[e] += c;
    }
  return out;
}

HermitePoly hermite_times_z(const HermitePoly& p, int r) {
  HermitePoly out;
  for (const auto& [a, c] : p) {
    std::vector<int> up = a;
    ++up[r];
    out[up] += c;
    if (a[r] > 0) {
      std::vector<int> dn = a;
      --dn[r];
      out[dn] += c * a[r];
    }
  }
  return out;
}

namespace {
// The arguments of the target expectations: n fields, polynomials of degree D, the means mu (null: zero).
void check_expectation_args(int n, int D, const double* mu) {
  if (n < 1 || n > kMaxFields) throw std::invalid_argument("target expectation: 1 to 3 student fields");
  if (D > 60) throw std::invalid_argument("target expectation: degree above 60");
  for (int q = 0; mu && q < n; ++q)
    if (!std::isfinite(mu[q])) throw std::invalid_argument("target expectation: the means (biases) must be finite");
}
}  // namespace

void target_expectations(Activation act, int n, const double* Qs, const double* Ms, int k, const FieldFactor* factors,
                         const std::vector<const HermitePoly*>& ps, double* out, const double* mu) {
  int D = 0;
  for (const HermitePoly* p : ps) D = std::max(D, poly_degree(*p));
  check_expectation_args(n, D, mu);
  FieldTuple(act, n, Qs, Ms, k, D, mu).expect(factors, ps.data(), ps.size(), out);
}

double target_expectation(Activation act, int n, const double* Qs, const double* Ms, int k,
                          const FieldFactor* factors, const HermitePoly& p, const double* mu) {
  double v;
  target_expectations(act, n, Qs, Ms, k, factors, {&p}, &v, mu);
  return v;
}

void target_expectation_patterns(Activation act, int n, const double* Qs, const double* Ms, int k,
                                 const FieldFactor* patterns, int count, const HermitePoly& p, double* out,
                                 const double* mu) {
  if (count < 1 || count > 16) throw std::invalid_argument("target expectation: 1 to 16 factor patterns");
  check_expectation_args(n, poly_degree(p), mu);
  FieldTuple tuple(act, n, Qs, Ms, k, poly_degree(p), mu);
  std::vector<const FieldFactor*> ptrs;
  for (int j = 0; j < count; ++j) ptrs.push_back(patterns + static_cast<std::size_t>(j) * n);
  tuple.prepare(ptrs.data(), count);
  for (int j = 0; j < count; ++j) out[j] = tuple.expect(ptrs[static_cast<std::size_t>(j)], p);
}

namespace {
// Q_S (n x n) and M_S (n x k) of the student fields idx[0..n) from Q (K x K) and M (K x k).
void gather(const double* Q, const double* M, int K, int k, const int* idx, int n, double* Qs, double* Ms) {
  for (int s = 0; s < n; ++s) {
    for (int t = 0; t < n; ++t) Qs[s * n + t] = Q[idx[s] * K + idx[t]];
    for (int r = 0; r < k; ++r) Ms[s * k + r] = M[idx[s] * k + r];
  }
}
}  // namespace

double target_risk(const PolyTarget& t, const double* Q, const double* M, const double* a, int K, Activation act,
                   const double* b) {
  const bool biased = any_nonzero(b, K);
  double r = 0.5 * t.second_moment();
  if (!biased) {
    r += overlap_risk(Q, nullptr, nullptr, a, nullptr, K, 0, act, act);
  } else {  // 1/2 sum_ik a_i a_k E[sigma(b_i + l_i) sigma(b_k + l_k)]
    for (int i = 0; i < K; ++i)
      for (int k = 0; k < K; ++k) {
        const double C[4] = {Q[i * K + i], Q[i * K + k], Q[k * K + i], Q[k * K + k]}, mu[2] = {b[i], b[k]};
        r += 0.5 * a[i] * a[k] * i2_mean(act, act, C, mu);
      }
  }
  const FieldFactor sig{0, 1, 0};
  std::vector<double> Ms(t.k);
  for (int i = 0; i < K; ++i) {
    double Qs;
    gather(Q, M, K, t.k, &i, 1, &Qs, Ms.data());
    r -= a[i] * target_expectation(act, 1, &Qs, Ms.data(), t.k, &sig, t.f, biased ? b + i : nullptr);
  }
  return r;
}

void target_cross_grad(const PolyTarget& t, const double* Q, const double* M, const double* a, int K, Activation act,
                       double* dQ, double* dM, double* sf, const double* b, double* db) {
  const bool biased = any_nonzero(b, K);
  const int k = t.k;
  std::fill(dQ, dQ + static_cast<std::size_t>(K) * K, 0.0);
  // d/dM_ir E[sigma(l_i) f] = E[sigma'(l_i) d_r f] (Price); d/dQ_ii E[sigma(l_i) f] = E[sigma''(l_i) f] / 2
  // = (E[l_i sigma'(l_i) f] - sum_r M_ir E[sigma'(l_i) d_r f]) / (2 Q_ii) (Stein on l_i).
  std::vector<HermitePoly> df(k);
  for (const auto& [alpha, c] : t.f)
    for (int r = 0; r < k; ++r)
      if (alpha[r] > 0) {
        std::vector<int> b = alpha;
        --b[r];
        df[r][b] += c * alpha[r];
      }
  for (int r = 0; r < k; ++r)
    if (df[r].empty()) df[r][std::vector<int>(k, 0)] = 0.0;
  std::vector<const HermitePoly*> ps;
  for (auto& p : df) ps.push_back(&p);
  const FieldFactor d1{1, 0, 0}, d1l{1, 0, 1}, s0{0, 1, 0};
  std::vector<double> Ms(k), e(k);
  for (int i = 0; i < K; ++i) {
    double Qs;
    gather(Q, M, K, k, &i, 1, &Qs, Ms.data());
    const double* mu = biased ? b + i : nullptr;
    target_expectations(act, 1, &Qs, Ms.data(), k, &d1, ps, e.data(), mu);
    sf[i] = target_expectation(act, 1, &Qs, Ms.data(), k, &s0, t.f, mu);
    if (db) db[i] = -a[i] * target_expectation(act, 1, &Qs, Ms.data(), k, &d1, t.f, mu);  // d/db_i: E[s'(l_i) f]
    double corr = 0.0;
    for (int r = 0; r < k; ++r) {
      dM[i * k + r] = -a[i] * e[r];
      corr += Ms[r] * e[r];
    }
    if (act == Activation::Linear) {
      dQ[i * K + i] = 0.0;
      continue;
    }
    if (!(Qs > 0.0)) throw std::domain_error("target gradient: a student unit has zero norm");
    const double lsf = target_expectation(act, 1, &Qs, Ms.data(), k, &d1l, t.f, mu);
    dQ[i * K + i] = -a[i] * 0.5 * (lsf - corr) / Qs;
  }
}

void target_unit_jet(const PolyTarget& t, double q, const double* m, Activation act, double* out, const double* b) {
  static const double kZeroBias = 0.0;
  if (!b && !is_classic(act)) b = &kZeroBias;  // the closed forms are the classic five's; the rest by quadrature
  const int k = t.k;
  if (!(q > 0.0) || !std::isfinite(q)) throw std::domain_error("target Hessian: a student unit has zero norm");
  // f, d_r f, d_r d_t f in the Hermite basis (d He_n = n He_{n-1})
  auto derivative = [k](const HermitePoly& p, int r) {
    HermitePoly out;
    for (const auto& [alpha, c] : p)
      if (alpha[r] > 0) {
        std::vector<int> b = alpha;
        --b[r];
        out[b] += c * alpha[r];
      }
    (void)k;
    return out;
  };
  std::vector<HermitePoly> df(k), d2f(static_cast<std::size_t>(k) * k);
  for (int r = 0; r < k; ++r) df[r] = derivative(t.f, r);
  for (int r = 0; r < k; ++r)
    for (int s = 0; s < k; ++s) d2f[static_cast<std::size_t>(r) * k + s] = derivative(df[r], s);
  const int D = poly_degree(t.f);
  ConditionalHermite ch = ConditionalHermite::in_fields(1, &q, m, k, D);
  // h_P(l) = E[P(z) | l] as coefficients of l^j, j <= D + 3 (room for T^3)
  const int L = D + 4;
  auto conditional = [&](const HermitePoly& p) {
    std::vector<double> h(L, 0.0);
    for (const auto& [alpha, c] : p) {
      const LPoly& hp = ch.get(alpha);
      for (int j = 0; j <= D; ++j) h[j] += c * hp.c[j];
    }
    return h;
  };
  auto T = [&](const std::vector<double>& h) {  // l h / q - h'
    std::vector<double> g(L, 0.0);
    for (int j = 0; j + 1 < L; ++j) g[j + 1] += h[j] / q;
    for (int j = 1; j < L; ++j) g[j - 1] -= j * h[j];
    return g;
  };
  const FieldFactor s0{0, 1, 0}, d1{1, 0, 0};
  FactorMoments m0(act, 1, &q, &s0, b, L - 1), m1(act, 1, &q, &d1, b, L - 1);
  std::vector<double> mom0(L), mom1(L);
  for (int j = 0; j < L; ++j) {
    mom0[j] = j <= D ? m0(&j) : 0.0;
    mom1[j] = m1(&j);
  }
  auto dot = [L](const std::vector<double>& h, const std::vector<double>& mom) {
    double s = 0.0;
    for (int j = 0; j < L; ++j)
      if (h[j] != 0.0) s += h[j] * mom[j];
    return s;
  };
  // E[sigma^(n)(l) P(z)] for n >= 1
  auto deriv_moment = [&](const std::vector<double>& h, int n) {
    std::vector<double> g = h;
    for (int j = 1; j < n; ++j) g = T(g);
    return dot(g, mom1);
  };
  const std::vector<double> hf = conditional(t.f);
  out[0] = dot(hf, mom0);
  out[1] = 0.5 * deriv_moment(hf, 2);
  out[2 + k] = 0.25 * deriv_moment(hf, 4);
  for (int r = 0; r < k; ++r) {
    const std::vector<double> hr = conditional(df[r]);
    out[2 + r] = deriv_moment(hr, 1);
    out[3 + k + r] = 0.5 * deriv_moment(hr, 3);
    for (int s = 0; s < k; ++s)
      out[3 + 2 * k + r * k + s] = deriv_moment(conditional(d2f[static_cast<std::size_t>(r) * k + s]), 2);
  }
  if (!b) return;
  // d/db = E[sigma'(b + l) .]: Phi_b = E[sigma' f], Phi_bb = E[sigma'' f], Phi_bq = E[sigma''' f] / 2,
  // Phi_bm_r = E[sigma'' d_r f].
  const std::size_t o = 3 + 2 * static_cast<std::size_t>(k) + static_cast<std::size_t>(k) * k;
  out[o] = deriv_moment(hf, 1);
  out[o + 1] = deriv_moment(hf, 2);
  out[o + 2] = 0.5 * deriv_moment(hf, 3);
  for (int r = 0; r < k; ++r) out[o + 3 + r] = deriv_moment(conditional(df[r]), 2);
}

TargetRhs::TargetRhs(const PolyTarget& t, Activation act, int K, bool online, double lr, double lr_readout,
                     std::vector<double> bias, bool bias_in_state)
    : bias_in_state_(bias_in_state), t_(t), act_(act), K_(K), k_(t.k), online_(online), lr_(lr),
      lr_readout_(lr_readout), b_(std::move(bias)) {
  if (b_.empty() || bias_in_state_) b_.assign(static_cast<std::size_t>(K), 0.0);
  if (static_cast<int>(b_.size()) != K) throw std::invalid_argument("target: expected one bias per student unit");
  t_.validate();
  f2_ = hermite_product(t_.f, t_.f);
  for (int r = 0; r < k_; ++r) zf_.push_back(hermite_times_z(t_.f, r));
  f2mean_ = t_.second_moment();
  if (t_.f.empty()) t_.f[std::vector<int>(k_, 0)] = 0.0;
  if (f2_.empty()) f2_[std::vector<int>(k_, 0)] = 0.0;
  for (auto& p : zf_)
    if (p.empty()) p[std::vector<int>(k_, 0)] = 0.0;
}

const double* TargetRhs::bias(const double* y) const {
  const std::size_t K = static_cast<std::size_t>(K_);
  return bias_in_state_ ? y + K * K + K * static_cast<std::size_t>(k_) + K : b_.data();
}

double TargetRhs::risk_part(const double* y) const {
  const int K = K_, k = k_;
  const double* b = bias(y);
  const double* M = y + static_cast<std::size_t>(K) * K;
  const double* a = M + static_cast<std::size_t>(K) * k;
  const FieldFactor sig{0, 1, 0};
  std::vector<double> Ms(k);
  double r = 0.5 * f2mean_;
  for (int i = 0; i < K; ++i) {
    double Qs;
    gather(y, M, K, k, &i, 1, &Qs, Ms.data());
    r -= a[i] * target_expectation(act_, 1, &Qs, Ms.data(), k, &sig, t_.f, &b[i]);
  }
  return r;
}

void TargetRhs::add_bias_raw(const double* y, double* out) const {
  const int K = K_, k = k_;
  const double* b = bias(y);
  const double* M = y + static_cast<std::size_t>(K) * K;
  const FieldFactor d1{1, 0, 0};
  std::vector<double> Ms(k);
  for (int i = 0; i < K; ++i) {
    double Qs;
    gather(y, M, K, k, &i, 1, &Qs, Ms.data());
    out[i] += target_expectation(act_, 1, &Qs, Ms.data(), k, &d1, t_.f, &b[i]);
  }
}

void TargetRhs::set_bias(const std::vector<double>& bias) {
  if (static_cast<int>(bias.size()) != K_) throw std::invalid_argument("target: expected one bias per student unit");
  b_ = bias;
}

void TargetRhs::add_raw(const double* y, double* psi, double* hd, int n_threads) const {
  // One FieldTuple per unit, per pair and (for hd) per triple of student fields: each is conditioned once and
  // serves every factor pattern on it (the pair (i, k) also carries the unit terms sigma'(l_i)^2 sigma(l_k) f of
  // hd_ii and hd_kk; the triple i < j < l carries sigma'(l_i) sigma'(l_j) sigma(l_l) f for each of its 3 pairs).
  // The tuples run on n_threads threads (a triple, the costliest task, takes its three patterns in one lattice:
  // FieldTuple::prepare), each recording its terms (index into psi, then hl, and value); they are summed in the
  // tuples' order, so the result does not depend on the threads.
  const int K = K_, k = k_, n = K_ + k_;
  const double* Q = y;
  const double* M = y + static_cast<std::size_t>(K) * K;
  const double* a = M + static_cast<std::size_t>(K) * k;
  const double* b = bias(y);
  const int Df = poly_degree(t_.f);
  const int Dpair = hd ? poly_degree(f2_) : Df;
  std::vector<const HermitePoly*> zf;
  int Dunit = Dpair;  // f, f^2 (hd) and the z_r f
  for (const auto& p : zf_) {
    zf.push_back(&p);
    Dunit = std::max(Dunit, poly_degree(p));
  }
  std::vector<std::array<int, 3>> tuples;  // (i, -1, -1) units, (i, k, -1) pairs, (i, j, l) triples
  for (int i = 0; i < K; ++i) tuples.push_back({i, -1, -1});
  for (int i = 0; i < K; ++i)
    for (int kk = i + 1; kk < K; ++kk) tuples.push_back({i, kk, -1});
  for (int i = 0; hd && i < K; ++i)
    for (int j = i + 1; j < K; ++j)
      for (int l = j + 1; l < K; ++l) tuples.push_back({i, j, l});
  const int hl0 = K * n;  // terms' indices: psi below, then hl (K x K, upper triangle)
  std::vector<std::vector<std::pair<int, double>>> terms(tuples.size());
  parallel_for(
      tuples.size(), n_threads,
      [&](std::size_t t) {
        const auto& u = tuples[t];
        auto& out = terms[t];
        double Qs[9];
        std::vector<double> Ms(3 * static_cast<std::size_t>(k));
        if (u[1] < 0) {
          const int i = u[0];
          std::vector<double> e(k);
          gather(Q, M, K, k, &i, 1, Qs, Ms.data());
          FieldTuple one(act_, 1, Qs, Ms.data(), k, Dunit, &b[i]);
          const FieldFactor d1{1, 0, 0}, d1l{1, 0, 1}, d2{2, 0, 0}, d2s{2, 1, 0};
          const FieldFactor* const patterns[4] = {&d1, &d1l, &d2, &d2s};
          one.prepare(patterns, hd ? 4 : 2);
          one.expect(&d1, zf.data(), zf.size(), e.data());  // psi_{i,K+r} += E[sigma'(l_i) z_r f]
          for (int r = 0; r < k; ++r) out.emplace_back(i * n + K + r, e[r]);
          out.emplace_back(i * n + i, one.expect(&d1l, t_.f));  // psi_ii += E[sigma'(l_i) l_i f]
          if (hd)  // E[sigma'(l_i)^2 f^2] - 2 a_i E[sigma'(l_i)^2 sigma(l_i) f]  (the j != i terms: pairs below)
            out.emplace_back(hl0 + i * K + i, one.expect(&d2, f2_) - 2.0 * a[i] * one.expect(&d2s, t_.f));
        } else if (u[2] < 0) {
          const int i = u[0], kk = u[1];
          gather(Q, M, K, k, u.data(), 2, Qs, Ms.data());
          const double mu2[2] = {b[i], b[kk]};
          FieldTuple p(act_, 2, Qs, Ms.data(), k, Dpair, mu2);
          const FieldFactor fa[2] = {{1, 0, 0}, {0, 0, 1}}, fb[2] = {{0, 0, 1}, {1, 0, 0}};
          const FieldFactor dd[2] = {{1, 0, 0}, {1, 0, 0}};
          const FieldFactor di[2] = {{1, 1, 0}, {1, 0, 0}}, dk[2] = {{1, 0, 0}, {1, 1, 0}};
          const FieldFactor gi[2] = {{2, 0, 0}, {0, 1, 0}}, gk[2] = {{0, 1, 0}, {2, 0, 0}};
          const FieldFactor* const patterns[7] = {fa, fb, dd, di, dk, gi, gk};
          p.prepare(patterns, hd ? 7 : 2);
          out.emplace_back(i * n + kk, p.expect(fa, t_.f));
          out.emplace_back(kk * n + i, p.expect(fb, t_.f));
          if (hd) {
            out.emplace_back(hl0 + i * K + kk,
                             p.expect(dd, f2_) - 2.0 * a[i] * p.expect(di, t_.f) - 2.0 * a[kk] * p.expect(dk, t_.f));
            out.emplace_back(hl0 + i * K + i, -2.0 * a[kk] * p.expect(gi, t_.f));
            out.emplace_back(hl0 + kk * K + kk, -2.0 * a[i] * p.expect(gk, t_.f));
          }
        } else {
          const int i = u[0], j = u[1], l = u[2];
          gather(Q, M, K, k, u.data(), 3, Qs, Ms.data());
          const double mu3[3] = {b[i], b[j], b[l]};
          FieldTuple tr(act_, 3, Qs, Ms.data(), k, Df, mu3);
          // the pattern sigma'(l_p) sigma'(l_q) sigma(l_o) f of the pair (p, q), o the third field
          static constexpr FieldFactor kPattern[3][3] = {{{1, 0, 0}, {1, 0, 0}, {0, 1, 0}},
                                                         {{1, 0, 0}, {0, 1, 0}, {1, 0, 0}},
                                                         {{0, 1, 0}, {1, 0, 0}, {1, 0, 0}}};
          const int pair_at[3] = {i * K + j, i * K + l, j * K + l}, other[3] = {l, j, i};
          const FieldFactor* const patterns[3] = {kPattern[0], kPattern[1], kPattern[2]};
          tr.prepare(patterns, 3);
          for (int q = 0; q < 3; ++q)
            out.emplace_back(hl0 + pair_at[q], -2.0 * a[other[q]] * tr.expect(kPattern[q], t_.f));
        }
      },
      1, 1);
  std::vector<double> hl(hd ? static_cast<std::size_t>(K) * K : 0, 0.0);
  for (const auto& out : terms)
    for (const auto& [idx, v] : out) (idx < hl0 ? psi[idx] : hl[idx - hl0]) += v;
  if (hd)
    for (int i = 0; i < K; ++i) {
      hd[i * K + i] += hl[i * K + i];
      for (int kk = i + 1; kk < K; ++kk) {
        hd[i * K + kk] += hl[i * K + kk];
        hd[kk * K + i] += hl[i * K + kk];
      }
    }
}

void TargetRhs::add(const double* y, double* dQ, double* dM, double* da, double rate, int n_threads) const {
  const int K = K_, k = k_, n = K_ + k_;
  const double* Q = y;
  const double* M = y + static_cast<std::size_t>(K) * K;
  const double* a = M + static_cast<std::size_t>(K) * k;
  const double* b = bias(y);
  const double lr = lr_ * rate, lr2 = online_ ? lr * lr : 0.0, lr_readout = lr_readout_ * rate;
  std::vector<double> psi(static_cast<std::size_t>(K) * n, 0.0), hd(lr2 != 0.0 ? static_cast<std::size_t>(K) * K : 0);
  add_raw(y, psi.data(), lr2 != 0.0 ? hd.data() : nullptr, n_threads);
  for (int i = 0; i < K; ++i) {
    for (int r = 0; r < k; ++r) dM[i * k + r] += lr * a[i] * psi[i * n + K + r];
    dQ[i * K + i] += 2.0 * lr * a[i] * psi[i * n + i];
    if (lr_readout != 0.0) {
      double Qs;
      std::vector<double> Ms(k);
      gather(Q, M, K, k, &i, 1, &Qs, Ms.data());
      const FieldFactor sig{0, 1, 0};
      da[i] += lr_readout * target_expectation(act_, 1, &Qs, Ms.data(), k, &sig, t_.f, &b[i]);
    }
    if (lr2 != 0.0) dQ[i * K + i] += lr2 * a[i] * a[i] * hd[i * K + i];
  }
  for (int i = 0; i < K; ++i)
    for (int kk = i + 1; kk < K; ++kk) {
      double v = lr * (a[i] * psi[i * n + kk] + a[kk] * psi[kk * n + i]);
      if (lr2 != 0.0) v += lr2 * a[i] * a[kk] * hd[i * K + kk];
      dQ[i * K + kk] += v;
      dQ[kk * K + i] += v;
    }
}

}  // namespace twolayer
