// Atomic pushes in one sync store (docs/atomic-pushes.md): a departed
// worker's clock that is not whole here is dropped; one that is whole
// stays tentative until the cluster's cut keeps it or takes it out, and
// taking it out leaves exactly the state of a run without it, optimizer
// state included.
#define BOOST_TEST_MODULE atomic_push_tests
#include <boost/test/unit_test.hpp>

#include <vector>

#include "actors/server/server_optimizer.hpp"
#include "actors/server/shard_store.hpp"
#include "tests/server/shard_store_fixture.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// A sync store over slices a and b with `hook`, whose rounds are
/// tentative until the cluster's cuts (await_cuts).
struct cut_store {
  shard_store store;
  explicit cut_store(update_fn hook, std::set<uint32_t> workers = {0, 1, 2},
                     bool replica = false)
      : store(*parse_consistency("sync"), std::move(hook)) {
    store.await_cuts(capture_optimizer, step_from_optimizer);
    store.replica(replica);
    store.set_owned({{a, 3}, {b, 2}});
    store.set_workers(workers);
    BOOST_REQUIRE(
        !store.init(init_request{0, 1, {{a, {0.5f, 1, -1}}, {b, {2, 0.25f}}}}));
  }
  void push(uint32_t w, uint64_t clock, float x, uint32_t part = 0,
            uint32_t parts = 1) {
    // worker w's gradient differs per element, so sums in another order
    // or a lost part would show
    std::vector<float> va{x, x * 0.5f + w, -x}, vb{x + 0.125f * w, 3 * x};
    push_request req{w, clock, 1, part, parts, {}};
    if (parts == 1 || part == 0)
      req.slices.push_back({a, va});
    if (parts == 1 || part == 1)
      req.slices.push_back({b, vb});
    BOOST_REQUIRE(store.push(req));
  }
  std::vector<float> values() {
    auto r = store.read({a, b});
    BOOST_REQUIRE(r);
    auto out = r->slices[0].values;
    out.insert(out.end(), r->slices[1].values.begin(),
               r->slices[1].values.end());
    return out;
  }
};

optimizer_settings momentum() {
  optimizer_settings x;
  x.name = "momentum";
  x.lr = 0.1f;
  x.momentum = 0.9f;
  return x;
}

/// Worker 2, back, pushes its clock 0 (4) anew: taken, not a duplicate;
/// with worker 1's (1) and worker 0's (1, pushed before), 6 everywhere.
void pushes_clock_0_anew(fixture& f) {
  auto again = f.push(2, 0, 4.0f);
  BOOST_REQUIRE(again);
  BOOST_CHECK(!again->duplicate);
  BOOST_REQUIRE(f.push(1, 0, 1.0f));
  BOOST_CHECK_EQUAL(f.value_of(a), 6.0f);
  BOOST_CHECK_EQUAL(f.value_of(b), 6.0f);
}

void check_same(const std::vector<float>& got, const std::vector<float>& want) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_CHECK_EQUAL(got[i], want[i]); // bit for bit: the same sums
}

} // namespace

BOOST_AUTO_TEST_SUITE(atomic_push_tests)

BOOST_AUTO_TEST_CASE(a_leavers_unfinished_clock_is_dropped_from_its_round) {
  // Worker 2 sent part 0 of 2 of clock 0 (slice a) and died: the clock is
  // not whole here, so no server keeps it, and slice a must not hold it
  // while slice b does not.
  fixture f{"sync"};
  f.store.await_cuts(nullptr);
  BOOST_REQUIRE(f.store.push(push_request{2, 0, 1, 0, 2, {{a, {5, 5, 5}}}}));
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  BOOST_REQUIRE(f.push(1, 0, 1.0f));
  f.store.set_workers({0, 1});
  BOOST_CHECK_EQUAL(f.store.version(), 1u);
  BOOST_CHECK_EQUAL(f.value_of(a), 2.0f);
  BOOST_CHECK_EQUAL(f.value_of(b), 2.0f);
  BOOST_CHECK(!f.store.whole_clocks(2).has_value() ||
              *f.store.whole_clocks(2) == 0);
}

BOOST_AUTO_TEST_CASE(a_rank_back_pushes_its_dropped_clock_again) {
  // The same, with the rank back before the round passed: its clock 0
  // starts over, and its new parts are taken, not called duplicates.
  fixture f{"sync"};
  f.store.await_cuts(nullptr);
  BOOST_REQUIRE(f.store.push(push_request{2, 0, 1, 0, 2, {{a, {5, 5, 5}}}}));
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  f.store.set_workers({0, 1});
  f.store.set_workers({0, 1, 2});
  BOOST_CHECK_EQUAL(f.store.clock_of(2), 0u);
  pushes_clock_0_anew(f);
}

