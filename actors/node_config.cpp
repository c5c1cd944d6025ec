// Options of a troupe node and their checks.
#include "actors/node_config.hpp"

#include <malloc.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <chrono>
#include <filesystem>

#include "actors/fault_plan.hpp"
#include "actors/log.hpp"
#include "actors/netns.hpp"
#include "actors/spin_scheduler.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

/// Tensor messages of many MiB are allocated and freed at every step; by
/// default glibc maps each with mmap and unmaps it on free, so every message
/// faults its pages in again (this halved 16 MiB push+pull throughput). Keep
/// such blocks in the heap and reuse them instead.
void keep_large_blocks_in_the_heap() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

/// Denormal floats cost ~100x per operation on x86. Momentum velocities of
/// weights whose gradients fall silent decay through them, and a server's
/// momentum step went from ~1% to ~98% of its time (ssp:2, 2 workers).
/// Flush them to zero; threads started later (CAF's, the road's) inherit
/// the setting from this one.
void flush_denormals_to_zero() {
#if defined(__SSE__)
  _mm_setcsr(_mm_getcsr() | 0x8040); // FTZ (bit 15) and DAZ (bit 6)
#endif
}

} // namespace

void apply_process_settings() {
  keep_large_blocks_in_the_heap();
  flush_denormals_to_zero();
}

