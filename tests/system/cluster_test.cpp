// Real troupe-node processes on loopback: a whole cluster pushing and
// pulling in each mode, and dead or hung processes leaving the view.
#define BOOST_TEST_MODULE cluster_tests
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/base/machine_id.hpp"
#include "actors/kv/kv.hpp"
#include "actors/node/node_config.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"
#include "tests/silent_listener.hpp"
#include "tests/system/nodes.hpp"
#include "tests/system/scheduler_client.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using namespace troupe::test;

namespace {

/// The test's own CAF node, watching the scheduler's view.
struct watcher {
  node_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::unique_ptr<caf::scoped_actor> self;
  caf::actor sched;
  cluster_view view;

  explicit watcher(uint16_t port) {
    cfg.load<caf::io::middleman>();
    cfg.set("middleman.heartbeat-interval", caf::timespan{100ms});
    cfg.set("middleman.connection-timeout", caf::timespan{1s});
    use_test_tls(cfg);
    BOOST_REQUIRE(!cfg.finish());
    sys = std::make_unique<caf::actor_system>(cfg);
    self = std::make_unique<caf::scoped_actor>(*sys);
    auto s = connect_scheduler(*sys, "127.0.0.1", port, 10000);
    BOOST_REQUIRE(s);
    sched = *s;
    (*self)
        ->request(sched, 10s, watch_atom_v)
        .receive([this](const frame& f) { BOOST_REQUIRE(!decode(f, view)); },
                 [](const caf::error& err) {
                   BOOST_FAIL("watch failed: " << describe(err));
                 });
  }

  /// Waits (bounded) for a view that satisfies `pred`.
  template <class Pred>
  bool wait_for(Pred pred, std::chrono::seconds limit = 20s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!pred(view)) {
      auto left = deadline - std::chrono::steady_clock::now();
      if (left <= 0s)
        return false;
      (*self)->receive(
          [this](view_atom, const frame& f) {
            cluster_view v;
            if (!decode(f, v) && v.epoch > view.epoch)
              view = std::move(v);
          },
          caf::after(left) >> [] {});
    }
    return true;
  }
};

bool has_pid(const std::vector<node_info>& nodes, pid_t pid) {
  return rank_of(nodes, pid).has_value();
}

} // namespace

BOOST_AUTO_TEST_SUITE(cluster_tests)

BOOST_AUTO_TEST_CASE(a_cluster_of_processes_sums_pushes_exactly_in_each_mode) {
  for (std::string mode : {"sync", "ssp:1", "async"}) {
    BOOST_TEST_MESSAGE("mode " << mode);
    scheduler_process s{2, 2, {"--server.mode=" + mode}};
    auto s0 = start_server(s, mode);
    auto s1 = start_server(s, mode);
    auto w0 = start_counter(s, 15);
    auto w1 = start_counter(s, 15);
    for (auto* w : {w0.get(), w1.get()}) {
      auto rc = w->wait_exit(60s);
      BOOST_REQUIRE_MESSAGE(rc, "worker did not finish: " << w->output());
      BOOST_CHECK_MESSAGE(*rc == 0, mode << ": " << w->output());
      auto line = w->wait_for_line("final value", 1s);
      BOOST_REQUIRE_MESSAGE(line, w->output());
      BOOST_CHECK_MESSAGE(line->find("= 30: sums exact") != std::string::npos,
                          *line);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_killed_server_and_a_killed_worker_leave_the_view) {
  scheduler_process s{2, 1};
  auto s0 = start_server(s, "sync");
  auto s1 = start_server(s, "sync");
  auto w0 = start_counter(s, 100000000);
  watcher obs{s.port};
  BOOST_REQUIRE(obs.wait_for([](const cluster_view& v) {
    return v.servers.size() == 2 && v.workers.size() == 1 && !v.keys.empty();
  }));
  auto killed_at = std::chrono::steady_clock::now();
  s1->signal(SIGKILL);
  auto victim = s1->pid();
  BOOST_REQUIRE(obs.wait_for([victim](const cluster_view& v) {
    return v.servers.size() == 1 && !has_pid(v.servers, victim);
  }));
  BOOST_TEST_MESSAGE("killed server left the view after "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - killed_at)
                            .count()
                     << " ms");
  // Its slices now live on the survivor: the view stays valid.
  BOOST_CHECK(!validate(obs.view));
  for (auto& p : obs.view.placement)
    BOOST_CHECK_EQUAL(p.server, obs.view.servers.front().rank);
  w0->signal(SIGKILL);
  BOOST_REQUIRE(
      obs.wait_for([](const cluster_view& v) { return v.workers.empty(); }));
}

BOOST_AUTO_TEST_CASE(a_barrier_passed_without_a_dead_worker_says_so) {
  // A worker that joined and died before the servers came did not hold the
  // start barrier (a dead node never does), and the other trained alone,
  // without a word.
  scheduler_process s{1, 2};
  watcher obs{s.port};
  auto w0 = start_counter(s, 200);
  auto w1 = start_counter(s, 200);
  BOOST_REQUIRE(obs.wait_for(
      [](const cluster_view& v) { return v.workers.size() == 2; }));
  w1->signal(SIGKILL);
  BOOST_REQUIRE(obs.wait_for(
      [](const cluster_view& v) { return v.workers.size() == 1; }));
  auto s0 = start_server(s, "sync");
  auto rc = w0->wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, w0->output());
  BOOST_CHECK_MESSAGE(s.proc->wait_for_line("barrier 'start' passed with 1 of"
                                            " 2 workers (--cluster.workers=2):"
                                            " the others died after they"
                                            " joined",
                                            10s),
                      s.proc->output());
}

