// Lost and doubled messages with real processes: workers drop and
// duplicate push frames on purpose (--fault.drop-pushes,
// --fault.duplicate-pushes); unanswered requests are sent again
// (--kv.resend-ms) and servers drop duplicates by (worker, clock, part),
// so every push is applied exactly once in every mode.
#define BOOST_TEST_MODULE message_faults_tests
#include <boost/test/unit_test.hpp>

#include <memory>

#include "tests/system/nodes.hpp"

using namespace troupe::test;

BOOST_AUTO_TEST_SUITE(message_faults_tests)

BOOST_AUTO_TEST_CASE(lost_and_doubled_pushes_are_applied_exactly_once) {
  for (std::string mode : {"sync", "async", "ssp:1"}) {
    BOOST_TEST_MESSAGE("mode " << mode);
    scheduler_process s{2, 2, {"--server.mode=" + mode}};
    auto s0 = start_server(s, mode);
    auto s1 = start_server(s, mode);
    std::vector<std::unique_ptr<child_process>> workers;
    for (int i = 0; i < 2; ++i)
      workers.push_back(start_counter(
          s, 300,
          {"--fault.drop-pushes=0.05", "--fault.duplicate-pushes=0.1",
           "--fault.seed=" + std::to_string(7 + i), "--kv.resend-ms=50"}));
    for (auto& w : workers) {
      auto rc = w->wait_exit(120s);
      BOOST_REQUIRE_MESSAGE(rc, "worker did not finish: " << w->output());
      BOOST_CHECK_MESSAGE(*rc == 0, mode << ": " << w->output());
      auto line = w->wait_for_line("final value", 1s);
      BOOST_REQUIRE_MESSAGE(line, w->output());
      BOOST_CHECK_MESSAGE(line->find("= 600: sums exact") != std::string::npos,
                          mode << ": " << *line);
    }
  }
}

BOOST_AUTO_TEST_CASE(dropping_pushes_without_resending_is_refused) {
  child_process p{node_args({"--role=worker", "--fault.drop-pushes=0.1"})};
  auto rc = p.wait_exit(20s);
  BOOST_REQUIRE(rc);
  BOOST_CHECK_NE(*rc, 0);
  BOOST_CHECK_MESSAGE(p.output().find("--kv.resend-ms") != std::string::npos,
                      p.output());
}

BOOST_AUTO_TEST_SUITE_END()
