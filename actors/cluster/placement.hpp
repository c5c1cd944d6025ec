// Key distribution: arrays cut into slices, slices placed on servers by a
// consistent-hash ring with virtual nodes and bounded loads.
//
// Slices are placed largest first; each walks the ring clockwise from its
// hash and takes the first server whose load stays within (1 + slack) times
// the mean, else the least loaded one; a slice already
// placed on a live server never moves. So removing a server moves only its
// own slices, and loads stay within the slack of each other.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "messages/kv.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// Number of slices of an array of `size` floats with slices of at most
/// `slice_floats` floats.
uint64_t slice_count(uint64_t size, uint32_t slice_floats);

/// Element range [first, second) of slice `index` of such an array.
std::pair<uint64_t, uint64_t> slice_range(uint64_t size, uint32_t slice_floats,
                                          uint32_t index);

/// 64-bit mix of a slice's name: its place on the ring.
uint64_t slice_hash(slice_id id);

/// A consistent-hash ring over server ranks with `vnodes` points each.
class hash_ring {
public:
  hash_ring(const std::vector<uint32_t>& servers, uint32_t vnodes);

  /// The distinct servers met walking clockwise from `h`, nearest first.
  std::vector<uint32_t> preference(uint64_t h) const;

private:
  std::vector<std::pair<uint64_t, uint32_t>> points_; // sorted by hash
  size_t servers_;
};

/// Parameters of placement.
struct placement_params {
  uint32_t slice_floats = 16384; ///< slice bound: 64 KiB of float32
  uint32_t vnodes = 64;          ///< ring points per server
  double slack = 0.05;           ///< allowed load above the mean
};

/// Returns a placement of every slice of `keys` on `servers`: entries of
/// `current` whose server is still in `servers` are kept as they are; every
/// other slice is placed anew. Precondition: `servers` is not empty.
std::vector<slice_place> place(const std::vector<key_info>& keys,
                               const std::vector<slice_place>& current,
                               const std::vector<uint32_t>& servers,
                               const placement_params& params);

/// The backup of `server` among `servers` (ranks of a view): the next rank
/// above it, wrapping around; `server` itself when it is alone. Each
/// server's slices are replicated on its backup (chain replication).
uint32_t backup_of(uint32_t server, std::vector<uint32_t> servers);

/// Floats per server rank under `placement`.
std::map<uint32_t, uint64_t> load_of(const std::vector<key_info>& keys,
                                     const std::vector<slice_place>& placement,
                                     uint32_t slice_floats);

} // namespace troupe
