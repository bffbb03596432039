// Ctrl-C for the core: runs a computation without the GIL on the calling thread's persistent worker while the
// calling thread checks for signals every few milliseconds (PyErr_CheckSignals). When a signal handler raises, the
// core's cancellation flag is set (twolayer/cancel.hpp), the work stops within one step of its loops, and the call
// raises twolayer.Interrupted (a KeyboardInterrupt) carrying the partial result in its `partial` attribute. The
// work has ended when the call returns, whatever happened; the idle worker sleeps until the next call.
#pragma once
#include <pybind11/pybind11.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "twolayer/cancel.hpp"

namespace twolayer::bind {

namespace py = pybind11;

// twolayer._core.Interrupted, registered by module.cpp.
py::object& interrupted_type();

// Raises twolayer.Interrupted with `partial` attached. A pending exception other than KeyboardInterrupt (a
// signal handler may raise anything) is raised as it is.
[[noreturn]] void raise_interrupted(py::object partial);

// A persistent worker thread per calling thread, so that a call costs two hand-overs rather than a thread start
// (and the worker's OpenMP team and allocator arenas stay warm between calls). After fork() a child makes a new
// one (the parent's threads do not exist there; module.cpp bumps the generation).
class Worker {
 public:
  Worker();
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
  // Starts job on the worker (which must be idle) and returns at once.
  void start(std::function<void()> job);
  // Waits up to `timeout` for the job; true once it has finished.
  bool wait_for(std::chrono::milliseconds timeout);
  bool busy() const { return busy_; }

  // This thread's worker (made on first use, and anew after fork).
  static Worker& for_this_thread();
  static void forget_after_fork();

 private:
  void loop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  // Each side spins for a few microseconds before it sleeps: a short call then costs no futex wake-ups.
  std::atomic<bool> has_job_{false}, done_{true}, stop_{false};
  bool busy_ = false;
  std::thread thread_;
};

struct Poll {
  std::chrono::milliseconds every{10};
  std::function<void()> with_gil;  // also called with the GIL every `every` (progress bars); may be empty
};

// Runs work() (which must not touch Python) and converts its result with to_py() (with the GIL). on_worker: run it
// on this thread's worker, interruptible by Ctrl-C; otherwise on this thread (for calls too short to need it).
// Either way a cancellation requested during the call raises Interrupted.
template <class Work, class ToPy>
py::object run_cancellable(Work&& work, ToPy&& to_py, bool on_worker = true, const Poll& poll = {}) {
  using Result = decltype(work());
  CancelScope scope;
  std::optional<Result> result;
  std::exception_ptr error;
  bool signalled = false;
  {
    py::gil_scoped_release release;
    auto body = [&] {
      try {
        result.emplace(work());
      } catch (...) {
        error = std::current_exception();
      }
    };
    Worker* worker = nullptr;
    if (on_worker) {
      try {
        worker = &Worker::for_this_thread();
        if (worker->busy()) worker = nullptr;  // re-entered from a progress callback: run here
      } catch (const std::system_error&) {  // no thread to be had: run here, not interruptible
      }
    }
    if (!worker) {
      body();
    } else {
      worker->start(body);
      while (!worker->wait_for(poll.every)) {
        py::gil_scoped_acquire gil;
        if (!signalled && PyErr_CheckSignals() != 0) {
          signalled = true;
          request_cancel();
        }
        if (poll.with_gil && !signalled) {
          try {
            poll.with_gil();
          } catch (py::error_already_set& e) {  // a failing progress callback stops the call like Ctrl-C
            e.restore();
            signalled = true;
            request_cancel();
          }
        }
      }
    }
  }
  // A signal that arrived in the last poll interval, after the work ended, still reports the (complete) result
  // as Interrupted rather than surfacing as a bare KeyboardInterrupt that drops it.
  if (on_worker && !signalled && PyErr_CheckSignals() != 0) signalled = true;
  if (poll.with_gil && !signalled) poll.with_gil();
  const bool cancelled = signalled || cancel_requested();
  // The signal handler's exception waits aside while the result is converted (no Python call with one pending).
  std::optional<py::error_already_set> pending;
  if (PyErr_Occurred()) pending.emplace();
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Interrupted&) {
      if (pending) pending->restore();
      raise_interrupted(py::none());
    }
  }
  py::object out = to_py(*result);
  if (pending) pending->restore();
  if (cancelled) raise_interrupted(out);
  return out;
}

}  // namespace twolayer::bind
