// The free space of a shared-memory ring (the shm road's memfd rings, one
// per direction): which regions a sender may copy a frame into.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace troupe {

/// Free space of a ring, first fit; thread-safe.
class ring_space {
public:
  explicit ring_space(size_t bytes);
  /// An offset for `n` bytes (rounded up to 64), or SIZE_MAX if none.
  size_t take(size_t n);
  /// Gives back a region `take` handed out; false (and nothing changes)
  /// for anything else: a peer may not free what is not in use.
  bool give(size_t offset, size_t n);
  size_t free_bytes() const;

private:
  mutable std::mutex mtx_;
  std::vector<std::pair<size_t, size_t>> free_; // (offset, bytes), sorted
  std::map<size_t, size_t> taken_;              // offset -> bytes
};

} // namespace troupe
