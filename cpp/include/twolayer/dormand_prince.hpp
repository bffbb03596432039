// The Dormand-Prince 5(4) tableau (Hairer's dopri5), shared by the integrator driver (lane_driver.hpp) and the
// step-unit flow (step_flow.cpp): nodes c, stages a, 5th-order weights b, dense output d, error weights e = b - b*.
#pragma once
#include <cstddef>

#include "twolayer/hd.hpp"

namespace twolayer::dopri {

constexpr double c2 = 1.0 / 5, c3 = 3.0 / 10, c4 = 4.0 / 5, c5 = 8.0 / 9;
constexpr double a21 = 1.0 / 5;
constexpr double a31 = 3.0 / 40, a32 = 9.0 / 40;
constexpr double a41 = 44.0 / 45, a42 = -56.0 / 15, a43 = 32.0 / 9;
constexpr double a51 = 19372.0 / 6561, a52 = -25360.0 / 2187, a53 = 64448.0 / 6561, a54 = -212.0 / 729;
constexpr double a61 = 9017.0 / 3168, a62 = -355.0 / 33, a63 = 46732.0 / 5247, a64 = 49.0 / 176,
                 a65 = -5103.0 / 18656;
constexpr double b1 = 35.0 / 384, b3 = 500.0 / 1113, b4 = 125.0 / 192, b5 = -2187.0 / 6784, b6 = 11.0 / 84;
// Dense output (Hairer's dopri5 CONTD5).
constexpr double d1 = -12715105075.0 / 11282082432.0, d3 = 87487479700.0 / 32700410799.0,
                 d4 = -10690763975.0 / 1880347072.0, d5 = 701980252875.0 / 199316789632.0,
                 d6 = -1453857185.0 / 822651844.0, d7 = 69997945.0 / 29380423.0;
constexpr double e1 = 71.0 / 57600, e3 = -71.0 / 16695, e4 = 71.0 / 1920, e5 = -17253.0 / 339200,
                 e6 = 22.0 / 525, e7 = -1.0 / 40;

}  // namespace twolayer::dopri

namespace twolayer::dopri {

// Hairer's dense output (CONTD5) of an accepted step of length h from y0 to y1 with stages k1, k3, ..., k7 (k7 the
// right-hand side at y1), n entries each, entry i at [i * stride] (the lanes of a structure-of-arrays state): the
// contiguous coefficients r2..r5 of y(t + th h) = y0 + th (r2 + (1 - th) (r3 + th (r4 + (1 - th) r5)))
// (dense_value).
TWOLAYER_HD inline void dense_coefficients(const double* y0, const double* y1, const double* k1, const double* k3,
                                           const double* k4, const double* k5, const double* k6, const double* k7,
                                           double h, std::size_t n, double* r2, double* r3, double* r4, double* r5,
                                           std::size_t stride = 1) {
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t x = i * stride;
    r2[i] = y1[x] - y0[x];
    r3[i] = h * k1[x] - r2[i];
    r4[i] = r2[i] - h * k7[x] - r3[i];
    r5[i] = h * (d1 * k1[x] + d3 * k3[x] + d4 * k4[x] + d5 * k5[x] + d6 * k6[x] + d7 * k7[x]);
  }
}
// The dense output at fraction th of the step into out (contiguous; y0 strided as above).
TWOLAYER_HD inline void dense_value(const double* y0, const double* r2, const double* r3, const double* r4,
                                    const double* r5, double th, std::size_t n, double* out, std::size_t stride = 1) {
  const double th1 = 1.0 - th;
  for (std::size_t i = 0; i < n; ++i)
    out[i] = y0[i * stride] + th * (r2[i] + th1 * (r3[i] + th * (r4[i] + th1 * r5[i])));
}

}  // namespace twolayer::dopri
