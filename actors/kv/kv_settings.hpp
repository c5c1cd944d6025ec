// Settings of a worker's kv client (INI group "kv", and the push faults of
// group "fault" that the kv client carries out).
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>

#include "actors/road/road_settings.hpp"

namespace troupe {

/// Faults a kv client injects into its own pushes (--fault.drop-pushes,
/// --fault.duplicate-pushes, --fault.cut-road-after, --fault.seed). Off by
/// default.
struct kv_fault_settings {
  /// Probability that a push frame is not sent, in [0, 1].
  double drop_pushes = 0;
  /// Probability that a push frame is sent twice, in [0, 1].
  double duplicate_pushes = 0;
  /// Seed of the draws; 0 = from the clock.
  uint64_t seed = 0;
  /// Right after its N-th request on fast roads, the kv client ends that
  /// road, once, as a network that drops only that connection would; the
  /// server stays up. 0 = off.
  uint32_t cut_road_after = 0;
};

/// Settings of a worker's kv client (INI group "kv").
struct kv_settings {
  /// Give up on any reply after this long, in ms; 0 is not allowed.
  uint32_t request_timeout_ms = 10000;
  /// A worker back resumes at the largest of its clocks over the servers
  /// (sync: a round one server applied without it is not pushed again
  /// there, so the others must not take it either), and with atomic
  /// pushes (a process that pushed nothing to a server is cut at its clock
  /// there), else the smallest (async and ssp: a clock some servers lack
  /// is pushed again, and is a duplicate where it is whole). Set from
  /// --server.mode and --server.atomic-pushes by node_config.
  bool resume_at_largest = false;
  /// Cut pushes and pulls into parts of at most this many bytes, so that
  /// a large transfer streams: the server applies one part while the next
  /// is on its way (docs/benchmarks.md). Default 1 MiB.
  uint32_t max_message_bytes = 1u << 20;
  /// Road of kv frames: auto (shared memory on one machine, else TCP) |
  /// tcp | middleman (CAF only). Default auto.
  std::string road_text = "auto";
  /// road_text, parsed by validate().
  road_kind road = road_kind::shm;
  /// Bytes of kv frames in flight per server before more wait. 64 MiB.
  uint32_t window_bytes = 64u << 20;
  /// Bytes of each shared-memory ring (one per direction and server).
  uint32_t ring_bytes = 64u << 20;
  /// Send a road request again after this long without a reply, ms;
  /// 0 = never (a lost connection fails it instead). Default 0.
  uint32_t resend_ms = 0;
  /// Threads (0..16) that share with the kv client's thread the copy of a
  /// large frame (256 KiB or more) into a shared-memory ring; 0 = the
  /// client's thread alone. Default 1.
  uint32_t helper_threads = 1;
  /// Run the kv client on CAF's scheduler threads only: a road reader then
  /// hands each reply over, and a blocking caller waits while a scheduler
  /// thread sends its request (one more thread wake-up each way). Off by
  /// default: the kv client runs where the work arrives (run_here.hpp).
  bool scheduler_only = false;
  /// A job that lost values (a "lost" event: a dead server's slices came
  /// back with no replica) still ends with exit 0 (--cluster.allow-loss;
  /// node_config copies it here). Default: it ends non-zero, saying so.
  bool allow_loss = false;
  /// End this client at once (errc::values_lost) when the scheduler tells
  /// of a "lost" event, rather than let its worker train on to the same
  /// failure at its end. Set by run_worker unless allow_loss; the counter
  /// task checks its sums instead (a server also reports slices that held
  /// nothing acknowledged yet). Default off.
  bool ends_on_loss = false;
  /// Where this worker process published an actor of its own, which the
  /// view then names beside its rank (a pipeline stage's driver: its
  /// neighbours find it there); "" and 0 = none. Set by the process.
  std::string publish_host;
  uint16_t publish_port = 0;
  /// A pipeline stage with shard servers: the stages per replica, sent at
  /// registration (register_request::stage_group): the scheduler then
  /// tells this client to leave when another stage of its replica
  /// crashed. 0 = no stage. Set by the process.
  uint32_t stage_group = 0;
  /// The optimizer this worker expects (optimizer_fingerprint), sent at
  /// registration; "" says nothing. Set by the trainer.
  std::string optimizer;
  /// Its --server.mode as the servers run it (sync_device: sync), sent at
  /// registration; "" says nothing. Set by node_config.
  std::string mode;
  /// What decides how many clocks this worker runs, in its flags' words
  /// ("--worker.steps=20 --worker.keys=4"), sent at registration: in sync
  /// and ssp the scheduler refuses a worker whose work is not a live
  /// worker's, as the one that ended first would leave the others' rounds
  /// short; "" says nothing. Set by the task (a custom worker: by main).
  std::string work;
  /// How this process's roads wait for bytes (group "road").
  road_settings roads;
  /// Faults injected into this client's pushes (group "fault").
  kv_fault_settings faults;
};

/// Checks `x` and parses its road_text into road; one error names the flag
/// that is wrong and how to fix it.
caf::error validate(kv_settings& x);

} // namespace troupe
