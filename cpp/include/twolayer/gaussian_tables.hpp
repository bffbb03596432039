// Kernel tables for the order-parameter ODE: the Gaussian kernels of gaussian.hpp evaluated for every pair (or pair
// of pairs) of units of one covariance matrix, with the work that depends on a single unit or pair done once, and
// vectorised fast paths for erf (its angle form, gaussian.hpp, with the branch-free arcsine of simd_math.hpp). Every
// entry equals the scalar kernel of gaussian.hpp up to round-off (tested against them). The one closed form written
// out here is the arcsine of I2(erf, erf) inside the erf I4 contraction, on i4()'s conditioned block (its angle form
// with derivatives costs a fifth more there).
#pragma once
#include <cstddef>

#include "twolayer/activation.hpp"
#include "twolayer/gaussian.hpp"

namespace twolayer {

// Kernel tables over one covariance C (n x n, row-major) of variables x_0..x_{n-1} with activations acts[]: what the
// order-parameter ODE needs, with the work that depends on one unit or one pair done once (the (erf, erf) tables
// take vectorised fast paths; every entry equals the scalar kernel up to round-off).
//
// I2 with its first derivatives for every pair (i, c), i < m, c < n, stored at [i * n + c]:
//   c != i: val = I2(a, acts[c]; C_ii, C_ic, C_cc), dx, dy = its derivatives in C_ii and C_ic;
//   c = i:  val = E[a(x_i) acts[i](x_i)] (i2_self), dx = its derivative in C_ii, dy = dI2/dC12 at the degenerate
//           covariance [[C_ii, C_ii], [C_ii, C_ii]].
// (The derivative in C_cc of pair (i, c) is dx of pair (c, i) when c < m. When acts[c] = a, dy is J2(a) of the pair,
// E[a'(x_i) a'(x_c)], for every c: Price's theorem.) ws: scratch of at least
// i2_grad_table_workspace(n, m) doubles.
std::size_t i2_grad_table_workspace(int n, int m);
void i2_grad_table(Activation a, const double* C, int n, int m, const Activation* acts, double* val, double* dx,
                   double* dy, double* ws);

// I4(s, acts[j], acts[l]; x_i, x_k, x_j, x_l) for np first pairs (i, k) = (pairs[2p], pairs[2p + 1]) and every
// j <= l, stored packed at out[p * T + tri(n, j, l)], T = n (n + 1) / 2. For erf and step, conditioning on (x_i, x_k)
// is done once per pair. ws: scratch of at least i4_table_workspace(n, np) doubles.
inline int tri(int n, int j, int l) { return j * n - j * (j - 1) / 2 + (l - j); }  // row-major upper triangle
std::size_t i4_table_workspace(int n, int np);
void i4_table(Activation s, const double* C, int n, const Activation* acts, const int* pairs, int np, double* out,
              double* ws);

// The I4 table of each first pair contracted with weights W (packed like the table):
//   out[p] = sum_{j <= l} W[tri(n, j, l)] I4(s, acts[j], acts[l]; x_i, x_k, x_j, x_l)
// (the ODE's E[s'(x_i) s'(x_k) E^2] with W = (2 - [j = l]) w_j w_l), without storing the table on the erf fast path.
// ws: scratch of at least i4_contract_workspace(n, np) doubles.
std::size_t i4_contract_workspace(int n, int np);
void i4_contract(Activation s, const double* C, int n, const Activation* acts, const int* pairs, int np,
                 const double* W, double* out, double* ws);


}  // namespace twolayer
