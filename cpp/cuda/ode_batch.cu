// The GPU batch driver of the order-parameter ODE: members in chunks (device buffers for two chunks in flight, each on
// its own stream, so that one chunk's rows are copied back and handed to the sink while the next integrates), the
// kernel of the batch's shape (ode_member.cuh), Ctrl-C and progress polled while a kernel runs, and the members'
// IntegrateResult (statuses and messages as on the CPU, run_messages.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device.cuh"
#include "ode_member.cuh"
#include "twolayer/cancel.hpp"
#include "twolayer/cuda.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/integrators.hpp"
#include "twolayer/run_messages.hpp"

namespace twolayer::cuda {

TWOLAYER_ODE_LAUNCHER_DECL(Erf, 1, 1)
TWOLAYER_ODE_LAUNCHER_DECL(Erf, 2, 2)
TWOLAYER_ODE_LAUNCHER_DECL(Erf, 3, 3)
TWOLAYER_ODE_LAUNCHER_DECL(Erf, 4, 4)
TWOLAYER_ODE_LAUNCHER_DECL(Erf, 8, 8)
TWOLAYER_ODE_LAUNCHER_DECL(Erf, 0, 0)

// Sizes compiled with K = M fixed (every loop unrolled); other shapes with K, M <= kRuntimeUnits at run time.
bool fixed_size(int K, int M) { return K == M && (K <= 4 || K == 8); }

OdeLaunch select_launch(int K, int M) {
  if (K == M) switch (K) {
      case 1: return &launch_members_Erf_1_1;
      case 2: return &launch_members_Erf_2_2;
      case 3: return &launch_members_Erf_3_3;
      case 4: return &launch_members_Erf_4_4;
      case 8: return &launch_members_Erf_8_8;
      default: break;
    }
  return &launch_members_Erf_0_0;
}

namespace {

// One chunk's buffers: inputs (y0, P, v and six per-member numbers), outputs (rows, final rows, per-member results),
// on the device and pinned on the host, laid out as one block of doubles and one of integers.
struct ChunkLayout {
  std::size_t B, n, M, T;
  // doubles: y0 B n | P B M M | v B M | lr, lra, noise, bound, risk_tol, risk_rtol B each || rows B T (n + 1) |
  // fin B (n + 2) | stop_time B | threshold B
  std::size_t in_doubles() const { return B * (n + M * M + M + 6); }
  std::size_t out_doubles() const { return B * (T * (n + 1) + n + 2 + 2); }
  // integers (8 bytes): n_steps, n_rhs, n_rej B each; status, reason, n_rec B each (as int, packed two per slot)
  std::size_t out_words() const { return 3 * B + (3 * B + 1) / 2; }
  std::size_t bytes() const { return 8 * (in_doubles() + out_doubles() + out_words()); }
};

struct ChunkBuffers {
  DeviceBuffer<double> dev;
  PinnedBuffer<double> host;
  explicit ChunkBuffers(std::size_t doubles) : dev(doubles), host(doubles) {}
};

// Aims A at a chunk's buffers (base: its doubles on the device).
void point(OdeArgs& A, const ChunkLayout& L, double* base) {
  const std::size_t B = L.B;
  double* p = base;
  auto take = [&](std::size_t count) {
    double* q = p;
    p += count;
    return q;
  };
  A.y0 = take(B * L.n);
  A.P = take(B * L.M * L.M);
  A.v = take(B * L.M);
  A.lr = take(B);
  A.lra = take(B);
  A.noise = take(B);
  A.bound = take(B);
  A.risk_tol = take(B);
  A.risk_rtol = take(B);
  A.rows = take(B * L.T * (L.n + 1));
  A.fin = take(B * (L.n + 2));
  A.stop_time = take(B);
  A.threshold = take(B);
  auto* w = reinterpret_cast<long long*>(p);
  A.n_steps = w;
  A.n_rhs = w + B;
  A.n_rej = w + 2 * B;
  auto* i = reinterpret_cast<int*>(w + 3 * B);
  A.status = i;
  A.reason = i + B;
  A.n_rec = i + 2 * B;
}

}  // namespace

std::string ode_unsupported(const OdeModel& m, const IntegrateOptions& opt) {
  if (m.target) return "polynomial targets are integrated on the CPU only";
  if (!opt.schedule.identity()) return "learning-rate schedules are integrated on the CPU only";
  if (m.student != Activation::Erf || m.teacher != Activation::Erf)
    return std::string("the GPU integrates committees of erf units (student and teacher), got student '") +
           activation_name(m.student) + "' and teacher '" + activation_name(m.teacher) + "'";
  if (!fixed_size(m.K, m.M) && (m.K > kRuntimeUnits || m.M > kRuntimeUnits))
    return "the GPU integrates K = M in {1, ..., 4, 8} or K, M <= " + std::to_string(kRuntimeUnits) + ", got K = " +
           std::to_string(m.K) + ", M = " + std::to_string(m.M);
  return "";
}

std::vector<IntegrateResult> integrate_batch(const std::vector<OdeModel>& models,
                                             const std::vector<const double*>& y0s, const IntegrateOptions& opt,
                                             const std::vector<StopRule>& stops,
                                             std::atomic<std::int64_t>* finished, RowSink* sink) {
  const std::size_t B = models.size();
  std::vector<IntegrateResult> out(B);
  if (B == 0) return out;
  require_device();
  const OdeModel& m0 = models[0];
  for (const OdeModel& m : models) {
    const std::string why = ode_unsupported(m, opt);
    if (!why.empty()) throw DeviceUnavailable("device='cuda': " + why + "; use device='cpu'");
    if (m.K != m0.K || m.M != m0.M || m.regime != m0.regime || m.spherical != m0.spherical)
      throw std::invalid_argument("models: a GPU batch integrates members of one shape (K, M, regime, spherical)");
  }
  static std::mutex one_call;  // the device's buffers and streams serve one batch at a time
  std::lock_guard<std::mutex> lock(one_call);

  ChunkLayout L{0, m0.state_size(), static_cast<std::size_t>(m0.M), opt.times.size()};
  // Chunk size: two chunks in flight within the usable device memory, pinned buffers of at most 1 GiB each, and at
  // least four chunks for large batches (the copy of one overlaps the next's integration).
  L.B = 1;
  const std::size_t per_member = ChunkLayout{1, L.n, L.M, L.T}.bytes();
  const std::size_t by_memory = std::max<std::size_t>(1, usable_memory() / (2 * per_member));
  const std::size_t by_pinned = std::max<std::size_t>(1, (std::size_t{1} << 30) / per_member);
  const std::size_t by_overlap = std::max<std::size_t>(32768, (B + 3) / 4);
  const std::size_t chunk = std::min({B, by_memory, by_pinned, by_overlap});
  const std::size_t n_chunks = (B + chunk - 1) / chunk;
  L.B = chunk;
  const std::size_t doubles = L.in_doubles() + L.out_doubles() + L.out_words();

  OdeArgs base;
  base.K = m0.K;
  base.M = m0.M;
  base.n = static_cast<int>(L.n);
  base.T = static_cast<int>(L.T);
  base.online = m0.regime == Regime::Online;
  base.spherical = m0.spherical;
  base.adaptive = opt.method == Method::Adaptive;
  base.rk4 = opt.method == Method::Rk4;
  base.dt = opt.dt;
  base.rtol = opt.rtol;
  base.atol = opt.atol;
  base.h0 = opt.h0;
  base.h_max = opt.h_max;
  base.max_steps = opt.max_steps;
  DeviceBuffer<double> times(L.T);
  DeviceBuffer<int> cancel(1);
  DeviceBuffer<unsigned long long> done(2);
  Stream streams[2], control;
  Event finished_ev[2];
  copy_to_device(times.get(), opt.times.data(), L.T, control);
  PinnedBuffer<int> flag(1);
  PinnedBuffer<unsigned long long> done_host(2);
  flag[0] = 0;
  done_host[0] = done_host[1] = 0;
  copy_to_device(cancel.get(), flag.get(), 1, control);
  copy_to_device(done.get(), done_host.get(), 2, control);
  control.sync();
  base.times = times.get();
  base.cancel = cancel.get();
  const OdeLaunch launch = select_launch(m0.K, m0.M);

  std::vector<ChunkBuffers> bufs;
  bufs.reserve(2);
  for (std::size_t s = 0; s < std::min<std::size_t>(2, n_chunks); ++s) bufs.emplace_back(doubles);
  std::size_t first[2] = {0, 0}, count[2] = {0, 0};
  bool in_flight[2] = {false, false}, cancel_sent = false;
  std::int64_t reported = 0;

  // Waits for slot s's chunk, polling Ctrl-C (sent to the kernels through the device flag) and progress.
  auto wait = [&](int s) {
    while (!finished_ev[s].ready()) {
      if (!cancel_sent && cancel_requested()) {
        flag[0] = 1;
        copy_to_device(cancel.get(), flag.get(), 1, control);
        cancel_sent = true;
      }
      if (finished) {
        copy_to_host(done_host.get(), done.get(), 2, control);
        control.sync();
        const auto d = static_cast<std::int64_t>(done_host[0] + done_host[1]);
        finished->fetch_add(d - reported, std::memory_order_relaxed);
        reported = d;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    finished_ev[s].wait();
  };
  // Slot s's finished chunk into the results and the sink.
  auto deliver = [&](int s) {
    OdeArgs A = base;
    ChunkLayout C = L;
    C.B = chunk;
    point(A, C, bufs[s].host.get());
    for (std::size_t i = 0; i < count[s]; ++i) {
      const std::size_t b = first[s] + i;
      IntegrateResult& r = out[b];
      const std::size_t w = L.n + 1;
      const double* rows = A.rows + i * L.T * w;
      for (int j = 0; j < A.n_rec[i]; ++j) sink->row(b, opt.times[j], rows + j * w + 1, rows[j * w]);
      const double* fin = A.fin + i * (L.n + 2);
      r.n_steps = A.n_steps[i];
      r.n_rhs = A.n_rhs[i];
      r.n_rejected = A.n_rej[i];
      const double t = A.stop_time[i];
      switch (A.status[i]) {
        case kCompleted:
          r.message = completed_message(L.T ? opt.times.back() : 0.0, r.n_steps, r.n_rhs);
          break;
        case kConverged:
          sink->row(b, fin[0], fin + 2, fin[1]);
          r.status = "converged";
          r.stop_time = t;
          r.message = converged_message(fin[1], A.threshold[i], stops[b], t);
          break;
        case kDiverged: {
          const char* why = A.reason[i] == kUnderflow ? kStepUnderflow : divergence_message(A.reason[i]);
          r.status = "diverged";
          r.stop_time = t;
          r.message = diverged_message(t, why ? why : "unknown");
          break;
        }
        case kMaxSteps:
          r.status = "max_steps";
          r.stop_time = t;
          r.message = max_steps_message(opt.max_steps, t);
          break;
        default:
          r.status = "interrupted";
          r.stop_time = t;
          r.message = interrupted_message(t, r.n_steps);
          break;
      }
    }
    in_flight[s] = false;
  };

  for (std::size_t c = 0; c < n_chunks; ++c) {
    const int s = static_cast<int>(c % 2);
    if (in_flight[s]) {
      wait(s);
      deliver(s);
    }
    first[s] = c * chunk;
    count[s] = std::min(chunk, B - first[s]);
    if (cancel_requested()) break;  // this chunk and the later ones never start
    // inputs, member-major, into the pinned buffer, then one copy
    OdeArgs A = base;
    A.B = static_cast<int>(count[s]);
    ChunkLayout C = L;
    C.B = chunk;
    point(A, C, bufs[s].host.get());
    const std::size_t n = L.n, M = L.M;
    for (std::size_t i = 0; i < count[s]; ++i) {
      const std::size_t b = first[s] + i;
      const OdeModel& m = models[b];
      std::memcpy(const_cast<double*>(A.y0) + i * n, y0s[b], n * sizeof(double));
      std::memcpy(const_cast<double*>(A.P) + i * M * M, m.P.data(), M * M * sizeof(double));
      std::memcpy(const_cast<double*>(A.v) + i * M, m.v.data(), M * sizeof(double));
      const_cast<double*>(A.lr)[i] = m.lr;
      const_cast<double*>(A.lra)[i] = m.lr_readout;
      const_cast<double*>(A.noise)[i] = m.noise;
      const_cast<double*>(A.bound)[i] = divergence_bound(y0s[b], n, m.P.data(), m.P.size(), m.v.data(), m.v.size());
      const_cast<double*>(A.risk_tol)[i] = stops[b].risk_tol;
      const_cast<double*>(A.risk_rtol)[i] = stops[b].risk_rtol;
    }
    copy_to_device(bufs[s].dev.get(), bufs[s].host.get(), L.in_doubles(), streams[s]);
    point(A, C, bufs[s].dev.get());
    A.done = done.get() + s;
    launch(A, blocks_for(count[s]), streams[s].get());
    check(cudaGetLastError(), "kernel launch");
    // outputs back (the input part is not copied)
    copy_to_host(bufs[s].host.get() + L.in_doubles(), bufs[s].dev.get() + L.in_doubles(),
                 L.out_doubles() + L.out_words(), streams[s]);
    finished_ev[s].record(streams[s]);
    in_flight[s] = true;
    // the other slot's chunk is handed over while this one integrates
    const int o = 1 - s;
    if (in_flight[o]) {
      wait(o);
      deliver(o);
    }
  }
  for (int s = 0; s < 2; ++s)
    if (in_flight[s]) {
      wait(s);
      deliver(s);
    }
  // members of chunks that never started (Ctrl-C before them)
  for (IntegrateResult& r : out)
    if (r.n_steps == 0 && r.n_rhs == 0 && r.status == "completed" && r.message.empty()) {
      r.status = "interrupted";
      r.stop_time = 0.0;
      r.message = "interrupted before it started";
    }
  if (finished) finished->fetch_add(static_cast<std::int64_t>(B) - reported, std::memory_order_relaxed);
  return out;
}

}  // namespace twolayer::cuda
