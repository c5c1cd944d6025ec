// Atomic pushes in one async or ssp store (docs/atomic-pushes.md): a push
// is held until its worker says every server acknowledged it (the `acked`
// of its later Push or Pull), or until the cluster's cut of the departed
// worker keeps it; a cut drops what it does not keep, a leaver's clock not
// whole here leaves at once, ssp's reads count applied clocks only, and a
// snapshot carries the held pushes to a restored store (a late backup).
#define BOOST_TEST_MODULE atomic_push_async_tests
#include <boost/test/unit_test.hpp>

#include <string>

#include "actors/server/shard_store.hpp"
#include "tests/server/shard_store_fixture.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// The fixture's store (slices a and b at 0, workers 0, 1, 2), awaiting
/// cuts.
struct held_fixture : fixture {
  explicit held_fixture(const std::string& mode) : fixture(mode) {
    store.await_cuts(nullptr);
  }
  /// Worker w's push of `clock` adding x everywhere, saying that every
  /// server acknowledged its pushes below `acked`.
  caf::expected<push_reply> push_acked(uint32_t w, uint64_t clock, float x,
                                       uint64_t acked, uint32_t part = 0,
                                       uint32_t parts = 1) {
    push_request req{w, clock, 1, part, parts, {{a, {x, x, x}}, {b, {x, x}}}};
    req.acked = acked;
    return store.push(req);
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(async_holds_a_push_until_its_worker_acks_it) {
  held_fixture f{"async"};
  BOOST_REQUIRE(f.push_acked(0, 0, 1.0f, 0));
  BOOST_CHECK_EQUAL(f.value_of(a), 0.0f); // held
  BOOST_CHECK_EQUAL(f.store.held(), 1u);
  BOOST_REQUIRE(f.push_acked(0, 1, 2.0f, 1)); // clock 0 acknowledged
  BOOST_CHECK_EQUAL(f.value_of(a), 1.0f);
  BOOST_CHECK_EQUAL(f.value_of(b), 1.0f);
  // A pull says clock 1 was acknowledged too; saying it again changes
  // nothing (the server forwards only a change to its backup).
  BOOST_CHECK(f.store.pulled(0, 2, 2));
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f);
  BOOST_CHECK(!f.store.pulled(0, 2, 2));
  BOOST_CHECK_EQUAL(f.store.held(), 0u);
}

BOOST_AUTO_TEST_CASE(an_acked_above_the_clocks_whole_here_applies_only_those) {
  held_fixture f{"async"};
  BOOST_REQUIRE(f.push_acked(0, 0, 1.0f, 0));
  BOOST_REQUIRE(f.push_acked(0, 1, 2.0f, 0, 0, 2)); // part 0 of 2
  BOOST_CHECK(f.store.pulled(0, 2, 9));             // a worker's error
  BOOST_CHECK_EQUAL(f.value_of(a), 1.0f);           // clock 1 is not whole
  BOOST_REQUIRE(f.push_acked(0, 1, 2.0f, 9, 1, 2));
  BOOST_CHECK_EQUAL(f.value_of(a), 1.0f); // whole now, acked by the next
  BOOST_CHECK(f.store.pulled(0, 2, 2));
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f);
}

BOOST_AUTO_TEST_CASE(a_duplicates_acked_counts) {
  held_fixture f{"async"};
  BOOST_REQUIRE(f.push_acked(1, 0, 4.0f, 0));
  auto again = f.push_acked(1, 0, 4.0f, 1); // a resend, acknowledged since
  BOOST_REQUIRE(again);
  BOOST_CHECK(again->duplicate);
  BOOST_CHECK_EQUAL(f.value_of(a), 4.0f); // once
}

BOOST_AUTO_TEST_CASE(a_cut_applies_the_held_clocks_it_keeps_and_drops_others) {
  held_fixture f{"async"};
  BOOST_REQUIRE(f.push_acked(0, 0, 1.0f, 0));
  BOOST_REQUIRE(f.push_acked(0, 1, 2.0f, 0));
  BOOST_REQUIRE(f.push_acked(0, 2, 4.0f, 0));
  BOOST_REQUIRE(f.push_acked(1, 0, 8.0f, 0));
  f.store.set_workers({1, 2});
  BOOST_REQUIRE(f.store.whole_clocks(0));
  BOOST_CHECK_EQUAL(*f.store.whole_clocks(0), 3u);
  BOOST_CHECK_EQUAL(f.value_of(a), 0.0f); // nothing of 0's applied yet
  BOOST_CHECK(f.store.cut(0, 2));         // another server had 2 whole
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f);
  BOOST_CHECK_EQUAL(f.value_of(b), 3.0f);
  BOOST_CHECK_EQUAL(f.store.held(), 1u); // worker 1's clock 0 only
  // Worker 0 back under its rank starts at the cut and pushes clock 2
  // again: taken once, when acknowledged.
  f.store.set_workers({0, 1, 2});
  BOOST_CHECK_EQUAL(f.store.clock_of(0), 2u);
  auto again = f.push_acked(0, 2, 4.0f, 2);
  BOOST_REQUIRE(again);
  BOOST_CHECK(!again->duplicate);
  BOOST_CHECK(f.store.pulled(0, 3, 3));
  BOOST_CHECK_EQUAL(f.value_of(a), 7.0f);
}

