// First passage of the excess risk through a threshold inside one accepted step, shared by the integrator
// driver (lane_driver.hpp), the step-unit flow (step_flow.cpp) and the CUDA backend.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>

#include "twolayer/hd.hpp"

namespace twolayer {

// The smallest theta in (0, 1] (up to rounding) with risk(at(theta)) <= threshold inside a step of length h from t,
// given risk(at(0)) = r0 > threshold >= risk(at(1)) = r1. Illinois (modified regula falsi) on g = risk - threshold,
// which keeps the bracket [lo, hi] with g(lo) > 0 >= g(hi); at(theta, out) writes the interpolated state to out and
// risk(out) is its excess risk. Returns hi, so the state there satisfies risk <= threshold. TWOLAYER_HD: the CUDA
// backend's members locate their passages with it too.
template <class At, class Risk>
TWOLAYER_HD double locate_first_passage(At&& at, Risk&& risk, double threshold, double t, double h, double r0, double r1,
                            double* out) {
  double lo = 0.0, hi = 1.0, glo = r0 - threshold, ghi = r1 - threshold;
  int side = 0;
  const double tol = 4.0 * std::numeric_limits<double>::epsilon() * std::max(std::fabs(t), std::fabs(t + h));
  for (int it = 0; it < 100 && ghi < 0.0 && (hi - lo) * h > tol; ++it) {
    double c = (lo * ghi - hi * glo) / (ghi - glo);
    if (!(c > lo && c < hi)) c = 0.5 * (lo + hi);
    at(c, out);
    const double gc = risk(out) - threshold;
    if (!std::isfinite(gc)) break;
    if (gc <= 0.0) {
      hi = c;
      ghi = gc;
      if (side == -1) glo *= 0.5;
      side = -1;
    } else {
      lo = c;
      glo = gc;
      if (side == 1) ghi *= 0.5;
      side = 1;
    }
  }
  return hi;
}

}  // namespace twolayer
