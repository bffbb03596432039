// Integrators for the order-parameter ODE (dynamics.hpp): explicit Euler and classical RK4 with a fixed step, and an
// adaptive Dormand-Prince 5(4) with rtol/atol; output at given times; early stop on the excess risk at the located
// first-passage time; divergence detection by the engines' shared rule (divergence.hpp). A batched driver runs many independent systems in one call, OpenMP across systems; one diverging member
// does not affect the others.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "twolayer/dynamics.hpp"
#include "twolayer/schedule.hpp"

namespace twolayer {

enum class Method : int { Euler = 0, Rk4 = 1, Adaptive = 2 };

// Early stop on the excess risk R: the run stops ("converged") at the first time R(t) <= threshold, with
// threshold = max(risk_tol, risk_rtol * R(0)); inactive when both are 0. The crossing is located inside the step
// where it happens: on the adaptive method's dense output (4th order), on the chord between the last two states for
// the fixed-step methods; the last recorded row is the state there, and stop_time its time.
struct StopRule {
  double risk_tol = 0.0;   // absolute threshold (> 0 to use)
  double risk_rtol = 0.0;  // threshold relative to the initial risk (> 0 to use)
  bool active() const { return risk_tol > 0.0 || risk_rtol > 0.0; }
};

struct IntegrateOptions {
  Method method = Method::Adaptive;
  double dt = 0.01;            // fixed step (Euler, RK4)
  double rtol = 1e-8, atol = 1e-10;  // adaptive
  double h0 = 0.0;             // adaptive initial step (<= 0: automatic)
  double h_max = 0.0;          // adaptive maximal step (<= 0: unbounded)
  std::vector<double> times;   // output times, non-decreasing, >= 0
  StopRule stop;               // early stop on the excess risk (integrate(); integrate_batch() may give one per member)
  long long max_steps = 100000000;
  // lr(t) = lr s(t), lr_readout(t) = lr_readout s(t) (schedule.hpp), evaluated at every stage's time; the adaptive
  // method ends its steps at the schedule's jumps. Not per_step tables (an ODE has no steps).
  Schedule schedule;
  // The tolerances the divergence rule allows Omega to leave the PSD cone by (divergence.hpp psd_delta): the
  // adaptive method's rtol and atol, 0 for the fixed-step ones.
  double psd_rtol() const { return method == Method::Adaptive ? rtol : 0.0; }
  double psd_atol() const { return method == Method::Adaptive ? atol : 0.0; }
};

struct IntegrateResult {
  std::vector<double> t, y, risk;  // recorded rows: t (T), y (T x state_size), risk (T)
  // "completed", "converged" (the StopRule's threshold reached), "diverged", "max_steps" (step budget used up) or
  // "interrupted" (cancel.hpp): the rows recorded before the stop are kept
  std::string status = "completed";
  std::string message;
  double stop_time = std::numeric_limits<double>::quiet_NaN();  // time of the stop (NaN if the run completed)
  long long n_rhs = 0, n_steps = 0, n_rejected = 0;
};

// Where a batch's recorded rows go instead of its members' IntegrateResult vectors (which then stay empty): row()
// is called for member b's rows in time order, from the thread that runs b (members run on several threads at once,
// each member's rows on one). The batch binding writes them straight into its (B, T, ...) output arrays, so that a
// trajectory is written once rather than kept per member and copied.
class RowSink {
 public:
  virtual ~RowSink() = default;
  virtual void row(std::size_t member, double t, const double* y, double risk) = 0;

  // The sink's plain (B, T, K, K), (B, T, K, M), (B, T, K), (B, T) arrays on the output grid, for an engine that
  // writes whole trajectories at once (the GPU copies them straight from the device), or nullptr where rows must go
  // through row() (padded or reordered arrays). An engine that takes them writes every row, NaN after a member's
  // recorded ones, and then reports each member with grid_filled() and final_row() (or row() for a stop row
  // between output times).
  struct GridArrays {
    double *Q, *M, *a, *risk;
  };
  virtual const GridArrays* grid_arrays() { return nullptr; }
  // Member b's first n grid rows were written into grid_arrays().
  virtual void grid_filled(std::size_t member, std::size_t n) { (void)member, (void)n; }
  // Member b's last row (its final state), when it is a grid row already written.
  virtual void final_row(std::size_t member, double t, const double* y, double risk) {
    (void)member, (void)t, (void)y, (void)risk;
  }
};

// Why state y of f's model has diverged by the rule of divergence.hpp with the run's bound (divergence_bound of its
// start), nullptr if it has not: used after every accepted step.
const char* state_error(const OdeRhs& f, const double* y, double bound, std::vector<double>& scratch);

// Integrates one system from y0. n_threads parallelises inside the right-hand side (large K, M).
IntegrateResult integrate(const OdeModel& model, const double* y0, const IntegrateOptions& opt, int n_threads);
// The same with the stop rule given apart from the options (a batch member's own rule).
IntegrateResult integrate(const OdeModel& model, const double* y0, const IntegrateOptions& opt, const StopRule& stop,
                          int n_threads);

// Integrates every system (each with its own initial state y0s[b], of size models[b].state_size()) with the same
// options; OpenMP across systems, each system serial, each exactly as integrate() would (bitwise). stops: empty
// (opt.stop for every member) or one rule per member. finished (may be null): incremented as each member ends, for
// progress reports. sink (may be null): receives the rows (RowSink). Errors that are not divergence (bad input, a
// missing kernel) are rethrown after the loop.
std::vector<IntegrateResult> integrate_batch(const std::vector<OdeModel>& models,
                                             const std::vector<const double*>& y0s, const IntegrateOptions& opt,
                                             int n_threads, const std::vector<StopRule>& stops = {},
                                             std::atomic<std::int64_t>* finished = nullptr, RowSink* sink = nullptr);

}  // namespace twolayer
