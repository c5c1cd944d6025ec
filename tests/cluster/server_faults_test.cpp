// Server crashes with real processes: chain replication keeps every
// acknowledged update. Workers add 1 per clock to every element; a server
// is SIGKILLed while their pushes are in flight; its backup is promoted,
// workers resend what was not acknowledged, duplicates are dropped, and
// the final value equals clocks x workers exactly in every mode.
#define BOOST_TEST_MODULE server_faults_tests
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include <algorithm>
#include <memory>

#include "tests/cluster/nodes.hpp"
#include "tests/cluster/scheduler_client.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

std::unique_ptr<child_process> start_counter(const scheduler_process& s,
                                             uint32_t steps,
                                             std::vector<std::string> extra) {
  extra.insert(extra.begin(),
               {"--role=worker", "--worker.task=counter", s.flag(),
                "--worker.steps=" + std::to_string(steps), "--worker.keys=3",
                "--worker.key-floats=40000"});
  return std::make_unique<child_process>(node_args(std::move(extra)));
}

bool is(const event_record& e, const char* kind) {
  return e.kind == kind;
}

} // namespace

BOOST_AUTO_TEST_SUITE(server_faults_tests)

BOOST_AUTO_TEST_CASE(a_server_killed_mid_push_loses_no_acknowledged_update) {
  for (std::string mode : {"sync", "async", "ssp:1"}) {
    for (std::string road : {"auto", "middleman"}) {
      BOOST_TEST_MESSAGE("mode " << mode << ", road " << road);
      scheduler_process s{2, 2};
      scheduler_client sched{s.port};
      std::vector<std::string> flags{"--kv.road=" + road};
      auto s0 = start_server(s, mode, flags);
      auto s1 = start_server(s, mode, flags);
      auto w0 = start_counter(s, 1500, flags);
      auto w1 = start_counter(s, 1500, flags);
      // Pushes flow once the keys are placed; kill a server holding some.
      BOOST_REQUIRE(sched.wait_for_view(
          [](const cluster_view& v) { return !v.placement.empty(); }));
      auto view = sched.view();
      auto victim = std::find_if(
          view.servers.begin(), view.servers.end(),
          [&view](const node_info& n) {
            return std::any_of(
                view.placement.begin(), view.placement.end(),
                [&n](const slice_place& p) { return p.server == n.rank; });
          });
      BOOST_REQUIRE(victim != view.servers.end());
      auto& proc = victim->pid == uint32_t(s0->pid()) ? s0 : s1;
      proc->signal(SIGKILL);
      for (auto* w : {w0.get(), w1.get()}) {
        auto rc = w->wait_exit(120s);
        BOOST_REQUIRE_MESSAGE(rc, "worker did not finish: " << w->output());
        BOOST_CHECK_MESSAGE(*rc == 0, mode << ": " << w->output());
        // Every element: 1500 clocks x 2 workers, each added exactly once.
        auto line = w->wait_for_line("final value", 1s);
        BOOST_REQUIRE_MESSAGE(line, w->output());
        BOOST_CHECK_MESSAGE(line->find("= 3000: sums exact") !=
                                std::string::npos,
                            mode << " " << road << ": " << *line);
      }
      auto evs = sched.events();
      BOOST_CHECK_MESSAGE(std::any_of(evs.begin(), evs.end(),
                                      [&victim](const event_record& e) {
                                        return is(e, "crashed") &&
                                               e.pid == victim->pid;
                                      }),
                          dump(evs));
      BOOST_CHECK_MESSAGE(
          std::any_of(evs.begin(), evs.end(),
                      [](const event_record& e) { return is(e, "promoted"); }),
          dump(evs));
    }
  }
}

BOOST_AUTO_TEST_CASE(without_replication_a_dead_servers_slices_are_lost) {
  // The control: --server.replicas=0, the same kill, and the workers
  // cannot finish (their slices have no values anywhere). This shows the
  // test above passes because of the replicas.
  scheduler_process s{2, 1};
  scheduler_client sched{s.port};
  std::vector<std::string> flags{"--server.replicas=0",
                                 "--kv.request-timeout-ms=2000"};
  auto s0 = start_server(s, "async", flags);
  auto s1 = start_server(s, "async", flags);
  auto w0 = start_counter(s, 100000000, flags);
  BOOST_REQUIRE(sched.wait_for_view(
      [](const cluster_view& v) { return !v.placement.empty(); }));
  s1->signal(SIGKILL);
  auto rc = w0->wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, w0->output());
  BOOST_CHECK_NE(*rc, 0);
  BOOST_CHECK_MESSAGE(w0->output().find("*** ") != std::string::npos,
                      w0->output());
}

BOOST_AUTO_TEST_SUITE_END()
