// The fault-injection demo end to end: examples/fault_injection/run.sh
// trains Fashion-MNIST while its agent kills two workers and a server; the
// job must finish, every fault must be noticed and followed by a rejoin,
// and the model must still learn. Times are printed, never asserted.
#define BOOST_TEST_MODULE fault_demo_tests
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <tuple>

#include "messages/membership.hpp"
#include "tests/system/child_process.hpp"
#include "tests/test_support.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(fault_demo_tests)

BOOST_AUTO_TEST_CASE(the_demo_survives_two_worker_kills_and_a_server_kill) {
  ::setenv("TROUPE_BUILD", TROUPE_BUILD_DIR, 1);
  const std::string logs = TROUPE_BUILD_DIR "/fault-demo-logs";
  std::filesystem::remove_all(logs); // events.jsonl is appended to
  ::setenv("TROUPE_LOGS", logs.c_str(), 1);
  ::setenv("TROUPE_SERVER_KILL", "kill:server-1@5000", 1);
  ::setenv("TROUPE_CERTS", TROUPE_BUILD_DIR "/test-certs", 1); // TLS is on
  child_process demo{{"/bin/bash",
                      TROUPE_SOURCE_DIR "/examples/fault_injection/run.sh",
                      "--fault.seed=3"}};
  auto rc = demo.wait_exit(280s);
  BOOST_REQUIRE_MESSAGE(rc, "the demo did not finish: " << demo.output());
  BOOST_REQUIRE_MESSAGE(*rc == 0, demo.output());
  auto out = demo.output();
  std::smatch m;
  BOOST_REQUIRE_MESSAGE(
      std::regex_search(out, m,
                        std::regex{"final test accuracy: ([0-9.]+) \\(target"}),
      out);
  auto acc = std::stod(m[1]);
  BOOST_TEST_MESSAGE("final test accuracy " << acc);
  BOOST_CHECK_GE(acc, 0.87);
  // Three faults in the figures, each noticed and each followed by a
  // rejoin of the restarted process.
  auto json_at = out.find("{\"faults\":[");
  BOOST_REQUIRE_MESSAGE(json_at != std::string::npos, out);
  auto json = out.substr(json_at, out.find('\n', json_at) - json_at);
  BOOST_TEST_MESSAGE(json);
  BOOST_CHECK_EQUAL(occurrences(json, "\"fault\""), 3u);
  BOOST_CHECK_MESSAGE(json.find("\"noticed_ms\":null") == std::string::npos &&
                          json.find("\"rejoined_ms\":null") ==
                              std::string::npos &&
                          json.find("\"resumed_ms\":null") == std::string::npos,
                      json);
  BOOST_CHECK(json.find("server-1: kill server-1") != std::string::npos);
  // The scheduler wrote every event to events.jsonl, one JSON line each,
  // and fault_timeline reads the file once the job is over (the scheduler
  // is gone) to the same figures.
  std::ifstream events{logs + "/events.jsonl"};
  BOOST_REQUIRE_MESSAGE(events, "no " << logs << "/events.jsonl");
  size_t lines = 0;
  for (std::string l; std::getline(events, l); ++lines) {
    auto e = troupe::event_from_json(l);
    BOOST_REQUIRE_MESSAGE(e, "events.jsonl line " << lines + 1 << ": " << l);
  }
  BOOST_CHECK_GT(lines, 10u);
  child_process after{{TROUPE_BUILD_DIR "/fault_timeline",
                       "--events-file=" + logs + "/events.jsonl"}};
  auto after_rc = after.wait_exit(60s);
  BOOST_REQUIRE(after_rc);
  BOOST_CHECK_EQUAL(*after_rc, 0);
  auto from_file = after.output();
  BOOST_CHECK_MESSAGE(from_file.find(json) != std::string::npos,
                      "live: " << json << "\nfrom the file:\n"
                               << from_file);
  child_process missing{{TROUPE_BUILD_DIR "/fault_timeline",
                         "--events-file=" + logs + "/none.jsonl"}};
  auto missing_rc = missing.wait_exit(60s);
  BOOST_REQUIRE(missing_rc);
  BOOST_CHECK_EQUAL(*missing_rc, 1);
  BOOST_CHECK_MESSAGE(missing.output().find("cannot read") != std::string::npos,
                      missing.output());
  // The timeline names each process by the scheduler's rank, whoever
  // reported the event: one pid, one role and rank.
  std::map<std::string, std::set<std::string>> ranks_of_pid;
  std::regex line{R"(\n +\d+  \S+ +(server|worker) (\d+) +pid (\d+))"};
  for (std::sregex_iterator i{out.begin(), out.end(), line}, end; i != end; ++i)
    if ((*i)[3] != "0")
      ranks_of_pid[(*i)[3]].insert(std::string{(*i)[1]} + " " +
                                   std::string{(*i)[2]});
  BOOST_CHECK_GE(ranks_of_pid.size(), 4u);
  for (auto& [pid, ranks] : ranks_of_pid)
    BOOST_CHECK_MESSAGE(ranks.size() == 1, "pid " << pid << " is named "
                                                  << ranks.size()
                                                  << " ways in:\n"
                                                  << out);
}

BOOST_AUTO_TEST_CASE(fault_timeline_says_what_is_wrong_with_its_file) {
  temp_dir dir;
  // An empty file and a folder said nothing and exited 0 at 2b8c60c, and
  // an empty --events-file= asked the scheduler at the default port.
  { std::ofstream{dir / "empty.jsonl"}; }
  for (auto [flag, rc_wanted, says] :
       {std::tuple{"--events-file=" + dir / "empty.jsonl", 1,
                   std::string{"empty.jsonl holds no event"}},
        std::tuple{"--events-file=" + dir.path, 1,
                   std::string{"cannot read " + dir.path + ": a folder"}},
        std::tuple{std::string{"--events-file="}, 2,
                   std::string{"--events-file= names no file"}}}) {
    child_process bad{{TROUPE_BUILD_DIR "/fault_timeline", flag}};
    auto rc = bad.wait_exit(60s);
    BOOST_REQUIRE(rc);
    BOOST_CHECK_EQUAL(*rc, rc_wanted);
    BOOST_CHECK_MESSAGE(bad.output().find(says) != std::string::npos,
                        bad.output());
  }
}

BOOST_AUTO_TEST_SUITE_END()
