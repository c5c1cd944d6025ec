// The kv client's sending: frames to servers on their fast roads or over
// CAF, each under its window (queued in order behind it), the replies
// gathered per operation, and the timeouts of what is in flight.
#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include <caf/sec.hpp>

#include "actors/base/log.hpp"
#include "actors/kv/kv_client_internal.hpp"
#include "actors/road/run_here.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::kv_internal {

/// Remembers that `g` waits on server `rank`; forgets finished operations.
void track(self_ptr self, uint32_t rank, const gather_ptr& g) {
  auto& xs = self->state.inflight;
  xs.erase(std::remove_if(xs.begin(), xs.end(),
                          [](const auto& x) { return x.second.expired(); }),
           xs.end());
  xs.emplace_back(rank, g);
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

// -- windows ------------------------------------------------------------------

namespace {

/// A request server `rank` left unanswered for `wait`: what it may mean.
caf::error no_answer(uint32_t rank, std::chrono::milliseconds wait) {
  return caf::make_error(
      errc::timeout,
      "server " + std::to_string(rank) + " did not answer within " +
          std::to_string(wait.count()) +
          " ms (--kv.request-timeout-ms): it is hung or overloaded, or, in"
          " sync mode, a pull waits for a round that lacks a push (pull(c)"
          " needs every live worker's push(c - 1), this one's too)");
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

} // namespace

// -- roads --------------------------------------------------------------------

namespace {

/// Writes request `id` (`req`) on `conn`, with the faults that
/// --fault.drop-pushes, --fault.duplicate-pushes and --fault.cut-road-after
/// inject.
caf::error send_frame(self_ptr self, const road_conn_ptr& conn, road_op op,
                      uint64_t id, const kv_request& req) {
  // Injected faults: a push frame lost, or sent twice.
  auto& cfg = self->state.cfg;
  std::uniform_real_distribution<double> coin{0.0, 1.0};
  if (op == road_op::push && cfg.faults.drop_pushes > 0 &&
      coin(self->state.faults) < cfg.faults.drop_pushes)
    return caf::none;
  int copies = op == road_op::push && cfg.faults.duplicate_pushes > 0 &&
                       coin(self->state.faults) < cfg.faults.duplicate_pushes
                   ? 2
                   : 1;
  caf::error err;
  for (int i = 0; i < copies && !err; ++i)
    err = req.body.index() == 0
              ? conn->send(op, id, bytes_view{std::get<0>(req.body)})
              : conn->send(op, id, std::get<1>(req.body), &self->state.loop);
  if (!err && ++self->state.road_requests == cfg.faults.cut_road_after) {
    TROUPE_LOG(warning, who(self), "fault injection: ending the fast road to",
               " server ", req.rank, " after request ", id);
    conn->sever(); // its reader reports the loss: road_down_atom
  }
  return err;
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
    return send_frame(self, conn, op, id, *req);
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

} // namespace

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

// -- CAF ----------------------------------------------------------------------

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

namespace {

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
          [g, r, done, wait = timeout_of(self)](caf::error& err) {
            if (err == caf::sec::request_timeout)
              g->fail(no_answer(r, wait));
            else
              g->fail(std::move(err));
            done();
          });
}

} // namespace

// -- timeouts -----------------------------------------------------------------

namespace {

/// With kv.resend-ms, sends again the road requests without a reply for
/// that long: the frame may be lost.
void resend_unanswered(self_ptr self,
                       std::chrono::steady_clock::time_point now) {
  auto& st = self->state;
  if (st.cfg.resend_ms > 0 && !on_road_reader()) // the frame may be lost
    for (auto& [id, call] : st.calls)
      if (call.resend_at <= now && call.deadline > now) {
        call.resend_at = now + std::chrono::milliseconds{st.cfg.resend_ms};
        TROUPE_LOG(debug, who(self), "resending request ", id, " to server ",
                   call.rank);
        call.send(); // as in road_send: road_down fails it if it fails
      }
}

/// Fails the road requests past their deadline (errc::timeout).
void expire_calls(self_ptr self, std::chrono::steady_clock::time_point now) {
  auto& st = self->state;
  for (auto i = st.calls.begin(); i != st.calls.end();)
    if (i->second.deadline <= now) {
      if (auto g = i->second.g.lock())
        g->fail(no_answer(i->second.rank, timeout_of(self)));
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
}

/// Fails the operations that waited for readiness past their deadline.
void expire_waiting(self_ptr self, std::chrono::steady_clock::time_point now) {
  auto& st = self->state;
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
}

/// Fails the resends that waited past their deadline for a view (or for one
/// asked for before them).
void expire_resends(self_ptr self, std::chrono::steady_clock::time_point now) {
  auto& st = self->state;
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
}

} // namespace

/// The sweep (tick_atom): sends the deferred first writes, resends lost
/// frames, and fails road requests, waiting operations and resends past
/// their deadline.
void on_tick(self_ptr self) {
  auto& st = self->state;
  st.ticking = false;
  if (!st.deferred_calls.empty())
    send_deferred(self); // first writes before any resend
  auto now = std::chrono::steady_clock::now();
  resend_unanswered(self, now);
  expire_calls(self, now);
  expire_waiting(self, now);
  run_resends(self); // those a live server failed, after their pause
  expire_resends(self, now);
  if (!st.calls.empty() || !st.waiting.empty() || !st.resends.empty())
    start_tick(self);
}

// -- scatter/gather -----------------------------------------------------------

/// Sends each request to its server (road or CAF); `on_reply` digests each
/// reply; `done` runs once all replied without error. `keep` holds what the
/// requests point into until they are sent.
template <class Atom>
void scatter(self_ptr self, Atom atom, road_op op, gather_ptr g,
             std::vector<kv_request> msgs, reply_fn on_reply,
             std::function<void()> done, keepalive keep) {
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

template void scatter<init_atom>(self_ptr self, init_atom atom, road_op op,
                                 gather_ptr g, std::vector<kv_request> msgs,
                                 reply_fn on_reply, std::function<void()> done,
                                 keepalive keep);
template void scatter<push_atom>(self_ptr self, push_atom atom, road_op op,
                                 gather_ptr g, std::vector<kv_request> msgs,
                                 reply_fn on_reply, std::function<void()> done,
                                 keepalive keep);
template void scatter<pull_atom>(self_ptr self, pull_atom atom, road_op op,
                                 gather_ptr g, std::vector<kv_request> msgs,
                                 reply_fn on_reply, std::function<void()> done,
                                 keepalive keep);

} // namespace troupe::kv_internal
