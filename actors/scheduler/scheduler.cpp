// The scheduler's behavior: one handler per message, each calling the step
// of the file that owns it (membership, keys, barriers, events,
// checkpoints); see the header for the messages and the failure transitions.
#include "actors/scheduler/scheduler.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/system_messages.hpp>

#include "actors/base/log.hpp"
#include "actors/base/stray_errors.hpp"
#include "actors/scheduler/scheduler_internal.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"

namespace troupe {

caf::behavior scheduler(scheduler_actor* self, scheduler_settings cfg) {
  using namespace sched;
  self->state.cfg = cfg;
  self->state.road_key = cfg.road_key ? *cfg.road_key : random_secret();
  self->set_down_handler(
      [self](const caf::down_msg& dm) { on_down(self, dm); });
  log_stray_errors(self, [] { return std::string{"scheduler"}; });
  if (auto err = prepare_checkpoints(self)) {
    self->quit(err);
    return {};
  }
  if (!cfg.events_file.empty()) {
    self->state.events_out =
        std::make_shared<std::ofstream>(cfg.events_file, std::ios::app);
    if (!*self->state.events_out) {
      self->quit(caf::make_error(errc::invalid_config,
                                 "--cluster.events-file: cannot open " +
                                     cfg.events_file + " to append"));
      return {};
    }
  }
  if (cfg.status_port != 0) {
    // A page is for watching: one that cannot be served is said, and the
    // job goes on without it.
    std::string why;
    self->state.page =
        status_page::start(cfg.status_host, cfg.status_port, why);
    if (self->state.page)
      TROUPE_LOG(info, "scheduler", "status page on http://", cfg.status_host,
                 ":", cfg.status_port, "/");
    else
      stderr_line() << "*** scheduler: " << why << "; going on without it\n";
  }
  return {
      [self](register_atom, const frame& f) { return on_register(self, f); },
      [self](declare_atom, const frame& f) { return on_declare(self, f); },
      [self](barrier_atom, const frame& f) { return on_barrier(self, f); },
      [self](view_atom) { return encode(current_view(self)); },
      [self](event_atom, const frame& f) { on_event(self, f); },
      [self](stale_atom, uint32_t backup, uint64_t link) {
        return on_stale(self, backup, link);
      },
      [self](events_atom) { return encode(self->state.events); },
      [self](leave_atom) { return on_leave(self); },
      [self](leave_atom, std::string& why) {
        if (why.size() > max_event_text)
          why.resize(max_event_text);
        return on_leave(self, std::move(why));
      },
      [self](checkpoint_atom) {
        auto rp = self->make_response_promise();
        start_checkpoint(self, rp);
        return rp;
      },
      [self](checkpoint_atom, finish_atom) {
        return on_final_checkpoint(self);
      },
      [self](tick_atom) { checkpoint_tick(self); },
      [self](barrier_atom, tick_atom) { report_waiting(self); },
      [self](events_atom, uint64_t n) { return on_events_poll(self, n); },
      [self](watch_atom) { return on_watch(self); },
      [self](cut_atom, uint32_t rank) { retry_cut(self, rank); },
      [self](cut_atom, finish_atom, uint32_t first, uint64_t serial) {
        // Our own timer's alone.
        if (caf::actor_cast<caf::actor_addr>(self->current_sender()) ==
            self->address())
          replica_cut_overdue(self, first, serial);
      },
  };
}

} // namespace troupe
