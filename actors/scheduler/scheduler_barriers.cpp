// Barriers: each is released once every live node of its role has arrived
// (and the expected number has ever joined); a released name stays passed.
#include <algorithm>

#include <caf/event_based_actor.hpp>

#include "actors/base/log.hpp"
#include "actors/scheduler/scheduler_internal.hpp"

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
  return rp;
}

} // namespace troupe::sched
