// The consistency modes as workers see them (sync, ssp, async), and the
// requests a kv client refuses: servers and the scheduler in one actor
// system, workers in another, over loopback. The test orders every step
// by waiting on replies.
#define BOOST_TEST_MODULE kv_modes_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <vector>

#include <caf/scoped_actor.hpp>

#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "tests/kv/kv_helpers.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(kv_modes_tests)

BOOST_AUTO_TEST_CASE(sync_sum_is_exact_and_a_pull_for_t_plus_1_waits) {
  cluster c{"sync", 1, 2};
  init_all(c, 8);
  auto& w0 = c.worker(0);
  auto& w1 = c.worker(1);
  BOOST_REQUIRE(w0.push(0, filled(1, 8, 1.0f)));
  send_pull(c, w0, 1);
  // A later pull from the same worker to the same server is answered
  // after the server saw the first one, which must still wait.
  auto now = w0.pull(0, {1});
  BOOST_REQUIRE(now);
  BOOST_CHECK(all_equal(*now, 0.0f));
  BOOST_CHECK(!pull_answered(c));
  BOOST_REQUIRE(w1.push(0, filled(1, 8, 2.0f))); // the last push
  BOOST_CHECK(all_equal(await_pull(c), 3.0f));
}

BOOST_AUTO_TEST_CASE(ssp_blocks_a_fast_worker_until_the_slowest_catches_up) {
  cluster c{"ssp:1", 1, 2};
  init_all(c, 4);
  auto& w0 = c.worker(0);
  auto& w1 = c.worker(1);
  for (uint64_t t = 0; t < 2; ++t) {
    BOOST_REQUIRE(w0.pull(t, {1})); // 0 and 1 ahead: allowed with s = 1
    BOOST_REQUIRE(w0.push(t, filled(1, 4, 1.0f)));
  }
  send_pull(c, w0, 2); // 2 ahead of the slowest: s + 1
  BOOST_REQUIRE(w0.pull(1, {1}));
  BOOST_CHECK(!pull_answered(c));
  BOOST_REQUIRE(w1.push(0, filled(1, 4, 1.0f)));
  BOOST_CHECK(all_equal(await_pull(c), 3.0f));
}

BOOST_AUTO_TEST_CASE(async_reads_never_wait) {
  cluster c{"async", 2, 2};
  init_all(c, 2500);
  auto& w0 = c.worker(0);
  for (uint64_t t = 0; t < 5; ++t)
    BOOST_REQUIRE(w0.push(t, filled(1, 2500, 1.0f)));
  auto got = w0.pull(5, {1}); // 5 clocks ahead of worker 1: served at once
  BOOST_REQUIRE(got);
  BOOST_CHECK(all_equal(*got, 5.0f));
}

BOOST_AUTO_TEST_CASE(large_arrays_in_parts_over_three_servers_sum_exactly) {
  // Slices of 1000 floats, messages cut at 64 KiB: many parts per server.
  cluster c{"sync", 3, 2, 1u << 16};
  const size_t n = 300000;
  init_all(c, n);
  for (uint64_t t = 0; t < 3; ++t)
    for (auto& w : c.workers)
      BOOST_REQUIRE(w->push(t, filled(1, n, 0.5f)));
  for (auto& w : c.workers) {
    auto got = w->pull(3, {1});
    BOOST_REQUIRE(got);
    BOOST_CHECK(all_equal(*got, 3.0f));
  }
  auto v = c.workers.front()->view();
  BOOST_REQUIRE(v);
  BOOST_CHECK_EQUAL(v->second.servers.size(), 3u);
  BOOST_CHECK_EQUAL(v->second.placement.size(), 300u);
}

