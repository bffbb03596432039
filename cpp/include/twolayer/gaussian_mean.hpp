// Gaussian kernels of pre-activations with a mean (the biases): lambda = mu + l, l ~ N(0, C),
//
//   I2(a, b; mu, C)    = E[a(lambda1) b(lambda2)],                          C 2x2, mu 2
//   J2(s; mu, C)       = E[s'(lambda1) s'(lambda2)],                        C 2x2, mu 2
//   I3(s, b; mu, C)    = E[s'(lambda1) lambda2 b(lambda3)],                 C 3x3, mu 3
//   I4(s, a, b; mu, C) = E[s'(lambda1) s'(lambda2) a(lambda3) b(lambda4)],  C 4x4, mu 4
//
// for every activation. With mu = 0 each returns the zero-mean kernel of gaussian.hpp unchanged (the dispatch on
// "all means zero" comes first), except for the pairs that have none there (a relu or step unit with a smooth
// non-classic one), which go through the engine below at any mean. Otherwise:
//   * pair_moment(a, i, b, j) = E[a^(i)(lambda1) b^(j)(lambda2)] (i + j <= 4, the orders of the population
//     Hessian; relu'' = step' = delta and its derivatives up to delta''' taken as distributions) is the building block. Condition on one variable,
//     lambda2 = mu2 + c t + s u (t, u standard normal, lambda1 = mu1 + sqrt(C11) t): the inner expectation over u is
//     the Gaussian smoothing S_b^(j)(m, s) = E[b^(j)(m + s u)], in closed form for the classic five (linear m,
//     quadratic m^2 + s^2, relu m Phi(m/s) + s phi(m/s), step Phi(m/s), erf erf(m / sqrt(2 (1 + s^2))) and their
//     m-derivatives) and by the certified trapezoidal rule of gaussian_smooth.hpp for the smooth others. A delta
//     factor is integrated out exactly (the density at the root, its derivative for delta'); otherwise the outer
//     integral over t in [-9, 9] is adaptive Gauss-Legendre (20 nodes, a panel accepted when it agrees with its two
//     halves to 1e-14 of the integral of |integrand|), split at every kink or jump of the integrand and around the
//     boundary layer of width s / |c| of a smoothed kink. The variable carrying a delta, and otherwise the classic
//     unit, is put inside.
//   * pairs of polynomial units (linear, quadratic, hermite): exactly, from the bivariate moments (gaussian_smooth.hpp
//     poly_pair_moment; a value beyond the double range raises std::domain_error);
//   * erf pairs (both units erf, s(x) = erf(x / sqrt 2) = 2 Phi(x) - 1, s' = 2 phi) in closed form at every order,
//     with a_k = sqrt(1 + C_kk), h_k = mu_k / a_k, D = (1 + C11)(1 + C22) - C12^2 >= 1 + C11 + C22 (so that
//     rho = C12 / (a1 a2) stays off +-1 for every PSD C; acos |rho| = atan2(sqrt D, |C12|) exactly):
//       E[s(l1) s(l2)] = 4 Phi2(h1, h2; rho) - 2 Phi(h1) - 2 Phi(h2) + 1 (s(l) = 2 P(Z < l | l), Z independent
//       standard normals) = s(h1) s(h2) + 4 T(h1, h2; rho) with T the Drezner-Wesolowsky integral for |rho| < 0.925
//       (relative accuracy where the moment is small; Genz's 6, 12, 20 nodes below |rho| = 0.3, 0.75, 0.925), the
//       near-one branch of the orthant probability otherwise;
//       i >= 1: s'(l1) = 2 phi(l1) tilts the law (complete the square): E[s'(l1) g(l2)] = A(mu1) E[g(m + sd u)],
//       A = 2 phi(h1) / a1, m = mu2 - kappa mu1, kappa = C12 / (1 + C11), sd^2 = C22 - kappa C12 = (C22 + det C) /
//       (1 + C11) (det C by an fma: accurate where large variances nearly cancel), and the higher
//       orders are mu1-derivatives of it (E[s^(i) s^(j)] = d^(i-1)/dmu1^(i-1) E[s' s^(j)]): Leibniz over
//       A^(n) = (-1)^n He_n(h1) A / a1^n and the closed erf smoothing S^(j+l)(m, sd) (dm/dmu1 = -kappa).
//       Written once over lanes in gaussian_erf_mean.hpp (L = 1 here, with libm; the lanes with biases call it too).
//     Every erf kernel with means (I2, J2, I3 by Stein, the erf student's I4 by conditioning) therefore is closed
//     form when its units are all erf; pair_moment_quadrature keeps the conditioning engine above as their reference.
//   * sin and cos pairs (both units sin or cos) in closed form at every order, zero and singular variances included:
//     gaussian_smooth.hpp TrigPair, the characteristic function (the same one trig_moments and so smooth::moments
//     take), E[cos(A + l1) cos(B + l2)] = (cos(A - B) e^(-(x + z - 2y)/2) + cos(A + B) e^(-(x + z + 2y)/2)) / 2, a
//     derivative a quarter turn of phase; pair_moment_quadrature keeps the conditioning engine as their reference.
//   * I2 and J2 of two smooth non-classic units (tanh, sigmoid, ...): smooth::moments (gaussian_smooth.hpp), which
//     takes means; every pair with a classic unit (its smoothing in closed form, one-dimensional):
//     pair_moment.
//   * I3 by Stein's lemma on l2: mu2 E[s'(lambda1) b(lambda3)] + C12 E[s''(lambda1) b(lambda3)]
//     + C23 E[s'(lambda1) b'(lambda3)], three pair moments on the (1, 3) block.
//   * I4: linear s: I2(a, b) on the (3, 4) block; step s: s' = delta, the density of (lambda1, lambda2) at 0 times
//     I2(a, b) of (lambda3, lambda4) conditioned on it; erf s: s'(x) = sqrt(2/pi) e^(-x^2/2) is a Gaussian
//     observation of (lambda1, lambda2) at 0, (2/pi) det(I + C_AA)^(-1/2) exp(-mu_A^T (I + C_AA)^-1 mu_A / 2) times
//     the conditioned I2; other smooth s with smooth a, b: smooth::i4 with means (three polynomial units, the
//     quadratic student's: exactly, poly_product4 of gaussian_smooth.hpp); relu s (s' = step) with any a, b,
//     and smooth s with a relu or step unit among a, b (kinked_i4): Cholesky in the order (l3, l4, l1, l2),
//     l3 = m3 + L00 t, l4 = m4 + L10 t + L11 u, and given (t, u) the student pair at the conditioned means and the
//     fixed conditioned covariance: for relu the bivariate orthant probability P(l1 > 0, l2 > 0 | t, u)
//     (Drezner-Wesolowsky, or from rho = 1 on dyadic panels for |rho| >= 0.925: ~1e-16 absolute), for smooth s the
//     certified pair moment smooth::moments; t and u by nested adaptive Gauss-Legendre split at the kinks of a and b
//     and around the boundary layers of the kinked fields with a small remaining variance (and of h -+ k for |rho|
//     near 1), each rule certified against its envelope (inner 1e-13, outer 1e-12).
// A zero variance means the unit is the constant a(mu) (step(0) = 0); a delta at a constant 0 is infinite and
// raises std::domain_error. Host only (static quadrature tables, exceptions).
//
// For the ODE with biases (lambda_i = w_i.x/sqrt(d) + b_i): the order-parameter terms are these kernels with
// mu = (b_i, b_k, ...) and C the blocks of (Q, R, T); the centred l2 of I3 (the w_k.x/sqrt(d) of dQ/dt) is mu2 = 0;
// the bias equations db_i/dt = E[s'(lambda_i) (y - yhat)] need E[s'(lambda1) b(lambda2)] = pair_moment(s, 1, b, 0)
// (equivalently I3 with lambda2 the constant 1: C22 = C12 = C23 = 0, mu2 = 1).
#pragma once
#include <cstddef>

