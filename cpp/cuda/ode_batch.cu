// The GPU batch driver of the order-parameter ODE: members in chunks (device buffers for two chunks in flight, each on
// its own stream, so that one chunk's rows are copied back and handed to the sink while the next integrates), the
// kernel of the batch's shape (ode_member.cuh), Ctrl-C and progress polled while a kernel runs, and the members'
// IntegrateResult (statuses and messages as on the CPU, run_messages.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
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
TWOLAYER_ODE_LAUNCHER_DECL(Relu, 2, 2)
TWOLAYER_ODE_LAUNCHER_DECL(Relu, 4, 4)
TWOLAYER_ODE_LAUNCHER_DECL(Relu, 0, 0)
TWOLAYER_ODE_LAUNCHER_DECL(Quadratic, 2, 2)
TWOLAYER_ODE_LAUNCHER_DECL(Quadratic, 4, 4)
TWOLAYER_ODE_LAUNCHER_DECL(Quadratic, 8, 8)
TWOLAYER_ODE_LAUNCHER_DECL(Quadratic, 0, 0)
TWOLAYER_ODE_LAUNCHER_DECL(Linear, 2, 2)
TWOLAYER_ODE_LAUNCHER_DECL(Linear, 4, 4)
TWOLAYER_ODE_LAUNCHER_DECL(Linear, 8, 8)
TWOLAYER_ODE_LAUNCHER_DECL(Linear, 0, 0)

// The sizes compiled with K = M fixed (every loop unrolled) for each activation; other shapes with K, M <=
// kRuntimeUnits at run time.
bool fixed_size(Activation g, int K, int M) {
  if (K != M) return false;
  if (g == Activation::Erf) return K <= 4 || K == 8;
  // relu at K = M = 8: the unrolled kernel (36 inlined I4 path integrals) takes ptxas over ten minutes: not built
  return K == 2 || K == 4 || (K == 8 && g != Activation::Relu);
}

OdeLaunch select_launch(Activation g, int K, int M) {
  const int k = fixed_size(g, K, M) ? K : 0;
#define TWOLAYER_ODE_PICK(G)                                 \
  switch (k) {                                               \
    case 1: return &launch_members_##G##_1_1;                \
    case 2: return &launch_members_##G##_2_2;                \
    case 3: return &launch_members_##G##_3_3;                \
    case 4: return &launch_members_##G##_4_4;                \
    case 8: return &launch_members_##G##_8_8;                \
    default: return &launch_members_##G##_0_0;               \
  }
#define TWOLAYER_ODE_PICK_EVEN(G)                            \
  switch (k) {                                               \
    case 2: return &launch_members_##G##_2_2;                \
    case 4: return &launch_members_##G##_4_4;                \
    case 8: return &launch_members_##G##_8_8;                \
    default: return &launch_members_##G##_0_0;               \
  }
  switch (g) {
    case Activation::Erf: TWOLAYER_ODE_PICK(Erf)
    case Activation::Relu:
      switch (k) {
        case 2: return &launch_members_Relu_2_2;
        case 4: return &launch_members_Relu_4_4;
        default: return &launch_members_Relu_0_0;
      }
    case Activation::Quadratic: TWOLAYER_ODE_PICK_EVEN(Quadratic)
    default: TWOLAYER_ODE_PICK_EVEN(Linear)
  }
#undef TWOLAYER_ODE_PICK
#undef TWOLAYER_ODE_PICK_EVEN
}

namespace {

// Threads per block of a launch of n members: 128, or 64 or 32 when blocks of 128 would not give every multiprocessor
// two of them, so that a small batch (K = M = 8 runs 10^4 members) spreads over all multiprocessors, and its members'
// local memory over all their L1 caches, rather than filling a few. TWOLAYER_GPU_ODE_THREADS = 32, 64 or 128 fixes
// the size (the benchmarks compare).
unsigned threads_for(std::size_t n) {
  if (const char* e = std::getenv("TWOLAYER_GPU_ODE_THREADS")) {
    const int forced = std::atoi(e);
    if (forced == 32 || forced == 64 || forced == 128) return static_cast<unsigned>(forced);
  }
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess || sms < 1) {
    cudaGetLastError();
    return 128;
  }
  unsigned threads = 128;
  while (threads > 32 && n < std::size_t{2} * threads * static_cast<std::size_t>(sms)) threads /= 2;
  return threads;
}