BOOST_AUTO_TEST_CASE(a_leavers_clock_not_whole_here_leaves_at_once) {
  held_fixture f{"async"};
  BOOST_REQUIRE(f.push_acked(0, 0, 1.0f, 0));
  BOOST_REQUIRE(f.push_acked(0, 1, 2.0f, 1, 0, 2)); // part 0 of 2
  f.store.set_workers({1, 2});
  BOOST_CHECK_EQUAL(f.store.held(), 0u); // clock 0 applied, 1 dropped
  BOOST_CHECK_EQUAL(f.value_of(a), 1.0f);
  BOOST_REQUIRE(f.store.whole_clocks(0));
  BOOST_CHECK_EQUAL(*f.store.whole_clocks(0), 1u);
  BOOST_CHECK(f.store.cut(0, 1));
  BOOST_CHECK_EQUAL(f.value_of(a), 1.0f);
}

BOOST_AUTO_TEST_CASE(without_cuts_async_applies_a_push_on_arrival) {
  fixture f{"async"};
  push_request req{0, 0, 1, 0, 1, {{a, {1, 1, 1}}, {b, {1, 1}}}};
  BOOST_REQUIRE(f.store.push(req));
  BOOST_CHECK_EQUAL(f.value_of(a), 1.0f);
  BOOST_CHECK(!f.store.pulled(0, 1, 0));
  BOOST_CHECK_EQUAL(f.store.held(), 0u);
}

BOOST_AUTO_TEST_CASE(ssp_reads_wait_for_applied_clocks_not_held_ones) {
  held_fixture f{"ssp:1"};
  f.store.set_workers({0, 1});
  for (uint64_t t = 0; t < 3; ++t) // whole here, none acknowledged
    BOOST_REQUIRE(f.push_acked(0, t, 1.0f, 0));
  for (uint64_t t = 0; t < 3; ++t) // acknowledged as it went
    BOOST_REQUIRE(f.push_acked(1, t, 1.0f, t));
  BOOST_CHECK(f.store.pulled(1, 3, 3));
  BOOST_CHECK_EQUAL(f.store.min_clock(), 3u); // whole everywhere here...
  BOOST_CHECK(f.store.readable_at(1));
  BOOST_CHECK(!f.store.readable_at(2)); // ...but worker 0's are not applied
  BOOST_CHECK_EQUAL(f.value_of(a), 3.0f);
  BOOST_CHECK(f.store.pulled(0, 3, 3));
  BOOST_CHECK(f.store.readable_at(4));
  BOOST_CHECK(!f.store.readable_at(5));
  BOOST_CHECK_EQUAL(f.value_of(a), 6.0f);
}

BOOST_AUTO_TEST_CASE(a_snapshot_carries_held_pushes_to_a_restored_store) {
  held_fixture f{"async"};
  BOOST_REQUIRE(f.push_acked(0, 0, 1.0f, 0));
  BOOST_REQUIRE(f.push_acked(0, 1, 2.0f, 1));       // clock 0 applied, 1 held
  BOOST_REQUIRE(f.push_acked(1, 0, 4.0f, 0, 0, 2)); // part 0 of 2
  auto snap = f.store.snapshot();
  std::map<slice_id, const slice_snapshot*> slices;
  for (auto& s : snap.slices)
    slices[s.id] = &s;
  // A late backup: the same layout, then the copy.
  shard_store fresh(*parse_consistency("async"));
  fresh.await_cuts(nullptr);
  fresh.set_owned({{a, 3}, {b, 2}});
  fresh.set_workers({0, 1, 2});
  BOOST_CHECK_EQUAL(
      fresh.restore(snap.version, snap.rounds, snap.workers, slices), 2u);
  BOOST_CHECK_EQUAL(fresh.held(), 2u);
  // Both take the same operations from here on, and agree.
  for (auto* s : {&f.store, &fresh}) {
    BOOST_REQUIRE(s->push(push_request{1, 0, 1, 1, 2, {}, 0})); // part 1
    BOOST_CHECK(s->pulled(0, 2, 2));
    BOOST_CHECK(s->pulled(1, 1, 1));
    auto r = s->read({a, b});
    BOOST_REQUIRE(r);
    BOOST_CHECK_EQUAL(r->slices[0].values[0], 7.0f);
    BOOST_CHECK_EQUAL(r->slices[1].values[1], 7.0f);
    BOOST_CHECK_EQUAL(s->held(), 0u);
  }
}
