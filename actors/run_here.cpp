// An execution unit that runs the actor it schedules on the calling thread.
#include "actors/run_here.hpp"

#include <caf/actor_control_block.hpp>
#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>
#include <caf/message_id.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/scoped_execution_unit.hpp>

namespace troupe {

namespace {

/// CAF calls exec_later when an enqueue unblocks an idle actor: the first
/// such actor runs here; any other (one it sends to) goes to the scheduler.
class run_here_unit : public caf::scoped_execution_unit {
public:
  using caf::scoped_execution_unit::scoped_execution_unit;

  void exec_later(caf::resumable* job) override {
    auto& sched = system().scheduler();
    if (used_) {
      sched.enqueue(job);
      return;
    }
    used_ = true;
    // As a scheduler worker does: the reference CAF took for scheduling
    // stays with the job while it wants more time, else it is released.
    switch (job->resume(this, sched.max_throughput())) {
    case caf::resumable::resume_later:
      sched.enqueue(job);
      break;
    default:
      intrusive_ptr_release(job);
    }
  }

private:
  bool used_ = false;
};

} // namespace

void send_and_run_here(caf::actor to, caf::message msg) {
  if (!to)
    return;
  auto* ctrl = caf::actor_cast<caf::actor_control_block*>(to);
  auto& sys = *ctrl->home_system;
  // The system counts this thread as a running actor meanwhile. An actor
  // that ends here leaves the count while it still cleans up (and uses
  // the system's clock); a system destroyed then, as the count reached
  // zero, would pull the clock from under it. Scheduler threads are safe:
  // the system joins them first.
  auto& registry = sys.registry();
  registry.inc_running();
  {
    run_here_unit unit{&sys};
    ctrl->enqueue(nullptr, caf::make_message_id(), std::move(msg), &unit);
    to = nullptr; // our reference goes while the system surely lives
  }
  registry.dec_running();
}

} // namespace troupe
