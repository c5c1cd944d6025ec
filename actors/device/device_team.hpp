// The devices of one worker (issue 38): a device actor per device, each
// with a replica of the worker's model, and, with --server.mode=
// sync_device, the communicator that sums their gradients on the devices
// so that one push leaves the node. The trainer steps through it where
// --device names anything but the CPU alone (actors/worker/trainer.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/error.hpp>

#include "actors/device/device_actor.hpp"
#include "actors/device/device_settings.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/device_backend.hpp"
#include "kernels/model.hpp"

namespace troupe {

/// GPUs the driver finds; 0 with the reason in `why` where there are none
/// or troupe was built without CUDA.
int gpus_found(std::string& why);

class device_team {
public:
  /// Opens `devices` (resolve_devices) with replicas of `m`'s layers, each
  /// on a device actor of its own; `sum_on_devices` (sync_device): a
  /// communicator over them sums their gradients (a CPU group for cpu, NCCL
  /// for GPUs), else there must be one device. A collective waits `wait`
  /// for a rank at most, a step `wait` more. Null with one line in `error`
  /// that names the device ("--device=cuda:1: no GPU cuda:1 (...)"; a
  /// batch of fewer rows than devices).
  static std::unique_ptr<device_team>
  open(caf::actor_system& sys, const std::vector<device_name>& devices,
       bool sum_on_devices, model& m, size_t batch, std::string& error,
       std::chrono::milliseconds wait = std::chrono::seconds{60});

  /// A team of given backends (one per name, opened) and their
  /// communicator (one per backend, or none for a device alone): open()'s
  /// second half, and the way tests put in a backend of their own.
  static std::unique_ptr<device_team>
  assemble(caf::actor_system& sys, std::vector<device_name> names,
           std::vector<std::shared_ptr<device_backend>> backends,
           std::vector<std::unique_ptr<communicator>> group,
           std::chrono::milliseconds wait, std::string description);

  /// Stops the device actors.
  ~device_team();
  device_team(const device_team&) = delete;
  device_team& operator=(const device_team&) = delete;

  /// "2 devices (cpu (OpenBLAS ...), cpu (...)), gradients summed by a CPU
  /// group".
  const std::string& describe() const { return description_; }

  /// One step: `m`'s weights onto the devices, `batch` rows of `x` (batch
  /// x m.input_size()) and `labels` shared among them, the batch's mean
  /// gradient into `m`'s gradient arrays and its mean loss into `loss`.
  /// Returns once every device is done with the step (they read `x` and
  /// `m`). errc::device_failed naming the device whose own work failed
  /// first (else the first collective's failure); the team is then spent
  /// (its communicator stays failed).
  ///
  /// A device still busy twice `wait` after the step began is hung in its
  /// math or a collective (NCCL has no timeout): its thread cannot be
  /// stopped, and it works on the step's memory. The process then ends
  /// with exit_failed and one line on stderr, as NCCL's watchdog ends
  /// PyTorch's, and its agent restarts it.
  caf::error step(model& m, const float* x, const uint8_t* labels, size_t batch,
                  float* loss);

  /// Host memory for a batch of `floats` inputs that the devices read
  /// straight from (pinned where they are GPUs), made by open() for its
  /// batch; null where more is asked, or the team was assembled.
  float* batch_memory(size_t floats) const {
    return floats <= batch_floats_ ? batch_memory_.get() : nullptr;
  }

private:
  device_team() = default;
  /// "cpu (rank 1)"; "cuda:0" for a device alone.
  std::string name_of(size_t rank) const;
  std::vector<device_name> names_;
  std::vector<device_parts> parts_; ///< by rank, for the step watch
  std::vector<caf::actor> actors_;
  std::shared_ptr<float> batch_memory_;
  size_t batch_floats_ = 0;
  std::chrono::milliseconds wait_{0};
  std::string description_;
};

} // namespace troupe
