// The kv client's handlers: registration, views, server connections, and
// the scatter/gather of init, push and pull.
#include "actors/kv_client.hpp"

#include <unistd.h>

#include <chrono>
#include <memory>

#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/sec.hpp>
#include <caf/system_messages.hpp>

#include "actors/log.hpp"
#include "actors/named_array.hpp"
#include "actors/placement.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

/// One operation spread over several servers: the first error wins.
struct kv_gather {
  caf::response_promise rp;
  size_t pending = 0;
  bool failed = false;
  void fail(caf::error err) {
    if (!failed) {
      failed = true;
      rp.deliver(std::move(err));
    }
  }
};

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
  return self->state.joined && self->state.connecting == 0;
}

void flush_waiting(self_ptr self) { // 2
  if (!ready(self))
    return;
  auto ops = std::move(self->state.waiting);
  self->state.waiting.clear();
  for (auto& op : ops)
    op();
}

template <class F> void when_ready(self_ptr self, F fn) {
  if (ready(self)) {
    fn();
    return;
  }
  TROUPE_LOG(debug, who(self), "not ready (joined ", self->state.joined,
             ", connecting ", self->state.connecting, "): operation waits");
  self->state.waiting.emplace_back(std::move(fn));
}

void connect(self_ptr self, const node_info& n) {
  ++self->state.connecting;
  TROUPE_LOG(debug, who(self), "connecting to server ", n.rank, " at ", n.host,
             ":", n.port);
  auto mm = self->home_system().middleman().actor_handle();
  auto rank = n.rank;
  self->request(mm, timeout_of(self), caf::connect_atom_v, n.host, n.port)
      .then(
          [self, rank](const caf::node_id&, caf::strong_actor_ptr& ptr,
                       const std::set<std::string>&) {
            --self->state.connecting;
            TROUPE_LOG(debug, who(self), "connected to server ", rank,
                       ptr ? "" : " (no actor)");
            if (ptr) {
              auto h = caf::actor_cast<caf::actor>(ptr);
              self->monitor(h);
              self->state.servers[rank] = h;
            }
            flush_waiting(self);
          },
          [self, n](caf::error& err) {
            --self->state.connecting;
            TROUPE_LOG(error, who(self), "cannot connect to server ", n.rank,
                       " at ", n.host, ":", n.port, ": ",
                       self->system().render(err));
            flush_waiting(self);
          });
}

void fail_inflight(self_ptr self, uint32_t rank);

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
  // A server that left the view will not answer: its operations fail now,
  // whether or not our own monitor noticed.
  for (auto& [rank, h] : st.servers)
    if (kept.count(rank) == 0)
      fail_inflight(self, rank);
  st.servers = std::move(kept);
  st.view = std::move(v);
  flush_waiting(self);
}

// -- scatter/gather -----------------------------------------------------------

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
using reply_fn = std::function<caf::error(const frame&)>;

/// Sends (atom, frame) to each listed server; `on_reply` digests each
/// reply; `done` runs once all replied without error.
template <class Atom>
void scatter(self_ptr self, Atom atom, gather_ptr g,
             std::vector<std::pair<uint32_t, frame>> msgs, reply_fn on_reply,
             std::function<void()> done) {
  g->pending = msgs.size();
  if (msgs.empty()) {
    done();
    return;
  }
  for (auto& [rank, f] : msgs) {
    auto h = self->state.servers.find(rank);
    if (h == self->state.servers.end()) {
      g->fail(caf::make_error(errc::not_connected, "server", rank));
      return;
    }
    auto r = rank;
    track(self, r, g);
    self->request(h->second, timeout_of(self), atom, std::move(f))
        .then(
            [g, on_reply, done](const frame& reply) {
              if (g->failed)
                return;
              if (auto err = on_reply(reply))
                g->fail(std::move(err));
              else if (--g->pending == 0)
                done();
            },
            [g, r](caf::error& err) {
              if (err == caf::sec::request_timeout)
                g->fail(caf::make_error(errc::timeout, "server", r));
              else
                g->fail(std::move(err));
            });
  }
}

