// troupe-node: one process of a troupe cluster, by --role: scheduler,
// server (a shard server), worker (the built-in workload) or agent (starts
// and supervises the servers and workers of its machine).
#include <unistd.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/log.hpp"
#include "actors/base/metrics.hpp"
#include "actors/base/step_watch.hpp"
#include "actors/cluster/connect.hpp"
#include "actors/kv/kv.hpp"
#include "actors/node/node_config.hpp"
#include "actors/pipeline/stage_driver.hpp"
#include "actors/road/road.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "actors/server/server_optimizer.hpp"
#include "actors/server/shard_server.hpp"
#include "actors/supervision/agent.hpp"
#include "actors/worker/trainer.hpp"
#include "actors/worker/worker.hpp"
#include "actors/worker/workload.hpp"
#include "kernels/blas.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

using namespace troupe;

namespace {

int fail(const char* what, const caf::error& err) {
  stderr_line() << "*** " << what << " failed: " << describe(err) << '\n';
  return 1;
}

std::atomic<bool> stop_requested{false};

void on_stop_signal(int) {
  stop_requested = true;
}

/// SIGTERM and SIGINT end a scheduler or server cleanly (its actor quits
/// with user_shutdown, so peers see a departure, not a crash) and an agent
/// with its children.
void stop_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

/// Blocks until `a` ends (or a stop signal ends it); returns 0 if it ended
/// normally.
int wait_for(caf::actor_system& sys, const caf::actor& a, const char* what) {
  caf::scoped_actor self{sys};
  self->monitor(a);
  int rc = 0;
  bool down = false;
  bool stopping = false;
  while (!down) {
    self->receive(
        [&](const caf::down_msg& dm) {
          down = true;
          if (dm.reason && dm.reason != caf::exit_reason::user_shutdown) {
            fail(what, dm.reason);
            rc = exit_code_of(dm.reason);
          }
        },
        caf::after(std::chrono::milliseconds{100}) >>
            [&] {
              if (stop_requested && !stopping) {
                stopping = true;
                self->send_exit(a, caf::exit_reason::user_shutdown);
              }
            });
  }
  return rc;
}

void say_listening(const char* role_name, const std::string& host,
                   uint16_t port) {
  std::printf("troupe-node: %s listening on %s:%u (pid %d)\n", role_name,
              host.c_str(), port, static_cast<int>(::getpid()));
  std::fflush(stdout);
}

int run_scheduler(caf::actor_system& sys, const node_config& cfg) {
  stop_on_signals();
  auto sched = sys.spawn(scheduler, cfg.scheduler);
  // It reads the checkpoint it resumes from as it starts: one it cannot
  // load ends it here, not after "listening" (its first answer comes once
  // it started).
  bool started = false;
  caf::scoped_actor(sys)
      ->request(sched, caf::infinite, events_atom_v)
      .receive([&started](const frame&) { started = true; },
               [](const caf::error&) {});
  if (!started)
    return wait_for(sys, sched, "scheduler"); // says why it ended
  auto port =
      publish_actor(sys, sched, cfg.scheduler_port, cfg.scheduler_host, true);
  if (!port) {
    anon_send_exit(sched, caf::exit_reason::user_shutdown);
    return fail("publishing the scheduler", port.error());
  }
  say_listening("scheduler", cfg.scheduler_host, *port);
  return wait_for(sys, sched, "scheduler");
}

int run_server(caf::actor_system& sys, const node_config& cfg) {
  stop_on_signals();
  auto sched = connect_scheduler(sys, cfg.scheduler_host, cfg.scheduler_port,
                                 cfg.kv.request_timeout_ms, &stop_requested);
  if (!sched && stop_requested)
    return 0; // told to stop before it joined
  if (!sched)
    return fail("connecting to the scheduler", sched.error());
  auto srv = sys.spawn(shard_server, cfg.server, *sched,
                       make_update_fn(cfg.optimizer));
  auto port = publish_actor(sys, srv, cfg.port, cfg.host, true);
  if (!port) {
    anon_send_exit(srv, caf::exit_reason::user_shutdown);
    return fail("publishing the server", port.error());
  }
  caf::anon_send(srv, start_atom_v, cfg.host, *port);
  say_listening("server", cfg.host, *port);
  return wait_for(sys, srv, "server");
}

int run_worker(caf::actor_system& sys, const node_config& cfg) {
  auto sched = connect_scheduler(sys, cfg.scheduler_host, cfg.scheduler_port,
                                 cfg.kv.request_timeout_ms);
  if (!sched)
    return fail("connecting to the scheduler", sched.error());
  set_blas_threads(static_cast<int>(cfg.worker.blas_threads));
  if (cfg.worker.task == "stage")
    return run_stage(sys, *sched, cfg.stage());
  if (cfg.worker.task == "counter")
    return run_counter_workload(sys, *sched, cfg.worker, cfg.kv,
                                cfg.server.checkpoint.resume);
  return run_training(sys, *sched, cfg.trainer());
}

/// Ends the process with `rc` if CAF's shutdown (the actor system's
/// destructor, after main returns) has not ended it within `limit`. CAF
/// 0.17 waits there for every connection attempt, and a TLS handshake
/// with a peer that accepted and stays silent never ends by itself: a
/// worker that had failed in one clear line then hung. Touches nothing
/// shared, so it may outlive main.
void bound_shutdown(int rc, std::chrono::seconds limit) {
  std::thread{[rc, limit] {
    std::this_thread::sleep_for(limit);
    std::fprintf(stderr,
                 "troupe-node: shutdown still waits for a connection"
                 " after %d s: exiting\n",
                 static_cast<int>(limit.count()));
    std::fflush(nullptr);
    std::_Exit(rc);
  }}.detach();
}

/// How long a node's shutdown may take once its role has ended.
constexpr std::chrono::seconds shutdown_limit{5};

/// This executable's path, for an agent's children.
std::string self_path(const char* argv0) {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return argv0;
  return std::string(buf, static_cast<size_t>(n));
}

} // namespace

int main(int argc, char** argv) {
  node_config cfg;
  if (auto rc = read_command_line(cfg, argc, argv))
    return *rc;
  if (cfg.role_name == "agent") {
    // What it passes on to its children.
    auto flags = child_flags({argv + 1, argv + argc});
    stop_on_signals();
    caf::actor_system sys{cfg};
    agent_run_settings run{cfg.agent, cfg.fault, cfg.scheduler_host,
                           cfg.scheduler_port, cfg.kv.request_timeout_ms};
    auto rc = run_agent(sys, run, self_path(argv[0]), flags, stop_requested);
    bound_shutdown(rc, shutdown_limit);
    return rc;
  }
  auto r = cfg.node_role();
  if (!r)
    return fail("checking options", r.error()) + 1;
  if (*r == role::worker) { // first: a fault plan's stall (SIGUSR1) may
    worker_options w;       // come at once, and must find its handler
    w.step_timeout_ms = cfg.worker.step_timeout_ms;
    start_step_watch(step_bound_of(w, cfg.kv));
  }
  caf::actor_system sys{cfg};
  int rc = 2;
  switch (*r) {
  case role::scheduler:
    rc = run_scheduler(sys, cfg);
    break;
  case role::server:
    rc = run_server(sys, cfg);
    break;
  case role::worker:
    rc = run_worker(sys, cfg);
    break;
  }
  bound_shutdown(rc, shutdown_limit);
  return rc;
}
