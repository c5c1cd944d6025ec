// A troupe cluster inside one test process: the scheduler in one actor
// system, each shard server in a system (a node) of its own, and workers
// (kv clients) in another, talking over loopback like separate processes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/base/log.hpp"
#include "actors/kv/kv.hpp"
#include "actors/node/node_config.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "actors/server/shard_server.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"
#include "tests/test_road_key.hpp"

namespace troupe::test {

/// The exit reason of the next actor `self` monitors to go down, or
/// nullopt if none went down within `limit`.
inline std::optional<caf::error> await_down(caf::scoped_actor& self,
                                            std::chrono::seconds limit) {
  std::optional<caf::error> reason;
  self->receive([&reason](const caf::down_msg& dm) { reason = dm.reason; },
                caf::after(limit) >> [] {});
  return reason;
}

/// True for the exit reason of an actor that finished its work.
inline bool normal_exit(const caf::error& e) {
  return !e || e == caf::exit_reason::normal;
}

/// A config with the middleman; TROUPE_TEST_LOG=debug shows troupe's log.
std::unique_ptr<node_config> make_config() {
  if (const char* lvl = std::getenv("TROUPE_TEST_LOG"))
    set_log_level(lvl);
  auto cfg = std::make_unique<node_config>();
  cfg->load<caf::io::middleman>();
  cfg->kv.request_timeout_ms = 10000;
  // Every node of these clusters is in this process, and no test here
  // takes a hung peer for dead: a connection that misses heartbeats for
  // 2 s (the default) while ctest runs multi-process tests beside it on 2
  // cores broke mid-test, once, and the pushes sent by hand on it were
  // never answered. Ended actors still send down messages at once.
  cfg->set("middleman.connection-timeout",
           caf::timespan{std::chrono::seconds{10}});
  return cfg;
}

/// A scheduler in system `a`, each shard server in a system of its own (a
/// node of its own, as troupe-node runs them), workers (kv clients) in
/// system `b`.
struct cluster {
  std::unique_ptr<node_config> cfg_a = make_config();
  std::unique_ptr<node_config> cfg_b = make_config();
  caf::actor_system a{*cfg_a};
  caf::actor_system b{*cfg_b};
  std::vector<std::unique_ptr<node_config>> server_cfgs;
  std::vector<std::unique_ptr<caf::actor_system>> server_systems;
  /// A test's own actor on each server's node: see self_for.
  std::vector<std::unique_ptr<caf::scoped_actor>> server_selves;
  caf::scoped_actor self{b};
  /// The test's actor on the scheduler's node (system a), from which
  /// events() asks the scheduler: from `self` the scheduler could run on
  /// b's threads for a moment (see self_for).
  caf::scoped_actor sched_self{a};
  caf::actor sched;
  caf::actor remote_sched; // the scheduler as system b reaches it
  std::vector<caf::actor> servers;
  std::vector<uint16_t> server_ports;
  std::vector<std::unique_ptr<kv>> workers;
  update_fn update;

  uint32_t replicas = 1;
  /// The servers' --server.atomic-pushes.
  bool atomic_pushes = false;
  /// The workers' --kv.max-message-bytes, which the servers' frame limit
  /// follows.
  uint32_t max_message_bytes;

  /// `road` is the workers' --kv.road: auto | tcp | middleman; `replicas`
  /// the servers' --server.replicas; `room` the workers the scheduler
  /// admits (--cluster.workers), for tests that add workers of their own
  /// (0: `nworkers`).
  cluster(const std::string& mode, uint32_t nservers, uint32_t nworkers,
          uint32_t max_message_bytes = 16u << 20, update_fn update = add_update,
          uint32_t slice_floats = 1000, const std::string& road = "auto",
          uint32_t replicas = 1, uint32_t room = 0, bool atomic = false)
      : update(std::move(update)), replicas(replicas), atomic_pushes(atomic),
        max_message_bytes(max_message_bytes) {
    scheduler_settings ss;
    ss.servers = nservers;
    ss.workers = std::max(nworkers, room);
    ss.placement.slice_floats = slice_floats;
    ss.road_key = test_road_key(); // tests may speak on roads as members
    sched = a.spawn(scheduler, ss);
    auto port = a.middleman().publish(sched, 0, "127.0.0.1");
    BOOST_REQUIRE(port);
    for (uint32_t i = 0; i < nservers; ++i)
      start_server(mode, *port);
    auto remote = connect_scheduler(b, "127.0.0.1", *port, 5000);
    BOOST_REQUIRE(remote);
    remote_sched = *remote;
    kv_settings ks;
    ks.request_timeout_ms = 10000;
    ks.max_message_bytes = max_message_bytes;
    auto kind = parse_road(road);
    BOOST_REQUIRE_MESSAGE(kind, "bad road " << road);
    ks.road_text = road;
    ks.road = *kind;
    for (uint32_t i = 0; i < nworkers; ++i)
      workers.push_back(std::make_unique<kv>(b, *remote, ks));
  }

