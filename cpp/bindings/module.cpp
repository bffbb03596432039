// The twolayer._core extension: one module, one bind_<area>.cpp per area of the C++ core.
#include <pybind11/pybind11.h>

#ifndef _WIN32
#include <pthread.h>
#endif

#include <atomic>
#include <memory>

#include "interrupt.hpp"
#include "twolayer/cuda.hpp"
#include "twolayer/divergence.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/parallel.hpp"

namespace py = pybind11;

namespace twolayer::bind {

py::object& interrupted_type() {
  static auto* type = new py::object();  // never destroyed: it must outlive the interpreter's teardown
  return *type;
}

void raise_interrupted(py::object partial) {
  if (PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) throw py::error_already_set();
    PyErr_Clear();
  }
  py::object exc = interrupted_type()("interrupted (Ctrl-C); what was computed so far is in .partial");
  exc.attr("partial") = std::move(partial);
  PyErr_SetObject(interrupted_type().ptr(), exc.ptr());
  throw py::error_already_set();
}

namespace {
std::atomic<unsigned long> fork_generation{0};

// In a forked child: the parent's threads are gone, so run serially, forget calls that were in flight and make new
// workers.
void after_fork_in_child() {
  run_serially();
  reset_cancellation();
  Worker::forget_after_fork();
}
}  // namespace

namespace {
// Spins up to `limit` for flag to become true; whether it did.
bool spin_until(const std::atomic<bool>& flag, std::chrono::microseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!flag.load(std::memory_order_acquire))
    if (std::chrono::steady_clock::now() > end) return false;
  return true;
}
// The worker waits for the next job a little longer (calls in a loop) than the caller for the end of one.
constexpr std::chrono::microseconds kWorkerSpin{100}, kCallerSpin{30};
}  // namespace

Worker::Worker() : thread_([this] { loop(); }) {}

Worker::~Worker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_.notify_all();
  thread_.join();
}

void Worker::loop() {
  for (;;) {
    if (!spin_until(has_job_, kWorkerSpin)) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return has_job_.load() || stop_.load(); });
    }
    if (!has_job_.load(std::memory_order_acquire)) return;  // stop_
    has_job_.store(false, std::memory_order_relaxed);
    job_();  // catches its own exceptions (run_cancellable's body)
    job_ = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }
}

void Worker::start(std::function<void()> job) {
  job_ = std::move(job);  // the worker is idle: it reads job_ only after has_job_
  busy_ = true;
  done_.store(false, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    has_job_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool Worker::wait_for(std::chrono::milliseconds timeout) {
  if (!spin_until(done_, kCallerSpin)) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return done_.load(); })) return false;
  }
  busy_ = false;
  return true;
}

Worker& Worker::for_this_thread() {
  struct Slot {
    std::unique_ptr<Worker> worker;
    unsigned long generation = 0;
    ~Slot() {
      if (generation != fork_generation.load()) (void)worker.release();  // its thread is the parent's: never join
    }
  };
  thread_local Slot slot;
  const unsigned long g = fork_generation.load();
  if (!slot.worker || slot.generation != g) {
    (void)slot.worker.release();  // a worker of the parent process (after fork): its thread does not exist here
    slot.worker = std::make_unique<Worker>();
    slot.generation = g;
  }
  return *slot.worker;
}

void Worker::forget_after_fork() { fork_generation.fetch_add(1); }
void bind_gaussian(py::module_& m);
void bind_population(py::module_& m);
void bind_sgd(py::module_& m);
void bind_ode(py::module_& m);
void bind_landscape(py::module_& m);
void bind_target(py::module_& m);
void bind_sde(py::module_& m);
void bind_messages(py::module_& m);
void bind_dmft(py::module_& m);
}  // namespace twolayer::bind

#ifndef TWOLAYER_VERSION
#define TWOLAYER_VERSION "0.0.0"
#endif
// One module per instruction level (CMakeLists.txt): twolayer._core_<level>, loaded by python/twolayer/_core.py.
#ifndef TWOLAYER_MODULE_NAME
#define TWOLAYER_MODULE_NAME _core
#endif
#ifndef TWOLAYER_SIMD_LEVEL
#define TWOLAYER_SIMD_LEVEL "unknown"
#endif
#ifndef TWOLAYER_COMPILER
#define TWOLAYER_COMPILER "unknown"
#endif
#ifndef TWOLAYER_CXX_FLAGS
#define TWOLAYER_CXX_FLAGS ""
#endif

