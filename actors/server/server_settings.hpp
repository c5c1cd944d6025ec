// Settings of a shard server (INI group "server") and of the cluster's
// checkpoints (group "checkpoint", and --resume), which the servers write
// and the scheduler coordinates.
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>

#include "actors/cluster/consistency.hpp"
#include "actors/road/road_settings.hpp"

namespace troupe {

/// Checkpoints: servers write their stores with the optimizer state, the
/// scheduler a manifest once every server wrote a generation
/// (messages/checkpoint.hpp, docs/checkpoints.md).
struct checkpoint_settings {
  /// Folder shared by the cluster's servers and scheduler (one machine, or
  /// a shared file system); "" = no checkpoints.
  std::string dir;
  /// A checkpoint every this many ms while training; 0 = only on request
  /// (the scheduler's checkpoint message). Default 10000.
  uint32_t every_ms = 10000;
  /// Continue from the last checkpoint in dir: servers load their slices
  /// and optimizer state, workers resume at the checkpoint's clock.
  bool resume = false;
  /// Fault injection: a server writing this generation kills itself half
  /// way through the file (a torn checkpoint); 0 = never.
  uint64_t tear_generation = 0;
  /// What the manifest records and a resume checks (set by node_config).
  std::string mode;
  std::string optimizer;
};

/// Checks `x` and creates its folder; one error says what is wrong.
caf::error validate(const checkpoint_settings& x);

/// Settings of a shard server (INI group "server").
struct server_settings {
  /// Consistency mode. Default sync.
  consistency mode;
  /// TCP port of the fast road (actors/road/); 0 = any free port.
  uint16_t road_port = 0;
  /// Give up on a worker that does not read a reply after this long (ms):
  /// the reply is written on the server's actor thread, so a hung worker
  /// holds up the others this long at most. Default 2000 (the default
  /// heartbeat timeout).
  uint32_t road_send_timeout_ms = 2000;
  /// Backups per store: 1 = replicated on the next server (chain
  /// replication: Init and Push are acknowledged once the backup has them),
  /// 0 = none. Default 1.
  uint32_t replicas = 1;
  /// Helper threads that share a round's updates, a push's additions and
  /// the replies of a round with the actor thread
  /// (actors/base/helper_pool.hpp), 0..16; 0 = the actor thread alone. Default
  /// 1 (a core idles while every worker waits for the round).
  uint32_t helper_threads = 1;
  /// How replica operations travel to the backup (--server.replica-road):
  /// auto = the backup's fast road (shared memory on one machine, else
  /// TCP), middleman = CAF. Default auto.
  std::string replica_road_text = "auto";
  /// replica_road_text, parsed by validate().
  road_kind replica_road = road_kind::shm;
  /// Bytes of workers' road frames read and not yet handled, over all
  /// workers together; a frame past it is refused ("server busy") without
  /// being read into memory. At least --kv.window-bytes (one worker's
  /// frames in flight). Default 1 GiB.
  uint32_t inflight_bytes = 1u << 30;
  /// A departed worker's clocks are kept on every server or on none
  /// (docs/atomic-pushes.md; --server.atomic-pushes): sync applies rounds
  /// over an undo image until the cluster's cut; async and ssp hold each
  /// push until its worker says every server has it. Set by validate()
  /// from atomic_pushes_text; tests set it.
  bool atomic_pushes = false;
  /// --server.atomic-pushes: auto (on in sync, where it costs nothing
  /// measurable; off in async and ssp, where a push shows one request
  /// later) | on | off. Default auto.
  std::string atomic_pushes_text = "auto";
  /// Workers cut their messages at this (--kv.max-message-bytes; set by
  /// node_config): with the view's slice bound, it sizes the largest
  /// frame the server takes (worker_frame_bound).
  uint32_t max_message_bytes = 1u << 20;
  /// How this process's roads wait for bytes (group "road").
  road_settings roads;
  checkpoint_settings checkpoint;
  /// The optimizer it applies (optimizer_fingerprint), sent at
  /// registration (set by node_config).
  std::string optimizer;
};

/// Checks `x` and parses replica_road_text, and atomic_pushes_text by
/// x.mode (parsed first); one error names the flag.
caf::error validate(server_settings& x);

/// True if a worker back resumes at the largest of its clocks over the
/// servers (kv_settings::resume_at_largest), else the smallest: in sync,
/// and with atomic pushes (a process that pushed nothing to a server is
/// cut at its clock there, shard_store::whole_clocks, so it must start at
/// or above each). A server reports its stores' clocks alike.
inline bool workers_resume_at_largest(const server_settings& x) {
  return x.mode.kind == consistency::kind_t::sync || x.atomic_pushes;
}

} // namespace troupe
