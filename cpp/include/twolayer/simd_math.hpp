// Branch-free double-precision arcsine that compilers can vectorise (no libm call), for the hot loops of the
// Gaussian kernels. Cephes' rational approximations (S. L. Moshier): |x| <= 0.625: x + x^3 P(x^2)/Q(x^2);
// otherwise pi/2 - sqrt(2 (1 - |x|)) (1 + R/S). Max error about 2 ulp against std::asin (tested).
#pragma once
#include <cmath>

namespace twolayer {

inline double asin_simd(double x) {
  const double a = std::fabs(x);
  // Small branch: z = a + a zz P(zz) / Q(zz), zz = a^2.
  const double zz = a * a;
  const double p = ((((4.253011369004428248960E-3 * zz - 6.019598008014123785661E-1) * zz + 5.444622390564711410273E0) *
                         zz - 1.626247967210700244449E1) * zz + 1.956261983317594739197E1) * zz - 8.198089802484824371615E0;
  const double q = ((((zz - 1.474091372988853791896E1) * zz + 7.049610280856842141659E1) * zz -
                     1.471791292232726029859E2) * zz + 1.395105614657485689735E2) * zz - 4.918853881490881290097E1;

  // Large branch: w = 1 - a.
  const double w = 1.0 - a;
  const double r = (((2.967721961301243206100E-3 * w - 5.634242780008963776856E-1) * w + 6.968710824104713396794E0) * w -
                    2.556901049652824852289E1) * w + 2.853665548261061424989E1;
  const double s = (((w - 2.194779531642920639778E1) * w + 1.470656354026814941758E2) * w - 3.838770957603691357202E2) * w +
                   3.424398657913078477438E2;
  const bool big = a > 0.625;
  const double num_l = w * r, num_s = zz * p;
  const double num = big ? num_l : num_s, den = big ? s : q;
  const double ratio = num / den;  // one division for both branches
  const double sq = std::sqrt(w + w);
  const double pio4 = 7.85398163397448309616E-1;
  const double large = ((pio4 - sq) - (sq * ratio - 6.123233995736765886130E-17)) + pio4;
  const double small = a + a * ratio;
  const double z = big ? large : small;
  return std::copysign(z, x);
}

}  // namespace twolayer
