// The `device` argument of the bindings: "cpu" or "cuda", checked once, with the error naming what is missing.
#pragma once
#include <stdexcept>
#include <string>

#include <initializer_list>

#include "twolayer/activation.hpp"
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

// use_cuda(device) for a computation with these activations: device='cuda' with a hermite or custom activation raises
// DeviceUnavailable naming it (the device cannot read the host registry of their coefficients), backend or not.
inline bool use_cuda(const std::string& device, std::initializer_list<Activation> acts) {
  if (device == "cuda")
    for (const Activation a : acts)
      if (is_registered(a))
        throw cuda::DeviceUnavailable(std::string("device='cuda': hermite and custom activations run on the CPU only "
                                                  "(the GPU cannot read their tables), got '") +
                                      activation_name(a) + "'; use device='cpu'");
  return use_cuda(device);
}

}  // namespace twolayer::bind
