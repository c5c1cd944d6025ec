// Seeded random numbers that are the same on every platform: std::mt19937_64
// is fully specified, but std's distributions and std::shuffle are not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace troupe {

/// A seed for stream `stream` of `seed` (splitmix64 of both), so that e.g.
/// each layer or each epoch gets its own independent generator.
uint64_t derive_seed(uint64_t seed, uint64_t stream);

/// Uniform double in [0, 1) from the top 53 bits of one draw.
double uniform01(std::mt19937_64& rng);

/// Uniform integer in [0, bound) without modulo bias; bound > 0.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound);

/// Standard normal N(0, 1) by Box-Muller (two uniform draws per value).
double standard_normal(std::mt19937_64& rng);

/// `n` floats uniform in [lo, hi) from `seed`: tests' and benchmarks'
/// fresh inputs.
std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f,
                                 float hi = 1.0f);

} // namespace troupe
