// Bulk Philox4x32-10 and Box-Muller Gaussians (see rng.hpp for the definition of the streams).
//
// Two implementations of the same arithmetic: a portable scalar one and, with AVX2 + FMA, hand-written
// intrinsics that process 8 Philox blocks (32 Gaussians) at a time. Both use the same operations in the same
// order (explicit fma, IEEE division and square root, exact integer/double conversions); this file is compiled
// with -ffp-contract=off so that the compiler adds no contraction of its own. Hence the two give identical bits,
// and a Gaussian depends only on its stream and index.
#include "twolayer/rng.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TWOLAYER_RNG_AVX2 1
#endif

namespace twolayer::rng {

namespace {

constexpr std::size_t kGroup = 32;  // Gaussians per group of 8 blocks

// Polynomial coefficients (Taylor series; shared by both paths).
constexpr double kLog[9] = {1.0 / 19.0, 1.0 / 17.0, 1.0 / 15.0, 1.0 / 13.0, 1.0 / 11.0,
                            1.0 / 9.0,  1.0 / 7.0,  1.0 / 5.0,  1.0 / 3.0};
constexpr double kSin[7] = {-1.0 / 1307674368000.0, 1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0,
                            -1.0 / 5040.0,          1.0 / 120.0,        -1.0 / 6.0};
constexpr double kCos[8] = {1.0 / 20922789888000.0, -1.0 / 87178291200.0, 1.0 / 479001600.0, -1.0 / 3628800.0,
                            1.0 / 40320.0,          -1.0 / 720.0,         1.0 / 24.0,         -0.5};
constexpr double kLn2 = 0.69314718055994530942;
constexpr double kSqrtHalf2 = 1.4142135623730950488;  // sqrt(2)
constexpr double kTwo52 = 4503599627370496.0;
constexpr double kPiOver2_31 = 1.4629180792671596811e-09;  // pi / 2^31
constexpr double kTwoM32 = 2.3283064365386962890625e-10;   // 2^-32

// ---------------------------------------------------------------------------------------------------------------
// Scalar path.

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

// (r cos theta, r sin theta) for radius word kr and angle word ka.
inline void box_muller_scalar(std::uint32_t kr, std::uint32_t ka, double& zc, double& zs) {
  // u = (kr + 1/2) 2^-32, exactly; ln u = e ln 2 + ln m with m in [sqrt(1/2), sqrt(2)).
  const double u = ((double_of(0x4330000000000000ull | kr) - kTwo52) + 0.5) * kTwoM32;
  const std::uint64_t ub = bits_of(u);
  double e = double_of(0x4330000000000000ull | (ub >> 52)) - (kTwo52 + 1023.0);
  double m = double_of((ub & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
  if (m > kSqrtHalf2) {
    m *= 0.5;
    e += 1.0;
  }
  const double s = (m - 1.0) / (m + 1.0), s2 = s * s;  // ln m = 2 atanh(s), |s| <= 0.1716
  double p = kLog[0];
  for (int k = 1; k < 9; ++k) p = fmadd(p, s2, kLog[k]);
  const double s_2 = 2.0 * s;
  const double ln_u = fmadd(e, kLn2, fmadd(s_2 * s2, p, s_2));
  const double r = std::sqrt(-2.0 * ln_u);
  // theta = pi ka / 2^31 = q pi/2 + phi, q the nearest quadrant, |phi| <= pi/4.
  const std::uint64_t k = ka;
  const std::uint64_t qq = (k + 0x20000000ull) >> 30;  // 0..4
  const std::int64_t f = static_cast<std::int64_t>(k) - static_cast<std::int64_t>(qq << 30);
  const double phi = (double_of(0x4338000000000000ull + static_cast<std::uint64_t>(f)) - 1.5 * kTwo52) * kPiOver2_31;
  const double x2 = phi * phi;
  double sp = kSin[0];
  for (int j = 1; j < 7; ++j) sp = fmadd(sp, x2, kSin[j]);
  const double sn = fmadd(sp, phi * x2, phi);
  double cp = kCos[0];
  for (int j = 1; j < 8; ++j) cp = fmadd(cp, x2, kCos[j]);
  const double cs = fmadd(cp, x2, 1.0);
  const std::uint64_t q = qq & 3u;
  const double bc = (q & 1u) ? sn : cs, bs = (q & 1u) ? cs : sn;
  const double rc = double_of(bits_of(r) ^ (((q + 1u) & 2u) << 62));  // -r for q = 1, 2
  const double rs = double_of(bits_of(r) ^ ((q & 2u) << 62));         // -r for q = 2, 3
  zc = rc * bc;
  zs = rs * bs;
}

void group_scalar(const StreamId& s, std::uint64_t g, double* out) {
  for (int b = 0; b < 8; ++b) {
    const auto w = block(s, 8 * g + static_cast<std::uint64_t>(b));
    box_muller_scalar(w[0], w[1], out[b], out[8 + b]);
    box_muller_scalar(w[2], w[3], out[16 + b], out[24 + b]);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// AVX2 + FMA path: identical operations on 4 doubles / 8 uint32 at a time.
#ifdef TWOLAYER_RNG_AVX2

// Round keys of a stream, broadcast: key[r] = (k0 + r W0, k1 + r W1) in every 64-bit lane (only the low 32 bits
// of a lane matter).
struct RoundKeys {
  __m256i k0[10], k1[10];
  explicit RoundKeys(const StreamId& s) {
    std::uint32_t a = static_cast<std::uint32_t>(s.seed), b = static_cast<std::uint32_t>(s.seed >> 32);
    for (int r = 0; r < 10; ++r, a += kPhiloxW0, b += kPhiloxW1) {
      k0[r] = _mm256_set1_epi64x(a);
      k1[r] = _mm256_set1_epi64x(b);
    }
  }
};

// Philox rounds on 4 blocks held one per 64-bit lane (the low 32 bits of each lane are the word; the high bits
// carry garbage that _mm256_mul_epu32 ignores and the final mask removes).
inline void philox4_lanes(const RoundKeys& k, __m256i& c0, __m256i& c1, __m256i& c2, __m256i& c3) {
  const __m256i m0 = _mm256_set1_epi64x(kPhiloxM0), m1 = _mm256_set1_epi64x(kPhiloxM1);
  for (int r = 0; r < 10; ++r) {
    const __m256i p0 = _mm256_mul_epu32(c0, m0), p1 = _mm256_mul_epu32(c2, m1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1), k.k0[r]);
    c2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3), k.k1[r]);
    c1 = p1;
    c3 = p0;
  }
}

// Words of blocks 8 g + [0, 8) as 8 x uint32 lanes (lane b = block 8 g + b): even and odd blocks run as two sets
// of 64-bit lanes, then interleave.
inline void philox8(const StreamId& s, const RoundKeys& k, std::uint64_t g, __m256i& c0, __m256i& c1,
                    __m256i& c2, __m256i& c3) {
  const std::uint64_t i0 = 8 * g;
  const __m256i run = _mm256_set1_epi64x(s.run), stream = _mm256_set1_epi64x(s.stream);
  __m256i e[4], o[4];
  const auto lo32 = [](std::uint64_t i) { return static_cast<long long>(static_cast<std::uint32_t>(i)); };
  const auto hi32 = [](std::uint64_t i) { return static_cast<long long>(i >> 32); };
  e[0] = _mm256_setr_epi64x(lo32(i0), lo32(i0 + 2), lo32(i0 + 4), lo32(i0 + 6));
  o[0] = _mm256_setr_epi64x(lo32(i0 + 1), lo32(i0 + 3), lo32(i0 + 5), lo32(i0 + 7));
  e[1] = _mm256_setr_epi64x(hi32(i0), hi32(i0 + 2), hi32(i0 + 4), hi32(i0 + 6));
  o[1] = _mm256_setr_epi64x(hi32(i0 + 1), hi32(i0 + 3), hi32(i0 + 5), hi32(i0 + 7));
  e[2] = o[2] = run;
  e[3] = o[3] = stream;
  philox4_lanes(k, e[0], e[1], e[2], e[3]);
  philox4_lanes(k, o[0], o[1], o[2], o[3]);
  const __m256i lo_mask = _mm256_set1_epi64x(0xFFFFFFFFll);
  const auto merge = [&](__m256i ev, __m256i od) {
    return _mm256_blend_epi32(_mm256_and_si256(ev, lo_mask), _mm256_slli_epi64(od, 32), 0xAA);
  };
  c0 = merge(e[0], o[0]);
  c1 = merge(e[1], o[1]);
  c2 = merge(e[2], o[2]);
  c3 = merge(e[3], o[3]);
}

inline __m256d fma4(__m256d a, __m256d b, __m256d c) { return _mm256_fmadd_pd(a, b, c); }
inline __m256d bcast(double x) { return _mm256_set1_pd(x); }

// Box-Muller on 4 (radius, angle) word pairs held as 64-bit lanes.
inline void box_muller4(__m256i kr, __m256i ka, double* zc, double* zs) {
  const __m256i magic52 = _mm256_set1_epi64x(0x4330000000000000ll);
  const __m256d u = _mm256_mul_pd(
      _mm256_add_pd(_mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(magic52, kr)), bcast(kTwo52)), bcast(0.5)),
      bcast(kTwoM32));
  const __m256i ub = _mm256_castpd_si256(u);
  __m256d e = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(magic52, _mm256_srli_epi64(ub, 52))),
                            bcast(kTwo52 + 1023.0));
  __m256d m = _mm256_castsi256_pd(_mm256_or_si256(_mm256_and_si256(ub, _mm256_set1_epi64x(0x000FFFFFFFFFFFFFll)),
                                                  _mm256_set1_epi64x(0x3FF0000000000000ll)));
  const __m256d big = _mm256_cmp_pd(m, bcast(kSqrtHalf2), _CMP_GT_OQ);
  m = _mm256_blendv_pd(m, _mm256_mul_pd(m, bcast(0.5)), big);
  e = _mm256_blendv_pd(e, _mm256_add_pd(e, bcast(1.0)), big);
  const __m256d s = _mm256_div_pd(_mm256_sub_pd(m, bcast(1.0)), _mm256_add_pd(m, bcast(1.0)));
  const __m256d s2 = _mm256_mul_pd(s, s);
  __m256d p = bcast(kLog[0]);
  for (int k = 1; k < 9; ++k) p = fma4(p, s2, bcast(kLog[k]));
  const __m256d s_2 = _mm256_mul_pd(bcast(2.0), s);
  const __m256d ln_u = fma4(e, bcast(kLn2), fma4(_mm256_mul_pd(s_2, s2), p, s_2));
  const __m256d r = _mm256_sqrt_pd(_mm256_mul_pd(bcast(-2.0), ln_u));

  const __m256i qq = _mm256_srli_epi64(_mm256_add_epi64(ka, _mm256_set1_epi64x(0x20000000ll)), 30);
  const __m256i f = _mm256_sub_epi64(ka, _mm256_slli_epi64(qq, 30));
  const __m256d phi = _mm256_mul_pd(
      _mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(_mm256_set1_epi64x(0x4338000000000000ll), f)),
                    bcast(1.5 * kTwo52)),
      bcast(kPiOver2_31));
  const __m256d x2 = _mm256_mul_pd(phi, phi);
  __m256d sp = bcast(kSin[0]);
  for (int j = 1; j < 7; ++j) sp = fma4(sp, x2, bcast(kSin[j]));
  const __m256d sn = fma4(sp, _mm256_mul_pd(phi, x2), phi);
  __m256d cp = bcast(kCos[0]);
  for (int j = 1; j < 8; ++j) cp = fma4(cp, x2, bcast(kCos[j]));
  const __m256d cs = fma4(cp, x2, bcast(1.0));
  const __m256i q = _mm256_and_si256(qq, _mm256_set1_epi64x(3));
  const __m256i one = _mm256_set1_epi64x(1), two = _mm256_set1_epi64x(2);
  const __m256d swap = _mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(q, one), one));
  const __m256d bc = _mm256_blendv_pd(cs, sn, swap), bs = _mm256_blendv_pd(sn, cs, swap);
  const __m256i rb = _mm256_castpd_si256(r);
  const __m256d rc = _mm256_castsi256_pd(
      _mm256_xor_si256(rb, _mm256_slli_epi64(_mm256_and_si256(_mm256_add_epi64(q, one), two), 62)));
  const __m256d rs = _mm256_castsi256_pd(_mm256_xor_si256(rb, _mm256_slli_epi64(_mm256_and_si256(q, two), 62)));
  _mm256_storeu_pd(zc, _mm256_mul_pd(rc, bc));
  _mm256_storeu_pd(zs, _mm256_mul_pd(rs, bs));
}

