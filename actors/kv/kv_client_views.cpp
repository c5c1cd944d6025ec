// The kv client's views: joining, following the cluster view, connecting
// to its servers (and reconnecting, 5), and where the view places slices.
// Numbers cite the transitions drawn in kv_client.hpp.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/log.hpp"
#include "actors/base/machine_id.hpp"
#include "actors/cluster/connect.hpp"
#include "actors/cluster/placement.hpp"
#include "actors/cluster/view_metrics.hpp"
#include "actors/kv/kv_client_internal.hpp"
#include "actors/road/run_here.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::kv_internal {

// -- readiness ----------------------------------------------------------------

void flush_waiting(self_ptr self) { // 2
  if (!ready(self))
    return;
  auto ops = std::move(self->state.waiting);
  self->state.waiting.clear();
  for (auto& op : ops)
    op.run();
}

// -- servers ------------------------------------------------------------------

/// Opens the fast road to server `n` if allowed; CAF carries its frames
/// otherwise. Blocks for at most road_dial_deadline_ms (2 s) per road
/// kind tried, less than the request timeout if that is less.
void dial_road(self_ptr self, const node_info& n) {
  auto& cfg = self->state.cfg;
  if (cfg.road == road_kind::middleman || n.road.port == 0 ||
      !self->state.road_id)
    return;
  auto addr = self->address();
  auto rank = n.rank;
  // The reader runs the kv client itself when it is idle, for this one
  // reply: one thread hop less per reply (and none for a caller blocked
  // on it). Writes the reply leads to wait for a scheduler thread. A large
  // reply is handed over: its copy out then overlaps the next read; one
  // that landed in place (tcp) has little left to copy and stays.
  auto on_msg = [addr, rank, here = !cfg.scheduler_only](road_message_ptr m) {
    auto h = caf::actor_cast<caf::actor>(addr);
    if (!h)
      return;
    if (here && (m->bytes.size < run_here_max_bytes || m->landing))
      send_and_run_here(std::move(h),
                        caf::make_message(road_atom_v, rank, std::move(m)), 1);
    else
      caf::anon_send(h, road_atom_v, rank, std::move(m));
  };
  auto on_down = [addr, rank](uint64_t serial, const caf::error& err) {
    if (auto h = caf::actor_cast<caf::actor>(addr))
      caf::anon_send(h, road_down_atom_v, rank, serial, describe(err));
  };
  auto conn = road_dial(n.host, n.road, cfg.road, cfg.ring_bytes,
                        cfg.request_timeout_ms, cfg.roads, *self->state.road_id,
                        on_msg, on_down);
  if (!conn) {
    TROUPE_LOG(warning, who(self), "no fast road to server ", rank, " (",
               describe(conn.error()), "): using CAF");
    return;
  }
  TROUPE_LOG(debug, who(self), "fast road to server ", rank, ": ",
             to_string((*conn)->kind()));
  // A newer view may have made us connect again: the old road goes.
  drop_road(self, rank,
            caf::make_error(errc::peer_down, "server", rank, "reconnected"));
  self->state.roads[rank].conn = std::move(*conn);
}

namespace {

/// Connects to server `n`; `again` (5): a reconnection to a server of the
/// current view, which runs the resends that wait once it succeeds.
void connect(self_ptr self, const node_info& n, bool again = false) {
  // A reconnection (5) does not hold up operations on the other servers.
  if (!again)
    ++self->state.connecting;
  TROUPE_LOG(debug, who(self), "connecting to server ", n.rank, " at ", n.host,
             ":", n.port);
  auto rank = n.rank;
  auto named = [self, n] { // the view still names this very server
    auto& vs = self->state.view.servers;
    return std::find(vs.begin(), vs.end(), n) != vs.end();
  };
  connect_actor(
      self, n.host, n.port, timeout_of(self),
      [self, rank, n, again, named](caf::strong_actor_ptr& ptr) {
        if (!again)
          --self->state.connecting;
        TROUPE_LOG(debug, who(self), "connected to server ", rank,
                   ptr ? "" : " (no actor)");
        // A reconnection the view overtook is of no use (5).
        if (ptr && (!again || (named() && !self->state.stopping))) {
          auto h = caf::actor_cast<caf::actor>(ptr);
          self->monitor(h);
          self->state.servers[rank] = h;
          dial_road(self, n);
          if (again) {
            TROUPE_LOG(info, who(self), "reconnected to server ", rank);
            run_resends(self, true);
          }
        }
        flush_waiting(self);
      },
      [self, n, again, named](caf::error& err) {
        // Unreachable while the view names it: not dead (the scheduler
        // would have said so), maybe cut off from us alone.
        if (!again)
          --self->state.connecting;
        TROUPE_LOG(error, who(self), "cannot connect to server ", n.rank,
                   " at ", n.host, ":", n.port, ": ",
                   self->system().render(err));
        if (named() && !self->state.stopping) // 5: try again
          self->delayed_send(self, std::chrono::milliseconds{500},
                             reconnect_atom_v, n.rank);
        flush_waiting(self);
      });
}

} // namespace

