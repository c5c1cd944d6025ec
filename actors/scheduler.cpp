// Membership, views, placement and barriers; see the header for the
// messages and the failure transitions.
#include "actors/scheduler.hpp"

#include <algorithm>

#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <caf/system_messages.hpp>

#include "actors/log.hpp"
#include "actors/placement.hpp"
#include "actors/server_checkpoint.hpp"
#include "actors/stray_errors.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

using self_ptr = scheduler_actor*;

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

cluster_view current_view(self_ptr self) {
  auto& st = self->state;
  return cluster_view{st.epoch,
                      nodes_of(self, role::server),
                      nodes_of(self, role::worker),
                      st.keys,
                      st.placement,
                      st.cfg.placement.slice_floats,
                      st.cfg.workers};
}

/// Bumps the epoch and sends the new view to every member and watcher.
void publish(self_ptr self) {
  ++self->state.epoch;
  auto f = encode(current_view(self));
  for (auto& m : self->state.members)
    self->send(m.handle, view_atom_v, f);
  for (auto& w : self->state.watchers)
    self->send(w, view_atom_v, f);
  TROUPE_LOG(info, "scheduler", "view ", self->state.epoch, ": ",
             nodes_of(self, role::server).size(), " servers, ",
             nodes_of(self, role::worker).size(), " workers, ",
             self->state.keys.size(), " keys");
}

/// The rank a node of `kind` registering now gets: the lowest one not in
/// use. For workers of a job of known size, the lowest such rank of the job
/// whose worker did not finish comes first: a worker restarted after another
/// finished resumes the dead one's partition, not the finished one's.
uint32_t lowest_free_rank(self_ptr self, role kind) {
  auto& st = self->state;
  std::set<uint32_t> used;
  for (auto& m : st.members)
    if (m.info.kind == kind)
      used.insert(m.info.rank);
  if (kind == role::worker)
    for (uint32_t r = 0; r < st.cfg.workers; ++r)
      if (used.count(r) == 0 && st.finished_workers.count(r) == 0)
        return r;
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

// -- events -----------------------------------------------------------------

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

/// Keeps `e` and logs it as one JSON line.
void record(self_ptr self, event_record e) {
  auto& evs = self->state.events;
  bool bad = e.kind == "crashed" || e.kind == "gave-up" ||
             e.kind == "agent-down" || e.kind == "exited" || e.kind == "lost" ||
             e.kind == "unreplicated";
  if (bad)
    TROUPE_LOG(warning, "scheduler", "event ", to_json(e));
  else
    TROUPE_LOG(info, "scheduler", "event ", to_json(e));
  if (evs.size() == max_events) {
    evs.erase(evs.begin(), evs.begin() + max_events / 2);
    self->state.events_dropped += max_events / 2;
  }
  evs.push_back(std::move(e));
  auto polls = std::move(self->state.event_polls);
  self->state.event_polls.clear();
  for (auto& [after, rp] : polls)
    rp.deliver(events_after(self, after));
}

void record(self_ptr self, const char* kind, const node_info& n,
            std::string detail) {
  record(self, event_record{now_ms(), kind, n.kind, n.rank, n.pid,
                            std::move(detail), "scheduler"});
}

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
  if (!member && from) {
    auto addr = caf::actor_cast<caf::actor_addr>(from);
    if (self->state.reporters.emplace(addr, e.source).second)
      self->monitor(addr);
  }
  record(self, std::move(e));
}

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

// -- barriers ---------------------------------------------------------------

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

// -- handlers ---------------------------------------------------------------

void flush_parked(self_ptr self);

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
  auto handle = caf::actor_cast<caf::actor>(self->current_sender());
  node_info info{req.kind, lowest_free_rank(self, req.kind),
                 req.host, req.port,
                 req.pid,  req.road};
  self->monitor(handle);
  self->state.members.push_back({info, handle});
  ++self->state.joined[req.kind];
  TROUPE_LOG(info, "scheduler", to_string(req.kind), " ", info.rank,
             " joined (pid ", req.pid, ", ", req.host, ":", req.port, ")");
  publish(self);
  bool again = !self->state.seen.emplace(req.kind, info.rank).second;
  record(self, again ? "rejoined" : "joined", info,
         str("view ", self->state.epoch));
  check_barriers(self);
  auto reply = encode(register_reply{info.rank, current_view(self)});
  flush_parked(self); // declares waiting for this server
  return reply;
}

