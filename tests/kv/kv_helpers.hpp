// Helpers shared by the tests that run a scheduler, shard servers and kv
// clients as actors over loopback (tests/local_cluster.hpp): arrays to push,
// pulls sent as plain messages, and a fake scheduler.
#pragma once

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

#include "actors/node/node_config.hpp"
#include "tests/test_support.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "messages/errors.hpp"
#include "messages/kv.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"
#include "tests/local_cluster.hpp"

namespace troupe::test {

/// Key `key` as one array of `n` floats, each `x`.
inline std::vector<named_array> filled(uint64_t key, size_t n, float x) {
  return {named_array{key, std::vector<float>(n, x)}};
}

/// True if `xs` holds an array and every value of it is `x`.
inline bool all_equal(const std::vector<named_array>& xs, float x) {
  for (auto& a : xs)
    for (auto y : a.values)
      if (y != x)
        return false;
  return !xs.empty();
}

/// Initialises key 1 (n floats, zeros) from every worker.
inline void init_all(cluster& c, size_t n) {
  for (auto& w : c.workers) {
    auto got = w->init(filled(1, n, 0.0f));
    BOOST_REQUIRE_MESSAGE(got, why(got));
    BOOST_REQUIRE(all_equal(*got, 0.0f));
  }
}

/// Sends a pull as a plain message: its reply lands in c.self's mailbox.
inline void send_pull(cluster& c, kv& w, uint64_t clock) {
  c.self->send(w.handle(), pull_atom_v, clock, std::vector<uint64_t>{1});
}

/// True if the reply of a pull sent with send_pull is already there.
inline bool pull_answered(cluster& c) {
  bool answered = false;
  c.self->receive([&](const std::vector<named_array>&) { answered = true; },
                  [&](const caf::error&) { answered = true; },
                  caf::after(std::chrono::seconds{0}) >> [] {});
  return answered;
}

/// Waits (bounded) for the reply of a pull sent with send_pull.
inline std::vector<named_array> await_pull(cluster& c) {
  std::vector<named_array> out;
  c.self->receive([&](std::vector<named_array>& xs) { out = std::move(xs); },
                  [&](const caf::error& err) {
                    BOOST_FAIL("pull failed: " << describe(err));
                  },
                  caf::after(std::chrono::seconds{20}) >>
                      [] { BOOST_FAIL("pull never answered"); });
  return out;
}

/// How a fake scheduler answers a server's dropped-link notice.
enum class notice_answer {
  told,    ///< passed on: the view's epoch
  refused, ///< not_a_member (it takes the server for dead)
  none     ///< never: the server's request times out
};

/// A fake scheduler that answers Register with `reply`, but first sends
/// `newer` to the registering node: the view overtakes the reply.
inline caf::actor
spawn_overtaking_scheduler(caf::actor_system& sys, register_reply reply,
                           cluster_view newer,
                           notice_answer notice = notice_answer::told) {
  return sys.spawn([reply, newer,
                    notice](caf::event_based_actor* self) -> caf::behavior {
    return {[=](register_atom, const frame&) {
              auto node = caf::actor_cast<caf::actor>(self->current_sender());
              self->send(node, view_atom_v, encode(newer));
              return encode(reply);
            },
            // A server whose backup (rank 0 at "h") is unreachable reports
            // it, and acknowledges alone once we have told the backup.
            [=](event_atom, const frame&) {},
            [=](stale_atom, uint32_t, uint64_t) -> caf::result<uint64_t> {
              if (notice == notice_answer::refused)
                return caf::make_error(errc::not_a_member, "taken for dead");
              if (notice == notice_answer::none)
                return self->make_response_promise(); // dropped: no answer
              return newer.epoch;
            },
            [=](leave_atom) { return newer.epoch; }};
  });
}

} // namespace troupe::test
