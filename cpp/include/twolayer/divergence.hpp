// The one divergence rule of every engine: the ODE integrators (one system and batched lanes), the large-batch map,
// the SGD simulator and the SDE. A state y = [Q (K x K), M (K x M), a (K)] of a run whose teacher has overlaps P has
// diverged when
//   1. an entry is not finite (NaN or inf);
//   2. an entry exceeds the run's bound kDivergenceGrowth * max(1, scale), scale = the largest |entry| of the run's
//      start y(0), of P and of the teacher's second layer v: the overlaps have grown 1e8-fold past every scale of
//      the problem (|w| 1e4 times its start and the teacher's) — a run that blows up grows on without end, and past
//      this an adaptive ODE step (rtol 1e-8) no longer resolves the teacher-scale overlaps;
//   3. Omega = [[Q, M], [M^T, P]] lost positive semi-definiteness: the Cholesky factorisation of Omega + delta I,
//      delta = kDivergencePsdTol max|diag Omega|, fails (an eigenvalue below ~ -delta); in an adaptive integration
//      with tolerances rtol, atol, delta is at least rtol max|diag Omega| + atol (psd_delta): a run that learns its
//      teacher ends at a singular Omega, and a state accurate to the integrator's tolerance leaves the cone by up to
//      that much (measured: tanh K = M = 2 at rtol 1e-6 "diverged" at t = 277 with the risk at 1e-7, erf's rows reached
//      eigenvalues of -3e-8);
// and, wherever the risk is evaluated, 4. the excess risk is not finite. An engine stops a run at the first state that
// breaks the rule: status "diverged", the time of that state, the rows before it kept, the other runs untouched.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "twolayer/hd.hpp"

namespace twolayer {

inline constexpr double kDivergenceGrowth = 1e8;   // rule 2: the growth past the run's own scale
inline constexpr double kDivergencePsdTol = 1e-8;  // rule 3: Omega's pivots below -psd_tol max|diag| mean "diverged"

// Rule 3's delta for an Omega whose largest diagonal entry is `scale`: kDivergencePsdTol scale, or in an adaptive
// integration (rtol, atol > 0; 0 otherwise) rtol scale + atol where that is larger.
TWOLAYER_HD inline double psd_delta(double scale, double rtol, double atol) {
  const double d = kDivergencePsdTol * (scale > 1e-300 ? scale : 1e-300), run = rtol * scale + atol;
  return run > d ? run : d;
}

// Why a state diverged (0: it did not). kSampleOverflow is the SGD simulator's guard inside a step (a sample's error
// y - f beyond 1e100 or not finite: the weights exploded within one step, before a state could be checked).
enum DivergenceCode : int { kStateOk = 0, kNotFinite = 1, kGrew = 2, kNotPsd = 3, kRiskNotFinite = 4, kSampleOverflow = 5 };

inline const char* divergence_message(int code) {
  switch (code) {
    case kNotFinite: return "the state is not finite (NaN or inf)";
    case kGrew:
      return "the overlaps, second layer or biases grew past 1e8 times the scale of the start and the teacher";
    case kNotPsd: return "the overlap matrix Omega = [[Q, M], [M^T, P]] lost positive semi-definiteness";
    case kRiskNotFinite: return "the excess risk is not finite (it overflows the double range)";
    case kSampleOverflow: return "a sample's error y - f overflowed (the weights exploded within one step)";
    default: return nullptr;
  }
}

// Rule 2's bound of a run: kDivergenceGrowth * max(1, max|y0|, max|P|, max|v|) (y0: the start's n state entries).
inline double divergence_bound(const double* y0, std::size_t n, const double* P, std::size_t nP, const double* v,
                               std::size_t nv) {
  double s = 1.0;
  for (std::size_t i = 0; i < n; ++i) s = std::max(s, std::fabs(y0[i]));
  for (std::size_t i = 0; i < nP; ++i) s = std::max(s, std::fabs(P[i]));
  for (std::size_t i = 0; i < nv; ++i) s = std::max(s, std::fabs(v[i]));
  return kDivergenceGrowth * s;
}

// Rules 1-3 for state y (layout above) with teacher overlaps P (M x M, row-major) and the run's bound: a
// DivergenceCode (the first offending entry in state order decides between 1 and 2). scratch: (K + M)^2 doubles.
// rtol, atol: an adaptive integration's tolerances (psd_delta), 0 elsewhere. omega_check_lanes (batch_dynamics.hpp) is
// this function over SIMD lanes (tested to agree).
inline int divergence_code(const double* y, int K, int M, const double* P, double bound, double* scratch,
                           double rtol = 0.0, double atol = 0.0) {
  const std::size_t n = static_cast<std::size_t>(K) * K + static_cast<std::size_t>(K) * M + K;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(y[i])) return kNotFinite;
    if (std::fabs(y[i]) > bound) return kGrew;
  }
  const int u = K + M;
  double* s = scratch;
  const double* Mo = y + static_cast<std::size_t>(K) * K;
  for (int i = 0; i < u; ++i)
    for (int j = 0; j < u; ++j)
      s[i * u + j] = i < K ? (j < K ? y[i * K + j] : Mo[i * M + (j - K)])
                           : (j < K ? Mo[j * M + (i - K)] : P[(i - K) * M + (j - K)]);
  double scale = 0.0;
  for (int i = 0; i < u; ++i) scale = std::max(scale, std::fabs(s[i * u + i]));
  const double delta = psd_delta(scale, rtol, atol);
  for (int i = 0; i < u; ++i) s[i * u + i] += delta;
  for (int j = 0; j < u; ++j) {
    double d = s[j * u + j];
    for (int k = 0; k < j; ++k) d -= s[j * u + k] * s[j * u + k];
    if (!(d > 0.0)) return kNotPsd;
    const double l = std::sqrt(d);
    s[j * u + j] = l;
    for (int i = j + 1; i < u; ++i) {
      double r = s[i * u + j];
      for (int k = 0; k < j; ++k) r -= s[i * u + k] * s[j * u + k];
      s[i * u + j] = r / l;
    }
  }
  return kStateOk;
}

}  // namespace twolayer
