// Activation functions sigma and their derivatives, shared by every layer of the core.
#pragma once
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "twolayer/hd.hpp"

namespace twolayer {

// Order matters: kernels of a pair (a, b) are written once for a <= b and swapped otherwise.
enum class Activation : int { Linear = 0, Erf = 1, Relu = 2, Step = 3, Quadratic = 4 };

inline constexpr double kPi = 3.14159265358979323846;
inline constexpr double kSqrt2 = 1.41421356237309504880;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// sigma(s) (host and device, hd.hpp): linear s, erf(s/sqrt2), relu max(s,0), step 1(s>0), quadratic s^2.
TWOLAYER_HD inline double sigma(Activation a, double s) {
  switch (a) {
    case Activation::Linear: return s;
    case Activation::Erf: return std::erf(s / kSqrt2);
    case Activation::Relu: return s > 0.0 ? s : 0.0;
    case Activation::Step: return s > 0.0 ? 1.0 : 0.0;
    case Activation::Quadratic: return s * s;
  }
  return 0.0;
}

// sigma'(s); for step the derivative is a delta and this returns 0 (use the kernels, not samples).
TWOLAYER_HD inline double dsigma(Activation a, double s) {
  switch (a) {
    case Activation::Linear: return 1.0;
    case Activation::Erf: return kSqrt2OverPi * std::exp(-0.5 * s * s);
    case Activation::Relu: return s > 0.0 ? 1.0 : 0.0;
    case Activation::Step: return 0.0;
    case Activation::Quadratic: return 2.0 * s;
  }
  return 0.0;
}

inline const char* activation_name(Activation a) {
  switch (a) {
    case Activation::Linear: return "linear";
    case Activation::Erf: return "erf";
    case Activation::Relu: return "relu";
    case Activation::Step: return "step";
    case Activation::Quadratic: return "quadratic";
  }
  return "?";
}

inline Activation parse_activation(const std::string& name) {
  for (int k = 0; k <= 4; ++k) {
    auto a = static_cast<Activation>(k);
    if (name == activation_name(a)) return a;
  }
  throw std::invalid_argument("activation: expected one of 'linear', 'erf', 'relu', 'step', 'quadratic', got '" +
                              name + "'");
}

}  // namespace twolayer
