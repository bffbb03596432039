// Finite-d SGD of a two-layer student on samples from a two-layer teacher (conventions: docs/conventions.rst).
//
//   x ~ N(0, I_d),  l = W x / sqrt(s),  l* = W* x / sqrt(s)   (s = d or 1),
//   f = sum_i a_i sigma(l_i),  y = sum_r v_r sigma*(l*_r) + sqrt(Delta) xi,  E = y - f
// (a, v effective second layers: readout prefactors already applied). One step on a batch of B samples:
//   w_i += (lr sqrt(s) / d) (1/B) sum_nu a_i sigma'(l_i) E x        (lr / sqrt(d) per sample for s = d)
//   a_i += (lr_readout / d) (1/B) sum_nu sigma(l_i) E
//   b_i += (lr_bias / d) (1/B) sum_nu a_i sigma'(l_i) E               (biases, optional: l_i = w_i . x / sqrt(s) + b_i)
// with all right-hand sides evaluated before the step. With biases (student b, teacher b*; either may be given) the
// recorded risk is the exact one with means (overlap_risk_mean; against a polynomial target target_risk with the
// biases), and the
// divergence rule also checks b (not finite, or past the run's bound, whose scale then includes |b(0)| and |b*|).
// Spherical: each w_i is then rescaled to |w_i|^2 = s.
// Time t = steps / d. Online: every step draws B fresh samples. Training set (n_samples > 0): n samples are
// drawn once and visited in batches of B, epoch after epoch (reshuffled each epoch when shuffle is set);
// B = n is full-batch gradient descent.
//
// Every run has its own hyper-parameters (SgdRun: stream key, lr, lr_readout, noise, early stop); the problem
// (sizes, activations, batch, regime, record steps, master seed) is shared (SgdSpec). A run's result depends on
// its own SgdRun and start only, so a grid of runs done in one call equals the runs done one by one, bitwise.
//
// Early stop (per run): the risk is evaluated at the recorded steps only. The run stops, status converged, at the
// first recorded step whose risk is below threshold = max(risk_tol, risk_rtol * R0) (R0 the excess risk at step
// 0, after the spherical projection; a negative tolerance is off). stop_time is the linear interpolation, in
// t = steps / d, between that record and the one before it where the risk crosses the threshold (the record's own
// time when it is the first record).
//
// Randomness: the counter-based streams of rng.hpp keyed by (seed, run): inputs of sample row r (online: row =
// step B + nu) are Gaussians [r d, (r + 1) d) of stream kInputs, its label noise Gaussian r of kLabelNoise.
// Each run is computed by one thread with no reduction across threads, so results are bit-identical for any
// thread count. The risk recorded is the exact excess population risk from the overlaps (overlap_risk, and
// overlap_risk_mean with biases).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "twolayer/activation.hpp"
#include "twolayer/schedule.hpp"

