// The GPU ODE kernels of erf committees with K = M = 4 (ode_member.cuh).
#include "ode_member.cuh"

namespace twolayer::cuda {
TWOLAYER_ODE_LAUNCHER(Erf, 4, 4)
}  // namespace twolayer::cuda
