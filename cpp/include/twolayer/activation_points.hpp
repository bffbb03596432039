// An activation and its derivatives at many points at once (host only): the evaluations of the smooth units'
// quadratures (gaussian_smooth.hpp's moments, gaussian_error_square.cpp's tables) in vectorised passes instead of
// one sigma_derivatives call per point.
//   * tanh: t = tanh(s) and u = sech^2(s) from one exponential (simd_math.hpp, tanh_sech2_simd, <= 2.8 ulp), the
//     derivatives as polynomials in t times u: -2 t u, u (6 t^2 - 2), u t (16 - 24 t^2) (sigma_derivatives');
//   * custom tables: run by run of the points inside one panel, the Clenshaw recurrences of 8 points and all the
//     orders side by side (the series without their trailing zeros: the same sums as custom_derivatives); points
//     outside the panels (the tangent tails) one by one;
//   * the others: sigma_derivatives (sigma for the value alone) point by point, the same numbers.
#pragma once
#include "twolayer/activation.hpp"

namespace twolayer {

// out[k][q] = sigma^(k)(s[q]) for k = 0..order (order <= 4) and q < n; out[k] may be null (that order not stored).
void sigma_derivatives_at(Activation a, const double* s, int n, int order, double* const* out);

}  // namespace twolayer
