// The batched Gaussian kernels on the GPU (cuda.hpp): launches, memory and the chunk pipeline only; the maths and the
// per-matrix test are the TWOLAYER_HD functions of gaussian_kernels.hpp, the CPU batches' own.
//
// Pipeline: chunks of matrices alternate between two slots, each with its pinned host buffers, device buffers and
// stream. While the device works on chunk k (slot k % 2), the host finishes chunk k - 1 (its results out of the
// pinned buffer, its matrices left to the host) and stages chunk k + 1, whose upload then overlaps chunk k's kernel.
// The validity test runs on the device (the same covariance_failures as the CPU batches), not on the host: on the
// host it would cost a pass over the whole batch, as much as the GPU kernel itself; a matrix that fails it, has an
// extreme variance or gets a non-finite value comes back as NaN with a per-chunk count, and the host's *_batch_at
// (gaussian.cpp) redoes exactly those: the same errors (naming C[index]) and the same rescaling as device="cpu".
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "device.cuh"
#include "twolayer/activation.hpp"
#include "twolayer/cancel.hpp"
#include "twolayer/cuda.hpp"
#include "twolayer/gaussian_kernels.hpp"

namespace twolayer::cuda {

namespace {

// The kernels as functors of one row-major matrix (device code).
struct I2Op {
  Activation a, b;
  __device__ double operator()(const double* C) const { return kernels::i2(a, b, C); }
};
struct I3Op {
  Activation s, b;
  __device__ double operator()(const double* C) const { return kernels::i3(s, b, C); }
};
struct J2Op {
  Activation s;
  __device__ double operator()(const double* C) const { return kernels::j2(s, C); }
};
// The student activation S as a template argument: one kernel per S, so that the closed forms do not carry the
// registers and stack of the relu student's quadrature (occupancy).
template <Activation S>
struct I4Op {
  Activation a, b;
  __device__ double operator()(const double* C) const { return kernels::i4(S, a, b, C); }
};

// One thread per matrix: the CPU batches' test, then the kernel; NaN and a count for what the host must redo.
template <int N, class Op>
__global__ void batch_kernel(const double* __restrict__ C, std::size_t m, double* __restrict__ out,
                             unsigned long long* __restrict__ left, Op op) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m) return;
  double c[N * N];
  TWOLAYER_UNROLL
  for (int e = 0; e < N * N; ++e) c[e] = C[i * N * N + e];
  bool ordinary = kernels::covariance_failures<N>(c, 1) == 0.0;
  TWOLAYER_UNROLL
  for (int k = 0; k < N; ++k) ordinary = ordinary && kernels::ordinary_variance(c[N * k + k]);
  double v = kNaN;
  if (ordinary) v = op(c);
  if (!std::isfinite(v)) {
    v = kNaN;
    atomicAdd(left, 1ull);
  }
  out[i] = v;
}

// Matrices per chunk: at most `cap` (so that one launch stays well under the 0.5 s of a Ctrl-C), and two slots' worth
// of device buffers within usable_memory().
std::size_t chunk_size(std::size_t count, int n, std::size_t cap) {
  const std::size_t per_matrix = (static_cast<std::size_t>(n) * n + 1) * sizeof(double);
  const std::size_t fit = usable_memory() / (2 * per_matrix);
  if (fit == 0) throw DeviceUnavailable("device='cuda': not enough free GPU memory for one covariance matrix");
  return std::max<std::size_t>(1, std::min({count, cap, fit}));
}

