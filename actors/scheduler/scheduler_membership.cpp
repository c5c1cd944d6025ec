// Membership and views: who registers, leaves or goes down, the ranks they
// get, where the slices are placed, and the view sent to everyone.
#include <algorithm>
#include <set>
#include <string_view>

#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/log.hpp"
#include "actors/base/machine_id.hpp"
#include "actors/base/stray_errors.hpp"
#include "actors/cluster/peer_name.hpp"
#include "actors/cluster/placement.hpp"
#include "actors/cluster/view_metrics.hpp"
#include "actors/scheduler/scheduler_internal.hpp"
#include "actors/server/optimizer_settings.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::sched {

// -- views --------------------------------------------------------------------

std::vector<node_info> nodes_of(self_ptr self, role kind) {
  std::vector<node_info> out;
  for (auto& m : self->state.members)
    if (m.info.kind == kind)
      out.push_back(m.info);
  std::sort(out.begin(), out.end(), [](const node_info& a, const node_info& b) {
    return a.rank < b.rank;
  });
  return out;
}

/// The ranks that finished and have no live process since, ascending.
std::vector<uint32_t> finished_not_live(self_ptr self) {
  auto out = self->state.finished_workers;
  for (auto& m : self->state.members)
    if (m.info.kind == role::worker)
      out.erase(m.info.rank);
  return {out.begin(), out.end()};
}

cluster_view current_view(self_ptr self) {
  auto& st = self->state;
  return cluster_view{st.epoch,
                      nodes_of(self, role::server),
                      nodes_of(self, role::worker),
                      st.keys,
                      st.placement,
                      st.cfg.placement.slice_floats,
                      st.cfg.workers,
                      st.given_up.of(free_worker_ranks(self)),
                      st.given_up.ended(),
                      finished_not_live(self)};
}

void publish(self_ptr self) {
  ++self->state.epoch;
  auto view = current_view(self);
  note_view(view);
  if (self->state.page)
    self->state.page->set_view(view);
  auto f = encode(view);
  for (auto& m : self->state.members)
    self->send(m.handle, view_atom_v, f);
  for (auto& w : self->state.watchers)
    self->send(w, view_atom_v, f);
  TROUPE_LOG(info, "scheduler", "view ", self->state.epoch, ": ",
             nodes_of(self, role::server).size(), " servers, ",
             nodes_of(self, role::worker).size(), " workers, ",
             self->state.keys.size(), " keys");
}

frame on_watch(self_ptr self) {
  auto w = caf::actor_cast<caf::actor>(self->current_sender());
  self->monitor(w);
  self->state.watchers.push_back(w);
  return encode(current_view(self));
}

// -- ranks and placement ------------------------------------------------------

namespace {

/// The rank a node of `kind` registering now gets: the lowest one not in
/// use. For workers of a job of known size, the lowest such rank of the job
/// whose worker did not finish comes first: a worker restarted after another
/// finished resumes the dead one's partition, not the finished one's.
/// A server left: its slices go to its backup, which holds their replicas
/// (chain replication), if the backup lives. Returns the slices moved.
size_t promote_backup(self_ptr self, uint32_t dead,
                      const std::vector<uint32_t>& servers_before) {
  auto backup = backup_of(dead, servers_before);
  auto live = server_ranks(self);
  if (backup == dead ||
      std::find(live.begin(), live.end(), backup) == live.end())
    return 0;
  size_t moved = 0;
  for (auto& p : self->state.placement)
    if (p.server == dead) {
      p.server = backup;
      ++moved;
    }
  return moved;
}

} // namespace

std::set<uint32_t> free_worker_ranks(self_ptr self) {
  auto& st = self->state;
  std::set<uint32_t> out;
  for (uint32_t r = 0; r < st.cfg.workers; ++r)
    if (st.finished_workers.count(r) == 0)
      out.insert(r);
  for (auto& m : st.members)
    if (m.info.kind == role::worker)
      out.erase(m.info.rank);
  return out;
}

uint32_t lowest_free_rank(self_ptr self, role kind) {
  auto& st = self->state;
  if (kind == role::worker)
    if (auto free = free_worker_ranks(self); !free.empty())
      return st.given_up.pick(free);
  std::set<uint32_t> used;
  for (auto& m : st.members)
    if (m.info.kind == kind)
      used.insert(m.info.rank);
  uint32_t r = 0;
  while (used.count(r) != 0)
    ++r;
  return r;
}

