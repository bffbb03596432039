// Shared binding helpers: array conversion with shape checks. No maths here.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace twolayer::bind {

namespace py = pybind11;
using Array = py::array_t<double, py::array::c_style | py::array::forcecast>;

// Checks that `arr` has the given number of dimensions and, where expected[k] >= 0, that size.
inline void expect_shape(const Array& arr, const std::string& name, std::vector<py::ssize_t> expected) {
  if (arr.ndim() != static_cast<py::ssize_t>(expected.size()))
    throw std::invalid_argument(name + ": expected a " + std::to_string(expected.size()) + "-d array, got " +
                                std::to_string(arr.ndim()) + "-d");
  for (std::size_t k = 0; k < expected.size(); ++k)
    if (expected[k] >= 0 && arr.shape(k) != expected[k])
      throw std::invalid_argument(name + ": axis " + std::to_string(k) + " must have length " +
                                  std::to_string(expected[k]) + ", got " + std::to_string(arr.shape(k)));
}

inline Array new_array(std::vector<py::ssize_t> shape) { return Array(shape); }

// A dimension (units, d) for the core, whose sizes are int: refused above 2^31 - 1.
inline int dimension(py::ssize_t n, const std::string& name) {
  if (n > std::numeric_limits<int>::max())
    throw std::invalid_argument(name + ": expected at most " + std::to_string(std::numeric_limits<int>::max()) +
                                ", got " + std::to_string(n));
  return static_cast<int>(n);
}

// The recorded rows of R runs of T records each: Q (R, T, K, K), M (R, T, K, M), a (R, T, K), risk (R, T). point()
// aims run j's output struct (fields Q, M, a, risk) at its rows; put() stores the arrays in a result dict.
struct RunRows {
  py::ssize_t T, K, M;
  Array Q, Mo, a, risk;
  RunRows(py::ssize_t R, py::ssize_t T_, py::ssize_t K_, py::ssize_t M_)
      : T(T_), K(K_), M(M_), Q(new_array({R, T_, K_, K_})), Mo(new_array({R, T_, K_, M_})), a(new_array({R, T_, K_})),
        risk(new_array({R, T_})) {}
  template <class Out>
  void point(Out& o, py::ssize_t j) {
    o.Q = Q.mutable_data() + j * T * K * K;
    o.M = Mo.mutable_data() + j * T * K * M;
    o.a = a.mutable_data() + j * T * K;
    o.risk = risk.mutable_data() + j * T;
  }
  void put(py::dict& out) const {
    out["Q"] = Q;
    out["M"] = Mo;
    out["a"] = a;
    out["risk"] = risk;
  }
};

}  // namespace twolayer::bind
