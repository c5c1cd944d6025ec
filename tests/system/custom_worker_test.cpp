// The custom worker example (examples/custom_worker) built and run as real
// processes against a troupe-node cluster: it must converge.
#define BOOST_TEST_MODULE custom_worker_tests
#include <boost/test/unit_test.hpp>

#include "tests/system/nodes.hpp"

using namespace troupe::test;

BOOST_AUTO_TEST_SUITE(custom_worker_tests)

BOOST_AUTO_TEST_CASE(the_linear_regression_example_converges_on_two_workers) {
  for (std::string mode : {"sync", "async"}) {
    BOOST_TEST_MESSAGE("mode " << mode);
    scheduler_process s{1, 2};
    auto srv =
        start_server(s, mode, {"--optimizer.name=sgd", "--optimizer.lr=0.1"});
    std::vector<std::unique_ptr<child_process>> workers;
    for (int i = 0; i < 2; ++i)
      workers.push_back(std::make_unique<child_process>(node_args(
          {s.flag(), "--worker.steps=150"}, true, TROUPE_EXAMPLE_BIN)));
    for (auto& w : workers) {
      auto rc = w->wait_exit(120s);
      BOOST_REQUIRE_MESSAGE(rc, "example did not finish: " << w->output());
      BOOST_CHECK_MESSAGE(*rc == 0, w->output());
      auto line = w->wait_for_line("|w - w_true|", 1s);
      BOOST_REQUIRE_MESSAGE(line, w->output());
      BOOST_CHECK_MESSAGE(line->find(": converged") != std::string::npos,
                          *line);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
