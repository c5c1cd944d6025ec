// Which devices a worker computes on (--device, issue 38): the CPU, GPUs,
// or several of one kind summed on the node (--server.mode=sync_device).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace troupe {

/// One device of a worker.
struct device_name {
  enum class kind_t : uint8_t { cpu, cuda };
  kind_t kind = kind_t::cpu;
  int ordinal = 0; ///< N of cuda:N; 0 for the CPU
};

/// "cpu" or "cuda:N".
std::string to_string(const device_name& x);

/// --device: "auto" (the GPUs the driver finds, else the CPU), "cpu",
/// "cuda:N", or a comma list of cpu or of cuda:N (the devices of one node,
/// --server.mode=sync_device). Default auto.
struct device_settings {
  std::string text = "auto";
  /// Parsed by validate(): false for auto.
  bool named = false;
  /// The devices text names (named), in rank order.
  std::vector<device_name> devices;
};

/// Parses `x.text`; one error naming --device says what is wrong: a word
/// that is no device, cpu mixed with GPUs, a GPU named twice (NCCL takes
/// one rank per GPU). GPUs are looked for when a worker opens them.
caf::error validate(device_settings& x);

/// The devices a worker opens: those named, or for auto every GPU the
/// driver finds (`gpus`; only the first unless `several`, which
/// sync_device allows), else the CPU.
std::vector<device_name> resolve_devices(const device_settings& x, int gpus,
                                         bool several);

/// True if `ds` is the CPU alone: the worker computes in its own thread,
/// without a device actor, unless the mode sums on devices.
bool cpu_alone(const std::vector<device_name>& ds);

/// What a "computes on" log line adds after the device: "" where --device
/// named it, else "; --device=auto" and, if given, ": " and why it chose
/// so (no GPU found, --worker.overlap).
std::string auto_note(const device_settings& x, const std::string& why);

} // namespace troupe
