// Integrators for the order-parameter ODE (dynamics.hpp): explicit Euler and classical RK4 with a fixed step, and an
// adaptive Dormand-Prince 5(4) with rtol/atol; output at given times; early stop on the excess risk; divergence
// detection (non-finite or overflowing state, loss of positive semi-definiteness of Omega). A batched driver runs
// many independent systems in one call, OpenMP across systems; one diverging member does not affect the others.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "twolayer/dynamics.hpp"

namespace twolayer {

enum class Method : int { Euler = 0, Rk4 = 1, Adaptive = 2 };

struct IntegrateOptions {
  Method method = Method::Adaptive;
  double dt = 0.01;            // fixed step (Euler, RK4)
  double rtol = 1e-8, atol = 1e-10;  // adaptive
  double h0 = 0.0;             // adaptive initial step (<= 0: automatic)
  double h_max = 0.0;          // adaptive maximal step (<= 0: unbounded)
  std::vector<double> times;   // output times, non-decreasing, >= 0
  double risk_tol = 0.0;       // > 0: stop ("converged") once the excess risk falls below it
  long long max_steps = 100000000;
  double psd_tol = 1e-8;       // Omega's LDL pivots below -psd_tol * max|diag| mean "diverged"
  double overflow = 1e100;     // |y| above this means "diverged"
};

struct IntegrateResult {
  std::vector<double> t, y, risk;  // recorded rows: t (T), y (T x state_size), risk (T)
  // "completed", "converged" (risk_tol reached), "diverged", "max_steps" (step budget used up) or "interrupted"
  // (cancel.hpp): the rows recorded before the stop are kept
  std::string status = "completed";
  std::string message;
  double stop_time = -1.0;  // time of the stop (-1 if the run completed)
  long long n_rhs = 0, n_steps = 0, n_rejected = 0;
};

// Why state y of model m is not acceptable (nullptr if it is): used after every accepted step.
const char* state_error(const OdeRhs& f, const double* y, const IntegrateOptions& opt, std::vector<double>& scratch);

// Integrates one system from y0. n_threads parallelises inside the right-hand side (large K, M).
IntegrateResult integrate(const OdeModel& model, const double* y0, const IntegrateOptions& opt, int n_threads);

// Integrates every system (each with its own initial state y0s[b], of size models[b].state_size()) with the same
// options; OpenMP across systems, each system serial. Errors that are not divergence (bad input, a missing kernel)
// are rethrown after the loop.
std::vector<IntegrateResult> integrate_batch(const std::vector<OdeModel>& models,
                                             const std::vector<const double*>& y0s, const IntegrateOptions& opt,
                                             int n_threads);

}  // namespace twolayer
