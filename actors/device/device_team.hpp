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

#include "actors/device/device_settings.hpp"
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
  /// errc::device_failed naming the device if one fails or does not
  /// answer; the team is then spent (its communicator stays failed).
  caf::error step(model& m, const float* x, const uint8_t* labels, size_t batch,
                  float* loss);

private:
  device_team() = default;
  std::vector<device_name> names_;
  std::vector<caf::actor> actors_;
  std::chrono::milliseconds wait_{0};
  std::string description_;
};

} // namespace troupe
