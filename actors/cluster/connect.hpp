// Reaching the scheduler: every node but the scheduler starts here.
#pragma once

#include <cstdint>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>

namespace troupe {

/// Connects to a scheduler at host:port, retrying for up to `wait_ms`
/// while it starts. Errors say where and why.
caf::expected<caf::actor> connect_scheduler(caf::actor_system& sys,
                                            const std::string& host,
                                            uint16_t port, uint32_t wait_ms);

} // namespace troupe
