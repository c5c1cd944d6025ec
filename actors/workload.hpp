// The built-in worker workload of troupe-node until training exists: every
// worker adds 1 to every element of K arrays per clock, and checks what it
// pulls (its own acked pushes are visible; final sums are exact).
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/node_config.hpp"

namespace troupe {

/// Runs the workload as one worker and prints what it did; returns the
/// process exit code (0 = every check held).
int run_counter_workload(caf::actor_system& sys, caf::actor scheduler,
                         const node_config& cfg);

} // namespace troupe
