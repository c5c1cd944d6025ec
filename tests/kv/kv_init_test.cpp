// Init when a key's initialiser dies before its Init arrived: the kv
// client sends its own in its place. Servers and the scheduler in one
// actor system, workers in another, over loopback.
#define BOOST_TEST_MODULE kv_init_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <vector>

#include <caf/scoped_actor.hpp>

#include "actors/base/machine_id.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"
#include "tests/kv/kv_helpers.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

/// A worker that registers and declares key 1 (n floats) first, so that it
/// is the key's initialiser, but never sends its Init: it dies before.
struct silent_initialiser {
  std::unique_ptr<caf::scoped_actor> self;
  uint32_t rank = 0;

  silent_initialiser(cluster& c, size_t n)
      : self(std::make_unique<caf::scoped_actor>(c.b)) {
    auto sched = c.remote_sched;
    register_reply reg;
    (*self)
        ->request(
            sched, 10s, register_atom_v,
            encode(register_request{
                role::worker, "", 0, 1, {0, machine_id(), ""}, 0, "", "", ""}))
        .receive([&](const frame& f) { BOOST_REQUIRE(!decode(f, reg)); },
                 [](const caf::error& err) { BOOST_FAIL(describe(err)); });
    rank = reg.rank;
    declare_reply dr;
    (*self)
        ->request(sched, 10s, declare_atom_v,
                  encode(declare_request{rank, {key_info{1, n}}}))
        .receive([&](const frame& f) { BOOST_REQUIRE(!decode(f, dr)); },
                 [](const caf::error& err) { BOOST_FAIL(describe(err)); });
    BOOST_REQUIRE_EQUAL(dr.initialiser.size(), 1u); // it declared first
  }

  /// Returns once the scheduler's view satisfies `pred` (10 s at most).
  template <class Pred> static void wait_for_view(cluster& c, Pred pred) {
    for (int i = 0; i < 200; ++i) { // each try a round trip
      cluster_view v;
      c.self->request(c.remote_sched, 10s, view_atom_v)
          .receive([&](const frame& f) { BOOST_REQUIRE(!decode(f, v)); },
                   [](const caf::error& err) { BOOST_FAIL(describe(err)); });
      if (pred(v))
        return;
      c.self->receive(caf::after(std::chrono::milliseconds{50}) >> [] {});
    }
    BOOST_FAIL("the view never came");
  }

  /// Dies, and returns once the scheduler's view no longer has it.
  void die(cluster& c) {
    self.reset();
    wait_for_view(c, [&c](const cluster_view& v) {
      return v.workers.size() == c.workers.size();
    });
  }
};

/// A silent initialiser that registers after the cluster's one worker (so
/// it inherits no rank) and declares key 1 (`n` floats) first.
silent_initialiser silent_after_worker(cluster& c, size_t n) {
  auto joined = c.workers.front()->view(); // takes rank 0 first
  BOOST_REQUIRE_MESSAGE(joined, why(joined));
  silent_initialiser s{c, n};
  BOOST_REQUIRE_NE(s.rank, joined->first); // no rank to inherit
  return s;
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_init_tests)

BOOST_AUTO_TEST_CASE(keys_whose_initialiser_died_before_its_init_are_set) {
  // Dead before the other worker declares: the scheduler makes that one
  // the initialiser.
  {
    cluster c{"async", 1, 1, 16u << 20, add_update, 1000, "auto", 1, 2};
    auto first = silent_after_worker(c, 8);
    first.die(c);
    auto got = c.workers.front()->init(filled(1, 8, 2.5f));
    BOOST_REQUIRE_MESSAGE(got, why(got));
    BOOST_CHECK(all_equal(*got, 2.5f));
  }
  // Dead while the other worker's first pull waits for the values: that
  // worker sends its own Init when the view loses a worker.
  {
    cluster c{"async", 1, 1, 16u << 20, add_update, 1000, "auto", 1, 2};
    auto first = silent_after_worker(c, 8);
    // Key 2 is new, so its declaration changes the view: once the view
    // has it, the scheduler has answered this worker's declaration (key 1:
    // not the initialiser, the silent one is alive) and its pull waits.
    auto xs = filled(1, 8, 2.5f);
    xs.push_back(filled(2, 8, 2.5f).front());
    auto* w = c.workers.front().get();
    auto pending =
        std::async(std::launch::async, [w, xs] { return w->init(xs); });
    first.wait_for_view(
        c, [](const cluster_view& v) { return v.keys.size() == 2; });
    first.die(c);
    auto got = pending.get();
    BOOST_REQUIRE_MESSAGE(got, why(got));
    BOOST_CHECK(all_equal(*got, 2.5f));
  }
}

