// The shard server actor: its set-up, its behavior (each message handed to
// a named function in the other shard_server*.cpp and replication_*.cpp),
// registration (1, 2) and stopping (6, 8).
#include "actors/server/shard_server.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>

#include <caf/event_based_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/helper_pool.hpp"
#include "actors/base/log.hpp"
#include "actors/base/machine_id.hpp"
#include "actors/base/stray_errors.hpp"
#include "actors/server/server_optimizer.hpp"
#include "actors/server/shard_server_internal.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

uint64_t new_store_id() {
  // Not made of our pid: servers on other machines, started the same way,
  // or in containers (PID namespaces) share pids, and two stores of one id
  // on one backup would be taken for one. Drawn afresh each time, with no
  // state a forked process would share.
  std::random_device rd;
  uint64_t id = 0;
  while (id == 0)
    id = (uint64_t{rd()} << 32) ^ rd();
  return id;
}

shard_server_state::~shard_server_state() {
  // The server ends: its link goes first, while every member its
  // acknowledgements touch still lives; what waited for the scheduler to
  // tell the backup is not acknowledged either.
  backup.reset();
  if (alone) {
    auto why = caf::make_error(errc::peer_down,
                               "the server ended before its backup was told");
    auto held = std::move(alone->held);
    alone->held.clear();
    for (auto& h : held)
      h.then(why);
  }
}

namespace server_impl {

// -- shared helpers -----------------------------------------------------------

std::string who(self_ptr self) {
  return "server " + std::to_string(self->state.rank);
}

void report(self_ptr self, const char* kind, std::string detail) {
  auto& st = self->state;
  self->send(st.scheduler, event_atom_v,
             encode(event_record{now_ms(), kind, role::server, st.rank,
                                 static_cast<uint32_t>(::getpid()),
                                 std::move(detail), who(self)}));
}

namespace {

// -- joining ------------------------------------------------------------------

/// The scheduler's RegisterReply: our rank and a view (1).
void on_registered(self_ptr self, const frame& f) {
  register_reply reply;
  if (auto err = decode(f, reply)) {
    TROUPE_LOG(error, "server",
               "bad RegisterReply: ", self->system().render(err));
    self->quit(err);
    return;
  }
  self->state.rank = reply.rank;
  secret key;
  if (secret_from_bytes(reply.road_key, key)) {
    self->state.road_key = key;
    self->state.road_keys->set(key);
  } else if (self->state.road) {
    TROUPE_LOG(warning, who(self), "the scheduler gave no road key: workers",
               " cannot prove themselves on our road, and use CAF");
  }
  self->state.joined_epoch = reply.view.epoch;
  self->state.stores.front().origin = reply.rank;
  self->state.joined = true;
  TROUPE_LOG(info, who(self), "joined, mode ",
             to_string(own_store(self).mode()));
  apply_view(self, std::move(reply.view));
  if (self->state.early_view.epoch > 0)
    apply_view(self, std::move(self->state.early_view));
}

/// Loads what --resume asks for, opens the road and registers.
void start(self_ptr self, const std::string& host, uint16_t port) {
  if (!load_resume(self)) // before joining: fail early
    return;
  register_request req{role::server,
                       host,
                       port,
                       static_cast<uint32_t>(::getpid()),
                       open_road(self, host),
                       0,
                       self->state.cfg.optimizer,
                       self->state.cfg.checkpoint.mode,
                       ""};        // a server's clocks are its workers'
  req.road.machine = machine_id(); // also without a road: who reaches us

  self->request(self->state.scheduler,
                std::chrono::milliseconds{self->state.request_timeout_ms},
                register_atom_v, encode(req))
      .then([self](const frame& f) { on_registered(self, f); }, // 1
            [self](caf::error& err) {                           // 2
              TROUPE_LOG(error, "server",
                         "registration failed: ", self->system().render(err));
              self->quit(err);
            });
}

// -- stopping -----------------------------------------------------------------

void on_down(self_ptr self, const caf::down_msg& dm) {
  if (dm.source == self->state.scheduler.address()) { // 6
    if (self->state.leaving) { // we were stopping anyway (8)
      self->quit(caf::exit_reason::user_shutdown);
      return;
    }
    TROUPE_LOG(error, who(self),
               "scheduler down: ", self->system().render(dm.reason));
    self->quit(scheduler_gone());
  }
}

/// Told to stop (SIGTERM, the end of a job): leave the view first. The
/// scheduler would otherwise learn of our exit from the connection, and
/// if that closes before our user_shutdown reaches it (our process exits
/// at once), it records a crash.
void on_exit(self_ptr self, caf::exit_msg& em) { // 8
  if (em.reason != caf::exit_reason::user_shutdown || !self->state.joined) {
    self->quit(em.reason);
    return;
  }
  if (self->state.leaving)
    return;
  self->state.leaving = true;
  TROUPE_LOG(info, who(self), "told to stop: leaving the view");
  auto limit = std::min<uint32_t>(self->state.request_timeout_ms, 2000);
  self->request(self->state.scheduler, std::chrono::milliseconds{limit},
                leave_atom_v)
      .then(
          [self](uint64_t) { self->quit(caf::exit_reason::user_shutdown); },
          [self](caf::error&) { self->quit(caf::exit_reason::user_shutdown); });
}

// -- set-up -------------------------------------------------------------------

void set_up(self_ptr self, const server_settings& cfg, caf::actor scheduler,
            update_fn fn) {
  self->state.fresh_fn = fn;
  if (cfg.helper_threads > 0)
    self->state.loop =
        loop_on(std::make_shared<helper_pool>(cfg.helper_threads));
  self->state.stores.push_back(
      hosted_store{new_store_id(), 0, shard_store{cfg.mode, std::move(fn)}});
  self->state.stores.back().store.set_loop(self->state.loop);
  if (cfg.atomic_pushes)
    self->state.stores.back().store.await_cuts(capture_optimizer,
                                               step_from_optimizer);
  self->state.cfg = cfg;
  self->state.scheduler = scheduler;
  self->monitor(scheduler);
  log_stray_errors(self, [self] { return who(self); });
  self->set_down_handler(
      [self](const caf::down_msg& dm) { on_down(self, dm); });
  self->set_exit_handler([self](caf::exit_msg& em) { on_exit(self, em); });
}

} // namespace
} // namespace server_impl

