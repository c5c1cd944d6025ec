// A shard server's handlers: registration, views, init, push, pull.
#include "actors/shard_server.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <caf/event_based_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/log.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

void replier::deliver(const outbound& out) {
  if (road)
    road->conn->send(road_op::reply, road->id, out);
  else
    rp.deliver(out.flatten());
}

void replier::deliver(const frame& f) {
  if (road)
    road->conn->send(road_op::reply, road->id, f);
  else
    rp.deliver(f);
}

void replier::deliver(const caf::error& err) {
  if (road)
    road->conn->send(road_op::failure, road->id, encode_failure(err));
  else
    rp.deliver(err);
}

std::string replier::source() const {
  if (road)
    return std::string{"a "} + to_string(road->conn->kind()) +
           " road connection";
  auto from = rp.source();
  return from ? caf::to_string(from->node()) : std::string{"?"};
}

namespace {

using self_ptr = shard_server_actor*;

std::string who(self_ptr self) {
  return "server " + std::to_string(self->state.rank);
}

/// Reports the first update after a worker was lost (a "resumed" event).
void report_resumed(self_ptr self) {
  auto& st = self->state;
  if (st.lost_epoch == 0 || st.store.version() <= st.lost_version)
    return;
  auto workers = st.view.workers.size();
  event_record e{now_ms(),
                 "resumed",
                 role::server,
                 st.rank,
                 static_cast<uint32_t>(::getpid()),
                 str("version ", st.store.version(), " applied with ", workers,
                     " workers after view ", st.lost_epoch),
                 who(self)};
  self->send(st.scheduler, event_atom_v, encode(e));
  st.lost_epoch = 0;
}

/// Answers every waiting pull the store can serve now.
void serve_pulls(self_ptr self) {
  auto& st = self->state;
  std::vector<shard_server_state::waiting_pull> still;
  for (auto& p : st.pulls) {
    if (!st.store.readable_at(p.req.clock) ||
        !st.store.initialised(p.req.slices)) {
      still.push_back(std::move(p));
      continue;
    }
    // Encoded straight from the store: values are copied once, into the
    // reply's frame.
    std::vector<slice_view> views;
    if (auto err = st.store.read_views(p.req.slices, views))
      p.to.deliver(err);
    else // on the fast road, written straight from the store
      p.to.deliver(encode_pull_reply(st.store.version(), views,
                                     st.store.clock_of(p.req.worker)));
  }
  st.pulls = std::move(still);
  report_resumed(self);
}

/// Notes which workers are new in `v` (7) and whether one was lost.
void track_workers(self_ptr self, const cluster_view& v) {
  auto& st = self->state;
  std::map<uint32_t, uint64_t> next;
  for (auto& w : v.workers) {
    auto old = std::find_if(st.view.workers.begin(), st.view.workers.end(),
                            [&w](const node_info& o) { return o == w; });
    auto i = st.incarnation.find(w.rank);
    next[w.rank] = old != st.view.workers.end() && i != st.incarnation.end()
                       ? i->second
                       : v.epoch;
  }
  for (auto& w : st.view.workers)
    if (next.count(w.rank) == 0 ||
        std::none_of(v.workers.begin(), v.workers.end(),
                     [&w](const node_info& n) { return n == w; })) {
      if (st.lost_epoch == 0)
        st.lost_version = st.store.version();
      st.lost_epoch = v.epoch;
    }
  st.incarnation = std::move(next);
}

/// A request from a dead incarnation of its rank (7).
caf::error check_incarnation(self_ptr self, uint32_t worker, uint64_t epoch) {
  auto i = self->state.incarnation.find(worker);
  if (i != self->state.incarnation.end() && epoch < i->second)
    return caf::make_error(errc::not_a_member, "worker", worker,
                           "request from view", epoch,
                           "before it rejoined in view", i->second);
  return caf::none;
}

void apply_view(self_ptr self, cluster_view v) { // 3
  auto& st = self->state;
  if (!st.joined) { // ownership needs our rank: keep the newest for later
    if (v.epoch > st.early_view.epoch)
      st.early_view = std::move(v);
    return;
  }
  if (v.epoch <= st.view.epoch)
    return;
  std::map<uint64_t, uint64_t> sizes;
  for (auto& k : v.keys)
    sizes[k.key] = k.size;
  std::map<slice_id, uint32_t> owned;
  for (auto& p : v.placement)
    if (p.server == st.rank) {
      auto r = slice_range(sizes[p.key], v.slice_floats, p.index);
      owned[slice_id{p.key, p.index}] =
          static_cast<uint32_t>(r.second - r.first);
    }
  std::set<uint32_t> workers;
  for (auto& w : v.workers)
    workers.insert(w.rank);
  track_workers(self, v);
  st.store.set_owned(owned);
  // A rank taken by a new process without a view in between: the old one
  // leaves first, so the new one starts at the others' clock.
  auto kept = workers;
  for (auto& [rank, epoch] : st.incarnation)
    if (epoch == v.epoch)
      kept.erase(rank);
  st.store.set_workers(kept);
  st.store.set_workers(workers);
  st.view = std::move(v);
  TROUPE_LOG(debug, who(self), "view ", st.view.epoch, ": ", owned.size(),
             " slices, ", workers.size(), " workers");
  // Run what waited for this epoch; keep what waits for a later one.
  auto held = std::move(st.held);
  st.held.clear();
  for (auto& [epoch, fn] : held)
    if (epoch <= st.view.epoch)
      fn();
    else
      st.held.emplace_back(epoch, std::move(fn));
  serve_pulls(self);
}

/// Views a request may be ahead of ours; more is a broken sender.
constexpr uint64_t max_epochs_ahead = 1000;

/// Runs `fn` now, or once our view reaches `epoch`.  // 4
template <class F>
void when_epoch(self_ptr self, uint64_t epoch, replier& rp, F fn) {
  auto ours = self->state.view.epoch;
  if (epoch <= ours)
    fn();
  else if (epoch - ours > max_epochs_ahead) // 5
    rp.deliver(caf::make_error(errc::malformed_message, "epoch", epoch,
                               "far ahead of", ours));
  else
    self->state.held.emplace_back(epoch, std::move(fn));
}

template <class Request>
bool decode_or_reject(self_ptr self, bytes_view f, Request& req, replier& rp) {
  if (auto err = decode(f, req)) { // 5
    TROUPE_LOG(warning, who(self), "dropped a malformed request from ",
               rp.source(), ": ", self->system().render(err));
    rp.deliver(err);
    return false;
  }
  return true;
}

void handle_init(self_ptr self, init_request req, replier rp) {
  if (auto err = check_incarnation(self, req.worker, req.epoch)) {
    rp.deliver(err);
    return;
  }
  if (auto err = self->state.store.init(req)) {
    rp.deliver(err);
    return;
  }
  rp.deliver(encode(push_reply{self->state.store.version(), false}));
  serve_pulls(self);
}

void handle_push(self_ptr self, const push_request& req,
                 const std::vector<slice_view>& values, replier rp) {
  if (auto err = check_incarnation(self, req.worker, req.epoch)) {
    rp.deliver(err);
    return;
  }
  auto reply = self->state.store.push(req, values);
  if (!reply) {
    TROUPE_LOG(debug, who(self),
               "push refused: ", self->system().render(reply.error()));
    rp.deliver(std::move(reply.error()));
    return;
  }
  rp.deliver(encode(*reply));
  serve_pulls(self);
}

void handle_pull(self_ptr self, pull_request req, replier rp) {
  auto& st = self->state;
  if (auto err = check_incarnation(self, req.worker, req.epoch)) {
    rp.deliver(err);
    return;
  }
  if (auto err = st.store.check_pull(req.worker, req.clock)) {
    rp.deliver(err);
    return;
  }
  for (auto& id : req.slices) // unknown slices fail now, not after a wait
    if (!st.store.owns(id)) {
      rp.deliver(caf::make_error(errc::slice_not_owned, id.key, id.index));
      return;
    }
  st.pulls.push_back({std::move(req), std::move(rp)});
  serve_pulls(self);
}

/// Opens the fast road; without it, workers use CAF.
road_info open_road(self_ptr self, const std::string& host) {
  auto addr = self->address();
  auto on_msg = [addr](road_message_ptr m) {
    if (auto h = caf::actor_cast<caf::actor>(addr))
      caf::anon_send(h, road_atom_v, std::move(m));
  };
  auto& cfg = self->state.cfg;
  auto road = road_listener::start(host, cfg.road_port,
                                   cfg.road_send_timeout_ms, on_msg);
  if (!road) {
    TROUPE_LOG(warning, who(self), "no fast road (",
               self->system().render(road.error()), "): workers use CAF");
    return {};
  }
  self->state.road = std::move(*road);
  return self->state.road->info();
}

void start(self_ptr self, const std::string& host, uint16_t port) {
  register_request req{role::server, host, port,
                       static_cast<uint32_t>(::getpid()),
                       open_road(self, host)};
  self->request(self->state.scheduler,
                std::chrono::milliseconds{self->state.request_timeout_ms},
                register_atom_v, encode(req))
      .then(
          [self](const frame& f) { // 1
            register_reply reply;
            if (auto err = decode(f, reply)) {
              TROUPE_LOG(error, "server",
                         "bad RegisterReply: ", self->system().render(err));
              self->quit(err);
              return;
            }
            self->state.rank = reply.rank;
            self->state.joined = true;
            TROUPE_LOG(info, who(self), "joined, mode ",
                       to_string(self->state.store.mode()));
            apply_view(self, std::move(reply.view));
            if (self->state.early_view.epoch > 0)
              apply_view(self, std::move(self->state.early_view));
          },
          [self](caf::error& err) { // 2
            TROUPE_LOG(error, "server",
                       "registration failed: ", self->system().render(err));
            self->quit(err);
          });
}

/// Decodes a request and hands it to `handle` once our view has its epoch.
template <class Request, class Handler>
void accept(self_ptr self, bytes_view f, replier rp, Handler handle) {
  Request req;
  if (decode_or_reject(self, f, req, rp))
    when_epoch(self, req.epoch, rp,
               [self, req = std::move(req), rp, handle]() mutable {
                 handle(self, std::move(req), std::move(rp));
               });
}

/// A push is read in place: its values are applied straight from the
/// frame, which `keep` (or the road message in `rp`) keeps alive.
void accept_push(self_ptr self, bytes_view f, replier rp,
                 std::shared_ptr<const void> keep) {
  if (reinterpret_cast<uintptr_t>(f.data) % 8 != 0) { // never seen; be safe
    auto copy = std::make_shared<frame>();
    copy->bytes.assign(f.data, f.data + f.size);
    f = bytes_view{*copy};
    keep = copy;
  }
  push_request req;
  std::vector<slice_view> values;
  auto err =
      visit_push(f, req, [&values](slice_id id, const float* xs, size_t n) {
        values.push_back(slice_view{id, xs, n});
        return caf::error{};
      });
  if (err) { // 5
    TROUPE_LOG(warning, who(self), "dropped a malformed request from ",
               rp.source(), ": ", self->system().render(err));
    rp.deliver(err);
    return;
  }
  when_epoch(self, req.epoch, rp,
             [self, req, values = std::move(values), rp, keep]() mutable {
               handle_push(self, req, values, std::move(rp));
             });
}

/// The same for a request that came in on CAF.
template <class Request, class Handler>
caf::response_promise accept_caf(self_ptr self, const frame& f,
                                 Handler handle) {
  auto rp = self->make_response_promise();
  accept<Request>(self, f, replier{rp, nullptr}, handle);
  return rp;
}

/// A request from the fast road.
void accept_road(self_ptr self, road_message_ptr m) {
  auto f = m->bytes;
  replier to{caf::response_promise{}, m};
  switch (m->op) {
  case road_op::init:
    return accept<init_request>(self, f, std::move(to), handle_init);
  case road_op::push:
    return accept_push(self, f, std::move(to), nullptr);
  case road_op::pull:
    return accept<pull_request>(self, f, std::move(to), handle_pull);
  default:
    TROUPE_LOG(warning, who(self), "dropped a road message of kind ",
               static_cast<int>(m->op), " from ", to.source());
    to.deliver(caf::make_error(errc::malformed_message, "not a request"));
  }
}

} // namespace

