// The GPU ODE kernels of erf committees with K = M = 8 (ode_member.cuh).
#include "ode_member.cuh"

namespace twolayer::cuda {
TWOLAYER_ODE_LAUNCHER(Erf, 8, 8)
}  // namespace twolayer::cuda
