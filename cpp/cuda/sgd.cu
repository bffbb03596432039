// The device side of online SGD ensembles (cuda.hpp: SgdEngine; the driver is sgd_simulate_cuda in sgd.cpp): one
// thread block per run, its weights resident in device memory. Per sample the block draws x (Philox + Box-Muller of
// rng.hpp, the CPU's own functions), reduces the K + M dot products over d (a fixed order: each thread its strided
// coordinates, then the warps, then the warp sums in order, so the results do not vary between launches), one thread
// forms the error and the coefficients with the CPU's per-sample functions (sgd_sample.hpp), and the block updates W.
// Only launches, memory and reductions here.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "device.cuh"
#include "twolayer/cuda.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/rng.hpp"
#include "twolayer/sgd.hpp"
#include "twolayer/sgd_sample.hpp"

namespace twolayer::cuda {

namespace {

constexpr int kThreads = 128;  // one block per run
constexpr int kWarps = kThreads / 32;
constexpr int kRed = 32;  // dot products reduced per pass
constexpr long long kLaunchWork = 1ll << 22;  // steps_per_launch's budget

// The problem as the kernels see it (sgd.hpp's SgdSpec, plus the per-run step factors of sgd.cpp's Run).
struct Problem {
  int K, M, d, B;
  double scale, inv_sqrt_s, blowup;
  Activation student, teacher;
  bool spherical;
  std::uint64_t seed;
  int biased;  // a run with biases: b per run (zeros when only the teacher has some), its state row ends with b
};

struct RunParams {
  std::uint32_t id;
  double gw, ga, sqrt_noise;  // lr sqrt(s) / (d B) (0: W fixed), lr_readout / (d B), sqrt(Delta)
  double gb;                  // lr_bias / (d B) (0: b fixed)
  int has_noise;
};

// Device arrays, run j at offset j times the per-run size.
struct State {
  double *W, *a, *norms, *x, *dW, *state;
  const double *Wt, *v;
  double* b;         // the student's biases (null without biases)
  const double* bt;  // the teacher's (null: none)
  const RunParams* params;
  int* active;            // 1 while the run advances
  int* fail_code;         // a DivergenceCode once the run stopped on the device
  long long* fail_step;
};

// put(v, sum_c A_v[c] B_v[c]) for v in [0, n), (A_v, B_v) = rows(v), summed over c in a fixed order; every thread
// must call it. red: kRed * kWarps doubles of shared memory.
template <class Rows, class Put>
__device__ void block_dots(int n, int d, Rows rows, double* red, Put put) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int v0 = 0; v0 < n; v0 += kRed) {
    const int nv = min(kRed, n - v0);
    for (int v = 0; v < nv; ++v) {
      const double *A, *B;
      rows(v0 + v, A, B);
      double s = 0.0;
      for (int c = tid; c < d; c += kThreads) s += A[c] * B[c];
      for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xFFFFFFFFu, s, off);
      if (lane == 0) red[v * kWarps + warp] = s;
    }
    __syncthreads();
    if (tid < nv) {
      double s = red[tid * kWarps];
      for (int w = 1; w < kWarps; ++w) s += red[tid * kWarps + w];
      put(v0 + tid, s);
    }
    __syncthreads();
  }
}

// Gaussians [first, first + d) of stream s into x: each thread whole Philox blocks (four Gaussians each).
__device__ void draw(const rng::StreamId& s, std::uint64_t first, int d, double* x) {
  const std::uint64_t g0 = first / 32, g1 = (first + static_cast<std::uint64_t>(d) - 1) / 32;
  const std::uint64_t items = (g1 - g0 + 1) * 8;
  for (std::uint64_t it = threadIdx.x; it < items; it += kThreads) {
    const std::uint64_t g = g0 + it / 8, b = it % 8;
    double z[4];
    rng::block_gaussians(s, 8 * g + b, z);
    for (int q = 0; q < 4; ++q) {
      const std::uint64_t i = 32 * g + 8 * q + b;
      if (i >= first && i < first + static_cast<std::uint64_t>(d)) x[i - first] = z[q];
    }
  }
}

// The sums into shared or global memory.
struct PutAt {
  double* out;
  __device__ void operator()(int v, double s) const { out[v] = s; }
};

