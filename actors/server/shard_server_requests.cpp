// A shard server's requests from workers, on either road: Init, Push and
// Pull, decoded, held for their view (4), applied to the stores that hold
// their slices, forwarded to the backup and answered (replication.hpp, A).
#include "actors/server/shard_server_internal.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "actors/base/log.hpp"
#include "kernels/tensor.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe::server_impl {
namespace {

/// The hosted store that holds `id`; null if none.
shard_store* store_of(self_ptr self, const slice_id& id) {
  for (auto& h : self->state.stores)
    if (h.store.owns(id))
      return &h.store;
  return nullptr;
}

// -- views a request was sent in ----------------------------------------------

/// A request from a dead incarnation of its rank (7).
caf::error check_incarnation(self_ptr self, uint32_t worker, uint64_t epoch) {
  auto i = self->state.incarnation.find(worker);
  if (i != self->state.incarnation.end() && epoch < i->second)
    return caf::make_error(errc::not_a_member, "worker", worker,
                           "request from view", epoch,
                           "before it rejoined in view", i->second);
  return caf::none;
}

/// Views a request may be ahead of ours; more is a broken sender.
constexpr uint64_t max_epochs_ahead = 1000;

/// Bytes of requests held for a newer view, at most: a worker's view is
/// ahead of ours only for a moment, with a few parts in flight; at
/// bc0f027 a peer could make a server hold 400 MiB for good.
constexpr size_t max_held_bytes = size_t{64} << 20;

/// Runs `fn` now, or once our view reaches `epoch` (4), if there is room
/// for the `bytes` of its frame among the held requests.
template <class F>
void when_epoch(self_ptr self, uint64_t epoch, replier& rp, size_t bytes,
                F fn) {
  auto& st = self->state;
  auto ours = st.view.epoch;
  if (epoch <= ours) {
    fn();
  } else if (epoch - ours > max_epochs_ahead) { // 5
    rp.deliver(caf::make_error(errc::malformed_message, "epoch", epoch,
                               "far ahead of", ours));
  } else if (st.held_bytes + bytes > max_held_bytes) {
    auto err = caf::make_error(
        errc::timeout, str("server busy: ", st.held_bytes >> 20,
                           " MiB of requests wait for views newer than ours (",
                           ours, "); resend later"));
    rp.say_source(self, [name = who(self), epoch,
                         why = describe(err)](const std::string& peer) {
      TROUPE_LOG_LIMITED(warning, name, "refused a request for view ", epoch,
                         " from ", peer, ": ", why);
    });
    rp.deliver(err);
  } else {
    if (st.held.empty()) // the first: sweep until none is left
      self->delayed_send(self, held_sweep_every, view_atom_v, tick_atom_v);
    st.held_bytes += bytes;
    st.held.push_back({epoch, std::move(fn), rp, bytes,
                       std::chrono::steady_clock::now() +
                           std::chrono::milliseconds{st.request_timeout_ms}});
  }
}

/// Logs a malformed request from `rp`'s sender.
void say_dropped(self_ptr self, const replier& rp, const caf::error& err) {
  rp.say_source(self, [name = who(self), why = self->system().render(err)](
                          const std::string& peer) {
    TROUPE_LOG_LIMITED(warning, name, "dropped a malformed request from ", peer,
                       ": ", why);
  });
}

/// True (and `rp` answered not_a_member) if a road connection sent a
/// request as a worker it did not prove itself to be.
bool refused_sender(self_ptr self, uint32_t worker, replier& rp) {
  auto err = rp.check_sender({role::worker, worker});
  if (!err)
    return false;
  TROUPE_LOG_LIMITED(warning, who(self), "refused a request: ", describe(err));
  rp.deliver(err);
  return true;
}

template <class Request>
bool decode_or_reject(self_ptr self, bytes_view f, Request& req, replier& rp) {
  if (auto err = decode(f, req)) { // 5
    say_dropped(self, rp, err);
    rp.deliver(err);
    return false;
  }
  return !refused_sender(self, req.worker, rp);
}

// -- pulls --------------------------------------------------------------------

/// True if every store holding a slice of `req` may serve it now.
bool servable(self_ptr self, const pull_request& req) {
  for (auto& h : self->state.stores) {
    std::vector<slice_id> mine;
    for (auto& id : req.slices)
      if (h.store.owns(id))
        mine.push_back(id);
    if (!mine.empty() &&
        (!h.store.readable_at(req.clock) || !h.store.initialised(mine)))
      return false;
  }
  return true;
}

/// The reply to a servable pull: slices from their stores, in order;
/// `copy` (if given) copies it out on a road.
void answer_pull(self_ptr self, const pull_request& req, replier& to,
                 const loop_fn* copy = nullptr) {
  auto& st = self->state;
  std::vector<slice_view> views;
  views.reserve(req.slices.size());
  // The puller's clock here, over our stores (a promoted one may be a
  // round apart from ours): the largest where a worker back resumes at
  // the largest over the servers, since a store that holds it lower takes
  // it higher, and one that holds it higher would drop a lower push as a
  // duplicate (one store's slices were then one push short: the counter
  // task with server kills); else the smallest.
  bool largest = workers_resume_at_largest(st.cfg);
  uint64_t version = UINT64_MAX, clock = largest ? 0 : UINT64_MAX;
  for (auto& h : st.stores) {
    auto c = h.store.clock_of(req.worker);
    clock = largest ? std::max(clock, c) : std::min(clock, c);
  }
  std::vector<slice_view> one;
  for (auto& id : req.slices) {
    auto s = store_of(self, id);
    if (!s) {
      to.deliver(caf::make_error(errc::slice_not_owned, id.key, id.index));
      return;
    }
    if (auto err = s->read_views({id}, one)) {
      to.deliver(err);
      return;
    }
    views.push_back(one.front());
    version = std::min(version, s->version());
  }
  if (version == UINT64_MAX)
    version = own_store(self).version();
  // On the fast road, written straight from the stores.
  to.deliver(encode_pull_reply(version, views, clock), copy);
}

} // namespace