caf::behavior shard_server(shard_server_actor* self, server_settings cfg,
                           caf::actor scheduler, update_fn fn) {
  using namespace server_impl;
  set_up(self, cfg, std::move(scheduler), std::move(fn));
  return {
      [self](start_atom, const std::string& host, uint16_t port) {
        start(self, host, port);
      },
      [self](view_atom, const frame& f) { on_view_frame(self, f); },
      [self](view_atom, tick_atom) { sweep_held(self); },
      // -- requests from workers --
      [self](init_atom, const frame& f) { return on_init(self, f); },
      [self](push_atom, frame& f) { return on_push(self, f); },
      [self](pull_atom, const frame& f) { return on_pull(self, f); },
      [self](road_atom, road_message_ptr& m) {
        accept_road(self, std::move(m));
      },
      // -- checkpoints --
      [self](checkpoint_atom, uint64_t) { return checkpoint_version(self); },
      [self](checkpoint_atom, uint64_t gen, uint64_t at) {
        return take_checkpoint(self, gen, at);
      },
      [self](checkpoint_atom, uint64_t serial, const std::string& err) {
        checkpoint_written(self, serial, err);
      },
      // -- replication: as the primary (replication.hpp, L and N) --
      [self](reconnect_atom) { on_reconnect(self); },
      [self](replicate_atom, uint64_t serial, road_message_ptr& m) {
        on_backup_reply(self, serial, std::move(m));
      },
      [self](replicate_atom, road_down_atom, uint64_t serial,
             const std::string& why) {
        on_backup_road_down(self, serial, why);
      },
      [self](replicate_atom, tick_atom, uint64_t serial) {
        check_backup_road(self, serial);
      },
      [self](stale_atom, tick_atom) { expire_held(self); },
      // -- replication: as the backup (replication.hpp, F and B) --
      [self](replicate_atom, uint32_t primary, uint64_t link, uint64_t id,
             uint32_t origin, uint8_t op, const frame& f,
             const std::vector<uint64_t>& xs) -> caf::result<uint64_t> {
        auto r = apply_replica(self, primary, link, id, origin, op, f, xs);
        if (!r)
          return std::move(r.error());
        return *r;
      },
      [self](stale_atom, uint32_t primary, uint64_t link) {
        on_link_dropped(self, primary, link);
      },
      // -- atomic pushes (shard_server_cuts.cpp) --
      [self](cut_atom, uint32_t worker, uint64_t epoch) {
        return on_cut_query(self, worker, epoch);
      },
      [self](cut_atom, keep_atom, uint32_t worker, uint64_t keep) {
        return on_cut(self, worker, keep);
      },
  };
}

} // namespace troupe