// Q = W W^T / s, M = W Wt^T / s (the upper triangle of Q mirrored, as gram does), a and the biases b (when not null)
// of a run: its state row.
__device__ void overlaps(const Problem& p, const double* W, const double* Wt, const double* a, const double* b,
                         double* red, double* state) {
  const int K = p.K, M = p.M, d = p.d;
  const int nq = K * (K + 1) / 2;
  const double alpha = 1.0 / p.scale;
  // entry v < nq: Q's (i, k), i <= k, row by row; else M's (u / M, u % M), u = v - nq
  const auto qk = [K](int v, int& i, int& k) {
    i = 0;
    while (v >= K - i) v -= K - i++;
    k = i + v;
  };
  block_dots(
      nq + K * M, d,
      [&](int v, const double*& A, const double*& B) {
        int i, k;
        if (v < nq) {
          qk(v, i, k);
          A = W + static_cast<std::size_t>(i) * d;
          B = W + static_cast<std::size_t>(k) * d;
        } else {
          A = W + static_cast<std::size_t>((v - nq) / M) * d;
          B = Wt + static_cast<std::size_t>((v - nq) % M) * d;
        }
      },
      red,
      [&](int v, double s) {
        if (v < nq) {
          int i, k;
          qk(v, i, k);
          state[i * K + k] = state[k * K + i] = s * alpha;
        } else {
          state[K * K + (v - nq)] = s * alpha;
        }
      });
  for (int i = threadIdx.x; i < K; i += kThreads) state[K * K + K * M + i] = a[i];
  if (b)
    for (int i = threadIdx.x; i < K; i += kThreads) state[K * K + K * M + K + i] = b[i];
  __syncthreads();
}

// The doubles of a run's state row: (Q, M, a), and b with biases.
__host__ __device__ inline std::size_t state_size(const Problem& p) {
  return static_cast<std::size_t>(p.K) * (p.K + p.M + 1) + (p.biased ? p.K : 0);
}

// Shared memory of the kernels: lam (K + M + 1), sig, coef, rc, da, db (K each), red (kRed kWarps).
std::size_t shared_doubles(const Problem& p) {
  return static_cast<std::size_t>(p.K + p.M + 1) + 5 * static_cast<std::size_t>(p.K) + kRed * kWarps;
}

struct Shared {
  double *lam, *sig, *coef, *rc, *da, *db, *red;
  __device__ Shared(double* sh, const Problem& p) {
    lam = sh;
    sig = lam + p.K + p.M + 1;
    coef = sig + p.K;
    rc = coef + p.K;
    da = rc + p.K;
    db = da + p.K;
    red = db + p.K;
  }
};

__device__ void fail(const State& st, int j, int code, long long step) {
  if (threadIdx.x == 0) {
    st.fail_code[j] = code;
    st.fail_step[j] = step;
    st.active[j] = 0;
  }
}

// |w_i|^2 of every unit into norms (all threads).
__device__ void unit_norms(const Problem& p, const double* W, double* red, double* norms) {
  block_dots(
      p.K, p.d,
      [&](int i, const double*& A, const double*& B) { A = B = W + static_cast<std::size_t>(i) * p.d; }, red,
      PutAt{norms});
}

// Rescales every w_i to |w_i|^2 = s (sgd.cpp's project); false (and the run failed) where a norm is not > 0.
__device__ bool project(const Problem& p, const State& st, int j, double* W, double* norms, long long step,
                        double* red, int* bad) {
  unit_norms(p, W, red, norms);
  if (threadIdx.x == 0) {
    *bad = 0;
    for (int i = 0; i < p.K; ++i)
      if (!sgd_sphere_ok(norms[i])) *bad = 1;
  }
  __syncthreads();
  if (*bad) {
    fail(st, j, kNotFinite, step);
    return false;
  }
  for (int i = 0; i < p.K; ++i) {
    const double r = sqrt(p.scale / norms[i]);
    double* w = W + static_cast<std::size_t>(i) * p.d;
    for (int c = threadIdx.x; c < p.d; c += kThreads) w[c] *= r;
  }
  __syncthreads();
  unit_norms(p, W, red, norms);
  return true;
}

