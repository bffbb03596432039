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

namespace twolayer::rng {

inline constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// One Philox4x32 round-trip of 10 rounds (Salmon et al., SC'11). Integer arithmetic only: exact everywhere.
inline std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> c, std::array<std::uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kPhiloxM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kPhiloxM1) * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
    k[0] += kPhiloxW0;
    k[1] += kPhiloxW1;
  }
  return c;
}

// Stream ids used by the simulators (one per purpose, so that e.g. adding output noise leaves the inputs as they were).
enum Stream : std::uint32_t { kInputs = 1, kLabelNoise = 2, kTrainInputs = 3, kTrainNoise = 4, kShuffle = 5 };

struct StreamId {
  std::uint64_t seed;
  std::uint32_t run;
  std::uint32_t stream;
};

// Raw block i of a stream.
inline std::array<std::uint32_t, 4> block(const StreamId& s, std::uint64_t i) {
  return philox4x32_10({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32), s.run, s.stream},
                       {static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32)});
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
