// The consistency modes of a shard server's store and its workers'
// clocks, under interleavings the test chooses step by step.
#define BOOST_TEST_MODULE shard_store_tests
#include <boost/test/unit_test.hpp>

#include <vector>

#include "actors/server/shard_store.hpp"
#include "messages/errors.hpp"
#include "tests/server/shard_store_fixture.hpp"

using namespace troupe;
using namespace troupe::test;

BOOST_AUTO_TEST_SUITE(shard_store_tests)

BOOST_AUTO_TEST_CASE(
    sync_sums_every_push_exactly_and_a_pull_waits_for_the_last) {
  fixture f{"sync"};
  BOOST_CHECK(f.store.readable_at(0));
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  BOOST_REQUIRE(f.push(2, 0, 4.0f));
  // Two of three pushed clock 0: version 1 does not exist yet.
  BOOST_CHECK(!f.store.readable_at(1));
  BOOST_CHECK_EQUAL(f.value_of(a), 0.0f);
  BOOST_CHECK_EQUAL(f.store.version(), 0u);
  BOOST_REQUIRE(f.push(1, 0, 2.0f)); // the last push
  BOOST_CHECK(f.store.readable_at(1));
  BOOST_CHECK_EQUAL(f.store.version(), 1u);
  BOOST_CHECK_EQUAL(f.value_of(a), 7.0f);
  BOOST_CHECK_EQUAL(f.value_of(b), 7.0f);
}

BOOST_AUTO_TEST_CASE(a_waiting_sync_round_keeps_its_own_copy_of_a_push) {
  // push() reads the values in place during the call only: a round that
  // does not complete must not keep pointing at them.
  fixture f{"sync"};
  std::vector<float> xs{1, 1, 1}, ys{1, 1};
  push_request header{0, 0, 1, 0, 1, {}};
  BOOST_REQUIRE(f.store.push(header, {slice_view{a, xs.data(), xs.size()},
                                      slice_view{b, ys.data(), ys.size()}}));
  std::fill(xs.begin(), xs.end(), 100.0f); // the caller reuses its buffer
  std::fill(ys.begin(), ys.end(), 100.0f);
  BOOST_REQUIRE(f.push(1, 0, 2.0f));
  BOOST_REQUIRE(f.push(2, 0, 4.0f));
  BOOST_CHECK_EQUAL(f.value_of(a), 7.0f);
  BOOST_CHECK_EQUAL(f.value_of(b), 7.0f);
}

BOOST_AUTO_TEST_CASE(sync_keeps_an_early_push_for_the_next_round) {
  fixture f{"sync"};
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  BOOST_REQUIRE(f.push(0, 1, 10.0f)); // worker 0 is one clock ahead
  BOOST_REQUIRE(f.push(1, 0, 1.0f));
  BOOST_REQUIRE(f.push(2, 0, 1.0f));
  BOOST_CHECK_EQUAL(f.store.version(), 1u);
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f);
  BOOST_REQUIRE(f.push(1, 1, 10.0f));
  BOOST_REQUIRE(f.push(2, 1, 10.0f));
  BOOST_CHECK_EQUAL(f.store.version(), 2u);
  BOOST_CHECK_EQUAL(f.value_of(a), 33.0f);
}

BOOST_AUTO_TEST_CASE(sync_completes_a_round_when_a_worker_leaves) {
  fixture f{"sync"};
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  BOOST_REQUIRE(f.push(1, 0, 1.0f));
  BOOST_CHECK(!f.store.readable_at(1));
  f.store.set_workers({0, 1}); // worker 2 died
  BOOST_CHECK(f.store.readable_at(1));
  BOOST_CHECK_EQUAL(f.value_of(a), 2.0f);
}

