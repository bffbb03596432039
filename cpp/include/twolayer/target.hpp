// Polynomial multi-index targets and their exact Gaussian expectations against student units.
//
// Target: y = f(z) + sqrt(Delta) xi, f(z) = sum_alpha c_alpha prod_r He_{alpha_r}(z_r) (probabilists' Hermite),
// z = W* x / sqrt(s) with k orthonormal directions, so z ~ N(0, I_k) and (l, z) is jointly Gaussian with
// Cov(l) = Q, Cov(l, z) = M (K x k), Cov(z) = I_k.
//
// Exact expectations E[prod_s F_s(l_s) p(z)] (p a Hermite polynomial, F_s products of sigma, sigma', powers of l_s
// on at most three distinct student fields), by conditioning the target fields on the student fields:
//   z | l_S ~ N(A l_S, I - G),  A = M_S^T Q_S^+,  G = A Q_S A^T,
//   E[He_alpha(z) | l_S] = H^G_alpha(A l_S)   (multivariate Hermite polynomial of covariance G:
//                          generating function exp(t . mu - t^T G t / 2); H_{alpha+e_r} = mu_r H_alpha -
//                          sum_q G_rq alpha_q H_{alpha-e_q}),
// taken in the Cholesky coordinates u of the student fields (l_S = L u, u ~ N(0, I_r), r = rank): z | u ~
// N(A u, I - A A^T) with A = Cov(z, u), whose entries are correlations (|A| <= 1) however close to parallel the
// students are (written in l_S itself, A = M_S^T Q_S^+ grows like 1 / (1 - cos^2) and its polynomial cancels against
// the moments: 3.7 wrong at cos = 1 - 2e-9 before), and exactly aligned indicators are one (1(l > 0)^2 = 1(l > 0)),
// which leaves E[prod_s F_s(l_s) u^beta] over a Gaussian of at most three dimensions (u as extra variables of the
// orthant moments), in closed form:
//   relu/step sigma and relu sigma' are indicators 1(l > 0) (times l); step sigma' = delta(l) conditions l = 0;
//   erf sigma'(l)^n = (2/pi)^(n/2) exp(-n l^2/2) reweights the Gaussian (C -> (I + C D)^-1 C, det(I + C D)^-1/2);
//   erf sigma(l) = E_xi[sign(l - xi)] = 2 P(u > 0 | l) - 1 with u = l - xi, xi ~ N(0, 1) (one more Gaussian
//   dimension with an indicator); linear and quadratic are polynomials.
// Orthant moments E[x^beta prod_{a in A} 1(x_a > 0)] (|A| <= 3) follow from Stein's lemma
//   E[x_a g(x)] = sum_b C_ab E[d_b g(x)],
// whose indicator derivatives are deltas that condition one variable at 0 (one dimension less), down to the orthant
// probabilities 1/2, 1/4 + asin(rho)/(2 pi), 1/8 + sum asin(rho_ab)/(4 pi). Everything is closed form: the
// results are exact to rounding.
// Relu and step units with means mu (the biases), x = mu + l: relu sigma = x 1(x > 0), sigma' = 1(x > 0), step
// sigma = 1(x > 0) and sigma' = delta(x) (density N(0; mu_s, C_ss) times the law conditioned on x_s = 0, whose means
// shift by -C_.s mu_s / C_ss, the u's too). The conditioning is the same Cholesky coordinates u: the moments are
// E[x^q u^beta 1(x_A > 0)] over the fields x (means mu, rows L) and the centred u, orthant moments with means on the
// square-root factor (Stein with E[x_a g] = m_a E[g] + sum_b C_ab E[d_b g], ending at Phi, the bivariate normal
// orthant with its angle from the rows' minors and, for three indicators, the certified one-dimensional integral of
// gaussian_mean.hpp over the variable off the most nearly parallel pair). The centred powers stay polynomials in the
// centred u, so no binomial expansion around a large mean arises. Nearly parallel and identical biased units are
// exact like the others: within 1e-10 plus the overlaps' own rounding floor (1e-17 / eps for w2 = w1 + eps g) of the
// smooth continuation (measured <= 5e-12 down to cos = 1 - 2e-12, 1.2e-10 at 1 - 2e-14); before, the conditioning
// was in the fields, whose A = M_S^T Q_S^+ grows like 1 / (1 - cos^2) (2e-10 wrong at cos = 1 - 2e-5, 80 at
// 1 - 2e-11), and such states were refused. Nothing is refused for parallelism: only a delta on a field of zero
// variance (undefined) raises std::domain_error.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "twolayer/activation.hpp"

