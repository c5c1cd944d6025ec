// The test's own CAF node beside a cluster of processes: reads the
// scheduler's view and event log.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/kv.hpp"
#include "actors/node_config.hpp"
#include "messages/errors.hpp"
#include "messages/membership.hpp"
#include "messages/type_ids.hpp"

namespace troupe::test {

struct scheduler_client {
  node_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::actor sched;

  explicit scheduler_client(uint16_t port) {
    using namespace std::chrono_literals;
    cfg.load<caf::io::middleman>();
    cfg.set("middleman.heartbeat-interval", caf::timespan{100ms});
    cfg.set("middleman.connection-timeout", caf::timespan{1s});
    sys = std::make_unique<caf::actor_system>(cfg);
    auto s = connect_scheduler(*sys, "127.0.0.1", port, 10000);
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

  /// Waits (bounded) until `pred` holds for the event log or view: both
  /// are read by asking, as the scheduler pushes neither to us.
  template <class Pred>
  std::optional<event_record>
  wait_for_event(Pred pred,
                 std::chrono::seconds limit = std::chrono::seconds{30}) {
    return poll(
        [&]() -> std::optional<event_record> {
          for (auto& e : events())
            if (pred(e))
              return e;
          return std::nullopt;
        },
        limit);
  }

  template <class Pred>
  bool wait_for_view(Pred pred,
                     std::chrono::seconds limit = std::chrono::seconds{30}) {
    return poll(
               [&]() -> std::optional<bool> {
                 if (pred(view()))
                   return true;
                 return std::nullopt;
               },
               limit)
        .has_value();
  }

private:
  template <class Atom, class T> void ask(Atom atom, T& out) {
    caf::scoped_actor self{*sys};
    self->request(sched, std::chrono::seconds{10}, atom)
        .receive([&out](const frame& f) { BOOST_REQUIRE(!decode(f, out)); },
                 [](const caf::error& err) {
                   BOOST_FAIL("asking the scheduler failed: " << describe(err));
                 });
  }

  template <class F>
  auto poll(F fn, std::chrono::seconds limit) -> decltype(fn()) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (auto x = fn())
        return x;
      if (std::chrono::steady_clock::now() >= deadline)
        return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
  }
};

/// The log, one JSON line per event, for failure messages.
inline std::string dump(const std::vector<event_record>& xs) {
  std::string out;
  for (auto& e : xs)
    out += to_json(e) + "\n";
  return out;
}

} // namespace troupe::test
