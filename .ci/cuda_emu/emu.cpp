// The emulation's state (cuda_runtime.h): thread indices, the block barrier, the shuffle buffer, shared memory.
#include "cuda_runtime.h"
#include "twolayer/cuda.hpp"
thread_local emu_dim3 threadIdx, blockIdx;
emu_dim3 blockDim;
static pthread_barrier_t bar;
static bool bar_init = false;
static double shfl[1024];
static double shm_buf[1 << 16];
void emu_begin_launch(unsigned threads) {
  if (bar_init) pthread_barrier_destroy(&bar);
  pthread_barrier_init(&bar, nullptr, threads);
  bar_init = true;
  for (auto& v : shm_buf) v = std::nan("");  // garbage in shared memory, as on a device
}
// Between two blocks of a launch: every thread of the last one is done; shared memory is garbage again.
void emu_end_block() {
  pthread_barrier_wait(&bar);
  if (threadIdx.x == 0)
    for (auto& v : shm_buf) v = std::nan("");
  pthread_barrier_wait(&bar);
}
void __syncthreads() { pthread_barrier_wait(&bar); }
double __shfl_down_sync(unsigned, double v, int off) {
  const unsigned t = threadIdx.x, lane = t & 31;
  shfl[t] = v;
  __syncthreads();
  const double r = lane + off < 32 ? shfl[t + off] : v;
  __syncthreads();
  return r;
}
double* emu_shared() { return shm_buf; }
namespace twolayer::cuda {
void require_device() {}
}
