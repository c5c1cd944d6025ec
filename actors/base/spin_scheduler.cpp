// A work-sharing scheduler whose threads watch before they sleep.
#include "actors/base/spin_scheduler.hpp"

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
/// One thread of the process watches at a time; the others sleep.
std::atomic<bool> watch_taken{false};
std::atomic<uint32_t> most_watching{0};

bool watch_time_left() {
  auto until = steady::time_point{steady::duration{watch_until.load()}};
  return steady::now() < until;
}

/// The watcher's turn, taken if nobody has it; given back when it ends.
class watch_turn {
public:
  watch_turn() : mine_(!watch_taken.exchange(true)) {}
  ~watch_turn() { end(); }
  watch_turn(const watch_turn&) = delete;
  watch_turn& operator=(const watch_turn&) = delete;
  bool mine() const { return mine_; }
  void end() {
    if (mine_)
      watch_taken = false;
    mine_ = false;
  }

private:
  bool mine_;
};

class watching_sharing : public caf::policy::work_sharing {
public:
  /// CAF's data, and how many threads watch its queue now (under `lock`):
  /// a job enqueued meanwhile wakes no sleeping thread, a watcher takes it.
  struct coordinator_data : work_sharing::coordinator_data {
    using work_sharing::coordinator_data::coordinator_data;
    uint32_t watching = 0;
  };

  template <class Coordinator>
  void enqueue(Coordinator* self, caf::resumable* job) {
    auto& data = d(self);
    std::unique_lock<std::mutex> guard{data.lock};
    data.queue.push_back(job);
    if (data.watching == 0)
      data.cv.notify_one();
  }
  template <class Coordinator>
  void central_enqueue(Coordinator* self, caf::resumable* job) {
    enqueue(self, job);
  }
  template <class Worker>
  void external_enqueue(Worker* self, caf::resumable* job) {
    enqueue(self->parent(), job);
  }
  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    enqueue(self->parent(), job);
  }
  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    enqueue(self->parent(), job);
  }

  template <class Worker> caf::resumable* dequeue(Worker* self) {
    // Past the deadline (the usual case), or with another thread watching,
    // CAF's dequeue looks at the queue itself before it sleeps.
    if (!watch_time_left())
      return work_sharing::dequeue(self);
    watch_turn turn;
    if (!turn.mine())
      return work_sharing::dequeue(self);
    auto& data = d(self->parent());
    {
      std::unique_lock<std::mutex> guard{data.lock};
      auto n = ++data.watching;
      for (auto m = most_watching.load(); n > m;)
        if (most_watching.compare_exchange_weak(m, n))
          break;
    }
    for (bool watched = false;; watched = true) {
      std::unique_lock<std::mutex> guard{data.lock};
      if (!data.queue.empty()) {
        auto* job = data.queue.front();
        data.queue.pop_front();
        --data.watching;
        if (!data.queue.empty()) // more than we take: wake a sleeper
          data.cv.notify_one();
        if (watched)
          found_watching.fetch_add(1, std::memory_order_relaxed);
        return job;
      }
      if (!watch_time_left()) {
        --data.watching; // later jobs wake a thread, as CAF's do
        guard.unlock();
        gave_up_watching.fetch_add(1, std::memory_order_relaxed);
        turn.end();
        return work_sharing::dequeue(self);
      }
      guard.unlock();
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

bool watch_armed() {
  return watch_time_left();
}

uint64_t jobs_found_watching() {
  return found_watching.load();
}

uint64_t watches_given_up() {
  return gave_up_watching.load();
}

uint32_t most_threads_watching() {
  return most_watching.load();
}

} // namespace troupe
