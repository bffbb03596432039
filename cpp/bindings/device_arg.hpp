// The `device` argument of the bindings: "cpu" or "cuda", checked once, with the error naming what is missing.
#pragma once
#include <stdexcept>
#include <string>

#include "twolayer/cuda.hpp"

namespace twolayer::bind {

// True for "cuda" (after checking that this build has the backend and the machine a usable GPU), false for "cpu".
inline bool use_cuda(const std::string& device) {
  if (device == "cpu") return false;
  if (device != "cuda") throw std::invalid_argument("device: expected 'cpu' or 'cuda', got '" + device + "'");
#ifdef TWOLAYER_CUDA
  cuda::require_device();
  return true;
#else
  throw cuda::DeviceUnavailable(
      "device='cuda': this build of twolayer has no CUDA backend (build it on a machine with nvcc: "
      "pip install -Ccmake.define.TWOLAYER_CUDA=ON .)");
#endif
}

}  // namespace twolayer::bind
