// Where a pipeline stage's layers run (issue 38): the stage actor
// (actors/pipeline/stage_actor.hpp) drives one stage_backend, the CPU's
// (kernels/stage.hpp's stage_model on OpenBLAS) or a GPU's
// (kernels/cuda/cuda_stage.hpp), with the same calls. Tensors in and out
// are host memory: they come from and go to the neighbouring stages. The
// weights and gradients the actor pulls, pushes and updates are host
// arrays too; a GPU keeps its copies, so the actor says when the weights
// changed and when it reads the gradients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/model.hpp"
#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

/// Layers [first, last) of a model on one device; see stage_model for what
/// each call does. Not thread-safe. A failed call says why: "bad input:
/// ..." where the call was refused (work out of order, a kernel's
/// refusal), else the device's words (out of memory, a CUDA error).
class stage_backend {
public:
  virtual ~stage_backend() = default;

  /// "cpu (OpenBLAS ...)" or "NVIDIA H200 (cuda:0, 139 GiB)".
  virtual std::string describe() const = 0;
  virtual size_t input_size() const = 0;
  virtual size_t output_size() const = 0;
  virtual bool is_last() const = 0;
  virtual size_t first_layer() const = 0;

  /// The weights, host arrays named as the model names them: read them, or
  /// write them and then call upload_parameters().
  virtual std::vector<param_ref> parameters() = 0;
  virtual device_status upload_parameters() = 0;
  /// The gradients summed since zero_gradients(), host arrays: current
  /// after download_gradients().
  virtual std::vector<param_ref> gradients() = 0;
  virtual device_status download_gradients() = 0;
  virtual device_status zero_gradients() = 0;

  virtual device_status forward(uint32_t micro, const float* x,
                                size_t rows) = 0;
  virtual device_status infer(const float* x, size_t rows, tensor& out) = 0;
  virtual void drop_micro_batches() = 0;
  /// The output of micro-batch `micro`'s forward, in host memory.
  virtual const tensor& output(uint32_t micro) const = 0;
  virtual device_status backward_input(uint32_t micro, const float* dy,
                                       bool want_dx) = 0;
  /// The input gradient of the last backward_input, in host memory.
  virtual const tensor& input_grad() const = 0;
  virtual device_status backward_weight(uint32_t micro) = 0;
  virtual size_t held() const = 0;
  virtual size_t held_bytes() const = 0;
};

/// Layers [first, last) of `m` on the CPU: a stage_model.
std::unique_ptr<stage_backend> make_cpu_stage(model& m, size_t first,
                                              size_t last);

} // namespace troupe
