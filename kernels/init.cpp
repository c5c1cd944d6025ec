// Seeded weight initialisers.
#include "kernels/init.hpp"

#include <cmath>
#include <random>

#include "kernels/random.hpp"

namespace troupe {

kernel_status he_normal_cpu(float* w, size_t n, size_t fan_in, uint64_t seed) {
  if ((n > 0 && !w) || fan_in == 0)
    return kernel_status::bad_input;
  std::mt19937_64 rng{seed};
  double std_dev = std::sqrt(2.0 / double(fan_in));
  for (size_t i = 0; i < n; ++i)
    w[i] = float(std_dev * standard_normal(rng));
  return kernel_status::ok;
}

kernel_status xavier_uniform_cpu(float* w, size_t n, size_t fan_in,
                                 size_t fan_out, uint64_t seed) {
  if ((n > 0 && !w) || fan_in + fan_out == 0)
    return kernel_status::bad_input;
  std::mt19937_64 rng{seed};
  double a = std::sqrt(6.0 / double(fan_in + fan_out));
  for (size_t i = 0; i < n; ++i)
    w[i] = float(a * (2.0 * uniform01(rng) - 1.0));
  return kernel_status::ok;
}

} // namespace troupe