BOOST_AUTO_TEST_CASE(a_cut_below_an_applied_round_undoes_it_exactly) {
  // Worker 2's clock 0 was whole here and its round applied; then it died,
  // and elsewhere its clock 0 was not whole: the cut keeps 0 clocks. The
  // store must equal one that never saw worker 2, momentum included, also
  // over the round applied on top meanwhile.
  cut_store s{make_optimizer_fn(momentum())};
  cut_store ref{make_optimizer_fn(momentum()), {0, 1}};
  s.push(2, 0, 4.0f);
  for (auto* x : {&s, &ref}) {
    x->push(0, 0, 1.0f);
    x->push(1, 0, 2.0f);
  }
  BOOST_CHECK(s.store.tentative());
  s.store.set_workers({0, 1}); // worker 2 left
  BOOST_REQUIRE(s.store.whole_clocks(2));
  BOOST_CHECK_EQUAL(*s.store.whole_clocks(2), 1u);
  for (auto* x : {&s, &ref}) { // round 1 meanwhile, without worker 2
    x->push(0, 1, -1.0f);
    x->push(1, 1, 3.0f);
  }
  BOOST_CHECK_EQUAL(s.store.version(), 2u);
  BOOST_CHECK(s.store.tentative()); // worker 2's cut is not known
  BOOST_REQUIRE(s.store.cut(2, 0));
  check_same(s.values(), ref.values());
  for (auto* x : {&s, &ref}) { // and the optimizer state: one more round
    x->push(0, 2, 0.5f);
    x->push(1, 2, 0.25f);
  }
  check_same(s.values(), ref.values());
  s.push(0, 3, 1.0f, 0, 2); // round 2 is final once both begin clock 3
  BOOST_CHECK(s.store.tentative());
  s.push(1, 3, 1.0f, 0, 2);
  BOOST_CHECK(!s.store.tentative());
}

BOOST_AUTO_TEST_CASE(a_cut_that_keeps_the_clock_changes_nothing) {
  cut_store s{make_optimizer_fn(momentum())};
  cut_store ref{make_optimizer_fn(momentum())};
  for (auto* x : {&s, &ref})
    for (uint32_t w = 0; w < 3; ++w)
      x->push(w, 0, 1.0f + w);
  s.store.set_workers({0, 1});
  ref.store.set_workers({0, 1});
  BOOST_REQUIRE(s.store.cut(2, 1));
  check_same(s.values(), ref.values());
  BOOST_CHECK(s.store.tentative()); // 0 and 1 have not begun clock 1: once
  for (auto* x : {&s, &ref}) {      // they do, with worker 2's cut known,
    x->push(0, 1, 1.0f, 0, 2);      // round 0 is final
    x->push(1, 1, 1.0f, 0, 2);
  }
  BOOST_CHECK(!s.store.tentative());
}

BOOST_AUTO_TEST_CASE(live_workers_settle_a_round_by_beginning_the_next) {
  cut_store s{add_update};
  for (uint32_t w = 0; w < 3; ++w)
    s.push(w, 0, 1.0f);
  BOOST_CHECK(s.store.tentative());
  s.push(0, 1, 1.0f, 0, 2);
  s.push(1, 1, 1.0f, 0, 2);
  BOOST_CHECK(s.store.tentative()); // worker 2 has not begun clock 1
  s.push(2, 1, 1.0f, 0, 2);
  BOOST_CHECK(!s.store.tentative());
  BOOST_CHECK(!s.store.cut(2, 0)); // a live worker is not cut
}

BOOST_AUTO_TEST_CASE(a_cut_takes_a_leavers_whole_clock_out_of_an_open_round) {
  // Worker 2's clock 0 is whole here, the round still open (worker 1 is
  // slow), and the cut keeps nothing: the round goes on without it, and a
  // rank back before the round passed pushes clock 0 anew.
  fixture f{"sync"};
  f.store.await_cuts(nullptr);
  BOOST_REQUIRE(f.push(2, 0, 5.0f));
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  f.store.set_workers({0, 1});
  BOOST_REQUIRE(f.store.cut(2, 0));
  f.store.set_workers({0, 1, 2});
  pushes_clock_0_anew(f);
}

