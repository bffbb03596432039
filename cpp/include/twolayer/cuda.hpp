// The optional CUDA backend (cpp/cuda/, built with -DTWOLAYER_CUDA=ON): its host-side entry points, in plain C++ (no
// CUDA header), for the bindings. The maths is the host's own (TWOLAYER_HD functions, hd.hpp); cpp/cuda/ holds only
// launches, memory and drivers. Without the backend only DeviceUnavailable exists (the bindings raise it).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace twolayer {
enum class Activation : int;
struct SgdSpec;
struct SgdRun;
struct OdeModel;
struct IntegrateOptions;
struct IntegrateResult;
struct StopRule;
class RowSink;
}  // namespace twolayer

namespace twolayer::cuda {

// device="cuda" asked of a build without the backend, of a machine without a usable GPU, or of a model the GPU path
// does not integrate; the message names what is missing.
struct DeviceUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

#ifdef TWOLAYER_CUDA
// What the CUDA runtime reports (never throws): error is empty when device 0 is usable, else why it is not.
struct DeviceInfo {
  int runtime_version = 0, driver_version = 0, device_count = 0;
  std::string name, error;
  int major = 0, minor = 0, multiprocessors = 0;
  std::size_t total_memory = 0;
};
DeviceInfo device_info();
// The CUDA architectures compiled in (CMAKE_CUDA_ARCHITECTURES), e.g. "80;90".
const char* compiled_architectures();

// Throws DeviceUnavailable naming what is missing unless device 0 can run this build's kernels.
void require_device();

// Why the GPU ODE path cannot integrate this model with these options (an empty string: it can).
std::string ode_unsupported(const OdeModel& model, const IntegrateOptions& opt);

// integrate_batch (integrators.hpp) on the GPU for members of one shape (K, M, activations, regime, spherical):
// each member one GPU thread with its state in registers, its own steps, stop rule and status, as integrate() runs
// it; the state stays on the GPU and only the recorded rows come back, to sink (each member's rows in time order).
// Members in chunks that fit the device's memory, the copy of one chunk's rows overlapping the next chunk's
// integration. finished counts members as they end. Ctrl-C (cancel.hpp) stops the members in flight within
// milliseconds ("interrupted", rows kept; chunks not started: "interrupted before it started", as on the CPU).
// gpu_seconds (may be null): the device's time from the first copy to the last kernel's end (CUDA events).
std::vector<IntegrateResult> integrate_batch(const std::vector<OdeModel>& models,
                                             const std::vector<const double*>& y0s, const IntegrateOptions& opt,
                                             const std::vector<StopRule>& stops,
                                             std::atomic<std::int64_t>* finished, RowSink* sink,
                                             double* gpu_seconds = nullptr);

// The batched Gaussian kernels of gaussian.hpp on the GPU (cpp/cuda/kernels.cu): one thread per covariance matrix,
// the same TWOLAYER_HD maths (gaussian_kernels.hpp) and the same per-matrix test (covariance_failures). The device
// leaves to the host every matrix that fails the test, has an extreme variance (the CPU path rescales those) or gets
// a value that is not finite (the singular step kernels, which throw on the host): `host` receives their indices,
// ascending, once per chunk, and must fill out at those indices or throw (the *_batch_at of gaussian.hpp: the CPU's
// checks, errors and rescaling). Batches larger than device memory run in chunks; copies overlap the kernels (pinned
// buffers, two streams); Ctrl-C (cancel.hpp) throws Interrupted between chunks.
using HostFinish = std::function<void(const std::size_t* indices, std::size_t count)>;
void i2_batch(Activation a, Activation b, const double* C, std::size_t count, double* out, const HostFinish& host);
void i3_batch(Activation s, Activation b, const double* C, std::size_t count, double* out, const HostFinish& host);
void j2_batch(Activation s, const double* C, std::size_t count, double* out, const HostFinish& host);
// Throws DeviceUnavailable naming the combination for a relu student whose teacher pair is not made of linear and relu
// units (those go through the orthant-moment recursion, CPU only).
void i4_batch(Activation s, Activation a, Activation b, const double* C, std::size_t count, double* out,
              const HostFinish& host);

// Gaussians [first, first + n) of stream (seed, run, stream) (rng.hpp) drawn on the device by the SGD kernels' code
// (one_by_one: rng::gaussian_at per index, as the label noise; else whole Philox blocks, as the inputs): the same
// numbers as rng::gaussians (bitwise where the host has FMA, rng.hpp), for tests.
void gaussians(std::uint64_t seed, std::uint32_t run, std::uint32_t stream, std::uint64_t first, std::size_t n,
               bool one_by_one, double* out);

// The device side of sgd_simulate_cuda (sgd.hpp; cpp/cuda/sgd.cu): runs [0, n_runs) of one online SGD problem, one
// thread block per run, the weights resident on the device. The driver (sgd.cpp) advances all active runs together
// between checkpoints and decides records, early stop and the divergence rule from the overlaps that come back.
class SgdEngine {
 public:
  // Uploads the problem, the starts (as sgd_simulate: W0 + j init_stride K d; the biases b0, bt as there, null: none)
  // and the teacher; projects the starts (spherical) and forms their overlaps.
  SgdEngine(const SgdSpec& spec, const double* W0, const double* a0, std::size_t init_stride, const double* Wt,
            const double* v, const SgdRun* runs, std::size_t n_runs, const double* b0 = nullptr,
            const double* bt = nullptr);
  ~SgdEngine();
  SgdEngine(const SgdEngine&) = delete;
  SgdEngine& operator=(const SgdEngine&) = delete;
  // How many runs of this problem fit in the device memory free now (at least 1).
  static std::size_t max_runs(const SgdSpec& spec);
  // The most steps one launch should take with n_active runs (a launch stays well below 0.5 s).
  long long steps_per_launch(std::size_t n_active) const;
  // Steps [from, to) of every active run; then, when overlaps, the state of every active run.
  void advance(long long from, long long to, bool overlaps);
  // Run j's state (Q (K K), M (K M), a (K), and b (K) in a run with biases) at the last overlaps.
  const double* state(std::size_t j) const;
  // Nonzero (a DivergenceCode) when run j stopped on the device (a sample's error overflowed, a spherical norm
  // broke down) at *step; the run is then inactive.
  int failure(std::size_t j, long long* step) const;
  // Takes run j out of the following launches.
  void deactivate(std::size_t j);
  // Downloads every run's current weights (W only when with_W), then weights(j) gives run j's: W (K d; skipped
  // where null), a (K) and b (K; skipped where null or without biases).
  void fetch_weights(bool with_W);
  void weights(std::size_t j, double* W, double* a, double* b = nullptr) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
#endif

}  // namespace twolayer::cuda
