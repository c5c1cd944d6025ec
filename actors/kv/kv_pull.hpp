// The worker side of a pull: the arrays being filled from the servers'
// replies, the copy of each reply into them, and, on a tcp road, the
// landing that reads a reply's large slices from the socket straight into
// their place (actors/road/road.hpp, road_landing), so that they are copied
// once, by the kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <caf/error.hpp>

#include "actors/road/road.hpp"
#include "messages/kv.hpp"
#include "messages/named_array.hpp"

namespace troupe {

/// Arrays being pulled: filled slice by slice as replies arrive.
struct pull_target {
  /// Capacity reserved and filled in order; or sized in full before the
  /// pulls go, where replies may land in place (a tcp road) or memory of
  /// the right size was at hand (its stale values are all overwritten).
  std::vector<named_array> out;
  std::vector<size_t> floats;          // declared size of each
  std::vector<size_t> got;             // floats received of each
  std::vector<std::vector<bool>> seen; // slices received of each
  std::map<uint64_t, size_t> index_of; // key -> index in out

  /// Adds array `key` of `floats` floats cut into slices of `bound`, to be
  /// filled into `memory`: empty, or `floats` long.
  void add(uint64_t key, size_t floats, uint32_t bound,
           std::vector<float> memory = {});
  /// Where slice `id` of `n` floats goes, if its array is sized in full and
  /// the slice is one of it of that size; else null.
  float* slot(slice_id id, size_t n, uint32_t bound);
  /// Null if every array got all its slices, else why not.
  caf::error complete() const;
};

/// Copies the slices of a PullReply into the arrays of `t`: appended when
/// they come in order (no zero fill first), else copied in place. A reply
/// that landed (bytes_view::segments) has its large slices in place
/// already; any other slice must lie in its receive buffer.
caf::error copy_reply(bytes_view f, pull_target& t, uint32_t bound);

/// Lands the pull replies for `t` on a tcp road: each slice whose values
/// are a segment of their own (a server's large slices are:
/// messages/kv.cpp) is read from the socket into its place in `t`, which
/// must be sized in full first. copy_reply then finds them there.
struct pull_landing : road_landing {
  pull_landing(std::shared_ptr<pull_target> target, uint32_t slice_bound)
      : t(std::move(target)), bound(slice_bound) {}
  void place(const std::vector<bytes_view>& segs,
             std::vector<uint8_t*>& at) override;
  std::shared_ptr<pull_target> t; // kept alive while the road writes there
  uint32_t bound;
};

} // namespace troupe
