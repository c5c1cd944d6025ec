// Joining, views and barriers as a worker's kv client sees them, and how
// it fails when a server or the scheduler dies or a stray error comes.
// Servers and the scheduler in one actor system, workers in another.
#define BOOST_TEST_MODULE kv_membership_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/base/machine_id.hpp"
#include "actors/scheduler/scheduler.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"
#include "tests/kv/kv_helpers.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(kv_membership_tests)

BOOST_AUTO_TEST_CASE(an_error_message_nobody_asked_for_ends_no_role) {
  // CAF ends an actor that gets an error message answering none of its
  // requests; a peer that drops a message it does not know sends one back.
  // The server, the scheduler and a kv client each get one: all go on.
  cluster c{"async", 1, 1};
  init_all(c, 8);
  auto stray = caf::make_error(errc::malformed_message, "a stray error");
  caf::anon_send(c.servers.front(), stray);
  caf::anon_send(c.sched, stray);
  caf::anon_send(c.worker(0).handle(), stray);
  auto& w = c.worker(0);
  BOOST_REQUIRE(w.push(0, filled(1, 8, 1.0f)));
  auto got = w.pull(1, {1});
  BOOST_REQUIRE_MESSAGE(got, why(got));
  BOOST_CHECK(all_equal(*got, 1.0f));
  // Each had the error before the requests above (one sender to each:
  // in order), and answers still.
  BOOST_CHECK(c.worker(0).view());
  BOOST_CHECK(!c.events(10s).empty());
}

BOOST_AUTO_TEST_CASE(the_scheduler_admits_no_more_workers_than_configured) {
  // One more "worker" from anyone on the CAF port would hold up sync
  // rounds and barriers (seen at bc0f027): refused. A worker that leaves
  // (or dies) frees its place for the next.
  cluster c{"sync", 1, 1};
  init_all(c, 4);
  auto enrol = [&c] {
    caf::expected<frame> out{caf::make_error(caf::sec::unexpected_response)};
    c.self
        ->request(
            c.remote_sched, 10s, register_atom_v,
            encode(register_request{
                role::worker, "", 0, 1, {0, machine_id(), ""}, 0, "", "", ""}))
        .receive([&](frame& f) { out = std::move(f); },
                 [&](caf::error& err) { out = std::move(err); });
    return out;
  };
  auto refused = enrol();
  BOOST_REQUIRE(!refused);
  BOOST_CHECK(refused.error() == errc::cluster_full);
  BOOST_CHECK_MESSAGE(describe(refused.error())
                              .find("the cluster is full: 1 of "
                                    "--cluster.workers=1 workers live") !=
                          std::string::npos,
                      describe(refused.error()));
  BOOST_REQUIRE(!c.worker(0).leave());
  auto admitted = enrol();
  BOOST_REQUIRE_MESSAGE(admitted, why(admitted));
  register_reply reply;
  BOOST_REQUIRE(!decode(*admitted, reply));
  BOOST_CHECK_EQUAL(reply.view.workers.size(), 1u);
}

BOOST_AUTO_TEST_CASE(a_worker_waits_for_a_place_within_its_timeout) {
  // A restart may come before its predecessor's departure or death is
  // seen: it asks again until its request timeout, then fails clearly.
  cluster c{"sync", 1, 1};
  init_all(c, 4);
  kv_settings ks;
  ks.request_timeout_ms = 10000;
  kv late{c.b, c.remote_sched, ks}; // full: it asks again
  BOOST_REQUIRE(!c.worker(0).leave());
  auto v = late.view(); // answered once it has joined
  BOOST_REQUIRE_MESSAGE(v, why(v));
  BOOST_CHECK_EQUAL(v->second.workers.size(), 1u);
  ks.request_timeout_ms = 1000;
  kv refused{c.b, c.remote_sched, ks}; // nobody leaves now
  auto none = refused.view();
  BOOST_REQUIRE(!none);
  BOOST_CHECK_MESSAGE(none.error() == errc::cluster_full, why(none));
}

BOOST_AUTO_TEST_CASE(a_barrier_waits_for_every_worker) {
  cluster c{"sync", 1, 2};
  auto& w0 = c.worker(0);
  auto& w1 = c.worker(1);
  c.self->send(w0.handle(), barrier_atom_v, std::string{"b"}, uint32_t{20000});
  // w0's barrier reached the scheduler before w1's view round trip ends.
  BOOST_REQUIRE(w0.view());
  bool early = false;
  c.self->receive([&](uint64_t) { early = true; },
                  caf::after(std::chrono::seconds{0}) >> [] {});
  BOOST_CHECK(!early);
  BOOST_REQUIRE(w1.barrier("b"));
  bool released = false;
  c.self->receive([&](uint64_t) { released = true; },
                  caf::after(std::chrono::seconds{20}) >> [] {});
  BOOST_CHECK(released);
}

