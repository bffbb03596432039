// One batch member per GPU thread: the integrators of batch_integrators.cpp (Euler, RK4, Dormand-Prince 5(4) with its
// own step size, records on the output grid, first passage, divergence) for one system whose state lives in the
// thread's registers and local memory. The right-hand side, the risk and the divergence rule are the host's own
// TWOLAYER_HD lane functions (batch_dynamics.hpp) with one lane; the stage arithmetic is written in the order of the
// CPU lanes, and the whole library is compiled with -fmad=false, so that a member does the IEEE operations it does
// on the CPU. Only the control (statuses as codes, rows into the output arrays) is the GPU's.
#pragma once
#include <cuda_runtime.h>
#include <math_constants.h>

#include <cmath>
#include <limits>

#include "twolayer/activation.hpp"
#include "twolayer/batch_dynamics.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/dormand_prince.hpp"
#include "twolayer/first_passage.hpp"
#include "twolayer/step_size.hpp"

namespace twolayer::cuda {

// A member's status on the device (the host turns it into IntegrateResult's status and message).
enum MemberStatus : int { kLive = 0, kCompleted = 1, kConverged = 2, kDiverged = 3, kMaxSteps = 4, kInterrupted = 5 };
// reason of kDiverged beyond the DivergenceCode values: the adaptive step underflowed.
inline constexpr int kUnderflow = 100;

// Everything a launch reads and writes. Per-member arrays are member-major (member b's entries contiguous).
struct OdeArgs {
  int B = 0, K = 0, M = 0, T = 0;
  bool online = true, spherical = false, adaptive = false, rk4 = false;
  double dt = 0.0, rtol = 0.0, atol = 0.0, h0 = 0.0, h_max = 0.0;
  long long max_steps = 0;
  const double* times = nullptr;  // T output times
  // inputs: y0 (B, n), P (B, M, M), v (B, M), lr, lr_readout, noise, bound, risk_tol, risk_rtol (B)
  const double *y0 = nullptr, *P = nullptr, *v = nullptr, *lr = nullptr, *lra = nullptr, *noise = nullptr,
               *bound = nullptr, *risk_tol = nullptr, *risk_rtol = nullptr;
  // outputs: the grid rows as the (B, T, ...) arrays of the result, Q (B, T, K, K), M (B, T, K, M), a (B, T, K),
  // risk (B, T), NaN after a member's recorded rows; fin (B, n + 2) = [t, risk, state] of a located early stop
  double *Qr = nullptr, *Mr = nullptr, *ar = nullptr, *rr = nullptr;
  double *fin = nullptr, *stop_time = nullptr, *threshold = nullptr;
  int *status = nullptr, *reason = nullptr, *n_rec = nullptr;
  long long *n_steps = nullptr, *n_rhs = nullptr, *n_rej = nullptr;
  unsigned long long* done = nullptr;  // members finished (progress)
  const volatile int* cancel = nullptr;  // set by the host on Ctrl-C
};

// The right-hand side, risk and divergence rule of a committee whose student and teacher share the activation G,
// sizes KC, MC (0: at run time): the CPU lanes' functions with one lane.
template <Activation G, int KC, int MC>
struct CommitteeModel {
  static_assert(committee_lanes_activation(G), "the lanes implement erf, relu, quadratic and linear committees");
  __device__ static void rhs(const LaneShape& s, const LaneParams& p, const double* y, double* dy, double* ws) {
    committee_rhs_lanes<1, G, KC, MC>(s, p, y, dy, ws);
  }
  __device__ static double risk(const LaneShape& s, const double* P, const double* v, const double* y) {
    double r;
    committee_risk_lanes<1, G, KC, MC>(s, P, v, y, &r);
    return r;
  }
  __device__ static int check(const LaneShape& s, const double* P, const double* y, double bound) {
    int code;
    omega_check_lanes<1, KC, MC>(s, P, y, &bound, nullptr, &code);
    return code;
  }
};

// Compile-time bounds of one member's arrays: exact for fixed sizes, kRuntimeUnits per side otherwise.
inline constexpr int kRuntimeUnits = 4;
template <Activation G, int KC, int MC>
struct MemberSizes {
  static constexpr int K = KC > 0 ? KC : kRuntimeUnits, M = MC > 0 ? MC : kRuntimeUnits, u = K + M;
  static constexpr int n = K * K + K * M + K;
  static constexpr int ws = static_cast<int>(committee_rhs_lanes_workspace(LaneShape{K, M, true, false}, 1, G));
};

// The stepping families, one kernel each (a kernel carries only its method's stages).
enum class Stepping { Euler, Rk4, Adaptive };

template <Activation G, int KC, int MC, Stepping St>
class Member {
 public:
  using Model = CommitteeModel<G, KC, MC>;
  using S = MemberSizes<G, KC, MC>;

