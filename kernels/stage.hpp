// A pipeline stage's share of a model: consecutive dense layers, a forward
// per micro-batch whose activations it keeps, and the backward in two
// halves: the input gradient (B), which the stage before waits for, and the
// weight gradient (W), summed over the micro-batches of a mini-batch. Run
// over every micro-batch, the stages' gradients are the model's on the
// whole mini-batch (actors/pipeline/schedule.hpp orders the work).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/model.hpp"
#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

/// Layer boundaries cutting `layer_params` (floats of each layer, in order)
/// into `stages` runs of consecutive layers with about as many parameters
/// each: stages + 1 entries, the first 0, the last layer_params.size(),
/// every stage at least one layer. Empty if there are fewer layers than
/// stages, or no stage.
std::vector<size_t> cut_layers(const std::vector<size_t>& layer_params,
                               uint32_t stages);

/// cut_layers of `m`'s layers by their parameters (weights and bias).
std::vector<size_t> cut_model(model& m, uint32_t stages);

/// Layers [first, last) of a model, with their own copy of its weights.
/// Not thread-safe.
class stage_model {
public:
  /// Layers [first, last) of `m` (first < last <= m.layer_count()), their
  /// weights copied. A relu follows each layer but the model's last.
  stage_model(model& m, size_t first, size_t last);

  size_t input_size() const { return layers_.front().in; }
  size_t output_size() const { return layers_.back().out; }
  /// True if the stage ends with the model's last layer (its output is
  /// the logits).
  bool is_last() const { return last_of_model_; }
  /// The model's index of the stage's first layer: parameters() holds
  /// layer first_layer() + i / 2 at i (weights, then bias).
  size_t first_layer() const { return layers_.front().index; }

  /// The stage's parameter and gradient arrays, named as the model names
  /// them ("dense<i>.w", "dense<i>.b", i the model's layer index).
  std::vector<param_ref> parameters();
  std::vector<param_ref> gradients();

  /// Zeroes the gradients: a mini-batch begins.
  void zero_gradients();

  /// Runs the layers on micro-batch `micro`'s input x (batch x
  /// input_size), keeping its activations until its W. bad_input if the
  /// micro-batch is already held.
  kernel_status forward(uint32_t micro, const float* x, size_t batch);
  /// The layers on x (batch x input_size) into `out` (batch x
  /// output_size), keeping nothing: an evaluation.
  kernel_status infer(const float* x, size_t batch, tensor& out);
  /// Lets go of every micro-batch's activations: a mini-batch given up.
  void drop_micro_batches();
  /// The output of micro-batch `micro`'s forward (batch x output_size).
  const tensor& output(uint32_t micro) const;

  /// B of micro-batch `micro`: from dy, the gradient at the stage's output,
  /// the gradient at its input (input_grad(), unless `want_dx` is false:
  /// the first stage), keeping what W needs. bad_input if `micro` has no
  /// forward, or had its B.
  kernel_status backward_input(uint32_t micro, const float* dy, bool want_dx);
  /// The input gradient of the last backward_input.
  const tensor& input_grad() const { return dx_; }

  /// W of micro-batch `micro`: adds its weight and bias gradients to the
  /// stage's, and lets go of its activations. bad_input before its B.
  kernel_status backward_weight(uint32_t micro);

  /// Micro-batches whose activations the stage holds now.
  size_t held() const { return micros_.size(); }
  /// Bytes of the activations (and, after B, the gradients W needs) the
  /// stage holds now, over every micro-batch.
  size_t held_bytes() const;

private:
  struct layer {
    size_t index = 0; // in the model
    size_t in = 0, out = 0;
    tensor w, b, dw, db;
  };
  struct micro_state {
    std::vector<tensor> acts; // [0] input; [l + 1] output of layer l
    std::vector<tensor> dys;  // after B: the gradient at layer l's output
  };
  /// The layers on x, each output into `acts` after the input's copy.
  kernel_status run_layers(const float* x, size_t batch,
                           std::vector<tensor>& acts);
  /// The arrays `w` and `b` of every layer, named as parameters().
  std::vector<param_ref> refs(tensor layer::*w, tensor layer::*b);
  std::vector<layer> layers_;
  bool last_of_model_ = false;
  std::map<uint32_t, micro_state> micros_;
  tensor dx_, scratch_w_, scratch_b_;
};

} // namespace troupe
