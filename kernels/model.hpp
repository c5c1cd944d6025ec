// A model: a stack of layers built from a spec string such as
// "mlp:784-256-128-10" (dense + relu between sizes, no relu after the last),
// with forward, backward and its parameters as named flat arrays for a kv.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

/// One flat parameter (or gradient) array of a model: what a kv store pushes
/// and pulls. `data` points into the model and stays valid while it lives.
struct param_ref {
  std::string name; ///< "dense<i>.w" (in x out) or "dense<i>.b" (out)
  float* data;      ///< `size` floats, row-major
  size_t size;      ///< number of floats
};

/// A multi-layer perceptron on the CPU. Not thread-safe; copyable.
class model {
public:
  /// The model of `spec` ("mlp:IN-H1-...-OUT", at least two sizes, each in
  /// [1, 2^24]) with zero parameters, or nullopt with one line saying what is
  /// wrong in *error (if error is not null).
  static std::optional<model> from_spec(const std::string& spec,
                                        std::string* error);

  /// The spec this model was built from.
  const std::string& spec() const { return spec_; }

  /// Floats per input sample (the first size of the spec).
  size_t input_size() const;

  /// Logits per sample: the number of classes (the last size of the spec).
  size_t output_size() const;

  /// Number of dense layers (sizes in the spec minus one).
  size_t layer_count() const { return layers_.size(); }

  /// Sets weights from `seed` (He normal before relu, Xavier uniform for the
  /// last layer, one derived seed per layer) and biases to zero.
  void init_parameters(uint64_t seed);

  /// Runs the layers on x (batch x input_size, row-major; copied, so x may
  /// die after the call). Then logits() holds batch x output_size.
  kernel_status forward(const float* x, size_t batch);

  /// The logits of the last forward: batch x output_size.
  const tensor& logits() const { return acts_.back(); }

  /// Back-propagates dlogits (batch x output_size, for the batch of the last
  /// forward) and overwrites every gradient array.
  kernel_status backward(const float* dlogits);

  /// forward, mean softmax cross-entropy against labels (batch values <
  /// output_size), backward; the mean loss goes to *loss.
  kernel_status compute_gradients(const float* x, const uint8_t* labels,
                                  size_t batch, float* loss);

  /// The parameter arrays in layer order: dense0.w, dense0.b, dense1.w, ...
  std::vector<param_ref> parameters();

  /// The gradient arrays, same names, order and sizes as parameters().
  std::vector<param_ref> gradients();
  /// Exchanges the storage of parameter array `i` (parameters() order) with
  /// `xs`, which must hold as many floats: pulled weights become the
  /// model's without a copy. False, and nothing changes, otherwise.
  /// Earlier param_refs are invalid afterwards.
  bool swap_parameter(size_t i, std::vector<float>& xs);
  /// The same for gradient array `i`; the next backward overwrites the
  /// storage swapped in, whatever it holds.
  bool swap_gradient(size_t i, std::vector<float>& xs);

private:
  struct layer {
    tensor w, b;   // in x out, out
    tensor dw, db; // same shapes
  };

  model() = default;

  std::string spec_;
  std::vector<layer> layers_;
  std::vector<tensor> acts_; // [0] input copy; [l + 1] output of layer l
  tensor dy_, dx_;           // backward scratch: gradient at a layer's out/in
  tensor dlogits_;           // scratch of compute_gradients
};

} // namespace troupe
