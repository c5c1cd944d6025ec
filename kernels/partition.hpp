// Which samples a data-parallel worker trains on in an epoch: a seeded
// shuffle of all samples, cut into one contiguous part per worker.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/status.hpp"

namespace troupe {

/// Writes to `out` the sample indices of worker `rank` of `workers` in
/// `epoch`: the permutation of [0, n) drawn from (seed, epoch) is cut into
/// `workers` contiguous parts whose sizes differ by at most one, and `out`
/// gets part `rank` in permutation order. So across all ranks every sample
/// appears exactly once per epoch, the order changes with the epoch, and the
/// result is the same on every platform. workers > 0 and rank < workers,
/// else bad_input.
kernel_status epoch_partition(size_t n, uint64_t epoch, uint64_t seed,
                              uint32_t rank, uint32_t workers,
                              std::vector<size_t>& out);

} // namespace troupe
