// The one CAF type-ID block of troupe: every message type and atom.
#pragma once

#include <caf/type_id.hpp>

#include <string>
#include <vector>

#include "actors/named_array.hpp"
#include "messages/frame.hpp"

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

CAF_END_TYPE_ID_BLOCK(troupe)
