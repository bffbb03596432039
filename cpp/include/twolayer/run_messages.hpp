// The status messages of every run, written once: for every integrator (the driver of lane_driver.hpp, one system
// or SIMD lanes, and the CUDA backend), so that a member's message is the same on every path, and, through their
// bindings (bind_messages.cpp), for the SGD and SDE simulators, which build their messages in Python.
#pragma once
#include <string>

#include "twolayer/format.hpp"
#include "twolayer/integrators.hpp"
#include "twolayer/step_size.hpp"

namespace twolayer {

inline std::string completed_message(double t_end, long long steps, long long rhs) {
  return concat("integrated to t = ", t_end, " in ", steps, " steps (", rhs, " right-hand-side evaluations)");
}
inline std::string diverged_message(double t, const std::string& why) {
  return concat("diverged at t = ", t, ": ", why);
}
inline std::string interrupted_message(double t, long long steps) {
  return concat("interrupted at t = ", t, " after ", steps, " steps");
}
inline std::string max_steps_message(long long max_steps, double t) {
  return concat("max_steps = ", max_steps, " steps taken, stopped at t = ", t);
}
inline std::string converged_message(double risk, double threshold, const StopRule& rule, double t) {
  std::string s = concat("excess risk ", risk, " reached the threshold ", threshold, " (");
  if (rule.risk_tol > 0.0) s += concat("risk_tol = ", rule.risk_tol, rule.risk_rtol > 0.0 ? ", " : "");
  if (rule.risk_rtol > 0.0) s += concat("risk_rtol = ", rule.risk_rtol, " x the initial risk");
  return s + concat(") at t = ", t);
}
// A finished SGD run: its steps, the samples it drew and the size of its training set (0: online).
inline std::string sgd_completed_message(long long steps, long long samples, long long n_samples) {
  std::string s = concat(steps, " SGD steps (", samples, " samples");
  if (n_samples > 0) s += concat(", training set of ", n_samples);
  return s + ")";
}
// A finished Euler-Maruyama run of the SDE.
inline std::string sde_completed_message(long long steps, double dt) {
  return concat(steps, " Euler-Maruyama steps of dt = ", dt);
}
// The adaptive integrators' step-size underflow (a diverged run; step_size.hpp).
inline constexpr const char* kStepUnderflow = step_size::kUnderflowMessage;
// A right-hand side that left the kernels' domain outside a step attempt (a diverged run).
inline std::string singular_message(const char* what) { return concat("a kernel became singular (", what, ")"); }
// A batch member not started when a cancel was requested.
inline constexpr const char* kNotStartedMessage = "interrupted before it started";

}  // namespace twolayer