  __device__ Member(const OdeArgs& A, int b) : A_(A), b_(b) {
    sh_.K = units_K();
    sh_.M = units_M();
    sh_.online = A.online;
    sh_.spherical = A.spherical;
    if (St == Stepping::Adaptive) sh_.psd_rtol = A.rtol, sh_.psd_atol = A.atol;  // (the CPU's shape_of)
    const int K = units_K(), M = units_M();
    n_ = K * K + K * M + K;
    for (int e = 0; e < M * M; ++e) P_[e] = A.P[static_cast<std::size_t>(b) * M * M + e];
    for (int e = 0; e < M; ++e) v_[e] = A.v[static_cast<std::size_t>(b) * M + e];
    lr_ = A.lr[b];
    lra_ = A.lra[b];
    noise_ = A.online ? A.noise[b] : 0.0;
    bound_ = A.bound[b];
  }

  // The whole run of this member (the launch's cancel flag polled every 64 steps).
  __device__ void run() {
    double y[S::n];
    const int n = size();
    for (int e = 0; e < n; ++e) y[e] = A_.y0[static_cast<std::size_t>(b_) * n + e];
    if (const int code = Model::check(sh_, P_, y, bound_)) return diverge(0.0, code);
    const double tol = A_.risk_tol[b_], rtol = A_.risk_rtol[b_];
    rule_ = tol > 0.0 || rtol > 0.0;
    if (rule_) {
      risk_now_ = risk(y);
      threshold_ = fmax(tol, rtol * risk_now_);
      if (risk_now_ <= threshold_) return converge(0.0, y);  // already there: first passage at t = 0
    }
    if constexpr (St == Stepping::Adaptive)
      run_adaptive(y);
    else
      run_fixed(y);
    if (status_ == kLive) status_ = kCompleted;
  }

  __device__ void finish() {
    double nan_row[S::n];
    for (int e = 0; e < size(); ++e) nan_row[e] = CUDART_NAN;
    for (int j = next_; j < A_.T; ++j) write_row(j, nan_row, CUDART_NAN);
    A_.status[b_] = status_;
    A_.reason[b_] = reason_;
    A_.stop_time[b_] = stop_time_;
    A_.threshold[b_] = threshold_;
    A_.n_rec[b_] = next_;
    A_.n_steps[b_] = steps_;
    A_.n_rhs[b_] = rhs_count_;
    A_.n_rej[b_] = rejected_;
    atomicAdd(A_.done, 1ULL);
  }

