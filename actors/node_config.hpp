// Configuration of a troupe node: CAF's INI file plus command-line flags.
// This class alone reads options; actors get the plain settings structs.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>

#include "actors/consistency.hpp"
#include "actors/placement.hpp"
#include "actors/road.hpp"
#include "actors/server_optimizer.hpp"
#include "messages/membership.hpp"

namespace troupe {

/// Checkpoints (INI group "checkpoint", and --resume): servers write their
/// stores with the optimizer state, the scheduler a manifest once every
/// server wrote a generation (messages/checkpoint.hpp).
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
  /// What the manifest records and a resume checks (set by finish()).
  std::string mode;
  std::string optimizer;
};

/// Settings of the scheduler (INI group "cluster").
struct scheduler_settings {
  /// Servers to wait for before placing keys. Default 1.
  uint32_t servers = 1;
  /// Workers a barrier waits for (at least the live ones). Default 1.
  uint32_t workers = 1;
  /// Slicing and ring parameters.
  placement_params placement;
  checkpoint_settings checkpoint;
};

/// Settings of a shard server (INI group "server").
struct server_settings {
  /// Consistency mode. Default sync.
  consistency mode;
  /// TCP port of the fast road (actors/road.hpp); 0 = any free port.
  uint16_t road_port = 0;
  /// Give up on a worker that does not read a reply after this long (ms):
  /// the reply is written on the server's actor thread, so a hung worker
  /// holds up the others this long at most. Default 2000 (the default
  /// heartbeat timeout); a 1 MiB part takes ~1 ms on loopback.
  uint32_t road_send_timeout_ms = 2000;
  /// Backups per store: 1 = replicated on the next server (chain
  /// replication: Init and Push are acknowledged once the backup has them),
  /// 0 = none. Default 1.
  uint32_t replicas = 1;
  /// Helper threads that share a round's updates, a push's additions and
  /// the replies of a round with the actor thread (actors/helper_pool.hpp),
  /// 0..16; 0 = the actor thread alone. Default 1 (a core idles while
  /// every worker waits for the round).
  uint32_t helper_threads = 1;
  /// How replica operations travel to the backup (--server.replica-road):
  /// auto = the backup's fast road (shared memory on one machine, else
  /// TCP), middleman = CAF. Default auto.
  std::string replica_road_text = "auto";
  road_kind replica_road = road_kind::shm;
  checkpoint_settings checkpoint;
};

/// Settings of a worker's kv client (INI group "kv").
struct kv_settings {
  /// Give up on any reply after this long, in ms; 0 is not allowed.
  uint32_t request_timeout_ms = 10000;
  /// Cut pushes and pulls into parts of at most this many bytes, so that
  /// a large transfer streams: the server applies one part while the next
  /// is on its way (on 2 cores, 1 MiB parts moved 16 MiB values 1.5x
  /// faster than 16 MiB parts). Default 1 MiB.
  uint32_t max_message_bytes = 1u << 20;
  /// Road of kv frames: auto (shared memory on one machine, else TCP) |
  /// tcp | middleman (CAF only). Default auto.
  std::string road_text = "auto";
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
  /// Fault injection (set from --fault.*): probability that a push frame
  /// is not sent, or sent twice; seed of the draws (0 = from the clock).
  double drop_pushes = 0;
  double duplicate_pushes = 0;
  uint64_t fault_seed = 0;
  /// Fault injection (--fault.cut-road-after): right after its N-th request
  /// on fast roads, the kv client ends that road, once, as a network that
  /// drops only that connection would; the server stays up. 0 = off.
  uint32_t cut_road_after = 0;
};

/// Settings of the built-in trainer worker (INI group "train").
struct train_settings {
  /// Model spec. Default mlp:784-256-128-10.
  std::string model = "mlp:784-256-128-10";
  /// Passes over the training set. Default 10.
  uint32_t epochs = 10;
  /// Samples per step and worker. Default 64.
  uint32_t batch = 64;
  /// Seed of initialisation and shuffling. Default 1.
  uint64_t seed = 1;
  /// Folder of the IDX files. Default Debian's dataset-fashion-mnist.
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  /// JSON-lines metrics file written by rank 0; "" = none.
  std::string metrics_file;
  /// Test images evaluated after each epoch; 0 = all 10,000.
  uint32_t eval_samples = 0;
  /// Evaluations per epoch (rank 0 pauses for each). Default 1.
  uint32_t evals_per_epoch = 1;
  /// With --worker.overlap: layers with more weights than this are pushed
  /// as row blocks of about this many floats (model::set_row_blocks).
  /// Default 131072 (mlp:784-256-128-10's first layer in 2 blocks: more
  /// pushes per step cost more than they hide on 2 cores); 0 = whole layers.
  uint32_t block_floats = 131072;
};

