// A pipeline stage's layers on one GPU (issue 38): the CUDA twin of
// kernels/stage.hpp's stage_model behind kernels/stage_backend.hpp. Each
// micro-batch's activations, and after its B the gradients its W needs,
// stay on the GPU in buffers a small pool hands out again; what goes to a
// neighbour (a forward's output, B's input gradient) comes back to host
// memory. The weights and gradients the stage actor reads and writes are
// host arrays, copied up by upload_parameters() and down by
// download_gradients().
#pragma once

#include <memory>

#include "kernels/model.hpp"
#include "kernels/stage_backend.hpp"
#include "kernels/status.hpp"

namespace troupe::cuda {

/// Layers [first, last) of `m` on GPU `ordinal`; null with the reason in
/// `st` (no such GPU, out of memory).
std::unique_ptr<stage_backend> make_cuda_stage(int ordinal, model& m,
                                               size_t first, size_t last,
                                               device_status& st);

} // namespace troupe::cuda