/// 5: reconnects to server `rank` if the view still names it and we have
/// no connection to it.
void reconnect(self_ptr self, uint32_t rank) {
  auto& st = self->state;
  if (st.stopping || st.servers.count(rank) != 0)
    return;
  for (auto& n : st.view.servers)
    if (n.rank == rank) {
      TROUPE_LOG(warning, who(self), "reconnecting to server ", rank,
                 ": its connection broke, but the view still names it");
      connect(self, n, true);
      return;
    }
}

// -- registration and failures ------------------------------------------------

namespace {

/// Stops the client (4): every operation still outstanding fails with
/// `err`, so no caller waits on us in vain.
void stop(self_ptr self, caf::error err) {
  auto& st = self->state;
  st.stopping = true;
  auto ops = std::move(st.waiting);
  st.waiting.clear();
  for (auto& op : ops)
    op.fail(err);
  auto resends = std::move(st.resends);
  st.resends.clear();
  for (auto& [rank, parked] : st.rerouting)
    for (auto& r : parked)
      resends.push_back(std::move(r));
  st.rerouting.clear();
  st.redials.clear();
  for (auto& r : resends)
    r.fail(err);
  for (auto& [rank, weak] : st.inflight)
    if (auto g = weak.lock())
      g->fail(err);
  for (auto& [id, call] : st.calls)
    if (auto g = call.g.lock())
      g->fail(err);
  st.calls.clear();
  std::vector<uint32_t> ranks;
  for (auto& [rank, link] : st.roads)
    ranks.push_back(rank);
  for (auto rank : ranks) // also fails what waits behind a window
    drop_road(self, rank, err);
  st.caf_windows.clear(); // what waited there is in st.inflight: failed
  self->quit(std::move(err));
}

/// A request to a dead node never completes: fail what waits on `rank`.
void fail_inflight(self_ptr self, uint32_t rank) {
  auto err = caf::make_error(errc::peer_down, "server", rank);
  drop_road(self, rank, err);
  // Failing an operation may resend it at once, which tracks it anew (in
  // `inflight`): fail them after looking, not while.
  std::vector<gather_ptr> failing;
  for (auto& [r, weak] : self->state.inflight)
    if (auto g = weak.lock(); g && r == rank)
      failing.push_back(std::move(g));
  for (auto& g : failing)
    g->fail(err);
  reset_caf_window(self, rank); // what waited there has failed just now
  forget_redial(self, rank);    // gone: no road to wait for
}

/// Our road token from the RegisterReply (road_auth.hpp). A view that
/// overtook the reply may have connected us to servers already, without
/// a road: they get theirs now.
void take_road_token(self_ptr self, const std::string& bytes) {
  auto& st = self->state;
  secret token;
  if (!secret_from_bytes(bytes, token)) {
    if (st.cfg.road != road_kind::middleman)
      TROUPE_LOG(warning, who(self), "the scheduler gave no road token:",
                 " using CAF to every server");
    return;
  }
  st.road_id = road_credential{{role::worker, st.rank}, token};
  for (auto& n : st.view.servers) {
    auto road = st.roads.find(n.rank);
    if (st.servers.count(n.rank) &&
        (road == st.roads.end() || !road->second.conn))
      dial_road(self, n);
  }
}

} // namespace

void join(self_ptr self) {
  if (self->state.joined || self->state.stopping)
    return; // a stray (register_atom)
  if (self->state.join_deadline == std::chrono::steady_clock::time_point{})
    self->state.join_deadline =
        std::chrono::steady_clock::now() + timeout_of(self);
  // Our machine: a server that advertises a loopback address is of no
  // use to a worker on another (the scheduler refuses one or the other).
  auto& cfg = self->state.cfg;
  register_request req{role::worker,
                       cfg.publish_host,
                       cfg.publish_port,
                       static_cast<uint32_t>(::getpid()),
                       road_info{0, machine_id(), ""},
                       cfg.stage_group,
                       cfg.optimizer,
                       cfg.mode,
                       cfg.work};
  self->request(self->state.scheduler, timeout_of(self), register_atom_v,
                encode(req))
      .then(
          [self](const frame& f) { // 1
            register_reply reply;
            if (auto err = decode(f, reply)) {
              stop(self, err); // 4
              return;
            }
            self->state.rank = reply.rank;
            self->state.joined = true;
            take_road_token(self, reply.road_key);
            TROUPE_LOG(info, who(self), "joined");
            apply_view(self, std::move(reply.view));
            // The view may have overtaken this reply (apply_view then
            // ignores it as old) with every server connected already:
            // joining alone can make us ready.
            flush_waiting(self);
          },
          [self](caf::error& err) { // 4
            // Full: a restart may come before its predecessor's death is
            // seen. Wait for the place, within our request timeout.
            // (The last try ends before the deadline: a caller waiting
            // for readiness as long hears why.)
            constexpr auto pause = std::chrono::milliseconds{200};
            if (err == errc::cluster_full &&
                std::chrono::steady_clock::now() + pause <
                    self->state.join_deadline) {
              TROUPE_LOG(info, "worker", describe(err), ": trying again");
              self->delayed_send(self, pause, register_atom_v);
              return;
            }
            err = scheduler_timeout(std::move(err), "registration",
                                    timeout_of(self));
            TROUPE_LOG(error, "worker", "registration failed: ", describe(err));
            stop(self, err);
          });
}

