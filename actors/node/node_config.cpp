// Options of a troupe node and their checks.
#include "actors/node/node_config.hpp"

#include <malloc.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <caf/openssl/manager.hpp>

#include "actors/base/log.hpp"
#include "actors/base/spin_scheduler.hpp"
#include "actors/base/writable.hpp"
#include "actors/cluster/connect.hpp"
#include "actors/node/option_check.hpp"
#include "actors/supervision/fault_plan.hpp"
#include "actors/supervision/netns.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

/// Tensor messages of many MiB are allocated and freed at every step; by
/// default glibc maps each with mmap and unmaps it on free, so every message
/// faults its pages in again, which costs large transfers dearly
/// (docs/benchmarks.md). Keep such blocks in the heap and reuse them
/// instead.
void keep_large_blocks_in_the_heap() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

/// Denormal floats cost about a hundred times a normal operation on x86.
/// Momentum velocities of weights whose gradients fall silent decay through
/// them, and a server's momentum step came to take most of its time
/// (docs/benchmarks.md). Flush them to zero; threads started later (CAF's, the
/// road's) inherit the setting from this one.
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
  // faster than 2 threads (docs/benchmarks.md); a machine with many actors
  // per process can raise it (--scheduler.max-threads=N).
  set("scheduler.max-threads", size_t{1});
  set("scheduler.policy", caf::atom("sharing"));
  // A worker's scheduler thread, out of work after the worker sent a
  // request to its kv client, watches for the reply before it sleeps: the
  // weights that end a step's wait then need no wake-up (see
  // actors/base/spin_scheduler.hpp). Other roles, and pipelined workers (whose
  // steps run on a thread of their own beside it), sleep at once. Read
  // from the config the system starts with (this one may have moved).
  use_watching_scheduler(*this, [](const caf::actor_system_config& c) {
    auto* cfg = dynamic_cast<const node_config*>(&c);
    return cfg ? cfg->scheduler_watch() : std::chrono::microseconds{0};
  });
  first_troupe_option_ = custom_options_.size();
  add_global_options();
  add_cluster_options();
  add_server_options();
  add_kv_options();
  add_road_options();
  add_optimizer_options();
  add_train_options();
  add_agent_options();
  add_fault_options();
  add_checkpoint_options();
  add_worker_options();
  add_pipeline_options();
}

void node_config::add_global_options() {
  opt_group{custom_options_, "global"}
      .add(role_name, "role", "scheduler | server | worker | agent")
      .add(scheduler_host, "scheduler-host", "scheduler address")
      .add(scheduler_port, "scheduler-port", "scheduler port (0 = any, sched.)")
      .add(host, "host", "address to publish this node on")
      .add(port, "port", "port to publish this node on (0 = any free)")
      .add(log_level, "log-level", "error | warning | info | debug");
  opt_group{custom_options_, "global"}.add(
      server.checkpoint.resume, "resume",
      "continue from the last checkpoint in --checkpoint.dir");
  opt_group{custom_options_, "global"}.add(
      worker.device.text, "device",
      "where a trainer or a stage computes: auto (the GPUs found, else the "
      "CPU) | cpu"
      " | cuda:N | a comma list of one kind (--server.mode=sync_device)");
  opt_group{custom_options_, "metrics"}.add(
      metrics_port, "port",
      "serve Prometheus metrics at HOST:PORT/metrics (0 = off); an"
      " agent's children take the next ports: servers, then workers");
}

void node_config::add_cluster_options() {
  opt_group{custom_options_, "cluster"}
      .add(scheduler.servers, "servers",
           "servers to wait for before placing; 0 = pipeline stages alone")
      .add(scheduler.workers, "workers", "workers barriers wait for")
      .add(scheduler.placement.slice_floats, "slice-floats",
           "slice bound in floats (16384 floats = 64 KiB)")
      .add(scheduler.placement.vnodes, "vnodes", "ring points per server")
      .add(scheduler.placement.slack, "balance-slack",
           "allowed load above the mean per server (0.05 = 5%)")
      .add(scheduler.status_port, "status-port",
           "the scheduler serves its status page on this port (0 = none)")
      .add(scheduler.events_file, "events-file",
           "append every event as a line of JSON to this file"
           " (events.jsonl; fault_timeline --events-file reads it)")
      .add(kv.allow_loss, "allow-loss",
           "a job whose values were lost (a dead server without a replica)"
           " still exits 0");
}

