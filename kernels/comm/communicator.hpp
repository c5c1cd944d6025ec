// Sums and broadcasts among the devices of one node (issue 38: gradients
// summed on the devices, one push leaves the node, the pulled weights
// broadcast on the devices, as MXNet's dist_sync_device). One interface,
// two implementations: NCCL over GPUs (kernels/cuda/nccl_group.hpp) and a
// stand-in over host memory (below), so that the multi-device logic runs
// in every CI run with several CPU "devices".
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/status.hpp"

namespace troupe {

/// The outcome of a collective: ok, or what failed and why.
using comm_status = device_status;

/// One rank of a group of devices. Every call is collective: each rank of
/// the group makes it, in the same order, with the same size (and root).
class communicator {
public:
  virtual ~communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Every rank's `n` floats at `data` summed; the sum replaces each rank's
  /// `data`, the same bits on every rank. The CPU stand-in adds in rank
  /// order; NCCL in its own (equal within rounding).
  virtual comm_status all_reduce_sum(float* data, size_t n) = 0;
  /// Rank `root`'s `n` floats copied to every rank's `data`.
  virtual comm_status broadcast(float* data, size_t n, int root) = 0;
};

/// `ranks` communicators over host memory, one per thread (a "CPU
/// device"). A rank that does not join a collective within `wait` fails it
/// on every rank, naming it, and the group stays failed: a dead device
/// must not hang the node, and the node builds a new group. So does a
/// collective whose ranks disagree (another operation, size or root).
std::vector<std::unique_ptr<communicator>>
make_cpu_group(int ranks, std::chrono::milliseconds wait);

} // namespace troupe
