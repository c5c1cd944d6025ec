// Atomic pushes, the scheduler's half (docs/atomic-pushes.md): when a worker
// leaves, every server says how many of its clocks it took whole; the least
// is the worker's cut, which every server then applies, so that each of the
// worker's clocks is kept on every server or on none.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "actors/base/log.hpp"
#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/kv.hpp"
#include "messages/type_ids.hpp"

namespace troupe::sched {

namespace {

/// How long a server may take to answer (it waits for its backup first).
constexpr auto cut_answer_timeout = std::chrono::seconds{30};

/// Pause before asking again after a server failed to answer.
constexpr auto cut_retry_after = std::chrono::milliseconds{500};

void ask(self_ptr self, uint32_t rank);

/// Registrations parked for `rank`'s cut go on: admitted, parked again
/// for another cut, or refused if their place went meanwhile.
void release_parked(self_ptr self) {
  auto parked = std::move(self->state.parked_registers);
  self->state.parked_registers.clear();
  for (auto& p : parked) {
    if (auto err = check_room(self, p.req.kind)) {
      p.rp.deliver(std::move(err));
      continue;
    }
    if (cut_pending(self, lowest_free_rank(self, p.req.kind))) {
      self->state.parked_registers.push_back(std::move(p));
      continue;
    }
    p.rp.deliver(admit(self, p.req, p.handle));
  }
}

/// Every server applied `rank`'s cut (or died): its event, and the
/// registrations parked for it.
void applied(self_ptr self, uint32_t rank, event_record e) {
  self->state.cuts_applying.erase(rank);
  record(self, std::move(e));
  release_parked(self);
}

/// Every server asked answered: the cut is the least, sent to every server;
/// once each applied it, it is an event.
void decide(self_ptr self, uint32_t rank) {
  auto& st = self->state;
  auto i = st.cuts_pending.find(rank);
  std::optional<uint64_t> before;
  if (auto b = st.cuts.find(rank); b != st.cuts.end())
    before = b->second;
  auto keep = worker_cut(i->second.answers, before);
  std::string said;
  for (auto& [server, n] : i->second.answers)
    said += str(said.empty() ? "" : ", ", "server ", server, ": ",
                n == no_whole_clocks ? std::string{"none"} : str(n));
  if (keep != worker_cut(i->second.answers, std::nullopt))
    said += str("; not below its cut before, ", keep);
  st.cuts_pending.erase(i);
  st.cuts[rank] = keep;
  auto detail = keep == no_whole_clocks
                    ? str("no server holds a push of it (", said, ")")
                    : str("its clocks below ", keep, " are kept (", said, ")");
  event_record e{now_ms(), "cut", role::worker, rank, 0, detail, "scheduler"};
  if (keep != no_whole_clocks)
    e.clock = keep;
  if (keep == no_whole_clocks)
    return applied(self, rank, std::move(e));
  std::vector<caf::actor> servers;
  for (auto& m : st.members)
    if (m.info.kind == role::server)
      servers.push_back(m.handle);
  if (servers.empty())
    return applied(self, rank, std::move(e));
  st.cuts_applying.insert(rank);
  struct gather {
    size_t left;
    event_record e;
  };
  auto g = std::make_shared<gather>(gather{servers.size(), std::move(e)});
  auto one_done = [self, rank, g] {
    if (--g->left == 0)
      applied(self, rank, std::move(g->e));
  };
  // A server that fails to answer is gone or leaving: the next view's
  // servers get the cut again (servers_changed).
  for (auto& s : servers)
    self->request(s, cut_answer_timeout, cut_atom_v, keep_atom_v, rank, keep)
        .then([one_done](uint64_t) { one_done(); },
              [one_done](caf::error&) { one_done(); });
}

void on_answer(self_ptr self, uint32_t rank, uint64_t serial, uint32_t server,
               uint64_t n) {
  auto i = self->state.cuts_pending.find(rank);
  if (i == self->state.cuts_pending.end() || i->second.serial != serial)
    return; // asked again since
  i->second.answers[server] = n;
  if (i->second.answers.size() == i->second.asked.size())
    decide(self, rank);
}

void on_failed_answer(self_ptr self, uint32_t rank, uint64_t serial,
                      uint32_t server, const caf::error& err) {
  auto i = self->state.cuts_pending.find(rank);
  if (i == self->state.cuts_pending.end() || i->second.serial != serial)
    return;
  TROUPE_LOG_LIMITED(warning, "scheduler", "server ", server,
                     " did not say how many clocks worker ", rank,
                     " pushed whole there (", self->system().render(err),
                     "): asking every server again");
  i->second.serial = ++self->state.cut_serial; // later answers are stale
  self->delayed_send(self, cut_retry_after, cut_atom_v, rank);
}

void ask(self_ptr self, uint32_t rank) {
  auto& st = self->state;
  auto i = st.cuts_pending.find(rank);
  if (i == st.cuts_pending.end())
    return;
  auto& g = i->second;
  g.serial = ++st.cut_serial;
  g.asked.clear();
  g.answers.clear();
  for (auto& m : st.members)
    if (m.info.kind == role::server)
      g.asked.insert(m.info.rank);
  if (g.asked.empty())
    return decide(self, rank);
  for (auto& m : st.members) {
    if (m.info.kind != role::server)
      continue;
    auto server = m.info.rank;
    auto serial = g.serial;
    self->request(m.handle, cut_answer_timeout, cut_atom_v, rank, st.epoch)
        .then([self, rank, serial, server](
                  uint64_t n) { on_answer(self, rank, serial, server, n); },
              [self, rank, serial, server](caf::error& err) {
                on_failed_answer(self, rank, serial, server, err);
              });
  }
}

} // namespace

uint64_t worker_cut(const std::map<uint32_t, uint64_t>& answers,
                    std::optional<uint64_t> before) {
  auto keep = no_whole_clocks;
  for (auto& [server, n] : answers)
    keep = std::min(keep, n);
  if (keep != no_whole_clocks && before && *before != no_whole_clocks)
    keep = std::max(keep, *before);
  return keep;
}

void start_cut(self_ptr self, uint32_t rank) {
  self->state.cuts.erase(rank); // an earlier process's: not this one's
  self->state.cuts_pending[rank];
  ask(self, rank);
}

void retry_cut(self_ptr self, uint32_t rank) {
  ask(self, rank);
}

void servers_changed(self_ptr self) {
  auto& st = self->state;
  std::vector<uint32_t> pending;
  for (auto& [rank, g] : st.cuts_pending)
    pending.push_back(rank);
  for (auto rank : pending)
    ask(self, rank);
  for (auto& [rank, keep] : st.cuts)
    if (keep != no_whole_clocks && !is_live_worker(self, rank))
      for (auto& m : st.members)
        if (m.info.kind == role::server) // the answer is decide()'s
          self->request(m.handle, cut_answer_timeout, cut_atom_v, keep_atom_v,
                        rank, keep)
              .then([](uint64_t) {}, [](caf::error&) {});
}

bool cut_pending(self_ptr self, uint32_t rank) {
  return self->state.cuts_pending.count(rank) != 0 ||
         self->state.cuts_applying.count(rank) != 0;
}

} // namespace troupe::sched