caf::result<bool> told_to_leave(self_ptr self, uint32_t dead, uint64_t keep,
                                const std::string& why) {
  auto& st = self->state;
  auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (from != st.scheduler.address()) {
    TROUPE_LOG_LIMITED(warning, who(self),
                       "refused to leave on the word of another than the"
                       " scheduler");
    return caf::make_error(errc::not_a_member,
                           "only the scheduler tells a worker to leave");
  }
  if (st.pushed_top <= keep) { // nothing of ours to take out
    st.push_fence = keep;
    st.fence_rank = dead;
    TROUPE_LOG(info, who(self), why,
               ": it pushed none of them, and pushes"
               " none until worker ",
               dead, " is back");
    return false;
  }
  TROUPE_LOG(warning, who(self), why, ": it pushed clock ", st.pushed_top - 1,
             ", so it leaves too, and its pushes from ", keep, " go as well");
  auto rp = self->make_response_promise<bool>();
  rp.deliver(true);
  stop(self, caf::make_error(errc::peer_down, why));
  return rp;
}

void on_loss(self_ptr self, const frame& f) {
  auto& st = self->state;
  auto from = caf::actor_cast<caf::actor_addr>(self->current_sender());
  event_record e;
  if (from != st.scheduler.address() || decode(f, e) || e.kind != "lost" ||
      st.stopping)
    return; // only the scheduler's word counts
  auto what = str("the job lost values (the first loss, from ", e.source, ": ",
                  e.detail,
                  "): what it trains on from here is not what"
                  " it trained; --cluster.allow-loss accepts that");
  if (!st.cfg.ends_on_loss) {
    TROUPE_LOG(warning, who(self), what);
    return;
  }
  TROUPE_LOG(error, who(self), what, "; it ends now");
  stop(self, caf::make_error(errc::values_lost, what));
}

void on_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (dm.source == st.scheduler.address()) { // 4
    TROUPE_LOG(error, who(self),
               "scheduler down: ", self->system().render(dm.reason));
    stop(self, scheduler_gone());
    return;
  }
  for (auto i = st.servers.begin(); i != st.servers.end(); ++i)
    if (i->second.address() == dm.source) {
      auto rank = i->first;
      TROUPE_LOG(warning, who(self), "server ", rank, " down");
      st.servers.erase(i);
      fail_inflight(self, rank);
      // Dead, the scheduler's next view drops it; only a broken connection
      // leaves it in: then reconnect (5).
      self->delayed_send(self, std::chrono::milliseconds{250}, reconnect_atom_v,
                         rank);
      return;
    }
}

// -- views --------------------------------------------------------------------

namespace {

/// Keeps our handles of the servers `v` still names, connects to those new
/// in it, and returns the ranks of the servers that left.
std::vector<uint32_t> follow_servers(self_ptr self, const cluster_view& v) {
  auto& st = self->state;
  std::map<uint32_t, caf::actor> kept;
  for (auto& s : v.servers) {
    auto i = st.servers.find(s.rank);
    if (i != st.servers.end())
      kept.emplace(s.rank, i->second);
    else if (st.view.epoch == 0 ||
             !std::any_of(st.view.servers.begin(), st.view.servers.end(),
                          [&s](const node_info& o) { return o == s; }))
      connect(self, s);
  }
  std::vector<uint32_t> gone;
  for (auto& [rank, h] : st.servers)
    if (kept.count(rank) == 0)
      gone.push_back(rank);
  st.servers = std::move(kept);
  return gone;
}

/// Sends, once ready, an Init in place of a departed worker for each of
/// our inits open now.
void reinit_open_inits(self_ptr self) {
  auto& st = self->state;
  std::vector<uint64_t> open; // when_ready may run at once: not over the map
  for (auto& [serial, init] : st.open_inits)
    open.push_back(serial);
  for (auto serial : open) // sent once ready, as any operation
    when_ready(
        self,
        [self, serial] {
          auto i = self->state.open_inits.find(serial);
          if (i != self->state.open_inits.end()) // not done meanwhile
            init_in_place_of_the_gone(self, i->second);
        },
        [self](caf::error err) {
          TROUPE_LOG(warning, who(self), "Init in place of a departed worker",
                     " never sent: ", describe(err));
        });
}

} // namespace