BOOST_AUTO_TEST_CASE(sync_waits_for_every_part_of_a_push) {
  fixture f{"sync"};
  auto part = [&f](uint32_t w, uint32_t p, slice_id id, size_t n) {
    return f.store.push(
        push_request{w, 0, 1, p, 2, {{id, std::vector<float>(n, 1.0f)}}});
  };
  BOOST_REQUIRE(part(0, 0, a, 3));
  BOOST_REQUIRE(f.push(1, 0, 1.0f));
  BOOST_REQUIRE(f.push(2, 0, 1.0f));
  BOOST_CHECK(!f.store.readable_at(1)); // worker 0 sent 1 of 2 parts
  BOOST_REQUIRE(part(0, 1, b, 2));
  BOOST_CHECK(f.store.readable_at(1));
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f);
  BOOST_CHECK_EQUAL(f.value_of(b), 3.0f);
}

BOOST_AUTO_TEST_CASE(ssp_blocks_a_fast_worker_at_s_plus_one_ahead) {
  fixture f{"ssp:2"};
  // Worker 0 runs ahead: its pushes are applied on arrival.
  for (uint64_t c = 0; c < 3; ++c) {
    BOOST_CHECK_MESSAGE(f.store.readable_at(c), "clock " << c);
    BOOST_REQUIRE(f.push(0, c, 1.0f));
  }
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f);
  // At clock 3 it is s + 1 = 3 ahead of the slowest (clock 0): blocked.
  BOOST_CHECK(!f.store.readable_at(3));
  BOOST_REQUIRE(f.push(1, 0, 1.0f));
  BOOST_CHECK(!f.store.readable_at(3)); // worker 2 is still at 0
  BOOST_REQUIRE(f.push(2, 0, 1.0f));
  BOOST_CHECK(f.store.readable_at(3)); // the slowest caught up to 1
  BOOST_CHECK(!f.store.readable_at(4));
  BOOST_CHECK_EQUAL(f.value_of(a), 5.0f);
}

BOOST_AUTO_TEST_CASE(async_applies_on_arrival_and_never_waits) {
  fixture f{"async"};
  for (uint64_t c = 0; c < 50; ++c) {
    BOOST_CHECK(f.store.readable_at(c));
    BOOST_REQUIRE(f.push(0, c, 1.0f));
    BOOST_CHECK_EQUAL(f.value_of(a), float(c + 1));
  }
  BOOST_CHECK(f.store.readable_at(1000));
  BOOST_CHECK_EQUAL(f.store.min_clock(), 0u);
}

BOOST_AUTO_TEST_CASE(a_duplicate_push_is_applied_once) {
  for (auto mode : {"sync", "async", "ssp:1"}) {
    fixture f{mode};
    for (uint32_t w = 0; w < 3; ++w) {
      BOOST_REQUIRE(f.push(w, 0, 1.0f));
      auto again = f.push(w, 0, 1.0f);
      BOOST_REQUIRE(again);
      BOOST_CHECK_MESSAGE(again->duplicate, mode);
    }
    BOOST_CHECK_MESSAGE(f.value_of(a) == 3.0f, mode);
  }
}

BOOST_AUTO_TEST_CASE(a_rejoining_worker_resumes_at_the_smallest_clock) {
  // Two servers in sync mode; worker 2 died and rejoins while worker 0 and
  // 1 have pushed clock 5 to the first server but not yet to the second.
  fixture ahead{"sync"}, behind{"sync"};
  for (auto* f : {&ahead, &behind})
    f->store.set_workers({0, 1});
  for (uint64_t t = 0; t < 5; ++t)
    for (uint32_t w = 0; w < 2; ++w)
      for (auto* f : {&ahead, &behind})
        BOOST_REQUIRE(f->push(w, t, 1.0f));
  for (uint32_t w = 0; w < 2; ++w)
    BOOST_REQUIRE(ahead.push(w, 5, 1.0f));
  for (auto* f : {&ahead, &behind})
    f->store.set_workers({0, 1, 2}); // worker 2 rejoins
  auto lo = std::min(ahead.store.clock_of(2), behind.store.clock_of(2));
  BOOST_CHECK_EQUAL(lo, 5u);
  BOOST_CHECK_EQUAL(ahead.store.clock_of(2), 6u);
  // The lagging round waits for worker 2: had it resumed at the largest
  // clock (6), its first pull (at 6) would wait here for ever, before it
  // ever pushed.
  for (uint32_t w = 0; w < 2; ++w)
    BOOST_REQUIRE(behind.push(w, 5, 1.0f));
  BOOST_CHECK(!behind.store.readable_at(6));
  // Resuming at the smallest clock: a duplicate where rounds are ahead,
  // and it completes the lagging round.
  BOOST_CHECK(ahead.push(2, lo, 1.0f)->duplicate);
  BOOST_REQUIRE(behind.push(2, lo, 1.0f));
  BOOST_CHECK(behind.store.readable_at(6));
  BOOST_CHECK(ahead.store.readable_at(6));
}

