// The GPU ODE kernels of quadratic committees with K = M = 8 (ode_member.cuh).
#include "ode_member.cuh"

namespace twolayer::cuda {
TWOLAYER_ODE_LAUNCHER(Quadratic, 8, 8)
}  // namespace twolayer::cuda