BOOST_AUTO_TEST_CASE(without_cuts_a_leavers_clock_is_kept_as_it_came) {
  // --server.atomic-pushes off: one running sum per round, nothing stays
  // tentative, and a leaver's clock stays in its round, whole or not.
  fixture f{"sync"};
  BOOST_REQUIRE(f.store.push(push_request{1, 0, 1, 0, 2, {{b, {3, 3}}}}));
  BOOST_REQUIRE(f.push(2, 0, 5.0f));
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  f.store.set_workers({0, 2}); // worker 1 left with 1 part of 2
  BOOST_CHECK(!f.store.tentative());
  BOOST_CHECK_EQUAL(f.value_of(a), 6.0f);
  BOOST_CHECK_EQUAL(f.value_of(b), 9.0f);
  BOOST_CHECK(!f.store.cut(1, 0)); // nothing to cut
}

BOOST_AUTO_TEST_CASE(without_cuts_a_rank_back_does_not_add_a_part_twice) {
  // Worker 2 left with part 0 of 2 of clock 0 in the running sum, and comes
  // back before the round passed: its part 0 again is a duplicate, its part
  // 1 completes the clock.
  fixture f{"sync"};
  BOOST_REQUIRE(f.store.push(push_request{2, 0, 1, 0, 2, {{a, {5, 5, 5}}}}));
  f.store.set_workers({0, 1});
  f.store.set_workers({0, 1, 2});
  auto again = f.store.push(push_request{2, 0, 1, 0, 2, {{a, {5, 5, 5}}}});
  BOOST_REQUIRE(again);
  BOOST_CHECK(again->duplicate);
  BOOST_REQUIRE(f.store.push(push_request{2, 0, 1, 1, 2, {{b, {5, 5}}}}));
  BOOST_REQUIRE(f.push(0, 0, 1.0f));
  BOOST_REQUIRE(f.push(1, 0, 1.0f));
  BOOST_CHECK_EQUAL(f.value_of(a), 7.0f);
  BOOST_CHECK_EQUAL(f.value_of(b), 7.0f);
}