BOOST_AUTO_TEST_CASE(
    an_initialiser_that_dies_while_our_init_is_sent_is_replaced) {
  // The silent initialiser of key 1 dies once the scheduler has answered
  // this worker's declaration (key 2 is new: this worker initialises it),
  // while this worker's Init of key 2, large, is still on its way: the
  // view that loses a worker comes before the pull that waits for key 1.
  // This worker must send key 1's Init too, or that pull waits in vain.
  constexpr size_t big = size_t{4} << 20; // 16 MiB: tens of ms to send
  cluster c{"async", 1, 1, 16u << 20, add_update, 1u << 20, "auto", 1, 2};
  auto first = silent_after_worker(c, 8);
  auto xs = filled(1, 8, 2.5f);
  xs.push_back(filled(2, big, 1.5f).front());
  auto* w = c.workers.front().get();
  auto pending = std::async(std::launch::async,
                            [w, xs = std::move(xs)] { return w->init(xs); });
  // No pause between looks: the Init of key 2 must still be on its way.
  for (int i = 0;; ++i) {
    BOOST_REQUIRE_MESSAGE(i < 100000, "the declaration never came");
    cluster_view v;
    c.self->request(c.remote_sched, 10s, view_atom_v)
        .receive([&](const frame& f) { BOOST_REQUIRE(!decode(f, v)); },
                 [](const caf::error& err) { BOOST_FAIL(describe(err)); });
    if (v.keys.size() == 2)
      break;
  }
  first.die(c);
  auto got = pending.get();
  BOOST_REQUIRE_MESSAGE(got, why(got));
  BOOST_REQUIRE_EQUAL(got->size(), 2u);
  for (auto& a : *got) {
    BOOST_CHECK_EQUAL(a.values.size(), a.key == 1 ? 8u : big);
    BOOST_CHECK(all_equal({a}, a.key == 1 ? 2.5f : 1.5f));
  }
}

BOOST_AUTO_TEST_CASE(two_open_inits_each_replace_a_dead_initialiser) {
  // Two inits at once, from two senders to the kv client's actor. The
  // client kept one open init: the second's declaration took its place,
  // and its end cleared it. So when the silent initialiser of the first's
  // key 1 died, nothing sent key 1's Init, and the first's pull waited for
  // values that never came, until its timeout.
  cluster c{"async", 1, 1, 16u << 20, add_update, 1000, "auto", 1, 2};
  auto first = silent_after_worker(c, 8);
  auto& w = *c.workers.front();
  caf::scoped_actor other{c.b};
  auto xs = filled(1, 8, 2.5f);
  xs.push_back(filled(2, 8, 1.5f).front());
  auto pending = other->request(w.handle(), 30s, init_atom_v, xs);
  // Key 2 is new: once the view has it, the scheduler has answered the
  // first init's declaration.
  first.wait_for_view(c,
                      [](const cluster_view& v) { return v.keys.size() == 2; });
  auto second = w.init(filled(3, 8, 0.5f));
  BOOST_REQUIRE_MESSAGE(second, why(second));
  first.die(c);
  std::optional<std::vector<named_array>> got;
  pending.receive([&got](std::vector<named_array>& x) { got = std::move(x); },
                  [](caf::error& err) {
                    BOOST_FAIL("the first init failed: " << describe(err));
                  });
  BOOST_REQUIRE(got);
  BOOST_REQUIRE_EQUAL(got->size(), 2u);
  for (auto& a : *got)
    BOOST_CHECK(all_equal({a}, a.key == 1 ? 2.5f : 1.5f));
}

BOOST_AUTO_TEST_CASE(a_cluster_without_servers_refuses_a_declare_at_once) {
  // --cluster.servers=0 is a cluster of pipeline stages alone: a
  // data-parallel worker there hears why at once, rather than waiting for
  // servers that never come.
  cluster c{"sync", 0, 1};
  auto got = c.workers.front()->init(filled(1, 8, 1.0f));
  BOOST_REQUIRE(!got);
  BOOST_CHECK(got.error() == errc::invalid_config);
  BOOST_CHECK_MESSAGE(describe(got.error()).find("--cluster.servers=0") !=
                          std::string::npos,
                      describe(got.error()));
}

BOOST_AUTO_TEST_SUITE_END()
