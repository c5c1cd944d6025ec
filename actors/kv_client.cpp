// The kv client's handlers: registration, views, server connections, and
// the scatter/gather of init, push and pull.
#include "actors/kv_client.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <variant>

#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/sec.hpp>
#include <caf/system_messages.hpp>

#include "actors/kv_pull.hpp"
#include "actors/log.hpp"
#include "actors/named_array.hpp"
#include "actors/placement.hpp"
#include "actors/run_here.hpp"
#include "actors/stray_errors.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

kv_client_state::~kv_client_state() {
  for (auto& [rank, link] : roads)
    link.conn->close();
}

/// One operation spread over several servers: the first error wins.
struct kv_gather {
  std::function<void(caf::error)> on_error; // runs once, first failure
  size_t pending = 0;
  bool failed = false;
  void fail(caf::error err) {
    if (!failed) {
      failed = true;
      on_error(std::move(err));
    }
  }
};

void order_resends(std::vector<kv_client_state::resend>& xs) {
  std::stable_sort(xs.begin(), xs.end(),
                   [](const auto& x, const auto& y) { return x.seq < y.seq; });
}

std::vector<kv_client_state::resend>
take_due_resends(std::vector<kv_client_state::resend>& parked, uint64_t epoch,
                 std::chrono::steady_clock::time_point now, bool all) {
  order_resends(parked);
  std::vector<kv_client_state::resend> due;
  bool behind = false; // one asked for before stays parked
  for (auto i = parked.begin(); i != parked.end();)
    if (all || epoch > i->after_epoch ||
        (!behind && i->retry_at && *i->retry_at <= now)) {
      due.push_back(std::move(*i));
      i = parked.erase(i);
    } else {
      behind = true;
      ++i;
    }
  return due;
}