BOOST_AUTO_TEST_CASE(a_rank_back_pulling_past_a_lagging_round_is_not_in_it) {
  // Worker 2 comes back while this server's round 1 is still open and
  // another server has applied it already (without worker 2): the worker
  // resumes at the larger clock, 2, and pulls there first. The open round
  // must not wait for it, nor take a push of it, as the other did not.
  fixture f{"sync"};
  for (uint32_t w = 0; w < 3; ++w)
    BOOST_REQUIRE(f.push(w, 0, 1.0f));
  f.store.set_workers({0, 1}); // worker 2 died
  BOOST_REQUIRE(f.push(0, 1, 1.0f));
  f.store.set_workers({0, 1, 2}); // back: here at clock 1, the rounds'
  BOOST_CHECK_EQUAL(f.store.clock_of(2), 1u);
  BOOST_REQUIRE(!f.store.check_pull(2, 2));
  f.store.pulled(2, 2);
  BOOST_CHECK_EQUAL(f.store.clock_of(2), 2u);
  BOOST_REQUIRE(f.push(1, 1, 1.0f));
  BOOST_CHECK(f.store.readable_at(2)); // round 1: workers 0 and 1
  BOOST_CHECK_EQUAL(f.value_of(a), 5.0f);
  auto first = f.push(2, 2, 1.0f);
  BOOST_REQUIRE(first);
  BOOST_CHECK(!first->duplicate);
  f.store.pulled(0, 7); // a worker that pushed since it joined: no jump
  BOOST_CHECK_EQUAL(f.store.clock_of(0), 2u);
}

BOOST_AUTO_TEST_CASE(a_worker_back_after_a_crash_is_not_counted_twice) {
  // Sync: worker 2 pushed clock 0 and died before the others did; its
  // restarted process comes back under rank 2 before the round is
  // applied. Its push is in the round already: it goes on from clock 1,
  // and pushing clock 0 again is a duplicate.
  fixture f{"sync"};
  BOOST_REQUIRE(f.push(2, 0, 1.0f));
  f.store.set_workers({0, 1});    // worker 2 died
  f.store.set_workers({0, 1, 2}); // and is back
  BOOST_CHECK_EQUAL(f.store.clock_of(2), 1u);
  auto again = f.push(2, 0, 1.0f);
  BOOST_REQUIRE(again);
  BOOST_CHECK(again->duplicate);
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  BOOST_REQUIRE(f.push(1, 0, 1.0f));
  BOOST_REQUIRE(f.store.readable_at(1));
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f); // each worker once
  // Once the rounds passed its clock, a rank back starts where they are.
  f.store.set_workers({0, 1});
  for (uint64_t t = 1; t < 3; ++t)
    for (uint32_t w = 0; w < 2; ++w)
      BOOST_REQUIRE(f.push(w, t, 1.0f));
  f.store.set_workers({0, 1, 2});
  BOOST_CHECK_EQUAL(f.store.clock_of(2), 3u);
}

BOOST_AUTO_TEST_CASE(a_lone_async_worker_back_goes_on_from_its_clock) {
  // Async: with no other worker live, "the others' clock" is 0; a
  // restarted worker must not push its steps again from there.
  fixture f{"async"};
  f.store.set_workers({0});
  for (uint64_t t = 0; t < 3; ++t)
    BOOST_REQUIRE(f.push(0, t, 1.0f));
  f.store.set_workers({});
  f.store.set_workers({0});
  BOOST_CHECK_EQUAL(f.store.clock_of(0), 3u);
  BOOST_CHECK(f.push(0, 0, 1.0f)->duplicate);
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f);
}

