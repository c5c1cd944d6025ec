// The pipeline example end to end: examples/pipeline/run.sh trains a
// deeper MLP cut into 3 stage processes (1f1b) to 0.88 test accuracy with a
// line per epoch and "final test accuracy" last; with stage 1 killed in the
// middle of a mini-batch it ends at the same accuracy; with
// --pipeline.replicas=2 it runs 2 x 3 stages and 2 servers. Times are
// printed, never asserted.
#define BOOST_TEST_MODULE pipeline_example_tests
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/system/child_process.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

/// The example's output with `flags`, once it exited 0.
std::string run_example(const std::string& name,
                        std::vector<std::string> flags) {
  ::setenv("TROUPE_BUILD", TROUPE_BUILD_DIR, 1);
  const std::string logs = TROUPE_BUILD_DIR "/pipeline-example-" + name;
  std::filesystem::remove_all(logs); // its checkpoints too
  ::setenv("TROUPE_LOGS", logs.c_str(), 1);
  ::setenv("TROUPE_CERTS", TROUPE_BUILD_DIR "/test-certs", 1); // TLS is on
  flags.insert(flags.begin(),
               {"/bin/bash", TROUPE_SOURCE_DIR "/examples/pipeline/run.sh"});
  child_process p{flags};
  auto rc = p.wait_exit(280s);
  BOOST_REQUIRE_MESSAGE(rc, "the example did not finish: " << p.output());
  BOOST_REQUIRE_MESSAGE(*rc == 0, p.output());
  BOOST_TEST_MESSAGE(p.output());
  return p.output();
}

/// The figure of the last line, which must be "final test accuracy: X".
std::string final_line(const std::string& out) {
  auto end = out.find_last_not_of('\n');
  BOOST_REQUIRE(end != std::string::npos);
  auto begin = out.rfind('\n', end);
  auto last =
      out.substr(begin == std::string::npos ? 0 : begin + 1,
                 end + 1 - (begin == std::string::npos ? 0 : begin + 1));
  std::smatch m;
  BOOST_REQUIRE_MESSAGE(
      std::regex_match(last, m,
                       std::regex{"final test accuracy: (0\\.[0-9]{4})"}),
      "last line: " << last);
  return m[1];
}

size_t epoch_lines(const std::string& out) {
  std::regex line{"\nepoch [0-9]+/[0-9]+: train loss"};
  return std::distance(std::sregex_iterator{out.begin(), out.end(), line},
                       std::sregex_iterator{});
}

} // namespace

BOOST_AUTO_TEST_CASE(a_size_that_is_no_count_is_refused_before_anything_runs) {
  // The script sizes the cluster from these: at 2b8c60c "two" died in
  // bash, and "08" or "1.5" started a scheduler without its settings.
  ::setenv("TROUPE_BUILD", TROUPE_BUILD_DIR, 1);
  const std::string logs = TROUPE_BUILD_DIR "/pipeline-example-bad";
  std::filesystem::remove_all(logs);
  ::setenv("TROUPE_LOGS", logs.c_str(), 1);
  for (std::string flag : {"--pipeline.replicas=two", "--pipeline.replicas=08",
                           "--pipeline.stages=1.5", "--pipeline.stages="}) {
    child_process p{
        {"/bin/bash", TROUPE_SOURCE_DIR "/examples/pipeline/run.sh", flag}};
    auto rc = p.wait_exit(30s);
    BOOST_REQUIRE_MESSAGE(rc, p.output());
    BOOST_CHECK_EQUAL(*rc, 2);
    auto name = flag.substr(0, flag.find('='));
    BOOST_CHECK_MESSAGE(
        p.output().find("*** " + name + " must be a whole number, got '") !=
            std::string::npos,
        p.output());
  }
  BOOST_CHECK(!std::filesystem::exists(logs)); // nothing began
}

BOOST_AUTO_TEST_CASE(three_stages_reach_the_target_and_survive_a_kill) {
  auto plain = run_example("plain", {});
  auto acc = final_line(plain);
  BOOST_TEST_MESSAGE("final test accuracy " << acc);
  BOOST_CHECK_GE(std::stod(acc), 0.88);
  BOOST_CHECK_EQUAL(epoch_lines(plain), 10u);
  // Stage 1 kills its process in the middle of mini-batch 4321 (of 9370):
  // the agent restarts it, the stages start again from their checkpoint of
  // 4300, and the run ends where the plain one did.
  auto killed = run_example("killed", {"--pipeline.fault-kill=1@4321"});
  std::smatch m;
  BOOST_REQUIRE_MESSAGE(
      std::regex_search(killed, m,
                        std::regex{"resuming at mini-batch 4300, ([0-9]+) ms"
                                   " after a stage left"}),
      killed);
  BOOST_TEST_MESSAGE("resumed " << m[1] << " ms after the stage left");
  BOOST_CHECK_EQUAL(final_line(killed), acc);
}

BOOST_AUTO_TEST_CASE(two_replicas_of_three_stages_with_two_servers) {
  auto out =
      run_example("hybrid", {"--pipeline.replicas=2", "--train.epochs=2"});
  auto acc = final_line(out);
  BOOST_TEST_MESSAGE("final test accuracy " << acc << " after 2 epochs");
  BOOST_CHECK_GE(std::stod(acc), 0.8);
  BOOST_CHECK_EQUAL(epoch_lines(out), 2u);
  BOOST_CHECK(out.find("(replica 1 of 2)") != std::string::npos);
}
