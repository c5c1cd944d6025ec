// troupe-node workers on device actors (issue 38), on the CPU backend
// every CI run has: --server.mode=sync_device with two CPU "devices" per
// worker sums each batch on the node (one push per worker) and trains the
// model plain sync trains; a GPU that is not there is one clear error.
#define BOOST_TEST_MODULE device_cluster_tests
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "actors/base/exit_codes.hpp"
#include "tests/system/nodes.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// One epoch on a server and two workers in `mode` with `worker_flags`;
/// rank 0's final accuracy, and what rank 0 said.
double one_epoch(const std::string& mode,
                 const std::vector<std::string>& worker_flags,
                 std::string* said = nullptr) {
  scheduler_process s{1, 2, {"--server.mode=" + mode}};
  auto srv = start_server(s, mode,
                          {"--optimizer.name=momentum", "--optimizer.lr=0.02"});
  std::vector<std::string> flags{"--role=worker", s.flag(),
                                 "--server.mode=" + mode, "--train.epochs=1",
                                 "--train.eval-samples=2000"};
  flags.insert(flags.end(), worker_flags.begin(), worker_flags.end());
  child_process w0{node_args(flags)}, w1{node_args(flags)};
  for (auto* w : {&w0, &w1}) {
    auto rc = w->wait_exit(150s);
    BOOST_REQUIRE_MESSAGE(rc, "a worker did not finish: " << w->output());
    BOOST_REQUIRE_MESSAGE(*rc == 0, w->output());
  }
  if (said)
    *said = w0.output() + w1.output();
  auto acc = final_accuracy(
      w0.output().find("final test accuracy") != std::string::npos ? w0 : w1);
  BOOST_TEST_MESSAGE(mode << " "
                          << (worker_flags.empty() ? "" : worker_flags[0])
                          << ": final test accuracy " << acc);
  return acc;
}

} // namespace

BOOST_AUTO_TEST_SUITE(device_cluster_tests)

BOOST_AUTO_TEST_CASE(two_cpu_devices_per_worker_train_as_plain_sync_does) {
  // Each worker shares its batch of 64 between two device actors, whose
  // communicator sums their shares of the mean gradient; the push is the
  // batch's mean, as plain sync computes it, up to float rounding.
  std::string said;
  auto on_devices = one_epoch("sync_device", {"--device=cpu,cpu"}, &said);
  auto plain = one_epoch("sync", {"--device=cpu"});
  BOOST_CHECK_MESSAGE(
      said.find("math: 2 devices (cpu (") != std::string::npos &&
          said.find("gradients summed by a CPU group") != std::string::npos,
      said);
  BOOST_CHECK_GT(on_devices, 0.75);
  BOOST_CHECK_LE(std::abs(on_devices - plain), 0.005);
}

BOOST_AUTO_TEST_CASE(a_gpu_that_is_not_there_is_one_clear_error) {
  // No machine has a hundredth GPU: the worker names it and stops before
  // it joins, as for any bad configuration (its agent does not restart it).
  scheduler_process s{1, 1};
  child_process w{node_args({"--role=worker", s.flag(), "--device=cuda:99"})};
  auto rc = w.wait_exit(60s);
  BOOST_REQUIRE_MESSAGE(rc, w.output());
  BOOST_CHECK_EQUAL(*rc, exit_bad_config);
  BOOST_CHECK_MESSAGE(w.output().find("*** --device=cuda:99: cuda:99: ") !=
                          std::string::npos,
                      w.output());
}

BOOST_AUTO_TEST_CASE(a_stage_on_a_gpu_that_is_not_there_exits_with_its_line) {
  // A pipeline stage opens its layers on its device before it starts: a
  // missing GPU is one line and exit 2, as for a worker.
  scheduler_process s{0, 2};
  child_process st{node_args({"--role=worker", s.flag(), "--worker.task=stage",
                              "--optimizer.name=sgd", "--pipeline.stages=2",
                              "--device=cuda:99"})};
  auto rc = st.wait_exit(90s);
  BOOST_REQUIRE_MESSAGE(rc, st.output());
  BOOST_CHECK_EQUAL(*rc, exit_bad_config);
  BOOST_CHECK_MESSAGE(
      st.output().find("*** stage failed: starting: device_failed: "
                       "--device=cuda:99: cuda:99: ") != std::string::npos,
      st.output());
}

BOOST_AUTO_TEST_SUITE_END()
