// The counter task's accounting of kept pushes from the scheduler's event
// log: incarnations start ("started") and are cut ("cut"); a departure
// whose cut is not in yet leaves the sum open.
#define BOOST_TEST_MODULE accounting_tests
#include <boost/test/unit_test.hpp>

#include <optional>
#include <string>
#include <vector>

#include "actors/worker/accounting.hpp"

using namespace troupe;

namespace {

event_record ev(const char* kind, uint32_t rank,
                std::optional<uint64_t> clock = std::nullopt,
                role about = role::worker) {
  event_record e{0, kind, about, rank, 0, "", "test"};
  e.clock = clock;
  return e;
}

} // namespace

BOOST_AUTO_TEST_SUITE(accounting_tests)

BOOST_AUTO_TEST_CASE(live_workers_count_every_clock) {
  auto acc =
      account_pushes({ev("started", 0, 0), ev("started", 1, 0)}, 100, false);
  BOOST_CHECK(acc.complete);
  BOOST_CHECK_EQUAL(acc.pushes, 200u);
  BOOST_CHECK(acc.unexplained.empty());
  BOOST_CHECK_EQUAL(acc.explained, "rank 0: 0-100; rank 1: 0-100");
}

BOOST_AUTO_TEST_CASE(a_dead_process_counts_up_to_its_cut_and_its_successor_on) {
  std::vector<event_record> log{ev("started", 0, 0), ev("started", 1, 0),
                                ev("crashed", 1)};
  auto open = account_pushes(log, 100, false);
  BOOST_CHECK(!open.complete); // the cut is not in yet
  log.push_back(ev("cut", 1, 37));
  log.push_back(ev("rejoined", 1));
  log.push_back(ev("started", 1, 40)); // rounds went on meanwhile
  log.push_back(ev("joined", 0, std::nullopt, role::server)); // not a worker
  auto acc = account_pushes(log, 100, false);
  BOOST_CHECK(acc.complete);
  BOOST_CHECK_EQUAL(acc.pushes, 100u + 37u + 60u);
  BOOST_CHECK_EQUAL(acc.explained, "rank 0: 0-100; rank 1: 0-37 (cut), 40-100");
}

BOOST_AUTO_TEST_CASE(a_process_that_pushed_nothing_counts_nothing) {
  auto acc = account_pushes({ev("started", 0, 0), ev("started", 1, 5),
                             ev("crashed", 1), ev("cut", 1)},
                            10, false);
  BOOST_CHECK(acc.complete);
  BOOST_CHECK_EQUAL(acc.pushes, 10u);
  // A process that died before it said where it started: no clock kept.
  acc = account_pushes({ev("left", 2), ev("cut", 2)}, 10, false);
  BOOST_CHECK(acc.complete);
  BOOST_CHECK_EQUAL(acc.pushes, 0u);
  BOOST_CHECK(acc.unexplained.empty());
}

BOOST_AUTO_TEST_CASE(finished_workers_are_cut_at_the_end) {
  auto acc = account_pushes({ev("started", 0, 0), ev("started", 1, 0),
                             ev("left", 1), ev("cut", 1, 50)},
                            50, false);
  BOOST_CHECK(acc.complete);
  BOOST_CHECK_EQUAL(acc.pushes, 100u);
}

BOOST_AUTO_TEST_CASE(a_resumed_job_counts_the_checkpointed_clocks) {
  auto acc =
      account_pushes({ev("started", 0, 30), ev("started", 1, 30)}, 50, true);
  BOOST_CHECK_EQUAL(acc.pushes, 100u);
  BOOST_CHECK_EQUAL(acc.explained,
                    "rank 0: 0-30 (checkpoint), 30-50; rank 1: 0-30 "
                    "(checkpoint), 30-50");
}

BOOST_AUTO_TEST_CASE(a_log_that_contradicts_itself_is_said_to) {
  // A cut below a process's start keeps none of it, but never less than
  // the process before it kept: also for a process that died before it
  // started.
  auto acc = account_pushes({ev("started", 1, 0), ev("left", 1),
                             ev("cut", 1, 15), ev("left", 1), ev("cut", 1, 12)},
                            50, false);
  BOOST_CHECK(acc.unexplained.find("below what it kept before, 15") !=
              std::string::npos);
  acc = account_pushes({ev("started", 1, 0), ev("left", 1), ev("cut", 1, 15),
                        ev("started", 1, 20), ev("left", 1), ev("cut", 1, 12)},
                       50, false);
  BOOST_CHECK(acc.unexplained.find("below what it kept before, 15") !=
              std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_cut_below_a_process_start_keeps_none_of_it) {
  // Rank 1's second process started at 20 (one server had placed it there),
  // another server placed it at 18 and took none of its pushes: cut 18.
  // The third died before it started (no started event), placed at 25.
  auto acc = account_pushes(
      {ev("started", 0, 0), ev("started", 1, 0), ev("left", 1),
       ev("cut", 1, 15), ev("started", 1, 20), ev("left", 1), ev("cut", 1, 18),
       ev("left", 1), ev("cut", 1, 25), ev("started", 1, 30)},
      50, false);
  BOOST_CHECK(acc.unexplained.empty());
  BOOST_CHECK(acc.complete);
  BOOST_CHECK_EQUAL(acc.pushes, 50u + 15u + 0u + 20u);
  BOOST_CHECK_EQUAL(acc.explained,
                    "rank 0: 0-50; rank 1: 0-15 (cut), 20-20 (cut), 30-50");
}

BOOST_AUTO_TEST_SUITE_END()
