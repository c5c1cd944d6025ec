// node_config's checks of options that several subsystems must agree on:
// CAF's, addresses, modes, devices, faults, checkpoints (finish() calls
// them).
#include "actors/node/node_config.hpp"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>

#include "actors/base/writable.hpp"
#include "actors/supervision/fault_plan.hpp"
#include "actors/supervision/netns.hpp"
#include "messages/checkpoint.hpp"
#include "messages/errors.hpp"

namespace troupe {

namespace {

/// Why this machine cannot listen on `host`:`port` ("" if it can): a name
/// that does not resolve, an address none of its interfaces holds, or a
/// port taken (0: any free port).
std::string unlistenable(const std::string& host, uint16_t port = 0) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints,
                             &found);
      rc != 0)
    return std::string{"no such host ("} + ::gai_strerror(rc) + ")";
  std::string why = "no address";
  for (auto* a = found; a != nullptr && !why.empty(); a = a->ai_next) {
    int fd =
        ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0)
      continue;
    int one = 1; // as the listeners do: a port in TIME_WAIT is free
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bool bound = ::bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    why = bound ? "" : std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return why;
}

} // namespace

caf::error node_config::check_caf_settings() const {
  auto policy = caf::get_or(*this, "scheduler.policy", caf::atom("sharing"));
  if (policy != caf::atom("sharing") && policy != caf::atom("stealing"))
    // CAF would take its default for any other word, silently.
    return caf::make_error(errc::invalid_config,
                           "--scheduler.policy must be sharing or stealing,"
                           " got",
                           caf::to_string(policy));
  auto threads = caf::get_or(*this, "scheduler.max-threads", size_t{1});
  if (threads == 0 || threads > 256) // 0 ran nothing: a silent hang
    return caf::make_error(errc::invalid_config,
                           "--scheduler.max-threads must be 1..256, got",
                           threads);
  using caf::timespan;
  auto beat = caf::get_or(*this, "middleman.heartbeat-interval", timespan{0});
  auto limit = caf::get_or(*this, "middleman.connection-timeout", timespan{0});
  auto ms = [](timespan t) {
    return std::to_string(
               std::chrono::duration_cast<std::chrono::milliseconds>(t)
                   .count()) +
           " ms";
  };
  if (limit <= timespan{0})
    return caf::make_error(errc::invalid_config,
                           "--middleman.connection-timeout must be above 0"
                           " (a peer silent this long is taken for dead),"
                           " got " +
                               ms(limit));
  if (beat <= timespan{0} || beat >= limit)
    return caf::make_error(errc::invalid_config,
                           "--middleman.heartbeat-interval must be above 0"
                           " and below --middleman.connection-timeout (" +
                               ms(limit) +
                               "): without heartbeats a hung peer is never"
                               " noticed, and an idle peer whose beats come"
                               " later than the timeout is taken for dead;"
                               " got " +
                               ms(beat));
  return caf::none;
}

