// A work-sharing scheduler whose threads watch before they sleep.
#include "actors/spin_scheduler.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/defaults.hpp>
#include <caf/policy/work_sharing.hpp>
#include <caf/policy/work_stealing.hpp>
#include <caf/scheduler/coordinator.hpp>
#include <caf/scheduler/test_coordinator.hpp>

namespace troupe {

namespace {

using steady = std::chrono::steady_clock;

/// How long threads watch, in microseconds, and until when they watch now
/// (expect_work_soon). CAF builds the policy itself, without arguments: so
/// one of each per process, set anew when a system starts.
std::atomic<int64_t> watch_us{0};
std::atomic<steady::rep> watch_until{0};
std::atomic<uint64_t> found_watching{0};
std::atomic<uint64_t> gave_up_watching{0};

class watching_sharing : public caf::policy::work_sharing {
public:
  template <class Worker> caf::resumable* dequeue(Worker* self) {
    auto& data = d(self->parent());
    for (bool watched = false;; watched = true) {
      // Past the deadline (the usual case), CAF's dequeue looks at the
      // queue itself before it sleeps.
      auto until = steady::time_point{steady::duration{watch_until.load()}};
      if (steady::now() >= until) {
        if (watched)
          gave_up_watching.fetch_add(1, std::memory_order_relaxed);
        return work_sharing::dequeue(self);
      }
      {
        std::unique_lock<std::mutex> guard{data.lock};
        if (!data.queue.empty()) {
          auto* job = data.queue.front();
          data.queue.pop_front();
          if (watched)
            found_watching.fetch_add(1, std::memory_order_relaxed);
          return job;
        }
      }
      std::this_thread::yield();
    }
  }
};

} // namespace

void use_watching_scheduler(
    caf::actor_system_config& cfg,
    std::function<std::chrono::microseconds(const caf::actor_system_config&)>
        watch) {
  cfg.module_factories.push_back([watch](caf::actor_system& sys)
                                     -> caf::actor_system::module* {
    auto us = std::max<int64_t>(watch(sys.config()).count(), 0);
    watch_us = us;
    watch_until = 0; // no deadline left by an earlier system
    // Any policy but work sharing gets CAF's own scheduler for it, as
    // CAF would pick it without this factory.
    auto policy = caf::get_or(sys.config(), "scheduler.policy",
                              caf::defaults::scheduler::policy);
    if (policy == caf::atom("testing"))
      return new caf::scheduler::test_coordinator(sys);
    if (policy != caf::atom("sharing"))
      return new caf::scheduler::coordinator<caf::policy::work_stealing>(sys);
    if (us == 0)
      return new caf::scheduler::coordinator<caf::policy::work_sharing>(sys);
    return new caf::scheduler::coordinator<watching_sharing>(sys);
  });
}

void expect_work_soon() {
  auto us = watch_us.load(std::memory_order_relaxed);
  if (us > 0)
    watch_until = (steady::now() + std::chrono::microseconds{us})
                      .time_since_epoch()
                      .count();
}

uint64_t jobs_found_watching() {
  return found_watching.load();
}

uint64_t watches_given_up() {
  return gave_up_watching.load();
}

} // namespace troupe
