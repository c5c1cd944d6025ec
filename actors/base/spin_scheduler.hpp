// CAF's work-sharing scheduler, with threads that watch the job queue for a
// while before they sleep.
//
// On the 2-vCPU machines here, waking a sleeping scheduler thread costs
// 35-60 us. A worker paid that on every step: its scheduler thread slept
// while the step's push and the servers' round were under way, and the
// road reader that received the weights had to wake it. A thread that is
// still watching takes the reply at once. Threads watch only when told a
// reply is due (expect_work_soon), for a bounded time.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>

#include <caf/fwd.hpp>

namespace troupe {

/// Installs, in `cfg`, the scheduler of the actor system built from it:
/// CAF's work sharing, where a thread out of jobs within the watch time of
/// the last expect_work_soon() watches the job queue until then (yielding
/// the core to any other thread meanwhile) instead of sleeping; one thread
/// of the process at a time, the others sleep, and a job enqueued while it
/// watches wakes none of them (the watcher takes it). `watch`
/// gives the watch time from the config the system starts with (after the
/// command line is read; `cfg`, or where it moved); 0 = CAF's work sharing
/// as it is. A policy other than `sharing` (--scheduler.policy) gets CAF's
/// own scheduler for it. One watch time and one deadline per process: the
/// last system started sets them, and expect_work_soon() arms every
/// watching system of the process.
void use_watching_scheduler(
    caf::actor_system_config& cfg,
    std::function<std::chrono::microseconds(const caf::actor_system_config&)>
        watch);

/// An actor of this process waits for a reply that will come soon (a
/// worker sent a step's push and waits for the weights): scheduler threads
/// that run out of jobs within the watch time from now watch for it. A
/// thread watches only then, so a process that waits on nothing, or whose
/// replies go to blocking callers (they wake on their own), never spins.
/// Does nothing without a watching scheduler.
void expect_work_soon();

/// True while threads may watch: the watch time of the last
/// expect_work_soon() has not run out.
bool watch_armed();

/// Jobs that threads of such schedulers found while watching, i.e. that
/// woke no thread, over the process's life (to see that watching works).
uint64_t jobs_found_watching();

/// Times a thread of such a scheduler took the watch and kept it until the
/// watch time ran out, then went to sleep, over the process's life.
uint64_t watches_given_up();

/// The most threads that watched at once, over the process's life: one
/// thread of the process watches at a time, however many a scheduler has
/// (--scheduler.max-threads), and the others sleep.
uint32_t most_threads_watching();

} // namespace troupe
