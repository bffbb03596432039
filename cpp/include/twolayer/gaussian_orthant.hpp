// Orthant moments of a small Gaussian and the ReLU-student I4 for every teacher activation pair.
//
//   orthant_moment(C, n, S, p) = E[prod_{j in S} 1(l_j > 0) prod_j l_j^p_j],  l ~ N(0, C), n <= 4.
//
// 1. Stein's lemma on a variable m with p_m > 0, E[l_m G] = sum_j C_mj E[d_j G], with d_j of 1(l_j > 0) the delta
//    (Gaussian integration by parts, exact for these piecewise-polynomial G):
//      E[l_m G] = sum_j C_mj (p'_j E[G / l_j] + [j in S, p'_j = 0] p_j(0) E[G without 1(l_j > 0) | l_j = 0]),
//    p' = p - e_m, p_j(0) = 1 / sqrt(2 pi C_jj); conditioning on l_j = 0 projects the rows of a square-root factor
//    (l - mu = F v, v ~ N(0, I): Cholesky at the top, F_a -= (C_aj / C_jj) F_j, C = F F^T), which keeps a nearly
//    parallel variable's small conditional variance and angles to full relative accuracy (the Schur complement
//    C - C_.j C_j. / C_jj kept only eps / (1 - r^2) of it: the SDE's relu drift was 5e-9 off for two students at
//    cos = 1 - 1e-10) (a delta at a point where l_j^q, q > 0, vanishes contributes nothing). Every step lowers the total degree or
//    the number of variables, so the recursion ends at orthant probabilities with no powers left:
//      P0 = 1, P1 = 1/2, P2 = 1/4 + asin(r12) / (2 pi), P3 = 1/8 + (asin r12 + asin r13 + asin r23) / (4 pi)
//    (closed forms; asin r = +-(pi/2 - acos |r|) with the angle from the rows' minors where |r| >= 0.9) and P4 (no closed form: the one-dimensional Price-path integral of gaussian_relu_i4.hpp).
//    With means (l ~ N(mu, C), the biases) the same recursion holds with E[l_m G] = mu_m E[G] + sum_j C_mj E[d_j G],
//    the delta's density p_j(0) = exp(-mu_j^2 / (2 C_jj)) / sqrt(2 pi C_jj) and the conditioned means
//    mu - C_.j mu_j / C_jj; it ends at orthant probabilities with means (gaussian_mean.hpp: Phi, the bivariate normal
//    orthant with its angle from the minors, for three indicators the certified integral over the variable off the
//    most nearly parallel pair, orthant3_probability_rows, for four orthant_probability_mean's two-dimensional one), memoised per top-level (C, mu) by (variables conditioned on, indicator variables). All means
//    exactly 0 take the closed forms above, bitwise as without means.
// 2. Degenerate covariances, before every step: a variable of variance below 1e-15 of its variance before any
//    conditioning (ref) is identically 0 (step(0) = 0, so the moment vanishes if it carries a step or a power;
//    otherwise it is dropped); a pair whose 2x2 determinant (the squared minors of its rows: no cancellation) is below
//    1e-15 C_jj C_kk (the current variances) is one variable, l_k = +-c l_j with c = sqrt(C_kk / C_jj)
//    (1(l_j > 0)^2 = 1(l_j > 0); 1(-l_j > 0) = 1 - 1(l_j > 0) almost surely; 1(l_j > 0) 1(-l_j > 0) = 0), so the
//    conditioning never meets a singular block. These are the exact ODE cases (the diagonal pairs i = k, a unit with
//    itself, a student equal to a teacher unit) and the exactly rank-deficient blocks (l3 in the span of l1, l2). The
//    moments are continuous across the merge (pairs closer to alignment than the tolerance, sin < 3e-8, move by
//    O(sin) of the scale). With means a zero-variance variable is the constant mu_j (step(mu_j) mu_j^p_j), and an
//    aligned pair is merged only when its means are aligned too (offset mu_k -+ c mu_j below 1e-7 sqrt(C_kk));
//    otherwise both stay, and conditioning on one makes the other a constant of definite sign.
// 3. Accuracy, measured (scratch program against the path-integral relu I4 and the closed forms of
//    gaussian_relu_i4.hpp, which this recursion re-derives for (relu, relu), (linear, relu), (linear, linear)) on 2000
//    random covariances of rank 1 to 4, with duplicated variables (l1 = l2, l3 = l4, l3 = l1): max error 1e-11
//    sqrt(C33 C44) (relu, relu; the path integral's own accuracy near aligned pairs), 2e-14 (linear cases). Cost
//    0.4 to 7 us per I4 (erf pairs, which reach the four-variable orthant probability, the most).
//
// ReLU-student I4, E[step(l1) step(l2) a(l3) b(l4)], for any teacher activations a, b: each factor is a sum of
// orthant-moment factors: linear l, quadratic l^2, relu l 1(l > 0), step 1(l > 0), and erf through
// erf(l / sqrt 2) = 2 Phi(l) - 1 = 2 E_w[1(l - w > 0)] - 1 with an independent w ~ N(0, 1): the variable's variance
// grows by 1 and its covariances stay (two erf factors get independent w's).
#pragma once
#include "twolayer/activation.hpp"

namespace twolayer::detail {

// E[prod_{j in S} 1(l_j > 0) prod_j l_j^p_j] for l ~ N(0, C), C n x n row-major PSD (n <= 4), S a bit mask.
double orthant_moment(const double* C, int n, unsigned S, const int* p);

// The same for l ~ N(mu, C) (mu nullptr: zero means). memo: nullptr or 256 doubles set to NaN before the first call,
// shared by the calls on one (C, mu) only (the orthant probabilities of its conditioned sub-problems).
double orthant_moment(const double* C, const double* mu, int n, unsigned S, const int* p, double* memo);

// E[step(l1) step(l2) a(l3) b(l4)], l ~ N(0, C), C 4x4 row-major PSD: the ReLU student's I4 for any pair (a, b).
double relu_i4_general(Activation a, Activation b, const double* C);

}  // namespace twolayer::detail
