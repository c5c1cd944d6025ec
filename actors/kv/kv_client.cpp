// The kv client's behavior: what each message does, in one place. The work
// is in kv_client_views.cpp, kv_client_sending.cpp,
// kv_client_operations.cpp and kv_client_resends.cpp.
#include "actors/kv/kv_client.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/helper_pool.hpp"
#include "actors/base/log.hpp"
#include "actors/base/stray_errors.hpp"
#include "actors/kv/kv_client_internal.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

kv_client_state::~kv_client_state() {
  for (auto& [rank, link] : roads)
    link.conn->close();
}

namespace kv_internal {
namespace {

// -- handlers -----------------------------------------------------------------

/// The shape of every operation that may be resent: once the client is
/// ready, runs `attempt` under with_resend and answers the caller with its
/// result; or fails the caller (errc::not_connected after
/// kv.request-timeout-ms, or stop()'s error) if the client never gets ready.
template <class T, class Attempt>
caf::response_promise serve(self_ptr self, Attempt attempt) {
  auto rp = self->make_response_promise();
  when_ready(
      self,
      [self, attempt = std::move(attempt), rp] {
        with_resend<T>(self, attempt, deliver_to<T>(rp));
      },
      fail_to(rp));
  return rp;
}

/// (init_atom, arrays[, clocks per step]): declares and initialises.
caf::response_promise on_init(self_ptr self, arrays& xs,
                              uint32_t clocks_per_step) {
  // Declare and Init are idempotent (the first Init of a slice wins): the
  // whole of it may be resent.
  auto keep = std::make_shared<const arrays>(std::move(xs));
  return serve<arrays>(self, [self, keep, clocks_per_step](reply_to<arrays> r) {
    do_init(self, keep, clocks_per_step, std::move(r));
  });
}

/// (view_atom, frame): a view from the scheduler.
void on_view(self_ptr self, const frame& f) {
  cluster_view v;
  if (auto err = decode(f, v))
    TROUPE_LOG(warning, who(self),
               "dropped a malformed view: ", self->system().render(err));
  else
    apply_view(self, std::move(v));
}

/// (road_down_atom): the road to server `rank` ended (`serial`: which
/// connection).
void on_road_down(self_ptr self, uint32_t rank, uint64_t serial,
                  const std::string& why) {
  auto i = self->state.roads.find(rank);
  if (i == self->state.roads.end() || i->second.conn->serial() != serial)
    return; // an older connection
  TROUPE_LOG(warning, who(self), "fast road to server ", rank, " lost: ", why);
  road_lost(self, rank, caf::make_error(errc::peer_down, "server", rank, why));
}

/// (barrier_atom): waits at the scheduler's barrier `name`, once ready.
caf::response_promise on_barrier(self_ptr self, const std::string& name,
                                 uint32_t timeout_ms) {
  auto rp = self->make_response_promise();
  when_ready(
      self,
      [self, name, timeout_ms, rp]() mutable {
        barrier_request req{name, role::worker, self->state.rank};
        auto limit = std::chrono::milliseconds{timeout_ms};
        self->request(self->state.scheduler, limit, barrier_atom_v, encode(req))
            .then([rp](uint64_t epoch) mutable { rp.deliver(epoch); },
                  [self, rp, name, limit](caf::error& err) mutable {
                    // Held until every worker of --cluster.workers joined
                    // and came: one never started, or is still starting.
                    auto& v = self->state.view;
                    rp.deliver(scheduler_timeout(
                        std::move(err),
                        str("barrier '", name,
                            "' (the scheduler releases it once every"
                            " expected worker has joined and come; ",
                            v.workers.size(), " of ", v.expected_workers,
                            " workers are in our view, --cluster.workers=",
                            v.expected_workers, ")"),
                        limit));
                  });
      },
      fail_to(rp));
  return rp;
}

/// (leave_atom[, why]): leaves the view now (a departure, not a crash):
/// done, or (`why`) ending before the work is done.
caf::response_promise on_leave(self_ptr self,
                               std::optional<std::string> why = {}) {
  auto rp = self->make_response_promise();
  auto asked = why ? self->request(self->state.scheduler, timeout_of(self),
                                   leave_atom_v, std::move(*why))
                   : self->request(self->state.scheduler, timeout_of(self),
                                   leave_atom_v);
  std::move(asked).then(
      [rp](uint64_t epoch) mutable { rp.deliver(epoch); },
      [rp, limit = timeout_of(self)](caf::error& err) mutable {
        rp.deliver(scheduler_timeout(std::move(err), "leave", limit));
      });
  return rp;
}

/// (view_atom): our rank and view, once ready.
caf::response_promise on_view_request(self_ptr self) {
  auto rp = self->make_response_promise();
  when_ready(
      self,
      [self, rp]() mutable {
        rp.deliver(self->state.rank, encode(self->state.view));
      },
      fail_to(rp));
  return rp;
}

/// Takes the settings, monitors the scheduler and registers with it.
void start(self_ptr self, const kv_settings& cfg, caf::actor scheduler) {
  self->state.cfg = cfg;
  self->state.scheduler = scheduler;
  if (cfg.helper_threads > 0)
    self->state.loop =
        loop_on(std::make_shared<helper_pool>(cfg.helper_threads));
  self->state.faults.seed(cfg.faults.seed != 0 ? cfg.faults.seed
                                               : std::random_device{}());
  self->monitor(scheduler);
  self->set_down_handler(
      [self](const caf::down_msg& dm) { on_down(self, dm); });
  log_stray_errors(self, [self] { return who(self); });
  join(self);
}

} // namespace
} // namespace kv_internal

