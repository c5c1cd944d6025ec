// What a shard server's store takes from an Init or a Push: refusals and
// the checks asked first, pushes cut anew under newer views, and the
// update hook run over the slices side by side.
#define BOOST_TEST_MODULE shard_store_push_tests
#include <boost/test/unit_test.hpp>

#include <map>
#include <string>
#include <vector>

#include "actors/server/server_optimizer.hpp"
#include "actors/server/shard_store.hpp"
#include "messages/errors.hpp"
#include "tests/server/shard_store_fixture.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

const slice_id c3{3, 0};

/// Async or sync store with slices a, b, c3 (one float each, zeros) and
/// workers 0 and 1.
shard_store three_slices(const std::string& mode) {
  shard_store s{*parse_consistency(mode)};
  s.set_owned({{a, 1}, {b, 1}, {c3, 1}});
  s.set_workers({0, 1});
  BOOST_REQUIRE(!s.init(init_request{0, 1, {{a, {0}}, {b, {0}}, {c3, {0}}}}));
  return s;
}

push_request part_of(uint32_t w, uint64_t clock, uint64_t epoch, uint32_t part,
                     uint32_t parts, std::vector<slice_id> ids) {
  push_request r{w, clock, epoch, part, parts, {}};
  for (auto& id : ids)
    r.slices.push_back(slice_data{id, {1.0f}});
  return r;
}

float one(shard_store& s, slice_id id) {
  auto r = s.read({id});
  BOOST_REQUIRE(r);
  return r->slices[0].values[0];
}

} // namespace
BOOST_AUTO_TEST_SUITE(shard_store_push_tests)

BOOST_AUTO_TEST_CASE(bad_pushes_are_refused_and_change_nothing) {
  fixture f{"async"};
  BOOST_REQUIRE(f.push(1, 0, 1.0f)); // worker 1 has pushed: no more gaps
  BOOST_CHECK(f.push(1, 2, 1.0f).error() == errc::clock_gap);
  BOOST_CHECK_EQUAL(f.value_of(a), 1.0f);
  BOOST_CHECK(f.push(7, 0, 1.0f).error() == errc::not_a_member);
  BOOST_CHECK(
      f.store.push(push_request{0, 0, 1, 0, 1, {{{9, 0}, {1.0f}}}}).error() ==
      errc::slice_not_owned);
  // One good slice and one of the wrong length: nothing is applied.
  BOOST_CHECK(
      f.store
          .push(push_request{0, 0, 1, 0, 1, {{a, {1, 1, 1}}, {b, {1, 1, 1}}}})
          .error() == errc::bad_shape);
  BOOST_CHECK_EQUAL(f.value_of(a), 1.0f);
  BOOST_CHECK_EQUAL(f.store.version(), 1u);
}

BOOST_AUTO_TEST_CASE(check_push_says_what_push_would_do_and_changes_nothing) {
  // A server with several stores asks each with check_push before any
  // takes a part: its answer must be push's, and asking must change
  // nothing.
  auto views = [](const push_request& r) {
    std::vector<slice_view> v;
    for (auto& x : r.slices)
      v.push_back(slice_view{x.id, x.values.data(), x.values.size()});
    return v;
  };
  auto both = [](float x) {
    return std::vector<slice_data>{{a, {x, x, x}}, {b, {x, x}}};
  };
  fixture f{"async"};
  shard_store cold{*parse_consistency("async")}; // slices not initialised
  cold.set_owned({{a, 3}, {b, 2}});
  cold.set_workers({0});
  struct probe {
    shard_store* store;
    push_request req;
    errc refused; // errc{} if taken or dropped
    bool duplicate;
  };
  std::vector<probe> probes{
      {&f.store, {1, 0, 1, 0, 1, both(1)}, errc{}, false},
      {&f.store, {1, 0, 1, 0, 1, both(1)}, errc{}, true},
      {&f.store, {1, 2, 1, 0, 1, both(1)}, errc::clock_gap, false},
      {&f.store, {7, 0, 1, 0, 1, both(1)}, errc::not_a_member, false},
      {&f.store,
       {1, 1, 1, 0, 1, {{{9, 0}, {1}}}},
       errc::slice_not_owned,
       false},
      {&f.store,
       {1, 1, 1, 0, 1, {{a, {1, 1, 1}}, {b, {1, 1, 1}}}},
       errc::bad_shape,
       false},
      {&f.store,
       {1, shard_store::max_clock + 1, 1, 0, 1, both(1)},
       errc::malformed_message,
       false},
      {&cold, {0, 0, 1, 0, 1, both(1)}, errc::unknown_key, false},
      {&f.store, {1, 1, 1, 0, 1, both(1)}, errc{}, false},
  };
  for (size_t i = 0; i < probes.size(); ++i) {
    auto& p = probes[i];
    auto v = views(p.req);
    auto before = f.value_of(a);
    auto first = p.store->check_push(p.req, v);
    auto again = p.store->check_push(p.req, v); // asking changed nothing
    BOOST_CHECK_EQUAL(f.value_of(a), before);
    auto took = p.store->push(p.req, v);
    if (p.refused != errc{}) {
      BOOST_CHECK_MESSAGE(!first && first.error() == p.refused && !again &&
                              again.error() == p.refused && !took &&
                              took.error() == p.refused,
                          "probe " << i << ": not refused as push refuses");
    } else {
      BOOST_REQUIRE_MESSAGE(first && again && took, "probe " << i);
      BOOST_CHECK_MESSAGE(*first == p.duplicate && *again == p.duplicate &&
                              took->duplicate == p.duplicate,
                          "probe " << i << ": duplicate told otherwise");
    }
  }
  BOOST_CHECK_EQUAL(f.value_of(a), 2.0f); // clocks 0 and 1 of worker 1
}

