// Fault plans: parsing --fault.plan, its clear errors, and random kills.
#define BOOST_TEST_MODULE fault_plan_tests
#include <boost/test/unit_test.hpp>

#include "tests/test_support.hpp"

#include <signal.h>

#include <set>

#include "actors/supervision/fault_plan.hpp"
#include "messages/errors.hpp"

using namespace troupe;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(fault_plan_tests)

BOOST_AUTO_TEST_CASE(a_plan_parses_into_timed_signals_sorted_by_time) {
  auto plan = parse_fault_plan("term:server-0@9000,kill:worker-1@3000,"
                               "hang:worker-0@5000+4000");
  BOOST_REQUIRE(plan);
  std::vector<fault_action> expected{
      {fault_action::kill, "worker-1", 3000ms},
      {fault_action::hang, "worker-0", 5000ms},
      {fault_action::term, "server-0", 9000ms},
      {fault_action::resume, "worker-0", 9000ms}};
  BOOST_CHECK(*plan == expected);
  BOOST_CHECK_EQUAL(signal_of(fault_action::kill), SIGKILL);
  BOOST_CHECK_EQUAL(signal_of(fault_action::hang), SIGSTOP);
  BOOST_CHECK_EQUAL(signal_of(fault_action::resume), SIGCONT);
  BOOST_CHECK_EQUAL(signal_of(fault_action::term), SIGTERM);
  auto empty = parse_fault_plan("");
  BOOST_REQUIRE(empty);
  BOOST_CHECK(empty->empty());
}

BOOST_AUTO_TEST_CASE(a_cut_heals_after_its_hold_and_names_its_targets) {
  auto plan = parse_fault_plan("cut:worker-1@2000+3000,cut:server-0@4000,"
                               "heal:server-0@8000,kill:worker-0@1000");
  BOOST_REQUIRE_MESSAGE(plan, test::why(plan));
  std::vector<fault_action> expected{{fault_action::kill, "worker-0", 1000ms},
                                     {fault_action::cut, "worker-1", 2000ms},
                                     {fault_action::cut, "server-0", 4000ms},
                                     {fault_action::heal, "worker-1", 5000ms},
                                     {fault_action::heal, "server-0", 8000ms}};
  BOOST_CHECK(*plan == expected);
  BOOST_CHECK_EQUAL(signal_of(fault_action::cut), 0); // not a signal
  BOOST_CHECK_EQUAL(signal_of(fault_action::heal), 0);
  BOOST_CHECK_EQUAL(to_string(fault_action::cut), std::string{"cut"});
  BOOST_CHECK_EQUAL(to_string(fault_action::heal), std::string{"heal"});
  auto targets = cut_targets(*plan); // in order of first mention, no kill
  BOOST_CHECK((targets == std::vector<std::string>{"worker-1", "server-0"}));
  BOOST_CHECK(cut_targets(*parse_fault_plan("kill:worker-1@5")).empty());
}

BOOST_AUTO_TEST_CASE(a_stall_is_sigusr1_to_a_worker_and_to_no_server) {
  // SIGUSR1 stalls a worker's next step (actors/base/step_watch.hpp);
  // nothing handles it in a server or a scheduler, which it would end.
  auto plan = parse_fault_plan("stall:worker-1@3000,kill:worker-0@1000");
  BOOST_REQUIRE_MESSAGE(plan, test::why(plan));
  std::vector<fault_action> expected{{fault_action::kill, "worker-0", 1000ms},
                                     {fault_action::stall, "worker-1", 3000ms}};
  BOOST_CHECK(*plan == expected);
  BOOST_CHECK_EQUAL(signal_of(fault_action::stall), SIGUSR1);
  BOOST_CHECK_EQUAL(to_string(fault_action::stall), std::string{"stall"});
  for (std::string bad : {"stall:server-0@3000", "stall:worker-1@3000+500"}) {
    auto refused = parse_fault_plan(bad);
    BOOST_REQUIRE_MESSAGE(!refused, bad);
    BOOST_CHECK(refused.error() == errc::invalid_config);
    BOOST_CHECK_MESSAGE(describe(refused.error()).find(bad) !=
                            std::string::npos,
                        describe(refused.error()));
  }
  BOOST_CHECK_MESSAGE(describe(parse_fault_plan("stall:server-0@1").error())
                              .find("no worker") != std::string::npos,
                      describe(parse_fault_plan("stall:server-0@1").error()));
}

BOOST_AUTO_TEST_CASE(a_bad_plan_item_is_named_in_the_error) {
  for (std::string bad :
       {"kill", "kill:worker-1", "explode:worker-1@10", "kill:@10",
        "kill:worker-1@", "kill:worker-1@-5", "kill:worker-1@1e3",
        "kill:worker-1@100+50", "hang:worker-1@100+", "kill:w@999999999",
        "heal:worker-1@100+50", "cut:worker-1@100+x",
        "kill:w@100,,kill:w@200"}) {
    auto plan = parse_fault_plan(bad);
    BOOST_REQUIRE_MESSAGE(!plan, bad);
    BOOST_CHECK(plan.error() == errc::invalid_config);
    auto text = describe(plan.error());
    BOOST_CHECK_MESSAGE(text.find("--fault.plan") != std::string::npos &&
                            text.find("kill:worker-1@3000") !=
                                std::string::npos,
                        text);
  }
}

BOOST_AUTO_TEST_CASE(random_kills_are_seeded_distinct_and_in_the_window) {
  std::vector<std::string> targets{"worker-0", "worker-1", "worker-2"};
  auto a = random_kills(2, targets, 1000ms, 5000ms, 7);
  auto b = random_kills(2, targets, 1000ms, 5000ms, 7);
  BOOST_CHECK(a == b); // the same seed, the same plan
  BOOST_REQUIRE_EQUAL(a.size(), 2u);
  BOOST_CHECK_NE(a[0].target, a[1].target);
  BOOST_CHECK(a[0].at <= a[1].at);
  for (auto& k : a) {
    BOOST_CHECK(k.kind == fault_action::kill);
    BOOST_CHECK(k.at >= 1000ms && k.at < 5000ms);
  }
  // More kills than targets: each is hit, then they repeat.
  auto many = random_kills(5, targets, 0ms, 100ms, 3);
  std::set<std::string> hit;
  for (auto& k : many)
    hit.insert(k.target);
  BOOST_CHECK_EQUAL(hit.size(), 3u);
  BOOST_CHECK(random_kills(3, {}, 0ms, 10ms, 1).empty());
  // Different seeds draw different plans (with overwhelming odds).
  bool differ = false;
  for (uint64_t s = 1; s < 10 && !differ; ++s)
    differ = !(random_kills(2, targets, 0ms, 100000ms, s) == a);
  BOOST_CHECK(differ);
}

BOOST_AUTO_TEST_SUITE_END()