// Copies of (dst, src, count) doubles, shared among up to 16 host threads (pinned to pageable memory: the threads
// also share the page faults of fresh result arrays).
struct CopySpan {
  double* dst;
  const double* src;
  std::size_t n;
};
void parallel_copy(const std::vector<CopySpan>& spans) {
  std::size_t total = 0;
  for (const CopySpan& c : spans) total += c.n;
  const std::size_t by_size = total / (std::size_t{1} << 17);  // at least 1 MiB a thread
  const std::size_t workers =
      std::max<std::size_t>(1, std::min<std::size_t>({16, std::thread::hardware_concurrency(), by_size}));
  auto part = [&](std::size_t w) {  // doubles [w total / workers, (w + 1) total / workers) of the concatenation
    const std::size_t lo = w * total / workers, hi = (w + 1) * total / workers;
    std::size_t at = 0;
    for (const CopySpan& c : spans) {
      const std::size_t a = std::max(lo, at), b = std::min(hi, at + c.n);
      if (a < b) std::memcpy(c.dst + (a - at), c.src + (a - at), (b - a) * sizeof(double));
      at += c.n;
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < workers; ++w) pool.emplace_back(part, w);
  part(0);
  for (std::thread& t : pool) t.join();
}

// One chunk's buffers, one block of doubles on the device: inputs (y0, P, v and six per-member numbers) | small
// outputs (final rows, stop times, thresholds; counts as 8-byte integers, statuses as 4-byte ones) | the grid rows
// (Q, M, a, risk arrays). The pinned host mirror has the same layout: the rows come back into pinned memory at the
// copy engine's speed (a copy into pageable memory is staged by the driver and page-faults on fresh result arrays),
// and host threads move them on into the result's arrays while the next chunk integrates.
struct ChunkLayout {
  std::size_t B, n, K, M, T;
  std::size_t in_doubles() const { return B * (n + M * M + M + 6); }
  std::size_t small_doubles() const { return B * (n + 2 + 2) + 3 * B + (3 * B + 1) / 2; }
  std::size_t grid_doubles() const { return B * T * (n + 1); }
  std::size_t doubles() const { return in_doubles() + small_doubles() + grid_doubles(); }
};

// Aims A at a chunk's buffers (base: its doubles on the device or the host mirror).
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
  A.fin = take(B * (L.n + 2));
  A.stop_time = take(B);
  A.threshold = take(B);
  auto* w = reinterpret_cast<long long*>(take(3 * B + (3 * B + 1) / 2));
  A.n_steps = w;
  A.n_rhs = w + B;
  A.n_rej = w + 2 * B;
  auto* i = reinterpret_cast<int*>(w + 3 * B);
  A.status = i;
  A.reason = i + B;
  A.n_rec = i + 2 * B;
  A.Qr = take(B * L.T * L.K * L.K);
  A.Mr = take(B * L.T * L.K * L.M);
  A.ar = take(B * L.T * L.K);
  A.rr = take(B * L.T);
}

// The buffers of the two chunks in flight, kept from call to call (grown when a batch needs more): allocating
// pinned memory costs about as much as integrating a small batch.
struct Buffers {
  DeviceBuffer<double> dev[2];
  PinnedBuffer<double> host[2];
  void reserve(int s, std::size_t dev_doubles, std::size_t host_doubles) {
    if (dev[s].size() < dev_doubles) dev[s] = DeviceBuffer<double>();  // free before allocating more
    if (dev[s].size() < dev_doubles) dev[s] = DeviceBuffer<double>(dev_doubles);
    if (host[s].size() < host_doubles) host[s] = PinnedBuffer<double>();
    if (host[s].size() < host_doubles) host[s] = PinnedBuffer<double>(host_doubles);
  }
};

}  // namespace

