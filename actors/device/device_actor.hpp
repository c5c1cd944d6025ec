// A device actor (issue 38): one device's replica of the model (a
// kernels/device_backend.hpp backend: the CPU, or one GPU with its stream
// and cuBLAS handle) on a thread of its own, with its rank of the
// communicator that sums a node's devices (sync_device). It runs the
// jobs a device_team sends it, one at a time:
//
//   weights in (rank 0, from the host) -> broadcast to every rank ->
//   forward and backward on its rows -> gradients times its share of the
//   batch -> summed over the ranks -> out to the host (rank 0)
#pragma once

#include <future>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "kernels/comm/communicator.hpp"
#include "kernels/device_backend.hpp"
#include "kernels/model.hpp"
#include "kernels/status.hpp"

namespace troupe {

/// One device's part of a step. The sender keeps the host memory the
/// pointers and param_refs point to alive until `done` is set.
/// A device's parts of a step, as the step watch names them: its own work
/// ("cuda:0: its share of the step"), and a collective, which waits for
/// the other devices (the one hung in its own work is the one to blame).
/// Built once per device (device_parts_of), not at each step.
struct device_parts {
  std::string own, collective;
};
device_parts device_parts_of(const std::string& device);

struct device_job {
  /// Host weights to copy in (rank 0, or a device alone); empty: the
  /// broadcast from rank 0 brings them.
  std::vector<param_ref> weights;
  /// This device's rows of the batch (host memory).
  const float* x = nullptr;
  const uint8_t* labels = nullptr;
  size_t rows = 0;
  /// rows / the batch's rows: the gradients and loss are scaled by it, so
  /// that their sum over the devices is the batch's mean.
  float share = 1;
  /// Host gradient arrays to fill with the sum (rank 0); empty: none.
  std::vector<param_ref> gradients;
  /// What the step watch (actors/base/step_watch.hpp) calls this device's
  /// parts of the step where the step hangs; null = unwatched.
  const device_parts* parts = nullptr;

  // -- filled in by the device --
  float loss = 0; ///< its rows' mean loss times share
  device_status status;
  /// The failure in `status` came from a collective (another rank's, or
  /// the group's), not from this device's own work.
  bool collective_failed = false;
  std::promise<void> done;
};

/// Runs `job` on `backend` (attached to the calling thread) and its rank
/// `comm` of the node's communicator (null: a device alone); what the
/// actor does with each job. Every rank makes the same collectives in the
/// same order, even after its own step failed, so that no rank waits for
/// it: a failure shows on every rank.
void run_device_job(device_backend& backend, communicator* comm,
                    device_job& job);

/// Spawns a device actor on a thread of its own (detached) owning
/// `backend` and `comm` (null: a device alone). It answers no messages but
/// (step_atom, std::shared_ptr<device_job>), sets each job's `done`, and
/// ends on an exit message.
caf::actor spawn_device_actor(caf::actor_system& sys,
                              std::shared_ptr<device_backend> backend,
                              std::shared_ptr<communicator> comm);

} // namespace troupe
