// A host emulation of the CUDA runtime and the device built-ins that cpp/cuda/sgd.cu uses (.ci/cuda-emulate): the
// blocks of a launch run one after another, the threads of a block as OS threads meeting at a barrier
// (__syncthreads), __shared__ is static storage. Enough to run the kernels' logic on a machine without a GPU;
// nothing about timing or the memory model is emulated. Device memory is filled with NaN bytes (0xFF) at allocation.
#pragma once
#include <pthread.h>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorNotReady = 600 };
typedef void* cudaStream_t;
typedef void* cudaEvent_t;
#define cudaStreamNonBlocking 1
#define cudaEventDisableTiming 2
#define cudaEventDefault 0
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount };
inline const char* cudaGetErrorString(cudaError_t) { return "emu"; }
inline cudaError_t cudaGetLastError() { return 0; }
inline cudaError_t cudaMalloc(void** p, size_t n) { *p = std::malloc(n); std::memset(*p, 0xFF, n); return 0; }
inline cudaError_t cudaFree(void* p) { std::free(p); return 0; }
inline cudaError_t cudaMallocHost(void** p, size_t n) { *p = std::malloc(n); std::memset(*p, 0xFF, n); return 0; }
inline cudaError_t cudaFreeHost(void* p) { std::free(p); return 0; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, int) { *s = nullptr; return 0; }
inline cudaError_t cudaStreamDestroy(cudaStream_t) { return 0; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return 0; }
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) { std::memcpy(d, s, n); return 0; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, int) { *e = nullptr; return 0; }
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return 0; }
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return 0; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return 0; }
inline cudaError_t cudaEventQuery(cudaEvent_t) { return 0; }
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t, cudaEvent_t) { *ms = 0.0f; return 0; }  // no timing
inline cudaError_t cudaMemGetInfo(size_t* f, size_t* t) { *f = EMU_FREE_BYTES; *t = *f; return 0; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return 0; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr, int) { *v = 3; return 0; }
template <class F>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int, size_t) { *n = 2; return 0; }
#define __global__
#define __device__
#define __host__
#define __shared__ static
struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
extern thread_local emu_dim3 threadIdx, blockIdx;
extern emu_dim3 blockDim;
void __syncthreads();
double __shfl_down_sync(unsigned mask, double v, int off);
double* emu_shared();
template <class T> inline T min(T a, T b) { return b < a ? b : a; }
void emu_begin_launch(unsigned threads);
void emu_end_block();
// kernel<<<grid, block, shared, stream>>>(args...) (.ci/cuda-emulate rewrites the launches into this).
template <class F, class... A>
void emu_launch(F f, unsigned grid, int block, std::size_t, cudaStream_t, A... args) {
  blockDim.x = block;
  emu_begin_launch(block);
  std::vector<std::thread> ts;
  for (int t = 0; t < block; ++t)
    ts.emplace_back([=] {
      threadIdx.x = t;
      for (unsigned b = 0; b < grid; ++b) {
        blockIdx.x = b;
        f(args...);
        emu_end_block();
      }
    });
  for (auto& t : ts) t.join();
}
