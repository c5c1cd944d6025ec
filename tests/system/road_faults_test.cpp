// The fast road between real troupe-node processes when things go wrong: a
// server killed mid-transfer, a worker killed mid-run (its rings must not
// outlive it), and the middleman road when the fast road is switched off.
#define BOOST_TEST_MODULE road_faults_tests
#include <boost/test/unit_test.hpp>

#include "tests/test_support.hpp"

#include <chrono>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/kv/kv.hpp"
#include "actors/node/node_config.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "tests/road/road_traces.hpp"
#include "tests/system/nodes.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

long long ms_since(steady::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() -
                                                               t0)
      .count();
}

/// kB of road rings resident in process `pid`: pages it touched through
/// its mappings, so frames went through them.
size_t ring_rss_kb(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/smaps"};
  bool ring = false;
  size_t kb = 0;
  for (std::string line; std::getline(in, line);) {
    auto first = line.substr(0, line.find(' '));
    if (first.empty() || first.back() != ':') // a mapping's first line
      ring = line.find("troupe-ring") != std::string::npos;
    else if (ring && first == "Rss:")
      kb += std::stoul(line.substr(4));
  }
  return kb;
}

bool alive(child_process& p) {
  return !p.wait_exit(0ms);
}

/// The test process as a cluster node: an actor system with fast
/// heartbeats, connected to scheduler `s`, whose mode its kv clients say.
struct test_node {
  node_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor sched;

  test_node(const scheduler_process& s, const std::string& road) {
    cfg.load<caf::io::middleman>();
    cfg.set("middleman.heartbeat-interval", caf::timespan{100ms});
    cfg.set("middleman.connection-timeout", caf::timespan{1s});
    cfg.kv.request_timeout_ms = 5000;
    cfg.kv.road_text = road;
    use_test_tls(cfg);
    BOOST_REQUIRE(!cfg.finish());
    cfg.kv.mode = s.mode; // else its own default: sync, refused
    sys = std::make_unique<caf::actor_system>(cfg);
    auto found = connect_scheduler(*sys, "127.0.0.1", s.port, 10000);
    BOOST_REQUIRE_MESSAGE(found, why(found));
    sched = *found;
  }

  /// The scheduler's view once `pred` holds (asked again until then).
  template <class Pred> cluster_view view_when(Pred pred) {
    caf::scoped_actor self{*sys};
    cluster_view v;
    BOOST_REQUIRE(poll_until(
        [&] {
          self->request(sched, 5s, view_atom_v)
              .receive([&v](const frame& f) { BOOST_REQUIRE(!decode(f, v)); },
                       [](const caf::error& err) {
                         BOOST_FAIL("view: " << describe(err));
                       });
          return pred(v);
        },
        20s));
    return v;
  }
};

/// A push (pull = false) or pull of key 1 in flight from the test process.
struct pending {
  caf::response_handle<caf::blocking_actor, caf::message, true> reply;
  bool pull;
};

/// Waits for `p`; its error, or none.
caf::error await(pending& p) {
  caf::error err;
  auto on_error = [&err](caf::error& x) { err = std::move(x); };
  if (p.pull)
    p.reply.receive([](std::vector<named_array>&) {}, on_error);
  else
    p.reply.receive([](uint64_t) {}, on_error);
  return err;
}

/// 64 MiB: four parts to the server at the default message bound.
constexpr uint32_t big_floats = 16u << 20;