BOOST_AUTO_TEST_CASE(a_round_sums_its_parts_in_rank_order_whatever_came_first) {
  // Primary and backup see the parts in their own orders and must hold
  // the same bits: the sum is (p0 + p1) + p2 in every order of arrival,
  // whether it was added up as the parts came or at the end. With these
  // values another order gives another float: (1e8 + 1) - 1e8 = 0, but
  // (1e8 - 1e8) + 1 = 1.
  const float p[3] = {1e8f, 1.0f, -1e8f};
  std::vector<std::vector<uint32_t>> orders{{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                            {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (auto& order : orders) {
    fixture f{"sync"};
    f.store.await_cuts(nullptr);
    for (auto w : order)
      BOOST_REQUIRE(f.push(w, 0, p[w]));
    BOOST_CHECK_EQUAL(f.store.version(), 1u);
    BOOST_CHECK_EQUAL(f.value_of(a), 0.0f); // (1e8 + 1) - 1e8 in floats
    // and once more with a part named twice in its push (added to the
    // part after it arrived): still the rank order's sum
    fixture g{"sync"};
    g.store.await_cuts(nullptr);
    for (auto w : order)
      BOOST_REQUIRE(g.store.push(push_request{
          w, 0, 1, 0, 1, {{a, {p[w], 0, 0}}, {a, {p[w], 0, 0}}, {b, {1, 1}}}}));
    BOOST_CHECK_EQUAL(g.value_of(a), 0.0f); // (2e8 + 2) - 2e8 in floats
  }
}

BOOST_AUTO_TEST_CASE(a_replica_applies_a_round_once_it_is_settled) {
  // A backup's replica takes no undo image: it holds round 0 back until
  // every contributor began clock 1, then applies it for good, and ends
  // with the primary's bits, optimizer state included.
  cut_store p{make_optimizer_fn(momentum())};
  cut_store r{make_optimizer_fn(momentum()), {0, 1, 2}, true};
  auto before = r.values();
  for (auto* x : {&p, &r})
    for (uint32_t w = 0; w < 3; ++w)
      x->push(w, 0, 1.0f + w);
  BOOST_CHECK(p.store.tentative());
  BOOST_CHECK(!r.store.tentative());
  BOOST_CHECK_EQUAL(r.store.deferred(), 1u);
  BOOST_CHECK_EQUAL(r.store.version(), p.store.version()); // rounds closed
  check_same(r.values(), before);
  BOOST_CHECK_EQUAL(r.store.snapshot().rounds, 0u); // what its slices hold
  for (auto* x : {&p, &r})
    for (uint32_t w = 0; w < 3; ++w)
      x->push(w, 1, 0.5f * w, 0, 2);
  BOOST_CHECK_EQUAL(r.store.deferred(), 0u);
  check_same(r.values(), p.values());
  for (auto* x : {&p, &r})
    for (uint32_t w = 0; w < 3; ++w)
      x->push(w, 1, -1.0f, 1, 2);
  for (auto* x : {&p, &r})
    for (uint32_t w = 0; w < 3; ++w)
      x->push(w, 2, 2.0f);
  BOOST_CHECK_EQUAL(r.store.deferred(), 1u); // round 2 waits for clock 3
  r.store.replica(false);                    // promoted: round 2 applied
  BOOST_CHECK_EQUAL(r.store.deferred(), 0u);
  BOOST_CHECK(r.store.tentative());
  check_same(r.values(), p.values());
}

BOOST_AUTO_TEST_CASE(two_workers_step_from_the_image_with_the_replicas_bits) {
  // With two workers a primary adds the two pushes inside the optimizer's
  // step (from its undo image, out of place); its replica sums them first
  // and steps in place. The same bits, and a cut undoes the primary's
  // round exactly: it equals a store that never had worker 1's last push.
  cut_store p{make_optimizer_fn(momentum()), {0, 1}};
  cut_store r{make_optimizer_fn(momentum()), {0, 1}, true};
  for (uint64_t c = 0; c < 3; ++c)
    for (auto* x : {&p, &r})
      for (uint32_t w = 0; w < 2; ++w)
        x->push(w, c, 0.75f * c - w + 0.1f);
  r.store.replica(false);
  check_same(r.values(), p.values());
  // q: two rounds of both, then worker 1's clock 2 is cut; q_ref: the
  // same without that push.
  cut_store q{make_optimizer_fn(momentum()), {0, 1}};
  cut_store q_ref{make_optimizer_fn(momentum()), {0, 1}};
  for (uint64_t c = 0; c < 2; ++c)
    for (auto* x : {&q, &q_ref})
      for (uint32_t w = 0; w < 2; ++w)
        x->push(w, c, 0.5f * c + w);
  q.push(1, 2, 9.0f); // worker 1's clock 2, whole here, not elsewhere
  q.push(0, 2, 1.0f);
  q.store.set_workers({0});
  BOOST_REQUIRE(q.store.cut(1, 2));
  q_ref.store.set_workers({0});
  q_ref.push(0, 2, 1.0f);
  check_same(q.values(), q_ref.values());
}

BOOST_AUTO_TEST_CASE(a_replica_takes_a_cut_part_out_before_applying) {
  // As a_cut_below_an_applied_round_undoes_it_exactly, on a replica: round
  // 0 with worker 2's push is held back, the cut takes the push out, and
  // the replica equals a store that never saw worker 2, without an image.
  cut_store r{make_optimizer_fn(momentum()), {0, 1, 2}, true};
  cut_store ref{make_optimizer_fn(momentum()), {0, 1}};
  r.push(2, 0, 4.0f);
  for (auto* x : {&r, &ref}) {
    x->push(0, 0, 1.0f);
    x->push(1, 0, 2.0f);
  }
  r.store.set_workers({0, 1});
  for (auto* x : {&r, &ref}) {
    x->push(0, 1, -1.0f);
    x->push(1, 1, 3.0f);
  }
  BOOST_CHECK_EQUAL(r.store.deferred(), 2u); // worker 2's cut not known
  BOOST_REQUIRE(r.store.cut(2, 0));
  BOOST_CHECK(!r.store.tentative());
  BOOST_CHECK_EQUAL(r.store.deferred(), 1u); // round 1: not begun clock 2
  for (auto* x : {&r, &ref}) {
    x->push(0, 2, 0.5f);
    x->push(1, 2, 0.25f);
  }
  r.store.replica(false);
  check_same(r.values(), ref.values());
}

BOOST_AUTO_TEST_CASE(a_promoted_replica_can_still_undo_a_held_round) {
  // Promoted with round 0 (worker 2's push in it) held back: the round is
  // applied over an undo image, as the dead primary held it, and a cut
  // that then takes worker 2 out undoes it exactly.
  cut_store r{make_optimizer_fn(momentum()), {0, 1, 2}, true};
  cut_store p{make_optimizer_fn(momentum())};
  cut_store ref{make_optimizer_fn(momentum()), {0, 1}};
  for (auto* x : {&r, &p})
    x->push(2, 0, 4.0f);
  for (auto* x : {&r, &p, &ref}) {
    x->push(0, 0, 1.0f);
    x->push(1, 0, 2.0f);
  }
  r.store.set_workers({0, 1});
  r.store.replica(false);
  check_same(r.values(), p.values());
  BOOST_REQUIRE(r.store.cut(2, 0));
  check_same(r.values(), ref.values());
  for (auto* x : {&r, &ref}) { // and the optimizer state
    x->push(0, 1, 0.5f);
    x->push(1, 1, 0.25f);
  }
  check_same(r.values(), ref.values());
}

BOOST_AUTO_TEST_SUITE_END()
