// Pipeline conversation (messages/pipeline.capnp) as plain C++ values, with
// encode/decode. decode validates everything the bytes alone can tell.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/error.hpp>

#include "messages/frame.hpp"

namespace troupe {

/// Activations (forward) or the input gradient (backward) of one
/// micro-batch, between neighbouring stages.
struct stage_tensor {
  uint64_t step = 0;
  uint32_t micro = 0;
  uint32_t rows = 0;
  uint32_t cols = 0;
  std::vector<float> values; ///< rows * cols
};

/// Most floats in one stage tensor (256 MiB of them).
constexpr uint64_t max_stage_tensor_floats = uint64_t{64} << 20;

frame encode(const stage_tensor& x);
/// malformed_message if the bytes are no StageTensor, or its values are not
/// rows * cols floats (at most max_stage_tensor_floats).
caf::error decode(bytes_view f, stage_tensor& x);

} // namespace troupe