#include "twolayer/activation.hpp"

namespace twolayer {

// E[a^(i)(lambda1) b^(j)(lambda2)], (lambda1, lambda2) ~ N((mu1, mu2), [[x, y], [y, z]]), i, j >= 0, i + j <= 4.
double pair_moment(Activation a, int i, Activation b, int j, double mu1, double mu2, double x, double y, double z);
// The same by the conditioning engine even where a closed form exists (erf, sin and cos pairs): the reference that tests
// and benchmarks hold the closed forms against.
double pair_moment_quadrature(Activation a, int i, Activation b, int j, double mu1, double mu2, double x, double y,
                              double z);
// out[e] = pair_moment(a, ij[e][0], b, ij[e][1], ...) for n orders at once: for two smooth non-classic units one
// certified lattice rule over all of them (smooth::moments with its odd moments; pair_moment if it cannot certify),
// else pair_moment each.
void pair_moments(Activation a, Activation b, const int (*ij)[2], int n, double mu1, double mu2, double x, double y,
                  double z, double* out);

// Whether the zero-mean kernels of gaussian.hpp have the pair (I2, I3: (a, b); I4: (s, a, b)). A relu or step unit
// with a smooth non-classic one has none: such pairs go through the engine with means, at mean 0 too.
bool zero_mean_pair(Activation a, Activation b);
bool zero_mean_i4(Activation s, Activation a, Activation b);

// The n-point Gauss-Legendre rule on [-1, 1], n = 6, 12 or 20 (Genz's node counts of the erf pairs' bivariate normal
// integral, "erf pairs" above): its nodes x[0..n) and weights w[0..n), built once, for the closed forms of
// gaussian_erf_mean.hpp.
struct GaussLegendreNodes {
  const double* x;
  const double* w;
};
GaussLegendreNodes gauss_legendre_nodes(int n);

// The kernels above on one row-major covariance C and mean vector mu (no checks: see mean_error).
double i2_mean(Activation a, Activation b, const double* C, const double* mu);
double j2_mean(Activation s, const double* C, const double* mu);
double i3_mean(Activation s, Activation b, const double* C, const double* mu);
double i4_mean(Activation s, Activation a, Activation b, const double* C, const double* mu);

// P(lambda > 0) for lambda ~ N(mu, C), C n x n row-major PSD, n <= 4, every variance > 0: Phi(mu / sqrt(C11)),
// the bivariate normal orthant (Drezner-Wesolowsky, ~1e-16 absolute), for n = 3 adaptive Gauss-Legendre over the
// first variable of the bivariate orthant of the other two conditioned on it (split at its kink and around the
// boundary layers of near-singular blocks, certified to 1e-13 of the integral of its envelope), for n = 4 the relu I4
// kinked_i4(relu, step, step) (nested, certified to 1e-12). The exact relu/step moments of the SDE with biases
// (gaussian_orthant.hpp) end here.
double orthant_probability_mean(const double* C, const double* mu, int n);

// P(X > h, Y > k) for standard normal X, Y of correlation r, given acos |r| (accurate where the caller knows it
// better than from the rounded r, 1 - |r| far below 1: e.g. atan2 of the 2x2 minors): the bivariate normal orthant
// above (~1e-16 absolute).
double bivariate_orthant(double r, double acos_abs_r, double h, double k);

// P(lambda > 0) for lambda = mu + F v, v ~ N(0, I_R), three variables given by their rows F (3 x R row-major,
// R <= 8; row 0 of positive norm): orthant_probability_mean's n = 3 integral over the first variable, the other two
// conditioned on it by projecting their rows (their conditional variances and the angle between them from the
// projected rows' minors: accurate where the pair is nearly parallel, given a first variable that is not).
double orthant3_probability_rows(const double* F, int R, const double* mu);

// Batches over `count` covariances C (n x n each) and means mu (n each): every matrix checked (covariance_error) and
// every mean finite (std::invalid_argument naming the first bad one); the matrices whose means are all 0 go through
// the zero-mean batches' own path where it has the pair (i2_batch_at, ...: bitwise their values), the others through
// the kernels above, OpenMP across matrices.
void i2_mean_batch(Activation a, Activation b, const double* C, const double* mu, std::size_t count, double* out,
                   int n_threads);
void j2_mean_batch(Activation s, const double* C, const double* mu, std::size_t count, double* out, int n_threads);
void i3_mean_batch(Activation s, Activation b, const double* C, const double* mu, std::size_t count, double* out,
                   int n_threads);
void i4_mean_batch(Activation s, Activation a, Activation b, const double* C, const double* mu, std::size_t count,
                   double* out, int n_threads);

}  // namespace twolayer
