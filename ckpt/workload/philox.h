// Philox4x32-10, the counter-based generator of Random123 (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11) - the generator
// behind torch's CUDA RNG - and the keyed draws of the training workload.
//
// A counter-based generator has no sequential state: output = f(counter, key).
// The workload keys every draw by what it is about (seed, tensor, domain) and
// counts it by where it is (global element index, sample id, RNG offset), so
// any rank can compute the draw of any element without the ranks before it -
// which is what makes the results independent of the TP/PP/DP layout and the
// RNG state small and layout-invariant: (seed, offset).
//
// Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace ckpt::workload {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Philox4x32 with 10 rounds; matches the Random123 known-answer vectors.
inline PhiloxCounter Philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = uint64_t(kM0) * c[0];
    const uint64_t p1 = uint64_t(kM1) * c[2];
    c = {uint32_t(p1 >> 32) ^ c[1] ^ k[0], uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k[1], uint32_t(p0)};
  }
  return c;
}

// SplitMix64 finaliser: a bijective 64-bit mixer.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// FNV-1a of a tensor key: stable across builds and platforms (std::hash is not).
inline uint64_t HashKey(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char ch : s) h = (h ^ uint8_t(ch)) * 0x100000001B3ull;
  return h;
}

// What a draw is for; part of the Philox key so the streams never overlap.
enum class Domain : uint32_t { kInit = 1, kData = 2, kNoise = 3, kInput = 4, kOutput = 5, kSample = 6 };

inline PhiloxKey StreamKey(uint64_t seed, uint64_t tensor_hash, Domain d) {
  const uint64_t k = Mix64(seed ^ Mix64(tensor_hash + uint64_t(d)));
  return {uint32_t(k), uint32_t(k >> 32)};
}

// Counter for (element or row index, a second 64-bit coordinate).
inline PhiloxCounter Counter(uint64_t index, uint64_t second) {
  return {uint32_t(index), uint32_t(index >> 32), uint32_t(second), uint32_t(second >> 32)};
}

// Uniform in [-1, 1) with 24 significant bits: exactly representable in fp32.
inline float SignedUnit(uint32_t u) { return float(int32_t(u) >> 8) * (1.0f / 8388608.0f); }

// The per-sample data target of one element: an integer in [-2048, 2047].
// Integers so that sums over samples are exact whatever their order or
// grouping (DP slices, micro batches): the reduced gradient is layout-invariant.
inline int32_t DataTarget(uint32_t u) { return int32_t(u >> 20) - 2048; }

}  // namespace ckpt::workload
