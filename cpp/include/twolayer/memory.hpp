// Buffer sizes: element counts are std::size_t, and a buffer that cannot fit in this machine's memory is refused
// with a MemoryError that says what it was for and how large it would be (rather than an allocation that the
// kernel grants lazily and then kills the process for).
#pragma once
#include <cstddef>
#include <new>
#include <string>
#include <utility>

#include "twolayer/format.hpp"
#ifndef _WIN32
#include <unistd.h>
#endif

namespace twolayer {

// A std::bad_alloc with a message (pybind11 raises MemoryError with what()).
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::string msg) : msg_(std::move(msg)) {}
  const char* what() const noexcept override { return msg_.c_str(); }

 private:
  std::string msg_;
};

// Physical memory in bytes (0 if unknown).
inline std::size_t physical_memory() {
#ifndef _WIN32
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) return static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
#endif
  return 0;
}

// Throws OutOfMemory unless `count` doubles (for `what`) fit in physical memory.
inline void check_buffer(std::size_t count, const char* what) {
  const std::size_t mem = physical_memory();
  if (mem == 0 || count <= mem / sizeof(double)) return;
  const double gib = static_cast<double>(count) * sizeof(double) / (1024.0 * 1024.0 * 1024.0);
  throw OutOfMemory(concat(what, " would need ", gib, " GiB, more than this machine's ",
                           static_cast<double>(mem) / (1024.0 * 1024.0 * 1024.0), " GiB of memory"));
}

}  // namespace twolayer