bool is_live_worker(self_ptr self, uint32_t rank);

/// Resuming: `req` must step in the checkpoint's clock count and declare
/// its keys at their checkpointed sizes. A key the checkpoint lacks is
/// allowed (declared after the cut) and starts from its initialiser.
caf::error check_resumed_layout(self_ptr self, const declare_request& req) {
  auto& st = self->state;
  auto& dir = st.cfg.checkpoint.dir;
  if (st.resume_clocks_per_step != 0 &&
      req.clocks_per_step != st.resume_clocks_per_step)
    return caf::make_error(
        errc::invalid_config,
        str("worker ", req.worker, " pushes a step in ", req.clocks_per_step,
            " clocks; the checkpoint in ", dir, " was written by workers that",
            " push one in ", st.resume_clocks_per_step,
            ": resume with the --worker.overlap and --train.block-floats the",
            " job was started with"));
  for (auto& k : req.keys) {
    auto i = st.resume_sizes.find(k.key);
    if (i != st.resume_sizes.end() && i->second != k.size)
      return caf::make_error(
          errc::invalid_config,
          str("worker ", req.worker, " declares key ", k.key, " with ", k.size,
              " floats; the checkpoint in ", dir, " holds it with ", i->second,
              ": resume with the model (--train.model) and the flags the job",
              " was started with"));
  }
  return caf::none;
}

caf::error add_keys(self_ptr self, const declare_request& req) {
  auto& st = self->state;
  for (auto& [rank, n] : st.clocks_per_step)
    if (rank != req.worker && n != req.clocks_per_step &&
        is_live_worker(self, rank))
      return caf::make_error(errc::invalid_config, "worker", req.worker,
                             "pushes a step in", req.clocks_per_step,
                             "clocks, worker", rank, "in", n,
                             "(give every worker the same --worker.overlap"
                             " and --train.block-floats)");
  if (auto err = check_resumed_layout(self, req))
    return err;
  for (auto& k : req.keys) {
    auto i = std::find_if(st.keys.begin(), st.keys.end(),
                          [&k](const key_info& x) { return x.key == k.key; });
    if (i != st.keys.end() && i->size != k.size)
      return caf::make_error(errc::size_conflict, "key", k.key, "declared",
                             i->size, "now", k.size);
  }
  st.clocks_per_step[req.worker] = req.clocks_per_step;
  st.job_clocks_per_step = req.clocks_per_step;
  bool added = false;
  for (auto& k : req.keys)
    if (st.initialiser.emplace(k.key, req.worker).second) {
      st.keys.push_back(k);
      added = true;
    }
  if (added) {
    replace_placement(self);
    publish(self);
  }
  return caf::none;
}

bool is_live_worker(self_ptr self, uint32_t rank) {
  return std::any_of(self->state.members.begin(), self->state.members.end(),
                     [rank](const scheduler_state::member& m) {
                       return m.info.kind == role::worker &&
                              m.info.rank == rank;
                     });
}

void answer_declare(self_ptr self, const declare_request& req,
                    caf::response_promise& rp) {
  if (auto err = add_keys(self, req)) {
    rp.deliver(err);
    return;
  }
  declare_reply reply{current_view(self), {}};
  for (auto& k : req.keys) {
    // The first declarer initialises; if it is gone (maybe before its Init
    // arrived), this one does. Servers keep the first Init of a slice.
    auto& first = self->state.initialiser[k.key];
    if (first != req.worker && !is_live_worker(self, first))
      first = req.worker;
    if (first == req.worker)
      reply.initialiser.push_back(k.key);
  }
  rp.deliver(encode(reply));
}

void flush_parked(self_ptr self) {
  auto& st = self->state;
  // Until the expected servers have joined, declares wait for them; once
  // they have, the live ones are enough (a dead server never blocks).
  auto live = server_ranks(self).size();
  if (live == 0 ||
      (live < st.cfg.servers && st.joined[role::server] < st.cfg.servers))
    return;
  auto parked = std::move(st.parked);
  st.parked.clear();
  for (auto& p : parked)
    answer_declare(self, p.req, p.rp);
}

