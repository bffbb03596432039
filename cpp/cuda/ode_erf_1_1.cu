// The GPU ODE kernels of erf committees with K = M = 1 (ode_member.cuh).
#include "ode_member.cuh"

namespace twolayer::cuda {
TWOLAYER_ODE_LAUNCHER(Erf, 1, 1)
}  // namespace twolayer::cuda