namespace twolayer {

struct PolyTarget;  // target.hpp

struct SgdSpec {
  int K = 0, M = 0, d = 0;
  double scale = 0.0;  // s: d for sqrt_d scaling, 1 for none
  Activation student = Activation::Erf, teacher = Activation::Erf;
  bool train_first = true;  // train W
  int batch = 1;
  bool spherical = false;
  long long n_samples = 0;  // 0: online
  bool shuffle = true;
  long long steps = 0;
  std::vector<long long> record_steps;  // strictly increasing, each in [0, steps]
  std::uint64_t seed = 0;  // master seed: run streams are keyed by (seed, SgdRun::id)
  // A run stops as diverged where its overlaps (Q, M, a) break the divergence rule of divergence.hpp, checked at every
  // record and every d steps, or where a sample's error |y - f| exceeds this (or is not finite) inside a step.
  double blowup = 1e100;
  // A polynomial target instead of the committee: labels f(z) with z = Wt x / sqrt(s) the M = k projections (v and
  // the teacher activation unused); the recorded risk is target_risk.
  std::shared_ptr<const PolyTarget> target;
  Schedule schedule;      // step n uses lr s(n / d) and lr_readout s(n / d) (schedule.hpp); default s = 1
};

// One run's own parameters.
struct SgdRun {
  std::uint32_t id = 0;     // stream key (seed, id)
  double lr = 0.0;          // first layer; ignored unless train_first
  double lr_readout = 0.0;  // 0: second layer fixed
  double lr_bias = 0.0;     // 0: student biases fixed (used only with biases)
  double noise = 0.0;       // Delta, variance of the label noise
  double risk_tol = -1.0;   // stop below this excess risk (< 0: off)
  double risk_rtol = -1.0;  // stop below risk_rtol * (initial excess risk) (< 0: off)
};

// Where one run writes (caller-owned, sized for all record_steps): Q (T K K), M (T K M), a (T K), risk (T);
// W (K d) and a_final (K) may be null; bias (T K) and b_final (K) are written in a run with biases (null: not kept).
struct SgdOut {
  double *Q, *M, *a, *risk, *W, *a_final;
  double* bias = nullptr;
  double* b_final = nullptr;
  std::size_t recorded = 0;
  // 0 completed, 1 diverged, 2 interrupted (cancel.hpp; the rows recorded so far are kept), 3 converged (early
  // stop; the crossing record is the last row)
  int status = 0;
  long long stop_step = -1;
  int reason = 0;  // diverged: why (a DivergenceCode of divergence.hpp); else 0
  double stop_time = 0.0;  // converged: the interpolated crossing (t = steps / d); completed: NaN; else stop_step / d
};

// Runs runs[0..n_runs) of the same problem, each with its own SgdRun. W0 (K d) and a0 (K) are the initial student: shared by all runs when
// init_stride == 0, else run j starts from W0 + j * init_stride * K * d (and a0 + j * init_stride * K). Wt (M d),
// v (M) the teacher. b0 (K, strided as a0) and bt (M): the student's and teacher's biases, either null (zeros; both
// null: a run without biases, bitwise the same as before biases existed). OpenMP across runs (n_threads <= 0: OpenMP default); exceptions are rethrown after.
// progress (optional): incremented by the number of steps done, every few thousand steps of every run, so that
// a caller on another thread can report progress; it has no effect on the results.
void sgd_simulate(const SgdSpec& spec, const double* W0, const double* a0, std::size_t init_stride,
                  const double* Wt, const double* v, const SgdRun* runs, std::size_t n_runs, SgdOut* out,
                  int n_threads, std::atomic<long long>* progress = nullptr, const double* b0 = nullptr,
                  const double* bt = nullptr);

// Throws std::invalid_argument naming the offending field (per-run fields as "lr[j]").
void sgd_check(const SgdSpec& spec, const SgdRun* runs, std::size_t n_runs);

// Why the GPU path (sgd_simulate_cuda) cannot run this problem, naming the option (an empty string: it can). It runs
// the online committee problem: any activations, batch >= 1, either scaling, spherical, early stop, label noise; not
// training sets (n_samples), polynomial targets or learning-rate schedules.
std::string sgd_cuda_unsupported(const SgdSpec& spec);

#ifdef TWOLAYER_CUDA
// sgd_simulate on the GPU (cpp/cuda/sgd.cu): the same runs (biases included), statuses and divergence rule, the same
// Philox samples;
// the sums over d are taken in another order, so the recorded rows agree with the CPU's to floating-point
// reassociation. Throws cuda::DeviceUnavailable (cuda.hpp) naming what sgd_cuda_unsupported refuses. Each run's
// weights stay on the device; the overlaps are formed there at the record steps and every d steps (the divergence
// rule), and come back; the risk, the rule and early stop are then decided here by the CPU path's own code. Ctrl-C
// (cancel.hpp) is polled between kernel launches (each a bounded number of steps): interrupted, rows kept.
void sgd_simulate_cuda(const SgdSpec& spec, const double* W0, const double* a0, std::size_t init_stride,
                       const double* Wt, const double* v, const SgdRun* runs, std::size_t n_runs, SgdOut* out,
                       std::atomic<long long>* progress = nullptr, const double* b0 = nullptr,
                       const double* bt = nullptr);
#endif

}  // namespace twolayer
