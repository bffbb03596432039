// The GPU ODE kernels of erf committees with K = M = 3 (ode_member.cuh).
#include "ode_member.cuh"

namespace twolayer::cuda {
TWOLAYER_ODE_LAUNCHER(Erf, 3, 3)
}  // namespace twolayer::cuda