inline void group_avx2(const StreamId& s, const RoundKeys& k, std::uint64_t g, double* out) {
  __m256i c0, c1, c2, c3;
  philox8(s, k, g, c0, c1, c2, c3);
  const auto lo = [](__m256i v) { return _mm256_cvtepu32_epi64(_mm256_castsi256_si128(v)); };
  const auto hi = [](__m256i v) { return _mm256_cvtepu32_epi64(_mm256_extracti128_si256(v, 1)); };
  box_muller4(lo(c0), lo(c1), out + 0, out + 8);
  box_muller4(hi(c0), hi(c1), out + 4, out + 12);
  box_muller4(lo(c2), lo(c3), out + 16, out + 24);
  box_muller4(hi(c2), hi(c3), out + 20, out + 28);
}

#endif


template <class Group>
void fill(const StreamId& s, std::uint64_t first, std::size_t n, double* out, Group&& grp) {
  if (n == 0) return;
  alignas(32) double edge[kGroup];
  std::uint64_t g = first / kGroup;
  std::size_t pos = 0;
  const std::size_t head = static_cast<std::size_t>(first % kGroup);
  if (head != 0) {  // leading partial group
    grp(s, g, edge);
    const std::size_t take = std::min<std::size_t>(kGroup - head, n);
    std::copy(edge + head, edge + head + take, out);
    pos = take;
    ++g;
  }
  for (; n - pos >= kGroup; pos += kGroup, ++g) grp(s, g, out + pos);  // whole groups, straight into out
  if (pos < n) {                                                       // trailing partial group
    grp(s, g, edge);
    std::copy(edge, edge + (n - pos), out + pos);
  }
}

}  // namespace

void philox_blocks(const StreamId& s, std::uint64_t first, std::size_t n_blocks, std::uint32_t* out) {
  for (std::size_t b = 0; b < n_blocks; ++b) {
    const auto w = block(s, first + b);
    std::copy(w.begin(), w.end(), out + 4 * b);
  }
}

void gaussians(const StreamId& s, std::uint64_t first, std::size_t n, double* out) {
#ifdef TWOLAYER_RNG_AVX2
  const RoundKeys keys(s);
  fill(s, first, n, out, [&keys](const StreamId& ss, std::uint64_t g, double* o) { group_avx2(ss, keys, g, o); });
#else
  fill(s, first, n, out, [](const StreamId& ss, std::uint64_t g, double* o) { group_scalar(ss, g, o); });
#endif
}

void gaussians_scalar(const StreamId& s, std::uint64_t first, std::size_t n, double* out) {
  fill(s, first, n, out, [](const StreamId& ss, std::uint64_t g, double* o) { group_scalar(ss, g, o); });
}

bool gaussians_vectorised() {
#ifdef TWOLAYER_RNG_AVX2
  return true;
#else
  return false;
#endif
}

}  // namespace twolayer::rng
