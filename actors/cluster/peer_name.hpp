// How a line about a CAF peer names it: its node and, for a remote one, the
// address its connection comes from, as CAF's middleman knows it.
#pragma once

#include <functional>
#include <string>

#include <caf/actor_control_block.hpp>
#include <caf/event_based_actor.hpp>

namespace troupe {

/// Runs `say` with a name of the node `from` is on: "NODE at HOST:PORT" for
/// a remote node once the middleman says where it is (within 1 s), else
/// "NODE" ("no sender" for an anonymous message). `say` may run after this
/// returns, on `self`.
void with_peer_name(caf::event_based_actor* self,
                    const caf::strong_actor_ptr& from,
                    std::function<void(const std::string&)> say);

} // namespace troupe
