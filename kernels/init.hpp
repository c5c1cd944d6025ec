// Seeded weight initialisers. The same seed gives the same values on every
// platform (see kernels/random.hpp), so any node can rebuild a model.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/status.hpp"

namespace troupe {

/// He (Kaiming) normal: w[i] ~ N(0, sqrt(2 / fan_in)) for i in [0, n); for
/// layers followed by relu. fan_in > 0 and w non-null if n > 0, else
/// bad_input.
kernel_status he_normal_cpu(float* w, size_t n, size_t fan_in, uint64_t seed);

/// Xavier (Glorot) uniform: w[i] ~ U(-a, a), a = sqrt(6 / (fan_in +
/// fan_out)), for i in [0, n); for layers without relu. fan_in + fan_out >
/// 0 and w non-null if n > 0, else bad_input.
kernel_status xavier_uniform_cpu(float* w, size_t n, size_t fan_in,
                                 size_t fan_out, uint64_t seed);

} // namespace troupe