node_config::node_config() {
  // Every troupe process builds one node_config first: the place for
  // process-wide settings.
  apply_process_settings();
  add_message_types<caf::id_block::troupe>();
  add_error_category(caf::atom("troupe"),
                     [](uint8_t code, caf::atom_value, const caf::message& m) {
                       return render_troupe_error(code, m);
                     });
  // CAF leaves heartbeats off: without them a hung peer is never noticed.
  using namespace std::chrono_literals;
  set("middleman.heartbeat-interval", caf::timespan{250ms});
  set("middleman.connection-timeout", caf::timespan{2s});
  // One scheduler thread: a message from one actor of the process to
  // another (worker -> kv client -> worker) then runs on the thread that
  // sent it instead of waking a second one, a wake-up costing tens of
  // microseconds on a VM. Each role's heavy work has threads of its own
  // (roads' readers, the server's helper pool, BLAS). On 2 cores it trains
  // 6-16% faster than 2 threads (bench/time_to_accuracy); a machine with
  // many actors per process can raise it (--scheduler.max-threads=N).
  set("scheduler.max-threads", size_t{1});
  set("scheduler.policy", caf::atom("sharing"));
  // A worker's scheduler thread, out of work after the worker sent a
  // request to its kv client, watches for the reply before it sleeps: the
  // weights that end a step's wait then need no wake-up (see
  // actors/spin_scheduler.hpp). Other roles, and pipelined workers (whose
  // steps run on a thread of their own beside it), sleep at once. Read
  // from the config the system starts with (this one may have moved).
  use_watching_scheduler(*this, [](const caf::actor_system_config& c) {
    auto* cfg = dynamic_cast<const node_config*>(&c);
    return cfg ? cfg->scheduler_watch() : std::chrono::microseconds{0};
  });
  opt_group{custom_options_, "global"}
      .add(role_name, "role", "scheduler | server | worker | agent")
      .add(scheduler_host, "scheduler-host", "scheduler address")
      .add(scheduler_port, "scheduler-port", "scheduler port (0 = any, sched.)")
      .add(host, "host", "address to publish this node on")
      .add(port, "port", "port to publish this node on (0 = any free)")
      .add(log_level, "log-level", "error | warning | info | debug");
  opt_group{custom_options_, "cluster"}
      .add(scheduler.servers, "servers", "servers to wait for before placing")
      .add(scheduler.workers, "workers", "workers barriers wait for")
      .add(scheduler.placement.slice_floats, "slice-floats",
           "slice bound in floats (default 16384 = 64 KiB)")
      .add(scheduler.placement.vnodes, "vnodes", "ring points per server")
      .add(scheduler.placement.slack, "balance-slack",
           "allowed load above the mean per server (0.05 = 5%)");
  opt_group{custom_options_, "server"}
      .add(mode_text, "mode", "sync | async | ssp:S")
      .add(server.road_port, "road-port",
           "TCP port of the fast road (0 = any free)")
      .add(server.road_send_timeout_ms, "road-send-timeout-ms",
           "drop a worker that reads no reply for this long (ms, > 0)")
      .add(server.replicas, "replicas",
           "backups per store: 1 = on the next server (ack after it), 0")
      .add(server.helper_threads, "helper-threads",
           "threads beside the actor's for rounds and replies, 0..16")
      .add(server.replica_road_text, "replica-road",
           "replicas travel by: auto (the backup's fast road) | tcp |"
           " middleman (CAF)");
  opt_group{custom_options_, "kv"}
      .add(kv.request_timeout_ms, "request-timeout-ms",
           "give up on a reply after this long (ms, > 0)")
      .add(kv.max_message_bytes, "max-message-bytes",
           "cut pushes and pulls into parts of at most this (bytes)")
      .add(kv.road_text, "road",
           "auto (shared memory on one machine, else TCP) | tcp | middleman")
      .add(kv.window_bytes, "window-bytes",
           "bytes in flight per server before more wait")
      .add(kv.ring_bytes, "ring-bytes",
           "bytes of each shared-memory ring (per server and direction)")
      .add(kv.resend_ms, "resend-ms",
           "send a road request again after this long unanswered, 0 = never")
      .add(kv.helper_threads, "helper-threads",
           "threads (0..16) sharing the copies of large frames, 0 = none")
      .add(kv.scheduler_only, "scheduler-only",
           "run the kv client on CAF's scheduler threads only (off)");
  opt_group{custom_options_, "road"}
      .add(road_spin_us, "spin-us",
           "road readers poll this long (us) before they sleep: no wake-up for"
           " a message that comes meanwhile, at the CPU it burns; 0 = off")
      .add(road_caller_spin_us, "caller-spin-us",
           "a blocking kv call polls this long (us) for its reply before it"
           " sleeps; 0 = off (default 200)")
      .add(road_frame_spin_us, "frame-spin-us",
           "a reader inside a large frame polls this long (us) for more of"
           " it before it sleeps; 0 = off (default 50)")
      .add(road_single_conn, "single-conn",
           "tcp roads: one connection both ways, the server's answers too"
           " (off: a reply connection of its own, one socket per direction)");
  opt_group{custom_options_, "optimizer"}
      .add(optimizer.name, "name", "sum | sgd | momentum | nesterov | adam")
      .add(optimizer.on, "on", "server | worker (sync mode only)")
      .add(optimizer.lr, "lr", "step size")
      .add(optimizer.momentum, "momentum", "momentum of momentum, nesterov")
      .add(optimizer.weight_decay, "weight-decay", "weight decay, 0 = off")
      .add(optimizer.beta1, "beta1", "adam first-moment decay")
      .add(optimizer.beta2, "beta2", "adam second-moment decay")
      .add(optimizer.eps, "eps", "adam epsilon")
      .add(optimizer.lr_decay_steps, "lr-decay-steps",
           "multiply lr by lr-decay every this many updates, 0 = never")
      .add(optimizer.lr_decay, "lr-decay", "lr schedule factor in (0, 1]");
  opt_group{custom_options_, "train"}
      .add(train.model, "model", "model spec, e.g. mlp:784-256-128-10")
      .add(train.epochs, "epochs", "passes over the training set")
      .add(train.batch, "batch", "samples per step and worker")
      .add(train.seed, "seed", "seed of initialisation and shuffling")
      .add(train.data_dir, "data-dir", "folder of the Fashion-MNIST files")
      .add(train.metrics_file, "metrics-file",
           "JSON-lines metrics, \"\" = none")
      .add(train.evals_per_epoch, "evals-per-epoch",
           "evaluations per epoch, >= 1")
      .add(train.block_floats, "block-floats",
           "with --worker.overlap: push larger layers in row blocks of about"
           " this many floats, 0 = whole layers")
      .add(train.eval_samples, "eval-samples",
           "test images per epoch, 0 = all");
  opt_group{custom_options_, "agent"}
      .add(agent.servers, "servers", "server processes this agent starts")
      .add(agent.workers, "workers", "worker processes this agent starts")
      .add(agent.max_restarts, "max-restarts",
           "restarts per child within the window before giving up")
      .add(agent.restart_window_ms, "restart-window-ms",
           "window restarts are counted over (ms)")
      .add(agent.backoff_ms, "backoff-ms",
           "delay before a first restart (ms); doubles for the next ones")
      .add(agent.backoff_max_ms, "backoff-max-ms", "largest restart delay")
      .add(agent.logs, "logs", "folder for one log per child, \"\" = ours");
  opt_group{custom_options_, "fault"}
      .add(fault.plan, "plan",
           "faults to inject, e.g. kill:worker-1@3000,hang:worker-0@5000+4000,"
           "cut:worker-1@8000+2000")
      .add(fault.random_kills, "random-kills",
           "kill this many distinct children at random times")
      .add(fault.random_targets, "random-targets", "worker | server | any")
      .add(fault.random_from_ms, "random-from-ms",
           "random kills happen after this (ms from the agent's start)")
      .add(fault.random_to_ms, "random-to-ms", "... and before this")
      .add(fault.seed, "seed", "seed of random draws, 0 = from the clock")
      .add(kv.drop_pushes, "drop-pushes",
           "probability that a worker loses a push frame (road only)")
      .add(kv.duplicate_pushes, "duplicate-pushes",
           "probability that a worker sends a push frame twice (road only)")
      .add(kv.cut_road_after, "cut-road-after",
           "a worker ends its fast road to a server right after its N-th"
           " request on roads, once (the server stays up); 0 = off");
  opt_group{custom_options_, "global"}.add(
      server.checkpoint.resume, "resume",
      "continue from the last checkpoint in --checkpoint.dir");
  opt_group{custom_options_, "checkpoint"}
      .add(server.checkpoint.dir, "dir",
           "folder of checkpoints shared by the cluster, \"\" = none")
      .add(server.checkpoint.every_ms, "every-ms",
           "checkpoint every this many ms, 0 = only on request")
      .add(server.checkpoint.tear_generation, "fault-tear",
           "fault injection: a server writing this generation dies half way");
  opt_group{custom_options_, "worker"}
      .add(workload.task, "task", "train | counter")
      .add(workload.steps, "steps", "clocks the built-in workload runs")
      .add(workload.keys, "keys", "arrays the built-in workload uses")
      .add(workload.key_floats, "key-floats", "floats per array")
      .add(workload.pipeline, "pipeline",
           "compute step t+1 while step t's push is in flight (async, ssp)")
      .add(workload.overlap, "overlap",
           "push each block of gradients as soon as it is made, while the"
           " step goes on (sync, async; 2+ scheduler threads)")
      .add(workload.watch_us, "watch-us",
           "the scheduler thread watches for work this long (us) before it"
           " sleeps, 0 = at once; not with --worker.pipeline");
}

