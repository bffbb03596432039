// The twolayer._core extension: one module, one bind_<area>.cpp per area of the C++ core.
#include <pybind11/pybind11.h>

#ifndef _WIN32
#include <pthread.h>
#endif

#include "interrupt.hpp"
#include "twolayer/gaussian.hpp"
#include "twolayer/parallel.hpp"

namespace py = pybind11;

namespace twolayer::bind {

py::object& interrupted_type() {
  static auto* type = new py::object();  // never destroyed: it must outlive the interpreter's teardown
  return *type;
}

void raise_interrupted(py::object partial) {
  if (PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_KeyboardInterrupt)) throw py::error_already_set();
    PyErr_Clear();
  }
  py::object exc = interrupted_type()("interrupted (Ctrl-C); what was computed so far is in .partial");
  exc.attr("partial") = std::move(partial);
  PyErr_SetObject(interrupted_type().ptr(), exc.ptr());
  throw py::error_already_set();
}

namespace {
// In a forked child: the parent's OpenMP threads are gone, so run serially, and forget calls that were in flight.
void after_fork_in_child() {
  run_serially();
  reset_cancellation();
}
}  // namespace
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
  twolayer::bind::interrupted_type() = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "twolayer._core.Interrupted",
      "Raised when Ctrl-C (or another cancellation) stops a computation of the core. A KeyboardInterrupt; its "
      "attribute `partial` holds what was computed before the stop (runs, members or records finished so far, "
      "with status \"interrupted\" where they were cut short), or None.",
      PyExc_KeyboardInterrupt, nullptr));
  m.attr("Interrupted") = twolayer::bind::interrupted_type();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const twolayer::Interrupted&) {
      try {
        twolayer::bind::raise_interrupted(py::none());
      } catch (py::error_already_set& e) {
        e.restore();
      }
    }
  });
#ifndef _WIN32
  pthread_atfork(nullptr, nullptr, twolayer::bind::after_fork_in_child);
#endif
  m.def("build_info", [] {
    py::dict info;
    info["version"] = TWOLAYER_VERSION;
    info["openmp"] = twolayer::openmp_enabled();
    info["max_threads"] = twolayer::resolve_threads(0);
    info["thread_limit"] = twolayer::thread_limit();
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
