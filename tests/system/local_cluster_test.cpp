// deploy/local-cluster.sh end to end (the main job, one short epoch): it
// trains, names each log by the rank the scheduler gave that process,
// stops workers, then servers, then the scheduler, so that a successful
// job's logs hold no ERROR and no *** line, and leaves no process behind.
#define BOOST_TEST_MODULE local_cluster_tests
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/system/child_process.hpp"
#include "tests/test_support.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

/// Every pid the script said it started ("scheduler pid N", "server pid N").
std::set<pid_t> pids_in(const std::string& out) {
  std::set<pid_t> pids;
  std::regex started{R"((scheduler|server|worker) pid (\d+))"};
  for (std::sregex_iterator i{out.begin(), out.end(), started}, end; i != end;
       ++i)
    pids.insert(std::stoi((*i)[2]));
  return pids;
}

bool alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno != ESRCH;
}

} // namespace

BOOST_AUTO_TEST_SUITE(local_cluster_tests)

BOOST_AUTO_TEST_CASE(a_job_ends_in_order_with_clean_logs_named_by_rank) {
  temp_dir logs;
  ::setenv("TROUPE_BIN", TROUPE_NODE_BIN, 1);
  ::setenv("TROUPE_LOGS", logs.path.c_str(), 1);
  ::setenv("TROUPE_CHECKPOINTS", "", 1);
  ::setenv("TROUPE_CERTS", TROUPE_BUILD_DIR "/test-certs", 1); // TLS is on
  child_process job{{"/bin/bash", TROUPE_SOURCE_DIR "/deploy/local-cluster.sh",
                     TROUPE_SOURCE_DIR "/deploy/local.ini", "2", "2",
                     "--train.epochs=1", "--train.eval-samples=2000"}};
  auto rc = job.wait_exit(200s);
  auto pids = pids_in(job.output());
  for (auto pid : pids) // whatever happened, leave nothing running
    if (alive(pid))
      ::kill(pid, SIGKILL);
  BOOST_REQUIRE_MESSAGE(rc, "the job did not end: " << job.output());
  BOOST_REQUIRE_MESSAGE(*rc == 0, job.output());
  BOOST_CHECK(job.output().find("final test accuracy: ") != std::string::npos);
  BOOST_CHECK_EQUAL(pids.size(), 5u); // scheduler, 2 servers, 2 workers
  for (auto pid : pids)
    BOOST_CHECK_MESSAGE(!alive(pid), "pid " << pid << " still runs");
  // One log per process, named by its rank, and nothing left unnamed.
  for (auto name : {"server-0", "server-1", "worker-0", "worker-1"}) {
    auto text = read_file(logs.path + "/" + name + ".log");
    std::string role{name, std::string{name}.find('-')};
    std::string rank = std::string{name}.substr(role.size() + 1);
    BOOST_CHECK_MESSAGE(text.find(" " + role + " " + rank + ": joined") !=
                            std::string::npos,
                        name << ".log is not " << role << " " << rank << "'s:\n"
                             << text);
  }
  for (auto& e : fs::directory_iterator{logs.path}) {
    auto name = e.path().filename().string();
    BOOST_CHECK_MESSAGE(name.rfind("starting-", 0) != 0, name << " left");
    if (e.path().extension() != ".log")
      continue;
    auto text = read_file(e.path());
    BOOST_CHECK_MESSAGE(text.find(" ERROR ") == std::string::npos &&
                            text.find("***") == std::string::npos,
                        name << " of a successful job:\n"
                             << text);
  }
}

BOOST_AUTO_TEST_SUITE_END()
