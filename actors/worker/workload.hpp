// The counter task of troupe-node (--worker.task=counter), a check of the
// key-value store rather than training: every worker adds 1 to every
// element of K arrays per clock, and checks what it pulls (its own acked
// pushes are visible; final sums are exact: every element holds the pushes
// the scheduler's event log accounts for, accounting.hpp).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/kv/kv_settings.hpp"
#include "actors/worker/worker_settings.hpp"

namespace troupe {

/// Runs the workload as one worker and prints what it did; returns the
/// process exit code (0 = every check held). `resumed`: the job resumed
/// from a checkpoint (--resume).
int run_counter_workload(caf::actor_system& sys, caf::actor scheduler,
                         const worker_settings& w, const kv_settings& kv_cfg,
                         bool resumed);

} // namespace troupe
