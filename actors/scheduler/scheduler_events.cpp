// Events: what happened in the cluster, each logged as one JSON line and
// kept for the event log and its long polls.
#include <algorithm>

#include <caf/event_based_actor.hpp>

#include "actors/base/log.hpp"
#include "actors/base/metrics.hpp"
#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/type_ids.hpp"

namespace troupe::sched {

namespace {

/// Most events kept; older ones are dropped (each is logged anyway).
constexpr size_t max_events = 100000;

/// The events after the first `n` ever recorded (those still kept).
frame events_after(self_ptr self, uint64_t n) {
  auto& st = self->state;
  auto skip = n > st.events_dropped ? n - st.events_dropped : 0;
  if (skip >= st.events.size())
    return encode(std::vector<event_record>{});
  return encode(
      std::vector<event_record>(st.events.begin() + skip, st.events.end()));
}

} // namespace

std::string host_of(const caf::node_id& n) {
  if (!n)
    return {};
  auto s = to_string(n); // HOST#PID
  return s.substr(0, s.find('#'));
}

void record(self_ptr self, event_record e) {
  metrics::counter("troupe_events_total", "cluster events, by kind",
                   {{"kind", e.kind}})
      .Increment();
  if (self->state.page)
    self->state.page->add_event(e);
  auto& evs = self->state.events;
  bool bad = e.kind == "crashed" || e.kind == "gave-up" ||
             e.kind == "agent-down" || e.kind == "exited" || e.kind == "lost" ||
             e.kind == "unreplicated" || e.kind == "stuck" || e.kind == "ended";
  if (bad)
    TROUPE_LOG(warning, "scheduler", "event ", to_json(e));
  else
    TROUPE_LOG(info, "scheduler", "event ", to_json(e));
  if (auto& out = self->state.events_out) { // a line for tools, whole
    *out << to_json(e) << '\n' << std::flush;
    if (!*out) {
      TROUPE_LOG_LIMITED(error, "scheduler", "writing ",
                         self->state.cfg.events_file, " failed");
      out->clear();
    }
  }
  if (evs.size() == max_events) {
    evs.erase(evs.begin(), evs.begin() + max_events / 2);
    self->state.events_dropped += max_events / 2;
  }
  bool first_loss = e.kind == "lost" && !self->state.first_loss;
  if (first_loss) // kept before e is moved
    self->state.first_loss = e;
  evs.push_back(std::move(e));
  if (first_loss)
    for (auto& m : self->state.members)
      if (m.info.kind == role::worker)
        tell_loss(self, m.handle);
  auto polls = std::move(self->state.event_polls);
  self->state.event_polls.clear();
  for (auto& [after, rp] : polls)
    rp.deliver(events_after(self, after));
}

void tell_loss(self_ptr self, const caf::actor& to) {
  if (self->state.first_loss)
    self->send(to, event_atom_v, encode(*self->state.first_loss));
}

void record(self_ptr self, const char* kind, const node_info& n,
            std::string detail) {
  record(self, event_record{now_ms(), kind, n.kind, n.rank, n.pid,
                            std::move(detail), "scheduler"});
}

namespace {

/// An agent gave up on worker process `e.pid` (`known`: agent_ranks found
/// its rank, e.rank): a rank no process comes back to, for the pipeline
/// stages waiting for it (given_up_ranks.hpp). True if the view changed.
bool note_gave_up(self_ptr self, const event_record& e, const std::string& host,
                  bool known) {
  auto& st = self->state;
  // A host that is no agent's is a child's in a network namespace of its
  // own (CAF hashes the interfaces into it) on the agent's machine, with
  // the agent's pids; another agent's host has pids of its own.
  std::set<std::string> agent_hosts;
  for (auto& r : st.reporters)
    agent_hosts.insert(host_of(r.first.node()));
  auto ours = [&](const std::string& h) {
    return h == host || agent_hosts.count(h) == 0;
  };
  std::optional<uint32_t> rank;
  std::vector<uint32_t> same_pid; // live workers with its pid there
  for (auto& m : st.members) {
    if (m.info.kind != role::worker)
      continue;
    if (e.pid != 0 && m.info.pid == e.pid && ours(host_of(m.handle.node())))
      same_pid.push_back(m.info.rank);
    // Not if another process holds its rank now.
    if (known && m.info.rank == e.rank &&
        (m.info.pid != e.pid || host_of(m.handle.node()) != host))
      known = false;
  }
  if (known)
    rank = e.rank;
  else if (same_pid.size() == 1) // joined, but not mapped: a process in a
    rank = same_pid.front();     // network namespace of its own (host id)
  else if (!same_pid.empty())
    return false; // which of them is not known
  else
    for (auto& h : st.ranks_of_agents.worker_pid_hosts(e.pid))
      if (ours(h))
        return false; // it joined once: not one that never did
  auto free = free_worker_ranks(self);
  auto before = st.given_up.of(free);
  st.given_up.gave_up(rank, free);
  return st.given_up.of(free) != before;
}

} // namespace

void on_event(self_ptr self, const frame& f) {
  event_record e;
  if (auto err = decode(f, e)) { // 2
    TROUPE_LOG(warning, "scheduler",
               "dropped an Event: ", self->system().render(err));
    return;
  }
  auto from = self->current_sender();
  auto& ms = self->state.members;
  bool member = std::any_of(ms.begin(), ms.end(), [&from](const auto& m) {
    return m.handle.address() == caf::actor_cast<caf::actor_addr>(from);
  });
  // A non-member that reports is a node agent, watched so that its end is
  // an event too; one that asks for an answer (a worker saying where it
  // starts, from a helper of its own) is not one.
  auto* msg = self->current_mailbox_element();
  bool one_off = msg != nullptr && msg->mid.is_request();
  if (!member && from && !one_off) {
    auto addr = caf::actor_cast<caf::actor_addr>(from);
    if (self->state.reporters.emplace(addr, e.source).second)
      self->monitor(addr);
  }
  // An agent's slot -> our rank.
  auto host = from ? host_of(from->node()) : "";
  bool known = self->state.ranks_of_agents.apply(e, host);
  bool view_changed = e.kind == "gave-up" && e.about == role::worker &&
                      note_gave_up(self, e, host, known);
  record(self, std::move(e));
  if (view_changed)
    publish(self);
}

caf::result<frame> on_events_poll(self_ptr self, uint64_t n) {
  auto& st = self->state;
  if (st.events_dropped + st.events.size() > n)
    return events_after(self, n);
  auto rp = self->make_response_promise();
  st.event_polls.emplace_back(n, rp);
  return rp;
}

} // namespace troupe::sched
