// A bound on how long one piece of a worker's own work may run: a step of
// its logic, a pipeline stage's forward or backward. Work stuck there (an
// endless loop, a deadlock, a read from a file system that went away)
// holds its thread, but CAF's middleman still answers the peers'
// heartbeats, so nothing else in the cluster notices: a sync round, a
// barrier or a pipeline waits for it for ever, as PyTorch DDP does on a
// stuck rank. The watch, a thread of its own, ends such a process instead
// (one line on stderr, exit_failed), and its agent restarts it; a killed
// or stopped (SIGSTOP) process is noticed without it.
//
//   start_step_watch(step_bound(cfg.step_timeout_ms, others_wait_ms));
//   ...
//   {
//     watched_work w{"worker 1: step 12"};
//     out = logic->step(12, weights);
//   }
//
// A fault plan's `stall` (actors/supervision/fault_plan.hpp) sends SIGUSR1:
// the next watched work of the process then never ends, as a hung step.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace troupe {

/// Starts the process's watch: watched work that runs `limit` or longer
/// ends the process (seen within a quarter of `limit` after, 500 ms at
/// most: the watch looks that often). The first call with a limit above 0
/// counts; later ones change nothing (0: no watch). Also makes SIGUSR1 stall
/// the next watched work.
void start_step_watch(std::chrono::milliseconds limit);

/// The bound of --worker.step-timeout-ms=`step_timeout_ms`: 0 is half
/// `others_wait_ms`, the longest the others wait on one step of this
/// worker (worker.hpp: step_bound_of), so that a hung one ends before they
/// give up (and would end instead of it).
std::chrono::milliseconds step_bound(uint32_t step_timeout_ms,
                                     uint32_t others_wait_ms);

/// The watch's limit; 0 while none runs.
std::chrono::milliseconds step_watch_limit();

/// Watches the work done in its lifetime, on one thread: `what` names it
/// in the line that ends the process ("worker 1: step 12"). Costs a lock
/// at each end and a clock read at its start; nothing while no watch runs.
class watched_work {
public:
  explicit watched_work(std::string what);
  ~watched_work();
  watched_work(const watched_work&) = delete;
  watched_work& operator=(const watched_work&) = delete;

private:
  uint64_t id_ = 0; // 0: not watched
};

} // namespace troupe