 private:
  // The state's entries: a constant for sizes fixed at compile time (loops unroll, arrays stay in registers).
  // Sizes as compile-time constants where fixed (never read back from the object: its loops must unroll for its
  // arrays to stay in registers).
  __device__ int units_K() const { return KC > 0 ? KC : A_.K; }
  __device__ int units_M() const { return MC > 0 ? MC : A_.M; }
  __device__ int size() const { return KC > 0 ? S::n : n_; }
  __device__ double risk(const double* y) const { return Model::risk(sh_, P_, v_, y); }
  __device__ void rhs(const double* y, double* dy) {
    const LaneParams p{P_, v_, &lr_, &lra_, &noise_};
    Model::rhs(sh_, p, y, dy, ws_);
    ++rhs_count_;
  }
  __device__ bool cancelled() const { return *A_.cancel != 0; }
  __device__ void stop(double t, int status, int reason = 0) {
    status_ = status;
    reason_ = reason;
    stop_time_ = t;
  }
  __device__ void diverge(double t, int code) { stop(t, kDiverged, code); }
  // Row next_ of the output grid (time times[next_]); false (and diverged) if its risk overflows.
  __device__ bool record(const double* y, double r) {
    if (!isfinite(r)) {
      diverge(A_.times[next_], kRiskNotFinite);
      return false;
    }
    write_row(next_, y, r);
    ++next_;
    return true;
  }
  // Grid row j of this member: y = [Q, M, a] into the Q, M, a arrays, r into risk.
  __device__ void write_row(int j, const double* y, double r) {
    const int K = units_K(), M = units_M(), kk = K * K, km = K * M;
    const std::size_t i = static_cast<std::size_t>(b_) * A_.T + j;
    for (int e = 0; e < kk; ++e) A_.Qr[i * kk + e] = y[e];
    for (int e = 0; e < km; ++e) A_.Mr[i * km + e] = y[kk + e];
    for (int e = 0; e < K; ++e) A_.ar[i * K + e] = y[kk + km + e];
    A_.rr[i] = r;
  }
  __device__ bool record(const double* y) { return record(y, risk(y)); }
  // The crossing state at t_stop: the final row, status converged (or diverged if its risk overflows).
  __device__ void converge(double t_stop, const double* y) {
    const double r = risk(y);
    if (!isfinite(r)) return diverge(t_stop, kRiskNotFinite);
    const int n = size();
    double* f = A_.fin + static_cast<std::size_t>(b_) * (n + 2);
    f[0] = t_stop;
    f[1] = r;
    for (int e = 0; e < n; ++e) f[2 + e] = y[e];
    stop(t_stop, kConverged);
  }
  __device__ bool may_continue(double t) {
    if ((steps_ & 63) == 0 && cancelled()) {
      stop(t, kInterrupted);
      return false;
    }
    if (steps_ >= A_.max_steps) {
      stop(t, kMaxSteps);
      return false;
    }
    return true;
  }
  // Whether the accepted state y reached the threshold (its risk kept in risk_now_ if not).
  __device__ bool crossed(const double* y) {
    if (!rule_) return false;
    const double r = risk(y);
    const bool hit = r <= threshold_;
    if (!hit) risk_now_ = r;
    return hit;
  }

  // Euler or RK4 on the output grid. Only the stages the method needs are live (Euler: y and k1; RK4: y, k1, k2 + k3
  // summed as soon as k3 exists, k4 in k3's place and the stage input), so that a member's state stays in registers;
  // a stop rule's previous state (the chord's end) goes to the member's row of A.fin, which converge() overwrites.
  __device__ void run_fixed(double* y) {
    const double dt = A_.dt;
    const int n = size();
    double k1[S::n];
    double* yold = A_.fin + static_cast<std::size_t>(b_) * (n + 2) + 2;
    double t = 0.0;
    for (; next_ < A_.T; ) {
      const double target = A_.times[next_];
      while (t < target) {
        if (!may_continue(t)) return;
        bool land;
        const double h = step_size::towards(t, target, dt, land);
        if (rule_)
          for (int i = 0; i < n; ++i) yold[i] = y[i];
        const double r_old = risk_now_;
        rhs(y, k1);
        if constexpr (St == Stepping::Euler) {
          for (int i = 0; i < n; ++i) y[i] += h * k1[i];
        } else {
          double k2[S::n], k3[S::n], tmp[S::n];
          for (int i = 0; i < n; ++i) tmp[i] = y[i] + 0.5 * h * k1[i];
          rhs(tmp, k2);
          for (int i = 0; i < n; ++i) tmp[i] = y[i] + 0.5 * h * k2[i];
          rhs(tmp, k3);
          for (int i = 0; i < n; ++i) {
            tmp[i] = y[i] + h * k3[i];
            k2[i] += k3[i];  // the CPU's k2 + k3, summed before k3's storage takes k4
          }
          rhs(tmp, k3);
          for (int i = 0; i < n; ++i) y[i] += h / 6.0 * (k1[i] + 2.0 * k2[i] + k3[i]);
        }
        const double t_new = land ? target : t + h;
        ++steps_;
        if (const int code = Model::check(sh_, P_, y, bound_)) return diverge(t_new, code);
        if (crossed(y)) {  // the chord between the last two states
          const double r_new = risk(y);
          double c[S::n];
          auto chord = [&](double th, double* o) {
            for (int i = 0; i < n; ++i) o[i] = yold[i] + th * (y[i] - yold[i]);
          };
          const double th = locate_first_passage(chord, [&](const double* x) { return risk(x); }, threshold_, t,
                                                 t_new - t, r_old, r_new, c);
          if (th < 1.0) {
            chord(th, c);
            return converge(t + th * (t_new - t), c);
          }
          return converge(t_new, y);
        }
        t = t_new;
      }
      if (!record(y)) return;
    }
  }

  // The error norm of step_size.hpp, as the CPU lanes take it.
  __device__ double norm(const double* x, const double* ya, const double* yb) const {
    return step_size::norm(x, ya, yb, static_cast<std::size_t>(size()), A_.atol, A_.rtol);
  }

