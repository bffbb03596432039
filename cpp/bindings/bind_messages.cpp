// Bindings of the run status messages (run_messages.hpp): the one source of the text of every engine's messages.
#include <string>

#include "common.hpp"
#include "twolayer/run_messages.hpp"

namespace twolayer::bind {

void bind_messages(py::module_& m) {
  m.def("completed_message", &completed_message, py::arg("t_end"), py::arg("steps"), py::arg("rhs"));
  m.def("diverged_message", &diverged_message, py::arg("t"), py::arg("why"));
  m.def("interrupted_message", &interrupted_message, py::arg("t"), py::arg("steps"));
  m.def("max_steps_message", &max_steps_message, py::arg("max_steps"), py::arg("t"));
  m.def(
      "converged_message",
      [](double risk, double threshold, double risk_tol, double risk_rtol, double t) {
        return converged_message(risk, threshold, StopRule{risk_tol, risk_rtol}, t);
      },
      py::arg("risk"), py::arg("threshold"), py::arg("risk_tol"), py::arg("risk_rtol"), py::arg("t"));
  m.def("sgd_completed_message", &sgd_completed_message, py::arg("steps"), py::arg("samples"), py::arg("n_samples"));
  m.def("sde_completed_message", &sde_completed_message, py::arg("steps"), py::arg("dt"));
}

}  // namespace twolayer::bind