void node_config::add_server_options() {
  opt_group{custom_options_, "server"}
      .add(mode_text, "mode", "sync | sync_device | async | ssp:S")
      .add(server.road_port, "road-port",
           "TCP port of the fast road (0 = any free)")
      .add(server.road_send_timeout_ms, "road-send-timeout-ms",
           "drop a worker that reads no reply for this long (ms, > 0)")
      .add(server.replicas, "replicas",
           "backups per store: 1 = on the next server (ack after it), 0")
      .add(server.inflight_bytes, "inflight-bytes",
           "bytes of workers' road frames in flight, at most, over all"
           " workers (>= --kv.window-bytes)")
      .add(server.atomic_pushes_text, "atomic-pushes",
           "auto | on | off: a dying worker's push is kept on every server"
           " or none; auto = on in sync (no measurable cost), off in async"
           " and ssp (there a push shows with its worker's next request)")
      .add(server.helper_threads, "helper-threads",
           "threads beside the actor's for rounds and replies, 0..16")
      .add(server.replica_road_text, "replica-road",
           "replicas travel by: auto (the backup's fast road) | tcp |"
           " middleman (CAF)");
}

void node_config::add_kv_options() {
  opt_group{custom_options_, "kv"}
      .add(kv.request_timeout_ms, "request-timeout-ms",
           "give up on a reply after this long (ms, 1..86400000)")
      .add(kv.max_message_bytes, "max-message-bytes",
           "cut pushes and pulls into parts of at most this (bytes)")
      .add(kv.road_text, "road",
           "auto (shared memory on one machine, else TCP) | tcp | middleman")
      .add(kv.window_bytes, "window-bytes",
           "bytes in flight per server before more wait (bytes)")
      .add(kv.ring_bytes, "ring-bytes",
           "bytes of each shared-memory ring (per server and direction)")
      .add(kv.resend_ms, "resend-ms",
           "send a road request again after this long unanswered, 0 = never")
      .add(kv.helper_threads, "helper-threads",
           "threads (0..16) sharing the copies of large frames, 0 = none")
      .add(kv.scheduler_only, "scheduler-only",
           "run the kv client on CAF's scheduler threads only");
}

void node_config::add_road_options() {
  opt_group{custom_options_, "road"}
      .add(road.spin_us, "spin-us",
           "road readers poll this long (us) before they sleep: no wake-up for"
           " a message that comes meanwhile, at the CPU it burns; 0 = off")
      .add(road.caller_spin_us, "caller-spin-us",
           "a blocking kv call polls this long (us) for its reply before it"
           " sleeps; 0 = off")
      .add(road.frame_spin_us, "frame-spin-us",
           "a reader inside a large frame polls this long (us) for more of"
           " it before it sleeps; 0 = off")
      .add(road.single_conn, "single-conn",
           "tcp roads: one connection both ways, the server's answers too"
           " (off: a reply connection of its own, one socket per direction)");
}

void node_config::add_optimizer_options() {
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
}

void node_config::add_train_options() {
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
}

void node_config::add_agent_options() {
  opt_group{custom_options_, "agent"}
      .add(agent.servers, "servers", "server processes this agent starts")
      .add(agent.workers, "workers", "worker processes this agent starts")
      .add(agent.max_restarts, "max-restarts",
           "restarts per child within the window before giving up")
      .add(agent.restart_window_ms, "restart-window-ms",
           "window restarts are counted over (ms)")
      .add(agent.backoff_ms, "backoff-ms",
           "delay before a first restart (ms); doubles for the next ones")
      .add(agent.backoff_max_ms, "backoff-max-ms", "largest restart delay (ms)")
      .add(agent.logs, "logs", "folder for one log per child, \"\" = ours");
}