BOOST_AUTO_TEST_CASE(a_rank_placed_where_the_others_were_takes_a_lower_clock) {
  // Async and ssp: worker 2 comes back as a new process while worker 0
  // goes on; one server sees it join with worker 0 at clock 6, the other
  // at 5, and places it there. It resumes at the smallest, 5: both take
  // that push (dropped as a duplicate where it was placed at 6, that
  // server's slices lacked it, seen with the counter task in async).
  for (auto mode : {"async", "ssp:2"}) {
    fixture ahead{mode}, behind{mode};
    for (auto* f : {&ahead, &behind})
      f->store.set_workers({0});
    for (uint64_t t = 0; t < 5; ++t)
      for (auto* f : {&ahead, &behind})
        BOOST_REQUIRE(f->push(0, t, 1.0f));
    BOOST_REQUIRE(ahead.push(0, 5, 1.0f));
    for (auto* f : {&ahead, &behind})
      f->store.set_workers({0, 2});
    BOOST_CHECK_EQUAL(ahead.store.clock_of(2), 6u);
    BOOST_CHECK_EQUAL(behind.store.clock_of(2), 5u);
    for (auto* f : {&ahead, &behind}) {
      auto first = f->push(2, 5, 1.0f);
      BOOST_REQUIRE_MESSAGE(first, mode);
      BOOST_CHECK_MESSAGE(!first->duplicate, mode);
      BOOST_CHECK_EQUAL(f->store.clock_of(2), 6u);
      BOOST_CHECK_MESSAGE(f->push(2, 5, 1.0f)->duplicate, mode); // once
    }
    BOOST_REQUIRE(behind.push(0, 5, 1.0f));
    BOOST_CHECK_EQUAL(ahead.value_of(a), behind.value_of(a));
    // A rank whose clock here is its own pushes' is not placed: a lower
    // push is a duplicate (as in a_lone_async_worker_back_goes_on...).
    BOOST_CHECK_MESSAGE(ahead.push(0, 3, 1.0f)->duplicate, mode);
  }
}

BOOST_AUTO_TEST_CASE(a_workers_first_push_sets_its_clock_here) {
  // A server that joined late (or a restarted one) meets workers at clock
  // 40: their first push sets their clock; later ones must follow on.
  for (auto mode : {"sync", "async", "ssp:1"}) {
    fixture f{mode};
    BOOST_CHECK(!f.store.check_pull(0, 41)); // not pushed yet: no gap
    for (uint32_t w = 0; w < 3; ++w)
      BOOST_REQUIRE_MESSAGE(f.push(w, 40, 1.0f), mode);
    BOOST_CHECK_MESSAGE(f.value_of(a) == 3.0f, mode);
    BOOST_CHECK_EQUAL(f.store.min_clock(), 41u);
    BOOST_CHECK(f.store.readable_at(41));
    BOOST_CHECK_MESSAGE(f.push(0, 40, 1.0f)->duplicate, mode);
    BOOST_CHECK_MESSAGE(f.push(0, 43, 1.0f).error() == errc::clock_gap, mode);
    BOOST_CHECK(f.store.check_pull(0, 43) == errc::clock_gap);
  }
}
BOOST_AUTO_TEST_CASE(a_first_push_far_ahead_passes_the_empty_rounds_at_once) {
  // Before: one loop pass per empty round, so a first push at clock 2^40
  // kept the server busy for hours (and was declared dead).
  fixture f{"sync"};
  f.store.set_workers({0});
  std::vector<uint64_t> ran_at;
  for (uint64_t v : {uint64_t{5}, uint64_t{1} << 30})
    BOOST_REQUIRE(!f.store.at_version(
        v, [&f, &ran_at] { ran_at.push_back(f.store.version()); }));
  const uint64_t far = uint64_t{1} << 40;
  BOOST_REQUIRE(f.push(0, far, 1.0f));
  BOOST_CHECK_EQUAL(f.store.version(), far + 1);
  BOOST_CHECK(f.store.readable_at(far + 1));
  BOOST_CHECK_EQUAL(f.value_of(a), 1.0f); // its own round, applied once
  // What waited for a version in between ran at that very version.
  BOOST_CHECK((ran_at == std::vector<uint64_t>{5, uint64_t{1} << 30}));
  BOOST_REQUIRE(f.push(0, far + 1, 2.0f));
  BOOST_CHECK_EQUAL(f.store.version(), far + 2);
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f);
  BOOST_CHECK(f.store.between_rounds());
}

