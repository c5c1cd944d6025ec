// The result of a kernel call: each code says what the caller should do.
// Kernels never throw; CAF-free so that kernels/ builds without actors/.
#pragma once

#include <cstdint>
#include <string>

namespace troupe {

/// The outcome of a call into a device or its libraries (CUDA, cuBLAS,
/// NCCL, a device backend, a communicator): ok, or what failed, in the
/// library's own words ("cudaMalloc: cudaErrorMemoryAllocation: out of
/// memory"), or "bad input: ..." for an argument the caller must fix.
struct device_status {
  std::string error; ///< empty: ok
  bool ok() const { return error.empty(); }
  static device_status success() { return {}; }
};

/// Outcome of a kernel; every kernel returns one and writes nothing but its
/// outputs (which are unspecified unless the result is `ok`).
enum class kernel_status : uint8_t {
  /// Done; the outputs hold the result.
  ok = 0,
  /// Operand shapes or sizes disagree with each other. Caller bug: fix the
  /// call, do not retry.
  shape_mismatch,
  /// An operand is invalid on its own: a null pointer, a zero size, a label
  /// out of range or a hyper-parameter out of its domain. Fix the input or
  /// drop the batch.
  bad_input,
};

/// Name of `x` ("ok", "shape_mismatch", "bad_input"), for log lines.
const char* to_string(kernel_status x);

} // namespace troupe
