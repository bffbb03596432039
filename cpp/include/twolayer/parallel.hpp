// OpenMP helpers: the one place where thread counts are resolved and capped, and a parallel loop that honours a
// per-call thread count, stops on cancellation (cancel.hpp) and carries exceptions out of the region.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#ifdef TWOLAYER_OPENMP
#include <omp.h>
#endif

#include "twolayer/cancel.hpp"

namespace twolayer {

namespace detail {
inline std::atomic<bool> serial_only{false};
}  // namespace detail

// The most threads one call uses: 4 per processor that OpenMP sees (more only costs).
inline int thread_limit() {
#ifdef TWOLAYER_OPENMP
  return 4 * std::max(1, omp_get_num_procs());
#else
  return 1;
#endif
}

// From now on every call runs on one thread. Called in a child process after fork(): GNU libgomp's thread pool
// does not survive fork, and a parallel region there would wait forever for the parent's threads.
inline void run_serially() noexcept { detail::serial_only.store(true, std::memory_order_relaxed); }

inline bool serial_only() noexcept { return detail::serial_only.load(std::memory_order_relaxed); }

// The threads of one call: n_threads <= 0 means the OpenMP default (so OMP_NUM_THREADS applies); capped at
// thread_limit(); 1 after fork.
inline int resolve_threads(int n_threads) {
#ifdef TWOLAYER_OPENMP
  if (serial_only()) return 1;
  return std::min(n_threads > 0 ? n_threads : omp_get_max_threads(), thread_limit());
#else
  (void)n_threads;
  return 1;
#endif
}

inline bool openmp_enabled() {
#ifdef TWOLAYER_OPENMP
  return true;
#else
  return false;
#endif
}

// Calls body(i) for i in [0, n), handing out `chunk` consecutive iterations at a time. The first exception thrown
// by any iteration is rethrown after the loop. Once a cancellation is requested the remaining iterations are
// skipped and Interrupted is thrown.
template <class Body>
void parallel_for(std::size_t n, int n_threads, Body&& body, std::size_t min_per_thread = 1, int chunk = 64) {
  std::exception_ptr error;
  std::mutex error_mutex;
  const int threads = resolve_threads(n_threads);
  const bool go_parallel = threads > 1 && n >= 2 * min_per_thread;
  (void)go_parallel;
#ifdef TWOLAYER_OPENMP
#pragma omp parallel for schedule(dynamic, chunk) num_threads(threads) if (go_parallel)
#endif
  for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(n); ++i) {
    if (cancel_requested()) continue;
    try {
      body(static_cast<std::size_t>(i));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  throw_if_cancelled();
}

}  // namespace twolayer