// The starts: copy, project (spherical), overlaps. b0: the student's start biases (null: zeros; used with biases).
__global__ void sgd_init(Problem p, State st, const double* W0, const double* a0, const double* b0,
                         std::size_t init_stride) {
  extern __shared__ double shm[];
  __shared__ int bad;
  const Shared sh(shm, p);
  const int j = blockIdx.x;
  const std::size_t Kd = static_cast<std::size_t>(p.K) * p.d;
  double* W = st.W + j * Kd;
  double* a = st.a + static_cast<std::size_t>(j) * p.K;
  const double* w0 = W0 + j * init_stride * Kd;
  for (std::size_t c = threadIdx.x; c < Kd; c += kThreads) W[c] = w0[c];
  for (int i = threadIdx.x; i < p.K; i += kThreads) a[i] = a0[j * init_stride * p.K + i];
  double* b = p.biased ? st.b + static_cast<std::size_t>(j) * p.K : nullptr;
  if (b)
    for (int i = threadIdx.x; i < p.K; i += kThreads) b[i] = b0 ? b0[j * init_stride * p.K + i] : 0.0;
  if (threadIdx.x == 0) {
    st.active[j] = 1;
    st.fail_code[j] = 0;
    st.fail_step[j] = 0;
  }
  __syncthreads();
  double* norms = st.norms + static_cast<std::size_t>(j) * p.K;
  if (p.spherical) {
    if (!project(p, st, j, W, norms, 0, sh.red, &bad)) return;
  }
  overlaps(p, W, st.Wt, a, b, sh.red, st.state + static_cast<std::size_t>(j) * state_size(p));
}

// Steps [from, to) of every active run (sgd.cpp's Run::do_step for online samples); then its overlaps.
__global__ void sgd_advance(Problem p, State st, long long from, long long to, int want_overlaps) {
  extern __shared__ double shm[];
  __shared__ int bad;
  const int j = blockIdx.x;
  if (!st.active[j]) return;
  const Shared sh(shm, p);
  const int K = p.K, M = p.M, d = p.d, B = p.B, tid = threadIdx.x;
  const std::size_t Kd = static_cast<std::size_t>(K) * d;
  double* W = st.W + j * Kd;
  double* dW = st.dW ? st.dW + j * Kd : nullptr;
  double* a = st.a + static_cast<std::size_t>(j) * K;
  double* b = p.biased ? st.b + static_cast<std::size_t>(j) * K : nullptr;
  double* norms = st.norms + static_cast<std::size_t>(j) * K;
  double* x = st.x + static_cast<std::size_t>(j) * d;
  const RunParams rp = st.params[j];
  const rng::StreamId inputs{p.seed, rp.id, rng::kInputs}, noise{p.seed, rp.id, rng::kLabelNoise};
  const bool fused_sphere = p.spherical && B == 1;
  const int n_dot = K + M + (fused_sphere ? 1 : 0);
  for (long long step = from; step < to; ++step) {
    for (int i = tid; i < K; i += kThreads) sh.da[i] = sh.db[i] = 0.0;
    if (dW)
      for (std::size_t c = tid; c < Kd; c += kThreads) dW[c] = 0.0;
    for (int nu = 0; nu < B; ++nu) {
      const std::uint64_t row = static_cast<std::uint64_t>(step) * B + nu;
      draw(inputs, row * static_cast<std::uint64_t>(d), d, x);
      __syncthreads();
      block_dots(
          n_dot, d,
          [&](int v, const double*& A, const double*& Bv) {
            A = v < K ? W + static_cast<std::size_t>(v) * d : v < K + M ? st.Wt + static_cast<std::size_t>(v - K) * d : x;
            Bv = x;
          },
          sh.red, PutAt{sh.lam});
      if (tid == 0) {
        const double xi = rp.has_noise ? rng::gaussian_at(noise, row) : 0.0;
        const double y =
            sgd_committee_label(p.teacher, sh.lam + K, st.v, M, p.inv_sqrt_s, rp.sqrt_noise, xi, st.bt);
        const double E = y - sgd_output(p.student, sh.lam, a, K, p.inv_sqrt_s, sh.sig, b);
        bad = sgd_error_ok(E, p.blowup) ? 0 : kSampleOverflow;
        for (int i = 0; i < K && !bad; ++i) {
          const double c = sgd_weight_coef(p.student, rp.gw, a[i], sh.lam[i], p.inv_sqrt_s, E, b, i);
          if (rp.ga != 0.0) sh.da[i] += sgd_readout_step(rp.ga, sh.sig[i], E);
          if (rp.gb != 0.0) sh.db[i] += sgd_weight_coef(p.student, rp.gb, a[i], sh.lam[i], p.inv_sqrt_s, E, b, i);
          sh.coef[i] = c;
          sh.rc[i] = c;
          if (fused_sphere && rp.gw != 0.0) {
            const double n_new = sgd_sphere_norm(norms[i], c, sh.lam[i], sh.lam[K + M]);
            if (!sgd_sphere_ok(n_new)) bad = kNotFinite;
            else {
              sh.coef[i] = sqrt(p.scale / n_new);  // r
              sh.rc[i] = sh.coef[i] * c;           // r c
            }
          }
        }
      }
      __syncthreads();
      if (bad) {
        fail(st, j, bad, step);
        return;
      }
      if (rp.gw != 0.0) {
        for (int i = 0; i < K; ++i) {
          double* w = W + static_cast<std::size_t>(i) * d;
          if (fused_sphere) {  // w <- r w + r c x
            const double r = sh.coef[i], rc = sh.rc[i];
            for (int c = tid; c < d; c += kThreads) w[c] = r * w[c] + rc * x[c];
          } else if (dW) {  // the batch's sum, added after its last sample (the dots use the step's W)
            const double cf = sh.coef[i];
            double* g = dW + static_cast<std::size_t>(i) * d;
            for (int c = tid; c < d; c += kThreads) g[c] += cf * x[c];
          } else {
            const double cf = sh.coef[i];
            for (int c = tid; c < d; c += kThreads) w[c] += cf * x[c];
          }
        }
      }
      __syncthreads();  // x is drawn anew for the next sample
      if (fused_sphere && rp.gw != 0.0) unit_norms(p, W, sh.red, norms);
    }
    if (dW && rp.gw != 0.0) {
      for (std::size_t c = tid; c < Kd; c += kThreads) W[c] += dW[c];
      __syncthreads();
      if (p.spherical && !project(p, st, j, W, norms, step, sh.red, &bad)) return;
    }
    for (int i = tid; i < K; i += kThreads) a[i] += sh.da[i];
    if (rp.gb != 0.0)
      for (int i = tid; i < K; i += kThreads) b[i] += sh.db[i];
    __syncthreads();
  }
  if (want_overlaps) overlaps(p, W, st.Wt, a, b, sh.red, st.state + static_cast<std::size_t>(j) * state_size(p));
}

