// The GPU ODE kernels of relu committees with K = M = 2 (ode_member.cuh).
#include "ode_member.cuh"

namespace twolayer::cuda {
TWOLAYER_ODE_LAUNCHER(Relu, 2, 2)
}  // namespace twolayer::cuda
