// The CUDA runtime as the package sees it: what is there (twolayer info) and whether it can run this build.
#include <cuda_runtime.h>

#include <string>

#include "device.cuh"
#include "twolayer/cuda.hpp"

#ifndef TWOLAYER_CUDA_ARCHITECTURES
#define TWOLAYER_CUDA_ARCHITECTURES "unknown"
#endif

namespace twolayer::cuda {

namespace {
// A trivial kernel: launching it proves that this build has code the device runs (the right architecture).
__global__ void probe_kernel(int* out) { *out = 1; }
}  // namespace

const char* compiled_architectures() { return TWOLAYER_CUDA_ARCHITECTURES; }

DeviceInfo device_info() {
  DeviceInfo info;
  cudaRuntimeGetVersion(&info.runtime_version);
  const cudaError_t d = cudaDriverGetVersion(&info.driver_version);
  if (d != cudaSuccess || info.driver_version == 0) {
    info.error = d != cudaSuccess ? "no NVIDIA driver found: " + std::string(cudaGetErrorString(d))
                                  : std::string("no NVIDIA driver found (libcuda is not installed)");
    cudaGetLastError();
    return info;
  }
  const cudaError_t c = cudaGetDeviceCount(&info.device_count);
  if (c != cudaSuccess || info.device_count == 0) {
    info.error = c != cudaSuccess ? "no usable CUDA device: " + std::string(cudaGetErrorString(c))
                                  : std::string("no CUDA device found");
    cudaGetLastError();
    info.device_count = 0;
    return info;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    info.error = "cudaGetDeviceProperties failed";
    cudaGetLastError();
    return info;
  }
  info.name = prop.name;
  info.major = prop.major;
  info.minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  info.total_memory = prop.totalGlobalMem;
  return info;
}

void require_device() {
  static int ok = -1;  // probed once per process
  if (ok == 1) return;
  const DeviceInfo info = device_info();
  if (!info.error.empty())
    throw DeviceUnavailable("device='cuda': " + info.error + " (this build's CUDA backend needs an NVIDIA GPU)");
  int* flag = nullptr;
  cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&flag), sizeof(int));
  if (e == cudaSuccess) {
    probe_kernel<<<1, 1>>>(flag);
    e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    cudaFree(flag);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw DeviceUnavailable("device='cuda': " + info.name + " (compute capability " + std::to_string(info.major) +
                            "." + std::to_string(info.minor) + ") cannot run this build's kernels (compiled for "
                            "architectures " + TWOLAYER_CUDA_ARCHITECTURES + "): " + cudaGetErrorString(e) +
                            "; rebuild with -Ccmake.define.CMAKE_CUDA_ARCHITECTURES=" + std::to_string(info.major) +
                            std::to_string(info.minor));
  }
  ok = 1;
}

}  // namespace twolayer::cuda
