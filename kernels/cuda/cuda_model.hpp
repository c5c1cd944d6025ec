// The MLP of a host model (kernels/model.hpp) on one GPU: its parameters,
// activations and gradients in device memory, and a training step's
// gradients computed there with the CUDA twins, as model::compute_gradients
// computes them on the CPU (issue 38: a whole training step on the GPU
// against the CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/cuda/cuda_device.hpp"
#include "kernels/device_backend.hpp"
#include "kernels/model.hpp"

namespace troupe::cuda {

class cuda_model {
public:
  /// `m`'s layers on `dev`, its parameters copied up; null with the reason
  /// in `st` (a model whose layers are cut into row blocks, which this
  /// twin does not run, or a failed allocation).
  static std::unique_ptr<cuda_model> load(device& dev, model& m,
                                          cuda_status& st);

  /// `m`'s parameters copied up again (after an update or a pull).
  cuda_status upload_parameters(model& m);
  /// The same from host arrays in model::parameters() order and sizes.
  cuda_status upload_parameters(const std::vector<param_ref>& ps);

  /// Forward, softmax cross-entropy and backward for `batch` rows of `x`
  /// with `labels` (host memory, checked and copied up through pinned
  /// staging buffers): the gradients stay on the GPU, the mean loss comes
  /// back in `loss`. Once two steps in a row had the same batch (its
  /// shapes are fixed), the step is recorded as a CUDA graph and replayed
  /// from then on while the batch stays (use_graphs).
  cuda_status compute_gradients(const float* x, const uint8_t* labels,
                                size_t batch, float* loss);

  /// A device alone's whole step (a trainer's, through its device actor):
  /// host weights `ps` up (model::parameters() order; empty: none), the
  /// step on `batch` rows of `x` with `labels`, its gradients down into
  /// host arrays `gs` (model::gradients() order; empty: none). Overlapped
  /// (see transfers), each layer's weights go up on the copy lane while the
  /// layers before it compute, and each layer's gradients come down as soon
  /// as its backward is done, while the layers before it go on; the host's
  /// copies into and out of the pinned staging run beside both, in chunks.
  /// Else one after the other, as upload_parameters, compute_gradients and
  /// download_gradients.
  cuda_status full_step(const std::vector<param_ref>& ps, const float* x,
                        const uint8_t* labels, size_t batch, float* loss,
                        const std::vector<param_ref>& gs);

  /// How full_step moves the weights and gradients: `automatic` overlaps
  /// them with the step where the parameters are at least overlap_floats
  /// (there the copies outweigh the launches a graph saves; below, the
  /// step is a graph and its copies are a few microseconds).
  enum class transfers { automatic, overlapped, sequential };
  static constexpr size_t overlap_floats = size_t{1} << 20;
  void set_transfers(transfers t) { transfers_ = t; }
  /// True if the last full_step overlapped its copies with the step (not
  /// where it was refused, or the host had no pinned memory to give).
  bool overlapped() const { return overlapped_; }
  /// Parameters (weights and biases) in floats.
  size_t parameter_floats() const;

  /// Replays steps as a CUDA graph (default) or launches each kernel.
  void use_graphs(bool on) {
    graphs_ = on;
    step_graph_ = graph{};
    graph_rows_ = 0;
  }
  /// True if the last compute_gradients replayed a graph.
  bool replayed() const { return replayed_; }

  /// The gradients copied into `m`'s gradient arrays (model::gradients).
  cuda_status download_gradients(model& m);
  /// The same into host arrays in model::gradients() order and sizes.
  cuda_status download_gradients(const std::vector<param_ref>& gs);

  /// Every gradient times `a`, on the GPU.
  cuda_status scale_gradients(float a);

  /// The parameter and gradient arrays in device memory, in
  /// model::parameters() order (for a communicator).
  std::vector<device_array> parameter_arrays() { return arrays(false); }
  std::vector<device_array> gradient_arrays() { return arrays(true); }

private:
  struct layer {
    size_t in = 0, out = 0;
    buffer<float> w, b, dw, db;
  };
  explicit cuda_model(device& dev) : dev_(dev) {}
  /// Each layer's weights and bias (`grads`: their gradients), in order.
  std::vector<device_array> arrays(bool grads);
  /// Buffers and staging for `batch` rows; drops the graph if they move.
  cuda_status reserve(size_t batch);
  /// The batch up to the device, queued: from the caller's memory where it
  /// is pinned (as a loader that pins its batches gives), else through the
  /// staging buffers (a host copy first). Never recorded in the graph,
  /// whose copies would read one fixed address.
  cuda_status upload(const float* x, const uint8_t* labels, size_t batch);
  /// The step queued: upload, then the graph (recorded first where the
  /// shapes just became fixed) or each kernel. Not waited for.
  cuda_status run_step(const float* x, const uint8_t* labels, size_t batch);
  /// What full_step's overlapped copies add to queue_step: calls before
  /// layer l's forward and after its backward.
  struct step_hooks {
    virtual ~step_hooks() = default;
    virtual cuda_status before_forward(size_t l) = 0;
    virtual cuda_status after_backward(size_t l) = 0;
  };
  class overlapped_copies;
  /// The step on the stream, from the uploaded batch to the loss in
  /// loss_stage_: nothing that waits or allocates (it may be recorded),
  /// unless `hooks` (never recorded) do.
  cuda_status queue_step(size_t batch, step_hooks* hooks = nullptr);
  /// "bad input: ..." if the batch is missing or a label is out of range.
  cuda_status check_batch(const float* x, const uint8_t* labels, size_t batch,
                          const float* loss) const;
  /// full_step's overlapped path, queued and its copies out done; the
  /// caller waits for the device.
  cuda_status run_overlapped(const std::vector<param_ref>& ps, const float* x,
                             const uint8_t* labels, size_t batch,
                             const std::vector<param_ref>& gs);
  /// Walks `refs` (a model's arrays: weights, then bias, per layer) beside
  /// our layers' buffers (`grads`: the gradients' ones), calling
  /// `move(host, device, n)` on each pair.
  template <class Move>
  cuda_status pair_up(const std::vector<param_ref>& refs, bool grads,
                      Move move);

  device& dev_;
  std::vector<layer> layers_;
  std::vector<buffer<float>> acts_; // [0] input; [l + 1] layer l's output
  buffer<float> dlogits_, scratch_a_, scratch_b_, loss_;
  buffer<uint8_t> labels_;
  size_t rows_ = 0; // batch the buffers hold
  pinned<float> x_stage_, loss_stage_;
  pinned<float> xfer_; // full_step's overlapped weights up, gradients down
  pinned<uint8_t> y_stage_;
  graph step_graph_;
  size_t graph_rows_ = 0; // batch step_graph_ was recorded for
  size_t last_rows_ = 0;  // batch of the step before
  bool graphs_ = true, replayed_ = false;
  transfers transfers_ = transfers::automatic;
  bool overlapped_ = false;
  bool no_pinned_xfer_ = false; // the host had none to give: not asked again
};

} // namespace troupe::cuda
