// Checks of a node agent's settings and of its fault plan.
#include "actors/supervision/agent_settings.hpp"

#include <utility>

#include "actors/supervision/fault_plan.hpp"
#include "messages/errors.hpp"

namespace troupe {

caf::error validate(const agent_settings& x) {
  if (x.restart_window_ms == 0 || x.backoff_ms == 0 ||
      x.backoff_max_ms < x.backoff_ms)
    return caf::make_error(errc::invalid_config,
                           "--agent.restart-window-ms and --agent.backoff-ms"
                           " must be > 0 and --agent.backoff-max-ms >="
                           " --agent.backoff-ms");
  return caf::none;
}

caf::error validate(const fault_settings& x) {
  auto plan = parse_fault_plan(x.plan);
  if (!plan)
    return std::move(plan.error());
  if (x.random_targets != "worker" && x.random_targets != "server" &&
      x.random_targets != "any")
    return caf::make_error(errc::invalid_config,
                           "--fault.random-targets must be worker, server or"
                           " any, got",
                           x.random_targets);
  if (x.random_kills > max_random_kills) // one action each, made at start
    return caf::make_error(errc::invalid_config,
                           "--fault.random-kills must be at most 10000, got",
                           x.random_kills);
  if (x.random_to_ms <= x.random_from_ms && x.random_kills > 0)
    return caf::make_error(errc::invalid_config,
                           "--fault.random-to-ms must be above"
                           " --fault.random-from-ms");
  return caf::none;
}

} // namespace troupe
