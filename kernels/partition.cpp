// Which samples a data-parallel worker trains on in an epoch.
#include "kernels/partition.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include "kernels/random.hpp"

namespace troupe {

kernel_status epoch_partition(size_t n, uint64_t epoch, uint64_t seed,
                              uint32_t rank, uint32_t workers,
                              std::vector<size_t>& out) {
  if (workers == 0 || rank >= workers)
    return kernel_status::bad_input;
  // Fisher-Yates with our own bounded draw: std::shuffle's sequence differs
  // between standard libraries, and every worker must agree on it.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::mt19937_64 rng{derive_seed(seed, epoch)};
  for (size_t i = n; i > 1; --i)
    std::swap(order[i - 1], order[uniform_below(rng, i)]);
  // Parts of n / workers samples; the first n % workers get one more.
  size_t base = n / workers, extra = n % workers;
  size_t first = rank * base + std::min<size_t>(rank, extra);
  size_t count = base + (rank < extra ? 1 : 0);
  out.assign(order.begin() + first, order.begin() + first + count);
  return kernel_status::ok;
}

} // namespace troupe