// Gaussians [first, first + n) by the SGD kernels' own code: draw (each block 4096 of them) or, one_by_one,
// gaussian_at per index (the label noise).
constexpr std::size_t kDrawChunk = 4096;
__global__ void gaussians_kernel(rng::StreamId s, std::uint64_t first, std::size_t n, int one_by_one, double* out) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * kDrawChunk;
  const int len = static_cast<int>(min(kDrawChunk, n - off));
  if (one_by_one) {
    for (int i = threadIdx.x; i < len; i += kThreads) out[off + i] = rng::gaussian_at(s, first + off + i);
  } else {
    draw(s, first + off, len, out + off);
  }
}

// Device bytes one run takes: W (and dW for batches), a, norms, b, x, state (with b), flags.
std::size_t run_bytes(const SgdSpec& sp) {
  const std::size_t Kd = static_cast<std::size_t>(sp.K) * sp.d;
  return sizeof(double) * (Kd * (sp.batch > 1 ? 2 : 1) + 3 * static_cast<std::size_t>(sp.K) + sp.d +
                           static_cast<std::size_t>(sp.K) * (sp.K + sp.M + 2)) +
         sizeof(RunParams) + 2 * sizeof(int) + sizeof(long long);
}

}  // namespace

struct SgdEngine::Impl {
  Problem p{};
  std::size_t n = 0, n_state = 0, shared_bytes = 0;
  int concurrent = 1;  // blocks the device runs at once
  Stream stream;
  DeviceBuffer<double> W, a, norms, x, dW, state, Wt, v, b, bt;
  DeviceBuffer<RunParams> params;
  DeviceBuffer<int> active, fail_code;
  DeviceBuffer<long long> fail_step;
  PinnedBuffer<double> h_state;
  PinnedBuffer<int> h_active, h_code;
  PinnedBuffer<long long> h_step;
  bool active_dirty = false;
  std::vector<double> h_W, h_a, h_b;  // fetch_weights
  State st{};

  void fetch_flags() {
    copy_to_host(h_code.get(), fail_code.get(), n, stream);
    copy_to_host(h_step.get(), fail_step.get(), n, stream);
  }
};

