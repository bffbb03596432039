// The twolayer._core extension: one module, one bind_<area>.cpp per area of the C++ core.
#include <pybind11/pybind11.h>

#include "twolayer/gaussian.hpp"
#include "twolayer/parallel.hpp"

namespace py = pybind11;

namespace twolayer::bind {
void bind_gaussian(py::module_& m);
void bind_population(py::module_& m);
void bind_sgd(py::module_& m);
void bind_ode(py::module_& m);
void bind_landscape(py::module_& m);
}  // namespace twolayer::bind

#ifndef TWOLAYER_VERSION
#define TWOLAYER_VERSION "0.0.0"
#endif

PYBIND11_MODULE(_core, m) {
  m.doc() = "twolayer C++ core (Gaussian kernels, population quantities, dynamics)";
  py::register_exception<twolayer::not_implemented>(m, "KernelNotImplemented", PyExc_NotImplementedError);
  m.def("build_info", [] {
    py::dict info;
    info["version"] = TWOLAYER_VERSION;
    info["openmp"] = twolayer::openmp_enabled();
    info["max_threads"] = twolayer::resolve_threads(0);
#ifdef TWOLAYER_CUDA
    info["cuda"] = true;
#else
    info["cuda"] = false;
#endif
    return info;
  });
  twolayer::bind::bind_gaussian(m);
  twolayer::bind::bind_population(m);
  twolayer::bind::bind_sgd(m);
  twolayer::bind::bind_ode(m);
  twolayer::bind::bind_landscape(m);
}
