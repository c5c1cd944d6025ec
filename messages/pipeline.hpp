// Pipeline conversation (messages/pipeline.capnp) as plain C++ values, with
// encode/decode. decode validates everything the bytes alone can tell.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "messages/frame.hpp"
#include "messages/named_array.hpp"

namespace troupe {

/// Activations (forward) or the input gradient (backward) of one
/// micro-batch, between neighbouring stages.
struct stage_tensor {
  uint64_t step = 0;
  uint32_t micro = 0;
  uint32_t rows = 0;
  uint32_t cols = 0;
  std::vector<float> values; ///< rows * cols
  uint64_t gen = 0;          ///< the pipeline's generation; 0 = none
};

/// A stage's weights after `step` mini-batches (a driver's checkpoint).
struct stage_checkpoint {
  uint32_t stage = 0;
  uint64_t step = 0;
  std::string spec;
  uint32_t first = 0, last = 0;
  std::vector<named_array> arrays; ///< the weights, then the state
  std::string optimizer = "sgd";   ///< whose state that is
};

/// Most floats in one stage tensor (256 MiB of them).
constexpr uint64_t max_stage_tensor_floats = uint64_t{64} << 20;

frame encode(const stage_tensor& x);
/// malformed_message if the bytes are no StageTensor, or its values are not
/// rows * cols floats (at most max_stage_tensor_floats).
caf::error decode(bytes_view f, stage_tensor& x);

frame encode(const stage_checkpoint& x);
/// malformed_message if the bytes are no StageCheckpoint, its keys and
/// arrays differ in count, or an array is not whole floats.
caf::error decode(bytes_view f, stage_checkpoint& x);

} // namespace troupe
