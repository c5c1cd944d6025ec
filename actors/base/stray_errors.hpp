// An error message that answers no request of ours ends a CAF actor by
// default. A peer that gets a message it does not know (another build of
// troupe, a test's stand-in) sends such an error back, and so may any
// peer at all: for the long-lived roles that would end the job over
// nothing. They log it instead. Lines about such peers name their node.
#pragma once

#include <functional>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/scheduled_actor.hpp>

#include "actors/base/log.hpp"

namespace troupe {

/// The node a message came from, for a line about a peer ("no sender"
/// for an anonymous message).
inline std::string sender_node(const caf::strong_actor_ptr& from) {
  return from ? caf::to_string(from->node()) : std::string{"no sender"};
}

/// Makes `self` log an error message that answers nothing, as `who()`
/// says it, and go on.
inline void log_stray_errors(caf::scheduled_actor* self,
                             std::function<std::string()> who) {
  self->set_error_handler([self, who = std::move(who)](caf::error& err) {
    TROUPE_LOG(warning, who(), "ignored an error message that answers nothing",
               " we asked: ", self->system().render(err));
  });
}

} // namespace troupe