BOOST_AUTO_TEST_CASE(a_barrier_that_times_out_names_who_is_missing) {
  // At bc0f027 the worker's line was a bare system_error(request_timeout).
  cluster c{"sync", 1, 1, 16u << 20, add_update, 1000, "auto", 1, 2};
  auto got = c.worker(0).barrier("start", 1000);
  BOOST_REQUIRE(!got);
  BOOST_CHECK(got.error() == errc::timeout);
  BOOST_CHECK_MESSAGE(describe(got.error())
                              .find("1 of 2 workers are in our view, "
                                    "--cluster.workers=2") != std::string::npos,
                      describe(got.error()));
}

BOOST_AUTO_TEST_CASE(a_barrier_waits_for_workers_that_have_not_joined_yet) {
  auto cfg = troupe::test::make_config();
  caf::actor_system sys{*cfg};
  scheduler_settings ss;
  ss.workers = 2;
  auto sched = sys.spawn(scheduler, ss);
  caf::scoped_actor first{sys}, second{sys};
  auto join = [&](caf::scoped_actor& who) {
    register_reply reply;
    who->request(
           sched, 10s, register_atom_v,
           encode(register_request{
               role::worker, "", 0, 1, {0, machine_id(), ""}, 0, "", "", ""}))
        .receive([&](const frame& f) { BOOST_REQUIRE(!decode(f, reply)); },
                 [](const caf::error& err) { BOOST_FAIL(describe(err)); });
    return reply.rank;
  };
  auto arrive = [&](caf::scoped_actor& who, uint32_t rank) {
    who->send(sched, barrier_atom_v,
              encode(barrier_request{"start", role::worker, rank}));
  };
  auto released = [](caf::scoped_actor& who) {
    bool got = false;
    who->receive([&](uint64_t) { got = true; },
                 caf::after(std::chrono::seconds{0}) >> [] {});
    return got;
  };
  arrive(first, join(first));
  // A round trip after the barrier: the scheduler has handled it.
  first->request(sched, 10s, view_atom_v)
      .receive([](const frame&) {}, [](const caf::error&) {});
  BOOST_CHECK(!released(first)); // 1 of 2 expected workers joined
  arrive(second, join(second));
  for (auto* who : {&first, &second}) {
    bool got = false;
    (*who)->receive([&](uint64_t) { got = true; },
                    caf::after(std::chrono::seconds{20}) >> [] {});
    BOOST_CHECK(got);
  }
  caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(a_dead_server_fails_waiting_operations_with_peer_down) {
  cluster c{"sync", 1, 2};
  init_all(c, 8);
  auto& w0 = c.worker(0);
  BOOST_REQUIRE(w0.push(0, filled(1, 8, 1.0f)));
  send_pull(c, w0, 1); // waits for worker 1's push, which never comes
  BOOST_REQUIRE(w0.pull(0, {1}));
  caf::anon_send_exit(c.servers.front(), caf::exit_reason::kill);
  caf::error err;
  c.self->receive([&](const std::vector<named_array>&) {},
                  [&](caf::error& e) { err = std::move(e); },
                  caf::after(std::chrono::seconds{30}) >> [] {});
  // Not errc::timeout: the down message ended the wait.
  BOOST_CHECK_MESSAGE(err == errc::peer_down, describe(err));
}

BOOST_AUTO_TEST_CASE(calls_after_the_scheduler_died_say_it_is_gone) {
  // The kv client ends when its scheduler dies; a call made after that
  // must say why (not CAF's bare request_receiver_down), every time.
  cluster c{"sync", 1, 1};
  init_all(c, 8);
  auto& w = *c.workers.front();
  caf::anon_send_exit(c.sched, caf::exit_reason::kill);
  for (int i = 0; i < 3; ++i) {
    caf::expected<uint64_t> pushed{uint64_t{0}};
    for (uint64_t t = 0; pushed && t < 100000; ++t) // until the client ends
      pushed = w.push(t, filled(1, 8, 1.0f));
    BOOST_REQUIRE(!pushed);
    BOOST_CHECK_MESSAGE(
        pushed.error() == errc::peer_down &&
            describe(pushed.error()).find("the scheduler is gone") !=
                std::string::npos,
        describe(pushed.error()));
  }
  auto v = w.view();
  BOOST_REQUIRE(!v);
  BOOST_CHECK_MESSAGE(describe(v.error()).find("the scheduler is gone") !=
                          std::string::npos,
                      describe(v.error()));
}

BOOST_AUTO_TEST_CASE(a_kv_client_whose_view_overtakes_its_join_gets_ready) {
  // The newer view arrives first; the RegisterReply after it carries an
  // older view. Joining alone must then release waiting operations.
  auto cfg = troupe::test::make_config();
  caf::actor_system sys{*cfg};
  cluster_view older;
  older.epoch = 2;
  older.slice_floats = 4;
  auto newer = older;
  newer.epoch = 3;
  auto fake =
      spawn_overtaking_scheduler(sys, register_reply{0, older, {}}, newer);
  kv_settings ks;
  auto client = spawn_kv_client(sys, fake, ks);
  caf::scoped_actor self{sys};
  bool answered = false;
  self->request(client, 10s, view_atom_v)
      .receive([&](uint32_t, const frame&) { answered = true; },
               [&](const caf::error& err) {
                 BOOST_FAIL("view failed: " << describe(err));
               });
  BOOST_CHECK(answered);
  caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(fake, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_SUITE_END()
