// Blocking calls on a kv client through a scoped actor.
#include "actors/kv/kv.hpp"

#include <chrono>
#include <optional>
#include <thread>

#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/sec.hpp>

#include "actors/kv/kv_client.hpp"
#include "actors/road/road.hpp"
#include "actors/road/run_here.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

caf::actor spawn_kv_client(caf::actor_system& sys, caf::actor scheduler,
                           kv_settings cfg) {
  return sys.spawn(kv_client, cfg, std::move(scheduler));
}

namespace {

/// Whether a push of `xs` is small enough for the kv client to run on
/// the caller's thread (see kv::impl::call).
bool small(const std::vector<named_array>& xs) {
  size_t floats = 0;
  for (auto& x : xs)
    floats += x.values.size();
  return floats * sizeof(float) < run_here_max_bytes;
}

} // namespace

struct kv::impl {
  explicit impl(caf::actor_system& sys) : self(sys) {}
  caf::scoped_actor self;
  std::chrono::milliseconds timeout{0};
  bool scheduler_only = false; // kv.scheduler-only

  /// Sends xs to `to` and waits for its T. With `here`, the kv client
  /// runs on this thread (which only waits meanwhile) rather than waking a
  /// scheduler thread: one thread hop less a call. A large push is left
  /// to the scheduler: its write is long, and runs there beside the copies
  /// of earlier replies.
  template <class T, class... Ts>
  caf::expected<T> call(bool here, const caf::actor& to,
                        std::chrono::milliseconds t, Ts&&... xs) {
    caf::expected<T> out{caf::make_error(caf::sec::unexpected_response)};
    // The kv client answers every request within its own timeouts; `t`
    // only guards against a bug. A request timeout would cost a wake-up
    // of CAF's clock thread per call, so wait with after() instead.
    std::optional<decltype(self->request(to, caf::infinite, xs...))> h;
    auto send = [&h, &to, this, &xs...] {
      h.emplace(self->request(to, caf::infinite, std::forward<Ts>(xs)...));
    };
    bool done = false;
    auto on_value = [&out, &done](T& x) {
      out = std::move(x);
      done = true;
    };
    auto on_error = [&out, &done, this](caf::error& err) {
      out = explain(std::move(err));
      done = true;
    };
    auto t0 = std::chrono::steady_clock::now();
    if (scheduler_only || !here) {
      send();
    } else {
      road_conn_ptr conn;
      {
        road_caller_scope scope;
        run_here_while(self.ptr(), send);
        conn = scope.claim_only_conn();
      }
      if (conn)
        read_own_reply(*conn, h->id(), on_value, on_error, done, t0 + t);
      if (done)
        return out;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        t0 + t - std::chrono::steady_clock::now());
    caf::blocking_actor::accept_one_cond rc;
    self->varargs_receive(
        rc, h->id(), on_value, on_error,
        caf::after(std::max(left, std::chrono::milliseconds{0})) >> [&out, t] {
          out = caf::make_error(errc::timeout, "kv client silent for",
                                static_cast<uint64_t>(t.count()), "ms");
        });
    return out;
  }

  /// Reads the road our request went on, on this thread, until its reply
  /// is in our mailbox (the kv client runs here for each message read):
  /// the reply then wakes this thread and no other. Gives up, for the
  /// usual wait, when the road's reader thread still has the road (it
  /// leaves it to us for the next call), when the road ends, or at
  /// `deadline`.
  template <class OnValue, class OnError>
  void read_own_reply(road_conn& conn, caf::message_id id, OnValue& on_value,
                      OnError& on_error, const bool& done,
                      std::chrono::steady_clock::time_point deadline) {
    road_caller_done guard{conn.shared_from_this()};
    bool asked = false;
    for (;;) {
      // A receive that finds nothing still sleeps out the timer slack: look
      // only when something came (the reader thread may have been quicker).
      if (!self->mailbox().empty()) {
        caf::blocking_actor::accept_one_cond once;
        self->varargs_receive(
            once, id, on_value, on_error,
            caf::after(std::chrono::milliseconds{0}) >> [] {});
      }
      if (done)
        break;
      asked = true;
      if (!read_road_until_mail(*self.ptr(), conn, deadline))
        break;
    }
    if (!asked) // the reply beat us: still ask for the road for next time
      conn.pump_once(std::chrono::milliseconds{0});
  }

