// The communicator (kernels/comm/communicator.hpp) over NCCL: one rank per
// GPU of this process, collectives on device pointers. Built with the
// CUDA twins (TROUPE_HAVE_CUDA).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.hpp"

namespace troupe::cuda {

/// One communicator per GPU in `ordinals`, ranks in that order
/// (ncclCommInitAll). Each takes device pointers of its GPU, runs on a
/// stream of its own and returns once its part is done; ranks call from
/// threads of their own. Empty, with the reason in `why` (a GPU missing,
/// NCCL's message), if the group cannot be made.
std::vector<std::unique_ptr<communicator>>
make_nccl_group(const std::vector<int>& ordinals, std::string& why);

} // namespace troupe::cuda
