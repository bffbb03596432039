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

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TWOLAYER_RNG_AVX2 1
#endif

namespace twolayer::rng {

namespace {

constexpr std::size_t kGroup = 32;  // Gaussians per group of 8 blocks

// The AVX2 path's coefficients: the scalar ones of rng.hpp (box_muller, the one scalar source shared with the
// CUDA kernels).
using namespace bm;
constexpr float kLog[4] = {kLog0, kLog1, kLog2, kLog3};
constexpr float kSin[4] = {kSin0, kSin1, kSin2, kSin3};
constexpr float kCos[5] = {kCos0, kCos1, kCos2, kCos3, kCos4};

// ---------------------------------------------------------------------------------------------------------------
// Scalar path: box_muller of rng.hpp.

void group_scalar(const StreamId& s, std::uint64_t g, double* out) {
  for (int b = 0; b < 8; ++b) {
    double z[4];
    block_gaussians(s, 8 * g + static_cast<std::uint64_t>(b), z);
    out[b] = z[0];
    out[8 + b] = z[1];
    out[16 + b] = z[2];
    out[24 + b] = z[3];
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

inline __m256 fma8(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
inline __m256 bcast(float x) { return _mm256_set1_ps(x); }

// Box-Muller on 8 (radius, angle) word pairs, 8 x uint32 lanes; the same operations as box_muller (rng.hpp).
inline void box_muller8(__m256i kr, __m256i ka, double* zc, double* zs) {
  const __m256 u = fma8(_mm256_cvtepi32_ps(_mm256_srli_epi32(kr, 1)), bcast(kTwoM31), bcast(kTwoM33));
  const __m256 w = fma8(_mm256_cvtepi32_ps(_mm256_srli_epi32(_mm256_xor_si256(kr, _mm256_set1_epi32(-1)), 1)),
                        bcast(kTwoM31), bcast(kTwoM33));
  const __m256i ub = _mm256_castps_si256(u);
  __m256 e = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(ub, 23), _mm256_set1_epi32(127)));
  __m256 m = _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(ub, _mm256_set1_epi32(0x007FFFFF)),
                                                 _mm256_set1_epi32(0x3F800000)));
  const __m256 big = _mm256_cmp_ps(m, bcast(kSqrt2f), _CMP_GT_OQ);
  m = _mm256_blendv_ps(m, _mm256_mul_ps(m, bcast(0.5f)), big);
  e = _mm256_blendv_ps(e, _mm256_add_ps(e, bcast(1.0f)), big);
  const __m256 e0 = _mm256_cmp_ps(e, bcast(0.0f), _CMP_EQ_OQ);
  const __m256 t = _mm256_blendv_ps(_mm256_sub_ps(m, bcast(1.0f)), _mm256_sub_ps(bcast(0.0f), w), e0);
  const __m256 s = _mm256_div_ps(t, _mm256_add_ps(t, bcast(2.0f)));
  const __m256 s2 = _mm256_mul_ps(s, s);
  __m256 p = bcast(kLog[0]);
  for (int k = 1; k < 4; ++k) p = fma8(p, s2, bcast(kLog[k]));
  const __m256 s_2 = _mm256_mul_ps(bcast(2.0f), s);
  const __m256 ln_u = fma8(e, bcast(kLn2f), fma8(_mm256_mul_ps(s_2, s2), p, s_2));
  const __m256 r = _mm256_sqrt_ps(_mm256_mul_ps(bcast(-2.0f), ln_u));

  const __m256i qq = _mm256_srli_epi32(_mm256_add_epi32(ka, _mm256_set1_epi32(0x20000000)), 30);
  const __m256i f = _mm256_sub_epi32(ka, _mm256_slli_epi32(qq, 30));
  const __m256 phi = _mm256_mul_ps(_mm256_cvtepi32_ps(f), bcast(kPiOver2_31f));
  const __m256 x2 = _mm256_mul_ps(phi, phi);
  __m256 sp = bcast(kSin[0]);
  for (int j = 1; j < 4; ++j) sp = fma8(sp, x2, bcast(kSin[j]));
  const __m256 sn = fma8(sp, _mm256_mul_ps(phi, x2), phi);
  __m256 cp = bcast(kCos[0]);
  for (int j = 1; j < 5; ++j) cp = fma8(cp, x2, bcast(kCos[j]));
  const __m256 cs = fma8(cp, x2, bcast(1.0f));
  const __m256i one = _mm256_set1_epi32(1), two = _mm256_set1_epi32(2);
  const __m256 swap = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(qq, one), one));
  const __m256 bc = _mm256_blendv_ps(cs, sn, swap), bs = _mm256_blendv_ps(sn, cs, swap);
  const __m256i rb = _mm256_castps_si256(r);
  const __m256 rc = _mm256_castsi256_ps(
      _mm256_xor_si256(rb, _mm256_slli_epi32(_mm256_and_si256(_mm256_add_epi32(qq, one), two), 30)));
  const __m256 rs = _mm256_castsi256_ps(_mm256_xor_si256(rb, _mm256_slli_epi32(_mm256_and_si256(qq, two), 30)));
  const __m256 c = _mm256_mul_ps(rc, bc), sv = _mm256_mul_ps(rs, bs);
  _mm256_storeu_pd(zc, _mm256_cvtps_pd(_mm256_castps256_ps128(c)));
  _mm256_storeu_pd(zc + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(c, 1)));
  _mm256_storeu_pd(zs, _mm256_cvtps_pd(_mm256_castps256_ps128(sv)));
  _mm256_storeu_pd(zs + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(sv, 1)));
}

inline void group_avx2(const StreamId& s, const RoundKeys& k, std::uint64_t g, double* out) {
  __m256i c0, c1, c2, c3;
  philox8(s, k, g, c0, c1, c2, c3);
  box_muller8(c0, c1, out + 0, out + 8);
  box_muller8(c2, c3, out + 16, out + 24);
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
