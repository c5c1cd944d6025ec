// The fast road's settings (INI group "road") and the choice of road that
// the kv client and the shard server make (--kv.road, --server.replica-road).
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace troupe {

/// Which road kv frames take.
enum class road_kind : uint8_t { middleman, tcp, shm };

/// Parses --kv.road: auto (shm on the same machine, else tcp) | tcp |
/// middleman. `auto` yields shm; road_dial falls back to tcp.
caf::expected<road_kind> parse_road(const std::string& x);

const char* to_string(road_kind x);

/// How a process's roads wait for bytes (INI group "road"). Each time is
/// in microseconds, 0 = off, at most 10000. The owner of a road (the kv
/// client, the shard server) holds these and gives them to each road it
/// dials or listens on: road_dial, road_listener::start, road_conn.
struct road_settings {
  /// Default of caller_spin_us: a blocking caller reading its own reply
  /// polls this long before it sleeps (docs/data-path.md).
  static constexpr uint32_t caller_spin_default_us = 200;
  /// Default of frame_spin_us: a reader inside a large frame polls this
  /// long for more of it before it sleeps (docs/data-path.md).
  static constexpr uint32_t frame_spin_default_us = 50;

  /// Road readers (a connection's reader thread, and any reader waiting
  /// for the rest of a small frame; large ones: frame_spin_us) poll their
  /// socket this long before they sleep, yielding the core between polls:
  /// a message that comes meanwhile wakes no thread. It burns the time it
  /// polls, on a core other threads may need: 0 (off) by default.
  uint32_t spin_us = 0;
  /// A blocking caller reading its own reply (road_conn::pump_once: the kv
  /// class's calls) polls its socket this long before it sleeps. Unlike a
  /// reader thread's poll, this one costs only a thread that waits for
  /// that very reply anyway, and it takes the wake-up out of a round trip
  /// (docs/benchmarks.md). A reply slower than this (a large pull) costs
  /// the poll once per call. Default 200.
  uint32_t caller_spin_us = caller_spin_default_us;
  /// A reader inside a large frame (its rest 32 KiB or more, read straight
  /// to its destination) polls this long for more bytes before it sleeps.
  /// The sender is writing that frame now, so more comes within
  /// microseconds: a reader that slept each time it caught up with the
  /// sender had to be woken for every 64 KiB or so, and the sender paid
  /// for each wake-up in its sendmsg (docs/benchmarks.md). Polling only
  /// within a frame costs at most this much per pause of the sender.
  /// Default 50.
  uint32_t frame_spin_us = frame_spin_default_us;
  /// tcp roads take one connection both ways instead of asking the server
  /// to answer on a reply connection of their own. Default off: with a
  /// socket each way, a worker's sending thread never contends for the
  /// socket its reader reads, which pays when several requests are in
  /// flight; one at a time, each direction's pure ACKs, which one socket
  /// both ways folds into the replies, cost a little (docs/benchmarks.md).
  bool single_conn = false;
};

/// One error naming the flag that is out of range, or none.
caf::error validate(const road_settings& x);

} // namespace troupe