namespace {

using self_ptr = kv_client_actor*;
using arrays = std::vector<named_array>;

std::string who(self_ptr self) {
  if (!self->state.joined)
    return "worker (joining)";
  return "worker " + std::to_string(self->state.rank);
}

std::chrono::milliseconds timeout_of(self_ptr self) {
  return std::chrono::milliseconds{self->state.cfg.request_timeout_ms};
}

// -- readiness ----------------------------------------------------------------

bool ready(self_ptr self) {
  // While operations a lost road failed wait out their grace (reroute),
  // later ones wait too: none may overtake them (a push for clock c + 1
  // reaching a server before its push for c is refused). So do they while
  // a road waits to be dialled again for what is in flight over CAF to
  // drain (redial): else a worker with requests always in flight, as a
  // pipelined one, would never let it.
  auto& st = self->state;
  return st.joined && st.connecting == 0 && st.rerouting.empty() &&
         std::none_of(st.redials.begin(), st.redials.end(),
                      [](const auto& r) { return r.second.holding(); });
}

void flush_waiting(self_ptr self) { // 2
  if (!ready(self))
    return;
  auto ops = std::move(self->state.waiting);
  self->state.waiting.clear();
  for (auto& op : ops)
    op.run();
}

void start_tick(self_ptr self);

/// A fail callback that answers `rp` with the error.
std::function<void(caf::error)> fail_to(caf::response_promise rp) {
  return [rp](caf::error err) mutable { rp.deliver(std::move(err)); };
}

/// Runs `fn` now if ready(), else once it is. A `resend` (an operation a
/// dead server interrupted) was sent before any operation that waits, so
/// it waits ahead of them, behind the resends before it: else a push for
/// clock c + 1 held meanwhile would reach the server before c's resend.
template <class F>
void when_ready(self_ptr self, F fn, std::function<void(caf::error)> fail,
                bool resend = false) {
  if (ready(self)) {
    fn();
    return;
  }
  TROUPE_LOG(debug, who(self), "not ready (joined ", self->state.joined,
             ", connecting ", self->state.connecting, "): operation waits");
  auto& waiting = self->state.waiting;
  auto at = resend ? std::find_if(waiting.begin(), waiting.end(),
                                  [](const auto& w) { return !w.resend; })
                   : waiting.end();
  waiting.insert(at, kv_client_state::waiting_op{
                         std::chrono::steady_clock::now() + timeout_of(self),
                         std::move(fn), std::move(fail), resend});
  start_tick(self);
}

void drop_road(self_ptr self, uint32_t rank, const caf::error& why);

/// How long operations a lost road failed wait before they are resent over
/// CAF: time for CAF to hear of a server that died with its road.
constexpr std::chrono::milliseconds road_reroute_grace{100};
/// How long after such a loss the road is dialled again, and after how
/// many losses of one server's road it is not: CAF carries on.
constexpr std::chrono::milliseconds road_redial_after{1000};
constexpr uint32_t max_road_losses = 3;

/// Opens the fast road to server `n` if allowed; CAF carries its frames
/// otherwise. Blocks for at most road_dial_deadline_ms (2 s) per road
/// kind tried, less than the request timeout if that is less.
void dial_road(self_ptr self, const node_info& n) {
  auto& cfg = self->state.cfg;
  if (cfg.road == road_kind::middleman || n.road.port == 0)
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
                        cfg.request_timeout_ms, on_msg, on_down);
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

void run_resends(self_ptr self, bool all = false);
void redial(self_ptr self, uint32_t rank);
bool redial_waits_for_caf(self_ptr self, uint32_t rank);

/// Connects to server `n`; `again` (5): a reconnection to a server of the
/// current view, which runs the resends that wait once it succeeds.
void connect(self_ptr self, const node_info& n, bool again = false) {
  // A reconnection (5) does not hold up operations on the other servers.
  if (!again)
    ++self->state.connecting;
  TROUPE_LOG(debug, who(self), "connecting to server ", n.rank, " at ", n.host,
             ":", n.port);
  auto mm = self->home_system().middleman().actor_handle();
  auto rank = n.rank;
  auto named = [self, n] { // the view still names this very server
    auto& vs = self->state.view.servers;
    return std::find(vs.begin(), vs.end(), n) != vs.end();
  };
  self->request(mm, timeout_of(self), caf::connect_atom_v, n.host, n.port)
      .then(
          [self, rank, n, again, named](const caf::node_id&,
                                        caf::strong_actor_ptr& ptr,
                                        const std::set<std::string>&) {
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

void fail_inflight(self_ptr self, uint32_t rank);

void init_in_place_of_the_gone(self_ptr self,
                               const kv_client_state::open_init& open);

void apply_view(self_ptr self, cluster_view v) { // 3
  auto& st = self->state;
  if (v.epoch <= st.view.epoch)
    return;
  st.sizes.clear();
  for (auto& k : v.keys)
    st.sizes[k.key] = k.size;
  st.owner.clear();
  for (auto& p : v.placement)
    st.owner[slice_id{p.key, p.index}] = p.server;
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
  bool worker_left = std::any_of(
      st.view.workers.begin(), st.view.workers.end(), [&v](const node_info& o) {
        return std::find(v.workers.begin(), v.workers.end(), o) ==
               v.workers.end();
      });
  st.view = std::move(v);
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
  if (!worker_left)
    return;
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

// -- scatter/gather -----------------------------------------------------------

/// A reply callback that fulfils `rp`.
template <class T>
std::function<void(caf::expected<T>)> deliver_to(caf::response_promise rp) {
  return [rp](caf::expected<T> x) mutable {
    if (x)
      rp.deliver(std::move(*x));
    else
      rp.deliver(std::move(x.error()));
  };
}

using gather = kv_gather;
using gather_ptr = std::shared_ptr<gather>;

/// Remembers that `g` waits on server `rank`; forgets finished operations.
void track(self_ptr self, uint32_t rank, const gather_ptr& g) {
  auto& xs = self->state.inflight;
  xs.erase(std::remove_if(xs.begin(), xs.end(),
                          [](const auto& x) { return x.second.expired(); }),
           xs.end());
  xs.emplace_back(rank, g);
}
using reply_fn = std::function<caf::error(bytes_view)>;

/// One request to one server: a small frame, or an outbound message that
/// may point into the caller's arrays.
struct kv_request {
  uint32_t rank;
  std::variant<frame, outbound> body;
  size_t reply_bytes = 0;             // expected reply size (pulls)
  road_landing_ptr landing = nullptr; // where a pull reply may land (tcp)
  size_t bytes() const {
    return body.index() == 0 ? std::get<0>(body).bytes.size()
                             : std::get<1>(body).bytes();
  }
  /// What it holds of the window: its own bytes or its reply's.
  size_t window_bytes() const { return std::max(bytes(), reply_bytes); }
  frame flat() const {
    return body.index() == 0 ? std::get<0>(body) : std::get<1>(body).flatten();
  }
};

using keepalive = std::shared_ptr<const void>;

/// `f` on the heap, for several callbacks to hold: copying a std::function
/// copies what it holds, and a reply holds a chain of them (with_resend's,
/// the caller's), one allocation each, per copy.
template <class F> std::shared_ptr<F> share(F f) {
  return std::make_shared<F>(std::move(f));
}

void start_tick(self_ptr self) {
  if (self->state.ticking)
    return;
  self->state.ticking = true;
  auto& cfg = self->state.cfg;
  auto period = std::clamp<uint32_t>(cfg.request_timeout_ms / 8, 10, 500);
  if (cfg.resend_ms > 0)
    period = std::clamp<uint32_t>(cfg.resend_ms / 2, 10, period);
  self->delayed_send(self, std::chrono::milliseconds{period}, tick_atom_v);
}

/// Sends `req` on the road to its server, or queues it behind the window.
void road_send(self_ptr self, std::shared_ptr<kv_request> req, road_op op,
               keepalive keep, gather_ptr g,
               std::function<void(bytes_view)> on_reply, bool now = false) {
  auto& st = self->state;
  auto link = st.roads.find(req->rank);
  if (link == st.roads.end()) {
    g->fail(caf::make_error(errc::peer_down, "road to server", req->rank));
    return;
  }
  auto bytes = req->window_bytes();
  auto& l = link->second;
  if (!now && !l.admits(bytes, st.cfg.window_bytes)) {
    // Behind the window, and behind what waits already: in order.
    l.queued.emplace_back(
        bytes, [self, req, op, keep, g, on_reply = std::move(on_reply)] {
          road_send(self, req, op, keep, g, on_reply, true);
        });
    return;
  }
  auto id = st.next_call++;
  auto conn = l.conn;
  conn->land_reply(id, req->landing); // before the reply can come
  auto send = [self, conn, op, id, req, keep]() -> caf::error {
    // Injected faults: a push frame lost, or sent twice.
    auto& cfg = self->state.cfg;
    std::uniform_real_distribution<double> coin{0.0, 1.0};
    if (op == road_op::push && cfg.drop_pushes > 0 &&
        coin(self->state.faults) < cfg.drop_pushes)
      return caf::none;
    int copies = op == road_op::push && cfg.duplicate_pushes > 0 &&
                         coin(self->state.faults) < cfg.duplicate_pushes
                     ? 2
                     : 1;
    caf::error err;
    for (int i = 0; i < copies && !err; ++i)
      err = req->body.index() == 0
                ? conn->send(op, id, bytes_view{std::get<0>(req->body)})
                : conn->send(op, id, std::get<1>(req->body), &self->state.loop);
    if (!err && ++self->state.road_requests == cfg.cut_road_after) {
      TROUPE_LOG(warning, who(self), "fault injection: ending the fast road to",
                 " server ", req->rank, " after request ", id);
      conn->sever(); // its reader reports the loss: road_down_atom
    }
    return err;
  };
  auto t = std::chrono::steady_clock::now();
  st.calls[id] = road_call{req->rank,
                           bytes,
                           g,
                           std::move(on_reply),
                           t + timeout_of(self),
                           send,
                           t + std::chrono::milliseconds{st.cfg.resend_ms}};
  l.in_flight += bytes;
  track(self, req->rank, g);
  start_tick(self);
  // Never block a reader on a write; what follows a deferred write waits
  // behind it, so that a server sees our requests in order.
  if (on_road_reader() || !st.deferred_calls.empty()) {
    st.deferred_calls.push_back(id);
    if (st.deferred_calls.size() == 1)
      self->send(self, road_atom_v);
    return;
  }
  // A send fails only on a connection that ended (the write that failed
  // ended it): its road_down is on its way and fails this call with the
  // rest, which road_lost() resends if only the road broke.
  send();
}

/// Sends the calls deferred on a road reader's thread, in order.
void send_deferred(self_ptr self) {
  if (on_road_reader()) { // not here either: a scheduler thread sends them
    self->send(self, road_atom_v);
    return;
  }
  auto ids = std::move(self->state.deferred_calls);
  self->state.deferred_calls.clear();
  for (auto id : ids) {
    auto i = self->state.calls.find(id);
    if (i == self->state.calls.end())
      continue;       // failed or timed out meanwhile
    i->second.send(); // as in road_send: road_down fails it if it fails
  }
}

/// Lets queued requests of `w` go while `limit` allows.
void drain(send_window& w, size_t limit) {
  while (!w.queued.empty() && w.fits(w.queued.front().first, limit)) {
    auto next = std::move(w.queued.front().second);
    w.queued.pop_front();
    next();
  }
}

/// The most bytes in flight to one server over CAF.
size_t caf_window_limit(const kv_settings& cfg) {
  return std::min<size_t>(cfg.window_bytes, size_t{4} * cfg.max_message_bytes);
}

/// Forgets what was in flight to server `rank` over CAF (it went down:
/// those requests fail or never complete) and lets what waited go, to fail
/// or to reach a successor.
void reset_caf_window(self_ptr self, uint32_t rank) {
  auto i = self->state.caf_windows.find(rank);
  if (i == self->state.caf_windows.end())
    return;
  auto queued = std::move(i->second.queued);
  i->second.queued.clear();
  i->second.in_flight = 0;
  i->second.generation = ++self->state.window_generations;
  for (auto& q : queued)
    q.second();
}

/// Sends `req` over CAF to its server, or queues it behind the window.
template <class Atom>
void caf_send(self_ptr self, std::shared_ptr<kv_request> req, Atom atom,
              keepalive keep, gather_ptr g,
              std::function<void(bytes_view)> on_reply, bool now = false) {
  auto& st = self->state;
  auto r = req->rank;
  auto bytes = req->window_bytes();
  auto limit = caf_window_limit(st.cfg);
  auto [it, fresh] = st.caf_windows.try_emplace(r);
  auto& w = it->second;
  if (fresh)
    w.generation = ++st.window_generations;
  if (!now)
    track(self, r, g); // waits on server r, queued or sent
  if (!now && !w.admits(bytes, limit)) {
    w.queued.emplace_back(bytes, [self, req, atom, keep, g, on_reply] {
      caf_send(self, req, atom, keep, g, on_reply, true);
    });
    return;
  }
  if (g->failed)
    return; // another part failed while this one waited
  auto h = st.servers.find(r);
  if (h == st.servers.end()) {
    g->fail(caf::make_error(errc::not_connected, "server", r));
    return;
  }
  w.in_flight += bytes;
  auto done = [self, r, bytes, gen = w.generation, limit] {
    auto i = self->state.caf_windows.find(r);
    if (i == self->state.caf_windows.end() || i->second.generation != gen)
      return; // sent before the window was reset
    i->second.in_flight -= bytes;
    drain(i->second, limit);
    if (i->second.in_flight == 0 && i->second.queued.empty() &&
        redial_waits_for_caf(self, r))
      redial(self, r); // the last request over CAF before the road is back
  };
  self->request(h->second, timeout_of(self), atom, req->flat())
      .then(
          [on_reply, done](const frame& reply) {
            on_reply(reply);
            done();
          },
          [g, r, done](caf::error& err) {
            if (err == caf::sec::request_timeout)
              g->fail(caf::make_error(errc::timeout, "server", r));
            else
              g->fail(std::move(err));
            done();
          });
}

/// A reply (or failure) from a road.
void on_road_message(self_ptr self, uint32_t rank, const road_message& m) {
  auto& st = self->state;
  auto i = st.calls.find(m.id);
  if (i == st.calls.end() || i->second.rank != rank)
    return; // answered after its timeout
  auto call = std::move(i->second);
  st.calls.erase(i);
  auto link = st.roads.find(rank);
  if (link != st.roads.end())
    link->second.in_flight -= call.bytes;
  if (m.op == road_op::failure) {
    if (auto g = call.g.lock())
      g->fail(decode_failure(m.bytes));
  } else {
    call.on_reply(m.bytes);
  }
  link = st.roads.find(rank);
  if (link != st.roads.end())
    drain(link->second, st.cfg.window_bytes);
}

/// Closes the road to `rank` and fails what waited on it.
void drop_road(self_ptr self, uint32_t rank, const caf::error& why) {
  auto& st = self->state;
  auto link = st.roads.find(rank);
  if (link == st.roads.end())
    return;
  auto l = std::move(link->second);
  st.roads.erase(link);
  l.conn->close();
  for (auto i = st.calls.begin(); i != st.calls.end();)
    if (i->second.rank == rank) {
      if (auto g = i->second.g.lock())
        g->fail(why);
      i = st.calls.erase(i);
    } else {
      ++i;
    }
  for (auto& q : l.queued)
    q.second(); // road_send finds no road and fails the operation
}

/// Fails road requests past their deadline.
void on_tick(self_ptr self) {
  auto& st = self->state;
  st.ticking = false;
  if (!st.deferred_calls.empty())
    send_deferred(self); // first writes before any resend
  auto now = std::chrono::steady_clock::now();
  if (st.cfg.resend_ms > 0 && !on_road_reader()) // the frame may be lost
    for (auto& [id, call] : st.calls)
      if (call.resend_at <= now && call.deadline > now) {
        call.resend_at = now + std::chrono::milliseconds{st.cfg.resend_ms};
        TROUPE_LOG(debug, who(self), "resending request ", id, " to server ",
                   call.rank);
        call.send(); // as in road_send: road_down fails it if it fails
      }
  for (auto i = st.calls.begin(); i != st.calls.end();)
    if (i->second.deadline <= now) {
      if (auto g = i->second.g.lock())
        g->fail(caf::make_error(errc::timeout, "server", i->second.rank));
      auto link = st.roads.find(i->second.rank);
      if (link != st.roads.end()) {
        link->second.conn->forget_landing(i->first);
        link->second.in_flight -= i->second.bytes;
        drain(link->second, st.cfg.window_bytes);
      }
      i = st.calls.erase(i);
    } else {
      ++i;
    }
  for (auto i = st.waiting.begin(); i != st.waiting.end();)
    if (i->deadline <= now) {
      auto fail = std::move(i->fail);
      i = st.waiting.erase(i);
      uint64_t holds = 0;
      for (auto& [rank, plan] : st.redials)
        holds += plan.holding() ? 1 : 0;
      fail(caf::make_error(
          errc::not_connected, "kv client not ready: joined", st.joined,
          "servers connecting", uint64_t{st.connecting},
          "lost roads waiting to resend", uint64_t{st.rerouting.size()},
          "roads waiting to be dialled", holds));
    } else {
      ++i;
    }
  run_resends(self); // those a live server failed, after their pause
  for (auto i = st.resends.begin(); i != st.resends.end();)
    if (i->deadline <= now) {
      auto fail = std::move(i->fail);
      // One a live server answered waited behind one asked for before it.
      auto err =
          i->retry_at
              ? caf::make_error(errc::unreplicated,
                                "a server could not replicate it, and an"
                                " operation asked for before it still waits"
                                " for a view")
              : caf::make_error(errc::peer_down,
                                "a server died and no newer view came");
      i = st.resends.erase(i);
      fail(std::move(err));
    } else {
      ++i;
    }
  if (!st.calls.empty() || !st.waiting.empty() || !st.resends.empty())
    start_tick(self);
}

/// Sends each request to its server (road or CAF); `on_reply` digests each
/// reply; `done` runs once all replied without error. `keep` holds what the
/// requests point into until they are sent.
template <class Atom>
void scatter(self_ptr self, Atom atom, road_op op, gather_ptr g,
             std::vector<kv_request> msgs, reply_fn on_reply,
             std::function<void()> done, keepalive keep = nullptr) {
  g->pending = msgs.size();
  if (msgs.empty()) {
    done();
    return;
  }
  // Shared by every part's call: copying the two functions into each
  // would copy whatever they hold (the caller's reply chain) each time.
  struct digest {
    reply_fn on_reply;
    std::function<void()> done;
  };
  auto d =
      std::make_shared<digest>(digest{std::move(on_reply), std::move(done)});
  auto part = [g, d](bytes_view f) {
    if (g->failed)
      return;
    if (auto err = d->on_reply(f))
      g->fail(std::move(err));
    else if (--g->pending == 0)
      d->done();
  };
  for (auto& m : msgs) {
    auto r = m.rank;
    if (self->state.roads.count(r) != 0) {
      road_send(self, std::make_shared<kv_request>(std::move(m)), op, keep, g,
                part);
      continue;
    }
    if (self->state.servers.count(r) == 0) {
      g->fail(caf::make_error(errc::not_connected, "server", r));
      return;
    }
    caf_send(self, std::make_shared<kv_request>(std::move(m)), atom, keep, g,
             part);
  }
}

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

caf::error check_arrays(self_ptr self, const arrays& xs) {
  for (auto& x : xs) {
    auto i = self->state.sizes.find(x.key);
    if (i == self->state.sizes.end())
      return caf::make_error(errc::unknown_key, x.key);
    if (i->second != x.values.size())
      return caf::make_error(errc::bad_shape, x.key, i->second,
                             static_cast<uint64_t>(x.values.size()));
    if (auto err = check_placed(self, x.key, x.values.size()))
      return err;
  }
  return caf::none;
}

/// The slices of `xs`, grouped by owning server.
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

// -- push -------------------------------------------------------------------

/// Cuts one server's slices into parts of at most max-message-bytes.
std::vector<std::vector<slice_view>> cut_parts(self_ptr self,
                                               std::vector<slice_view> xs) {
  std::vector<std::vector<slice_view>> parts(1);
  size_t bytes = 0;
  for (auto& x : xs) {
    auto b = x.size * sizeof(float);
    if (!parts.back().empty() &&
        bytes + b > self->state.cfg.max_message_bytes) {
      parts.emplace_back();
      bytes = 0;
    }
    bytes += b;
    parts.back().push_back(x);
  }
  return parts;
}

/// Pushes whose arrays become spare memory once their frames are gone.
constexpr size_t max_pushes_kept = 8;

/// Moves the arrays of the pushes nothing else holds any more (no frame
/// points into them) into `spare`, one per key: newer replace older.
void harvest_spares(self_ptr self) {
  auto& st = self->state;
  for (auto i = st.pushed.begin(); i != st.pushed.end();)
    if (i->use_count() == 1) {
      for (auto& x : **i)
        if (x.values.size() > 0)
          st.spare[x.key] = std::move(x.values);
      i = st.pushed.erase(i);
    } else {
      ++i;
    }
}

/// Notes the arrays of a push, to be spare memory once it is done.
void keep_for_spares(self_ptr self, const std::shared_ptr<arrays>& keep) {
  harvest_spares(self);
  auto& xs = self->state.pushed;
  if (std::find(xs.begin(), xs.end(), keep) != xs.end())
    return; // a resend of a push noted already
  if (xs.size() >= max_pushes_kept)
    xs.erase(xs.begin()); // the oldest stays with its frames only
  xs.push_back(keep);
}

/// Full-size memory for a pull of `key` (`n` floats): a spare (harvested
/// before), or empty.
std::vector<float> take_spare(self_ptr self, uint64_t key, size_t n) {
  auto& spare = self->state.spare;
  std::vector<float> out;
  auto s = spare.find(key);
  if (s != spare.end() && s->second.size() == n) {
    out = std::move(s->second);
    spare.erase(s);
  }
  return out;
}

void do_push(self_ptr self, uint64_t clock, std::shared_ptr<arrays> keep,
             std::function<void(caf::expected<uint64_t>)> reply) {
  auto& xs = *keep;
  if (auto err = check_arrays(self, xs)) {
    reply(std::move(err));
    return;
  }
  auto by_server = slices_by_server(self, xs);
  keep_for_spares(self, keep);
  std::vector<kv_request> msgs;
  // Every server hears from us each clock, even with nothing to add, so
  // that its sync rounds and ssp clocks advance.
  for (auto& s : self->state.view.servers) {
    auto parts = cut_parts(self, std::move(by_server[s.rank]));
    for (uint32_t p = 0; p < parts.size(); ++p)
      msgs.push_back(kv_request{
          s.rank, encode_push(push_request{self->state.rank,
                                           clock,
                                           self->state.view.epoch,
                                           p,
                                           static_cast<uint32_t>(parts.size()),
                                           {}},
                              parts[p])});
  }
  auto g = std::make_shared<gather>();
  auto answer = share(std::move(reply));
  g->on_error = [answer](caf::error err) { (*answer)(std::move(err)); };
  auto version = std::make_shared<uint64_t>(UINT64_MAX);
  scatter(
      self, push_atom_v, road_op::push, g, std::move(msgs),
      [version](bytes_view f) {
        push_reply r;
        auto err = decode(f, r);
        *version = std::min(*version, r.version);
        return err;
      },
      [answer, version] { (*answer)(*version == UINT64_MAX ? 0 : *version); },
      keep);
}

// -- pull -------------------------------------------------------------------

/// Pull requests for every slice of `t`, at least one per owning server,
/// cut so that no reply exceeds the message bound.
std::vector<kv_request> pull_messages(self_ptr self, const pull_target& t,
                                      uint64_t clock) {
  std::map<uint32_t, std::vector<std::pair<slice_id, size_t>>> by_server;
  auto bound = self->state.view.slice_floats;
  for (size_t k = 0; k < t.out.size(); ++k) {
    auto key = t.out[k].key;
    auto n = t.floats[k];
    for (uint32_t i = 0; i < slice_count(n, bound); ++i) {
      auto r = slice_range(n, bound, i);
      by_server[self->state.owner.at(slice_id{key, i})].emplace_back(
          slice_id{key, i}, (r.second - r.first) * sizeof(float));
    }
  }
  std::vector<kv_request> msgs;
  for (auto& [rank, slices] : by_server) {
    pull_request req{self->state.rank, clock, self->state.view.epoch, {}};
    size_t bytes = 0;
    for (auto& [id, n] : slices) {
      if (!req.slices.empty() &&
          bytes + n > self->state.cfg.max_message_bytes) {
        msgs.push_back(kv_request{rank, encode(req), bytes});
        req.slices.clear();
        bytes = 0;
      }
      req.slices.push_back(id);
      bytes += n;
    }
    msgs.push_back(kv_request{rank, encode(req), bytes});
  }
  return msgs;
}

/// Replies to the pulls in `msgs` that go on a tcp road land in place:
/// the arrays of `t` are sized in full first. Where no spare was at hand
/// that is a zero fill, which costs about what landing saves (measured):
/// with spares, as in a training loop, landing saves a copy.
void land_in_place(self_ptr self, const std::shared_ptr<pull_target>& t,
                   std::vector<kv_request>& msgs) {
  auto on_tcp = [self](const kv_request& m) {
    auto link = self->state.roads.find(m.rank);
    return link != self->state.roads.end() &&
           link->second.conn->kind() == road_kind::tcp;
  };
  if (std::none_of(msgs.begin(), msgs.end(), on_tcp))
    return;
  for (size_t k = 0; k < t->out.size(); ++k)
    t->out[k].values.resize(t->floats[k]); // a spare is sized already
  auto l = std::make_shared<pull_landing>(t, self->state.view.slice_floats);
  for (auto& m : msgs)
    if (on_tcp(m))
      m.landing = l;
}

void do_pull(self_ptr self, uint64_t clock, const std::vector<uint64_t>& keys,
             std::function<void(caf::expected<arrays>)> reply) {
  auto t = std::make_shared<pull_target>();
  auto bound = self->state.view.slice_floats;
  harvest_spares(self); // once for all keys
  for (auto k : keys) {
    auto i = self->state.sizes.find(k);
    if (i == self->state.sizes.end()) {
      reply(caf::make_error(errc::unknown_key, k));
      return;
    }
    if (auto err = check_placed(self, k, i->second)) {
      reply(std::move(err));
      return;
    }
    t->add(k, i->second, bound, take_spare(self, k, i->second));
  }
  auto g = std::make_shared<gather>();
  auto answer = share(std::move(reply));
  g->on_error = [answer](caf::error err) { (*answer)(std::move(err)); };
  auto msgs = pull_messages(self, *t, clock);
  land_in_place(self, t, msgs);
  scatter(
      self, pull_atom_v, road_op::pull, g, std::move(msgs),
      [t, bound](bytes_view f) { return copy_reply(f, *t, bound); },
      [answer, t] {
        if (auto err = t->complete())
          return (*answer)(std::move(err));
        (*answer)(std::move(t->out));
      });
}

// -- resending after a server died
// ---------------------------------------------

template <class T> using reply_to = std::function<void(caf::expected<T>)>;

/// Most resends of one operation.
constexpr int max_resends = 3;

/// Runs `attempt`; if it fails because a server died (peer_down, or
/// not_connected: its handle is gone while the view still names it), runs
/// it again once a newer view placed that server's slices elsewhere (on its
/// backup, which holds their replicas); if a live server could not
/// replicate it (unreplicated), then too, or after a pause (run_resends).
/// Pushes carry (worker, clock, part), so servers drop what they had
/// already: resending is safe. `seq`: the operation's place in the order
/// of resends (0: a new operation, given the next).
template <class T>
void with_resend(self_ptr self, std::function<void(reply_to<T>)> attempt,
                 reply_to<T> done, int left = max_resends, uint64_t seq = 0) {
  auto epoch = self->state.view.epoch;
  if (seq == 0)
    seq = ++self->state.resend_seq;
  auto tries = share(std::move(attempt));
  auto answer = share(std::move(done));
  (*tries)([self, tries, answer, left, epoch, seq](caf::expected<T> r) {
    // No server at all in our view: nowhere to resend to.
    bool nowhere = self->state.view.servers.empty();
    if (r || left == 0 || nowhere || self->state.stopping ||
        (r.error() != errc::peer_down && r.error() != errc::not_connected &&
         r.error() != errc::unreplicated)) {
      (*answer)(std::move(r));
      return;
    }
    // A live server's: resent to it after a pause if no view comes first
    // (it may be the scheduler that was slow to tell its backup).
    std::optional<std::chrono::steady_clock::time_point> retry_at;
    if (r.error() == errc::unreplicated)
      retry_at = std::chrono::steady_clock::now() + timeout_of(self) / 8;
    TROUPE_LOG(info, who(self), "a server ",
               retry_at ? "could not replicate an operation" : "went down",
               " mid-request (", describe(r.error()), "): resending once the",
               " view changes", retry_at ? ", or after a pause" : "");
    // If the new view has no place for the slices (no server left), the
    // caller hears of the death, not of the empty view.
    auto first = r.error();
    auto again = [self, tries, answer, left, first, seq] {
      with_resend<T>(
          self, *tries,
          [answer, first](caf::expected<T> x) {
            if (!x && x.error() == errc::not_connected)
              (*answer)(first);
            else
              (*answer)(std::move(x));
          },
          left - 1, seq);
    };
    auto fail = [answer](caf::error err) { (*answer)(std::move(err)); };
    auto& st = self->state;
    if (st.view.epoch > epoch && !st.failing_departed) {
      when_ready(self, again, fail, true);
      return;
    }
    st.resends.push_back(kv_client_state::resend{
        epoch, std::chrono::steady_clock::now() + timeout_of(self),
        std::move(again), std::move(fail), retry_at, seq});
    start_tick(self);
  });
}

/// Drops the redial planned for server `rank`, if any: its timers go
/// stale, and operations its hold kept wait no more (while apply_view
/// fails a departed server's operations, it lets them go itself, after
/// those operations' resends).
void forget_redial(self_ptr self, uint32_t rank) {
  auto i = self->state.redials.find(rank);
  if (i == self->state.redials.end())
    return;
  bool held = i->second.holding();
  self->state.redials.erase(i);
  if (held && !self->state.failing_departed)
    flush_waiting(self);
}

/// Plans redial(rank) `after` from now; an earlier timer goes stale.
void plan_redial(self_ptr self, uint32_t rank,
                 std::chrono::milliseconds after) {
  auto ticket = ++self->state.redial_tickets;
  self->state.redials[rank].ticket = ticket;
  self->delayed_send(self, after, redial_atom_v, rank, ticket);
}

/// True if server `rank`'s road is to be dialled once nothing to it is in
/// flight over CAF: it holds operations for that, or looks for the gap.
bool redial_waits_for_caf(self_ptr self, uint32_t rank) {
  auto i = self->state.redials.find(rank);
  return i != self->state.redials.end() &&
         i->second.at != kv_client_state::redial_plan::stage::due;
}

/// Server `rank`'s fast road ended. What the loss failed waits to be
/// resent in a view without that server; if only the road broke, no such
/// view comes. Those operations wait apart for `road_reroute_grace`, in
/// which CAF hears of a server that died with its road, then reroute()
/// resends them over CAF, or leaves them to wait for the view.
void road_lost(self_ptr self, uint32_t rank, const caf::error& why) {
  auto& st = self->state;
  auto before = st.resends.size();
  forget_redial(self, rank);  // reroute() plans one anew if the server lives
  drop_road(self, rank, why); // fails its calls: with_resend parks them
  auto& mine = st.rerouting[rank]; // maybe none: reroute() redials anyway
  auto from = st.resends.begin() + static_cast<std::ptrdiff_t>(before);
  std::move(from, st.resends.end(), std::back_inserter(mine));
  st.resends.erase(from, st.resends.end());
  self->delayed_send(self, road_reroute_grace, reroute_atom_v, rank);
}

/// The grace after server `rank`'s road ended is over: if CAF still holds
/// the server (it lives; only its road broke), its parked operations are
/// resent now, over CAF, and the road is dialled again road_redial_after
/// on; else they wait for the view like the others.
void reroute(self_ptr self, uint32_t rank) {
  auto& st = self->state;
  auto i = st.rerouting.find(rank);
  if (i == st.rerouting.end())
    return;
  auto due = std::move(i->second);
  st.rerouting.erase(i);
  if (st.stopping)
    return; // stop() failed them
  if (st.servers.count(rank) != 0) {
    auto losses = ++st.road_losses[rank];
    TROUPE_LOG(info, who(self), "only the fast road to server ", rank,
               " broke (CAF still reaches it): resending ", due.size(),
               " operations over CAF");
    order_resends(due);
    for (auto& r : due) // in order, before the operations held meanwhile
      r.run();
    if (losses < max_road_losses)
      plan_redial(self, rank, road_redial_after);
    else
      TROUPE_LOG(warning, who(self), "the fast road to server ", rank,
                 " broke ", losses, " times: CAF carries its frames from now",
                 " on");
  } else {
    // The server is gone after all: they wait for the view with the
    // others, before them (they failed first).
    st.resends.insert(st.resends.begin(), std::make_move_iterator(due.begin()),
                      std::make_move_iterator(due.end()));
    run_resends(self); // the view may have come meanwhile
    start_tick(self);
  }
  flush_waiting(self);
}

/// Dials server `rank`'s fast road again, after it broke while the server
/// lived on: while the view names the server and no other road to it came
/// meanwhile. A request on the new road must not overtake one still on
/// CAF. If any to that server is in flight there, later operations wait
/// (ready() is false), and the last reply over CAF calls this again: so a
/// worker that always has requests in flight gets its road back. If they
/// have not drained after road_reroute_grace (a request that waits for a
/// later one of ours, as a pull ahead of its push in sync mode, or a
/// round held up by another worker), the operations go on, holding
/// nothing from then on: the next reply that leaves nothing in flight
/// over CAF dials (as does a look every road_reroute_grace). One dial: if
/// it fails, CAF carries on.
void redial(self_ptr self, uint32_t rank) {
  auto& st = self->state;
  auto plan = st.redials.find(rank);
  if (plan == st.redials.end())
    return; // dialled, or forgotten
  auto n = std::find_if(st.view.servers.begin(), st.view.servers.end(),
                        [rank](const node_info& x) { return x.rank == rank; });
  if (st.stopping || st.roads.count(rank) != 0 || st.servers.count(rank) == 0 ||
      n == st.view.servers.end()) {
    forget_redial(self, rank);
    return;
  }
  auto w = st.caf_windows.find(rank);
  if (w != st.caf_windows.end() &&
      (w->second.in_flight > 0 || !w->second.queued.empty())) {
    auto& p = plan->second;
    using stage = kv_client_state::redial_plan::stage;
    if (p.at == stage::holding) { // the hold ran out
      TROUPE_LOG(info, who(self), "requests to server ", rank,
                 " over CAF did not drain in ", road_reroute_grace.count(),
                 " ms: its road waits for a moment with none in flight");
      p.at = stage::polling;
      flush_waiting(self);
    } else if (p.at == stage::due) {
      TROUPE_LOG(info, who(self), "the road to server ", rank,
                 " is dialled again once what is in flight there over CAF",
                 " drains; operations wait until then");
      p.at = stage::holding;
    }
    plan_redial(self, rank, road_reroute_grace);
    return;
  }
  bool held = plan->second.holding();
  st.redials.erase(plan); // its timers go stale
  dial_road(self, *n);
  if (st.roads.count(rank) != 0)
    TROUPE_LOG(info, who(self), "fast road to server ", rank, " open again");
  if (held) // what the hold kept takes the new road
    flush_waiting(self);
}

/// The timer `ticket` of a redial of server `rank` is up; stale ones (the
/// road came back, broke again, or another timer took over) do nothing.
void on_redial_timer(self_ptr self, uint32_t rank, uint64_t ticket) {
  auto i = self->state.redials.find(rank);
  if (i != self->state.redials.end() && i->second.ticket == ticket)
    redial(self, rank);
}

/// Resends whose view has come, or whose pause after a live server's
/// errc::unreplicated is over; with `all`, every one, its view come or
/// not: a server it waited for is back (5), and one whose server is still
/// gone fails again and waits anew.
void run_resends(self_ptr self, bool all) {
  auto& st = self->state;
  auto due = take_due_resends(st.resends, st.view.epoch,
                              std::chrono::steady_clock::now(), all);
  for (auto& r : due)
    when_ready(self, std::move(r.run), std::move(r.fail), true);
}

/// The clock this worker resumes at: the smallest of its clocks over the
/// servers that hold slices (0 on a first run). A server whose rounds lag
/// by one when a restarted worker joins holds it a clock lower than the
/// others: resuming there, the worker's first push is a duplicate where
/// rounds are ahead and completes the lagging round (resuming at the
/// largest would leave that round waiting for it forever). A server with
/// no slices (a restarted one) does not count: it takes the clock of the
/// worker's first push.
void do_clock(self_ptr self,
              std::function<void(caf::expected<uint64_t>)> reply) {
  auto& st = self->state;
  std::set<uint32_t> holders;
  for (auto& [id, rank] : st.owner)
    holders.insert(rank);
  std::vector<kv_request> msgs;
  for (auto& s : st.view.servers) // an empty pull: only the clock comes back
    if (holders.empty() || holders.count(s.rank) != 0)
      msgs.push_back(kv_request{
          s.rank, encode(pull_request{st.rank, 0, st.view.epoch, {}})});
  auto g = std::make_shared<gather>();
  g->on_error = [reply](caf::error err) { reply(std::move(err)); };
  auto lo = std::make_shared<uint64_t>(UINT64_MAX);
  scatter(
      self, pull_atom_v, road_op::pull, g, std::move(msgs),
      [lo](bytes_view f) {
        uint64_t version = 0, clock = 0;
        auto err = visit_pull_reply(
            f, version,
            [](slice_id id, const float*, size_t) {
              return caf::make_error(errc::malformed_message, "unasked slice",
                                     id.key, id.index);
            },
            &clock);
        *lo = std::min(*lo, clock);
        return err;
      },
      [reply, lo] { reply(*lo == UINT64_MAX ? 0 : *lo); });
}

// -- init -------------------------------------------------------------------

void send_inits(self_ptr self, const arrays& xs,
                const std::vector<uint64_t>& mine, std::function<void()> then,
                gather_ptr g) {
  arrays own;
  for (auto& x : xs)
    if (std::find(mine.begin(), mine.end(), x.key) != mine.end())
      own.push_back(x);
  std::vector<kv_request> msgs;
  for (auto& [rank, slices] : slices_by_server(self, own))
    for (auto& part : cut_parts(self, std::move(slices))) {
      init_request req{self->state.rank, self->state.view.epoch, {}};
      for (auto& v : part) // rare: once per array and run
        req.slices.push_back({v.id, {v.data, v.data + v.size}});
      msgs.push_back(kv_request{rank, encode(req)});
    }
  scatter(
      self, init_atom_v, road_op::init, g, std::move(msgs),
      [](bytes_view f) {
        push_reply r;
        return decode(f, r);
      },
      std::move(then));
}

/// Sends our Init of the keys others initialise while our init is not
/// done (our own Inits on their way, or the pull after them waiting): a
/// worker left, and it may have been their initialiser, gone before its
/// Init arrived. Servers keep the first Init of a slice, so where the
/// initialiser's came first, ours changes nothing. Our own keys' Inits are
/// sent already, or fail our init (which is then resent).
void init_in_place_of_the_gone(self_ptr self,
                               const kv_client_state::open_init& open) {
  auto xs = open.arrays;
  auto& ours = open.initialising;
  std::vector<uint64_t> keys;
  for (auto& x : *xs)
    if (std::find(ours.begin(), ours.end(), x.key) == ours.end())
      keys.push_back(x.key);
  if (keys.empty())
    return;
  TROUPE_LOG(info, who(self),
             "a worker left before our init was done: sending our Init"
             " of the keys others initialise, in case it was theirs");
  auto g = std::make_shared<gather>();
  g->on_error = [self](caf::error err) {
    TROUPE_LOG(warning, who(self),
               "Init in place of a departed worker failed: ", describe(err));
  };
  send_inits(
      self, *xs, keys, [] {}, g);
}

/// Push, then pull at the next clock, sent together: one round trip per
/// server for a training step. Replies with the pulled arrays once both
/// finished; the first error wins.
void do_push_pull(self_ptr self, uint64_t clock, std::shared_ptr<arrays> keep,
                  const std::vector<uint64_t>& keys,
                  std::function<void(caf::expected<arrays>)> reply) {
  struct joint {
    std::function<void(caf::expected<arrays>)> reply;
    bool pushed = false;
    bool failed = false;
    std::optional<arrays> pulled;
    void fail(caf::error err) {
      if (!failed) {
        failed = true;
        reply(std::move(err));
      }
    }
    void finish() {
      if (!failed && pushed && pulled)
        reply(std::move(*pulled));
    }
  };
  auto j = std::make_shared<joint>();
  j->reply = std::move(reply);
  do_push(self, clock, std::move(keep), [j](caf::expected<uint64_t> r) {
    if (!r)
      return j->fail(std::move(r.error()));
    j->pushed = true;
    j->finish();
  });
  do_pull(self, clock + 1, keys, [j](caf::expected<arrays> r) {
    if (!r)
      return j->fail(std::move(r.error()));
    j->pulled = std::move(*r);
    j->finish();
  });
}

/// `xs` is shared, never copied: arrays may be large, and a resend runs
/// this again.
void do_init(self_ptr self, std::shared_ptr<const arrays> xs,
             uint32_t clocks_per_step, reply_to<arrays> reply) {
  declare_request req{self->state.rank, {}, clocks_per_step};
  std::vector<uint64_t> keys;
  for (auto& x : *xs) {
    req.keys.push_back(key_info{x.key, x.values.size()});
    keys.push_back(x.key);
  }
  // Our init is over, either way: no Init in place of a departed worker.
  auto serial = self->state.next_init++;
  auto done = [self, serial, reply](caf::expected<arrays> r) {
    self->state.open_inits.erase(serial);
    reply(std::move(r));
  };
  auto g = std::make_shared<gather>();
  g->on_error = [done](caf::error err) { done(std::move(err)); };
  track(self, UINT32_MAX, g); // failed if we stop
  TROUPE_LOG(debug, who(self), "declaring ", keys.size(), " arrays");
  self->request(self->state.scheduler, timeout_of(self), declare_atom_v,
                encode(req))
      .then(
          [self, xs, keys, g, done, serial](const frame& f) {
            declare_reply dr;
            if (auto err = decode(f, dr)) {
              g->fail(err);
              return;
            }
            apply_view(self, dr.view);
            // From the scheduler's answer on, a worker that leaves may be
            // the initialiser of keys we do not initialise, gone before its
            // Init arrived: also while our own Inits are on their way.
            self->state.open_inits[serial] = {xs, dr.initialiser};
            when_ready(
                self,
                [self, xs, keys, g, done, mine = dr.initialiser] {
                  send_inits(
                      self, *xs, mine,
                      [self, keys, done] { do_pull(self, 0, keys, done); }, g);
                },
                [g](caf::error err) { g->fail(std::move(err)); });
          },
          [g](caf::error& err) { g->fail(err); });
}

// -- registration -------------------------------------------------------------

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

void join(self_ptr self) {
  register_request req{role::worker, "", 0, static_cast<uint32_t>(::getpid()),
                       road_info{}};
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
            TROUPE_LOG(info, who(self), "joined");
            apply_view(self, std::move(reply.view));
            // The view may have overtaken this reply (apply_view then
            // ignores it as old) with every server connected already:
            // joining alone can make us ready.
            flush_waiting(self);
          },
          [self](caf::error& err) { // 4
            TROUPE_LOG(error, "worker",
                       "registration failed: ", self->system().render(err));
            stop(self, err);
          });
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

/// (init_atom, arrays[, clocks per step]): declares and initialises.
caf::response_promise on_init(self_ptr self, arrays& xs,
                              uint32_t clocks_per_step) {
  auto rp = self->make_response_promise();
  when_ready(
      self,
      [self, xs = std::move(xs), clocks_per_step, rp]() mutable {
        // Declare and Init are idempotent (the first Init of a slice wins):
        // the whole of it may be resent.
        auto keep = std::make_shared<const arrays>(std::move(xs));
        with_resend<arrays>(
            self,
            [self, keep, clocks_per_step](reply_to<arrays> r) {
              do_init(self, keep, clocks_per_step, std::move(r));
            },
            deliver_to<arrays>(rp));
      },
      fail_to(rp));
  return rp;
}

} // namespace

caf::behavior kv_client(kv_client_actor* self, kv_settings cfg,
                        caf::actor scheduler) {
  self->state.cfg = cfg;
  self->state.scheduler = scheduler;
  if (cfg.helper_threads > 0)
    self->state.loop =
        loop_on(std::make_shared<helper_pool>(cfg.helper_threads));
  self->state.faults.seed(cfg.fault_seed != 0 ? cfg.fault_seed
                                              : std::random_device{}());
  self->monitor(scheduler);
  self->set_down_handler(
      [self](const caf::down_msg& dm) { on_down(self, dm); });
  log_stray_errors(self, [self] { return who(self); });
  join(self);
  return {
      [self](view_atom, const frame& f) {
        cluster_view v;
        if (auto err = decode(f, v))
          TROUPE_LOG(warning, who(self),
                     "dropped a malformed view: ", self->system().render(err));
        else
          apply_view(self, std::move(v));
      },
      [self](init_atom, arrays& xs) { return on_init(self, xs, 1); },
      [self](init_atom, arrays& xs, uint32_t clocks_per_step) {
        return on_init(self, xs, std::max<uint32_t>(clocks_per_step, 1));
      },
      [self](push_atom, uint64_t clock, arrays& xs) {
        auto rp = self->make_response_promise();
        auto keep = std::make_shared<arrays>(std::move(xs));
        when_ready(
            self,
            [self, clock, keep, rp] {
              with_resend<uint64_t>(
                  self,
                  [self, clock, keep](reply_to<uint64_t> r) {
                    do_push(self, clock, keep, std::move(r));
                  },
                  deliver_to<uint64_t>(rp));
            },
            fail_to(rp));
        return rp;
      },
      [self](push_atom, uint64_t clock, arrays& xs,
             std::vector<uint64_t>& keys) {
        auto rp = self->make_response_promise();
        auto keep = std::make_shared<arrays>(std::move(xs));
        when_ready(
            self,
            [self, clock, keep, keys = std::move(keys), rp] {
              with_resend<arrays>(
                  self,
                  [self, clock, keep, keys](reply_to<arrays> r) {
                    do_push_pull(self, clock, keep, keys, std::move(r));
                  },
                  deliver_to<arrays>(rp));
            },
            fail_to(rp));
        return rp;
      },
      [self](road_atom, uint32_t rank, const road_message_ptr& m) {
        on_road_message(self, rank, *m);
      },
      [self](road_atom) { send_deferred(self); },
      [self](road_down_atom, uint32_t rank, uint64_t serial,
             const std::string& why) {
        auto i = self->state.roads.find(rank);
        if (i == self->state.roads.end() || i->second.conn->serial() != serial)
          return; // an older connection
        TROUPE_LOG(warning, who(self), "fast road to server ", rank,
                   " lost: ", why);
        road_lost(self, rank,
                  caf::make_error(errc::peer_down, "server", rank, why));
      },
      [self](reroute_atom, uint32_t rank) { reroute(self, rank); },
      [self](redial_atom, uint32_t rank, uint64_t ticket) {
        on_redial_timer(self, rank, ticket);
      },
      [self](tick_atom) { on_tick(self); },
      [self](reconnect_atom, uint32_t rank) { reconnect(self, rank); },
      [self](pull_atom, uint64_t clock, std::vector<uint64_t>& keys) {
        auto rp = self->make_response_promise();
        when_ready(
            self,
            [self, clock, keys = std::move(keys), rp] {
              with_resend<arrays>(
                  self,
                  [self, clock, keys](reply_to<arrays> r) {
                    do_pull(self, clock, keys, std::move(r));
                  },
                  deliver_to<arrays>(rp));
            },
            fail_to(rp));
        return rp;
      },
      [self](barrier_atom, const std::string& name, uint32_t timeout_ms) {
        auto rp = self->make_response_promise();
        when_ready(
            self,
            [self, name, timeout_ms, rp]() mutable {
              barrier_request req{name, role::worker, self->state.rank};
              self->request(self->state.scheduler,
                            std::chrono::milliseconds{timeout_ms},
                            barrier_atom_v, encode(req))
                  .then([rp](uint64_t epoch) mutable { rp.deliver(epoch); },
                        [rp](caf::error& err) mutable { rp.deliver(err); });
            },
            fail_to(rp));
        return rp;
      },
      [self](leave_atom) {
        auto rp = self->make_response_promise();
        self->request(self->state.scheduler, timeout_of(self), leave_atom_v)
            .then([rp](uint64_t epoch) mutable { rp.deliver(epoch); },
                  [rp](caf::error& err) mutable { rp.deliver(err); });
        return rp;
      },
      [self](clock_atom) {
        auto rp = self->make_response_promise();
        when_ready(
            self,
            [self, rp] { // asks every holder: one may die meanwhile
              with_resend<uint64_t>(
                  self,
                  [self](reply_to<uint64_t> r) {
                    do_clock(self, std::move(r));
                  },
                  deliver_to<uint64_t>(rp));
            },
            fail_to(rp));
        return rp;
      },
      [self](view_atom) {
        auto rp = self->make_response_promise();
        when_ready(
            self,
            [self, rp]() mutable {
              rp.deliver(self->state.rank, encode(self->state.view));
            },
            fail_to(rp));
        return rp;
      },
  };
}

} // namespace troupe