/// Settings of the built-in worker workload (INI group "worker").
struct workload_settings {
  /// train (Fashion-MNIST) or counter (push/pull check). Default train.
  std::string task = "train";
  /// Clocks to run. Default 20.
  uint32_t steps = 20;
  /// Arrays the workload pushes and pulls. Default 4.
  uint32_t keys = 4;
  /// Floats per array. Default 65536 (256 KiB).
  uint32_t key_floats = 65536;
  /// Pipelined steps (async and ssp only; worker_options::pipeline).
  /// Default off.
  bool pipeline = false;
  /// Overlapped steps (sync and async; worker_options::overlap): each
  /// block of gradients is pushed as soon as it is made. Default off.
  bool overlap = false;
  /// How long, in microseconds, an unpipelined worker's scheduler thread
  /// watches for work before it sleeps (actors/spin_scheduler.hpp): the
  /// weights that end a step's wait then need no thread wake-up. It yields
  /// the core meanwhile. Default 2000; 0 = sleep at once.
  uint32_t watch_us = 2000;
};

/// Settings of a node agent (INI group "agent"): the processes it starts on
/// its machine and how it restarts them (actors/agent.hpp).
struct agent_settings {
  /// Server processes to start. Default 0.
  uint32_t servers = 0;
  /// Worker processes to start. Default 0.
  uint32_t workers = 0;
  /// Restarts allowed per child within restart_window_ms. Default 3.
  uint32_t max_restarts = 3;
  /// Window over which restarts are counted, ms. Default 30000.
  uint32_t restart_window_ms = 30000;
  /// Delay before the first restart in the window, ms; doubles for each
  /// further one, up to backoff_max_ms. Defaults 200 and 5000.
  uint32_t backoff_ms = 200;
  uint32_t backoff_max_ms = 5000;
  /// Folder for one log per child (server-0.log, worker-1.log, ...); "" =
  /// children write to the agent's own stdout and stderr.
  std::string logs;
};

/// Fault injection carried out by a node agent (INI group "fault"); see
/// actors/fault_plan.hpp. Off by default.
struct fault_settings {
  /// Planned faults, e.g. "kill:worker-1@3000,hang:worker-0@5000+4000".
  std::string plan;
  /// Random kills of distinct children. Default 0.
  uint32_t random_kills = 0;
  /// Whom random kills target: worker, server or any. Default worker.
  std::string random_targets = "worker";
  /// Random kills happen at uniform times in [from, to) ms after start.
  uint32_t random_from_ms = 2000;
  uint32_t random_to_ms = 10000;
  /// Seed of the random draws; 0 = from the clock (printed).
  uint64_t seed = 0;
};

/// The process-wide settings every troupe process runs under: large
/// blocks stay in the heap, denormal floats are flushed to zero. node_config
/// applies them; a program that computes without one (a benchmark's
/// compute-only floor) calls this first, so that it computes alike.
void apply_process_settings();

/// Base of every node's configuration: registers troupe's message types and
/// error category, turns CAF heartbeats on, and reads every option.
struct node_config : caf::actor_system_config {
  /// scheduler | server | worker | agent. Required for troupe-node.
  std::string role_name;
  /// Scheduler address. Default 127.0.0.1.
  std::string scheduler_host = "127.0.0.1";
  /// Scheduler port; the scheduler publishes on it (0 = any free port).
  uint16_t scheduler_port = 4300;
  /// Address this node publishes its actor on. Default 127.0.0.1.
  std::string host = "127.0.0.1";
  /// Port this node publishes on; 0 = any free port.
  uint16_t port = 0;
  /// Log level: error, warning, info or debug. Default info.
  std::string log_level = "info";
  /// Consistency mode as text (server.mode).
  std::string mode_text = "sync";
  /// How long readers of this process's roads poll before they sleep, in
  /// us (--road.spin-us, actors/road.hpp): 0 = off, at most 10000.
  uint32_t road_spin_us = 0;
  /// How long a blocking kv call of this process polls for its reply
  /// before it sleeps, in us (--road.caller-spin-us, actors/road.hpp):
  /// 0 = off, at most 10000.
  uint32_t road_caller_spin_us = road_caller_spin_default_us;
  /// How long a reader of this process's roads inside a large frame polls
  /// for more of it before it sleeps, in us (--road.frame-spin-us,
  /// actors/road.hpp): 0 = off, at most 10000.
  uint32_t road_frame_spin_us = road_frame_spin_default_us;
  /// This process's tcp roads take one connection both ways instead of a
  /// reply connection apart (--road.single-conn, actors/road.hpp). Off.
  bool road_single_conn = false;

  scheduler_settings scheduler;
  server_settings server;
  optimizer_settings optimizer;
  train_settings train;
  kv_settings kv;
  workload_settings workload;
  agent_settings agent;
  fault_settings fault;

  node_config();

  /// Checks and converts options after parsing; one error says what is
  /// wrong and how to fix it.
  caf::error finish();

  /// The role parsed from role_name.
  caf::expected<role> node_role() const;

  /// How long this process's scheduler thread watches for work before it
  /// sleeps: --worker.watch-us for an unpipelined worker, else 0.
  std::chrono::microseconds scheduler_watch() const;
};

} // namespace troupe
