// Diffusion approximation of online SGD at finite d (Arnaboldi et al., "does stochasticity help?").
//
// One online SGD step moves the state y = (Q, M, a) by dy = xi / d, with the per-sample increment (E = y - f, one
// fresh sample, label noise sqrt(Delta) zeta; |x|^2 / d -> 1)
//   xi_M_ir = lr a_i g'(l_i) l*_r E,   xi_a_i = lr_readout g(l_i) E,
//   xi_Q_ik = lr (a_i g'(l_i) l_k + a_k g'(l_k) l_i) E + lr^2 a_i a_k g'(l_i) g'(l_k) E^2,
// and, spherical, its linear projection xi_M_ir - M_ir xi_Q_ii / 2, xi_Q_ik - Q_ik (xi_Q_ii + xi_Q_kk) / 2.
// Over dt = 1/d (one step) the mean of xi is the ODE's right-hand side (OdeRhs) and the covariance is Cov(xi) / d
// per unit time, so with t = steps / d
//   dy = F(y) dt + sqrt(Cov(xi)(y) / d) dB_t.
// The label noise zeta is integrated exactly (xi is a polynomial of degree <= 2 in zeta). Over (l, l*) ~ N(0, Omega):
//  * smooth units (linear, quadratic, erf; a polynomial target f(z) of target.hpp in place of the committee):
//    Gauss-Hermite product quadrature (Omega = L L^T, l = L u with u on an n^(K+M) grid): exact for polynomial
//    activations and targets once 2n - 1 >= the degree of xi_alpha xi_beta (linear: n >= 3, quadratic: n >= 7),
//    converged spectrally for erf;
//  * any relu unit (with linear, quadratic, relu or step units, or a polynomial target; K + M <= 4): exactly, as
//    piecewise polynomials (relu = l 1(l > 0), relu' = 1(l > 0)) whose terms are orthant moments (gaussian_poly.hpp),
//    with biases too (l = c + (b, b*) ~ N((b, b*), Omega): orthant moments with means; xi_Q and xi_M carry the
//    centred c = l - (b, b*), and xi_b_i = lr_bias a_i g'(l_i) E joins when lr_bias > 0);
//  * relu or step units beside a smooth non-polynomial block (e.g. relu students, erf teachers; up to 4 relu, step,
//    linear or quadratic units): Gauss-Hermite over the smooth block's fields (its K or M dimensions) and, given them,
//    the orthant moments with the conditioned means and covariance over the others (mixed).
// A step student has no diffusion term: sigma' = 0 almost everywhere, so online SGD never moves it (validate_model
// refuses it). The drift is E[xi] from the same moments: the ODE's right-hand side (OdeRhs), to rounding for the exact
// moments (tests/test_sde_relu_bias.py), and at a fraction of its cost with biases (its nested relu I4 quadrature);
// exact runs without biases or a smooth block keep OdeRhs itself, bitwise as before biases existed.
//
// The integrator is Euler-Maruyama on a fixed step dt (strong order 1/2, weak order 1): y += F dt + sqrt(dt) S z
// with S S^T = Cov(xi) / d (Cholesky, zero pivots skipped), z standard normal from the counter-based stream
// (seed, run, kSde), Gaussians [n_c step, n_c (step + 1)) at step `step` (n_c = components of xi).
// Quadrature moments: paths run in SIMD lanes (blocks of 8 per thread; a lane takes the next path when its own ends)
// and the drift F is E[xi] from the same quadrature (projected: the ODE's right-hand side, exactly for polynomial
// units and targets, to the quadrature's accuracy for erf). Exact (relu) moments: one path per thread's turn, drift
// E[xi] from the exact moments (OdeRhs without biases or a smooth block). Either way a path's arithmetic never
// depends on the other paths (fixed lane width, no FMA contraction in sde.cpp): bit-identical results for any thread
// count or set of paths.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "twolayer/dynamics.hpp"
#include "twolayer/gaussian_poly.hpp"