std::string ode_unsupported(const OdeModel& m, const IntegrateOptions& opt) {
  if (m.target) return "polynomial targets are integrated on the CPU only";
  if (!opt.schedule.identity()) return "learning-rate schedules are integrated on the CPU only";
  if (m.student != m.teacher || !committee_lanes_activation(m.student))
    return std::string("the GPU integrates committees whose student and teacher are both erf, relu, quadratic or "
                       "linear, got student '") + activation_name(m.student) + "' and teacher '" +
           activation_name(m.teacher) + "'";
  if (!fixed_size(m.student, m.K, m.M) && (m.K > kRuntimeUnits || m.M > kRuntimeUnits))
    return std::string("the GPU integrates K = M in {") +
           (m.student == Activation::Erf ? "1, 2, 3, 4, 8" : m.student == Activation::Relu ? "2, 4" : "2, 4, 8") +
           "} or K, M <= " + std::to_string(kRuntimeUnits) + ", got K = " + std::to_string(m.K) + ", M = " +
           std::to_string(m.M);
  return "";
}

std::vector<IntegrateResult> integrate_batch(const std::vector<OdeModel>& models,
                                             const std::vector<const double*>& y0s, const IntegrateOptions& opt,
                                             const std::vector<StopRule>& stops,
                                             std::atomic<std::int64_t>* finished, RowSink* sink,
                                             double* gpu_seconds) {
  const std::size_t B = models.size();
  std::vector<IntegrateResult> out(B);
  if (B == 0) return out;
  require_device();
  const OdeModel& m0 = models[0];
  for (const OdeModel& m : models) {
    const std::string why = ode_unsupported(m, opt);
    if (!why.empty()) throw DeviceUnavailable("device='cuda': " + why + "; use device='cpu'");
    if (m.K != m0.K || m.M != m0.M || m.regime != m0.regime || m.spherical != m0.spherical ||
        m.student != m0.student || m.teacher != m0.teacher)
      throw std::invalid_argument(
          "models: a GPU batch integrates members of one shape (K, M, activations, regime, spherical)");
  }
  static std::mutex one_call;  // the device's buffers and streams serve one batch at a time
  std::lock_guard<std::mutex> lock(one_call);

  const RowSink::GridArrays* grid = sink->grid_arrays();  // rows straight into the result's arrays
  const std::size_t K = static_cast<std::size_t>(m0.K), M = static_cast<std::size_t>(m0.M), n = m0.state_size(),
                    T = opt.times.size();
  // Chunk size: two chunks in flight within the usable device memory (less what the buffers kept from an earlier
  // call hold already), at most 1 GiB of pinned memory each, and at least four chunks for large batches (the copy
  // of one overlaps the next's integration).
  static Buffers buffers;
  const ChunkLayout one{1, n, K, M, T};
  const std::size_t host_per_member = 8 * one.doubles();
  const std::size_t held = 8 * (buffers.dev[0].size() + buffers.dev[1].size());
  const std::size_t by_memory = std::max<std::size_t>(1, (usable_memory() + held) / (16 * one.doubles()));
  const std::size_t by_pinned = std::max<std::size_t>(1, (std::size_t{1} << 30) / host_per_member);
  const std::size_t by_overlap = std::max<std::size_t>(32768, (B + 3) / 4);
  const std::size_t most = std::min({B, by_memory, by_pinned, by_overlap});
  // chunks of equal size (not full ones and a remainder): the last chunk's rows are the only ones whose way into
  // the result's arrays no kernel hides, and a small remainder after a full chunk would hide none of the full one's
  const std::size_t n_chunks = (B + most - 1) / most;
  const std::size_t chunk = (B + n_chunks - 1) / n_chunks;
  const ChunkLayout L{chunk, n, K, M, T};
  const std::size_t mirrored = L.doubles();
  for (int s = 0; s < static_cast<int>(std::min<std::size_t>(2, n_chunks)); ++s)
    buffers.reserve(s, L.doubles(), mirrored);

  OdeArgs base;
  base.K = m0.K;
  base.M = m0.M;
  base.T = static_cast<int>(T);
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
  DeviceBuffer<double> times(T);
  DeviceBuffer<int> cancel(1);
  DeviceBuffer<unsigned long long> done(2);
  Stream streams[2], control;
  Event finished_ev[2], t_start(true), t_end[2] = {Event(true), Event(true)};
  // the grid rows come back in pieces of members (an event each), so that the host moves one piece into the
  // result's arrays while the next is copied
  constexpr int kPieces = 4;
  Event piece_ev[2][kPieces];
  double device_time = 0.0;
  copy_to_device(times.get(), opt.times.data(), T, control);
  PinnedBuffer<int> flag(1);
  PinnedBuffer<unsigned long long> done_host(2);
  flag[0] = 0;
  done_host[0] = done_host[1] = 0;
  copy_to_device(cancel.get(), flag.get(), 1, control);
  copy_to_device(done.get(), done_host.get(), 2, control);
  control.sync();
  base.times = times.get();
  base.cancel = cancel.get();
  const OdeLaunch launch = select_launch(m0.student, m0.K, m0.M);

  std::size_t first[2] = {0, 0}, count[2] = {0, 0};
  bool in_flight[2] = {false, false}, cancel_sent = false;
  std::size_t started = 0;  // members [0, started) were launched
  auto piece_members = [&](int s, int q) {  // members [first, last) of slot s's chunk in piece q
    const std::size_t per = (count[s] + kPieces - 1) / kPieces;
    return std::pair<std::size_t, std::size_t>{std::min(count[s], static_cast<std::size_t>(q) * per), std::min(count[s], static_cast<std::size_t>(q + 1) * per)};
  };
  std::int64_t reported = 0;

  // Waits for slot s's chunk, polling Ctrl-C (sent to the kernels through the device flag) and progress.
  auto wait = [&](int s) {
    while (!t_end[s].ready()) {
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
    t_end[s].wait();
    device_time = std::max(device_time, t_end[s].seconds_since(t_start));
  };
  // Slot s's finished chunk into the results and the sink.
  auto deliver = [&](int s) {
    OdeArgs A = base;
    point(A, L, buffers.host[s].get());
    if (!grid) finished_ev[s].wait();
    std::vector<double> y(n);
    const std::size_t kk = K * K, km = K * M;
    const double *Qr = A.Qr, *Mr = A.Mr, *ar = A.ar, *rr = A.rr;  // the mirror, or the result's arrays
    std::size_t base_row = 0;
    if (grid) {  // piece by piece from the pinned mirror into the result's arrays, as each piece arrives
      const std::size_t r0 = first[s] * T;
      for (int q = 0; q < kPieces; ++q) {
        const auto [i0, i1] = piece_members(s, q);
        piece_ev[s][q].wait();
        const std::size_t a = i0 * T, rows = (i1 - i0) * T;
        parallel_copy({{grid->Q + (r0 + a) * kk, A.Qr + a * kk, rows * kk},
                       {grid->M + (r0 + a) * km, A.Mr + a * km, rows * km},
                       {grid->a + (r0 + a) * K, A.ar + a * K, rows * K},
                       {grid->risk + r0 + a, A.rr + a, rows}});
      }
      Qr = grid->Q;
      Mr = grid->M;
      ar = grid->a;
      rr = grid->risk;
      base_row = r0;
    }
    auto state_at = [&](std::size_t i, int j) {  // member i's grid row j as a state [Q, M, a]
      const std::size_t r = base_row + i * T + static_cast<std::size_t>(j);
      std::copy(Qr + r * kk, Qr + (r + 1) * kk, y.begin());
      std::copy(Mr + r * km, Mr + (r + 1) * km, y.begin() + kk);
      std::copy(ar + r * K, ar + (r + 1) * K, y.begin() + kk + km);
      return rr[r];
    };
    for (std::size_t i = 0; i < count[s]; ++i) {
      const std::size_t b = first[s] + i;
      IntegrateResult& r = out[b];
      const int rec = A.n_rec[i];
      if (grid) {
        sink->grid_filled(b, static_cast<std::size_t>(rec));
        if (rec > 0 && A.status[i] != kConverged) {
          const double risk = state_at(i, rec - 1);
          sink->final_row(b, opt.times[rec - 1], y.data(), risk);
        }
      } else {
        for (int j = 0; j < rec; ++j) {
          const double risk = state_at(i, j);
          sink->row(b, opt.times[j], y.data(), risk);
        }
      }
      const double* fin = A.fin + i * (n + 2);
      r.n_steps = A.n_steps[i];
      r.n_rhs = A.n_rhs[i];
      r.n_rejected = A.n_rej[i];
      const double t = A.stop_time[i];
      switch (A.status[i]) {
        case kCompleted:
          r.message = completed_message(T ? opt.times.back() : 0.0, r.n_steps, r.n_rhs);
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
    point(A, L, buffers.host[s].get());
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
    double* dev = buffers.dev[s].get();
    if (c == 0) t_start.record(streams[s]);
    copy_to_device(dev, buffers.host[s].get(), L.in_doubles(), streams[s]);
    point(A, L, dev);
    A.done = done.get() + s;
    const unsigned threads = threads_for(count[s]);
    launch(A, static_cast<unsigned>((count[s] + threads - 1) / threads), threads, streams[s].get());
    check(cudaGetLastError(), "kernel launch");
    t_end[s].record(streams[s]);
    // outputs back (not the inputs): the small ones to the mirror, and the grid rows there too unless the result's
    // arrays take them (deliver(): copied once the kernel is done, while the next chunk integrates)
    const std::size_t small_at = L.in_doubles();
    copy_to_host(buffers.host[s].get() + small_at, dev + small_at, L.small_doubles(), streams[s]);
    {
      OdeArgs H = base, D = base;
      point(H, L, buffers.host[s].get());
      point(D, L, dev);
      const std::size_t kk = K * K, km = K * M;
      for (int q = 0; q < kPieces; ++q) {
        const auto [i0, i1] = piece_members(s, q);
        const std::size_t a = i0 * T, rows = (i1 - i0) * T;
        copy_to_host(H.Qr + a * kk, D.Qr + a * kk, rows * kk, streams[s]);
        copy_to_host(H.Mr + a * km, D.Mr + a * km, rows * km, streams[s]);
        copy_to_host(H.ar + a * K, D.ar + a * K, rows * K, streams[s]);
        copy_to_host(H.rr + a, D.rr + a, rows, streams[s]);
        piece_ev[s][q].record(streams[s]);
      }
    }
    finished_ev[s].record(streams[s]);
    in_flight[s] = true;
    started = first[s] + count[s];
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
  // members of chunks that never started (Ctrl-C before them): no rows
  for (std::size_t b = started; b < B; ++b) {
    out[b].status = "interrupted";
    out[b].stop_time = 0.0;
    out[b].message = "interrupted before it started";
  }
  if (grid && started < B) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const std::size_t r0 = started * T, r1 = B * T;
    std::fill(grid->Q + r0 * K * K, grid->Q + r1 * K * K, nan);
    std::fill(grid->M + r0 * K * M, grid->M + r1 * K * M, nan);
    std::fill(grid->a + r0 * K, grid->a + r1 * K, nan);
    std::fill(grid->risk + r0, grid->risk + r1, nan);
  }
  if (finished) finished->fetch_add(static_cast<std::int64_t>(B) - reported, std::memory_order_relaxed);
  if (gpu_seconds) *gpu_seconds = device_time;
  return out;
}

}  // namespace twolayer::cuda
