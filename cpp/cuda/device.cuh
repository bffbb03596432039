// The CUDA backend's driver layer, shared by its launchers: error checks that throw, device and pinned host buffers,
// streams and events as RAII objects, the free memory a batch may take. No maths here.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "twolayer/cuda.hpp"

namespace twolayer::cuda {

// A failed CUDA call as an exception naming the call and CUDA's reason (out of memory: DeviceUnavailable).
inline void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  const std::string msg = std::string("CUDA: ") + what + " failed: " + cudaGetErrorString(e);
  cudaGetLastError();  // clear a sticky-free error so that the next call does not report it again
  if (e == cudaErrorMemoryAllocation) throw DeviceUnavailable(msg);
  throw std::runtime_error(msg);
}

// Where a buffer's memory comes from: the device (cudaMalloc; never managed memory), or page-locked host memory
// (cudaMallocHost: asynchronous copies overlap the kernels).
struct DeviceMemory {
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMalloc(p, bytes); }
  static void release(void* p) { cudaFree(p); }
};
struct PinnedMemory {
  static cudaError_t allocate(void** p, std::size_t bytes) { return cudaMallocHost(p, bytes); }
  static void release(void* p) { cudaFreeHost(p); }
};

// n elements of T in Memory, owned (movable, not copyable).
template <class T, class Memory>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t n) : n_(n) {
    if (n) check(Memory::allocate(reinterpret_cast<void**>(&p_), n * sizeof(T)), "allocating a CUDA buffer");
  }
  ~Buffer() {
    if (p_) Memory::release(p_);
  }
  Buffer(Buffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  T* get() const { return p_; }
  T& operator[](std::size_t i) const { return p_[i]; }  // host memory only
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};
template <class T>
using DeviceBuffer = Buffer<T, DeviceMemory>;
template <class T>
using PinnedBuffer = Buffer<T, PinnedMemory>;

class Stream {
 public:
  Stream() { check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void sync() const { check(cudaStreamSynchronize(s_), "cudaStreamSynchronize"); }

 private:
  cudaStream_t s_{};
};

class Event {
 public:
  explicit Event(bool timing = false) {
    check(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  }
  ~Event() { cudaEventDestroy(e_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& s) { check(cudaEventRecord(e_, s.get()), "cudaEventRecord"); }
  void wait() const { check(cudaEventSynchronize(e_), "cudaEventSynchronize"); }
  // Seconds from `from` to this event (both recorded with timing, both done).
  double seconds_since(const Event& from) const {
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, from.e_, e_), "cudaEventElapsedTime");
    return 1e-3 * ms;
  }
  // Whether the work before the event is done (without waiting); a failed kernel's error is thrown.
  bool ready() const {
    const cudaError_t e = cudaEventQuery(e_);
    if (e == cudaErrorNotReady) return false;
    check(e, "kernel");
    return true;
  }

 private:
  cudaEvent_t e_{};
};

template <class T>
void copy_to_device(T* dst, const T* src, std::size_t n, const Stream& s) {
  if (n) check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, s.get()), "cudaMemcpyAsync");
}
template <class T>
void copy_to_host(T* dst, const T* src, std::size_t n, const Stream& s) {
  if (n) check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, s.get()), "cudaMemcpyAsync");
}

// The bytes of device memory one call may take: 80% of what is free now (the rest for the runtime and others).
inline std::size_t usable_memory() {
  std::size_t free_b = 0, total_b = 0;
  check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
  return free_b / 5 * 4;
}

// Threads per block of the one-thread-per-member kernels.
inline constexpr int kBlockThreads = 128;
inline unsigned blocks_for(std::size_t n) {
  return static_cast<unsigned>((n + kBlockThreads - 1) / kBlockThreads);
}

}  // namespace twolayer::cuda