  __device__ void run_adaptive(double* y) {
    const int T = A_.T, n = size();
    while (next_ < T && A_.times[next_] <= 0.0)
      if (!record(y)) return;
    if (next_ == T) return;
    const double t_end = A_.times[T - 1];
    double k1[S::n], k2[S::n], k3[S::n], k4[S::n], k5[S::n], k6[S::n], k7[S::n], tmp[S::n], ynew[S::n], err[S::n];
    rhs(y, k1);
    double t = 0.0, h = A_.h0;
    if (!(A_.h0 > 0.0)) {  // initial step (Hairer, Norsett & Wanner, II.4), as the CPU lanes
      const double d0 = norm(y, y, y), d1 = norm(k1, y, y);
      const double hh = step_size::initial_guess(d0, d1);
      for (int i = 0; i < n; ++i) tmp[i] = y[i] + hh * k1[i];
      rhs(tmp, k2);
      for (int i = 0; i < n; ++i) err[i] = (k2[i] - k1[i]) / hh;
      h = step_size::initial(hh, d1, norm(err, y, y));
    }
    h = step_size::capped(h, A_.h_max);
    // stage: tmp = y + hs sum_j c_j k_j, in the CPU lanes' order of the sum
    while (true) {
      if (!(t < t_end)) return;  // completed
      if (!may_continue(t)) return;
      if (step_size::underflows(h, t)) return diverge(t, kUnderflow);
      const bool last = step_size::reaches_end(t, h, t_end);
      const double hs = last ? t_end - t : h;
      for (int i = 0; i < n; ++i) tmp[i] = y[i] + hs * (0.0 + dopri::a21 * k1[i]);
      rhs(tmp, k2);
      for (int i = 0; i < n; ++i) tmp[i] = y[i] + hs * ((0.0 + dopri::a31 * k1[i]) + dopri::a32 * k2[i]);
      rhs(tmp, k3);
      for (int i = 0; i < n; ++i)
        tmp[i] = y[i] + hs * (((0.0 + dopri::a41 * k1[i]) + dopri::a42 * k2[i]) + dopri::a43 * k3[i]);
      rhs(tmp, k4);
      for (int i = 0; i < n; ++i)
        tmp[i] = y[i] + hs * ((((0.0 + dopri::a51 * k1[i]) + dopri::a52 * k2[i]) + dopri::a53 * k3[i]) +
                              dopri::a54 * k4[i]);
      rhs(tmp, k5);
      for (int i = 0; i < n; ++i)
        tmp[i] = y[i] + hs * (((((0.0 + dopri::a61 * k1[i]) + dopri::a62 * k2[i]) + dopri::a63 * k3[i]) +
                               dopri::a64 * k4[i]) + dopri::a65 * k5[i]);
      rhs(tmp, k6);
      for (int i = 0; i < n; ++i)
        ynew[i] = y[i] + hs * (dopri::b1 * k1[i] + dopri::b3 * k3[i] + dopri::b4 * k4[i] + dopri::b5 * k5[i] +
                               dopri::b6 * k6[i]);
      rhs(ynew, k7);
      for (int i = 0; i < n; ++i)
        err[i] = hs * (dopri::e1 * k1[i] + dopri::e3 * k3[i] + dopri::e4 * k4[i] + dopri::e5 * k5[i] +
                       dopri::e6 * k6[i] + dopri::e7 * k7[i]);
      const double el = norm(err, y, ynew);
      const int code = Model::check(sh_, P_, ynew, bound_);
      if (!step_size::accepts(el)) {  // the step control of step_size.hpp, as the CPU lanes'
        ++rejected_;
        h = step_size::after_rejected(hs, el);
        continue;
      }
      const double t0 = t, hl = hs;
      const double t_new = last ? t_end : t0 + hl;
      if (code) return diverge(t_new, code);
      const double r_old = risk_now_;
      const bool cross = crossed(ynew);
      // Dense output (Hairer's dopri5 CONTD5) for the output times in (t, t_new) and for the crossing; its
      // coefficients r2..r5 reuse k2 (not needed after the step), tmp, err and k5's storage order as the CPU's.
      double* r2 = k2;
      double* r3 = tmp;
      double* r4 = err;
      double r5[S::n];
      const bool dense_needed = cross || (next_ < T && A_.times[next_] < t_new);
      if (dense_needed) {
        for (int i = 0; i < n; ++i) {
          r2[i] = ynew[i] - y[i];
          r3[i] = hl * k1[i] - r2[i];
          r4[i] = r2[i] - hl * k7[i] - r3[i];
          r5[i] = hl * (dopri::d1 * k1[i] + dopri::d3 * k3[i] + dopri::d4 * k4[i] + dopri::d5 * k5[i] +
                        dopri::d6 * k6[i] + dopri::d7 * k7[i]);
        }
      }
      auto dense = [&](double th, double* o) {
        const double th1 = 1.0 - th;
        for (int i = 0; i < n; ++i) o[i] = y[i] + th * (r2[i] + th1 * (r3[i] + th * (r4[i] + th1 * r5[i])));
      };
      double t_stop = t_new, th_stop = 1.0;
      double* c = k6;  // free after r5
      if (cross) {
        th_stop = locate_first_passage(dense, [&](const double* x) { return risk(x); }, threshold_, t0, hl, r_old,
                                       risk(ynew), c);
        if (th_stop < 1.0) t_stop = t0 + th_stop * hl;
      }
      while (next_ < T && A_.times[next_] < t_stop) {
        dense((A_.times[next_] - t0) / hl, k4);
        if (!record(k4)) return;
      }
      if (cross) {
        ++steps_;
        if (th_stop < 1.0) {
          dense(th_stop, c);
          return converge(t_stop, c);
        }
        return converge(t_new, ynew);
      }
      t = t_new;
      for (int i = 0; i < n; ++i) {
        y[i] = ynew[i];
        k1[i] = k7[i];  // FSAL
      }
      ++steps_;
      while (next_ < T && A_.times[next_] <= t)
        if (!record(y)) return;
      h = step_size::after_accepted(hl, el, A_.h_max);
    }
  }

