// The custom worker example (examples/custom_worker) built and run as real
// processes against a troupe-node cluster: it must converge; it reads its
// options as troupe-node does (a misspelt one named, --metrics.port
// served).
#define BOOST_TEST_MODULE custom_worker_tests
#include <boost/test/unit_test.hpp>

#include "tests/system/http_client.hpp"
#include "tests/system/nodes.hpp"

using namespace troupe::test;

BOOST_AUTO_TEST_SUITE(custom_worker_tests)

BOOST_AUTO_TEST_CASE(the_linear_regression_example_converges_on_two_workers) {
  for (std::string mode : {"sync", "async"}) {
    BOOST_TEST_MESSAGE("mode " << mode);
    scheduler_process s{1, 2, {"--server.mode=" + mode}};
    auto srv =
        start_server(s, mode, {"--optimizer.name=sgd", "--optimizer.lr=0.1"});
    std::vector<std::unique_ptr<child_process>> workers;
    for (int i = 0; i < 2; ++i)
      workers.push_back(std::make_unique<child_process>(
          node_args({s.flag(), "--worker.steps=150", "--server.mode=" + mode},
                    true, TROUPE_EXAMPLE_BIN)));
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

BOOST_AUTO_TEST_CASE(its_options_are_read_as_troupe_nodes_are) {
  // A misspelt option is named with the nearest one, before it joins.
  child_process typo{node_args({"--scheduler-port=1", "--worker.step=5"}, true,
                               TROUPE_EXAMPLE_BIN)};
  auto rc = typo.wait_exit(30s);
  BOOST_REQUIRE_MESSAGE(rc, typo.output());
  BOOST_CHECK_EQUAL(*rc, 2);
  BOOST_CHECK_MESSAGE(typo.output().find("did you mean --worker.steps") !=
                          std::string::npos,
                      typo.output());
  // --metrics.port is served (it was accepted and ignored): the worker
  // waits for its server meanwhile.
  scheduler_process s{1, 1};
  auto port = free_ports(0);
  child_process w{node_args({s.flag(), "--worker.steps=150",
                             "--metrics.port=" + std::to_string(port)},
                            true, TROUPE_EXAMPLE_BIN)};
  std::optional<std::string> text;
  for (auto until = std::chrono::steady_clock::now() + 20s;
       !text && std::chrono::steady_clock::now() < until;)
    if (!(text = scrape(port)))
      BOOST_REQUIRE_MESSAGE(!w.wait_exit(50ms), w.output());
  BOOST_REQUIRE_MESSAGE(text, "no metrics: " << w.output());
  BOOST_CHECK_MESSAGE(text->find("troupe_node_info{role=\"worker\"} 1") !=
                          std::string::npos,
                      *text);
  auto srv =
      start_server(s, "sync", {"--optimizer.name=sgd", "--optimizer.lr=0.1"});
  auto done = w.wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(done, w.output());
  BOOST_CHECK_MESSAGE(*done == 0, w.output());
}

BOOST_AUTO_TEST_SUITE_END()