/// Kills the only server while 64 MiB pushes and pulls are in flight from
/// this process on `road`; checks that what was in flight fails and that
/// no ring of the dead server's road stays mapped here.
void kill_server_mid_transfer(const std::string& road) {
  BOOST_TEST_MESSAGE("road " << road);
  scheduler_process s{1, 1, {"--server.mode=async"}};
  auto server = start_server(s, "async");
  test_node node{s, road};
  kv store{*node.sys, node.sched, node.cfg.kv};
  auto init = store.init({named_array{1, std::vector<float>(big_floats)}});
  BOOST_REQUIRE_MESSAGE(init, why(init));
  BOOST_CHECK_EQUAL(ring_mappings(), road == "auto" ? 2u : 0u);
  caf::scoped_actor self{*node.sys};
  const std::vector<float> ones(big_floats, 1.0f);
  std::deque<pending> in_flight;
  uint64_t clock = 0;
  auto top_up = [&] {
    while (in_flight.size() < 2) {
      bool pull = in_flight.empty() ? clock % 2 == 1 : !in_flight.back().pull;
      if (pull)
        in_flight.push_back({self->request(store.handle(), 30s, pull_atom_v,
                                           clock, std::vector<uint64_t>{1}),
                             true});
      else
        in_flight.push_back(
            {self->request(store.handle(), 30s, push_atom_v, clock++,
                           std::vector<named_array>{{1, ones}}),
             false});
    }
  };
  for (int done = 0; done < 4; ++done) {
    top_up();
    auto err = await(in_flight.front());
    BOOST_REQUIRE_MESSAGE(!err, "before the kill: " << describe(err));
    in_flight.pop_front();
  }
  top_up();
  auto killed_at = steady::now();
  server->signal(SIGKILL);
  // Every request in flight ends; one at least fails, as the server died.
  size_t failed = 0;
  for (auto& p : in_flight) {
    auto err = await(p);
    BOOST_TEST_MESSAGE((p.pull ? "pull" : "push")
                       << " in flight ended after " << ms_since(killed_at)
                       << " ms: " << (err ? describe(err) : "ok"));
    if (!err)
      continue;
    ++failed;
    BOOST_CHECK_MESSAGE(err == errc::peer_down || err == errc::timeout,
                        describe(err));
  }
  BOOST_CHECK_GE(failed, 1u);
  auto t0 = steady::now();
  auto gone = await_ring_mappings_at_most(0);
  BOOST_TEST_MESSAGE("rings unmapped after " << ms_since(t0) << " ms");
  BOOST_CHECK_MESSAGE(gone, ring_mappings()
                                << " ring mappings left after the server died");
}

} // namespace

BOOST_AUTO_TEST_SUITE(road_faults_tests)

BOOST_AUTO_TEST_CASE(a_server_killed_mid_transfer_fails_what_was_in_flight) {
  for (std::string road : {"auto", "tcp"})
    kill_server_mid_transfer(road);
}

BOOST_AUTO_TEST_CASE(a_call_after_the_only_server_died_fails_at_once) {
  scheduler_process s{1, 1, {"--server.mode=async"}};
  auto server = start_server(s, "async");
  test_node node{s, "auto"};
  kv store{*node.sys, node.sched, node.cfg.kv};
  auto init = store.init({named_array{1, std::vector<float>(4097)}});
  BOOST_REQUIRE_MESSAGE(init, why(init));
  server->signal(SIGKILL);
  // Wait until the kv client's own view lost the server.
  BOOST_REQUIRE(poll_until(
      [&store] {
        auto v = store.view();
        return v && v->second.servers.empty();
      },
      20s));
  caf::scoped_actor self{*node.sys};
  caf::error err;
  auto t0 = steady::now();
  self->request(store.handle(), 3s, push_atom_v, uint64_t{0},
                std::vector<named_array>{{1, std::vector<float>(4097)}})
      .receive([](uint64_t) {}, [&err](caf::error& x) { err = std::move(x); });
  BOOST_TEST_MESSAGE("a push with no server: " << (err ? describe(err) : "ok")
                                               << " after " << ms_since(t0)
                                               << " ms");
  BOOST_REQUIRE_MESSAGE(err, "a push with no server succeeded");
  // A troupe error that says what to do, from a client that lives on.
  auto v = store.view();
  BOOST_CHECK_MESSAGE(err.category() == caf::atom("troupe") && v,
                      "push: " << describe(err) << "; then view: " << why(v));
}