std::vector<uint32_t> server_ranks(self_ptr self) {
  std::vector<uint32_t> out;
  for (auto& n : nodes_of(self, role::server))
    out.push_back(n.rank);
  return out;
}

void replace_placement(self_ptr self) {
  auto& st = self->state;
  auto servers = server_ranks(self);
  if (servers.empty())
    st.placement.clear();
  else
    st.placement = place(st.keys, st.placement, servers, st.cfg.placement);
}

bool is_live_worker(self_ptr self, uint32_t rank) {
  return std::any_of(self->state.members.begin(), self->state.members.end(),
                     [rank](const scheduler_state::member& m) {
                       return m.info.kind == role::worker &&
                              m.info.rank == rank;
                     });
}

// -- joining ------------------------------------------------------------------

/// Live members of `kind` stay within --cluster.servers or
/// --cluster.workers: a stranger cannot join as one more worker (sync
/// rounds would wait on it), and a dead rank's place is free again for its
/// restart.
caf::error check_room(self_ptr self, role kind) {
  auto& cfg = self->state.cfg;
  auto limit = kind == role::server ? cfg.servers : cfg.workers;
  auto live = nodes_of(self, kind).size();
  if (live < limit)
    return caf::none;
  auto name = std::string{kind == role::server ? "server" : "worker"};
  with_peer_name(self, self->current_sender(),
                 [name, live, limit](const std::string& peer) {
                   TROUPE_LOG_LIMITED(warning, "scheduler", "refused a ", name,
                                      " from ", peer, ": ", live, " of ", limit,
                                      " ", name, "s live");
                 });
  return caf::make_error(errc::cluster_full,
                         str("the cluster is full: ", live, " of --cluster.",
                             name, "s=", limit, " ", name,
                             "s live; raise --cluster.", name, "s to add one"));
}

/// A server's loopback address reaches only its own machine (its road's
/// machine: boot id and network namespace): refused where a member, or the
/// scheduler, is on another. At bc0f027 servers started without --host
/// on three machines advertised 127.0.0.1, and a dead one's slices came
/// back with no replica.
caf::error check_reachable(self_ptr self, const register_request& req) {
  auto refuse = [&](const std::string& server, const std::string& host,
                    const std::string& other) {
    auto err = caf::make_error(
        errc::invalid_config,
        str(server, " advertises ", host,
            ", which only its own machine"
            " reaches, and ",
            other,
            " runs on another: start each server"
            " (or agent) with --host=AN_ADDRESS_ITS_PEERS_REACH"));
    with_peer_name(self, self->current_sender(),
                   [kind = std::string{to_string(req.kind)},
                    why = describe(err)](const std::string& peer) {
                     TROUPE_LOG_LIMITED(warning, "scheduler", "refused a ",
                                        kind, " from ", peer, ": ", why);
                   });
    return err;
  };
  auto here = machine_id();
  if (req.kind == role::server && is_loopback(req.host)) {
    if (req.road.machine != here)
      return refuse("this server", req.host, "the scheduler");
    for (auto& m : self->state.members)
      if (m.info.road.machine != req.road.machine)
        return refuse("this server", req.host,
                      str(to_string(m.info.kind), " ", m.info.rank));
    return caf::none;
  }
  for (auto& m : self->state.members)
    if (m.info.kind == role::server && is_loopback(m.info.host) &&
        m.info.road.machine != req.road.machine)
      return refuse(str("server ", m.info.rank), m.info.host,
                    str("this ", to_string(req.kind)));
  return caf::none;
}

/// Refuses a node whose optimizer disagrees with a live member's where
/// both said theirs: servers must run one optimizer, workers and servers
/// must agree where it runs, and workers that run it must run one. At
/// fbf4dac a server with adam and a worker with --optimizer.on=worker
/// trained to a loss of 1e11 and exited 0.
caf::error check_optimizer(self_ptr self, const register_request& req) {
  if (req.optimizer.empty())
    return caf::none;
  for (auto& m : self->state.members) {
    if (m.optimizer.empty())
      continue;
    bool servers = req.kind == role::server && m.info.kind == role::server;
    bool workers = req.kind == role::worker && m.info.kind == role::worker;
    // The nodes that run it must run one: servers where it runs on them,
    // workers where it runs on the workers.
    auto place = optimizer_place(req.optimizer);
    bool runners =
        (servers && place == "server") || (workers && place == "worker");
    bool agree = place == optimizer_place(m.optimizer) &&
                 (!runners || req.optimizer == m.optimizer);
    if (!agree)
      return caf::make_error(
          errc::invalid_config,
          str("this ", to_string(req.kind), "'s optimizer is ", req.optimizer,
              ", ", to_string(m.info.kind), " ", m.info.rank, "'s ",
              m.optimizer,
              ": give every node the same --optimizer flags (where it"
              " runs, --optimizer.on, above all)"));
  }
  return caf::none;
}