caf::result<frame> on_declare(self_ptr self, const frame& f) {
  declare_request req;
  if (auto err = decode(f, req)) { // 2
    TROUPE_LOG(warning, "scheduler",
               "dropped Declare: ", self->system().render(err));
    return err;
  }
  auto rp = self->make_response_promise();
  self->state.parked.push_back({std::move(req), rp});
  flush_parked(self);
  return rp;
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

/// Removes member `i` from the view (a departure, normal or not): its
/// slices, if a server's, go to its backup or are placed anew; the view is
/// published and barriers re-checked. Returns the servers before.
void remove_member(self_ptr self,
                   std::vector<scheduler_state::member>::iterator i,
                   const char* kind, const std::string& why) {
  auto info = i->info;
  auto servers_before = server_ranks(self);
  self->state.members.erase(i);
  auto promoted = info.kind == role::server
                      ? promote_backup(self, info.rank, servers_before)
                      : 0;
  if (info.kind == role::server)
    replace_placement(self);
  publish(self);
  if (info.kind == role::server && self->state.abort_checkpoint)
    self->state.abort_checkpoint(caf::make_error(
        errc::peer_down, "server", info.rank, "ended during the checkpoint"));
  // A sync cut waits for the workers to reach it: once the last one is
  // gone (the job done, or a crash), none will, and the servers would wait
  // out the request timeout. Cut again, where the servers are.
  if (info.kind == role::worker && self->state.abort_checkpoint &&
      nodes_of(self, role::worker).empty())
    self->state.abort_checkpoint(caf::make_error(
        errc::clock_gap, "the last worker left before the cut"));
  record(self, kind, info, str(why, "; view ", self->state.epoch));
  if (promoted > 0)
    record(self,
           event_record{now_ms(), "promoted", role::server,
                        backup_of(info.rank, servers_before), 0,
                        str("backup of server ", info.rank, " took its ",
                            promoted, " slices; view ", self->state.epoch),
                        "scheduler"});
  check_barriers(self);
}

// -- checkpoints
// ----------------------------------------------------------------

/// Attempts at cutting a checkpoint before giving up on it.
constexpr int checkpoint_tries = 5;

void checkpoint_done(self_ptr self, const caf::error& err, uint64_t gen) {
  auto& st = self->state;
  st.checkpointing = false;
  st.abort_checkpoint = nullptr;
  auto waiting = std::move(st.checkpoint_waiting);
  st.checkpoint_waiting.clear();
  for (auto& rp : waiting)
    if (err)
      rp.deliver(err);
    else
      rp.deliver(gen);
}

void checkpoint_failed(self_ptr self, uint64_t gen, const caf::error& err) {
  record(self, event_record{now_ms(), "checkpoint-failed", role::scheduler, 0,
                            0, str("generation ", gen, ": ", describe(err)),
                            "scheduler"});
  checkpoint_done(self, err, gen);
}

/// Every server wrote generation `gen` at `at`: the manifest names it.
void write_manifest(self_ptr self, uint64_t gen, uint64_t at,
                    std::vector<std::string> files, uint64_t started) {
  auto& ck = self->state.cfg.checkpoint;
  std::sort(files.begin(), files.end());
  checkpoint_manifest m{gen,
                        at,
                        ck.mode,
                        ck.optimizer,
                        files,
                        static_cast<uint64_t>(now_ms()),
                        self->state.job_clocks_per_step};
  if (auto err = write_checked_file(ck.dir + "/" + manifest_name, encode(m))) {
    checkpoint_failed(self, gen, err);
    return;
  }
  auto removed = remove_old_checkpoints(ck.dir, gen - 1); // keep two
  record(self, event_record{now_ms(), "checkpoint", role::scheduler, 0, 0,
                            str("generation ", gen, " at version ", at, ": ",
                                files.size(), " files in ", ck.dir, ", ",
                                m.time_ms - started, " ms; ", removed,
                                " old files removed"),
                            "scheduler"});
  checkpoint_done(self, caf::none, gen);
}

/// One attempt at generation `gen`: ask every server for its version, cut
/// `margin` rounds above the largest, collect the files.
/// Servers' clocks per step of the live workers (they agree; 1 if none).
uint32_t clocks_per_step(self_ptr self) {
  uint32_t per = 1;
  for (auto& [rank, n] : self->state.clocks_per_step)
    if (is_live_worker(self, rank))
      per = std::max(per, n);
  return per;
}

void attempt_checkpoint(self_ptr self, uint64_t gen, uint64_t margin, int tries,
                        uint64_t started) {
  std::vector<caf::actor> servers;
  for (auto& m : self->state.members)
    if (m.info.kind == role::server)
      servers.push_back(m.handle);
  if (servers.empty()) {
    checkpoint_failed(self, gen,
                      caf::make_error(errc::not_connected, "no servers"));
    return;
  }
  // Only sync rounds wait for a cut; other modes snapshot at once.
  bool workers = !nodes_of(self, role::worker).empty() &&
                 self->state.cfg.checkpoint.mode == "sync";
  struct gather {
    size_t left = 0;
    uint64_t top = 0;
    std::vector<std::string> files;
    bool failed = false;
  };
  auto g = std::make_shared<gather>();
  g->left = servers.size();
  auto timeout = std::chrono::seconds{60};
  auto fail = [self, g, gen, margin, tries, started](caf::error err) {
    if (g->failed)
      return;
    g->failed = true;
    // A server passed the cut, or no worker is left to reach it (the next
    // attempt then cuts where the servers are).
    if (err == errc::clock_gap && tries > 1) {
      attempt_checkpoint(self, gen, margin * 2, tries - 1, started);
      return;
    }
    checkpoint_failed(self, gen, err);
  };
  self->state.abort_checkpoint = fail; // a server died: do not wait for it
  for (auto& srv : servers)
    self->request(srv, timeout, checkpoint_atom_v, gen)
        .then(
            [self, g, gen, margin, workers, servers, timeout, fail,
             started](uint64_t version) {
              g->top = std::max(g->top, version);
              if (g->failed || --g->left > 0)
                return;
              auto at = g->top + (workers ? margin : 0);
              // Between steps: an overlapped worker resumed mid-step would
              // give the rest of that step up.
              if (auto per = clocks_per_step(self); workers && per > 1)
                at = (at + per - 1) / per * per;
              g->left = servers.size();
              for (auto& s : servers)
                self->request(s, timeout, checkpoint_atom_v, gen, at)
                    .then(
                        [self, g, gen, at, started](std::string& file) {
                          g->files.push_back(std::move(file));
                          if (!g->failed && --g->left == 0)
                            write_manifest(self, gen, at, std::move(g->files),
                                           started);
                        },
                        fail);
            },
            fail);
}

/// Takes a checkpoint now (or joins the one under way); `rp` (if valid)
/// gets its generation.
void start_checkpoint(self_ptr self, caf::response_promise rp) {
  auto& st = self->state;
  if (st.cfg.checkpoint.dir.empty()) {
    if (rp.pending())
      rp.deliver(caf::make_error(errc::invalid_config,
                                 "the scheduler has no --checkpoint.dir"));
    return;
  }
  if (rp.pending())
    st.checkpoint_waiting.push_back(rp);
  if (st.checkpointing)
    return;
  if (st.keys.empty()) {
    checkpoint_done(self,
                    caf::make_error(errc::unknown_key,
                                    "nothing to checkpoint: no key declared"),
                    0);
    return;
  }
  st.checkpointing = true;
  attempt_checkpoint(self, ++st.generation, 1, checkpoint_tries,
                     static_cast<uint64_t>(now_ms()));
}

/// The periodic checkpoint: only while workers change the state.
void checkpoint_tick(self_ptr self) {
  auto every = self->state.cfg.checkpoint.every_ms;
  if (!nodes_of(self, role::worker).empty())
    start_checkpoint(self, caf::response_promise{});
  self->delayed_send(self, std::chrono::milliseconds{every}, tick_atom_v);
}

uint64_t on_leave(self_ptr self) {
  auto& ms = self->state.members;
  auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  auto i = std::find_if(ms.begin(), ms.end(), [&from](const auto& m) {
    return m.handle.address() == from;
  });
  if (i == ms.end())
    return self->state.epoch; // left already
  TROUPE_LOG(info, "scheduler", to_string(i->info.kind), " ", i->info.rank,
             " (pid ", i->info.pid, ") is done and leaves the cluster");
  self->demonitor(i->handle);
  bool worker = i->info.kind == role::worker;
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
    auto r = self->state.reporters.find(dm.source);
    if (r != self->state.reporters.end()) { // 3
      record(self, event_record{now_ms(), "agent-down", role::scheduler, 0, 0,
                                self->system().render(dm.reason), r->second});
      self->state.reporters.erase(r);
    }
    auto& ws = self->state.watchers;
    ws.erase(std::remove_if(ws.begin(), ws.end(),
                            [&dm](const caf::actor& w) {
                              return w.address() == dm.source;
                            }),
             ws.end());
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

/// Resuming: the checkpoint's slices must be those this scheduler's
/// --cluster.slice-floats cuts each key into, or servers would find no
/// slice of the right size to restore and train those afresh.
caf::error check_slicing(self_ptr self, const resume_set& set) {
  auto bound = self->state.cfg.placement.slice_floats;
  for (auto& [key, size] : self->state.resume_sizes) {
    auto n = slice_count(size, bound);
    for (uint32_t i = 0; i < n; ++i) {
      auto [first, last] = slice_range(size, bound, i);
      auto at = set.slices.find(slice_id{key, i});
      if (at == set.slices.end() || at->second.second->floats != last - first)
        return caf::make_error(
            errc::invalid_config,
            str("the checkpoint in ", self->state.cfg.checkpoint.dir,
                " cuts key ", key, " into other slices than",
                " --cluster.slice-floats=", bound,
                " does: resume with the flags the job was started with"));
    }
  }
  return caf::none;
}

} // namespace

caf::behavior scheduler(scheduler_actor* self, scheduler_settings cfg) {
  self->state.cfg = cfg;
  self->set_down_handler(
      [self](const caf::down_msg& dm) { on_down(self, dm); });
  log_stray_errors(self, [] { return std::string{"scheduler"}; });
  auto& ck = cfg.checkpoint;
  if (ck.resume) { // one clear line now rather than failing servers later
    auto set = load_resume_set(ck, false); // servers check their flags
    if (!set) {
      TROUPE_LOG(error, "scheduler", describe(set.error()));
      self->quit(set.error());
      return {};
    }
    auto& m = (*set)->manifest;
    self->state.generation = m.generation;
    self->state.resume_clocks_per_step = m.clocks_per_step;
    self->state.job_clocks_per_step = m.clocks_per_step;
    for (auto& [id, at] : (*set)->slices)
      self->state.resume_sizes[id.key] += at.second->floats;
    if (auto err = check_slicing(self, **set)) {
      TROUPE_LOG(error, "scheduler", describe(err));
      self->quit(err);
      return {};
    }
    TROUPE_LOG(info, "scheduler", "resuming from checkpoint ", m.generation,
               " in ", ck.dir, " (version ", m.version, ", ",
               (*set)->slices.size(), " slices)");
  } else if (!ck.dir.empty()) {
    // A fresh job in a folder with an earlier job's checkpoint: number
    // after it, so no file of ours takes a name it uses, and say so.
    if (auto m = read_manifest(ck.dir)) {
      self->state.generation = m->generation;
      TROUPE_LOG(warning, "scheduler", ck.dir, " holds checkpoint ",
                 m->generation,
                 " of an earlier job; this job starts afresh"
                 " (--resume continues it) and replaces it at its first"
                 " checkpoint");
    }
  }
  if (!ck.dir.empty() && ck.every_ms > 0)
    self->delayed_send(self, std::chrono::milliseconds{ck.every_ms},
                       tick_atom_v);
  return {
      [self](register_atom, const frame& f) { return on_register(self, f); },
      [self](declare_atom, const frame& f) { return on_declare(self, f); },
      [self](barrier_atom, const frame& f) { return on_barrier(self, f); },
      [self](view_atom) { return encode(current_view(self)); },
      [self](event_atom, const frame& f) { on_event(self, f); },
      [self](stale_atom, uint32_t backup, uint64_t link) {
        return on_stale(self, backup, link);
      },
      [self](events_atom) { return encode(self->state.events); },
      [self](leave_atom) { return on_leave(self); },
      [self](checkpoint_atom) {
        auto rp = self->make_response_promise();
        start_checkpoint(self, rp);
        return rp;
      },
      [self](tick_atom) { checkpoint_tick(self); },
      [self](events_atom, uint64_t n) -> caf::result<frame> {
        auto& st = self->state;
        if (st.events_dropped + st.events.size() > n)
          return events_after(self, n);
        auto rp = self->make_response_promise();
        st.event_polls.emplace_back(n, rp);
        return rp;
      },
      [self](watch_atom) {
        auto w = caf::actor_cast<caf::actor>(self->current_sender());
        self->monitor(w);
        self->state.watchers.push_back(w);
        return encode(current_view(self));
      },
  };
}

} // namespace troupe