BOOST_AUTO_TEST_CASE(a_killed_worker_leaves_no_ring_mapped_in_the_server) {
  scheduler_process s{1, 1, {"--server.mode=async"}};
  auto server = start_server(s, "async");
  child_process worker{
      node_args({"--role=worker", "--worker.task=counter", s.flag(),
                 "--server.mode=async", "--worker.steps=100000000",
                 "--worker.keys=2", "--worker.key-floats=4194304"})};
  // Mid-run: 32 MiB of frames went through the server's rings.
  BOOST_REQUIRE_MESSAGE(
      poll_until([&] { return ring_rss_kb(server->pid()) >= 32768; }, 30s),
      "the worker never got going: " << worker.output() << server->output());
  BOOST_CHECK_EQUAL(ring_mappings(std::to_string(server->pid())), 2u);
  worker.signal(SIGKILL);
  BOOST_REQUIRE(worker.wait_exit(10s));
  auto t0 = steady::now();
  auto gone = await_ring_mappings_at_most(0, std::to_string(server->pid()), 5s);
  BOOST_REQUIRE(alive(*server));
  BOOST_TEST_MESSAGE("server rings " << (gone ? "unmapped" : "still mapped")
                                     << " after " << ms_since(t0) << " ms");
  BOOST_CHECK_MESSAGE(gone, "the server still maps the dead worker's rings");
}

namespace {

/// Two async servers (with `server_flags`) and two counter workers on
/// the middleman road; samples the servers' ring mappings and the TCP
/// connections on their road ports while the workers run, checks the sums
/// are exact and returns the ring mappings seen.
size_t run_workers_on_the_middleman(std::vector<std::string> server_flags) {
  scheduler_process s{2, 2, {"--server.mode=async"}};
  std::vector<std::unique_ptr<child_process>> servers;
  servers.push_back(start_server(s, "async", server_flags));
  servers.push_back(start_server(s, "async", server_flags));
  std::vector<std::unique_ptr<child_process>> workers;
  for (int i = 0; i < 2; ++i)
    workers.push_back(std::make_unique<child_process>(node_args(
        {"--role=worker", "--worker.task=counter", s.flag(),
         "--server.mode=async", "--worker.steps=10", "--worker.keys=2",
         "--worker.key-floats=1048576", "--kv.road=middleman"})));
  test_node node{s, "middleman"};
  auto view = node.view_when(
      [](const cluster_view& v) { return v.servers.size() == 2; });
  size_t samples = 0;
  size_t rings = 0;
  size_t conns = 0;
  auto deadline = steady::now() + 120s;
  for (auto& w : workers)
    while (!w->wait_exit(20ms)) {
      BOOST_REQUIRE_MESSAGE(steady::now() < deadline, w->output());
      ++samples;
      for (auto& srv : servers)
        rings += ring_mappings(std::to_string(srv->pid()));
      for (auto& n : view.servers) {
        BOOST_REQUIRE_NE(n.road.port, 0); // the listener is there
        conns += tcp_connections_on(n.road.port);
      }
    }
  BOOST_TEST_MESSAGE(samples << " samples of the servers while running");
  BOOST_CHECK_EQUAL(conns, 0u); // no worker on a road; replicas use shm
  for (auto& w : workers) {
    auto rc = w->wait_exit(1s);
    BOOST_REQUIRE(rc);
    BOOST_CHECK_MESSAGE(*rc == 0, w->output());
    auto line = w->wait_for_line("final value", 1s);
    BOOST_REQUIRE_MESSAGE(line, w->output());
    BOOST_CHECK_MESSAGE(line->find("= 20: sums exact") != std::string::npos,
                        *line);
  }
  for (auto& srv : servers)
    BOOST_CHECK(alive(*srv));
  return rings;
}

} // namespace

BOOST_AUTO_TEST_CASE(the_middleman_road_sums_exactly_with_the_fast_road_off) {
  // Workers and replicas both on CAF: no ring anywhere.
  BOOST_CHECK_EQUAL(
      run_workers_on_the_middleman({"--server.replica-road=middleman"}), 0u);
}

BOOST_AUTO_TEST_CASE(replicas_take_the_fast_road_while_workers_use_caf) {
  // The servers back each other up over shared memory: each maps the
  // rings of the link it opened and of the one it accepted.
  BOOST_CHECK_GT(run_workers_on_the_middleman({}), 0u);
}

BOOST_AUTO_TEST_SUITE_END()