BOOST_AUTO_TEST_CASE(check_init_says_what_init_would_do_and_changes_nothing) {
  // A server with several stores asks each with check_init before any
  // takes its part of an Init.
  shard_store s{*parse_consistency("async")};
  s.set_owned({{a, 3}, {b, 2}});
  s.set_workers({0});
  struct probe {
    init_request req;
    errc refused; // errc{} if taken (or kept out: first values stay)
  };
  std::vector<probe> probes{
      {{0, 1, {{{9, 0}, {1}}}}, errc::slice_not_owned},
      {{0, 1, {{a, {1, 1, 1}}, {b, {1, 1, 1}}}}, errc::bad_shape},
      {{0, 1, {{a, {4, 4, 4}}, {b, {4, 4}}}}, errc{}},
      {{0, 1, {{a, {5, 5, 5}}, {b, {5, 5}}}}, errc{}},
  };
  for (size_t i = 0; i < probes.size(); ++i) {
    auto& p = probes[i];
    bool ready = s.initialised({a, b});
    auto first = s.check_init(p.req);
    BOOST_CHECK_EQUAL(s.initialised({a, b}), ready); // asking changed nothing
    auto took = s.init(p.req);
    if (p.refused != errc{})
      BOOST_CHECK_MESSAGE(first == p.refused && took == p.refused,
                          "probe " << i << ": not refused as init refuses");
    else
      BOOST_CHECK_MESSAGE(!first && !took, "probe " << i);
  }
  auto r = s.read({a});
  BOOST_REQUIRE(r);
  BOOST_CHECK_EQUAL(r->slices[0].values[0], 4.0f); // the first Init's
}

BOOST_AUTO_TEST_CASE(
    a_push_cut_anew_under_a_newer_view_counts_each_slice_once) {
  // Worker 0's push for clock 0 was cut in 2 parts under view 1; part 0
  // (slice a) arrived, then a server died and the push came again under
  // view 2, cut in 3 parts with another layout. Part numbers alone took
  // the new part 0 for a duplicate (b lost) and added a twice.
  for (auto mode : {"async", "sync"}) {
    auto s = three_slices(mode);
    BOOST_REQUIRE(s.push(part_of(0, 0, 1, 0, 2, {a})));
    auto r0 = s.push(part_of(0, 0, 2, 0, 3, {b}));
    BOOST_REQUIRE(r0);
    BOOST_CHECK_MESSAGE(!r0->duplicate, mode);
    BOOST_REQUIRE(s.push(part_of(0, 0, 2, 1, 3, {a})));
    BOOST_CHECK_EQUAL(s.clock_of(0), 0u); // 2 of the new cut's 3 parts
    BOOST_REQUIRE(s.push(part_of(0, 0, 2, 2, 3, {c3})));
    BOOST_CHECK_EQUAL(s.clock_of(0), 1u);
    // An older cut's part arriving after the newer cut changes nothing.
    auto late = s.push(part_of(0, 0, 1, 1, 2, {b, c3}));
    BOOST_REQUIRE(late);
    BOOST_CHECK(late->duplicate);
    if (std::string{mode} == "sync") // worker 1's push ends the round
      BOOST_REQUIRE(s.push(part_of(1, 0, 2, 0, 1, {})));
    for (auto id : {a, b, c3})
      BOOST_CHECK_MESSAGE(one(s, id) == 1.0f,
                          mode << ": slice " << id.key << " is " << one(s, id));
    BOOST_CHECK(s.between_rounds());
  }
}

