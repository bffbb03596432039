// Branch-free double-precision arcsine (and exponential, and sine on |x| <= 3 pi / 4) that compilers can vectorise (no libm call), for the hot loops of the
// Gaussian kernels. One rational approximation, Cephes' asin(s) = s + s z P(z)/Q(z), z = s^2, on s <= 1/2 (S. L.
// Moshier), serves both halves of the range: |x| <= 1/2 directly; |x| > 1/2 through the half-angle identity
// asin(x) = pi/2 - 2 asin(s), s = sqrt((1 - |x|) / 2) <= 1/2. Max error 2 ulp against a quad-precision arcsine
// (tests/test_kernels.py).
// Also (host only) e^x and tanh with sech^2 in the same branch-free style, for the activation tables of the smooth
// units' lattices (gaussian_error_square.cpp).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "twolayer/hd.hpp"

// Always inlined: an inline function called out of line is one copy for the whole program, which the linker may take
// from a translation unit compiled with other floating-point flags (FMA contraction allowed there, not in
// batch_integrators.cpp), so that the same call would round differently in a batch and alone. TWOLAYER_HD: the same
// arithmetic in the CUDA backend.
#if defined(__GNUC__) || defined(__clang__)
#define TWOLAYER_ALWAYS_INLINE inline __attribute__((always_inline))
#elif defined(_MSC_VER)
#define TWOLAYER_ALWAYS_INLINE __forceinline
#else
#define TWOLAYER_ALWAYS_INLINE inline
#endif

// A loop over the lanes of structure-of-arrays code (batch_dynamics.hpp): vectorised on the host, plain in device code.
#if defined(TWOLAYER_OPENMP) && !defined(__CUDACC__)
#define TWOLAYER_LANES _Pragma("omp simd")
#define TWOLAYER_PRAGMA(text) _Pragma(#text)
#define TWOLAYER_LANES_OR(flag) TWOLAYER_PRAGMA(omp simd reduction(| : flag))  // lanes loop OR-ing into an int flag
#else
#define TWOLAYER_LANES
#define TWOLAYER_LANES_OR(flag)
#endif