caf::error check_arrays(self_ptr self, const arrays& xs) {
  for (auto& x : xs) {
    auto i = self->state.sizes.find(x.key);
    if (i == self->state.sizes.end())
      return caf::make_error(errc::unknown_key, x.key);
    if (i->second != x.values.size())
      return caf::make_error(errc::bad_shape, x.key, i->second,
                             static_cast<uint64_t>(x.values.size()));
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

void do_push(self_ptr self, uint64_t clock, const arrays& xs,
             caf::response_promise rp) {
  if (auto err = check_arrays(self, xs)) {
    rp.deliver(err);
    return;
  }
  auto by_server = slices_by_server(self, xs);
  std::vector<std::pair<uint32_t, frame>> msgs;
  // Every server hears from us each clock, even with nothing to add, so
  // that its sync rounds and ssp clocks advance.
  for (auto& s : self->state.view.servers) {
    auto parts = cut_parts(self, std::move(by_server[s.rank]));
    for (uint32_t p = 0; p < parts.size(); ++p)
      msgs.emplace_back(
          s.rank, encode_push(push_request{self->state.rank,
                                           clock,
                                           self->state.view.epoch,
                                           p,
                                           static_cast<uint32_t>(parts.size()),
                                           {}},
                              parts[p]));
  }
  auto g = std::make_shared<gather>();
  g->rp = rp;
  auto version = std::make_shared<uint64_t>(UINT64_MAX);
  scatter(
      self, push_atom_v, g, std::move(msgs),
      [version](const frame& f) {
        push_reply r;
        auto err = decode(f, r);
        *version = std::min(*version, r.version);
        return err;
      },
      [g, version] { g->rp.deliver(*version == UINT64_MAX ? 0 : *version); });
}

// -- pull -------------------------------------------------------------------

/// Pull requests for every slice of `out`, at least one per owning server,
/// cut so that no reply exceeds the message bound.
std::vector<std::pair<uint32_t, frame>>
pull_messages(self_ptr self, const arrays& out, uint64_t clock) {
  std::map<uint32_t, std::vector<std::pair<slice_id, size_t>>> by_server;
  auto bound = self->state.view.slice_floats;
  for (auto& a : out)
    for (uint32_t i = 0; i < slice_count(a.values.size(), bound); ++i) {
      auto r = slice_range(a.values.size(), bound, i);
      by_server[self->state.owner.at(slice_id{a.key, i})].emplace_back(
          slice_id{a.key, i}, (r.second - r.first) * sizeof(float));
    }
  std::vector<std::pair<uint32_t, frame>> msgs;
  for (auto& [rank, slices] : by_server) {
    pull_request req{self->state.rank, clock, self->state.view.epoch, {}};
    size_t bytes = 0;
    for (auto& [id, n] : slices) {
      if (!req.slices.empty() &&
          bytes + n > self->state.cfg.max_message_bytes) {
        msgs.emplace_back(rank, encode(req));
        req.slices.clear();
        bytes = 0;
      }
      req.slices.push_back(id);
      bytes += n;
    }
    msgs.emplace_back(rank, encode(req));
  }
  return msgs;
}

/// Copies the slices of a PullReply into the arrays of `out`.
caf::error copy_reply(const frame& f, arrays& out,
                      const std::map<uint64_t, size_t>& index_of,
                      uint32_t bound) {
  uint64_t version = 0;
  return visit_pull_reply(
      f, version, [&](slice_id id, const float* xs, size_t n) -> caf::error {
        auto i = index_of.find(id.key);
        if (i == index_of.end())
          return caf::make_error(errc::malformed_message, "unasked slice");
        auto& dst = out[i->second].values;
        auto range = slice_range(dst.size(), bound, id.index);
        if (n != range.second - range.first)
          return caf::make_error(errc::bad_shape, id.key, id.index);
        std::copy(xs, xs + n, dst.begin() + range.first);
        return caf::none;
      });
}

void do_pull(self_ptr self, uint64_t clock, const std::vector<uint64_t>& keys,
             caf::response_promise rp) {
  auto out = std::make_shared<arrays>();
  std::map<uint64_t, size_t> index_of;
  for (auto k : keys) {
    auto i = self->state.sizes.find(k);
    if (i == self->state.sizes.end()) {
      rp.deliver(caf::make_error(errc::unknown_key, k));
      return;
    }
    index_of[k] = out->size();
    out->push_back(named_array{k, std::vector<float>(i->second)});
  }
  auto g = std::make_shared<gather>();
  g->rp = rp;
  auto bound = self->state.view.slice_floats;
  scatter(
      self, pull_atom_v, g, pull_messages(self, *out, clock),
      [out, index_of, bound](const frame& f) {
        return copy_reply(f, *out, index_of, bound);
      },
      [g, out] { g->rp.deliver(std::move(*out)); });
}

// -- init -------------------------------------------------------------------

void send_inits(self_ptr self, const arrays& xs,
                const std::vector<uint64_t>& mine, std::function<void()> then,
                gather_ptr g) {
  arrays own;
  for (auto& x : xs)
    if (std::find(mine.begin(), mine.end(), x.key) != mine.end())
      own.push_back(x);
  std::vector<std::pair<uint32_t, frame>> msgs;
  for (auto& [rank, slices] : slices_by_server(self, own))
    for (auto& part : cut_parts(self, std::move(slices))) {
      init_request req{self->state.rank, self->state.view.epoch, {}};
      for (auto& v : part) // rare: once per array and run
        req.slices.push_back({v.id, {v.data, v.data + v.size}});
      msgs.emplace_back(rank, encode(req));
    }
  scatter(
      self, init_atom_v, g, std::move(msgs),
      [](const frame& f) {
        push_reply r;
        return decode(f, r);
      },
      std::move(then));
}

void do_init(self_ptr self, arrays xs, caf::response_promise rp) {
  declare_request req{self->state.rank, {}};
  std::vector<uint64_t> keys;
  for (auto& x : xs) {
    req.keys.push_back(key_info{x.key, x.values.size()});
    keys.push_back(x.key);
  }
  auto g = std::make_shared<gather>();
  g->rp = rp;
  TROUPE_LOG(debug, who(self), "declaring ", keys.size(), " arrays");
  self->request(self->state.scheduler, timeout_of(self), declare_atom_v,
                encode(req))
      .then(
          [self, xs, keys, g](const frame& f) {
            declare_reply reply;
            if (auto err = decode(f, reply)) {
              g->fail(err);
              return;
            }
            apply_view(self, reply.view);
            when_ready(self, [self, xs, keys, g, mine = reply.initialiser] {
              send_inits(
                  self, xs, mine,
                  [self, keys, g] { do_pull(self, 0, keys, g->rp); }, g);
            });
          },
          [g](caf::error& err) { g->fail(err); });
}

// -- registration -------------------------------------------------------------

void join(self_ptr self) {
  register_request req{role::worker, "", 0, static_cast<uint32_t>(::getpid())};
  self->request(self->state.scheduler, timeout_of(self), register_atom_v,
                encode(req))
      .then(
          [self](const frame& f) { // 1
            register_reply reply;
            if (auto err = decode(f, reply)) {
              self->quit(err); // 4
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
            self->quit(err);
          });
}

/// A request to a dead node never completes: fail what waits on `rank`.
void fail_inflight(self_ptr self, uint32_t rank) {
  for (auto& [r, weak] : self->state.inflight)
    if (auto g = weak.lock(); g && r == rank)
      g->fail(caf::make_error(errc::peer_down, "server", rank));
}

void on_down(self_ptr self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (dm.source == st.scheduler.address()) { // 4
    TROUPE_LOG(error, who(self),
               "scheduler down: ", self->system().render(dm.reason));
    self->quit(caf::make_error(errc::peer_down, "scheduler"));
    return;
  }
  for (auto i = st.servers.begin(); i != st.servers.end(); ++i)
    if (i->second.address() == dm.source) {
      auto rank = i->first;
      TROUPE_LOG(warning, who(self), "server ", rank, " down");
      st.servers.erase(i);
      fail_inflight(self, rank);
      return;
    }
}

} // namespace

caf::behavior kv_client(kv_client_actor* self, kv_settings cfg,
                        caf::actor scheduler) {
  self->state.cfg = cfg;
  self->state.scheduler = scheduler;
  self->monitor(scheduler);
  self->set_down_handler(
      [self](const caf::down_msg& dm) { on_down(self, dm); });
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
      [self](init_atom, arrays& xs) {
        auto rp = self->make_response_promise();
        when_ready(self, [self, xs = std::move(xs), rp]() mutable {
          do_init(self, std::move(xs), rp);
        });
        return rp;
      },
      [self](push_atom, uint64_t clock, arrays& xs) {
        auto rp = self->make_response_promise();
        when_ready(self, [self, clock, xs = std::move(xs), rp] {
          do_push(self, clock, xs, rp);
        });
        return rp;
      },
      [self](pull_atom, uint64_t clock, std::vector<uint64_t>& keys) {
        auto rp = self->make_response_promise();
        when_ready(self, [self, clock, keys = std::move(keys), rp] {
          do_pull(self, clock, keys, rp);
        });
        return rp;
      },
      [self](barrier_atom, const std::string& name, uint32_t timeout_ms) {
        auto rp = self->make_response_promise();
        when_ready(self, [self, name, timeout_ms, rp]() mutable {
          barrier_request req{name, role::worker, self->state.rank};
          self->request(self->state.scheduler,
                        std::chrono::milliseconds{timeout_ms}, barrier_atom_v,
                        encode(req))
              .then([rp](uint64_t epoch) mutable { rp.deliver(epoch); },
                    [rp](caf::error& err) mutable { rp.deliver(err); });
        });
        return rp;
      },
      [self](view_atom) {
        auto rp = self->make_response_promise();
        when_ready(self, [self, rp]() mutable {
          rp.deliver(self->state.rank, encode(self->state.view));
        });
        return rp;
      },
  };
}

} // namespace troupe
