// The online ODE's second-order term of smooth units as ONE Gaussian expectation per set of fields:
//
//   out[p] = E[s'(l_i) s'(l_k) (sum_c w_c act_c(l_c))^2],  (i, k) = (pairs[2p], pairs[2p + 1]),
//
// over n fields l ~ N(mu, C), every pair at once, instead of sum_jl w_j w_l I4(s, act_j, act_l) (up to
// n (n + 1) / 2 four-dimensional quadratures per pair). Method (docs/layers/activations.rst, "Cost"):
//   * whitened nested lattice: l = mu + L z (L the Cholesky factor of C, zero pivots dropped), the trapezoidal rule
//     in z on the ball |z| <= 9, each field evaluated once per prefix (z_1..z_c) of the variables it depends on; the
//     fields taken in the order of least work (a field outside the pairs last);
//   * the last field (a teacher) is summed out once per call: for fixed z_1..z_{n-1} the sum over z_n of
//     (P + w_n act_n(b + L_nn z_n))^2 is P^2 S0 + 2 P w_n S1(b) + w_n^2 S2(b) with the Gaussian smoothings
//     S_q(b) = sum_j w_j act_n(b + L_nn h_n j)^q, tabulated once per call on a uniform grid and interpolated (local
//     Lagrange, 8 points);
//   * the field of the innermost loop is interpolated from a table of its activation (and derivative) too: along a
//     line of that loop both arguments move by whole grid steps (the grids are aligned to the steps), so the
//     interpolation weights are computed once per line, and the tables are stored split by residue modulo the
//     stride so that each stencil entry runs contiguously along the line (one vectorised pass); a line whose step is far below a grid's (a last field nearly
//     independent of the line's variable, typical of weakly correlated teachers and students) is taken run by run
//     of the points inside one cell, each run from that cell's interpolating polynomial (Horner), unless an aligned
//     grid at that step is cheap against the lattice (a measured cost model);
//   * a teacher on the line and an aligned last grid: the w_n^2 S2 term needs no point of the line, its sum along a
//     line of 2 jm + 1 points is the line's interpolation at j = 0 of the prefix table R[jm][i] = sum_{|j| <= jm}
//     w_j S2[i + mstep j] (likewise the 2h rule), an identity on the certified table (when the prefix tables cost
//     less than the lattice's points);
//   * zero means and odd activations (tanh, erf, sin, linear): the integrand is even in z and the lattice symmetric,
//     so the first variable is summed over z >= 0 with the weights of z > 0 doubled.
// Certificate: the trapezoidal steps of gaussian_smooth.hpp's trapezoid_step, each field counted twice (its
// derivative, the square), with a first 2h rule that errs by ~e^-26 (steps times 0.75 on failure); the 2h rule is
// the even sub-lattice in every variable (the tables carry its sums too), and the result is accepted when
// ((I_h - I_2h) / S)^2 <= 1e-13 per pair, S the same rule on |integrand|, or, where the error's square cancels (a
// student that has nearly learnt its teacher: E^2 ~ 1e-10 from terms ~1, the tables' rounding then bounds the
// relative accuracy), when |I_h - I_2h| <= 1e-10 of the magnitude of the terms, E[|s'_i s'_k| (sum_c |w_c act_c|)^2]
// (one more pass of the lattice with absolute values, run only then): the accuracy of the per-I4 sum, each I4
// certified relative to itself. Every table is checked at the midpoints of its cells against direct evaluation
// (error <= 1e-14 of its largest entry, the grid halved otherwise). A last field fixed by the others (a zero pivot:
// a student equal to its teacher, or Omega indefinite within the engines' tolerance) needs no smoothing, S_q = a^q;
// a nearly fixed one (a tiny pivot) is smoothed on a grid refined to its step. Returns false when it cannot certify
// (tables too large, repeated failures): the caller then takes the per-I4 path. Host only (tables).
#pragma once
#include "twolayer/activation.hpp"

namespace twolayer::smooth {

// More than four fields (K + M > 4), or every field in a pair (students alone: the large-batch map): each term
// w_c w_c' E[s'_i s'_k act_c act_c'] lives on at most four of them, and the moment is a Moebius combination of
// lattices over the subsets {i, k} + A, |A| <= 2, of the weighted fields (gaussian_error_square.cpp, by_subsets):
// C(r, 2) + r + 1 lattices per pair for r other weighted fields, shared by the pairs of one subset, on `threads`
// threads; each certified as above. Fields of weight 0 outside every pair are dropped first.
//
// acts[c]: the activations of the n fields (smooth; the pair fields use s = acts[i]). mu: means (nullptr: zero).
// w: the weights of the error. np pairs (one lattice: at most 6), out: np values.
// Whether the lattices apply to a student s with units of activation t: smooth units without closed-form kernels
// (erf, linear and quadratic students keep theirs, and so do hermite students with hermite teachers: their I4 are
// exact moments).
bool error_square_applies(Activation s, Activation t);

bool error_square_moments(Activation s, int n, const Activation* acts, const double* C, const double* mu,
                          const double* w, const int* pairs, int np, double* out, int threads = 1);

}  // namespace twolayer::smooth