std::chrono::microseconds node_config::scheduler_watch() const {
  bool stepping = role_name == "worker" && !workload.pipeline;
  return std::chrono::microseconds{stepping ? workload.watch_us : 0};
}

caf::expected<role> node_config::node_role() const {
  if (role_name == "agent") // not a member of the view: runs the others
    return caf::make_error(errc::invalid_config,
                           "an agent has no role in the cluster view");
  if (role_name == "scheduler")
    return role::scheduler;
  if (role_name == "server")
    return role::server;
  if (role_name == "worker")
    return role::worker;
  return caf::make_error(errc::invalid_config,
                         "--role must be scheduler, server or worker,"
                         " got",
                         role_name.empty() ? "nothing" : role_name);
}

caf::error node_config::finish() {
  if (!set_log_level(log_level))
    return caf::make_error(errc::invalid_config,
                           "--log-level must be error, warning, info"
                           " or debug, got",
                           log_level);
  auto mode = parse_consistency(mode_text);
  if (!mode)
    return std::move(mode.error());
  server.mode = *mode;
  auto& p = scheduler.placement;
  if (p.slice_floats == 0 || p.slice_floats > max_slice_floats)
    return caf::make_error(errc::invalid_config,
                           "--cluster.slice-floats must be in 1..2^26");
  if (p.vnodes == 0 || p.vnodes > 4096)
    return caf::make_error(errc::invalid_config,
                           "--cluster.vnodes must be in 1..4096");
  if (!(p.slack >= 0.0 && p.slack <= 10.0))
    return caf::make_error(errc::invalid_config,
                           "--cluster.balance-slack must be in 0..10");
  if (scheduler.servers == 0)
    return caf::make_error(errc::invalid_config,
                           "--cluster.servers must be at least 1");
  if (kv.request_timeout_ms == 0)
    return caf::make_error(errc::invalid_config,
                           "--kv.request-timeout-ms must be > 0: every"
                           " request needs a finite timeout");
  if (kv.max_message_bytes < (1u << 16))
    return caf::make_error(errc::invalid_config,
                           "--kv.max-message-bytes must be >= 65536");
  if (server.replicas > 1)
    return caf::make_error(errc::invalid_config,
                           "--server.replicas must be 0 or 1 (one backup on"
                           " the next server)");
  if (server.road_send_timeout_ms == 0)
    return caf::make_error(errc::invalid_config,
                           "--server.road-send-timeout-ms must be > 0");
  if (server.helper_threads > 16)
    return caf::make_error(errc::invalid_config,
                           "--server.helper-threads must be 0..16");
  if (kv.helper_threads > 16)
    return caf::make_error(errc::invalid_config,
                           "--kv.helper-threads must be 0..16");
  for (auto [us, flag] :
       {std::pair{road_spin_us, "--road.spin-us"},
        std::pair{road_caller_spin_us, "--road.caller-spin-us"},
        std::pair{road_frame_spin_us, "--road.frame-spin-us"}})
    if (us > 10000)
      return caf::make_error(errc::invalid_config,
                             std::string{flag} + " must be 0..10000, got", us);
  auto road = parse_road(kv.road_text);
  if (!road)
    return std::move(road.error());
  kv.road = *road;
  auto replica_road = parse_road(server.replica_road_text);
  if (!replica_road)
    return caf::make_error(errc::invalid_config,
                           "--server.replica-road must be auto, tcp or"
                           " middleman, got",
                           server.replica_road_text);
  server.replica_road = *replica_road;
  if (kv.window_bytes < kv.max_message_bytes)
    return caf::make_error(
        errc::invalid_config,
        "--kv.window-bytes must be >= --kv.max-message-bytes");
  if (kv.ring_bytes > (1u << 30))
    return caf::make_error(errc::invalid_config,
                           "--kv.ring-bytes must be <= 1 GiB (0 = no rings)");
  if (auto err = validate(optimizer))
    return err;
  if (optimizer.on == "worker" && server.mode.kind != consistency::kind_t::sync)
    return caf::make_error(errc::invalid_config,
                           "--optimizer.on=worker needs --server.mode=sync:"
                           " workers apply each sync round's mean gradient");
  if (workload.pipeline && server.mode.kind == consistency::kind_t::sync)
    return caf::make_error(errc::invalid_config,
                           "--worker.pipeline needs --server.mode=async or"
                           " ssp:S: a sync round needs each step's fresh"
                           " weights");
  if (workload.overlap && workload.pipeline)
    return caf::make_error(errc::invalid_config,
                           "--worker.overlap and --worker.pipeline exclude"
                           " each other: pick one way to overlap");
  if (workload.overlap && server.mode.kind == consistency::kind_t::ssp)
    return caf::make_error(errc::invalid_config,
                           "--worker.overlap needs --server.mode=sync or"
                           " async: the servers count each block as a clock,"
                           " so an ssp bound would count blocks, not steps");
  if (workload.overlap && workload.task == "counter")
    return caf::make_error(errc::invalid_config,
                           "--worker.overlap needs --worker.task=train (or a"
                           " worker of your own with blocks()): the counter"
                           " task steps whole");
  if (train.block_floats != 0 && train.block_floats < 1024)
    return caf::make_error(errc::invalid_config,
                           "--train.block-floats must be 0 or >= 1024: each"
                           " block is a sync round and a message per server"
                           " and step, got",
                           train.block_floats);
  if (workload.overlap && role_name == "worker" &&
      caf::get_or(*this, "scheduler.max-threads", size_t{1}) < 2)
    // The kv client sends a block's push while the step computes.
    set("scheduler.max-threads", size_t{2});
  if (workload.watch_us > 100000)
    return caf::make_error(errc::invalid_config,
                           "--worker.watch-us must be 0..100000, got",
                           workload.watch_us);
  if (workload.task != "train" && workload.task != "counter")
    return caf::make_error(errc::invalid_config,
                           "--worker.task must be train or counter, got",
                           workload.task);
  if (train.epochs == 0 || train.batch == 0 || train.evals_per_epoch == 0)
    return caf::make_error(errc::invalid_config,
                           "--train.epochs, --train.batch and"
                           " --train.evals-per-epoch must be > 0");
  if (agent.restart_window_ms == 0 || agent.backoff_ms == 0 ||
      agent.backoff_max_ms < agent.backoff_ms)
    return caf::make_error(errc::invalid_config,
                           "--agent.restart-window-ms and --agent.backoff-ms"
                           " must be > 0 and --agent.backoff-max-ms >="
                           " --agent.backoff-ms");
  auto plan = parse_fault_plan(fault.plan);
  if (!plan)
    return std::move(plan.error());
  if (!cut_targets(*plan).empty()) {
    // A child cut off lives in a network namespace of its own, where
    // 127.0.0.1 is its own loopback.
    const char* why = " cannot be reached from a child cut off the network"
                      " (--fault.plan cut:), which lives in a network"
                      " namespace of its own; run the cluster on another"
                      " address of this machine with --scheduler-host=ADDR"
                      " and --host=ADDR";
    if (is_loopback_host(scheduler_host))
      return caf::make_error(errc::invalid_config,
                             "--scheduler-host=" + scheduler_host + why);
    if (agent.servers > 0 && is_loopback_host(host))
      return caf::make_error(errc::invalid_config,
                             "--host=" + host + " (this agent's servers)" +
                                 why);
  }
  if (!(kv.drop_pushes >= 0 && kv.drop_pushes <= 1) ||
      !(kv.duplicate_pushes >= 0 && kv.duplicate_pushes <= 1))
    return caf::make_error(errc::invalid_config,
                           "--fault.drop-pushes and --fault.duplicate-pushes"
                           " must be probabilities in [0, 1]");
  if (kv.drop_pushes > 0 && kv.resend_ms == 0)
    return caf::make_error(errc::invalid_config,
                           "--fault.drop-pushes needs --kv.resend-ms > 0,"
                           " or every dropped push fails its step");
  kv.fault_seed = fault.seed;
  if (fault.random_targets != "worker" && fault.random_targets != "server" &&
      fault.random_targets != "any")
    return caf::make_error(errc::invalid_config,
                           "--fault.random-targets must be worker, server or"
                           " any, got",
                           fault.random_targets);
  if (fault.random_to_ms <= fault.random_from_ms && fault.random_kills > 0)
    return caf::make_error(errc::invalid_config,
                           "--fault.random-to-ms must be above"
                           " --fault.random-from-ms");
  auto& ck = server.checkpoint;
  if (ck.resume && ck.dir.empty())
    return caf::make_error(errc::invalid_config,
                           "--resume needs --checkpoint.dir: the folder the"
                           " checkpoints were written to");
  if (!ck.dir.empty() && optimizer.on == "worker")
    return caf::make_error(errc::invalid_config,
                           "--checkpoint.dir needs --optimizer.on=server: with"
                           " the optimizer on the workers the servers hold no"
                           " weights to checkpoint");
  if (!ck.dir.empty() && ck.dir.size() > 3000)
    return caf::make_error(errc::invalid_config,
                           "--checkpoint.dir is too long");
  if (!ck.dir.empty()) { // the folder is ours to make; say if we cannot
    std::error_code ec;
    std::filesystem::create_directories(ck.dir, ec);
    if (ec || !std::filesystem::is_directory(ck.dir))
      return caf::make_error(errc::invalid_config,
                             "--checkpoint.dir " + ck.dir +
                                 " is not a folder we can create: " +
                                 (ec ? ec.message() : "a file is in the way"));
  }
  ck.mode = mode_text;
  ck.optimizer = optimizer.name + "@" + optimizer.on;
  scheduler.checkpoint = ck;
  if (workload.task == "counter" && optimizer.name != "sum")
    return caf::make_error(errc::invalid_config,
                           "--worker.task=counter needs --optimizer.name=sum"
                           " (its exact sums assume servers that add pushes),"
                           " got",
                           optimizer.name);
  if (workload.keys == 0 || workload.key_floats == 0)
    return caf::make_error(errc::invalid_config,
                           "--worker.keys and --worker.key-floats must be"
                           " > 0");
  return caf::none;
}

} // namespace troupe
