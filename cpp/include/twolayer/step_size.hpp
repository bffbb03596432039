// The step control of the order-parameter integrators, written once for the integrator driver (lane_driver.hpp: one
// system and the SIMD lanes alike), the step-unit flow (step_flow.cpp) and the CUDA backend (cpp/cuda/): the
// fixed-step methods' landing on the output times, and the adaptive Dormand-Prince method's error norm, initial
// step, acceptance, next step size, maximal step and minimal step (with its message) (Hairer, Norsett & Wanner,
// II.4). TWOLAYER_HD throughout: no exceptions, strings or allocation.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>

#include "twolayer/hd.hpp"

namespace twolayer::step_size {

// The fixed step dt from t towards the output time target, shortened to land on it when it would reach within
// 1e-9 dt of it (land: whether it does).
TWOLAYER_HD inline double towards(double t, double target, double dt, bool& land) {
  land = t + dt >= target - 1e-9 * dt;
  return land ? target - t : dt;
}

// --- the error norm: sqrt(mean((x_i / (atol + rtol max(|ya_i|, |yb_i|) + slack_i))^2)) ---

// One entry's scaled error x / (atol + rtol max(|ya|, |yb|) + slack) (slack: step_flow's extra tolerance, else 0).
TWOLAYER_HD inline double scaled(double x, double ya, double yb, double atol, double rtol, double slack = 0.0) {
  return x / (atol + rtol * std::max(std::fabs(ya), std::fabs(yb)) + slack);
}
// The norm from the sum of the n squared scaled errors.
TWOLAYER_HD inline double rms(double sum_squares, std::size_t n) {
  return std::sqrt(sum_squares / static_cast<double>(n));
}
// The norm of n entries x[i * stride] against ya, yb (stride: the lanes of a structure-of-arrays state).
TWOLAYER_HD inline double norm(const double* x, const double* ya, const double* yb, std::size_t n, double atol,
                               double rtol, std::size_t stride = 1) {
  double s = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double e = scaled(x[i * stride], ya[i * stride], yb[i * stride], atol, rtol);
    s += e * e;
  }
  return rms(s, n);
}

// --- the initial step ---

// The adaptive method's first guess from the error norms d0 of y(0) and d1 of f(y(0)).
TWOLAYER_HD inline double initial_guess(double d0, double d1) {
  return (d0 < 1e-5 || d1 < 1e-5) ? 1e-6 : 0.01 * d0 / d1;
}
// Its initial step from that guess hh and the norm d2 of (f(y + hh f) - f(y)) / hh.
TWOLAYER_HD inline double initial(double hh, double d1, double d2) {
  const double m = std::max(d1, d2);
  const double h1 = m <= 1e-15 ? std::max(1e-6, hh * 1e-3) : std::pow(0.01 / m, 0.2);
  return std::min(100.0 * hh, h1);
}

// --- acceptance and the next step ---

// Whether a step with error norm e is accepted (a NaN norm is not).
TWOLAYER_HD inline bool accepts(double e) { return e <= 1.0; }
// The factor on the size of a rejected step (error norm e > 1, or not finite): in [0.2, 0.9).
TWOLAYER_HD inline double rejected_factor(double e) {
  return std::isfinite(e) ? std::max(0.2, 0.9 * std::pow(e, -0.2)) : 0.2;
}
// The factor on the size of the step after an accepted one (error norm e <= 1): in [0.2, 5].
TWOLAYER_HD inline double accepted_factor(double e) {
  return e == 0.0 ? 5.0 : std::min(5.0, std::max(0.2, 0.9 * std::pow(e, -0.2)));
}
// The step h capped at the maximal step h_max (<= 0: unbounded).
TWOLAYER_HD inline double capped(double h, double h_max) { return h_max > 0.0 ? std::min(h, h_max) : h; }
// The step after an accepted step of size h with error norm e, capped at h_max.
TWOLAYER_HD inline double after_accepted(double h, double e, double h_max) {
  return capped(h * accepted_factor(e), h_max);
}
// The step to retry after a rejected step of size h with error norm e.
TWOLAYER_HD inline double after_rejected(double h, double e) { return h * rejected_factor(e); }

// --- the end and the minimal step ---

// Whether the step h from t reaches the end t_end (the step is then shortened to end exactly there).
TWOLAYER_HD inline bool reaches_end(double t, double h, double t_end) {
  return t + h >= t_end - 1e-12 * std::max(1.0, t_end);
}
// Whether the step h at t is too small to make progress (or not finite): the solution blows up or is not smooth;
// the run then diverges with kUnderflowMessage.
TWOLAYER_HD inline bool underflows(double h, double t) { return !std::isfinite(h) || h < 1e-13 * std::max(1.0, t); }
inline constexpr const char* kUnderflowMessage =
    "the adaptive step size underflowed (the solution blows up or is not smooth here)";

}  // namespace twolayer::step_size
