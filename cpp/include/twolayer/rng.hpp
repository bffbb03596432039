// Counter-based random numbers: Philox4x32-10 and bulk standard-normal generation.
//
// A stream is named by (seed, run, stream id); its i-th 128-bit block is Philox4x32-10 applied to the counter
// (i mod 2^32, i div 2^32, run, stream id) under the 64-bit key `seed`. Nothing is carried from one block to the
// next, so any block (and any Gaussian) can be produced on its own: results do not depend on how the work is
// split into chunks or threads.
//
// Gaussians come in groups of 32 from 8 consecutive blocks (group g: blocks 8g + b, b = 0..7, words k0..k3),
// by Box-Muller on 32-bit uniforms: pair A of block b uses radius word k0 and angle word k1, pair B k2 and k3,
//   r = sqrt(-2 ln((k_radius + 1/2) 2^-32)),  theta = 2 pi k_angle 2^-32,
// and Gaussian 32 g + j is  j in [0, 8): r_A cos theta_A of block j,   [8, 16): r_A sin theta_A of block j - 8,
//                            [16, 24): r_B cos theta_B of block j - 16, [24, 32): r_B sin theta_B of block j - 24.
// (This order lets 8-wide vector code store its results contiguously.) The transform is evaluated in single
// precision with branch-free polynomials (ln u through 1 - u near u = 1, so small radii stay accurate) and
// returned as doubles: each Gaussian is within a few 1e-7 (relative) of the exact transform of its words, far
// below any statistical resolution; |z| <= 6.8. With AVX2 + FMA the Philox rounds and Box-Muller run 8 blocks at
// a time (hand-written intrinsics) and give bit-identical numbers to the portable scalar path (same operations,
// explicit fma, no contraction).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "twolayer/hd.hpp"

namespace twolayer::rng {

inline constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// Philox4x32-10 (Salmon et al., SC'11) of counter c under key (k0, k1), in place. Integer arithmetic only: exact
// everywhere, host and device.
TWOLAYER_HD inline void philox4x32_10(std::uint32_t c[4], std::uint32_t k0, std::uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kPhiloxM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kPhiloxM1) * c[2];
    const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k0;
    const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = static_cast<std::uint32_t>(p1);
    c[2] = n2;
    c[3] = static_cast<std::uint32_t>(p0);
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
}

inline std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> k) {
  philox4x32_10(c.data(), k[0], k[1]);
  return c;
}

// Stream ids used by the simulators (one per purpose, so that e.g. adding output noise leaves the inputs as they were).
enum Stream : std::uint32_t { kInputs = 1, kLabelNoise = 2, kTrainInputs = 3, kTrainNoise = 4, kShuffle = 5 };

struct StreamId {
  std::uint64_t seed;
  std::uint32_t run;
  std::uint32_t stream;
};

// Raw block i of a stream into w[4].
TWOLAYER_HD inline void block(const StreamId& s, std::uint64_t i, std::uint32_t w[4]) {
  w[0] = static_cast<std::uint32_t>(i);
  w[1] = static_cast<std::uint32_t>(i >> 32);
  w[2] = s.run;
  w[3] = s.stream;
  philox4x32_10(w, static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32));
}
inline std::array<std::uint32_t, 4> block(const StreamId& s, std::uint64_t i) {
  std::array<std::uint32_t, 4> w;
  block(s, i, w.data());
  return w;
}

// ---------------------------------------------------------------------------------------------------------------
// Box-Muller in single precision, the scalar reference of both host paths and the CUDA kernels (one source). Each
// Gaussian is accurate to a few 1e-7 relative, far below any statistical resolution. Coefficients: Taylor series,
// shared with the AVX2 path of rng.cpp (scalars, so that device code may read them).
namespace bm {
inline constexpr float kLog0 = 1.0f / 9.0f, kLog1 = 1.0f / 7.0f, kLog2 = 1.0f / 5.0f, kLog3 = 1.0f / 3.0f;  // 2 atanh(s) = 2 s (1 + s^2/3 + ...)
inline constexpr float kSin0 = 1.0f / 362880.0f, kSin1 = -1.0f / 5040.0f, kSin2 = 1.0f / 120.0f, kSin3 = -1.0f / 6.0f;
inline constexpr float kCos0 = -1.0f / 3628800.0f, kCos1 = 1.0f / 40320.0f, kCos2 = -1.0f / 720.0f, kCos3 = 1.0f / 24.0f,
                       kCos4 = -0.5f;
inline constexpr float kLn2f = 0.693147180559945309f;
inline constexpr float kSqrt2f = 1.41421356237309505f;
inline constexpr float kTwoM31 = 4.656612873077392578125e-10f;     // 2^-31
inline constexpr float kTwoM33 = 1.16415321826934814453125e-10f;   // 2^-33
inline constexpr float kPiOver2_31f = 1.46291807926715968e-09f;    // pi / 2^31

// a b + c: one rounding (fma) where the host has FMA and on the device, else two (see rng.cpp: without FMA the host
// Gaussians differ from the device's in the last bits of single precision).
TWOLAYER_HD inline float fmaddf(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return fmaf(a, b, c);
#elif defined(__FMA__)
  return __builtin_fmaf(a, b, c);
#else
  return a * b + c;
#endif
}
TWOLAYER_HD inline std::uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}
TWOLAYER_HD inline float float_of(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}
TWOLAYER_HD inline float sqrt_f(float x) {  // IEEE square root (nvcc: -prec-sqrt=true, the default)
#if defined(__CUDA_ARCH__)
  return sqrtf(x);
#else
  return __builtin_sqrtf(x);
#endif
}
}  // namespace bm

