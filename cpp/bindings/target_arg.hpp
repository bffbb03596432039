// A polynomial target from the arrays Python passes (exponents (n_terms, k) and coefficients (n_terms)).
#pragma once
#include <memory>

#include "common.hpp"
#include "twolayer/target.hpp"

namespace twolayer::bind {

using IntArray = py::array_t<long long, py::array::c_style | py::array::forcecast>;

inline std::shared_ptr<PolyTarget> make_target(const IntArray& alpha, const Array& coef) {
  if (alpha.ndim() != 2) throw std::invalid_argument("target exponents: expected a 2-d array (n_terms, k)");
  const py::ssize_t n = alpha.shape(0), k = alpha.shape(1);
  expect_shape(coef, "target coefficients", {n});
  if (k < 1) throw std::invalid_argument("target exponents: expected k >= 1 columns");
  auto t = std::make_shared<PolyTarget>();
  t->k = static_cast<int>(k);
  for (py::ssize_t j = 0; j < n; ++j) {
    std::vector<int> e(static_cast<std::size_t>(k));
    for (py::ssize_t r = 0; r < k; ++r) {
      const long long v = alpha.at(j, r);
      if (v < 0 || v > 60) throw std::invalid_argument("target exponents: expected entries in [0, 60]");
      e[static_cast<std::size_t>(r)] = static_cast<int>(v);
    }
    if (coef.at(j) != 0.0) t->f[e] += coef.at(j);
  }
  t->validate();
  return t;
}

}  // namespace twolayer::bind
