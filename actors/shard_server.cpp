// A shard server's handlers: registration, views, init, push, pull.
#include "actors/shard_server.hpp"

#include <unistd.h>

#include <chrono>

#include <caf/event_based_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/log.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

namespace {

using self_ptr = shard_server_actor*;

std::string who(self_ptr self) {
  return "server " + std::to_string(self->state.rank);
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
      p.rp.deliver(err);
    else
      p.rp.deliver(encode_pull_reply(st.store.version(), views));
  }
  st.pulls = std::move(still);
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
  st.store.set_owned(owned);
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
void when_epoch(self_ptr self, uint64_t epoch, caf::response_promise& rp,
                F fn) {
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
bool decode_or_reject(self_ptr self, const frame& f, Request& req,
                      caf::response_promise& rp) {
  if (auto err = decode(f, req)) { // 5
    auto from = rp.source();
    TROUPE_LOG(warning, who(self), "dropped a malformed request from ",
               from ? caf::to_string(from->node()) : std::string{"?"}, ": ",
               self->system().render(err));
    rp.deliver(err);
    return false;
  }
  return true;
}

void handle_init(self_ptr self, init_request req, caf::response_promise rp) {
  if (auto err = self->state.store.init(req)) {
    rp.deliver(err);
    return;
  }
  rp.deliver(encode(push_reply{self->state.store.version(), false}));
  serve_pulls(self);
}

void handle_push(self_ptr self, push_request req, caf::response_promise rp) {
  auto reply = self->state.store.push(std::move(req));
  if (!reply) {
    TROUPE_LOG(debug, who(self),
               "push refused: ", self->system().render(reply.error()));
    rp.deliver(std::move(reply.error()));
    return;
  }
  rp.deliver(encode(*reply));
  serve_pulls(self);
}

void handle_pull(self_ptr self, pull_request req, caf::response_promise rp) {
  auto& st = self->state;
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

void start(self_ptr self, const std::string& host, uint16_t port) {
  register_request req{role::server, host, port,
                       static_cast<uint32_t>(::getpid())};
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
caf::response_promise accept(self_ptr self, const frame& f, Handler handle) {
  auto rp = self->make_response_promise();
  Request req;
  if (decode_or_reject(self, f, req, rp))
    when_epoch(self, req.epoch, rp,
               [self, req = std::move(req), rp, handle]() mutable {
                 handle(self, std::move(req), rp);
               });
  return rp;
}

} // namespace

caf::behavior shard_server(shard_server_actor* self, server_settings cfg,
                           caf::actor scheduler, update_fn fn) {
  self->state.store = shard_store{cfg.mode, std::move(fn)};
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
        return accept<init_request>(self, f, handle_init);
      },
      [self](push_atom, const frame& f) {
        return accept<push_request>(self, f, handle_push);
      },
      [self](pull_atom, const frame& f) {
        return accept<pull_request>(self, f, handle_pull);
      },
  };
}

} // namespace troupe