// -- behavior -----------------------------------------------------------------

caf::behavior kv_client(kv_client_actor* self, kv_settings cfg,
                        caf::actor scheduler) {
  using namespace kv_internal;
  start(self, cfg, std::move(scheduler));
  return {
      [self](view_atom, const frame& f) { on_view(self, f); },
      [self](init_atom, arrays& xs) { return on_init(self, xs, 1); },
      [self](init_atom, arrays& xs, uint32_t clocks_per_step) {
        return on_init(self, xs, std::max<uint32_t>(clocks_per_step, 1));
      },
      [self](push_atom, uint64_t clock, arrays& xs) {
        auto keep = std::make_shared<arrays>(std::move(xs));
        return serve<uint64_t>(self, [self, clock, keep](reply_to<uint64_t> r) {
          do_push(self, clock, keep, std::move(r));
        });
      },
      [self](push_atom, uint64_t clock, arrays& xs,
             std::vector<uint64_t>& keys) {
        auto keep = std::make_shared<arrays>(std::move(xs));
        return serve<arrays>(self, [self, clock, keep, keys = std::move(keys)](
                                       reply_to<arrays> r) {
          do_push_pull(self, clock, keep, keys, std::move(r));
        });
      },
      [self](road_atom, uint32_t rank, const road_message_ptr& m) {
        on_road_message(self, rank, *m);
      },
      [self](road_atom) { send_deferred(self); },
      [self](road_down_atom, uint32_t rank, uint64_t serial,
             const std::string& why) { on_road_down(self, rank, serial, why); },
      [self](reroute_atom, uint32_t rank) { reroute(self, rank); },
      [self](redial_atom, uint32_t rank, uint64_t ticket) {
        on_redial_timer(self, rank, ticket);
      },
      [self](tick_atom) { on_tick(self); },
      [self](reconnect_atom, uint32_t rank) { reconnect(self, rank); },
      [self](pull_atom, uint64_t clock, std::vector<uint64_t>& keys) {
        return serve<arrays>(
            self, [self, clock, keys = std::move(keys)](reply_to<arrays> r) {
              do_pull(self, clock, keys, std::move(r));
            });
      },
      [self](barrier_atom, const std::string& name, uint32_t timeout_ms) {
        return on_barrier(self, name, timeout_ms);
      },
      [self](leave_atom) { return on_leave(self); },
      [self](leave_atom, std::string& why) {
        return on_leave(self, std::move(why));
      },
      [self](fault_atom, uint64_t clock) { // from this process alone
        auto from = self->current_sender();
        if (from != nullptr && from->node() == self->node())
          self->state.kill_in_push = clock;
      },
      [self](leave_atom, uint32_t dead, uint64_t keep, const std::string& why) {
        return told_to_leave(self, dead, keep, why);
      },
      [self](clock_atom) { // asks every holder: one may die meanwhile
        return serve<uint64_t>(self, [self](reply_to<uint64_t> r) {
          do_clock(self, std::move(r));
        });
      },
      [self](event_atom, const frame& f) { on_loss(self, f); },
      [self](view_atom) { return on_view_request(self); },
      [self](register_atom) { join(self); }, // again, the cluster was full
  };
}

} // namespace troupe