namespace twolayer {

// A polynomial in k variables in the Hermite basis: exponents (k per term) -> coefficient.
using HermitePoly = std::map<std::vector<int>, double>;

struct PolyTarget {
  int k = 1;
  HermitePoly f;  // the target function, terms with a zero coefficient removed

  // Throws std::invalid_argument unless k >= 1, every term has k non-negative exponents and finite coefficient.
  void validate() const;
  int degree() const;
  // f at one point z (k values).
  double eval(const double* z) const;
  // E[f(z)^2] = sum_alpha c_alpha^2 alpha! (orthonormality of the He_alpha / sqrt(alpha!)).
  double second_moment() const;
};

// Hermite-basis algebra (products linearised per coordinate: He_m He_n = sum_j C(m,j) C(n,j) j! He_{m+n-2j}).
HermitePoly hermite_product(const HermitePoly& p, const HermitePoly& q);
HermitePoly hermite_times_z(const HermitePoly& p, int r);  // z_r p: z He_n = He_{n+1} + n He_{n-1}

// One student field's factor: sigma'(l)^n_deriv sigma(l)^n_sigma l^power, with n_sigma <= 1.
struct FieldFactor {
  int n_deriv = 0, n_sigma = 0, power = 0;
};

// E[prod_s F_s(mu_s + l_s) p(z)] for the n <= 3 distinct fields l_S of covariance Qs (n x n), Cov(l_S, z) = Ms
// (n x k), means mu (the biases; null for zero). Step units allow n_deriv <= 1 (a delta). Throws std::domain_error
// when Qs is singular where it must not be. The conditioning on l_S is the same with means (E[p(z) | l_S] is a
// polynomial in the centred fields); what changes is the moments E[prod_s F_s(mu_s + l_s) l^beta]: closed form for
// the five classic activations at zero means and for relu and step at any means (orthant moments with means, above),
// otherwise (every smooth activation, and linear, quadratic, erf with means) a tensor trapezoidal rule certified at
// run time like gaussian_smooth.hpp's (<= 1e-13 relative to the integral of |integrand| in practice), contracted one
// Cholesky coordinate at a time (target.cpp, SmoothMoments).
double target_expectation(Activation act, int n, const double* Qs, const double* Ms, int k,
                          const FieldFactor* factors, const HermitePoly& p, const double* mu = nullptr);
// out[j] = E[prod_s F_s(l_s) p(z)] for count <= 16 factor patterns (patterns[j * n + s]) on the same fields, their
// moments taken together (FieldTuple::prepare: one lattice for the patterns of equal steps, as the ODE's tuples);
// each value is bitwise the one target_expectation gives for its pattern alone.
void target_expectation_patterns(Activation act, int n, const double* Qs, const double* Ms, int k,
                                 const FieldFactor* patterns, int count, const HermitePoly& p, double* out,
                                 const double* mu = nullptr);
// The same for several polynomials at once (the conditioning and moment tables are shared).
void target_expectations(Activation act, int n, const double* Qs, const double* Ms, int k, const FieldFactor* factors,
                         const std::vector<const HermitePoly*>& ps, double* out, const double* mu = nullptr);

// Excess risk of a student (Q, M (K x k), effective a, biases b: null for zero) on the target:
// 1/2 a^T I2(Q; b) a - sum_i a_i E[sigma(b_i + l_i) f] + 1/2 E[f^2].
double target_risk(const PolyTarget& t, const double* Q, const double* M, const double* a, int K, Activation act,
                   const double* b = nullptr);
// dR/dQ (K x K, symmetric: the derivative with respect to Q_ik = Q_ki counted on both entries as 1/2 each) and
// dR/dM (K x k) of the target part -sum_i a_i E[sigma(b_i + l_i) f] only, and sf (K) = E[sigma(b_i + l_i) f] (its
// derivative with respect to a_i is -sf_i); with biases b (null: zero), db (K, skipped when null) its derivative
// with respect to b_i, -a_i E[sigma'(b_i + l_i) f]. With a mean the formulas are the same (Price in M, Stein on the
// centred l_i for Q).
void target_cross_grad(const PolyTarget& t, const double* Q, const double* M, const double* a, int K, Activation act,
                       double* dQ, double* dM, double* sf, const double* b = nullptr, double* db = nullptr);

// One unit's cross term Phi(q, m) = E[sigma(l) f(z)], l ~ N(0, q), Cov(l, z) = m (k), Cov(z) = I_k, and its
// first and second derivatives (Price's theorem: d/dm_r = E[sigma'(l) d_r f], d/dq = E[sigma''(l) f] / 2, so
// Phi_qq = E[sigma''''(l) f] / 4, Phi_qm_r = E[sigma'''(l) d_r f] / 2, Phi_m_r m_t = E[sigma''(l) d_r d_t f]).
// The higher derivatives of sigma are moved onto the Gaussian density: with h(l) = E[P(z) | l] (a polynomial),
// E[sigma^(n+1)(l) h(l)] = E[sigma'(l) (T^n h)(l)], T h = l h / q - h'. out (3 + 2k + k^2):
// [Phi, Phi_q, Phi_m (k), Phi_qq, Phi_qm (k), Phi_mm (k x k)]. Throws std::domain_error when q = 0.
// With a bias b (l ~ N(0, q) shifted to b + l; b null: the classic five only, as above) every activation, and out
// gains (3 + k) entries, the b-derivatives d/db = E[sigma'(b + l) .]: [Phi_b, Phi_bb, Phi_bq, Phi_bm (k)] (the
// integration by parts moving sigma's derivatives onto the density of the centred l holds at any b).
void target_unit_jet(const PolyTarget& t, double q, const double* m, Activation act, double* out,
                     const double* b = nullptr);

// The target terms of the order-parameter ODE (see dynamics.hpp, OdeModel::target): added to the student-only
// right-hand side (the committee RHS with v = 0) before the spherical projection.
class TargetRhs {
 public:
  // Any activation (the classic five at zero biases and relu, step at any biases in closed form, the rest by
  // certified quadrature), and biases b (K; empty for zero): the fields are b_i + l_i (the large-batch map).
  // bias_in_state: the biases are the state's instead, y = [Q, M, a, b] (the ODE of a target with biases,
  // dynamics.hpp; `bias` is then unused).
  TargetRhs(const PolyTarget& t, Activation act, int K, bool online, double lr, double lr_readout,
            std::vector<double> bias = {}, bool bias_in_state = false);
  // Adds to dQ (unprojected Phi, K x K), dM (K x k), da (K) at state y = [Q, M, a] (then b with bias_in_state),
  // with lr and lr_readout times rate (a learning-rate schedule's value), the tuples of fields on n_threads threads.
  void add(const double* y, double* dQ, double* dM, double* da, double rate = 1.0, int n_threads = 1) const;
  // The raw target parts at state y, for maps built from the expectations (large_batch.hpp), n = K + k units:
  //   psi (K x n) += E[sigma'(l_i) l_c f] for every unit c (students, then the k target directions z_r);
  //   hd (K x K, symmetric; skipped when null) += E[sigma'(l_i) sigma'(l_k) f^2] - 2 E[sigma'(l_i) sigma'(l_k) f fhat]
  //   with fhat = sum_j a_j sigma(l_j).
  // add() is lr a_i psi_{i,K+r} into dM, lr (a_i psi_ik + a_k psi_ki) + [online] lr^2 a_i a_k hd_ik into dQ.
  void add_raw(const double* y, double* psi, double* hd, int n_threads = 1) const;
  // -sum_i a_i E[sigma(l_i) f] + E[f^2] / 2: the target part of the risk.
  double risk_part(const double* y) const;
  // out (K) += E[sigma'(b_i + l_i) f]: the target part of the bias gradient E[sigma'(lambda_i) E].
  void add_bias_raw(const double* y, double* out) const;
  // Replaces the students' biases (K values).
  void set_bias(const std::vector<double>& bias);

 private:
  // The students' biases at state y (K values): the state's with bias_in_state, else b_.
  const double* bias(const double* y) const;
  bool bias_in_state_ = false;
  PolyTarget t_;
  Activation act_;
  int K_, k_;
  bool online_;
  double lr_, lr_readout_;
  std::vector<double> b_;
  HermitePoly f2_;
  std::vector<HermitePoly> zf_;
  double f2mean_;
};

}  // namespace twolayer