// (r cos theta, r sin theta) for radius word kr and angle word ka (rng.cpp's box_muller8 is this on 8 lanes).
TWOLAYER_HD inline void box_muller(std::uint32_t kr, std::uint32_t ka, double& zc, double& zs) {
  using namespace bm;
  // u = (kr + 1/2) 2^-32 and w = 1 - u = (~kr + 1/2) 2^-32, each to float precision.
  const float u = fmaddf(static_cast<float>(static_cast<std::int32_t>(kr >> 1)), kTwoM31, kTwoM33);
  const float w = fmaddf(static_cast<float>(static_cast<std::int32_t>((~kr) >> 1)), kTwoM31, kTwoM33);
  // u = 2^e m, m in [sqrt(1/2), sqrt(2)); ln u = e ln 2 + 2 atanh(t / (t + 2)), t = m - 1 (= -w when e = 0, which
  // keeps ln u accurate near u = 1, i.e. small radii).
  const std::uint32_t ub = bits_of(u);
  float e = static_cast<float>(static_cast<std::int32_t>(ub >> 23) - 127);
  float m = float_of((ub & 0x007FFFFFu) | 0x3F800000u);
  if (m > kSqrt2f) {
    m *= 0.5f;
    e += 1.0f;
  }
  const float t = e == 0.0f ? -w : m - 1.0f;
  const float s = t / (t + 2.0f), s2 = s * s;
  const float p = fmaddf(fmaddf(fmaddf(kLog0, s2, kLog1), s2, kLog2), s2, kLog3);
  const float s_2 = 2.0f * s;
  const float ln_u = fmaddf(e, kLn2f, fmaddf(s_2 * s2, p, s_2));
  const float r = sqrt_f(-2.0f * ln_u);
  // theta = pi ka / 2^31 = q pi/2 + phi, q the nearest quadrant, |phi| <= pi/4 (32-bit wrapping arithmetic).
  const std::uint32_t qq = (ka + 0x20000000u) >> 30;
  const std::int32_t f = static_cast<std::int32_t>(ka - (qq << 30));
  const float phi = static_cast<float>(f) * kPiOver2_31f;
  const float x2 = phi * phi;
  const float sp = fmaddf(fmaddf(fmaddf(kSin0, x2, kSin1), x2, kSin2), x2, kSin3);
  const float sn = fmaddf(sp, phi * x2, phi);
  const float cp = fmaddf(fmaddf(fmaddf(fmaddf(kCos0, x2, kCos1), x2, kCos2), x2, kCos3), x2, kCos4);
  const float cs = fmaddf(cp, x2, 1.0f);
  const std::uint32_t q = qq & 3u;
  const float bc = (q & 1u) ? sn : cs, bs = (q & 1u) ? cs : sn;
  const float rc = float_of(bits_of(r) ^ (((q + 1u) & 2u) << 30));  // -r for q = 1, 2
  const float rs = float_of(bits_of(r) ^ ((q & 2u) << 30));         // -r for q = 2, 3
  zc = static_cast<double>(rc * bc);
  zs = static_cast<double>(rs * bs);
}

// The four Gaussians that block b = 8 g + j (j in [0, 8)) of a stream gives: z[0..3] are Gaussians 32 g + j, + 8,
// + 16, + 24 (the order of the header comment).
TWOLAYER_HD inline void block_gaussians(const StreamId& s, std::uint64_t b, double z[4]) {
  std::uint32_t w[4];
  block(s, b, w);
  box_muller(w[0], w[1], z[0], z[1]);
  box_muller(w[2], w[3], z[2], z[3]);
}

// Gaussian i of a stream on its own (one block, one Box-Muller pair).
TWOLAYER_HD inline double gaussian_at(const StreamId& s, std::uint64_t i) {
  const std::uint64_t g = i / 32;
  const unsigned j = static_cast<unsigned>(i % 32);
  std::uint32_t w[4];
  block(s, 8 * g + (j % 8), w);
  double zc, zs;
  if (j < 16) box_muller(w[0], w[1], zc, zs);
  else box_muller(w[2], w[3], zc, zs);
  return (j / 8) % 2 == 0 ? zc : zs;
}

// Raw words of blocks [first, first + n_blocks): out[4 b + lane].
void philox_blocks(const StreamId& s, std::uint64_t first, std::size_t n_blocks, std::uint32_t* out);

// Gaussians [first, first + n) of a stream (any alignment).
void gaussians(const StreamId& s, std::uint64_t first, std::size_t n, double* out);

// The same numbers from the portable scalar code (reference for tests; slow).
void gaussians_scalar(const StreamId& s, std::uint64_t first, std::size_t n, double* out);

// True when the vectorised (AVX2 + FMA) path is compiled in.
bool gaussians_vectorised();

// Uniform integer in [0, n) from 64 bits of block i (words 0, 1); bias below n / 2^64.
inline std::uint64_t bounded(const StreamId& s, std::uint64_t i, std::uint64_t n) {
  const auto w = block(s, i);
  const std::uint64_t r = (static_cast<std::uint64_t>(w[1]) << 32) | w[0];
#ifdef __SIZEOF_INT128__
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(r) * n) >> 64);
#else
  return r % n;
#endif
}

}  // namespace twolayer::rng
