// A model: a stack of layers built from a spec string such as
// "mlp:784-256-128-10" (dense + relu between sizes, no relu after the last),
// with forward, backward and its parameters as named flat arrays for a kv.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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

  /// A forward in parts, for a first layer whose row blocks' weights come
  /// one after another: forward_begin copies x and seeds the first layer's
  /// output with its bias (which must be in place), forward_next adds the
  /// first layer's next row block, forward_end the blocks left and then the
  /// other layers. forward() is forward_begin then forward_end; every way
  /// sums in the same order, so all give the same logits, bit for bit.
  /// bad_input: forward_next with no block left or no forward begun,
  /// forward_end with none begun.
  kernel_status forward_begin(const float* x, size_t batch);
  kernel_status forward_next();
  kernel_status forward_end();

  /// The first layer's row blocks a begun forward has added (0 if none).
  size_t forward_blocks_added() const {
    return next_block_ == no_forward ? 0 : next_block_;
  }

  /// The logits of the last forward: batch x output_size.
  const tensor& logits() const { return acts_.back(); }

  /// Called by backward with a parameters() index as soon as that array's
  /// gradient is final: a caller may push it while the rest is computed.
  using ready_fn = std::function<void(size_t param)>;

  /// Back-propagates dlogits (batch x output_size, for the batch of the last
  /// forward) and overwrites every gradient array, in gradient_order();
  /// `ready` (if set) hears of each as it is done.
  kernel_status backward(const float* dlogits, const ready_fn& ready = {});

  /// forward, mean softmax cross-entropy against labels (batch values <
  /// output_size), backward; the mean loss goes to *loss.
  kernel_status compute_gradients(const float* x, const uint8_t* labels,
                                  size_t batch, float* loss,
                                  const ready_fn& ready = {});

  /// compute_gradients of a forward begun with forward_begin (on the batch
  /// x given there): forward_end, the loss, backward.
  kernel_status finish_gradients(const uint8_t* labels, float* loss,
                                 const ready_fn& ready = {});

  /// Stores the weights of each layer with more than `max_floats` of them
  /// as row blocks of about max_floats each (its rows split evenly), values
  /// kept: each block is then a parameter array of its own,
  /// "dense<i>.w.<k>", whose gradient backward() finishes, and a caller can
  /// push, before the next block's. 0 = one array per layer (as built).
  /// The results are those of the unsplit layer up to float rounding.
  void set_row_blocks(size_t max_floats);

  /// parameters() indices in the order backward() finishes them: the last
  /// layer first, each layer's bias before its weight blocks.
  std::vector<size_t> gradient_order() const;

  /// True if parameter array `i` is one of several row blocks of a layer.
  bool is_row_block(size_t i) const;

  /// Row blocks of layer `l`'s weights (1 unless set_row_blocks split it):
  /// parameters() holds them first, then the layer's bias.
  size_t row_blocks(size_t l) const { return layers_.at(l).w.size(); }

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
    size_t in = 0, out = 0;
    /// Row blocks of W (in x out): block k holds rows first[k] ..
    /// first[k + 1] - 1; one block unless set_row_blocks split it.
    std::vector<tensor> w, dw;
    std::vector<size_t> first; // block count + 1 entries, the last is `in`
    tensor b, db;              // out
  };

  model() = default;
  /// parameters() index of each layer's first array, and their count last.
  std::vector<size_t> first_params() const;
  /// Layer and block of parameters() index i (block = SIZE_MAX: the bias);
  /// false if there is no such array.
  bool locate(size_t i, size_t& layer, size_t& block) const;
  /// Cuts layer L's weights into `blocks` row blocks (values kept).
  static void split_rows(layer& L, size_t blocks);
  /// Resizes layer l's output to the batch and fills each row with b.
  void seed_output(size_t l, size_t batch);
  /// Adds row block k's term to layer l's output.
  kernel_status add_block(size_t l, size_t k);

  static constexpr size_t no_forward = SIZE_MAX;
  /// The next row block a begun forward adds (of the first layer until
  /// forward_end); no_forward if none is begun.
  size_t next_block_ = no_forward;

  std::string spec_;
  std::vector<layer> layers_;
  std::vector<tensor> acts_; // [0] input copy; [l + 1] output of layer l
  tensor dy_, dx_;           // backward scratch: gradient at a layer's out/in
  tensor dlogits_;           // scratch of compute_gradients
};

} // namespace troupe
