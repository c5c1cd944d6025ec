// The cluster view as metrics (--metrics.port): its epoch and live members,
// as the node that holds it last saw them.
#pragma once

#include "messages/membership.hpp"

namespace troupe {

/// Sets troupe_view_epoch and troupe_members{role} from `v`.
void note_view(const cluster_view& v);

} // namespace troupe
