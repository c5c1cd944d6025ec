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

/// How long a replica's stages told to leave may take to go.
constexpr auto replica_leave_timeout = std::chrono::seconds{30};

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

/// Sends `rank`'s cut `keep` to every server; once each applied it, it is
/// an event (`said`: how it was decided).
void apply_cut(self_ptr self, uint32_t rank, uint64_t keep,
               const std::string& said) {
  auto& st = self->state;
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

/// Every stage of `r` (a replica's cut under way) has its own cut: each
/// gets the least.
void decide_replica(
    self_ptr self,
    std::map<uint32_t, scheduler_state::replica_cut>::iterator r) {
  auto& st = self->state;
  auto decided = std::move(r->second.decided);
  st.replica_cuts.erase(r);
  std::map<uint32_t, uint64_t> own, before;
  for (auto& [rank, d] : decided) {
    own[rank] = d.keep;
    if (d.before)
      before[rank] = *d.before;
  }
  auto cuts = replica_stage_cuts(own, before);
  for (auto& [rank, d] : decided) {
    st.cuts_applying.erase(rank);
    auto keep = cuts.at(rank);
    auto said = d.said;
    if (keep != d.keep)
      said += str("; its own cut ",
                  d.keep == no_whole_clocks ? std::string{"none"} : str(d.keep),
                  ", its replica's stages' ", keep);
    apply_cut(self, rank, keep, said);
  }
}

using replica_iter = std::map<uint32_t, scheduler_state::replica_cut>::iterator;

replica_iter replica_holding(self_ptr self, uint32_t rank) {
  auto& rs = self->state.replica_cuts;
  return std::find_if(rs.begin(), rs.end(), [rank](const auto& x) {
    return x.second.ranks.count(rank) != 0;
  });
}

/// Decides once every stage asked has answered and every stage that left
/// has its own cut.
void maybe_decide_replica(self_ptr self, uint32_t first) {
  auto r = self->state.replica_cuts.find(first);
  if (r != self->state.replica_cuts.end() && r->second.asking.empty() &&
      r->second.decided.size() == r->second.ranks.size())
    decide_replica(self, r);
}

/// The first cut of the replica from `first` is known (`keep`, of the
/// stage `dead`): each other live stage of it is asked whether it pushed
/// any part of a clock from `keep` on. One that did leaves (its parts go
/// with its cut); one that did not pushes none until `dead`'s rank is
/// back (kv_client_state::push_fence), and stays.
void ask_replica(self_ptr self, replica_iter r, uint32_t dead, uint64_t keep) {
  auto& st = self->state;
  auto& rc = r->second;
  rc.asked = true;
  auto first = r->first;
  auto why = str("stage worker ", dead,
                 " of this replica crashed with its"
                 " clocks from ",
                 keep, " not on every server");
  for (auto& m : st.members) {
    if (m.info.kind != role::worker || m.stage_group != rc.stages ||
        m.info.rank / rc.stages * rc.stages != first ||
        rc.ranks.count(m.info.rank) != 0)
      continue;
    auto rank = m.info.rank;
    rc.asking.insert(rank);
    // Leaving, or an error (it may be gone): its departure joins the cut;
    // one that stays live is left out when the cut is overdue.
    auto answered = [self, first, rank](bool leaves) {
      auto r = self->state.replica_cuts.find(first);
      if (r == self->state.replica_cuts.end())
        return;
      r->second.asking.erase(rank);
      if (leaves)
        r->second.ranks.insert(rank);
      maybe_decide_replica(self, first);
    };
    self->request(m.handle, cut_answer_timeout, leave_atom_v, dead, keep, why)
        .then([answered](bool leaves) { answered(leaves); },
              [answered](caf::error&) { answered(true); });
  }
  TROUPE_LOG(info, "scheduler", "stage worker ", dead,
             " crashed: its replica's stages (workers ", first, "..",
             first + rc.stages - 1, ") that pushed clock ", keep,
             " or later leave and are cut together; the others push"
             " nothing from it until it is back");
  rc.serial = ++st.cut_serial;
  self->delayed_send(self, replica_leave_timeout, cut_atom_v, finish_atom_v,
                     first, rc.serial);
}

/// A stage of a replica's cut under way: its own cut waits for the other
/// stages' (its registrations too). False: no such cut holds it.
bool hold_for_replica(self_ptr self, uint32_t rank,
                      scheduler_state::replica_cut::own d) {
  auto r = replica_holding(self, rank);
  if (r == self->state.replica_cuts.end())
    return false;
  auto keep = d.keep;
  r->second.decided[rank] = std::move(d);
  self->state.cuts_applying.insert(rank);
  if (!r->second.asked)
    ask_replica(self, r, rank, keep);
  maybe_decide_replica(self, r->first);
  return true;
}

/// Every server asked answered: the cut is the least, sent to every server
/// (with its replica's stages' cuts, for a stage that left with them).
void decide(self_ptr self, uint32_t rank) {
  auto& st = self->state;
  auto i = st.cuts_pending.find(rank);
  auto before = i->second.before;
  auto keep = worker_cut(i->second.answers, before);
  std::string said;
  for (auto& [server, n] : i->second.answers)
    said += str(said.empty() ? "" : ", ", "server ", server, ": ",
                n == no_whole_clocks ? std::string{"none"} : str(n));
  if (keep != worker_cut(i->second.answers, std::nullopt))
    said += str("; not below its cut before, ", keep);
  st.cuts_pending.erase(i);
  if (!hold_for_replica(self, rank, {keep, before, said}))
    apply_cut(self, rank, keep, said);
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

/// Stage `rank` (of replicas of `stages`) crashed: its cut waits for the
/// replica's other stages (ask_replica, once its own is known). A stage
/// that crashes while its replica's cut is under way joins it.
void open_replica_cut(self_ptr self, uint32_t rank, uint32_t stages) {
  auto first = rank / stages * stages;
  auto& rc = self->state.replica_cuts[first];
  rc.stages = stages;
  rc.ranks.insert(rank);
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

std::map<uint32_t, uint64_t>
replica_stage_cuts(const std::map<uint32_t, uint64_t>& own,
                   const std::map<uint32_t, uint64_t>& before) {
  auto least = no_whole_clocks;
  for (auto& [rank, keep] : own)
    least = std::min(least, keep);
  std::map<uint32_t, uint64_t> out;
  for (auto& [rank, keep] : own) {
    auto b = before.find(rank);
    out[rank] = keep == no_whole_clocks || b == before.end() ||
                        b->second == no_whole_clocks
                    ? std::min(keep, least)
                    : std::max(least, b->second);
  }
  return out;
}

void start_cut(self_ptr self, uint32_t rank, uint32_t stage_group,
               bool crashed) {
  auto& st = self->state;
  auto& g = st.cuts_pending[rank];
  // An earlier process's cut is this one's floor (worker_cut), and no
  // longer the rank's.
  if (auto b = st.cuts.find(rank); b != st.cuts.end()) {
    g.before = b->second;
    st.cuts.erase(b);
  }
  if (crashed && stage_group > 1)
    open_replica_cut(self, rank, stage_group);
  ask(self, rank);
}

void replica_cut_overdue(self_ptr self, uint32_t first, uint64_t serial) {
  auto& st = self->state;
  auto r = st.replica_cuts.find(first);
  if (r == st.replica_cuts.end() || r->second.serial != serial)
    return;
  // Those still live never left: decided without them, their share of
  // the mini-batch under way may stay. Those gone are waited for.
  std::string stayed;
  auto& rc = r->second;
  for (auto i = rc.ranks.begin(); i != rc.ranks.end();)
    if (is_live_worker(self, *i)) {
      stayed += str(stayed.empty() ? "" : ", ", *i);
      rc.asking.erase(*i);
      i = rc.ranks.erase(i);
    } else {
      ++i;
    }
  for (auto rank : rc.asking) // no answer in time
    stayed += str(stayed.empty() ? "" : ", ", rank);
  rc.asking.clear();
  if (stayed.empty())
    return;
  TROUPE_LOG(error, "scheduler", "stage workers ", stayed,
             " did not leave or answer for their replica within ",
             replica_leave_timeout.count(),
             " s: its cut is decided without them, and their share of a"
             " mini-batch under way may stay");
  maybe_decide_replica(self, first);
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