caf::error node_config::check_addresses() const {
  for (auto [flag, value] : {std::pair{"--host", &host},
                             std::pair{"--scheduler-host", &scheduler_host}})
    if (value->empty())
      return caf::make_error(errc::invalid_config,
                             std::string{flag} +
                                 "= names no host: give an address (127.0.0.1"
                                 " where the flag is left out)");
  // Where it listens must be this machine's: else it exited 1 at its
  // first listen, after it joined, and its agent restarted it into the
  // same line. Servers and stages listen on --host and --port (an agent's
  // children, on its --host); other workers listen nowhere.
  bool joins =
      role_name == "server" || role_name == "worker" || role_name == "agent";
  bool stages = worker.task == "stage";
  uint32_t listeners = role_name == "server"   ? 1
                       : role_name == "worker" ? (stages ? 1 : 0)
                       : role_name == "agent"
                           ? agent.servers + (stages ? agent.workers : 0)
                           : 0;
  auto [flag, listen] = role_name == "scheduler"
                            ? std::pair{"--scheduler-host", &scheduler_host}
                            : std::pair{"--host", &host};
  if (listeners > 0 || role_name == "scheduler")
    if (auto why = unlistenable(*listen); !why.empty())
      return caf::make_error(errc::invalid_config,
                             std::string{flag} + "=" + *listen +
                                 ": cannot listen there: " + why +
                                 " (give an address of this machine: `ip"
                                 " addr` lists them)");
  if (joins && scheduler_port == 0)
    return caf::make_error(errc::invalid_config,
                           "--scheduler-port=0: a " + role_name +
                               " must be given the port the scheduler listens"
                               " on (0, any free port, is for"
                               " --role=scheduler)");
  if (role_name == "agent" && listeners > 1 && port != 0)
    return caf::make_error(errc::invalid_config,
                           "--port=" + std::to_string(port) +
                               " with an agent of " +
                               std::to_string(listeners) +
                               " children that listen (servers, stages):"
                               " each would listen on it; leave it out (each"
                               " takes a free port)");
  // A road port given and taken: the server warned and ran on CAF,
  // quietly replacing a port the user chose.
  bool one_server =
      role_name == "server" || (role_name == "agent" && agent.servers == 1);
  if (one_server && server.road_port != 0)
    if (auto why = unlistenable(host, server.road_port); !why.empty())
      return caf::make_error(
          errc::invalid_config,
          "--server.road-port=" + std::to_string(server.road_port) +
              ": cannot listen on " + host + ": " + why +
              ": give another port, or leave it out (a"
              " free one)");
  if (role_name == "agent" && agent.servers > 1 && server.road_port != 0)
    return caf::make_error(
        errc::invalid_config,
        "--server.road-port=" + std::to_string(server.road_port) +
            " with --agent.servers=" + std::to_string(agent.servers) +
            ": each server would listen on it; leave it"
            " out (each takes a free port)");
  return caf::none;
}