BOOST_AUTO_TEST_CASE(
    a_hung_worker_leaves_the_view_after_the_heartbeat_timeout) {
  scheduler_process s{1, 1, {"--server.mode=async"}};
  auto s0 = start_server(s, "async");
  auto w0 = start_counter(s, 100000000);
  watcher obs{s.port};
  BOOST_REQUIRE(obs.wait_for(
      [](const cluster_view& v) { return v.workers.size() == 1; }));
  auto stopped_at = std::chrono::steady_clock::now();
  w0->signal(SIGSTOP);
  BOOST_REQUIRE(obs.wait_for(
      [](const cluster_view& v) { return v.workers.empty(); }, 15s));
  BOOST_TEST_MESSAGE("hung worker left the view after "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - stopped_at)
                            .count()
                     << " ms");
  w0->signal(SIGCONT);
}

BOOST_AUTO_TEST_CASE(a_worker_restarted_after_another_finished_takes_its_rank) {
  // async: the survivor runs on alone and finishes before the dead worker
  // is replaced. The replacement must take the dead worker's rank (its
  // clock, its share) and not the finished one's: with the finished one's
  // it would be done at once and the dead worker's clocks never pushed.
  constexpr uint32_t steps = 400;
  scheduler_process s{1, 2, {"--server.mode=async"}};
  auto s0 = start_server(s, "async");
  std::vector<std::string> small{"--worker.key-floats=2000"};
  watcher obs{s.port};
  // Worker 0 declares the keys first and so initialises them: the victim
  // must not be the one the others' init waits for.
  auto w0 = start_counter(s, steps, small);
  BOOST_REQUIRE(obs.wait_for([](const cluster_view& v) {
    return v.workers.size() == 1 && !v.placement.empty();
  }));
  auto w1 = start_counter(s, steps, small);
  BOOST_REQUIRE(obs.wait_for(
      [](const cluster_view& v) { return v.workers.size() == 2; }));
  auto dead_rank = rank_of(obs.view.workers, w1->pid());
  BOOST_REQUIRE(dead_rank);
  BOOST_REQUIRE_EQUAL(*dead_rank, 1u);
  auto victim = w1->pid();
  w1->signal(SIGKILL);
  BOOST_REQUIRE(obs.wait_for([victim](const cluster_view& v) {
    return v.workers.size() == 1 && !has_pid(v.workers, victim);
  }));
  // The survivor ends alone: its own sum lacks the dead worker's clocks.
  auto rc = w0->wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, "survivor did not finish: " << w0->output());
  BOOST_REQUIRE(
      obs.wait_for([](const cluster_view& v) { return v.workers.empty(); }));
  // The view names the rank that did its work and left (a pipeline
  // replica above learns from it that the one below said its final line),
  // and not the dead one's.
  BOOST_CHECK_MESSAGE((obs.view.finished == std::vector<uint32_t>{0}),
                      obs.view.finished.size() << " ranks finished");
  auto w2 = start_counter(s, steps, small);
  rc = w2->wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, "replacement did not finish: " << w2->output());
  BOOST_CHECK_MESSAGE(*rc == 0, w2->output());
  auto line = w2->wait_for_line("final value", 1s);
  BOOST_REQUIRE_MESSAGE(line, w2->output());
  BOOST_CHECK_MESSAGE(
      line->rfind("worker " + std::to_string(*dead_rank) + ":", 0) == 0, *line);
  BOOST_CHECK_MESSAGE(line->find("= " + std::to_string(2 * steps) +
                                 ": sums exact") != std::string::npos,
                      *line);
  BOOST_CHECK(obs.wait_for([](const cluster_view& v) {
    return v.workers.empty() && v.finished == std::vector<uint32_t>{0, 1};
  }));
}

