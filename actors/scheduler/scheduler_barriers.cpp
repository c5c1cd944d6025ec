// Barriers: each is released once every live node of its role has arrived
// (and the expected number has ever joined); a released name stays passed.
#include <algorithm>
#include <chrono>
#include <string>

#include <caf/event_based_actor.hpp>

#include "actors/base/log.hpp"
#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/type_ids.hpp"

namespace troupe::sched {

void check_barriers(self_ptr self) {
  auto& st = self->state;
  for (auto i = st.barriers.begin(); i != st.barriers.end();) {
    auto& b = i->second;
    auto live = nodes_of(self, b.kind);
    auto expected = b.kind == role::server ? st.cfg.servers : st.cfg.workers;
    bool all_live_arrived =
        std::all_of(live.begin(), live.end(), [&b](const node_info& n) {
          return b.arrived.count(n.rank) != 0;
        });
    // Until the expected count has joined, wait for it; once it has, the
    // live ones are enough (a dead node never blocks a barrier).
    bool enough = b.arrived.size() >= expected || st.joined[b.kind] >= expected;
    if (all_live_arrived && enough && !live.empty()) {
      // Those that joined and died meanwhile do not hold it (they come back
      // as restarts), but the rest go on without them: say so.
      if (live.size() < expected)
        TROUPE_LOG(warning, "scheduler", "barrier '", i->first,
                   "' passed with ", live.size(), " of ", expected, " ",
                   to_string(b.kind), "s (--cluster.", to_string(b.kind),
                   "s=", expected, "): the others died after they joined");
      for (auto& rp : b.waiting)
        rp.deliver(st.epoch);
      st.passed.insert(i->first);
      i = st.barriers.erase(i);
    } else {
      ++i;
    }
  }
}

caf::result<uint64_t> on_barrier(self_ptr self, const frame& f) {
  barrier_request req;
  if (auto err = decode(f, req)) { // 2
    TROUPE_LOG(warning, "scheduler",
               "dropped Barrier: ", self->system().render(err));
    return err;
  }
  if (self->state.passed.count(req.name) != 0) // a late arrival
    return self->state.epoch;
  auto& b = self->state.barriers[req.name];
  b.kind = req.kind;
  b.arrived.insert(req.rank);
  auto rp = self->make_response_promise();
  b.waiting.push_back(rp);
  check_barriers(self);
  arm_waiting_report(self); // says so if it is still held then
  return rp;
}

namespace {

/// How often the scheduler says what held barriers and declares wait for.
constexpr auto waiting_report_every = std::chrono::seconds{3};

/// "workers: 1 of 2 joined (--cluster.workers=2)", or "" if all have.
std::string short_of(self_ptr self, role kind) {
  auto& st = self->state;
  auto expected = kind == role::server ? st.cfg.servers : st.cfg.workers;
  auto live = nodes_of(self, kind).size();
  if (st.joined[kind] >= expected && live > 0)
    return {};
  auto name = std::string{to_string(kind)} + "s";
  return str(name, ": ", live, " of ", expected, " joined (--cluster.", name,
             "=", expected, ")");
}

} // namespace

void report_waiting(self_ptr self) {
  auto& st = self->state;
  st.waiting_report_armed = false;
  std::string held;
  for (auto& [name, b] : st.barriers)
    if (!b.waiting.empty())
      held += str(held.empty() ? "" : ", ", "barrier '", name, "' (",
                  b.arrived.size(), " arrived)");
  if (!st.parked.empty())
    held += str(held.empty() ? "" : ", ", st.parked.size(), " declare",
                st.parked.size() == 1 ? "" : "s");
  if (held.empty())
    return; // nothing waits: no more reports until something does
  std::string missing;
  for (auto kind : {role::server, role::worker})
    if (auto m = short_of(self, kind); !m.empty())
      missing += (missing.empty() ? "" : "; ") + m;
  TROUPE_LOG(info, "scheduler", "waiting for ",
             missing.empty() ? std::string{"live members to arrive"} : missing,
             "; held: ", held);
  arm_waiting_report(self);
}

void arm_waiting_report(self_ptr self) {
  if (self->state.waiting_report_armed)
    return;
  self->state.waiting_report_armed = true;
  self->delayed_send(self, waiting_report_every, barrier_atom_v, tick_atom_v);
}

} // namespace troupe::sched