void node_config::add_fault_options() {
  opt_group{custom_options_, "fault"}
      .add(fault.plan, "plan",
           "faults to inject, e.g. kill:worker-1@3000,hang:worker-0@5000+4000,"
           "cut:worker-1@8000+2000,stall:worker-0@9000")
      .add(fault.random_kills, "random-kills",
           "kill this many children at random times (each once before any"
           " twice; at most 10000)")
      .add(fault.random_targets, "random-targets", "worker | server | any")
      .add(fault.random_from_ms, "random-from-ms",
           "random kills happen after this (ms from the agent's start)")
      .add(fault.random_to_ms, "random-to-ms",
           "... and before this (ms from the agent's start)")
      .add(fault.seed, "seed", "seed of random draws, 0 = from the clock")
      .add(kv.faults.drop_pushes, "drop-pushes",
           "probability that a worker loses a push frame (road only)")
      .add(kv.faults.duplicate_pushes, "duplicate-pushes",
           "probability that a worker sends a push frame twice (road only)")
      .add(kv.faults.cut_road_after, "cut-road-after",
           "a worker ends its fast road to a server right after its N-th"
           " request on roads, once (the server stays up); 0 = off");
}

void node_config::add_checkpoint_options() {
  opt_group{custom_options_, "checkpoint"}
      .add(server.checkpoint.dir, "dir",
           "folder of checkpoints shared by the cluster, \"\" = none")
      .add(server.checkpoint.every_ms, "every-ms",
           "checkpoint every this many ms, 0 = only on request")
      .add(server.checkpoint.tear_generation, "fault-tear",
           "fault injection: a server writing this generation dies half way");
}

void node_config::add_worker_options() {
  opt_group{custom_options_, "worker"}
      .add(worker.task, "task", "train | counter | stage (--pipeline.*)")
      .add(worker.steps, "steps", "clocks the built-in workload runs")
      .add(worker.keys, "keys", "arrays the built-in workload uses")
      .add(worker.key_floats, "key-floats", "floats per array")
      .add(worker.pipeline, "pipeline",
           "compute step t+1 while step t's push is in flight (async, ssp)")
      .add(worker.overlap, "overlap",
           "push each block of gradients as soon as it is made, while the"
           " step goes on (sync, async; 2+ scheduler threads)")
      .add(worker.watch_us, "watch-us",
           "the scheduler thread watches for work this long (us) before it"
           " sleeps, 0 = at once; not with --worker.pipeline")
      .add(worker.blas_threads, "blas-threads",
           "threads OpenBLAS computes with (1: the machine's workers share"
           " its cores)")
      .add(worker.step_timeout_ms, "step-timeout-ms",
           "a step of its own work (training step, evaluation, stage forward"
           " or backward) running this long (ms) is hung: the process ends"
           " and its agent restarts it; 0 = half what the others wait for it:"
           " --kv.request-timeout-ms (sync, ssp), the end barrier's 60 s"
           " (async)");
}

void node_config::add_pipeline_options() {
  opt_group{custom_options_, "pipeline"}
      .add(pipeline.stages, "stages",
           "stages of the model, one process each (--worker.task=stage)")
      .add(pipeline.replicas, "replicas",
           "replicas of the pipeline, in sync through the servers"
           " (--cluster.servers > 0)")
      .add(pipeline.schedule_text, "schedule", "gpipe | 1f1b | zb-h1")
      .add(pipeline.micro_batches, "micro-batches",
           "micro-batches per mini-batch (divides --train.batch)")
      .add(pipeline.cut_text, "cut",
           "layer boundaries between stages, e.g. 2,3; \"\" = even"
           " parameters")
      .add(pipeline.checkpoint_every, "checkpoint-every",
           "each stage writes its weights every this many mini-batches")
      .add(pipeline.checkpoint_dir, "checkpoint-dir",
           "folder of the stages' checkpoints; \"\" = one per job in /tmp")
      .add(pipeline.steps, "steps",
           "stop after this many mini-batches; 0 = --train.epochs")
      .add(pipeline.stage_wait_ms, "stage-wait-ms",
           "a stage missing from the cluster, or that its lead cannot"
           " connect to, this long ends the other stages of its replica"
           " (exit 5; at once for one given up, or where all missing ended"
           " so); 0 = wait for ever")
      .add(pipeline.fault_kill, "fault-kill",
           "fault injection: S@K, stage S kills its process in mini-batch K"
           " (once; S/R@K: of replica R); S@K:push, in its push of K to the"
           " servers; S@K:eval, in the evaluation after K; S@K:device, its"
           " step fails as a device's would (exit 1, restarted); S@K:stall,"
           " its work hangs (--worker.step-timeout-ms ends it)")
      .add(pipeline.fault_lose_sync, "fault-lose-sync",
           "fault injection: S (or S/R: of replica R), stage S leaves its"
           " lead's first sync unanswered, as a cut connection loses an"
           " answer; the lead asks again")
      .add(pipeline.fault_lose_commit, "fault-lose-commit",
           "fault injection: S@K (or S/R@K: of replica R), stage S drops"
           " its lead's commit of mini-batch K, as a cut connection loses"
           " it; the lead's stall watch starts the stages again")
      .add(pipeline.fault_lose_finish, "fault-lose-finish",
           "fault injection: S (or S/R: of replica R), stage S drops the"
           " first finish it gets (stage 0: the last stage's, which sends"
           " it again; others: the lead's, and end once the view says the"
           " lead finished)");
}