/// Refuses a node whose --server.mode is not the scheduler's where both
/// said theirs. Servers of async under workers of sync trained to 0.845
/// where either alone reached 0.863, and a restarted worker resumes at the
/// clock its own mode picks (kv_settings::resume_at_largest); the
/// scheduler's mode decides how checkpoints are cut, and what their
/// manifest records.
caf::error check_mode(self_ptr self, const register_request& req) {
  auto& ours = self->state.cfg.checkpoint.mode;
  if (req.mode.empty() || ours.empty() || req.mode == ours)
    return caf::none;
  return caf::make_error(
      errc::invalid_config,
      str("this ", to_string(req.kind), " runs --server.mode=", req.mode,
          ", the scheduler ", ours,
          ": give every node the same --server.mode (the servers keep"
          " workers in step by it, and checkpoints are cut by it)"));
}

/// Refuses a worker, in sync and ssp, whose work (the flags that decide
/// how many clocks it runs) is not a live worker's where both said theirs.
/// At ee5f66d counter workers of 5 and 10 steps in sync: the first waited
/// at the end barrier, the second's pull of clock 6 for a round that
/// lacked the first's push, until its 10 s timeout; then the first said a
/// false MISMATCH (in ssp:2 the second stalled at clock 8 alike). In async
/// a worker that ends first holds no one back.
caf::error check_work(self_ptr self, const register_request& req) {
  auto& mode = self->state.cfg.checkpoint.mode;
  if (req.work.empty() || mode == "async")
    return caf::none;
  for (auto& m : self->state.members)
    if (m.info.kind == role::worker && !m.work.empty() && m.work != req.work)
      return caf::make_error(
          errc::invalid_config,
          str("this worker runs ", req.work, ", worker ", m.info.rank, " ",
              m.work, ": give every worker the same flags (in ", mode,
              " a worker that ends first leaves the others' rounds short)"));
  return caf::none;
}

caf::result<frame> on_register(self_ptr self, const frame& f) {
  register_request req;
  if (auto err = decode(f, req)) { // 2
    TROUPE_LOG(warning, "scheduler",
               "dropped Register: ", self->system().render(err));
    return err;
  }
  if (req.kind == role::scheduler)
    return caf::make_error(errc::malformed_message,
                           "a scheduler cannot register");
  if (auto err = check_room(self, req.kind))
    return err;
  if (auto err = check_reachable(self, req))
    return err;
  if (auto err = check_optimizer(self, req))
    return err;
  if (auto err = check_mode(self, req))
    return err;
  if (auto err = check_work(self, req))
    return err;
  if (req.stage_group != 0 &&
      (req.kind != role::worker || req.stage_group > self->state.cfg.workers))
    return caf::make_error(errc::invalid_config, "a stage group of",
                           req.stage_group,
                           "stages per replica: only for"
                           " workers, at most --cluster.workers",
                           self->state.cfg.workers);
  auto handle = caf::actor_cast<caf::actor>(self->current_sender());
  // A worker taking the rank of one whose cut is not known yet waits for
  // it: the servers must drop the old process's clocks before the new one
  // pushes under its rank (scheduler_cuts.cpp).
  if (req.kind == role::worker &&
      cut_pending(self, lowest_free_rank(self, role::worker))) {
    auto rp = self->make_response_promise();
    self->state.parked_registers.push_back({req, handle, rp});
    return rp;
  }
  return admit(self, req, handle);
}