BOOST_AUTO_TEST_CASE(undeclared_keys_and_wrong_lengths_are_refused) {
  cluster c{"async", 1, 1};
  init_all(c, 4);
  auto& w = c.worker(0);
  auto unknown = w.push(0, filled(99, 4, 1.0f));
  BOOST_CHECK(unknown.error() == errc::unknown_key);
  // The words say what is wrong (they read "unknown_key: 99", "bad_shape:
  // 1 4 5").
  BOOST_CHECK_EQUAL(describe(unknown.error()),
                    "unknown_key: key 99 was never declared (a worker's"
                    " parameters(), or kv init)");
  auto shape = w.push(0, filled(1, 5, 1.0f));
  BOOST_CHECK(shape.error() == errc::bad_shape);
  BOOST_CHECK_EQUAL(describe(shape.error()),
                    "bad_shape: key 1 holds 4 floats, 5 were given (an array"
                    " is pushed at its declared size: a worker's step()"
                    " returns each of its parameters() size)");
  auto unread = w.pull(0, {99}); // it read "unknown_key: 99"
  BOOST_CHECK(unread.error() == errc::unknown_key);
  BOOST_CHECK_EQUAL(describe(unread.error()),
                    "unknown_key: key 99 was never declared (a worker's"
                    " parameters(), or kv init)");
  // A key twice in one push read as wire corruption (malformed_message).
  auto twice = filled(1, 4, 1.0f);
  twice.push_back(twice.front());
  auto doubled = w.push(0, twice);
  BOOST_CHECK(doubled.error() == errc::bad_shape);
  BOOST_CHECK_EQUAL(describe(doubled.error()),
                    "bad_shape: key 1 is given twice in one push (a worker's"
                    " step() returns one array per key)");
  auto declared_twice = w.init(twice);
  BOOST_CHECK(declared_twice.error() == errc::invalid_config);
  BOOST_CHECK_EQUAL(describe(declared_twice.error()),
                    "invalid_config: key 1 is declared twice in one init");
  BOOST_CHECK(w.init(filled(1, 5, 0.0f)).error() == errc::size_conflict);
  auto got = w.pull(0, {1}); // nothing was applied
  BOOST_REQUIRE(got);
  BOOST_CHECK(all_equal(*got, 0.0f));
}

BOOST_AUTO_TEST_CASE(workers_that_step_in_other_clock_counts_are_refused) {
  // Overlapped workers push a step as several clocks; a worker that steps
  // in another count would pair other steps in one sync round.
  cluster c{"sync", 1, 1, 16u << 20, add_update, 1000, "auto", 1, 3};
  init_all(c, 4);
  kv_settings ks;
  ks.request_timeout_ms = 10000;
  kv other{c.b, c.remote_sched, ks};
  caf::error err;
  c.self
      ->request(other.handle(), std::chrono::seconds{20}, init_atom_v,
                filled(1, 4, 0.0f), uint32_t{2})
      .receive([](const std::vector<named_array>&) {},
               [&err](caf::error& e) { err = std::move(e); });
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_MESSAGE(describe(err).find("--worker.overlap") !=
                          std::string::npos,
                      describe(err));
  // The same count as the others' is welcome.
  kv same{c.b, c.remote_sched, ks};
  BOOST_CHECK(bool(same.init(filled(1, 4, 0.0f))));
}

BOOST_AUTO_TEST_CASE(a_sync_pull_whose_round_lacks_a_push_says_why_it_waits) {
  // It said "timeout: server 0" after --kv.request-timeout-ms.
  cluster c{"sync", 1, 1, 16u << 20, add_update, 1000, "auto", 1, 2};
  init_all(c, 4);
  kv_settings ks;
  ks.request_timeout_ms = 1000;
  kv other{c.b, c.remote_sched, ks};
  BOOST_REQUIRE(other.init(filled(1, 4, 0.0f)));
  BOOST_REQUIRE(other.push(0, filled(1, 4, 1.0f)));
  auto got = other.pull(1, {1}); // round 0 lacks worker 0's push
  BOOST_REQUIRE(!got);
  BOOST_CHECK(got.error() == errc::timeout);
  BOOST_CHECK_MESSAGE(describe(got.error())
                                  .find("server 0 did not answer within 1000 ms"
                                        " (--kv.request-timeout-ms)") !=
                              std::string::npos &&
                          describe(got.error())
                                  .find("pull(c) needs every live worker's"
                                        " push(c - 1)") != std::string::npos,
                      describe(got.error()));
}

BOOST_AUTO_TEST_SUITE_END()
