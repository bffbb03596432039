// The GPU ODE kernels of linear committees with K and M at run time (K, M <= kRuntimeUnits) (ode_member.cuh).
#include "ode_member.cuh"

namespace twolayer::cuda {
TWOLAYER_ODE_LAUNCHER(Linear, 0, 0)
}  // namespace twolayer::cuda
