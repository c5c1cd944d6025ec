// The worker's scheduler: CAF's work sharing, whose threads watch the job
// queue before they sleep. Jobs found while watching woke no thread.
#define BOOST_TEST_MODULE spin_scheduler_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/base/spin_scheduler.hpp"
#include "actors/node/node_config.hpp"

using namespace troupe;
using std::chrono::microseconds;

namespace {

caf::behavior doubler(caf::event_based_actor*) {
  return {[](int x) { return 2 * x; }};
}

/// `threads` scheduler threads (troupe-node runs one), watching for
/// `watch`.
struct system_with {
  caf::actor_system_config cfg;
  explicit system_with(microseconds watch, size_t threads = 1) {
    cfg.set("scheduler.max-threads", threads);
    cfg.set("scheduler.policy", caf::atom("sharing"));
    use_watching_scheduler(
        cfg, [watch](const caf::actor_system_config&) { return watch; });
  }
};

/// Sends `n` requests one after another, each announced as work to come
/// when `announce`; checks every answer.
void ask(caf::actor_system& sys, int n, bool announce) {
  auto a = sys.spawn(doubler);
  caf::scoped_actor self{sys};
  for (int i = 0; i < n; ++i) {
    if (announce)
      expect_work_soon();
    self->request(a, std::chrono::seconds{10}, i)
        .receive([i](int y) { BOOST_REQUIRE_EQUAL(y, 2 * i); },
                 [](caf::error& err) {
                   BOOST_FAIL("no answer: " << caf::to_string(err));
                 });
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(spin_scheduler_tests)

BOOST_AUTO_TEST_CASE(no_watch_is_cafs_work_sharing) {
  auto before = jobs_found_watching();
  {
    system_with s{microseconds{0}};
    caf::actor_system sys{s.cfg};
    ask(sys, 100, true);
  }
  BOOST_CHECK_EQUAL(jobs_found_watching(), before);
}

BOOST_AUTO_TEST_CASE(threads_watch_only_for_announced_work) {
  auto before = jobs_found_watching();
  // Far longer than a request takes: once told, the thread watches between
  // requests.
  system_with s{std::chrono::seconds{5}};
  caf::actor_system sys{s.cfg};
  ask(sys, 100, false);
  BOOST_CHECK_EQUAL(jobs_found_watching(), before);
  ask(sys, 100, true);
  BOOST_CHECK_GT(jobs_found_watching(), before);
} // and the system shuts down while its thread watches

BOOST_AUTO_TEST_CASE(a_thread_that_stopped_watching_still_wakes_for_work) {
  system_with s{microseconds{1000}};
  caf::actor_system sys{s.cfg};
  auto before = watches_given_up();
  ask(sys, 3, true);
  // Once its watch ran out the thread sleeps (or goes to sleep without a
  // watch, if it came back from its last job after the watch time): the
  // next job must wake it.
  auto limit = std::chrono::steady_clock::now() + std::chrono::seconds{10};
  while (watches_given_up() == before && watch_armed()) {
    BOOST_REQUIRE_MESSAGE(std::chrono::steady_clock::now() < limit,
                          "the thread never stopped watching");
    std::this_thread::yield();
  }
  ask(sys, 3, false);
}

BOOST_AUTO_TEST_CASE(one_thread_watches_at_a_time) {
  // Four threads, three of them idle while one runs a job: each would
  // watch if nothing kept the others asleep.
  system_with s{std::chrono::seconds{5}, 4};
  caf::actor_system sys{s.cfg};
  auto before = jobs_found_watching();
  ask(sys, 200, true);
  BOOST_CHECK_GT(jobs_found_watching(), before); // still watching
  BOOST_CHECK_EQUAL(most_threads_watching(), 1u);
}

BOOST_AUTO_TEST_CASE(a_worker_node_watches_and_a_server_node_does_not) {
  auto found_with = [](std::vector<std::string> args) {
    node_config cfg;
    // The longest watch the flag allows: timing cannot fail the check.
    args.push_back("--worker.watch-us=100000");
    BOOST_REQUIRE(!cfg.parse(std::move(args)));
    BOOST_REQUIRE(!cfg.finish());
    auto before = jobs_found_watching();
    {
      caf::actor_system sys{cfg};
      ask(sys, 100, true);
    }
    return jobs_found_watching() - before;
  };
  BOOST_CHECK_EQUAL(found_with({"--role=server"}), 0u);
  BOOST_CHECK_GT(found_with({"--role=worker"}), 0u);
  // Another scheduler policy asked for is CAF's own, which never watches.
  BOOST_CHECK_EQUAL(
      found_with({"--role=worker", "--scheduler.policy=stealing"}), 0u);
}

BOOST_AUTO_TEST_SUITE_END()
