// An execution unit that runs the actor it schedules on the calling thread.
#include "actors/road/run_here.hpp"

#include "actors/road/road.hpp"

#include <algorithm>

#include <caf/actor_control_block.hpp>
#include <caf/actor_registry.hpp>
#include <caf/actor_system.hpp>
#include <caf/blocking_actor.hpp>
#include <caf/local_actor.hpp>
#include <caf/message_id.hpp>
#include <caf/resumable.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <caf/scoped_execution_unit.hpp>

namespace troupe {

namespace {

/// CAF calls exec_later when an enqueue unblocks an idle actor: such an
/// actor runs here unless one already runs here (one it sends to goes to
/// the scheduler, never nested).
class run_here_unit : public caf::scoped_execution_unit {
public:
  run_here_unit(caf::actor_system* sys, size_t max_messages,
                bool (*stop)() = nullptr)
      : caf::scoped_execution_unit(sys), max_messages_(max_messages),
        stop_(stop) {}

  void exec_later(caf::resumable* job) override {
    auto& sched = system().scheduler();
    if (running_) {
      sched.enqueue(job);
      return;
    }
    running_ = true;
    // As a scheduler worker does: the reference CAF took for scheduling
    // stays with the job while it wants more time, else it is released.
    auto budget =
        std::max<size_t>(std::min(max_messages_, sched.max_throughput()), 1);
    auto r = caf::resumable::resume_later;
    if (!stop_)
      r = job->resume(this, budget);
    else // one message at a time, asking stop_ after each
      do
        r = job->resume(this, 1);
      while (r == caf::resumable::resume_later && --budget > 0 && !stop_());
    switch (r) {
    case caf::resumable::resume_later:
      sched.enqueue(job);
      break;
    default:
      intrusive_ptr_release(job);
    }
    running_ = false;
  }

private:
  size_t max_messages_;
  bool (*stop_)();
  bool running_ = false;
};

/// Counts this thread as a running actor while it lives. An actor that
/// ends here leaves the count while it still cleans up (and uses the
/// system's clock); a system destroyed then, as the count reached zero,
/// would pull the clock from under it. Scheduler threads are safe: the
/// system joins them first.
class running_guard {
public:
  explicit running_guard(caf::actor_system& sys) : registry_(sys.registry()) {
    registry_.inc_running();
  }
  ~running_guard() { registry_.dec_running(); }
  running_guard(const running_guard&) = delete;
  running_guard& operator=(const running_guard&) = delete;

private:
  caf::actor_registry& registry_;
};

/// Gives `self` the execution unit `unit` while it lives.
class context_swap {
public:
  context_swap(caf::local_actor* self, caf::execution_unit* unit)
      : self_(self), before_(self->context()) {
    self_->context(unit);
  }
  ~context_swap() { self_->context(before_); }
  context_swap(const context_swap&) = delete;
  context_swap& operator=(const context_swap&) = delete;

private:
  caf::local_actor* self_;
  caf::execution_unit* before_;
};

/// Messages an actor run by run_here_while handles there at most; the
/// rest go to the scheduler, so the caller waits for its reply soon.
constexpr size_t caller_budget = 64;

} // namespace

void send_and_run_here(caf::actor to, caf::message msg, size_t max_messages,
                       bool (*stop)()) {
  if (!to)
    return;
  auto* ctrl = caf::actor_cast<caf::actor_control_block*>(to);
  auto& sys = *ctrl->home_system;
  running_guard running{sys};
  run_here_unit unit{&sys, max_messages, stop};
  ctrl->enqueue(nullptr, caf::make_message_id(), std::move(msg), &unit);
  to = nullptr; // our reference goes while the system surely lives
}

void run_here_while(caf::local_actor* self, const std::function<void()>& send) {
  auto& sys = self->home_system();
  running_guard running{sys};
  run_here_unit unit{&sys, caller_budget};
  context_swap swap{self, &unit};
  send();
}

bool read_road_until_mail(caf::blocking_actor& self, road_conn& conn,
                          std::chrono::steady_clock::time_point deadline) {
  // A message that reaches the mailbox some other way (a failure, a time
  // out) is seen within a poll: never wait on the road for long.
  constexpr std::chrono::milliseconds poll{2};
  // It reads at least once: a message the caller left in its mailbox (a
  // late reply it no longer waits for) must not keep it from reading.
  do
    if (std::chrono::steady_clock::now() >= deadline || !conn.pump_once(poll))
      return false;
  while (self.mailbox().empty());
  return true;
}

} // namespace troupe