SgdEngine::SgdEngine(const SgdSpec& sp, const double* W0, const double* a0, std::size_t init_stride,
                     const double* Wt, const double* v, const SgdRun* runs, std::size_t n_runs, const double* b0,
                     const double* bt)
    : impl_(new Impl) {
  Impl& m = *impl_;
  require_device();
  const bool biased = b0 || bt;
  m.p = Problem{sp.K, sp.M, sp.d, sp.batch, sp.scale, 1.0 / std::sqrt(sp.scale), sp.blowup, sp.student, sp.teacher,
                sp.spherical, sp.seed, biased ? 1 : 0};
  m.n = n_runs;
  const std::size_t K = static_cast<std::size_t>(sp.K), M = static_cast<std::size_t>(sp.M), d = sp.d;
  m.n_state = state_size(m.p);
  m.shared_bytes = shared_doubles(m.p) * sizeof(double);
  if (m.shared_bytes > 48 * 1024)
    throw DeviceUnavailable("device='cuda': K = " + std::to_string(sp.K) + ", M = " + std::to_string(sp.M) +
                            " need more shared memory per block than the GPU SGD kernels use (48 KiB)");
  std::vector<RunParams> rp(n_runs);
  for (std::size_t j = 0; j < n_runs; ++j) {  // the step factors of sgd.cpp's Run, the same expressions
    const double B = sp.batch;
    rp[j].id = runs[j].id;
    rp[j].gw = sp.train_first ? runs[j].lr * std::sqrt(sp.scale) / (sp.d * B) : 0.0;
    rp[j].ga = runs[j].lr_readout / (sp.d * B);
    rp[j].sqrt_noise = std::sqrt(runs[j].noise);
    rp[j].has_noise = runs[j].noise > 0.0;
    rp[j].gb = biased ? runs[j].lr_bias / (sp.d * B) : 0.0;
  }
  m.W = DeviceBuffer<double>(n_runs * K * d);
  if (sp.batch > 1) m.dW = DeviceBuffer<double>(n_runs * K * d);
  m.a = DeviceBuffer<double>(n_runs * K);
  m.norms = DeviceBuffer<double>(n_runs * K);
  m.x = DeviceBuffer<double>(n_runs * d);
  m.state = DeviceBuffer<double>(n_runs * m.n_state);
  m.Wt = DeviceBuffer<double>(M * d);
  m.v = DeviceBuffer<double>(M);
  if (biased) m.b = DeviceBuffer<double>(n_runs * K);
  if (bt) m.bt = DeviceBuffer<double>(M);
  m.params = DeviceBuffer<RunParams>(n_runs);
  m.active = DeviceBuffer<int>(n_runs);
  m.fail_code = DeviceBuffer<int>(n_runs);
  m.fail_step = DeviceBuffer<long long>(n_runs);
  m.h_state = PinnedBuffer<double>(n_runs * m.n_state);
  m.h_active = PinnedBuffer<int>(n_runs);
  m.h_code = PinnedBuffer<int>(n_runs);
  m.h_step = PinnedBuffer<long long>(n_runs);
  const std::size_t n_starts = init_stride ? n_runs : 1;
  DeviceBuffer<double> W0d(n_starts * K * d), a0d(n_starts * K), b0d(b0 ? n_starts * K : 0);
  copy_to_device(W0d.get(), W0, n_starts * K * d, m.stream);
  copy_to_device(a0d.get(), a0, n_starts * K, m.stream);
  if (b0) copy_to_device(b0d.get(), b0, n_starts * K, m.stream);
  if (bt) copy_to_device(m.bt.get(), bt, M, m.stream);
  copy_to_device(m.Wt.get(), Wt, M * d, m.stream);
  copy_to_device(m.v.get(), v, M, m.stream);
  copy_to_device(m.params.get(), rp.data(), n_runs, m.stream);
  m.st = State{m.W.get(), m.a.get(), m.norms.get(), m.x.get(), m.dW.get(), m.state.get(), m.Wt.get(),
               m.v.get(), biased ? m.b.get() : nullptr, bt ? m.bt.get() : nullptr, m.params.get(), m.active.get(),
               m.fail_code.get(), m.fail_step.get()};
  int per_sm = 0, sms = 0, dev = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "cudaDeviceGetAttribute");
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sgd_advance, kThreads, m.shared_bytes),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  m.concurrent = std::max(1, per_sm * sms);
  sgd_init<<<static_cast<unsigned>(n_runs), kThreads, m.shared_bytes, m.stream.get()>>>(
      m.p, m.st, W0d.get(), a0d.get(), b0 ? b0d.get() : nullptr, init_stride ? 1 : 0);
  check(cudaGetLastError(), "sgd_init launch");
  copy_to_host(m.h_state.get(), m.state.get(), n_runs * m.n_state, m.stream);
  m.fetch_flags();
  for (std::size_t j = 0; j < n_runs; ++j) m.h_active[j] = 1;  // the driver's view: failures come from the flags
  m.stream.sync();  // W0d, a0d, b0d are freed after this
}