PYBIND11_MODULE(TWOLAYER_MODULE_NAME, m) {
  m.doc() = "twolayer C++ core (Gaussian kernels, population quantities, dynamics)";
  // Module-local translators: every instruction level's module is a separate extension with its own exception types,
  // and a global translator registered by a level imported later (tests/test_docs.py imports them all) would turn
  // this module's C++ exceptions into that module's Python types (C++ matches the exception classes by name across
  // shared objects), which `except twolayer.DeviceUnavailable` would then miss.
  py::register_local_exception<twolayer::not_implemented>(m, "KernelNotImplemented", PyExc_NotImplementedError);
  py::register_local_exception<twolayer::cuda::DeviceUnavailable>(m, "DeviceUnavailable", PyExc_RuntimeError)
      .attr("__doc__") =
      "Raised for device='cuda' where the CUDA backend cannot run the call: a build without it (TWOLAYER_CUDA=OFF), "
      "no usable NVIDIA GPU or driver, or a model or option the GPU path does not implement. A RuntimeError; the "
      "message names what is missing (twolayer info reports the backend and the device).";
  twolayer::bind::interrupted_type() = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "twolayer._core.Interrupted",
      "Raised when Ctrl-C (or another cancellation) stops a computation of the core. A KeyboardInterrupt; its "
      "attribute `partial` holds what was computed before the stop (runs, members or records finished so far, "
      "with status \"interrupted\" where they were cut short), or None.",
      PyExc_KeyboardInterrupt, nullptr));
  m.attr("Interrupted") = twolayer::bind::interrupted_type();
  // The engines' positive semi-definiteness tolerance (divergence.hpp, rule 3): Overlaps validates with the same one,
  // so that every state a run accepted is a valid Overlaps (Trajectory.overlaps_at, continuing a run).
  m.attr("PSD_TOL") = twolayer::kDivergencePsdTol;
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const twolayer::Interrupted&) {
      try {
        twolayer::bind::raise_interrupted(py::none());
      } catch (py::error_already_set& e) {
        e.restore();
      }
    }
  });
#ifndef _WIN32
  pthread_atfork(nullptr, nullptr, twolayer::bind::after_fork_in_child);
#endif
  m.def("build_info", [] {
    py::dict info;
    info["version"] = TWOLAYER_VERSION;
    info["simd_level"] = TWOLAYER_SIMD_LEVEL;
    info["compiler"] = TWOLAYER_COMPILER;
    info["flags"] = TWOLAYER_CXX_FLAGS;
    info["openmp"] = twolayer::openmp_enabled();
    info["max_threads"] = twolayer::resolve_threads(0);
    info["thread_limit"] = twolayer::thread_limit();
#ifdef TWOLAYER_CUDA
    info["cuda"] = true;
    const twolayer::cuda::DeviceInfo dev = twolayer::cuda::device_info();
    auto version = [](int v) { return v ? py::object(py::str(std::to_string(v / 1000) + "." +
                                                             std::to_string(v % 1000 / 10))) : py::object(py::none()); };
    info["cuda_architectures"] = twolayer::cuda::compiled_architectures();
    info["cuda_runtime"] = version(dev.runtime_version);
    info["cuda_driver"] = version(dev.driver_version);
    info["cuda_device"] = dev.error.empty() ? py::object(py::str(dev.name)) : py::object(py::none());
    info["cuda_arch"] = dev.error.empty() ? py::object(py::str("sm_" + std::to_string(dev.major) +
                                                               std::to_string(dev.minor))) : py::object(py::none());
    info["cuda_memory_gib"] = dev.error.empty() ? py::object(py::float_(dev.total_memory / 1073741824.0))
                                                : py::object(py::none());
    info["cuda_error"] = dev.error.empty() ? py::object(py::none()) : py::object(py::str(dev.error));
#else
    info["cuda"] = false;
#endif
    return info;
  });
  twolayer::bind::bind_gaussian(m);
  twolayer::bind::bind_population(m);
  twolayer::bind::bind_sgd(m);
  twolayer::bind::bind_ode(m);
  twolayer::bind::bind_landscape(m);
  twolayer::bind::bind_target(m);
  twolayer::bind::bind_sde(m);
  twolayer::bind::bind_messages(m);
  twolayer::bind::bind_dmft(m);
}