frame admit(self_ptr self, const register_request& req, caf::actor handle) {
  node_info info{req.kind, lowest_free_rank(self, req.kind),
                 req.host, req.port,
                 req.pid,  req.road};
  self->monitor(handle);
  if (req.kind == role::worker) {
    self->state.given_up.joined(info.rank, free_worker_ranks(self));
  }
  self->state.members.push_back(
      {info, handle, req.stage_group, req.optimizer, req.work});
  self->state.ranks_of_agents.learn(host_of(handle.node()), req.pid, req.kind,
                                    info.rank);
  ++self->state.joined[req.kind];
  // The first server after every server died: the declared arrays had no
  // place, and every view said so ("declared slices without a place": no
  // server could join again). They take one now; their values went with
  // the last server (remove_member recorded the loss).
  if (req.kind == role::server && self->state.placement.empty() &&
      !self->state.keys.empty())
    replace_placement(self);
  // A worker publishes nothing of its own (its host and port are empty).
  TROUPE_LOG(
      info, "scheduler", to_string(req.kind), " ", info.rank, " joined (pid ",
      req.pid,
      req.host.empty() ? "" : ", " + req.host + ":" + std::to_string(req.port),
      ")");
  publish(self);
  bool again = !self->state.seen.emplace(req.kind, info.rank).second;
  record(self, again ? "rejoined" : "joined", info,
         str("view ", self->state.epoch));
  check_barriers(self);
  // A server checks every member's token, so it gets the key; a worker
  // proves itself with its own token only.
  auto& key = self->state.road_key;
  auto road_key =
      req.kind == role::server ? key : member_token(key, {req.kind, info.rank});
  auto reply = encode(
      register_reply{info.rank, current_view(self), secret_bytes(road_key)});
  flush_parked(self);           // declares waiting for this server
  if (req.kind == role::worker) // a restart after the loss, say
    tell_loss(self, handle);
  return reply;
}

// -- fencing ------------------------------------------------------------------

/// A server dropped its link to backup `backup` while the view named it,
/// and has operations to acknowledge that the backup may lack: the backup
/// is told before any view that could promote its replicas of the
/// sender's stores, then the sender may answer (returns our epoch). A
/// sender that is no member (declared dead) may not: its acknowledgements
/// would be of stores promoted elsewhere. A backup that is no member any
/// more promotes nothing: nothing to tell.
caf::result<uint64_t> on_stale(self_ptr self, uint32_t backup, uint64_t link) {
  auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  using member = scheduler_state::member;
  const member* primary = nullptr;
  const member* to = nullptr;
  for (auto& m : self->state.members) {
    if (m.info.kind != role::server)
      continue;
    if (m.handle.address() == from)
      primary = &m;
    if (m.info.rank == backup)
      to = &m;
  }
  if (!primary) {
    TROUPE_LOG(warning, "scheduler",
               "refused a notice of a dropped link to server ", backup,
               " from a server that is no member");
    return caf::make_error(errc::not_a_member,
                           "a dropped-link notice from no member server");
  }
  if (to && to != primary)
    self->send(to->handle, stale_atom_v, primary->info.rank, link);
  return self->state.epoch;
}

// -- departures ---------------------------------------------------------------