BOOST_AUTO_TEST_CASE(a_copy_taken_mid_clock_treats_a_new_cut_as_the_original) {
  // A backup copied (or a checkpoint taken) while worker 0's clock 0 was
  // half in: the copy must know the cut and the slices taken, or a push
  // resent under a newer view diverges there (b lost, a twice).
  auto s = three_slices("async");
  BOOST_REQUIRE(s.push(part_of(0, 0, 1, 0, 2, {a})));
  auto snap = s.snapshot();
  auto t = three_slices("async"); // a fresh copy: same values, then state
  std::map<slice_id, const slice_snapshot*> by_id;
  for (auto& x : snap.slices)
    by_id[x.id] = &x;
  t.set_owned({}); // values come from the snapshot
  t.set_owned({{a, 1}, {b, 1}, {c3, 1}});
  BOOST_REQUIRE_EQUAL(t.restore(snap.version, snap.rounds, snap.workers, by_id),
                      3u);
  for (auto* st : {&s, &t}) {
    BOOST_REQUIRE(st->push(part_of(0, 0, 2, 0, 3, {b})));
    BOOST_REQUIRE(st->push(part_of(0, 0, 2, 1, 3, {a})));
    BOOST_REQUIRE(st->push(part_of(0, 0, 2, 2, 3, {c3})));
    BOOST_CHECK_EQUAL(st->clock_of(0), 1u);
    for (auto id : {a, b, c3})
      BOOST_CHECK_MESSAGE(one(*st, id) == 1.0f, (st == &s ? "original" : "copy")
                                                    << ": slice " << id.key
                                                    << " is " << one(*st, id));
  }
}

BOOST_AUTO_TEST_CASE(an_older_cuts_part_after_a_newer_one_is_a_duplicate) {
  auto s = three_slices("async");
  BOOST_REQUIRE(s.push(part_of(0, 0, 2, 0, 2, {a, b})));
  auto old = s.push(part_of(0, 0, 1, 1, 3, {c3}));
  BOOST_REQUIRE(old);
  BOOST_CHECK(old->duplicate);
  BOOST_CHECK_EQUAL(one(s, c3), 0.0f);
  BOOST_REQUIRE(s.push(part_of(0, 0, 2, 1, 2, {c3})));
  BOOST_CHECK_EQUAL(s.clock_of(0), 1u);
  for (auto id : {a, b, c3})
    BOOST_CHECK_EQUAL(one(s, id), 1.0f);
}
BOOST_AUTO_TEST_CASE(the_first_init_wins_and_uninitialised_slices_wait) {
  shard_store s{consistency{}};
  s.set_owned({{a, 2}});
  s.set_workers({0});
  BOOST_CHECK(!s.initialised({a}));
  BOOST_CHECK(s.push(push_request{0, 0, 1, 0, 1, {{a, {1, 1}}}}).error() ==
              errc::unknown_key);
  BOOST_REQUIRE(!s.init(init_request{0, 1, {{a, {5, 6}}}}));
  BOOST_REQUIRE(!s.init(init_request{1, 1, {{a, {7, 8}}}}));
  BOOST_CHECK(s.initialised({a}));
  BOOST_CHECK(s.read({a})->slices[0].values == std::vector<float>({5, 6}));
  BOOST_CHECK(s.init(init_request{0, 1, {{a, {1}}}}) == errc::bad_shape);
}

