// The one CAF type-ID block of troupe: every message type and atom.
#pragma once

#include <caf/type_id.hpp>

#include <memory>
#include <string>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>

#include "messages/frame.hpp"
#include "messages/named_array.hpp"

namespace troupe {
struct road_message; // actors/road/road.hpp
struct device_job;   // actors/device/device_actor.hpp
} // namespace troupe

// In-process only: a message a road's reader thread hands to its actor.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<troupe::road_message>)
// In-process only: a step's part a device_team hands to a device actor.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<troupe::device_job>)

CAF_BEGIN_TYPE_ID_BLOCK(troupe, caf::first_custom_type_id)

CAF_ADD_TYPE_ID(troupe, (troupe::frame))
CAF_ADD_TYPE_ID(troupe, (troupe::named_array))
CAF_ADD_TYPE_ID(troupe, (std::vector<troupe::named_array>))
CAF_ADD_TYPE_ID(troupe, (std::vector<uint64_t>))

CAF_ADD_ATOM(troupe, troupe, register_atom, "register")
CAF_ADD_ATOM(troupe, troupe, view_atom, "view")
CAF_ADD_ATOM(troupe, troupe, declare_atom, "declare")
CAF_ADD_ATOM(troupe, troupe, barrier_atom, "barrier")
CAF_ADD_ATOM(troupe, troupe, init_atom, "init")
CAF_ADD_ATOM(troupe, troupe, push_atom, "push")
CAF_ADD_ATOM(troupe, troupe, pull_atom, "pull")
CAF_ADD_ATOM(troupe, troupe, watch_atom, "watch")
CAF_ADD_ATOM(troupe, troupe, start_atom, "start")
CAF_ADD_ATOM(troupe, troupe, road_atom, "road")
CAF_ADD_ATOM(troupe, troupe, road_down_atom, "road_down")
CAF_ADD_ATOM(troupe, troupe, tick_atom, "tick")
CAF_ADD_ATOM(troupe, troupe, event_atom, "event")
CAF_ADD_ATOM(troupe, troupe, events_atom, "events")
CAF_ADD_ATOM(troupe, troupe, clock_atom, "clock")
CAF_ADD_ATOM(troupe, troupe, replicate_atom, "replicate")
CAF_ADD_ATOM(troupe, troupe, leave_atom, "leave")
CAF_ADD_ATOM(troupe, troupe, checkpoint_atom, "checkpoint")
CAF_ADD_ATOM(troupe, troupe, reconnect_atom, "reconnect")
CAF_ADD_ATOM(troupe, troupe, reroute_atom, "reroute")
CAF_ADD_ATOM(troupe, troupe, redial_atom, "redial")
CAF_ADD_ATOM(troupe, troupe, stale_atom, "stale")
CAF_ADD_ATOM(troupe, troupe, link_atom, "link")
CAF_ADD_ATOM(troupe, troupe, step_atom, "step")
CAF_ADD_ATOM(troupe, troupe, activation_atom, "activation")
CAF_ADD_ATOM(troupe, troupe, gradient_atom, "gradient")
CAF_ADD_ATOM(troupe, troupe, cut_atom, "cut")
CAF_ADD_ATOM(troupe, troupe, keep_atom, "keep")
CAF_ADD_ATOM(troupe, troupe, commit_atom, "commit")
CAF_ADD_ATOM(troupe, troupe, sync_atom, "sync")
CAF_ADD_ATOM(troupe, troupe, done_atom, "done")
CAF_ADD_ATOM(troupe, troupe, eval_atom, "eval")
CAF_ADD_ATOM(troupe, troupe, finish_atom, "finish")
CAF_ADD_ATOM(troupe, troupe, reset_atom, "reset")
CAF_ADD_ATOM(troupe, troupe, stats_atom, "stats")
CAF_ADD_ATOM(troupe, troupe, fault_atom, "fault")

CAF_END_TYPE_ID_BLOCK(troupe)
