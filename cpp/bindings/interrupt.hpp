// Ctrl-C for the core: runs a computation without the GIL on a worker thread while the calling thread checks for
// signals every few milliseconds (PyErr_CheckSignals). When a signal handler raises, the core's cancellation
// flag is set (twolayer/cancel.hpp), the worker stops within one step of its loops, and the call raises
// twolayer.Interrupted (a KeyboardInterrupt) carrying the partial result in its `partial` attribute. The worker
// has ended when the call returns, whatever happened.
#pragma once
#include <pybind11/pybind11.h>

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

struct Poll {
  std::chrono::milliseconds every{10};
  std::function<void()> with_gil;  // also called with the GIL every `every` (progress bars); may be empty
};

// Runs work() (which must not touch Python) and converts its result with to_py() (with the GIL). on_worker: run it
// on a worker thread, interruptible by Ctrl-C; otherwise on this thread (for calls too short to need it: starting
// a thread costs tens of microseconds). Either way a cancellation requested during the call raises Interrupted.
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
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<std::thread> worker;
    if (on_worker) {
      try {
        worker.emplace([&] {
          body();
          std::lock_guard<std::mutex> lock(mu);
          done = true;
          cv.notify_one();
        });
      } catch (const std::system_error&) {  // no thread to be had: run here, not interruptible
      }
    }
    if (!worker) {
      body();
    } else {
      std::unique_lock<std::mutex> lock(mu);
      while (!cv.wait_for(lock, poll.every, [&] { return done; })) {
        lock.unlock();
        {
          py::gil_scoped_acquire gil;
          if (!signalled && PyErr_CheckSignals() != 0) {
            signalled = true;
            request_cancel();
          }
          if (poll.with_gil && !signalled) {
            try {
              poll.with_gil();
            } catch (py::error_already_set&) {  // a failing progress callback stops the call like Ctrl-C
              signalled = true;
              request_cancel();
              py::error_already_set e;
            }
          }
        }
        lock.lock();
      }
      lock.unlock();
      worker->join();
    }
  }
  if (poll.with_gil && !signalled) poll.with_gil();
  const bool cancelled = signalled || cancel_requested();
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Interrupted&) {
      raise_interrupted(py::none());
    }
  }
  py::object out = to_py(*result);
  if (cancelled) raise_interrupted(out);
  return out;
}

}  // namespace twolayer::bind