  void start_server(const std::string& mode, uint16_t sched_port) {
    server_cfgs.push_back(make_config());
    server_systems.push_back(
        std::make_unique<caf::actor_system>(*server_cfgs.back()));
    auto& sys = *server_systems.back();
    auto remote = connect_scheduler(sys, "127.0.0.1", sched_port, 5000);
    BOOST_REQUIRE(remote);
    server_settings sv;
    sv.mode = *parse_consistency(mode);
    sv.replicas = replicas;
    sv.max_message_bytes = max_message_bytes;
    sv.atomic_pushes = atomic_pushes;
    auto s = sys.spawn(shard_server, sv, *remote, update);
    auto p = sys.middleman().publish(s, 0, "127.0.0.1");
    BOOST_REQUIRE(p);
    caf::anon_send(s, start_atom_v, std::string{"127.0.0.1"}, *p);
    servers.push_back(s);
    server_ports.push_back(*p);
    server_selves.push_back(std::make_unique<caf::scoped_actor>(sys));
  }

  /// The actor from which a test sends to `server` (one of `servers`) by
  /// its own handle: one in that server's system. A message sent straight
  /// to an idle actor has the sender's system run it, so a server sent to
  /// from `self` (system b) would now and then end on one of b's threads
  /// after its own system was gone, and crash there (CAF 0.17's
  /// local_actor::cleanup reads its home system's clock;
  /// replica_fencing_test, 1 run in 10 with a CPU hog).
  caf::scoped_actor& self_for(const caf::actor& server) {
    for (size_t i = 0; i < servers.size(); ++i)
      if (servers[i] == server)
        return *server_selves[i];
    BOOST_FAIL("not a server of this cluster");
    return self;
  }

  ~cluster() {
    workers.clear();
    for (auto& s : servers)
      caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
  }

  /// Every event the scheduler recorded so far (fails the test if it
  /// does not answer within `wait`).
  std::vector<event_record> events(std::chrono::milliseconds wait) {
    std::vector<event_record> got;
    sched_self->request(sched, wait, events_atom_v)
        .receive([&got](const frame& f) { BOOST_REQUIRE(!decode(f, got)); },
                 [](const caf::error& err) {
                   BOOST_FAIL("no event log: " << describe(err));
                 });
    return got;
  }

  /// The scheduler's events of kind `kind` after the first `after` it
  /// recorded; waits up to `wait` for one, in long polls that the
  /// scheduler answers as soon as an event is in.
  std::vector<event_record> events_of(const std::string& kind,
                                      std::chrono::milliseconds wait,
                                      uint64_t after = 0) {
    auto until = std::chrono::steady_clock::now() + wait;
    std::vector<event_record> out;
    uint64_t seen = after;
    for (bool first = true;; first = false) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      if (!first && left.count() <= 0)
        return out;
      std::vector<event_record> got;
      bool late = false;
      sched_self
          ->request(sched, std::max(left, std::chrono::milliseconds{1}),
                    events_atom_v, seen)
          .receive([&got](const frame& f) { BOOST_REQUIRE(!decode(f, got)); },
                   [&late](const caf::error&) { late = true; });
      if (late)
        return out;
      seen += got.size();
      for (auto& e : got)
        if (e.kind == kind)
          out.push_back(e);
      if (!out.empty())
        return out;
    }
  }

  /// Worker with rank `r`.
  kv& worker(uint32_t r) {
    for (auto& w : workers)
      if (w->view()->first == r)
        return *w;
    BOOST_FAIL("no worker of rank " << r);
    return *workers.front();
  }

  /// The index in `servers` (and `server_ports`) of the server `v` ranks
  /// `rank`. Servers join in any order: rank k need not be servers[k]
  /// (under load, at 27adb75, kv_cuts_test's pushes for rank 0 went to
  /// rank 1 now and then, which refused them).
  size_t index_of(const cluster_view& v, uint32_t rank) const {
    for (auto& n : v.servers)
      if (n.rank == rank)
        for (size_t i = 0; i < server_ports.size(); ++i)
          if (server_ports[i] == n.port)
            return i;
    BOOST_FAIL("no server of rank " << rank);
    return 0;
  }
};

} // namespace troupe::test
