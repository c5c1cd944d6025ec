// The device a pipeline stage's layers run on (issue 38): the stage actor
// (actors/pipeline/stage_actor.hpp) drives a kernels/stage_backend.hpp,
// the CPU's or, through the GPU plugin, a GPU's.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "actors/device/device_settings.hpp"
#include "kernels/model.hpp"
#include "kernels/stage_backend.hpp"

namespace troupe {

/// The one device of a stage: the one --device names, or for auto cuda:0
/// where the driver finds a GPU, else the CPU (`why` says why not a GPU).
/// Several devices are refused before (node_config::check_devices).
device_name stage_device(const device_settings& d, std::string& why);

/// Layers [first, last) of `m` on `d`; null with the reason in `why`
/// (the plugin missing, no such GPU, out of memory).
std::unique_ptr<stage_backend> open_stage(const device_name& d, model& m,
                                          size_t first, size_t last,
                                          std::string& why);

} // namespace troupe