SgdEngine::~SgdEngine() = default;

std::size_t SgdEngine::max_runs(const SgdSpec& sp) {
  require_device();
  const std::size_t fixed = sizeof(double) * (static_cast<std::size_t>(sp.M) * sp.d + sp.M) +
                            2 * sizeof(double) * static_cast<std::size_t>(sp.K) * sp.d;  // teacher, a shared start
  const std::size_t mem = usable_memory();
  return std::max<std::size_t>(1, (mem > fixed ? mem - fixed : 0) / run_bytes(sp));
}

long long SgdEngine::steps_per_launch(std::size_t n_active) const {
  // About 2^22 x-coordinates drawn and reduced per resident block per launch: a few ms at d = 1000 (well below the
  // 0.5 s of a Ctrl-C), more waves of blocks taking proportionally fewer steps.
  const Impl& m = *impl_;
  const long long waves = static_cast<long long>((n_active + m.concurrent - 1) / m.concurrent);
  const long long per_step = static_cast<long long>(m.p.B) * (m.p.d + 1024) * (m.p.K + m.p.M + 2);
  return std::max<long long>(1, kLaunchWork / (per_step * std::max<long long>(1, waves)));
}

void SgdEngine::advance(long long from, long long to, bool want_overlaps) {
  Impl& m = *impl_;
  if (m.active_dirty) {
    copy_to_device(m.active.get(), m.h_active.get(), m.n, m.stream);
    m.active_dirty = false;
  }
  sgd_advance<<<static_cast<unsigned>(m.n), kThreads, m.shared_bytes, m.stream.get()>>>(m.p, m.st, from, to,
                                                                                         want_overlaps ? 1 : 0);
  check(cudaGetLastError(), "sgd_advance launch");
  if (want_overlaps) copy_to_host(m.h_state.get(), m.state.get(), m.n * m.n_state, m.stream);
  m.fetch_flags();
  m.stream.sync();
}

const double* SgdEngine::state(std::size_t j) const { return impl_->h_state.get() + j * impl_->n_state; }

int SgdEngine::failure(std::size_t j, long long* step) const {
  *step = impl_->h_step[j];
  return impl_->h_code[j];
}

void SgdEngine::deactivate(std::size_t j) {
  impl_->h_active[j] = 0;
  impl_->active_dirty = true;
}

void SgdEngine::fetch_weights(bool with_W) {
  Impl& m = *impl_;
  const std::size_t K = static_cast<std::size_t>(m.p.K), Kd = K * m.p.d;
  m.h_a.resize(m.n * K);
  m.h_W.resize(with_W ? m.n * Kd : 0);
  m.h_b.resize(m.p.biased ? m.n * K : 0);
  if (with_W) copy_to_host(m.h_W.data(), m.W.get(), m.n * Kd, m.stream);
  copy_to_host(m.h_a.data(), m.a.get(), m.n * K, m.stream);
  if (m.p.biased) copy_to_host(m.h_b.data(), m.b.get(), m.n * K, m.stream);
  m.stream.sync();
}

void SgdEngine::weights(std::size_t j, double* W, double* a, double* b) const {
  const Impl& m = *impl_;
  const std::size_t K = static_cast<std::size_t>(m.p.K), Kd = K * m.p.d;
  if (W && !m.h_W.empty()) std::copy(m.h_W.begin() + j * Kd, m.h_W.begin() + (j + 1) * Kd, W);
  std::copy(m.h_a.begin() + j * K, m.h_a.begin() + (j + 1) * K, a);
  if (b && !m.h_b.empty()) std::copy(m.h_b.begin() + j * K, m.h_b.begin() + (j + 1) * K, b);
}

void gaussians(std::uint64_t seed, std::uint32_t run, std::uint32_t stream_id, std::uint64_t first, std::size_t n,
               bool one_by_one, double* out) {
  require_device();
  if (n == 0) return;
  Stream s;
  DeviceBuffer<double> buf(n);
  const auto blocks = static_cast<unsigned>((n + kDrawChunk - 1) / kDrawChunk);
  gaussians_kernel<<<blocks, kThreads, 0, s.get()>>>(rng::StreamId{seed, run, stream_id}, first, n,
                                                     one_by_one ? 1 : 0, buf.get());
  check(cudaGetLastError(), "gaussians launch");
  copy_to_host(out, buf.get(), n, s);
  s.sync();
}

}  // namespace twolayer::cuda