namespace {

/// Fails a checkpoint under way that `gone` leaving breaks.
void abort_checkpoint_for(self_ptr self, const node_info& gone) {
  if (gone.kind == role::server && self->state.abort_checkpoint)
    self->state.abort_checkpoint(caf::make_error(
        errc::peer_down, "server", gone.rank, "ended during the checkpoint"));
  // A sync cut waits for the workers to reach it: once the last one is
  // gone (the job done, or a crash), none will, and the servers would wait
  // out the request timeout. Cut again, where the servers are.
  if (gone.kind == role::worker && self->state.abort_checkpoint &&
      nodes_of(self, role::worker).empty())
    self->state.abort_checkpoint(caf::make_error(
        errc::clock_gap, "the last worker left before the cut"));
}

/// Removes member `i` from the view (a departure, normal or not): its
/// slices, if a server's, go to its backup or are placed anew; the view is
/// published and barriers re-checked.
void remove_member(self_ptr self,
                   std::vector<scheduler_state::member>::iterator i,
                   const char* kind, const std::string& why) {
  auto info = i->info;
  auto stage_group = i->stage_group;
  auto servers_before = server_ranks(self);
  self->state.members.erase(i);
  auto promoted = info.kind == role::server
                      ? promote_backup(self, info.rank, servers_before)
                      : 0;
  if (info.kind == role::server)
    replace_placement(self);
  publish(self);
  // No server is left to hold the declared arrays, nor a replica of them
  // (a server that leaves done, at the job's end, loses nothing).
  bool last = info.kind == role::server && server_ranks(self).empty() &&
              !self->state.keys.empty() && std::string_view{kind} != "left";
  // A worker that did not finish (crashed, or ended saying why) is cut as
  // a crash: a stage's replica is cut with it (scheduler_cuts.cpp).
  if (info.kind == role::worker)
    start_cut(self, info.rank, stage_group, std::string_view{kind} != "left");
  else if (info.kind == role::server)
    servers_changed(self);
  abort_checkpoint_for(self, info);
  record(self, kind, info, str(why, "; view ", self->state.epoch));
  if (last) {
    TROUPE_LOG(error, "scheduler", "server ", info.rank,
               " was the last: the values of every declared array are lost"
               " (a server that joins takes them afresh)");
    record(self, event_record{now_ms(), "lost", role::server, info.rank, 0,
                              str("server ", info.rank,
                                  " was the last, and no replica is left: the"
                                  " values of every declared array are lost"),
                              "scheduler"});
  }
  if (promoted > 0)
    record(self, event_record{now_ms(), "promoted", role::server,
                              backup_of(info.rank, servers_before), 0,
                              str("backup of server ", info.rank, " took its ",
                                  promoted,
                                  " slices (from their replica; afresh where"
                                  " it holds none, --server.replicas=0); view ",
                                  self->state.epoch),
                              "scheduler"});
  check_barriers(self);
}

/// A monitored actor that is no member went down: an agent that reported
/// events (3), or a watcher.
void on_other_down(self_ptr self, const caf::down_msg& dm) {
  auto r = self->state.reporters.find(dm.source);
  if (r != self->state.reporters.end()) { // 3
    record(self, event_record{now_ms(), "agent-down", role::scheduler, 0, 0,
                              self->system().render(dm.reason), r->second});
    self->state.reporters.erase(r);
  }
  auto& ws = self->state.watchers;
  ws.erase(std::remove_if(
               ws.begin(), ws.end(),
               [&dm](const caf::actor& w) { return w.address() == dm.source; }),
           ws.end());
}

} // namespace

uint64_t on_leave(self_ptr self, std::optional<std::string> why) {
  auto& ms = self->state.members;
  auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto i = std::find_if(ms.begin(), ms.end(), [&from](const auto& m) {
    return m.handle.address() == from;
  });
  if (i == ms.end())
    return self->state.epoch; // left already
  self->demonitor(i->handle);
  bool worker = i->info.kind == role::worker;
  if (why) { // not done: its rank is free, no final state to keep
    TROUPE_LOG(warning, "scheduler", to_string(i->info.kind), " ", i->info.rank,
               " (pid ", i->info.pid, ") ends before its work is done: ", *why);
    if (worker) // the view's ended, until its rank is taken again
      self->state.given_up.ended(i->info.rank);
    remove_member(self, i, "ended", *why);
    return self->state.epoch;
  }
  TROUPE_LOG(info, "scheduler", to_string(i->info.kind), " ", i->info.rank,
             " (pid ", i->info.pid, ") is done and leaves the cluster");
  if (worker)
    self->state.finished_workers.insert(i->info.rank);
  remove_member(self, i, "left", "done");
  // The last worker done: the job's final state. (Servers leave when told
  // to stop, at the end of a job: that is no new state to keep.)
  if (worker && nodes_of(self, role::worker).empty())
    start_checkpoint(self, caf::response_promise{});
  return self->state.epoch;
}

void on_down(self_ptr self, const caf::down_msg& dm) { // 1
  auto& ms = self->state.members;
  auto i = std::find_if(ms.begin(), ms.end(), [&dm](const auto& m) {
    return m.handle.address() == dm.source;
  });
  if (i == ms.end()) {
    on_other_down(self, dm);
    return;
  }
  auto info = i->info;
  auto what = str(to_string(info.kind), " ", info.rank, " (pid ", info.pid,
                  ") left the cluster: ", self->system().render(dm.reason));
  bool normal = dm.reason == caf::exit_reason::user_shutdown ||
                dm.reason == caf::exit_reason::normal;
  if (normal)
    TROUPE_LOG(info, "scheduler", what);
  else
    TROUPE_LOG(warning, "scheduler", what);
  remove_member(self, i, normal ? "left" : "crashed",
                self->system().render(dm.reason));
}

} // namespace troupe::sched
