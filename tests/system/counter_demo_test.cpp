// The fault demo's counter run (issue 41): with --server.atomic-pushes,
// workers add 1 per clock while the agent kills workers and a server at
// random; for each seed every element must hold exactly the pushes the
// event log accounts for (docs/atomic-pushes.md). Long: label faults-seeds.
// Each case is a CTest entry of its own (tests/CMakeLists.txt), so that
// they run side by side: the cases named there are disabled here, so that
// the binary's own entry runs the first alone.
#define BOOST_TEST_MODULE counter_demo_tests
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/system/child_process.hpp"

using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

/// Seeds in a row; each run takes 8 to 10 s on 2 cores.
constexpr int seeds = 10;

/// The demo's kills fall 2.5 to 5.5 s in, for Fashion-MNIST's start; the
/// counter task trains at once, so its kills fall 0.7 to 3 s in, and 900
/// clocks (about 7 s here) outlast them, where the demo's 1500 took 12.
const std::vector<std::string> shorter = {"--worker.steps=900",
                                          "--fault.random-from-ms=700",
                                          "--fault.random-to-ms=3000"};

/// The server fault of `seed` (the demo's own pick is not seeded): a
/// server, 1 to 3 s in.
std::string server_fault(int seed) {
  return "kill:server-" + std::to_string(seed % 2) + "@" +
         std::to_string(1000 + (seed * 389) % 2000);
}

/// Runs the counter demo in `mode` for seeds 1..seeds; each must end
/// exact. With `server_kill`, the agent also kills a server at a time the
/// seed picks.
void run_seeds(const std::string& mode, bool server_kill) {
  ::setenv("TROUPE_BUILD", TROUPE_BUILD_DIR, 1);
  ::setenv("TROUPE_CERTS", TROUPE_BUILD_DIR "/test-certs", 1); // TLS is on
  for (int seed = 1; seed <= seeds; ++seed) {
    ::setenv("TROUPE_SERVER_KILL",
             server_kill ? server_fault(seed).c_str() : "none", 1);
    auto logs = std::string{TROUPE_BUILD_DIR} + "/counter-demo-logs/" + mode +
                (server_kill ? "-servers-" : "-workers-") + "seed-" +
                std::to_string(seed);
    ::setenv("TROUPE_LOGS", logs.c_str(), 1);
    std::vector<std::string> argv = {"/bin/bash",
                                     TROUPE_SOURCE_DIR
                                     "/examples/fault_injection/run.sh",
                                     "--worker.task=counter",
                                     "--optimizer.name=sum",
                                     "--fault.random-kills=3",
                                     "--fault.seed=" + std::to_string(seed),
                                     "--server.atomic-pushes=on",
                                     "--server.mode=" + mode};
    argv.insert(argv.end(), shorter.begin(), shorter.end());
    child_process demo{argv};
    auto rc = demo.wait_exit(120s);
    BOOST_REQUIRE_MESSAGE(rc, "seed " << seed
                                      << " did not finish: " << demo.output());
    auto out = demo.output();
    BOOST_CHECK_MESSAGE(
        *rc == 0 && out.find("counter: every element holds "
                             "exactly the pushes kept") != std::string::npos,
        "seed " << seed << " (logs in " << logs << "): " << out);
    BOOST_CHECK_MESSAGE(out.find("accounting: rank 0:") != std::string::npos,
                        "seed " << seed << " printed no accounting: " << out);
    auto count = [&out](const std::string& what) {
      size_t n = 0;
      for (auto at = out.find(what); at != std::string::npos;
           at = out.find(what, at + 1))
        ++n;
      return n;
    };
    // Random kills of 3 planned: a kill that falls on a worker restarting
    // is skipped, so 2 or 3 land.
    BOOST_CHECK_MESSAGE(count("injected: kill worker-") >= 2,
                        "seed " << seed
                                << " killed fewer than 2 workers: " << out);
    BOOST_CHECK_MESSAGE(!server_kill || count("injected: kill server-") == 1,
                        "seed " << seed << " killed no server: " << out);
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(counter_demo_tests)

BOOST_AUTO_TEST_CASE(random_worker_kills_keep_every_push_or_none) {
  run_seeds("sync", false);
}

// Named by its own CTest entry (counter_demo_async_test).
BOOST_AUTO_TEST_CASE(async_random_worker_and_server_kills_keep_every_push,
                     *boost::unit_test::disabled()) {
  run_seeds("async", true);
}

// Named by its own CTest entry (counter_demo_server_kills_test).
BOOST_AUTO_TEST_CASE(random_worker_and_server_kills_keep_every_push_or_none,
                     *boost::unit_test::disabled()) {
  run_seeds("sync", true);
}

BOOST_AUTO_TEST_SUITE_END()