namespace twolayer {

// The random stream of the SDE's Brownian increments (distinct from the SGD simulator's streams in rng.hpp).
inline constexpr std::uint32_t kSdeStream = 16;

// Mean and covariance of the one-sample increment xi (see above) at a state, by quadrature. Components: Q_ik for
// i <= k (row-major upper triangle), then M_ir, then a_i when lr_readout > 0. Not thread-safe (workspace).
class IncrementMoments {
 public:
  // nodes, weights: the Gauss-Hermite rule (unused, may be empty, for exact moments without a smooth block).
  IncrementMoments(const OdeModel& model, std::vector<double> nodes, std::vector<double> weights);
  int n_components() const { return nc_; }
  // Whether the moments are exact piecewise-polynomial expectations (a relu unit) rather than quadrature.
  bool exact() const { return exact_; }
  // The pieces of operator(), for callers that evaluate the quadrature themselves (the lane-parallel path block):
  // factor() writes Omega's lower Cholesky factor L (u x u, false when Omega is not PSD); raw_mean() and
  // raw_second() (E[xi], E[xi xi^T] upper triangle, before the projection) are what finish() turns into the mean and
  // covariance (spherical projection included).
  bool factor(const double* y, double* L);
  double* raw_mean() { return mu_.data(); }
  double* raw_second() { return S_.data(); }
  void finish(const double* y, double* mean, double* cov);
  int n_units() const { return u_; }
  // The Gauss-Hermite dimensions of the exact moments (the smooth block beside relu/step units; 0: none).
  int smooth_dims() const { return exact_ ? ng_ : 0; }
  // The units' means (b, b*) at state y (zeros without biases), into out (K + M).
  void means(const double* y, double* out) const;
  const std::vector<double>& grid() const { return grid_; }
  const std::vector<double>& grid_weights() const { return gw_; }
  // mean (n_c), cov (n_c x n_c). Returns false when Omega is not positive semi-definite.
  bool operator()(const double* y, double* mean, double* cov);

 private:
  OdeModel m_;
  std::vector<double> x_, w_;  // Gauss-Hermite rule for N(0, 1)
  int u_, nc_;
  std::vector<double> grid_, gw_;  // the product rule: n^u nodes (u coordinates each) and their weights
  std::vector<double> om_, L_, z_, zc_, mean_, g_, dg_, c0_, c1_, c2_, S_, mu_, proj_, tmp_;
  std::vector<int> idx_;
  bool exact_ = false;
  // Mixed exact mode (a smooth non-polynomial block beside relu/step units): the block [g0_, g0_ + ng_) (all
  // students or all teachers) by the Gauss-Hermite grid (ng_ dimensions), the others exactly given it; ng_ = 0: none.
  int ng_ = 0, g0_ = 0;
  IndicatorPoly target_poly_;  // the polynomial target in monomials of l_K..l_{K+k-1} (exact mode)
  void raw_quadrature(const double* y);
  void raw_exact(const double* y);
  void exact_terms(const double* y, double wt, const double* Cx, const double* mx, const double* zg);
};

struct SdeSpec {
  OdeModel model;
  int d = 1;
  double dt = 0.01;
  long long steps = 0;
  std::vector<long long> record_steps;  // strictly increasing in [0, steps]
  std::vector<double> nodes, weights;   // Gauss-Hermite rule
  std::uint64_t seed = 0;
  double risk_tol = -1.0, risk_rtol = -1.0;  // < 0: off
};

struct SdeOut {
  double *Q = nullptr, *M = nullptr, *a = nullptr, *risk = nullptr;  // (T, ...) rows
  double* b = nullptr;  // (T, K) rows of the student biases (biased models)
  std::size_t recorded = 0;
  int status = 0;  // 0 completed, 1 diverged, 2 interrupted, 3 converged
  int reason = 0;  // diverged: why (a DivergenceCode of divergence.hpp)
  double stop_time = 0.0;
};

// Simulates paths j = 0..n-1 from y0 + j * y0_stride (state layout of OdeModel), run ids runs[j].
void sde_simulate(const SdeSpec& spec, const double* y0, std::size_t y0_stride, const std::uint32_t* runs,
                  std::size_t n_paths, SdeOut* out, int n_threads, std::atomic<long long>* progress);

}  // namespace twolayer