std::string node_config::checkpoint_mode() const {
  auto on_servers = server.mode;
  on_servers.on_device = false;
  return to_string(on_servers);
}

std::chrono::microseconds node_config::scheduler_watch() const {
  bool stepping = role_name == "worker" && !worker.pipeline;
  return std::chrono::microseconds{stepping ? worker.watch_us : 0};
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
                         "--role must be scheduler, server, worker or"
                         " agent, got",
                         role_name.empty() ? "nothing" : role_name);
}

caf::error node_config::finish() {
  for (auto& name : switches_off_) { // --SWITCH=false, after the INI file
    auto dot = name.find('.');
    if (auto* opt = custom_options_.qualified_name_lookup(name.substr(0, dot),
                                                          name.substr(dot + 1)))
      opt->store(caf::config_value{false}); // a variable bound to it
    set(name, false);                       // and CAF's own settings
  }
  if (!set_log_level(log_level))
    return caf::make_error(errc::invalid_config,
                           "--log-level must be error, warning, info"
                           " or debug, got",
                           log_level);
  if (auto err = check_caf_settings())
    return err;
  if (auto err = check_addresses())
    return err;
  auto mode = parse_consistency(mode_text);
  if (!mode)
    return std::move(mode.error());
  server.mode = *mode;
  if (role_name == "agent" && agent.servers == 0 && agent.workers == 0)
    return caf::make_error(errc::invalid_config,
                           "--role=agent with --agent.servers=0 and"
                           " --agent.workers=0 would start nothing: give"
                           " either the number of its machine's servers or"
                           " workers");
  if (role_name == "agent" && metrics_port != 0 &&
      uint32_t{metrics_port} + agent.servers + agent.workers > 65535)
    return caf::make_error(errc::invalid_config, "--metrics.port", metrics_port,
                           "leaves no room for the agent's children, which"
                           " take the next ports");
  if (auto err = validate(scheduler))
    return err;
  if (auto err = validate(kv))
    return err;
  if (auto err = validate(server)) // atomic pushes too
    return err;
  kv.resume_at_largest = workers_resume_at_largest(server);
  if (server.inflight_bytes < kv.window_bytes)
    return caf::make_error(errc::invalid_config,
                           "--server.inflight-bytes must be >= "
                           "--kv.window-bytes: one worker's frames in flight");
  if (auto err = validate(road))
    return err;
  if (auto err = validate(optimizer))
    return err;
  if (auto err = validate(train))
    return err;
  if (auto err = validate(worker))
    return err;
  if (auto err = validate(worker.device))
    return err;
  worker.sum_on_devices = server.mode.on_device;
  if (auto err = check_devices())
    return err;
  if (auto err = validate(pipeline))
    return err;
  if (auto err = check_modes()) // once each group's own checks passed
    return err;
  if (worker.overlap && role_name == "worker" &&
      caf::get_or(*this, "scheduler.max-threads", size_t{1}) < 2)
    // The kv client sends a block's push while the step computes.
    set("scheduler.max-threads", size_t{2});
  if (auto err = validate(agent))
    return err;
  if (auto err = validate(fault))
    return err;
  if (auto err = check_faults())
    return err;
  if (auto err = check_tls()) // first: a refused node makes no folder
    return err;
  if (auto err = check_checkpoints())
    return err;
  if (role_name == "agent" && !agent.logs.empty()) // made if missing
    if (auto why = unwritable_folder(agent.logs); !why.empty())
      return caf::make_error(errc::invalid_config, "--agent.logs: " + why);
  share_settings();
  return caf::none;
}

