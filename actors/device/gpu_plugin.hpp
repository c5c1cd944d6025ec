// Finding and loading libtroupe_cuda_plugin.so, troupe's GPU half
// (kernels/cuda/cuda_plugin.hpp says why it is a plugin), the first time a
// worker asks for a GPU.
#pragma once

#include <string>

#include "kernels/cuda/cuda_plugin.hpp"

namespace troupe {

/// The plugin's functions, loaded once per process; null with the reason
/// in `why`: troupe built without CUDA, the plugin not found (the places
/// looked in are named), or dlopen's own words (a CUDA library missing).
/// Looks beside the running program first (a packed bundle, an install's
/// bin/ and ../lib/), then where the build made it.
const cuda::plugin_api* gpu_plugin(std::string& why);

} // namespace troupe