BOOST_AUTO_TEST_CASE(the_update_hook_sees_each_sync_round_once) {
  int calls = 0;
  uint32_t seen = 0;
  shard_store s{consistency{}, [&](slice_id, std::vector<float>& v,
                                   const float* sum, uint32_t contributors) {
                  ++calls;
                  seen = contributors;
                  for (size_t i = 0; i < v.size(); ++i)
                    v[i] -= 0.5f * sum[i] / float(contributors);
                }};
  s.set_owned({{a, 1}});
  s.set_workers({0, 1});
  BOOST_REQUIRE(!s.init(init_request{0, 1, {{a, {10}}}}));
  BOOST_REQUIRE(s.push(push_request{0, 0, 1, 0, 1, {{a, {2}}}}));
  BOOST_REQUIRE(s.push(push_request{1, 0, 1, 0, 1, {{a, {4}}}}));
  BOOST_CHECK_EQUAL(calls, 1);
  BOOST_CHECK_EQUAL(seen, 2u);
  BOOST_CHECK_EQUAL(s.read({a})->slices[0].values[0], 10.0f - 1.5f);
}

namespace {

/// Rounds of 2 workers over 12 slices of 64 KiB with a momentum
/// optimizer, each slice's loop run by `loop`; the slices' values after.
std::vector<std::vector<float>> train_slices(const std::string& mode,
                                             loop_fn loop) {
  optimizer_settings opt;
  opt.name = "momentum";
  opt.lr = 0.1f;
  shard_store s{*parse_consistency(mode), make_update_fn(opt)};
  s.set_loop(std::move(loop));
  std::map<slice_id, uint32_t> owned;
  std::vector<slice_data> zeros;
  for (uint64_t k = 0; k < 12; ++k) {
    owned[slice_id{k, 0}] = 16384 + uint32_t(k);
    zeros.push_back(
        slice_data{slice_id{k, 0}, std::vector<float>(16384 + k, 0.5f)});
  }
  s.set_owned(owned);
  s.set_workers({0, 1});
  BOOST_REQUIRE(!s.init(init_request{0, 1, zeros}));
  for (uint64_t clock = 0; clock < 5; ++clock)
    for (uint32_t w = 0; w < 2; ++w) {
      auto grads = zeros;
      for (auto& g : grads)
        for (size_t i = 0; i < g.values.size(); ++i)
          g.values[i] = float((i * 7 + g.id.key * 3 + clock + w) % 11) - 5;
      BOOST_REQUIRE(s.push(push_request{w, clock, 1, 0, 1, grads}));
    }
  std::vector<slice_id> ids;
  for (auto& [id, n] : owned)
    ids.push_back(id);
  auto r = s.read(ids);
  BOOST_REQUIRE(r);
  std::vector<std::vector<float>> out;
  for (auto& x : r->slices)
    out.push_back(x.values);
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(slices_updated_side_by_side_end_as_updated_one_by_one) {
  auto pool = loop_on(std::make_shared<helper_pool>(2));
  for (auto mode : {"sync", "async", "ssp:1"}) {
    auto serial = train_slices(mode, run_serially);
    auto shared = train_slices(mode, pool);
    BOOST_REQUIRE_EQUAL(serial.size(), 12u);
    for (size_t k = 0; k < serial.size(); ++k)
      BOOST_CHECK_MESSAGE(serial[k] == shared[k], mode << ": slice " << k);
    BOOST_CHECK(serial[0] != std::vector<float>(16384, 0.5f)); // trained
  }
  // Whether the helpers took items depends on when the OS ran them;
  // helper_pool_test shows that they do.
}

BOOST_AUTO_TEST_CASE(a_push_naming_a_slice_twice_is_added_one_by_one) {
  // Two items on one slice must not run at once: the store runs such a
  // loop serially, so both additions land.
  auto pool = loop_on(std::make_shared<helper_pool>(2));
  for (auto mode : {"sync", "async"}) {
    shard_store s{*parse_consistency(mode)};
    s.set_loop(pool);
    s.set_owned({{a, 4096}});
    s.set_workers({0});
    BOOST_REQUIRE(!s.init(init_request{0, 1, {{a, std::vector<float>(4096)}}}));
    BOOST_REQUIRE(s.push(push_request{0,
                                      0,
                                      1,
                                      0,
                                      1,
                                      {{a, std::vector<float>(4096, 1.0f)},
                                       {a, std::vector<float>(4096, 2.0f)}}}));
    auto r = s.read({a});
    BOOST_REQUIRE(r);
    BOOST_CHECK(r->slices[0].values == std::vector<float>(4096, 3.0f));
  }
}
BOOST_AUTO_TEST_SUITE_END()