// memcpy of a chunk into its pinned buffer on several threads: one thread copies a few GB/s, less than the bus takes,
// and the staging would otherwise bound the whole call. Falls back to one thread where none can be started.
void staged_copy(void* dst, const void* src, std::size_t bytes) {
  constexpr std::size_t kPerThread = std::size_t{4} << 20;  // a thread start (~20 us) per 4 MiB (~0.2 ms) at most
  const std::size_t n = std::min<std::size_t>({8, std::max(1u, std::thread::hardware_concurrency()),
                                               (bytes + kPerThread - 1) / kPerThread});
  if (n <= 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const std::size_t part = (bytes / n + 4095) / 4096 * 4096;
  auto piece = [&](std::size_t t) {
    const std::size_t begin = std::min(bytes, t * part), end = std::min(bytes, begin + part);
    std::memcpy(static_cast<char*>(dst) + begin, static_cast<const char*>(src) + begin, end - begin);
  };
  std::vector<std::thread> threads;
  std::size_t t = 1;
  try {
    for (; t < n; ++t) threads.emplace_back(piece, t);
  } catch (const std::system_error&) {  // no more threads: this one copies the rest
    for (std::size_t r = t; r < n; ++r) piece(r);
  }
  piece(0);
  for (auto& th : threads) th.join();
}

struct Slot {
  Stream stream;
  PinnedBuffer<double> in, out;
  PinnedBuffer<unsigned long long> left;
  DeviceBuffer<double> d_in, d_out;
  DeviceBuffer<unsigned long long> d_left;
  std::size_t begin = 0, m = 0;
  bool busy = false;
  Slot(std::size_t chunk, int n)
      : in(chunk * n * n), out(chunk), left(1), d_in(chunk * n * n), d_out(chunk), d_left(1) {}
  ~Slot() { cudaStreamSynchronize(stream.get()); }  // before any buffer is freed, also when unwinding
};

template <int N, class Op>
void run(const double* C, std::size_t count, double* out, const Op& op, std::size_t cap, const HostFinish& host) {
  if (count == 0) return;
  const std::size_t chunk = chunk_size(count, N, cap);
  // One slot for a single chunk, two to overlap (Slot is neither copyable nor movable: its stream).
  const std::size_t n_slots = chunk < count ? 2 : 1;
  std::unique_ptr<Slot> slots[2];
  for (std::size_t j = 0; j < n_slots; ++j) slots[j] = std::make_unique<Slot>(chunk, N);
  std::vector<std::size_t> indices;
  // Chunk of slot s: results into out, then its matrices the device left to the host, in ascending order.
  auto finish = [&](Slot& s) {
    s.stream.sync();
    s.busy = false;
    std::memcpy(out + s.begin, s.out.get(), s.m * sizeof(double));
    if (s.left[0] == 0) return;
    indices.clear();
    for (std::size_t j = 0; j < s.m; ++j)
      if (std::isnan(out[s.begin + j])) indices.push_back(s.begin + j);
    host(indices.data(), indices.size());
  };
  std::size_t k = 0;
  for (std::size_t begin = 0; begin < count; begin += chunk, ++k) {
    Slot& s = *slots[k % n_slots];
    if (s.busy) finish(s);  // chunk k - 2; chunk k - 1 runs meanwhile
    throw_if_cancelled();
    s.begin = begin;
    s.m = std::min(chunk, count - begin);
    staged_copy(s.in.get(), C + begin * N * N, s.m * N * N * sizeof(double));
    check(cudaMemsetAsync(s.d_left.get(), 0, sizeof(unsigned long long), s.stream.get()), "cudaMemsetAsync");
    copy_to_device(s.d_in.get(), s.in.get(), s.m * N * N, s.stream);
    batch_kernel<N><<<blocks_for(s.m), kBlockThreads, 0, s.stream.get()>>>(s.d_in.get(), s.m, s.d_out.get(),
                                                                            s.d_left.get(), op);
    check(cudaGetLastError(), "kernel launch");
    copy_to_host(s.out.get(), s.d_out.get(), s.m, s.stream);
    copy_to_host(s.left.get(), s.d_left.get(), 1, s.stream);
    s.busy = true;
  }
  // The older of the two chunks in flight first: results and errors in the order of the CPU path.
  for (std::size_t j = 0; j < n_slots; ++j) {
    Slot& s = *slots[(k + j) % n_slots];
    if (s.busy) finish(s);
  }
}

// Matrices per launch: 2^18 for the closed forms (32 MiB of 4x4 matrices per slot, about a millisecond of compute and
// of copying: pinned buffers, which are allocated per call, stay small, and the pipeline starts early), 2^16 for the
// relu student's quadrature (20 to 112 nodes of six arctangents each; well under 0.5 s per launch, for Ctrl-C).
// Neither is tuned on a GPU yet.
constexpr std::size_t kClosedFormChunk = std::size_t{1} << 18, kQuadratureChunk = std::size_t{1} << 16;

}  // namespace

void i2_batch(Activation a, Activation b, const double* C, std::size_t count, double* out, const HostFinish& host) {
  run<2>(C, count, out, I2Op{a, b}, kClosedFormChunk, host);
}
void i3_batch(Activation s, Activation b, const double* C, std::size_t count, double* out, const HostFinish& host) {
  run<3>(C, count, out, I3Op{s, b}, kClosedFormChunk, host);
}
void j2_batch(Activation s, const double* C, std::size_t count, double* out, const HostFinish& host) {
  run<2>(C, count, out, J2Op{s}, kClosedFormChunk, host);
}
void i4_batch(Activation s, Activation a, Activation b, const double* C, std::size_t count, double* out,
              const HostFinish& host) {
  if (!kernels::i4_on_device(s, a, b))
    throw DeviceUnavailable(std::string("device='cuda': i4 for (") + activation_name(s) + ", " + activation_name(a) +
                            ", " + activation_name(b) + ") is not implemented on the GPU (a relu student with teacher "
                            "activations other than linear and relu goes through orthant moments, CPU only); use "
                            "device='cpu'");
  using A = Activation;
  switch (s) {
    case A::Linear: return run<4>(C, count, out, I4Op<A::Linear>{a, b}, kClosedFormChunk, host);
    case A::Erf: return run<4>(C, count, out, I4Op<A::Erf>{a, b}, kClosedFormChunk, host);
    case A::Relu: {
      const bool quadrature = a == A::Relu && b == A::Relu;
      return run<4>(C, count, out, I4Op<A::Relu>{a, b}, quadrature ? kQuadratureChunk : kClosedFormChunk, host);
    }
    case A::Step: return run<4>(C, count, out, I4Op<A::Step>{a, b}, kClosedFormChunk, host);
    case A::Quadratic: return run<4>(C, count, out, I4Op<A::Quadratic>{a, b}, kClosedFormChunk, host);
  }
}

}  // namespace twolayer::cuda