/// Replies on roads are written side by side (st.loop), or a lone one
/// split over st.loop; the stores do not change meanwhile.
void serve_pulls(self_ptr self) {
  auto& st = self->state;
  std::vector<shard_server_state::waiting_pull> still, on_roads;
  for (auto& p : st.pulls) {
    if (!servable(self, p.req))
      still.push_back(std::move(p));
    else if (p.to.road)
      on_roads.push_back(std::move(p));
    else
      answer_pull(self, p.req, p.to);
  }
  st.pulls = std::move(still);
  if (on_roads.size() == 1)
    answer_pull(self, on_roads[0].req, on_roads[0].to, &st.loop);
  else
    st.loop(on_roads.size(), [&](size_t i) {
      answer_pull(self, on_roads[i].req, on_roads[i].to);
    });
  report_resumed(self);
}

namespace {

// -- handlers -----------------------------------------------------------------

void handle_init(self_ptr self, init_request req, replier rp) {
  if (auto err = check_incarnation(self, req.worker, req.epoch)) {
    rp.deliver(err);
    return;
  }
  auto& st = self->state;
  for (auto& x : req.slices)
    if (!store_of(self, x.id)) {
      rp.deliver(caf::make_error(errc::slice_not_owned, x.id.key, x.id.index));
      return;
    }
  // Each store is asked first, as for a push: a part one refuses is taken
  // by none (else the others would hold first values their replicas lack,
  // and take another worker's there).
  std::vector<init_request> parts;
  for (auto& h : st.stores) {
    parts.push_back(init_request{req.worker, req.epoch, {}});
    for (auto& x : req.slices)
      if (h.store.owns(x.id))
        parts.back().slices.push_back(x);
    if (auto err = h.store.check_init(parts.back())) {
      rp.deliver(err);
      return;
    }
  }
  for (size_t k = 0; k < st.stores.size(); ++k)
    if (auto err = st.stores[k].store.init(parts[k])) { // checked above
      TROUPE_LOG(error, who(self), "Init taken by one store, refused by",
                 " another after all: ", self->system().render(err));
      rp.deliver(err);
      return;
    }
  auto reply = encode(push_reply{own_store(self).version(), false});
  auto done = acknowledge_after(self, st.stores.size(), rp, reply);
  auto f = encode(req);
  for (auto& h : st.stores)
    forward(self, h, op_init, f, {}, done);
  serve_pulls(self);
}

/// Cuts a push into each store's part and asks every store whether it
/// would take it, before any does; the first refusal, or none.
caf::error check_push_parts(self_ptr self, const push_request& req,
                            const std::vector<slice_view>& values,
                            std::vector<std::vector<slice_view>>& mine) {
  auto& st = self->state;
  for (size_t k = 0; k < st.stores.size(); ++k) {
    auto& h = st.stores[k];
    if (req.epoch < h.since)
      continue;
    for (auto& x : values)
      if (h.store.owns(x.id))
        mine[k].push_back(x);
    if (auto ok = h.store.check_push(req, mine[k]); !ok) {
      TROUPE_LOG(debug, who(self),
                 "push refused: ", self->system().render(ok.error()));
      return std::move(ok.error());
    }
  }
  return caf::none;
}

/// Applies each store's part of a push that every store would take.
caf::expected<push_reply>
apply_push_parts(self_ptr self, const push_request& req,
                 const std::vector<std::vector<slice_view>>& mine,
                 const std::shared_ptr<const void>& keep) {
  auto& st = self->state;
  push_reply out{UINT64_MAX, true};
  for (size_t k = 0; k < st.stores.size(); ++k) {
    auto& h = st.stores[k];
    if (req.epoch < h.since)
      continue;
    auto r = h.store.push(req, mine[k], keep);
    if (!r) { // check_push said it would take it
      TROUPE_LOG(error, who(self), "push taken by one store, refused by",
                 " another after all: ", self->system().render(r.error()));
      return std::move(r.error());
    }
    out.version = std::min(out.version, r->version);
    out.duplicate = out.duplicate && r->duplicate;
  }
  return out;
}

void handle_push(self_ptr self, const push_request& req,
                 const std::vector<slice_view>& values, bytes_view f,
                 replier rp, std::shared_ptr<const void> keep) {
  if (auto err = check_incarnation(self, req.worker, req.epoch)) {
    rp.deliver(err);
    return;
  }
  auto& st = self->state;
  for (auto& x : values)
    if (!store_of(self, x.id)) {
      rp.deliver(caf::make_error(errc::slice_not_owned, x.id.key, x.id.index));
      return;
    }
  // Every store sees every part (maybe with no slice of its own), so each
  // counts the worker's clock whole. A push cut under an older view than
  // the store's is not one of its parts: counting it would close the
  // worker's clock there without the slices it holds (the resend would
  // then look like a duplicate). Each store is asked first: a part one
  // refuses is taken by none (else it would change one store, unknown to
  // the backup, and fail).
  std::vector<std::vector<slice_view>> mine(st.stores.size());
  if (auto err = check_push_parts(self, req, values, mine)) {
    rp.deliver(std::move(err));
    return;
  }
  // A store keeps the parts it holds where they came (the frame: no copy).
  // The frame is handled: it no longer counts as the workers' in flight.
  if (keep == nullptr && rp.road != nullptr) {
    rp.road->release_intake();
    keep = rp.road;
  }
  auto out = apply_push_parts(self, req, mine, keep);
  if (!out) {
    rp.deliver(std::move(out.error()));
    return;
  }
  auto reply = encode(*out);
  auto done = acknowledge_after(self, st.stores.size(), rp, reply);
  // The backup gets the push as it came. A duplicate too: the original
  // may still be on its way to the backup, and the backup answers in
  // order, so the duplicate is acknowledged only once the backup holds
  // the original (it drops the duplicate itself).
  for (auto& h : st.stores) {
    if (req.epoch < h.since)
      done(caf::none); // not a part of this store's: nothing for its replica
    else
      forward_bytes(self, h, op_push, f, done);
  }
  serve_pulls(self);
}

void handle_pull(self_ptr self, pull_request req, replier rp) {
  auto& st = self->state;
  if (auto err = check_incarnation(self, req.worker, req.epoch)) {
    rp.deliver(err);
    return;
  }
  for (auto& h : st.stores)
    if (auto err = h.store.check_pull(req.worker, req.clock)) {
      rp.deliver(err);
      return;
    }
  for (auto& id : req.slices) // unknown slices fail now, not after a wait
    if (!store_of(self, id)) {
      rp.deliver(caf::make_error(errc::slice_not_owned, id.key, id.index));
      return;
    }
  // A rank back may start past a round here; held pushes the worker says
  // every server has are applied. The backup's replicas do the same.
  for (auto& h : st.stores)
    if (h.store.pulled(req.worker, req.clock, req.acked))
      forward(self, h, op_pulled, frame{}, {req.worker, req.clock, req.acked},
              ignore_outcome);
  st.pulls.push_back({std::move(req), std::move(rp)});
  serve_pulls(self);
}

// -- accepting ----------------------------------------------------------------

/// Decodes a request and hands it to `handle` once our view has its epoch.
template <class Request, class Handler>
void accept(self_ptr self, bytes_view f, replier rp, Handler handle) {
  Request req;
  if (decode_or_reject(self, f, req, rp))
    when_epoch(self, req.epoch, rp, f.size,
               [self, req = std::move(req), rp, handle]() mutable {
                 handle(self, std::move(req), std::move(rp));
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

} // namespace

void accept_init(self_ptr self, bytes_view f, replier rp) {
  accept<init_request>(self, f, std::move(rp), handle_init);
}

void accept_pull(self_ptr self, bytes_view f, replier rp) {
  accept<pull_request>(self, f, std::move(rp), handle_pull);
}

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
  std::optional<slice_id> non_finite; // the first slice with a NaN or inf
  auto err = visit_push(
      f, req, [&values, &non_finite](slice_id id, const float* xs, size_t n) {
        values.push_back(slice_view{id, xs, n});
        if (!non_finite && !all_finite(xs, n))
          non_finite = id;
        return caf::error{};
      });
  if (!err && refused_sender(self, req.worker, rp))
    return;
  if (!err && non_finite) { // one bad value would spread to every weight
    err = caf::make_error(errc::non_finite,
                          str("worker ", req.worker,
                              " pushed a NaN or infinity at clock ", req.clock,
                              " in key ", non_finite->key, " (slice ",
                              non_finite->index, ")"));
    rp.say_source(
        self, [name = who(self), why = describe(err)](const std::string& peer) {
          TROUPE_LOG_LIMITED(warning, name, "refused a push from ", peer, ": ",
                             why);
        });
    rp.deliver(err);
    return;
  }
  if (err) { // 5
    say_dropped(self, rp, err);
    rp.deliver(err);
    return;
  }
  when_epoch(self, req.epoch, rp, f.size,
             [self, req, values = std::move(values), rp, keep, f]() mutable {
               handle_push(self, req, values, f, std::move(rp), keep);
             });
}

caf::response_promise on_init(self_ptr self, const frame& f) {
  return accept_caf<init_request>(self, f, handle_init);
}

caf::response_promise on_push(self_ptr self, frame& f) {
  auto rp = self->make_response_promise();
  auto keep = std::make_shared<frame>(std::move(f));
  accept_push(self, *keep, replier{rp, nullptr}, keep);
  return rp;
}

void sweep_held(self_ptr self) {
  auto& st = self->state;
  auto now = std::chrono::steady_clock::now();
  std::vector<shard_server_state::held_request> keep;
  for (auto& h : st.held) {
    bool gone = h.rp.road && h.rp.road->conn->closed(); // no one to answer
    if (!gone && now < h.until) {
      keep.push_back(std::move(h));
      continue;
    }
    st.held_bytes -= h.bytes;
    if (!gone)
      h.rp.deliver(caf::make_error(
          errc::timeout, str("held ", st.request_timeout_ms, " ms for view ",
                             h.epoch, ", and ours is still ", st.view.epoch)));
  }
  st.held = std::move(keep);
  if (!st.held.empty())
    self->delayed_send(self, held_sweep_every, view_atom_v, tick_atom_v);
}

caf::response_promise on_pull(self_ptr self, const frame& f) {
  return accept_caf<pull_request>(self, f, handle_pull);
}

} // namespace troupe::server_impl