caf::error node_config::check_modes() const {
  // A scheduler of none refused every worker ("the cluster is full") and
  // waited for ever: its servers had nobody to train for.
  if (scheduler.workers == 0)
    return caf::make_error(errc::invalid_config,
                           "--cluster.workers=0: the scheduler would refuse"
                           " every worker, and the job could never start;"
                           " give the number of workers (or pipeline stages)"
                           " the job has, 1 at least");
  if (optimizer.on == "worker" && server.mode.kind != consistency::kind_t::sync)
    return caf::make_error(errc::invalid_config,
                           "--optimizer.on=worker needs --server.mode=sync:"
                           " workers apply each sync round's mean gradient");
  if (worker.pipeline && server.mode.kind == consistency::kind_t::sync)
    return caf::make_error(errc::invalid_config,
                           "--worker.pipeline needs --server.mode=async or"
                           " ssp:S: a sync round needs each step's fresh"
                           " weights");
  if (worker.overlap && server.mode.kind == consistency::kind_t::ssp)
    return caf::make_error(errc::invalid_config,
                           "--worker.overlap needs --server.mode=sync or"
                           " async: the servers count each block as a clock,"
                           " so an ssp bound would count blocks, not steps");
  if (server.atomic_pushes && server.mode.kind == consistency::kind_t::ssp &&
      server.mode.staleness == 0)
    return caf::make_error(errc::invalid_config,
                           "--server.atomic-pushes=on with"
                           " --server.mode=ssp:0:"
                           " a push shows with its worker's next request, so"
                           " a step that pushes and pulls at once would wait"
                           " for itself; use --server.mode=sync");
  if (worker.task == "stage" && train.evals_per_epoch != 1)
    return caf::make_error(errc::invalid_config,
                           "--train.evals-per-epoch: a pipeline evaluates"
                           " once per epoch (its last stage), got",
                           train.evals_per_epoch);
  if (worker.task == "stage" && scheduler.servers > 0 &&
      optimizer.name == "sum")
    return caf::make_error(errc::invalid_config,
                           "--worker.task=stage with servers: the servers"
                           " apply the optimizer, and --optimizer.name=sum"
                           " would add the gradients to the weights; pick"
                           " sgd, momentum, nesterov or adam");
  // A stage's settings that need nothing but flags: said before it joins
  // (they were found after it had connected, and none was tested).
  bool stage = worker.task == "stage";
  if (stage && train.batch % pipeline.micro_batches != 0)
    return caf::make_error(errc::invalid_config, "--train.batch", train.batch,
                           "must be a multiple of --pipeline.micro-batches",
                           pipeline.micro_batches);
  if (stage && pipeline.replicas > 1 && scheduler.servers == 0)
    return caf::make_error(errc::invalid_config, "--pipeline.replicas",
                           pipeline.replicas,
                           "needs shard servers (--cluster.servers > 0),"
                           " which keep the replicas' stages in sync");
  if (stage && pipeline.fault_in == pipeline_settings::fault_at::push &&
      scheduler.servers == 0)
    return caf::make_error(errc::invalid_config,
                           "--pipeline.fault-kill=S@K:push needs shard"
                           " servers (--cluster.servers > 0)");
  if (worker.task == "stage" && scheduler.servers > 0 &&
      optimizer.on == "worker")
    return caf::make_error(errc::invalid_config,
                           "--worker.task=stage with servers needs"
                           " --optimizer.on=server: each stage pushes its"
                           " mini-batch's gradients, and the servers'"
                           " optimizer applies them");
  if (worker.task == "stage" && scheduler.servers > 0 && !server.atomic_pushes)
    return caf::make_error(errc::invalid_config,
                           "--worker.task=stage with servers needs atomic"
                           " pushes (--server.atomic-pushes=on, or auto in"
                           " sync) on every node: else a"
                           " stage that dies in its push of a committed"
                           " mini-batch leaves it on the other stages' keys"
                           " alone (docs/pipelines.md)");
  // Options that do nothing with the rest, said rather than ignored.
  bool runs_workers = role_name == "worker" || role_name.empty() || // custom
                      (role_name == "agent" && agent.workers > 0);
  if (runs_workers && worker.pipeline && given("worker.watch-us"))
    return caf::make_error(errc::invalid_config,
                           "--worker.watch-us does nothing with"
                           " --worker.pipeline (a pipelined worker runs on"
                           " a thread of its own): drop one");
  if (worker.task == "counter" && optimizer.name != "sum")
    return caf::make_error(errc::invalid_config,
                           "--worker.task=counter needs --optimizer.name=sum"
                           " (its exact sums assume servers that add pushes),"
                           " got",
                           optimizer.name);
  return caf::none;
}

caf::error node_config::check_devices() const {
  auto& d = worker.device;
  // The flag that puts a worker on device actors, to name in an error.
  std::string flag;
  if (d.named && !cpu_alone(d.devices))
    flag = "--device=" + d.text;
  else if (server.mode.on_device)
    flag = "--server.mode=sync_device";
  if (d.devices.size() > 1 && worker.task == "stage")
    return caf::make_error(errc::invalid_config, "--device=" + d.text,
                           "names several devices: a pipeline stage"
                           " computes on one (each stage process its own)");
  if (d.devices.size() > 1 && !server.mode.on_device)
    return caf::make_error(errc::invalid_config, "--device=" + d.text,
                           "names several devices: their gradients are"
                           " summed on the node with"
                           " --server.mode=sync_device");
  if (flag.empty())
    return caf::none;
  if (worker.overlap)
    return caf::make_error(errc::invalid_config,
                           "--worker.overlap pushes the blocks of the"
                           " worker's CPU model as backward makes them; it"
                           " does not run on device actors (" +
                               flag + "): drop one");
  // A pipeline stage computes on one device (actors/device/stage_device.hpp):
  // its layers are its share, with nothing to sum on the node.
  bool stage_on_one = worker.task == "stage" && !server.mode.on_device;
  if (worker.task != "train" && !stage_on_one)
    return caf::make_error(errc::invalid_config,
                           "--worker.task=" + worker.task +
                               " computes nothing on device actors (train"
                               " does, and stage on one device without"
                               " sync_device): drop",
                           flag);
  if (d.devices.size() > train.batch)
    return caf::make_error(errc::invalid_config, flag,
                           "shares each batch among its devices: raise"
                           " --train.batch to",
                           d.devices.size(), "or more");
  return caf::none;
}

