// Seeded test inputs for kernel tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/random.hpp"

namespace troupe::test {

/// `n` floats uniform in [-1, 1), the same for the same seed.
inline std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::vector<float> xs(n);
  for (auto& x : xs)
    x = float(2.0 * uniform01(rng) - 1.0);
  return xs;
}

} // namespace troupe::test
