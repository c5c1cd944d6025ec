// The consistency mode of the shard servers: sync, async or ssp:s; and
// sync_device, which the servers run as sync while each worker sums its
// devices' gradients on the devices first (actors/device/).
#pragma once

#include <cstdint>
#include <string>

#include <caf/expected.hpp>

namespace troupe {

/// When a worker may read, and when pushes are applied.
struct consistency {
  enum class kind_t : uint8_t {
    sync,  ///< sum every live worker's push for clock t, then apply once
    async, ///< apply each push on arrival; reads never wait
    ssp,   ///< apply on arrival; a worker at clock c waits for c - s
  };
  kind_t kind = kind_t::sync;
  uint32_t staleness = 0; ///< s of ssp:s; 0 otherwise
  /// sync_device: sync on the servers; a worker's devices sum their
  /// gradients through a communicator and one push leaves the node.
  bool on_device = false;
};

/// Parses "sync", "sync_device", "async" or "ssp:S" (S a non-negative
/// integer).
caf::expected<consistency> parse_consistency(const std::string& text);

/// "sync", "sync_device", "async" or "ssp:S".
std::string to_string(const consistency& x);

} // namespace troupe