caf::error node_config::check_faults() const {
  auto plan = parse_fault_plan(fault.plan);
  if (!plan || cut_targets(*plan).empty())
    return caf::none;
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
                           "--host=" + host + " (this agent's servers)" + why);
  return caf::none;
}

caf::error node_config::check_checkpoints() const {
  auto& ck = server.checkpoint;
  for (auto name : {"every-ms", "fault-tear"})
    if (ck.dir.empty() && given(std::string{"checkpoint."} + name))
      return caf::make_error(errc::invalid_config,
                             std::string{"--checkpoint."} + name +
                                 " does nothing without --checkpoint.dir"
                                 " (the folder the cluster's checkpoints go"
                                 " to): give both, or neither");
  if (ck.resume && ck.dir.empty())
    return validate(ck); // says --resume needs --checkpoint.dir
  if (!ck.dir.empty() && optimizer.on == "worker")
    return caf::make_error(errc::invalid_config,
                           "--checkpoint.dir needs --optimizer.on=server: with"
                           " the optimizer on the workers the servers hold no"
                           " weights to checkpoint");
  // The scheduler and servers read the checkpoint before they join; a
  // missing one is said here, once, before any listens, and its folder
  // is not made. (Workers ask the servers; theirs may be elsewhere.)
  bool reads = role_name == "scheduler" || role_name == "server" ||
               (role_name == "agent" && agent.servers > 0);
  if (reads && !ck.dir.empty())
    if (auto err = check_manifest())
      return err;
  if (auto err = validate(ck)) // creates the folder
    return err;
  // The scheduler writes the manifest, servers their files: a folder they
  // cannot write in failed every checkpoint, and the job ended 0.
  if (reads && !ck.dir.empty())
    if (auto why = unwritable_folder(ck.dir); !why.empty())
      return caf::make_error(errc::invalid_config, "--checkpoint.dir: " + why);
  return caf::none;
}

caf::error node_config::check_manifest() const {
  auto& ck = server.checkpoint;
  std::error_code ec;
  bool there = std::filesystem::exists(ck.dir + "/" + manifest_name, ec);
  if (ck.resume && !there)
    return caf::make_error(errc::invalid_config,
                           "no checkpoint to resume from in " + ck.dir +
                               " (no " + ck.dir + "/" + manifest_name +
                               "); start without --resume");
  if (!there)
    return caf::none;
  auto m = read_manifest(ck.dir);
  // A fresh job numbered from 1 when the manifest could not be read, and
  // wrote over the files it named; "start without --resume" led there.
  if (!m && ck.resume)
    return caf::make_error(
        errc::invalid_config,
        "the checkpoint in " + ck.dir + " cannot be resumed: its " +
            manifest_name + " is damaged (" + describe_words(m.error()) +
            "), and its files cannot be read without it; restore it, or"
            " start without --resume in another --checkpoint.dir");
  if (!m)
    return caf::make_error(
        errc::invalid_config,
        ck.dir + " holds a damaged " + manifest_name + " (" +
            describe_words(m.error()) +
            "): this job would write over the checkpoint files it names;"
            " move them away, or give another --checkpoint.dir");
  // The servers refuse other flags than the checkpoint's; a scheduler
  // given them waited for servers that never came.
  auto mode = checkpoint_mode(); // ck.mode is set after the checks
  if (ck.resume && role_name == "scheduler" && given("server.mode") &&
      m->mode != mode)
    return caf::make_error(errc::invalid_config,
                           "the checkpoint in " + ck.dir +
                               " was written with --server.mode=" + m->mode +
                               ", and this job runs --server.mode=" + mode +
                               ": use the same flags to resume");
  return caf::none;
}

} // namespace troupe
