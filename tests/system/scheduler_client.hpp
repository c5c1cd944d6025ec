// The test's own CAF node beside a cluster of processes: reads the
// scheduler's view and event log.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/kv/kv.hpp"
#include "actors/node/node_config.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"
#include "tests/system/nodes.hpp"

namespace troupe::test {

struct scheduler_client {
  node_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor sched;

  explicit scheduler_client(uint16_t port,
                            const std::string& host = "127.0.0.1") {
    using namespace std::chrono_literals;
    cfg.load<caf::io::middleman>();
    cfg.set("middleman.heartbeat-interval", caf::timespan{100ms});
    cfg.set("middleman.connection-timeout", caf::timespan{1s});
    use_test_tls(cfg); // as the cluster's nodes speak
    BOOST_REQUIRE(!cfg.finish());
    sys = std::make_unique<caf::actor_system>(cfg);
    auto s = connect_scheduler(*sys, host, port, 10000);
    BOOST_REQUIRE(s);
    sched = *s;
  }

  /// Every event so far.
  std::vector<event_record> events() {
    std::vector<event_record> out;
    ask(events_atom_v, out);
    return out;
  }

  /// The current view.
  cluster_view view() {
    cluster_view out;
    ask(view_atom_v, out);
    return out;
  }

  /// Waits (bounded) for an event that satisfies `pred`: long polls of
  /// the scheduler's log, which answers as soon as a new event is in.
  /// Events before the first `after` ever recorded are not looked at.
  template <class Pred>
  std::optional<event_record>
  wait_for_event(Pred pred,
                 std::chrono::seconds limit = std::chrono::seconds{30},
                 uint64_t after = 0) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    uint64_t seen = after;
    caf::scoped_actor self{*sys};
    for (;;) {
      auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero())
        return std::nullopt;
      std::vector<event_record> got;
      bool failed = false;
      self->request(sched, left, events_atom_v, seen)
          .receive([&got](const frame& f) { BOOST_REQUIRE(!decode(f, got)); },
                   [&failed](const caf::error&) { failed = true; });
      if (failed) // the deadline passed
        return std::nullopt;
      seen += got.size();
      for (auto& e : got)
        if (pred(e))
          return e;
    }
  }

  /// Waits (bounded) for a view that satisfies `pred`, watching the
  /// scheduler's views as they are published.
  template <class Pred>
  bool wait_for_view(Pred pred,
                     std::chrono::seconds limit = std::chrono::seconds{30}) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    caf::scoped_actor self{*sys};
    cluster_view v;
    self->request(sched, limit, watch_atom_v)
        .receive([&v](const frame& f) { BOOST_REQUIRE(!decode(f, v)); },
                 [](const caf::error& err) {
                   BOOST_FAIL("watch failed: " << describe(err));
                 });
    while (!pred(v)) {
      auto left = deadline - std::chrono::steady_clock::now();
      if (left <= std::chrono::steady_clock::duration::zero())
        return false;
      self->receive(
          [&v](view_atom, const frame& f) {
            cluster_view next;
            if (!decode(f, next) && next.epoch > v.epoch)
              v = std::move(next);
          },
          caf::after(left) >> [] {});
    }
    return true;
  }

  /// Asks for a checkpoint now: its generation once the manifest names
  /// it, or why it failed.
  caf::expected<uint64_t> checkpoint() {
    // One actor for every call: tests call this many times in a row.
    if (!asker)
      asker = std::make_unique<caf::scoped_actor>(*sys);
    auto& self = *asker;
    caf::expected<uint64_t> out = uint64_t{0};
    self->request(sched, std::chrono::seconds{60}, checkpoint_atom_v)
        .receive([&out](uint64_t gen) { out = gen; },
                 [&out](caf::error& err) { out = std::move(err); });
    return out;
  }

private:
  std::unique_ptr<caf::scoped_actor> asker; // of checkpoint()

  template <class Atom, class T> void ask(Atom atom, T& out) {
    caf::scoped_actor self{*sys};
    self->request(sched, std::chrono::seconds{10}, atom)
        .receive([&out](const frame& f) { BOOST_REQUIRE(!decode(f, out)); },
                 [](const caf::error& err) {
                   BOOST_FAIL("asking the scheduler failed: " << describe(err));
                 });
  }
};

/// The log, one JSON line per event, for failure messages. A run of more
/// than 6 events of one kind (say, hundreds of checkpoints) keeps its first
/// and last 2, with a count between: a failure message stays short enough
/// that CTest does not cut off its end.
inline std::string dump(const std::vector<event_record>& xs) {
  std::string out;
  for (size_t i = 0; i < xs.size();) {
    auto j = i;
    while (j < xs.size() && xs[j].kind == xs[i].kind)
      ++j;
    for (auto k = i; k < j; ++k) {
      if (j - i > 6 && k == i + 2) {
        out += "... " + std::to_string(j - i - 4) + " more \"" + xs[i].kind +
               "\" events ...\n";
        k = j - 3;
        continue;
      }
      out += to_json(xs[k]) + "\n";
    }
    i = j;
  }
  return out;
}

/// The scheduler's answer to `req` from `fake`: its error, or none.
inline caf::error register_as(caf::scoped_actor& fake, const caf::actor& sched,
                              const register_request& req) {
  caf::error out;
  fake->request(sched, 10s, register_atom_v, encode(req))
      .receive([](const frame&) {}, [&](caf::error& err) { out = err; });
  return out;
}

} // namespace troupe::test
