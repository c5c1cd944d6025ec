// The GPU half of troupe as a plugin (issue 38): a shared library,
// libtroupe_cuda_plugin.so, that troupe-node loads (dlopen) only when a
// worker asks for a GPU. troupe-node itself links no CUDA library, for
// cuBLASLt's 94 KiB of static thread-local storage would go into every
// thread's stack, and threads made with small stacks (civetweb's, which
// serve the status page and the metrics) then fail to start; a library
// loaded later keeps its thread-local storage out of the stacks. One
// troupe-node also serves machines with and without GPUs. Host types only:
// no CUDA header leaks out of here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/comm/communicator.hpp"
#include "kernels/device_backend.hpp"
#include "kernels/model.hpp"
#include "kernels/stage_backend.hpp"
#include "kernels/status.hpp"

namespace troupe::cuda {

/// Raised whenever plugin_api, or the device_backend or stage_backend
/// classes whose objects the plugin makes (their virtual calls' layout),
/// change (2: make_stage; 3: device_backend::step_alone and host_floats).
constexpr uint32_t plugin_abi = 3;

/// What the plugin offers: kernels/cuda's device_count, make_cuda_backend,
/// make_nccl_group and make_cuda_stage.
struct plugin_api {
  /// plugin_abi of the build that made the plugin: a plugin of another
  /// build (its table laid out otherwise) is refused, not called.
  uint32_t abi;
  int (*device_count)(std::string* why);
  std::unique_ptr<device_backend> (*make_backend)(int ordinal, model& m,
                                                  device_status& st);
  std::vector<std::unique_ptr<communicator>> (*make_group)(
      const std::vector<int>& ordinals, std::string& why);
  std::unique_ptr<stage_backend> (*make_stage)(int ordinal, model& m,
                                               size_t first, size_t last,
                                               device_status& st);
};

} // namespace troupe::cuda

/// The plugin's one exported symbol.
extern "C" __attribute__((visibility("default")))
const troupe::cuda::plugin_api*
troupe_cuda_plugin();
