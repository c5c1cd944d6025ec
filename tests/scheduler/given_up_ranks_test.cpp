// Which free worker ranks no process comes back to: named by a process
// given up after it joined, or inferred from those given up before.
#define BOOST_TEST_MODULE given_up_ranks_tests
#include <boost/test/unit_test.hpp>

#include "actors/scheduler/given_up_ranks.hpp"

using troupe::sched::given_up_ranks;
using ranks = std::vector<uint32_t>;

BOOST_AUTO_TEST_SUITE(given_up_ranks_tests)

BOOST_AUTO_TEST_CASE(a_process_given_up_after_joining_names_its_rank) {
  given_up_ranks g;
  BOOST_CHECK(g.of({1}).empty());
  g.gave_up(1, {1}); // worker 1 crashed and its agent gave up
  BOOST_CHECK(g.of({1}) == ranks{1});
  // Another crash leaves rank 2 free: a restart may still come to it.
  BOOST_CHECK(g.of({1, 2}) == ranks{1});
  // A process started again by hand joins as 1: no longer given up.
  g.joined(1, {1, 2});
  BOOST_CHECK(g.of({2}).empty());
}

BOOST_AUTO_TEST_CASE(
    one_given_up_before_joining_is_inferred_once_the_others_are_in) {
  // Three workers; one exits at start (never joined) while 0 has joined
  // and 1 and 2 are still starting: either free rank may be its.
  given_up_ranks g;
  g.gave_up(std::nullopt, {1, 2});
  BOOST_CHECK(g.of({1, 2}).empty());
  g.joined(1, {1, 2});
  BOOST_CHECK(g.of({2}) == ranks{2}); // every other process is in
  // Two given up before joining, one rank free: it is theirs too.
  g.gave_up(std::nullopt, {2});
  BOOST_CHECK(g.of({2}) == ranks{2});
}

BOOST_AUTO_TEST_CASE(an_inferred_rank_stays_given_up_when_others_fall_free) {
  // The stages that end without it leave their ranks free: more free
  // ranks than processes given up, but the one inferred stays.
  given_up_ranks g;
  g.gave_up(std::nullopt, {1, 2});
  g.joined(1, {1, 2});
  BOOST_CHECK(g.of({2}) == ranks{2});
  BOOST_CHECK(g.of({0, 1, 2}) == ranks{2});
}

BOOST_AUTO_TEST_CASE(a_restart_is_not_taken_for_a_process_given_up) {
  given_up_ranks g;
  g.gave_up(std::nullopt, {2}); // inferred: rank 2
  BOOST_CHECK(g.of({2}) == ranks{2});
  // Started again by hand, it joins as 2: every rank is live, and a later
  // crash (a restart coming) is no process given up.
  g.joined(2, {2});
  BOOST_CHECK(g.of({0}).empty());
  BOOST_CHECK(g.of({0, 2}).empty());
  // Given up while both 1 and a crashed 0 are free: not inferred until
  // 0's restart is back.
  given_up_ranks h;
  h.gave_up(std::nullopt, {0, 1});
  BOOST_CHECK(h.of({0, 1}).empty());
  h.joined(0, {0, 1});
  BOOST_CHECK(h.of({1}) == ranks{1});
  // As the scheduler calls it (each view asks of()): rank 3 crashed, and
  // its restart does not take the rank given up.
  given_up_ranks r;
  r.gave_up(std::nullopt, {0, 1});
  BOOST_CHECK(r.of({0, 1}).empty());
  r.joined(0, {0, 1});
  BOOST_CHECK(r.of({1}) == ranks{1});
  BOOST_CHECK(r.of({1, 3}) == ranks{1});
  BOOST_CHECK_EQUAL(r.pick({1, 3}), 3u);
  // One started by hand joins as 1 once 3 is back: 1 is live again, and a
  // later crash is a restart coming.
  r.joined(3, {1, 3});
  BOOST_CHECK_EQUAL(r.pick({1}), 1u);
  r.joined(1, {1});
  BOOST_CHECK(r.of({2}).empty());
  // Joining an inferred rank uses the count up: with two given up and
  // one started again by hand, a later crash leaves two free ranks of
  // which one has a restart coming.
  given_up_ranks u;
  u.gave_up(std::nullopt, {1, 2});
  u.gave_up(std::nullopt, {1, 2});
  BOOST_CHECK(u.of({1, 2}) == (ranks{1, 2}));
  u.joined(1, {1, 2});
  BOOST_CHECK(u.of({2}) == ranks{2});
  BOOST_CHECK(u.of({2, 3}) == ranks{2}); // 3's restart comes
}

BOOST_AUTO_TEST_CASE(a_process_refused_by_a_full_cluster_counts_for_nothing) {
  given_up_ranks g;
  g.gave_up(std::nullopt, {});    // every rank live: one too many started
  BOOST_CHECK(g.of({1}).empty()); // worker 1 crashed: its restart comes
  // One whose rank another process holds now (no rank given): counted.
  g.gave_up(std::nullopt, {1});
  BOOST_CHECK(g.of({1}) == ranks{1});
}

BOOST_AUTO_TEST_CASE(a_process_given_up_before_it_is_seen_down_is_named) {
  // Its agent's word may come before the scheduler sees its link end: the
  // rank is not free yet, and is given up once it is.
  given_up_ranks g;
  g.gave_up(1, {});
  BOOST_CHECK(g.of({}).empty());
  BOOST_CHECK(g.of({1}) == ranks{1});
}

BOOST_AUTO_TEST_CASE(a_joining_worker_takes_no_rank_given_up_or_ended) {
  // Replica 0 (ranks 0..2) is over: 1 given up, 0 and 2 ended. A crash in
  // replica 1 frees 4, whose restart must come back to 4: at rank 0 it
  // would join a replica that is over, and wipe its mark.
  given_up_ranks g;
  g.gave_up(1, {1});
  g.ended(0);
  g.ended(2);
  BOOST_CHECK(g.ended() == (ranks{0, 2}));
  BOOST_CHECK_EQUAL(g.pick({0, 1, 2, 4}), 4u);
  // Nothing else free: one started by hand takes the lowest, which is then
  // no longer ended.
  BOOST_CHECK_EQUAL(g.pick({0, 1, 2}), 0u);
  g.joined(0, {0, 1, 2});
  BOOST_CHECK(g.ended() == ranks{2});
  BOOST_CHECK_EQUAL(g.pick({1}), 1u);
}

BOOST_AUTO_TEST_SUITE_END()
