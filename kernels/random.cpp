// Seeded random numbers that are the same on every platform.
#include "kernels/random.hpp"

#include <cmath>

namespace troupe {

uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  // splitmix64 finalizer over a combination of both inputs.
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double uniform01(std::mt19937_64& rng) {
  return double(rng() >> 11) * 0x1.0p-53;
}

uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  // Reject the lowest (2^64 mod bound) draws so every residue is equally
  // likely.
  uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold)
      return r % bound;
  }
}

double standard_normal(std::mt19937_64& rng) {
  constexpr double two_pi = 6.283185307179586476925;
  double u1 = 1.0 - uniform01(rng); // in (0, 1]: log(u1) is finite
  double u2 = uniform01(rng);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
}

std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng{seed};
  std::vector<float> v(n);
  for (auto& x : v)
    x = lo + float(uniform01(rng)) * (hi - lo);
  return v;
}

} // namespace troupe
