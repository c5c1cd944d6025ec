// Settings of a node agent (INI group "agent") and of the faults it injects
// into its children (group "fault").
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>

namespace troupe {

/// Settings of a node agent (INI group "agent"): the processes it starts on
/// its machine and how it restarts them (actors/supervision/agent.hpp).
struct agent_settings {
  /// Server processes to start. Default 0.
  uint32_t servers = 0;
  /// Worker processes to start. Default 0.
  uint32_t workers = 0;
  /// Restarts allowed per child within restart_window_ms. Default 3.
  uint32_t max_restarts = 3;
  /// Window over which restarts are counted, ms. Default 30000.
  uint32_t restart_window_ms = 30000;
  /// Delay before the first restart in the window, ms; doubles for each
  /// further one, up to backoff_max_ms. Defaults 200 and 5000.
  uint32_t backoff_ms = 200;
  uint32_t backoff_max_ms = 5000;
  /// Folder for one log per child, named by the child's role and rank
  /// (server-0.log, worker-1.log, ...); "" = children write to the agent's
  /// own stdout and stderr.
  std::string logs;
};

/// One error naming the --agent.* flag that is wrong, or none.
caf::error validate(const agent_settings& x);

/// Most random kills one agent plans.
constexpr uint32_t max_random_kills = 10000;

/// Fault injection carried out by a node agent (INI group "fault"); see
/// actors/supervision/fault_plan.hpp. Off by default.
struct fault_settings {
  /// Planned faults, e.g. "kill:worker-1@3000,hang:worker-0@5000+4000".
  std::string plan;
  /// Random kills: each child of the targets once, in a random order,
  /// before any twice. Default 0; at most max_random_kills.
  uint32_t random_kills = 0;
  /// Whom random kills target: worker, server or any. Default worker.
  std::string random_targets = "worker";
  /// Random kills happen at uniform times in [from, to) ms after start.
  uint32_t random_from_ms = 2000;
  uint32_t random_to_ms = 10000;
  /// Seed of the random draws; 0 = from the clock (printed).
  uint64_t seed = 0;
};

/// One error naming the --fault.* flag that is wrong (the plan is parsed),
/// or none.
caf::error validate(const fault_settings& x);

} // namespace troupe
