// The benchmarks' answers to a --node that cannot be troupe-node: one line
// and exit 2 before anything runs (at 2b8c60c a folder passed the check,
// and every run then failed with exit 127 and no word why).
#define BOOST_TEST_MODULE bench_flags_tests
#include <boost/test/unit_test.hpp>

#include <fstream>
#include <string>

#include "bench/common.hpp"
#include "tests/system/child_process.hpp"
#include "tests/test_support.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(a_folder_or_a_plain_file_is_no_node) {
  temp_dir dir;
  std::ofstream{dir / "notes.txt"} << "hello\n";
  for (auto bin : {TROUPE_KV_THROUGHPUT_BIN, TROUPE_TIME_TO_ACCURACY_BIN})
    for (auto node : {dir.path, dir / "notes.txt", dir / "none"}) {
      child_process p{{bin, "--node=" + node}};
      auto rc = p.wait_exit(30s);
      BOOST_REQUIRE_MESSAGE(rc, p.output());
      BOOST_CHECK_MESSAGE(*rc == 2, bin << ": " << p.output());
      BOOST_CHECK_MESSAGE(p.output().find("--node: no executable file at '" +
                                          node + "'") != std::string::npos,
                          p.output());
    }
  BOOST_CHECK_EQUAL(troupe::bench::not_a_node(TROUPE_NODE_BIN), "");
}
