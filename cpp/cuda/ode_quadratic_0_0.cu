// The GPU ODE kernels of quadratic committees with K and M at run time (K, M <= kRuntimeUnits) (ode_member.cuh).
#include "ode_member.cuh"

namespace twolayer::cuda {
TWOLAYER_ODE_LAUNCHER(Quadratic, 0, 0)
}  // namespace twolayer::cuda