BOOST_AUTO_TEST_CASE(bad_flags_get_one_clear_line_and_a_nonzero_exit) {
  check_refused({{{node_bin, "--role=chief"}, "--role must be"},
                 {{node_bin, "--role=server", "--server.mode=ssp:x"},
                  "--server.mode must be"},
                 {{node_bin, "--role=worker", "--kv.request-timeout-ms=0"},
                  "--kv.request-timeout-ms"},
                 {{node_bin, "--role=server", "--road.frame-spin-us=20000"},
                  "--road.frame-spin-us must be 0..10000"},
                 {{node_bin, "--role=server", "--no-such-flag=1"}, "***"}});
}

BOOST_AUTO_TEST_CASE(a_bad_ini_file_gets_one_line_naming_file_line_and_key) {
  // CAF 0.17 alone would run on the defaults, silently.
  temp_dir dir;
  auto ini = dir / "bad.ini";
  std::ofstream{ini} << "[server]\n; the mode\nmdoe=\"async\"\n";
  child_process p{{node_bin, "--role=server", "--config-file=" + ini}};
  auto rc = p.wait_exit(20s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_EQUAL(*rc, 2);
  BOOST_CHECK_MESSAGE(p.output().find(ini +
                                      ":3: unknown key 'mdoe' in "
                                      "[server] (did you mean 'mode'?)") !=
                          std::string::npos,
                      p.output());
}

BOOST_AUTO_TEST_CASE(the_benchmarks_refuse_bad_flags_with_one_clear_line) {
  const std::string tta = std::string{TROUPE_BUILD_DIR} + "/time_to_accuracy",
                    kvt = std::string{TROUPE_BUILD_DIR} + "/kv_throughput";
  check_refused({{{tta, "--node-arg=helper-threads=0"},
                  "--node-arg must be a troupe-node flag"},
                 {{tta, "--epochs=0"}, "--epochs must be 1..100"},
                 {{tta, "--workers=1,x"}, "--workers must list counts"},
                 {{tta, "--no-such-flag"}, "unknown flag '--no-such-flag'"},
                 {{kvt, "--road=bogus"}, "--road must be"},
                 {{kvt, "--rows=some"}, "--rows must be all, large or small"},
                 {{kvt, "--max-message-bytes=abc"},
                  "--max-message-bytes must be 65536..1073741824"},
                 {{kvt, "--max-message-bytes=4096"},
                  "--max-message-bytes must be 65536..1073741824"},
                 {{kvt, "--road-frame-spin-us=10001"},
                  "--road-frame-spin-us must be 0..10000"},
                 // A folder passed at 2b8c60c, and every run failed with
                 // exit 127 and no word why.
                 {{tta, "--node=" TROUPE_BUILD_DIR},
                  "--node: no executable file at '" TROUPE_BUILD_DIR "'"},
                 {{kvt, "--node=" TROUPE_SOURCE_DIR "/README.md"},
                  "--node: no executable file at"}});
}

BOOST_AUTO_TEST_CASE(a_port_that_cannot_be_listened_on_is_named) {
  // CAF says "tcp socket creation failed" alone; the line names the port
  // and the two causes. A scheduler's port held by a live scheduler, and
  // an address that is not this machine's.
  scheduler_process s{1, 1};
  auto port = std::to_string(s.port);
  check_refused(
      {{node_args({"--role=scheduler", "--scheduler-port=" + port}),
        "cannot listen on 127.0.0.1:" + port +
            ": another process holds the port, or the host is no address of"
            " this machine"},
       // An address of no interface here: said before anything, exit 2.
       {node_args({"--role=scheduler", "--scheduler-port=0",
                   "--scheduler-host=192.0.2.1"}),
        "--scheduler-host=192.0.2.1: cannot listen there: Cannot assign"
        " requested address (give an address of this machine",
        2},
       {node_args({"--role=server", "--scheduler-port=1", "--host=192.0.2.7"}),
        "--host=192.0.2.7: cannot listen there: Cannot assign", 2},
       // A road port asked for and taken: it fell back to CAF with a
       // warning.
       {node_args({"--role=server", s.flag(), "--server.road-port=" + port}),
        "--server.road-port=" + port +
            ": cannot listen on 127.0.0.1: Address already in use",
        2}});
}

BOOST_AUTO_TEST_CASE(a_worker_without_a_scheduler_gives_up_clearly) {
  // A port nobody listens on: a scheduler that just exited frees one.
  uint16_t port;
  {
    scheduler_process s{1, 1};
    port = s.port;
    s.proc->signal(SIGKILL);
    BOOST_REQUIRE(s.proc->wait_exit(10s));
  }
  child_process w{
      node_args({"--role=worker", "--scheduler-port=" + std::to_string(port),
                 "--kv.request-timeout-ms=1000"})};
  auto rc = w.wait_exit(30s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_NE(*rc, 0);
  BOOST_CHECK_MESSAGE(w.output().find("no scheduler at 127.0.0.1:") !=
                          std::string::npos,
                      w.output());
}

BOOST_AUTO_TEST_CASE(
    a_worker_whose_servers_never_come_says_what_it_waited_for) {
  // The scheduler answers declares once --cluster.servers servers have
  // joined; none starts. The worker fails in one line naming the request
  // and the wait, not with CAF's bare request_timeout.
  scheduler_process s{1, 1};
  auto w = start_counter(s, 10, {"--kv.request-timeout-ms=1000"});
  auto rc = w->wait_exit(30s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_NE(*rc, 0);
  auto& out = w->output();
  BOOST_CHECK_MESSAGE(out.find("declare (the scheduler answers once every "
                               "expected server has joined): no answer from "
                               "the scheduler within 1000 ms") !=
                          std::string::npos,
                      out);
  BOOST_CHECK_MESSAGE(out.find("request_timeout") == std::string::npos, out);
}

BOOST_AUTO_TEST_CASE(a_worker_gives_up_on_a_server_that_never_speaks) {
  // A "server" that accepts and never speaks. With heartbeats on (every
  // troupe-node), CAF fails the connection's handshake; the worker tries
  // again, fails its init in one line and exits. (Without heartbeats the
  // connect would stay pending, and CAF 0.17's actor system would never
  // end: replica_link_test settles it before it ends.)
  silent_listener silent;
  scheduler_process s{1, 1};
  scheduler_client c{s.port};
  caf::scoped_actor fake{*c.sys}; // registers as the server, stays quiet
  register_request req{
      role::server, "127.0.0.1", silent.port, 1, {0, machine_id(), ""}, 0,
      "",           "",          ""};
  fake->request(c.sched, 10s, register_atom_v, encode(req))
      .receive([](const frame&) {},
               [](caf::error& err) { BOOST_FAIL(describe(err)); });
  auto w = start_counter(s, 10, {"--kv.request-timeout-ms=1000"});
  BOOST_REQUIRE_MESSAGE(silent.await_peer(20s), w->output());
  auto rc = w->wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, "the worker did not exit: " << w->output());
  BOOST_CHECK_NE(*rc, 0);
  BOOST_CHECK_MESSAGE(w->output().find("*** init failed") != std::string::npos,
                      w->output());
}

BOOST_AUTO_TEST_CASE(a_rendezvous_says_what_it_waits_for) {
  // At bc0f027 a job one worker short was silent until the worker's
  // barrier timed out. Now the scheduler says every few seconds for whom
  // its barriers wait (kv_membership_test checks the worker's own line).
  scheduler_process s{1, 2};
  auto srv = start_server(s, "sync");
  auto w0 = start_counter(s, 10);
  auto line = s.proc->wait_for_line("waiting for workers: 1 of 2 joined", 30s);
  BOOST_REQUIRE_MESSAGE(line, s.proc->output());
  BOOST_CHECK_MESSAGE(line->find("--cluster.workers=2") != std::string::npos &&
                          line->find("barrier 'start'") != std::string::npos,
                      *line);
  auto w1 = start_counter(s, 10);
  for (auto* w : {w0.get(), w1.get()}) {
    auto done = w->wait_exit(60s);
    BOOST_REQUIRE_MESSAGE(done, w->output());
    BOOST_CHECK_MESSAGE(*done == 0, w->output());
  }
}

BOOST_AUTO_TEST_SUITE_END()
