// Loss-landscape search: many independent L-BFGS minimisations of the population risk from different starts,
// run in parallel (OpenMP across runs). The risk and gradient are population_risk / population_gradient, or with
// biases population_risk_mean / population_gradient_mean.
#pragma once
#include <atomic>
#include <vector>

#include "twolayer/population.hpp"

namespace twolayer {

struct LbfgsOptions {
  int max_iter = 2000;   // iterations per run
  double gtol = 1e-10;   // stop when the Euclidean gradient norm is <= gtol
  int memory = 10;       // stored (s, y) pairs
  bool train_readout = false;
  bool train_bias = false;  // the student's biases b are among the parameters (needs b)
};

// status codes of one run
enum LbfgsStatus : int {
  kConverged = 0,
  kMaxIter = 1,
  kLineSearchFailed = 2,  // stalled: no resolvable decrease
  kDiverged = 3,
  kInterrupted = 4  // cancelled (cancel.hpp): the run's last iterate is kept; runs never started keep their start
};

// Minimises the population risk of `runs` students that share the architecture and the teacher of `p`.
// W (runs x K x d) and a (runs x K) hold the starts and are overwritten with the end points; loss, grad_norm,
// iterations and status have one entry per run. A failing run never spoils the others. On cancellation it
// returns with the runs not finished marked kInterrupted (loss and grad_norm NaN for those never started).
// finished (optional) counts the runs done, for a progress bar read from another thread.
// With biases, b (runs x K, the students' biases; trained with opt.train_bias, overwritten then) and teacher_bias
// (M) are non-null: x = [vec(W), a (train_readout), b (train_bias)]; without (b null) the zero-bias path.
void multistart_lbfgs(const Population& p, int runs, double* W, double* a, const LbfgsOptions& opt, double* loss,
                      double* grad_norm, int* iterations, int* status, int n_threads,
                      std::atomic<long long>* finished = nullptr, double* b = nullptr,
                      const double* teacher_bias = nullptr);

}  // namespace twolayer
