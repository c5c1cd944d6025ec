// Where a training step's math runs (issue 38): one interface, two
// backends with the same calls. The CPU backend is kernels/'s model on
// OpenBLAS; the CUDA backend (kernels/cuda/cuda_backend.hpp) the same
// layers through the CUDA twins on one GPU. A device actor
// (actors/device/) owns one backend and drives it from a thread of its
// own; the communicator (kernels/comm/communicator.hpp) sums and
// broadcasts the arrays a backend hands out, in that device's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/model.hpp"
#include "kernels/status.hpp"

namespace troupe {

/// `size` floats in a device's memory: a parameter or gradient array as
/// that device holds it (a host pointer for the CPU, a device pointer for
/// a GPU).
struct device_array {
  float* data;
  size_t size;
};

/// A replica of one model on one device. Not thread-safe: one owner at a
/// time, which calls attach() first on the thread it runs it from.
class device_backend {
public:
  virtual ~device_backend() = default;

  /// "cpu (OpenBLAS ...)" or "NVIDIA H200 (cuda:0, 139 GiB)".
  virtual std::string describe() const = 0;

  /// Makes the calling thread this device's (a GPU: its current device).
  virtual device_status attach() = 0;

  /// The weights from host arrays `ps` (model::parameters() names, order
  /// and sizes of the model this replica was made from).
  virtual device_status set_parameters(const std::vector<param_ref>& ps) = 0;

  /// Forward, mean softmax cross-entropy over `rows` samples of `x` with
  /// `labels` (host memory), backward: the gradients stay on the device,
  /// the mean loss comes back in `loss`.
  virtual device_status compute_gradients(const float* x, const uint8_t* labels,
                                          size_t rows, float* loss) = 0;

  /// A device alone's whole step: host weights `ps` in (empty: none), the
  /// gradients of `rows` rows of `x` with `labels` and their mean loss in
  /// `loss`, the gradients out into host arrays `gs` (empty: none). By
  /// default set_parameters, compute_gradients and get_gradients in turn;
  /// a GPU overlaps its copies with the step.
  virtual device_status step_alone(const std::vector<param_ref>& ps,
                                   const float* x, const uint8_t* labels,
                                   size_t rows, float* loss,
                                   const std::vector<param_ref>& gs);

  /// Every gradient times `a` (a device's share of a batch's mean).
  virtual device_status scale_gradients(float a) = 0;

  /// The replica's parameter and gradient arrays in the device's memory,
  /// model::parameters() order: what a communicator broadcasts and sums.
  /// Valid while the replica lives.
  virtual std::vector<device_array> parameter_arrays() = 0;
  virtual std::vector<device_array> gradient_arrays() = 0;

  /// Waits for the device's queued work (before a collective reads its
  /// memory from another stream). The CPU has none.
  virtual device_status sync() = 0;

  /// The gradients into host arrays `gs` (model::gradients() order and
  /// sizes).
  virtual device_status get_gradients(const std::vector<param_ref>& gs) = 0;

  /// `n` floats of host memory for the batches this device reads: pinned
  /// on a GPU (a batch there goes up without a staging copy; plain memory
  /// where the host cannot pin it), plain on the CPU (the default). Call
  /// it on the thread that opened the device.
  virtual std::shared_ptr<float> host_floats(size_t n);
};

/// A replica of `m`'s layers (whole layers: row blocks are joined) on the
/// CPU, computed with kernels/ on OpenBLAS in the calling thread.
std::unique_ptr<device_backend> make_cpu_backend(const model& m);

/// Copies `from` into `to`, array by array; "bad input: ..." naming `what`
/// if the counts or a size differ. For backends whose arrays are in host
/// memory.
device_status copy_arrays(const std::vector<param_ref>& from,
                          const std::vector<param_ref>& to, const char* what);

} // namespace troupe