namespace twolayer {

TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double asin_simd(double x) {
  const double a = std::fabs(x);
  // z = a^2 on [0, 1/2] and (1 - a) / 2 above: the smaller of the two (they cross at 1/2), written as one select of
  // two values so that the compiler evaluates the rational function once rather than once per branch.
  const double a2 = a * a, h = 0.5 * (1.0 - a);
  const double z = a2 < h ? a2 : h;
  const bool big = a > 0.5;
  const double s = big ? std::sqrt(z) : a;
  const double p = ((((4.253011369004428248960E-3 * z - 6.019598008014123785661E-1) * z + 5.444622390564711410273E0) *
                         z - 1.626247967210700244449E1) * z + 1.956261983317594739197E1) * z - 8.198089802484824371615E0;
  const double q = ((((z - 1.474091372988853791896E1) * z + 7.049610280856842141659E1) * z -
                     1.471791292232726029859E2) * z + 1.395105614657485689735E2) * z - 4.918853881490881290097E1;
  const double r = z * p / q;  // asin(s) = s + s r
  const double pio2_hi = 1.57079632679489655800E+00, pio2_lo = 6.12323399573676603587E-17;
  const double large = (pio2_hi - 2.0 * s) - (2.0 * s * r - pio2_lo);
  return std::copysign(big ? large : s + s * r, x);
}

// asin(s) for |s| <= 1/2: Cephes' s + s z P(z)/Q(z), z = s^2 (the kernel of asin_simd).
TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double asin_half_simd(double s, double z) {
  const double p = ((((4.253011369004428248960E-3 * z - 6.019598008014123785661E-1) * z + 5.444622390564711410273E0) *
                         z - 1.626247967210700244449E1) * z + 1.956261983317594739197E1) * z - 8.198089802484824371615E0;
  const double q = ((((z - 1.474091372988853791896E1) * z + 7.049610280856842141659E1) * z -
                     1.471791292232726029859E2) * z + 1.395105614657485689735E2) * z - 4.918853881490881290097E1;
  return s + s * (z * p / q);
}

// asin(1 - r^2) for 0 <= r <= 1 without a square root: 1 - r^2 <= 1/2 directly; above, the half-angle identity
// asin(x) = pi/2 - 2 asin(sqrt((1 - x) / 2)) with sqrt((1 - x) / 2) = r / sqrt(2) <= 1/2.
TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double asin_one_minus_sq_simd(double r) {
  const double r2 = r * r;
  const bool big = r2 < 0.5;
  const double s = big ? r * 0.70710678118654752440 : 1.0 - r2;
  const double y = asin_half_simd(s, s * s);
  const double pio2_hi = 1.57079632679489655800E+00, pio2_lo = 6.12323399573676603587E-17;
  return big ? (pio2_hi - 2.0 * y) + pio2_lo : y;
}

// exp(x) (x <= -746: 0, x >= 710: inf, NaN stays NaN), Cephes' exp (S. L. Moshier): x = n ln 2 + r, |r| <= ln 2 / 2
// (ln 2 split in two parts), exp(r) = 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)), times 2^n built from the exponent bits
// (two factors 2^(n/2), so that a subnormal result is formed without ldexp). Within 2 ulp of the C library's
// exp for normal results (tests/test_kernels.py); used where libm's exp would not vectorise: the lanes with biases
// (batch_dynamics_bias.hpp), the lattices' normal weights and tanh tables (gaussian_error_square.cpp).
TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double exp_simd(double x) {
  double xc = x > -746.0 ? x : -746.0;  // NaN: -746 here, NaN returned below
  xc = xc < 710.0 ? xc : 710.0;         // above: inf either way
  const double fx = std::floor(1.4426950408889634074 * xc + 0.5);
  double r = xc - fx * 6.93145751953125E-1;
  r = r - fx * 1.42860682030941723212E-6;
  const double rr = r * r;
  const double px = r * ((1.26177193074810590878E-4 * rr + 3.02994407707441961300E-2) * rr + 9.99999999999999999910E-1);
  const double qx = ((3.00198505138664455042E-6 * rr + 2.52448340349684104192E-3) * rr + 2.27265548208155028766E-1) *
                    rr + 2.00000000000000000009E0;
  const double e = 1.0 + 2.0 * (px / (qx - px));
  // 2^h and 2^(n - h), h = floor(n / 2): each in [2^-538, 2^512], the product exact until it is subnormal
  const double h = std::floor(0.5 * fx), magic = 6755399441055744.0;  // 2^52 + 2^51: integer in the low bits
  const double dh = h + magic, dn = (fx - h) + magic;
  std::int64_t bh, bn, bm;
  std::memcpy(&bh, &dh, sizeof bh);
  std::memcpy(&bn, &dn, sizeof bn);
  std::memcpy(&bm, &magic, sizeof bm);
  bh = (bh - bm + 1023) << 52;
  bn = (bn - bm + 1023) << 52;
  double sh, sn;
  std::memcpy(&sh, &bh, sizeof sh);
  std::memcpy(&sn, &bn, sizeof sn);
  const double v = e * sh * sn;
  return x > -746.0 ? v : (x == x ? 0.0 : x);
}

// sin(x) for |x| <= 3 pi / 4, Cephes' sin (S. L. Moshier): |x| <= pi / 4 its sine polynomial, above the cosine
// polynomial of |x| - pi / 2 (pi / 2 in three parts), computed both and selected. Within 2 ulp of the C library's
// sine (tests/test_kernels.py).
TWOLAYER_ALWAYS_INLINE TWOLAYER_HD double sin_simd(double x) {
  const double a = std::fabs(x);
  const bool big = a > 7.85398163397448309616E-1;
  const double z = big ? ((a - 2.0 * 7.85398125648498535156E-1) - 2.0 * 3.77489470793079817668E-8) -
                             2.0 * 2.69515142907905952645E-15
                       : a;
  const double zz = z * z;
  const double sp = ((((((1.58962301576546568060E-10 * zz - 2.50507477628578072866E-8) * zz +
                         2.75573136213857245213E-6) * zz - 1.98412698295895385996E-4) * zz +
                       8.33333333332211858878E-3) * zz - 1.66666666666666307295E-1));
  const double cp = ((((((-1.13585365213876817300E-11 * zz + 2.08757008419747316778E-9) * zz -
                         2.75573141792967388112E-7) * zz + 2.48015872888517045348E-5) * zz -
                       1.38888888888730564116E-3) * zz + 4.16666666666665929218E-2));
  const double s = z + z * zz * sp, c = (1.0 - 0.5 * zz) + zz * zz * cp;
  return std::copysign(big ? c : s, x);
}

// t = tanh(x) and u = sech^2(x) (host only): with e = e^(-2|x|), u = 4 e / (1 + e)^2 everywhere (no cancellation) and
// |t| = (1 - e) / (1 + e) for |x| >= 0.625 (e <= 0.29), Cephes' x + x^3 P(x^2) / Q(x^2) below. Max error measured
// 1.4 ulp (t) and 2.8 ulp (u) (tests/test_activations_smooth.py).
TWOLAYER_ALWAYS_INLINE void tanh_sech2_simd(double x, double& t, double& u) {
  const double a = std::fabs(x), e = exp_simd(-2.0 * a), r = 1.0 / (1.0 + e);
  const double z = a * a;
  const double p = (-9.64399179425052238628E-1 * z - 9.92877231001918586564E1) * z - 1.61468768441708447952E3;
  const double q = ((z + 1.12811678491632931402E2) * z + 2.23548839060100448583E3) * z + 4.84406305325125486048E3;
  const double small = a + a * z * (p / q);
  t = std::copysign(a < 0.625 ? small : (1.0 - e) * r, x);
  u = 4.0 * e * r * r;
}

}  // namespace twolayer