void node_config::use_certificates(const std::string& dir) {
  auto f = tls_files_in(dir);
  openssl_certificate = f.certificate;
  openssl_key = f.key;
  openssl_cafile = f.cafile;
}

caf::error node_config::check_tls() {
  struct file_option {
    const char* flag;
    const std::string& path;
  };
  const file_option files[] = {{"--openssl.certificate", openssl_certificate},
                               {"--openssl.key", openssl_key},
                               {"--openssl.cafile", openssl_cafile}};
  size_t given = 0;
  for (auto& f : files)
    given += f.path.empty() ? 0 : 1;
  if (given == 0 && openssl_passphrase.empty() && openssl_capath.empty())
    return caf::none; // plain text: a trusted network (docs/trust.md)
  if (given < 3) {
    std::string missing;
    for (auto& f : files)
      if (f.path.empty())
        missing += std::string{missing.empty() ? "" : " and "} + f.flag;
    return caf::make_error(errc::invalid_config,
                           "TLS needs --openssl.certificate, --openssl.key and"
                           " --openssl.cafile together; missing: " +
                               missing + " (deploy/make-certs.sh makes them)");
  }
  for (auto& f : files) {
    std::error_code ec;
    if (std::filesystem::is_directory(f.path, ec)) // it read as no PEM file
      return caf::make_error(errc::invalid_config,
                             std::string{f.flag} + "=" + f.path +
                                 " is a folder: name a PEM file");
    std::ifstream in{f.path};
    if (!in)
      return caf::make_error(errc::invalid_config,
                             std::string{f.flag} + "=" + f.path +
                                 ": cannot read it (" + std::strerror(errno) +
                                 ")");
    std::string first;
    std::getline(in, first);
    if (first.rfind("-----BEGIN ", 0) != 0)
      return caf::make_error(errc::invalid_config, std::string{f.flag} + "=" +
                                                       f.path +
                                                       ": not a PEM file");
  }
  if (auto why =
          check_tls_identity({openssl_certificate, openssl_key, openssl_cafile},
                             openssl_passphrase, openssl_capath);
      !why.empty())
    return caf::make_error(errc::invalid_config, why);
  load<caf::openssl::manager>();
  return caf::none;
}

void node_config::share_settings() {
  kv.faults.seed = fault.seed;
  kv.roads = road;
  server.roads = road;
  server.max_message_bytes = kv.max_message_bytes;
  auto& ck = server.checkpoint;
  ck.mode = checkpoint_mode();
  kv.mode = ck.mode; // said at registration, as the servers say theirs
  ck.optimizer = optimizer.name + "@" + optimizer.on;
  server.optimizer = optimizer_fingerprint(optimizer);
  scheduler.checkpoint = ck;
  scheduler.status_host = host;
}

trainer_settings node_config::trainer() const {
  return {train, worker, kv, optimizer};
}

stage_run_settings node_config::stage() const {
  return {pipeline,          train, optimizer, kv,
          scheduler.servers, host,  port,      worker.device};
}

caf::error node_config::check_options(std::vector<std::string>& args) {
  args = plain_flags(std::move(args), custom_options_, switches_off_);
  if (auto err = check_flags(args, custom_options_, &given_))
    return err;
  given_.insert(switches_off_.begin(), switches_off_.end()); // --X=false
  const std::string flag = "--config-file=";
  std::string file;
  for (auto& a : args)
    if (a.rfind(flag, 0) == 0) {
      if (!file.empty()) // CAF reads the first, and we checked the last
        return caf::make_error(errc::invalid_config,
                               "--config-file given twice (" + file + ", " +
                                   a.substr(flag.size()) +
                                   "): one INI file a node");
      file = a.substr(flag.size());
    }
  if (file == "\"\"") // --config-file= (plain_flags)
    return caf::make_error(errc::invalid_config,
                           "--config-file= names no file: name an INI file,"
                           " or leave the flag out");
  if (file.empty()) { // CAF's default, read if it is there
    if (std::ifstream{config_file_path})
      file = config_file_path;
    else
      return caf::none;
  }
  return check_ini_file(file, custom_options_, &given_);
}

} // namespace troupe
