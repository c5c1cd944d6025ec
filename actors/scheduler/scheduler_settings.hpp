// Settings of the scheduler (INI group "cluster").
#pragma once

#include <cstdint>
#include <optional>

#include <caf/error.hpp>

#include "actors/base/member_secret.hpp"
#include "actors/cluster/placement.hpp"
#include "actors/server/server_settings.hpp"

namespace troupe {

/// Settings of the scheduler (INI group "cluster").
struct scheduler_settings {
  /// Servers to wait for before placing keys; 0 = none: a cluster of
  /// pipeline stages alone, where a declare is refused. Default 1.
  uint32_t servers = 1;
  /// Workers a barrier waits for (at least the live ones). Default 1.
  uint32_t workers = 1;
  /// Slicing and ring parameters.
  placement_params placement;
  /// The cluster's checkpoints, which the scheduler coordinates.
  checkpoint_settings checkpoint;
  /// The cluster's road key (member_secret.hpp); none: a fresh random one
  /// at start, which is what troupe-node does (no flag sets it). Tests
  /// fix it to speak on roads as a member would.
  std::optional<secret> road_key;
  /// Where every event also goes as a line of JSON (events.jsonl, opened
  /// to append); empty: nowhere (--cluster.events-file).
  std::string events_file;
  /// Port of the status page (--cluster.status-port); 0 = none.
  uint16_t status_port = 0;
  /// Address it listens on: the node's --host.
  std::string status_host = "127.0.0.1";
};

/// One error naming the --cluster.* flag that is out of range, or none.
caf::error validate(const scheduler_settings& x);

} // namespace troupe
