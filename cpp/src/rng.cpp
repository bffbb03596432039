// Bulk Philox4x32-10 and Box-Muller Gaussians (see rng.hpp for the definition of the streams).
//
// Written as structure-of-arrays loops over tiles of blocks so that the compiler vectorises them (integer
// Philox rounds with 32x32->64 multiplies; branch-free log, sqrt and sin/cos). This file is compiled with
// -ffp-contract=off and uses explicit fma where FMA hardware is targeted, so the vectorised body and any
// scalar remainder give bit-identical numbers: a Gaussian depends only on its stream and index.
#include "twolayer/rng.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace twolayer::rng {

namespace {

constexpr std::size_t kTile = 64;  // blocks per tile (256 Gaussians)

inline double fmadd(double a, double b, double c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

inline std::uint64_t bits_of(double x) {
  std::uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline double double_of(std::uint64_t u) {
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Philox words of blocks first + [0, n) (n <= kTile), as four separate lanes.
void philox_tile(const StreamId& s, std::uint64_t first, std::size_t n, std::uint32_t* w0, std::uint32_t* w1,
                 std::uint32_t* w2, std::uint32_t* w3) {
  const std::uint32_t key0 = static_cast<std::uint32_t>(s.seed), key1 = static_cast<std::uint32_t>(s.seed >> 32);
  const std::uint32_t run = s.run, stream = s.stream;
#pragma omp simd
  for (std::size_t b = 0; b < n; ++b) {
    const std::uint64_t i = first + b;
    std::uint32_t c0 = static_cast<std::uint32_t>(i), c1 = static_cast<std::uint32_t>(i >> 32), c2 = run,
                  c3 = stream;
    std::uint32_t k0 = key0, k1 = key1;
    for (int round = 0; round < 10; ++round) {
      const std::uint64_t p0 = static_cast<std::uint64_t>(kPhiloxM0) * c0;
      const std::uint64_t p1 = static_cast<std::uint64_t>(kPhiloxM1) * c2;
      const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1 ^ k0;
      const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<std::uint32_t>(p1);
      c3 = static_cast<std::uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    w0[b] = c0;
    w1[b] = c1;
    w2[b] = c2;
    w3[b] = c3;
  }
}

// ln x for normal positive x: x = 2^e m, m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh((m - 1)/(m + 1)).
inline double log_pos(double x) {
  const std::uint64_t u = bits_of(x);
  double e = double_of(0x4330000000000000ull | (u >> 52)) - (4503599627370496.0 + 1023.0);
  double m = double_of((u & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
  const bool big = m > 1.4142135623730950488;
  m *= big ? 0.5 : 1.0;  // selects between constants: no conditional arithmetic, so the loop if-converts
  e += big ? 1.0 : 0.0;
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;  // |s| <= 0.1716, s2 <= 0.0295
  double p = 1.0 / 19.0;
  p = fmadd(p, s2, 1.0 / 17.0);
  p = fmadd(p, s2, 1.0 / 15.0);
  p = fmadd(p, s2, 1.0 / 13.0);
  p = fmadd(p, s2, 1.0 / 11.0);
  p = fmadd(p, s2, 1.0 / 9.0);
  p = fmadd(p, s2, 1.0 / 7.0);
  p = fmadd(p, s2, 1.0 / 5.0);
  p = fmadd(p, s2, 1.0 / 3.0);
  const double ln_m = fmadd(2.0 * s * s2, p, 2.0 * s);
  return fmadd(e, 0.69314718055994530942, ln_m);
}

// Box-Muller on word pairs: radius word kr, angle word ka -> (r cos theta, r sin theta).
void box_muller(const std::uint32_t* kr, const std::uint32_t* ka, std::size_t n, double* zc, double* zs) {
#pragma omp simd
  for (std::size_t p = 0; p < n; ++p) {
    const double u = (static_cast<double>(kr[p]) + 0.5) * 2.3283064365386962890625e-10;  // 2^-32
    const double r = std::sqrt(-2.0 * log_pos(u));
    // theta = pi k / 2^31 = q pi/2 + phi with q the nearest quadrant and |phi| <= pi/4.
    const std::uint32_t q = ((ka[p] + 0x20000000u) >> 30) & 3u;
    const std::int32_t f = static_cast<std::int32_t>(ka[p] - (q << 30));
    const double phi = static_cast<double>(f) * 1.4629180792671596811e-09;  // pi / 2^31
    const double x2 = phi * phi;
    double sp = -1.0 / 1307674368000.0;  // -1/15!
    sp = fmadd(sp, x2, 1.0 / 6227020800.0);
    sp = fmadd(sp, x2, -1.0 / 39916800.0);
    sp = fmadd(sp, x2, 1.0 / 362880.0);
    sp = fmadd(sp, x2, -1.0 / 5040.0);
    sp = fmadd(sp, x2, 1.0 / 120.0);
    sp = fmadd(sp, x2, -1.0 / 6.0);
    const double sn = fmadd(phi * x2, sp, phi);
    double cp = 1.0 / 20922789888000.0;  // 1/16!
    cp = fmadd(cp, x2, -1.0 / 87178291200.0);
    cp = fmadd(cp, x2, 1.0 / 479001600.0);
    cp = fmadd(cp, x2, -1.0 / 3628800.0);
    cp = fmadd(cp, x2, 1.0 / 40320.0);
    cp = fmadd(cp, x2, -1.0 / 720.0);
    cp = fmadd(cp, x2, 1.0 / 24.0);
    cp = fmadd(cp, x2, -0.5);
    const double cs = fmadd(x2, cp, 1.0);
    const bool swap = (q & 1u) != 0;
    const double bc = swap ? sn : cs, bs = swap ? cs : sn;
    const double sign_c = ((q + 1u) & 2u) != 0 ? -r : r, sign_s = (q & 2u) != 0 ? -r : r;
    zc[p] = sign_c * bc;
    zs[p] = sign_s * bs;
  }
}

// Gaussians of blocks first + [0, n) (n <= kTile) into out[0, 4 n).
void gaussian_tile(const StreamId& s, std::uint64_t first, std::size_t n, double* out) {
  alignas(64) std::uint32_t kr[2 * kTile], ka[2 * kTile];
  alignas(64) double zc[2 * kTile], zs[2 * kTile];
  // Pair 0 of block b uses words (0, 1), pair 1 words (2, 3); pairs are laid out as [pair 0 of all b | pair 1].
  philox_tile(s, first, n, kr, ka, kr + n, ka + n);
  box_muller(kr, ka, 2 * n, zc, zs);
  for (std::size_t b = 0; b < n; ++b) {
    out[4 * b + 0] = zc[b];
    out[4 * b + 1] = zs[b];
    out[4 * b + 2] = zc[n + b];
    out[4 * b + 3] = zs[n + b];
  }
}

}  // namespace

void philox_blocks(const StreamId& s, std::uint64_t first, std::size_t n_blocks, std::uint32_t* out) {
  alignas(64) std::uint32_t w[4][kTile];
  for (std::size_t done = 0; done < n_blocks; done += kTile) {
    const std::size_t n = std::min(kTile, n_blocks - done);
    philox_tile(s, first + done, n, w[0], w[1], w[2], w[3]);
    for (std::size_t b = 0; b < n; ++b)
      for (int j = 0; j < 4; ++j) out[4 * (done + b) + j] = w[j][b];
  }
}

void gaussians(const StreamId& s, std::uint64_t first, std::size_t n, double* out) {
  if (n == 0) return;
  alignas(64) double edge[4];
  std::uint64_t blk = first / 4;
  std::size_t pos = 0;
  const std::size_t head = static_cast<std::size_t>(first % 4);
  if (head != 0) {  // leading partial block
    gaussian_tile(s, blk, 1, edge);
    const std::size_t take = std::min<std::size_t>(4 - head, n);
    std::copy(edge + head, edge + head + take, out);
    pos = take;
    ++blk;
  }
  while (n - pos >= 4) {  // whole blocks, straight into out
    const std::size_t nb = std::min(kTile, (n - pos) / 4);
    gaussian_tile(s, blk, nb, out + pos);
    pos += 4 * nb;
    blk += nb;
  }
  if (pos < n) {  // trailing partial block
    gaussian_tile(s, blk, 1, edge);
    std::copy(edge, edge + (n - pos), out + pos);
  }
}

}  // namespace twolayer::rng
