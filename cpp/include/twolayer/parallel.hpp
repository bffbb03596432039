// OpenMP helpers: a parallel loop that honours a per-call thread count and carries exceptions out of the region.
#pragma once
#include <cstddef>
#include <exception>
#include <mutex>
#ifdef TWOLAYER_OPENMP
#include <omp.h>
#endif

namespace twolayer {

// n_threads <= 0 means the OpenMP default (so OMP_NUM_THREADS applies).
inline int resolve_threads(int n_threads) {
#ifdef TWOLAYER_OPENMP
  return n_threads > 0 ? n_threads : omp_get_max_threads();
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
// by any iteration is rethrown after the loop.
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
    try {
      body(static_cast<std::size_t>(i));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace twolayer
