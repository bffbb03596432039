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

}  // namespace twolayer::bind
