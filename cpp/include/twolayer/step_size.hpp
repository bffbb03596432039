// The step sizes of the order-parameter integrators, written once for the one-system path (integrators.cpp), the
// SIMD lanes (batch_integrators.cpp), the step-unit flow (step_flow.cpp) and the CUDA backend (cpp/cuda/): the
// fixed-step methods' landing on the output times, and the adaptive Dormand-Prince method's initial step and step
// control (Hairer, Norsett & Wanner, II.4).
#pragma once
#include <algorithm>
#include <cmath>

#include "twolayer/hd.hpp"

namespace twolayer::step_size {

// The fixed step dt from t towards the output time target, shortened to land on it when it would reach within
// 1e-9 dt of it (land: whether it does).
TWOLAYER_HD inline double towards(double t, double target, double dt, bool& land) {
  land = t + dt >= target - 1e-9 * dt;
  return land ? target - t : dt;
}

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

// Whether the step h at t is too small to make progress (or not finite): the solution blows up or is not smooth.
TWOLAYER_HD inline bool underflows(double h, double t) { return !std::isfinite(h) || h < 1e-13 * std::max(1.0, t); }
// Whether the step h from t reaches the end t_end (the step is then shortened to end exactly there).
TWOLAYER_HD inline bool reaches_end(double t, double h, double t_end) {
  return t + h >= t_end - 1e-12 * std::max(1.0, t_end);
}

// The factor on the size of a rejected step (error norm e > 1, or not finite): in [0.2, 0.9).
TWOLAYER_HD inline double rejected_factor(double e) {
  return std::isfinite(e) ? std::max(0.2, 0.9 * std::pow(e, -0.2)) : 0.2;
}
// The factor on the size of the step after an accepted one (error norm e <= 1): in [0.2, 5].
TWOLAYER_HD inline double accepted_factor(double e) {
  return e == 0.0 ? 5.0 : std::min(5.0, std::max(0.2, 0.9 * std::pow(e, -0.2)));
}

}  // namespace twolayer::step_size
