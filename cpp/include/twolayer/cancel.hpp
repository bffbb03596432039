// Cooperative cancellation: one process-wide flag that every long loop of the core polls (a relaxed atomic load,
// cheap enough for every step). The binding layer sets it when Ctrl-C arrives (bindings/interrupt.hpp); loops
// that have partial results stop and report them as "interrupted", the others throw Interrupted.
#pragma once
#include <atomic>
#include <exception>

namespace twolayer {

// Thrown by a computation that saw the flag and has no partial result to hand back.
struct Interrupted : std::exception {
  const char* what() const noexcept override { return "interrupted"; }
};

namespace detail {
inline std::atomic<bool> cancel_flag{false};
inline std::atomic<int> calls_in_flight{0};
}  // namespace detail

// Whether a cancellation was requested: stop as soon as possible.
inline bool cancel_requested() noexcept { return detail::cancel_flag.load(std::memory_order_relaxed); }

inline void throw_if_cancelled() {
  if (cancel_requested()) throw Interrupted();
}

// Asks every computation in flight to stop.
inline void request_cancel() noexcept { detail::cancel_flag.store(true, std::memory_order_relaxed); }

// Forgets every request and call in flight (in a forked child, whose other threads are gone).
inline void reset_cancellation() noexcept {
  detail::calls_in_flight.store(0);
  detail::cancel_flag.store(false);
}

// One cancellable call. A request stops every call in flight; the flag is cleared when the last of them ends.
class CancelScope {
 public:
  CancelScope() noexcept { detail::calls_in_flight.fetch_add(1); }
  ~CancelScope() {
    if (detail::calls_in_flight.fetch_sub(1) == 1) detail::cancel_flag.store(false);
  }
  CancelScope(const CancelScope&) = delete;
  CancelScope& operator=(const CancelScope&) = delete;
};

}  // namespace twolayer