void apply_view(self_ptr self, cluster_view v) { // 3
  auto& st = self->state;
  if (v.epoch <= st.view.epoch)
    return;
  note_view(v);
  st.sizes.clear();
  for (auto& k : v.keys)
    st.sizes[k.key] = k.size;
  st.owner.clear();
  for (auto& p : v.placement)
    st.owner[slice_id{p.key, p.index}] = p.server;
  auto gone = follow_servers(self, v);
  bool worker_left = std::any_of(
      st.view.workers.begin(), st.view.workers.end(), [&v](const node_info& o) {
        return std::find(v.workers.begin(), v.workers.end(), o) ==
               v.workers.end();
      });
  st.view = std::move(v);
  if (st.push_fence != UINT64_MAX &&
      std::any_of(
          st.view.workers.begin(), st.view.workers.end(),
          [&st](const node_info& w) { return w.rank == st.fence_rank; })) {
    TROUPE_LOG(info, who(self), "worker ", st.fence_rank,
               " is back: pushes from clock ", st.push_fence, " go again");
    st.push_fence = UINT64_MAX;
  }
  // A server that left the view will not answer: its operations fail now,
  // whether or not our own monitor noticed; once the view is whole, so
  // that what they resend is cut under it and goes to its servers. Their
  // resends queue behind those already waiting to be resent, and go
  // before any operation that waits to be sent at all (newer than they):
  // a worker's push for clock c before its push for c + 1.
  st.failing_departed = true;
  for (auto rank : gone)
    fail_inflight(self, rank);
  st.failing_departed = false;
  run_resends(self);
  flush_waiting(self);
  if (worker_left)
    reinit_open_inits(self);
}

// -- placement ----------------------------------------------------------------

/// Fails with not_connected if a slice of `key` (`n` floats) has no server
/// in our view: none is left, or the view has not placed it yet.
caf::error check_placed(self_ptr self, uint64_t key, uint64_t n) {
  auto bound = self->state.view.slice_floats;
  for (uint32_t i = 0; i < slice_count(n, bound); ++i)
    if (self->state.owner.count(slice_id{key, i}) == 0)
      return caf::make_error(errc::not_connected, "no server holds slice", key,
                             i, "in view", self->state.view.epoch);
  return caf::none;
}

caf::error never_declared(uint64_t key) {
  return caf::make_error(errc::unknown_key,
                         "key " + std::to_string(key) +
                             " was never declared (a worker's"
                             " parameters(), or kv init)");
}

std::optional<uint64_t> key_twice(const arrays& xs) {
  std::vector<uint64_t> keys;
  keys.reserve(xs.size());
  for (auto& x : xs)
    keys.push_back(x.key);
  std::sort(keys.begin(), keys.end());
  auto i = std::adjacent_find(keys.begin(), keys.end());
  if (i == keys.end())
    return std::nullopt;
  return *i;
}

caf::error check_arrays(self_ptr self, const arrays& xs) {
  if (auto key = key_twice(xs)) // the servers would read it as corruption
    return caf::make_error(errc::bad_shape,
                           "key " + std::to_string(*key) +
                               " is given twice in one push (a worker's"
                               " step() returns one array per key)");
  for (auto& x : xs) {
    auto i = self->state.sizes.find(x.key);
    if (i == self->state.sizes.end())
      return never_declared(x.key);
    if (i->second != x.values.size())
      return caf::make_error(errc::bad_shape,
                             "key " + std::to_string(x.key) + " holds " +
                                 std::to_string(i->second) + " floats, " +
                                 std::to_string(x.values.size()) +
                                 " were given (an array is pushed at its"
                                 " declared size: a worker's step() returns"
                                 " each of its parameters() size)");
    if (auto err = check_placed(self, x.key, x.values.size()))
      return err;
  }
  return caf::none;
}

/// The slices of `xs`, grouped by owning server: views into `xs`.
std::map<uint32_t, std::vector<slice_view>> slices_by_server(self_ptr self,
                                                             const arrays& xs) {
  std::map<uint32_t, std::vector<slice_view>> out;
  auto bound = self->state.view.slice_floats;
  for (auto& x : xs) {
    auto n = slice_count(x.values.size(), bound);
    for (uint32_t i = 0; i < n; ++i) {
      auto r = slice_range(x.values.size(), bound, i);
      slice_id id{x.key, i};
      out[self->state.owner.at(id)].push_back(
          slice_view{id, x.values.data() + r.first, r.second - r.first});
    }
  }
  return out;
}

} // namespace troupe::kv_internal