  const OdeArgs& A_;
  int b_;
  LaneShape sh_;
  int n_;
  double P_[S::M * S::M], v_[S::M], ws_[S::ws];
  double lr_, lra_, noise_, bound_;
  bool rule_ = false;
  double threshold_ = 0.0, risk_now_ = 0.0;
  int status_ = kLive, reason_ = 0, next_ = 0;
  double stop_time_ = std::numeric_limits<double>::quiet_NaN();
  long long steps_ = 0, rhs_count_ = 0, rejected_ = 0;
};

// One kernel per stepping family. The arguments stay in the parameter space (__grid_constant__: the member's
// reference to them needs no local copy).
#ifndef TWOLAYER_ODE_MIN_BLOCKS
#define TWOLAYER_ODE_MIN_BLOCKS 1
#endif
template <Activation G, int KC, int MC, Stepping St>
__global__ void __launch_bounds__(128, TWOLAYER_ODE_MIN_BLOCKS) ode_members_kernel(const __grid_constant__ OdeArgs A) {
  const int b = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b >= A.B) return;
  Member<G, KC, MC, St> m(A, b);
  m.run();
  m.finish();
}

// The launchers, one translation unit per size (ode_erf_*.cu, compiled in parallel): ode_launcher(G, KC, MC)
// defines launch_members_<G>_<KC>_<MC>, which ode_batch.cu picks by the batch's shape.
// threads: per block, at most 128 (the kernels' launch bounds).
using OdeLaunch = void (*)(const OdeArgs&, unsigned, unsigned, cudaStream_t);
#define TWOLAYER_ODE_LAUNCHER(G, KC, MC)                                                                       \
  void launch_members_##G##_##KC##_##MC(const OdeArgs& A, unsigned blocks, unsigned threads, cudaStream_t s) { \
    if (A.adaptive)                                                                                              \
      ode_members_kernel<Activation::G, KC, MC, Stepping::Adaptive><<<blocks, threads, 0, s>>>(A);               \
    else if (A.rk4)                                                                                              \
      ode_members_kernel<Activation::G, KC, MC, Stepping::Rk4><<<blocks, threads, 0, s>>>(A);                    \
    else                                                                                                         \
      ode_members_kernel<Activation::G, KC, MC, Stepping::Euler><<<blocks, threads, 0, s>>>(A);                  \
  }
#define TWOLAYER_ODE_LAUNCHER_DECL(G, KC, MC) \
  void launch_members_##G##_##KC##_##MC(const OdeArgs& A, unsigned blocks, unsigned threads, cudaStream_t s);

}  // namespace twolayer::cuda