  /// A request to a kv client that has ended fails with CAF's bare
  /// request_receiver_down; the caller wants why the client ended (the
  /// scheduler is gone, say), which its down message carries.
  caf::error explain(caf::error err) {
    if (err != caf::sec::request_receiver_down)
      return err;
    if (!gone)
      self->receive([this](caf::down_msg& dm) { gone = std::move(dm.reason); },
                    caf::after(std::chrono::seconds{1}) >> [] {});
    return gone && *gone ? *gone : err;
  }
  std::optional<caf::error> gone; // the kv client's exit reason, once seen
};

kv::kv(caf::actor_system& sys, caf::actor scheduler, kv_settings cfg)
    : impl_(std::make_unique<impl>(sys)) {
  // The client's own timeouts fire first; ours only guards against a lost
  // client, with room for a declare that waits for servers to join.
  impl_->timeout = std::chrono::milliseconds{cfg.request_timeout_ms} * 4;
  impl_->scheduler_only = cfg.scheduler_only;
  client_ = spawn_kv_client(sys, std::move(scheduler), cfg);
  impl_->self->monitor(client_); // for explain()
}

kv::~kv() {
  impl_->self->send_exit(client_, caf::exit_reason::user_shutdown);
}

caf::expected<std::vector<named_array>> kv::init(std::vector<named_array> xs) {
  return impl_->call<std::vector<named_array>>(false, client_, impl_->timeout,
                                               init_atom_v, std::move(xs));
}

caf::expected<uint64_t> kv::push(uint64_t clock, std::vector<named_array> xs) {
  auto here = small(xs);
  return impl_->call<uint64_t>(here, client_, impl_->timeout, push_atom_v,
                               clock, std::move(xs));
}

caf::expected<std::vector<named_array>>
kv::push_pull(uint64_t clock, std::vector<named_array> xs,
              std::vector<uint64_t> keys) {
  auto here = small(xs);
  return impl_->call<std::vector<named_array>>(here, client_, impl_->timeout,
                                               push_atom_v, clock,
                                               std::move(xs), std::move(keys));
}

caf::expected<std::vector<named_array>> kv::pull(uint64_t clock,
                                                 std::vector<uint64_t> keys) {
  return impl_->call<std::vector<named_array>>(
      true, client_, impl_->timeout, pull_atom_v, clock, std::move(keys));
}

caf::expected<uint64_t> kv::barrier(const std::string& name,
                                    uint32_t timeout_ms) {
  return impl_->call<uint64_t>(
      true, client_, std::chrono::milliseconds{timeout_ms} + impl_->timeout,
      barrier_atom_v, name, timeout_ms);
}

caf::error kv::leave() {
  auto r = impl_->call<uint64_t>(true, client_, impl_->timeout, leave_atom_v);
  return r ? caf::error{} : std::move(r.error());
}

caf::error kv::leave(const std::string& why) {
  auto r =
      impl_->call<uint64_t>(true, client_, impl_->timeout, leave_atom_v, why);
  return r ? caf::error{} : std::move(r.error());
}

caf::expected<uint64_t> kv::resume_clock() {
  return impl_->call<uint64_t>(true, client_, impl_->timeout, clock_atom_v);
}

caf::expected<std::pair<uint32_t, cluster_view>> kv::view() {
  caf::expected<std::pair<uint32_t, cluster_view>> out{
      caf::make_error(caf::sec::unexpected_response)};
  impl_->self->request(client_, impl_->timeout, view_atom_v)
      .receive(
          [&out](uint32_t rank, const frame& f) {
            cluster_view v;
            if (auto err = decode(f, v))
              out = std::move(err);
            else
              out = std::make_pair(rank, std::move(v));
          },
          [&out, this](caf::error& err) {
            out = impl_->explain(std::move(err));
          });
  return out;
}

} // namespace troupe
