// libtroupe_cuda_plugin.so's entry point (cuda_plugin.hpp).
#include "kernels/cuda/cuda_plugin.hpp"

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_device.hpp"
#include "kernels/cuda/cuda_stage.hpp"
#include "kernels/cuda/nccl_group.hpp"

extern "C" const troupe::cuda::plugin_api* troupe_cuda_plugin() {
  static const troupe::cuda::plugin_api api{
      troupe::cuda::plugin_abi, &troupe::cuda::device_count,
      &troupe::cuda::make_cuda_backend, &troupe::cuda::make_nccl_group,
      &troupe::cuda::make_cuda_stage};
  return &api;
}
