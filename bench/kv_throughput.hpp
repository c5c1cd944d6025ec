// The pieces of the kv_throughput benchmark, shared by its files and by
// nothing else: its flags, the limits it measures, the troupe-node
// processes, the timed push+pull rounds, the report.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/kv/kv.hpp"
#include "actors/road/road_settings.hpp"
#include "bench/common.hpp"
#include "bench/cpu_share.hpp"
#include "messages/errors.hpp"

namespace troupe::bench::kv_throughput {

inline caf::error sys_error(const char* what) {
  return caf::make_error(errc::not_connected, what, std::strerror(errno));
}

// -- flags (kv_throughput_flags.cpp) ------------------------------------------

extern const char* const usage;

struct options {
  uint32_t servers = 1;
  std::string mode = "async";
  double seconds = 0.5;
  std::string node;
  std::vector<std::string> roads{"middleman", "tcp", "shm"};
  uint32_t max_message_bytes = kv_settings{}.max_message_bytes;
  bool scheduler_only = false;
  bool large_rows = true; // push+pull of 4 KiB..16 MiB values
  bool small_rows = true; // small pairs, one at a time and 8 in flight
  uint32_t spin_us = 0;   // --road.spin-us of both ends (0 = off)
  uint32_t caller_spin_us =
      road_settings::caller_spin_default_us; // ours (0 = off)
  uint32_t frame_spin_us =
      road_settings::frame_spin_default_us; // both ends (0 = off)
  bool reply_conn = true; // our tcp roads: replies on a connection apart
  /// --tls=DIR: each road again with mutual TLS on every CAF connection
  /// (certificates from deploy/make-certs.sh DIR), named "ROAD tls".
  std::string tls_dir;
};

/// Reads `--name=value` flags into `opt`; returns an error line, or "".
std::string parse_flags(const std::vector<std::string>& args, options& opt);

// -- limits (kv_throughput_limits.cpp) ----------------------------------------

/// GB/s through one loopback TCP connection: a writer thread sends 4 MiB
/// buffers for `seconds`, this thread reads until the writer shuts down.
caf::expected<double> tcp_loopback_gbps(double seconds);

/// The small-message limits: raw round trips per second between two
/// processes, 1 and 8 in flight, over each kind of socket the roads use.
struct rt_limits {
  double unix_1 = 0, unix_8 = 0, tcp_1 = 0, tcp_8 = 0;

  /// The limit for a road's small requests: shm sends its headers over
  /// unix sockets, tcp and the middleman over TCP.
  double for_road(const std::string& road, size_t depth) const {
    if (road == "shm")
      return depth == 1 ? unix_1 : unix_8;
    return depth == 1 ? tcp_1 : tcp_8;
  }
  /// The higher of each figure: a limit taken in a slow moment must not
  /// flatter the ratios.
  rt_limits max(const rt_limits& o) const {
    return {std::max(unix_1, o.unix_1), std::max(unix_8, o.unix_8),
            std::max(tcp_1, o.tcp_1), std::max(tcp_8, o.tcp_8)};
  }
};

caf::expected<rt_limits> measure_rt_limits(double seconds);

// -- troupe-node processes (kv_throughput_nodes.cpp) --------------------------

/// The troupe-node beside this program, else the one in its parent dir.
caf::expected<std::string> default_node_path();

/// Child processes; on every path out of scope each gets SIGTERM, then
/// SIGKILL if it is still there after 2 s, and is reaped; the newest
/// first, so servers go before their scheduler and do not log its loss.
struct node_group {
  std::vector<pid_t> pids;

  ~node_group();

  /// Runs `path args...` and waits up to 10 s for its stdout line
  /// "troupe-node: ROLE listening on HOST:PORT (pid N)"; returns PORT.
  caf::expected<uint16_t> start(const std::string& path,
                                std::vector<std::string> args);

  /// Polls the stdout of `pid` for its port, and `pid` for an early exit.
  caf::expected<uint16_t> await_port(pid_t pid, int fd);
};

/// Starts a scheduler for one worker, then `opt.servers` servers; returns
/// the scheduler's port.
caf::expected<uint16_t> start_cluster(node_group& nodes, const options& opt,
                                      const std::vector<std::string>& tls);

// -- rounds (kv_throughput_rounds.cpp) ----------------------------------------

/// The one worker's bookkeeping: the clock of its next push (one sequence
/// for all keys) and, per key, how many pushes of ones it sent.
struct session {
  caf::actor_system& sys;
  kv& store;
  std::chrono::milliseconds timeout; // guards each pipelined request
  uint64_t next_clock = 0;
  std::map<uint64_t, float> pushed = {};
  bool scheduler_only = false; // kv.scheduler-only
};

/// Declares keys 1, 2, ... of `floats[i]` zeros; checks zeros come back.
caf::error init_keys(session& s, const std::vector<size_t>& floats);

struct row_result {
  size_t bytes;
  uint64_t rounds;
  double seconds;          // in push and pull, checks excluded
  double pull_seconds = 0; // in the pulls alone
  double pull_cpu = 0;     // this process's CPU seconds in the pulls
  double gbps() const { return 2.0 * bytes * rounds / seconds / 1e9; }
  double pull_gbps() const { return 1.0 * bytes * rounds / pull_seconds / 1e9; }
  /// This process's CPU time per pulled byte, in copies at `memcpy_gbps`.
  double pull_copies(double memcpy_gbps) const {
    return pull_cpu * memcpy_gbps * 1e9 / (1.0 * bytes * rounds);
  }
};

/// Push+pull rounds of `key` (`floats` long) one at a time, after one
/// warm-up round, until `seconds` of transfer and at least 3 rounds.
caf::expected<row_result> run_row(session& s, uint64_t key, size_t floats,
                                  double seconds, bool batched = false);

/// Push+pull pairs of `key` per second with `depth` requests in flight
/// (pushes and pulls alternate) for about `seconds`.
caf::expected<double> pipelined_ops(session& s, uint64_t key, size_t floats,
                                    size_t depth, double seconds,
                                    bool batched = false);

// -- report (kv_throughput_report.cpp) ----------------------------------------

/// What one road measured.
struct road_result {
  std::string road;
  std::vector<row_result> rows;
  double ops_1 = 0;     // small push+pull pairs per second, 1 in flight
  double ops_8 = 0;     // the same, 8 in flight
  double batched_1 = 0; // pairs per second as push_pull, 1 in flight
  double batched_8 = 0; // the same, 8 in flight
};

/// What a road measured, in one line on stderr as soon as it is done, so
/// that a run cut short still tells it (the report adds the limits).
void print_progress(const road_result& r, const options& opt);

/// Prints the table, the targets, then one line of JSON with every figure.
void print_report(const options& opt, double tcp, double mem,
                  const rt_limits& rt, const std::vector<road_result>& rs,
                  size_t small_floats, const bench::cpu_share& cpu);

} // namespace troupe::bench::kv_throughput