caf::behavior shard_server(shard_server_actor* self, server_settings cfg,
                           caf::actor scheduler, update_fn fn) {
  self->state.store = shard_store{cfg.mode, std::move(fn)};
  self->state.cfg = cfg;
  self->state.scheduler = scheduler;
  self->monitor(scheduler);
  self->set_down_handler([self](const caf::down_msg& dm) {
    if (dm.source == self->state.scheduler.address()) { // 6
      TROUPE_LOG(error, who(self),
                 "scheduler down: ", self->system().render(dm.reason));
      self->quit(caf::make_error(errc::peer_down, "scheduler"));
    }
  });
  return {
      [self](start_atom, const std::string& host, uint16_t port) {
        start(self, host, port);
      },
      [self](view_atom, const frame& f) {
        cluster_view v;
        if (auto err = decode(f, v)) {
          TROUPE_LOG(warning, who(self),
                     "dropped a malformed view: ", self->system().render(err));
          return;
        }
        apply_view(self, std::move(v));
      },
      [self](init_atom, const frame& f) {
        return accept_caf<init_request>(self, f, handle_init);
      },
      [self](push_atom, frame& f) {
        auto rp = self->make_response_promise();
        auto keep = std::make_shared<frame>(std::move(f));
        accept_push(self, *keep, replier{rp, nullptr}, keep);
        return rp;
      },
      [self](pull_atom, const frame& f) {
        return accept_caf<pull_request>(self, f, handle_pull);
      },
      [self](road_atom, road_message_ptr& m) {
        accept_road(self, std::move(m));
      },
  };
}

} // namespace troupe