BOOST_AUTO_TEST_CASE(a_rank_joining_after_resumed_rounds_went_on_starts_there) {
  // Resumed at round 5 before any worker registered; rank 0 trains on to
  // round 8 alone, then rank 1 joins with the clock the checkpoint had.
  shard_store s{*parse_consistency("sync")};
  s.set_owned({{a, 3}});
  s.restore(5, 5,
            {worker_snapshot{0, 5, {}, 0, {}, {}},
             worker_snapshot{1, 5, {}, 0, {}, {}}},
            {});
  s.set_workers({0});
  BOOST_REQUIRE(!s.init(init_request{0, 1, {{a, {0, 0, 0}}}}));
  for (uint64_t c = 5; c < 8; ++c)
    BOOST_REQUIRE(s.push(push_request{0, c, 1, 0, 1, {{a, {1, 1, 1}}}}));
  BOOST_REQUIRE_EQUAL(s.version(), 8u);
  s.set_workers({0, 1});
  // Rounds 5..7 are applied: rank 1 starts at 8, as a newcomer would, and
  // a push of its old clocks is a duplicate, not a push into a round that
  // will never be applied again.
  BOOST_CHECK_EQUAL(s.clock_of(1), 8u);
  BOOST_CHECK(s.push(push_request{1, 5, 1, 0, 1, {{a, {9, 9, 9}}}})->duplicate);
  BOOST_CHECK(s.between_rounds());
  for (uint32_t w : {0u, 1u})
    BOOST_REQUIRE(s.push(push_request{w, 8, 1, 0, 1, {{a, {1, 1, 1}}}}));
  BOOST_CHECK_EQUAL(s.version(), 9u);
  BOOST_CHECK(s.between_rounds());
  BOOST_CHECK_EQUAL(s.read({a})->slices[0].values[0], 5.0f);
}

BOOST_AUTO_TEST_CASE(clocks_beyond_the_bound_are_malformed_and_change_nothing) {
  for (auto mode : {"sync", "async", "ssp:1"}) {
    fixture f{mode};
    for (uint64_t c : {shard_store::max_clock + 1, ~uint64_t{0}})
      BOOST_CHECK_MESSAGE(f.push(0, c, 1.0f).error() == errc::malformed_message,
                          mode << " push at " << c);
    for (uint64_t c : {shard_store::max_clock + 2, ~uint64_t{0}})
      BOOST_CHECK_MESSAGE(f.store.check_pull(0, c) == errc::malformed_message,
                          mode << " pull at " << c);
    BOOST_CHECK_EQUAL(f.value_of(a), 0.0f);
    BOOST_CHECK_EQUAL(f.store.clock_of(0), 0u);
    // The bound itself is a clock like any other.
    BOOST_REQUIRE_MESSAGE(f.push(0, shard_store::max_clock, 1.0f), mode);
    BOOST_CHECK_EQUAL(f.store.clock_of(0), shard_store::max_clock + 1);
  }
}

BOOST_AUTO_TEST_CASE(pulls_from_strangers_or_from_the_future_are_refused) {
  fixture f{"sync"};
  BOOST_CHECK(!f.store.check_pull(0, 0));
  BOOST_CHECK(!f.store.check_pull(0, 1)); // pulls before pushing clock 0
  BOOST_CHECK(f.store.check_pull(9, 0) == errc::not_a_member);
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  BOOST_CHECK(!f.store.check_pull(0, 2));
  BOOST_CHECK(f.store.check_pull(0, 3) == errc::clock_gap);
}

BOOST_AUTO_TEST_SUITE_END()
