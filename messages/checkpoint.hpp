// Checkpoints of shard servers and the scheduler's manifest
// (messages/checkpoint.capnp): encode, decode with validation, and files
// written atomically (write NAME.tmp, fsync, rename, fsync the folder) with
// a header that catches torn or corrupt files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/frame.hpp"
#include "messages/kv.hpp"

namespace troupe {

/// One slice: values and its optimizer state.
struct slice_snapshot {
  slice_id id;
  uint32_t floats = 0;
  bool ready = false;
  std::vector<float> values; ///< floats values if ready, else empty
  uint64_t updates = 0;      ///< optimizer updates applied
  uint64_t step = 0;         ///< adam's step
  /// Optimizer arrays, each empty (zeros) or floats long.
  std::vector<std::vector<float>> state;
};

/// A worker's clock in one store.
struct worker_snapshot {
  uint32_t rank = 0;
  uint64_t clock = 0;
  std::vector<uint32_t> parts;
  /// View epoch the parts were cut under (0 = not known) and the slices
  /// of `clock` they brought: a push resent under a newer view is cut
  /// anew, and these tell which of its slices are taken already.
  uint64_t cut = 0;
  std::vector<slice_id> taken;
  /// async and ssp with atomic pushes: its pushes taken, not yet applied.
  struct held_slice {
    uint64_t clock = 0;
    slice_id id;
    uint32_t pushes = 0;
    std::vector<float> values;
  };
  std::vector<held_slice> held;
};

/// One store of a server.
struct store_snapshot {
  uint64_t id = 0;
  uint32_t origin = 0;
  uint64_t version = 0;
  uint64_t rounds = 0;
  std::vector<worker_snapshot> workers;
  std::vector<slice_snapshot> slices;
};

/// What one server writes for one generation.
struct checkpoint_data {
  uint64_t generation = 0;
  uint32_t server = 0;
  std::string mode;
  std::string optimizer;
  std::vector<store_snapshot> stores;
};

/// What the scheduler writes once every server wrote a generation.
struct checkpoint_manifest {
  uint64_t generation = 0;
  uint64_t version = 0;
  std::string mode;
  std::string optimizer;
  std::vector<std::string> files;
  uint64_t time_ms = 0;
  /// Servers' clocks per step of the job's workers; 0 = not recorded. A
  /// resume refuses workers that step in another count.
  uint32_t clocks_per_step = 0;
};

frame encode(const checkpoint_data& x);
frame encode(const checkpoint_manifest& x);

/// Decode and check lengths (values and state arrays match floats, no slice
/// twice in a store); errc::malformed_message says what is wrong.
caf::error decode(bytes_view f, checkpoint_data& x);
caf::error decode(bytes_view f, checkpoint_manifest& x);

/// Largest checkpoint file troupe reads: a server's slices with two
/// optimizer arrays each, far above any single network frame.
constexpr size_t max_checkpoint_bytes = size_t{16} << 30;

/// Name of the manifest in a checkpoint folder.
constexpr const char* manifest_name = "MANIFEST";

/// File name of server `server`'s checkpoint of `generation`.
std::string checkpoint_file_name(uint64_t generation, uint32_t server);

/// Writes header + `payload` to `path` atomically: a crash at any point
/// leaves either the old file or the new one whole. `midway`, if set, runs
/// once half the bytes are written and synced (fault injection: a kill
/// there tears the temporary file, never `path`).
caf::error write_checked_file(const std::string& path, const frame& payload,
                              const std::function<void()>& midway = {});

/// Reads a file written by write_checked_file; errc::bad_file says what is
/// wrong (missing, not a checkpoint, truncated, corrupt).
caf::expected<frame> read_checked_file(const std::string& path);

/// The manifest of `dir`; errc::bad_file if there is none or it is bad.
caf::expected<checkpoint_manifest> read_manifest(const std::string& dir);

/// The checkpoint file at `path`, checked and decoded.
caf::expected<checkpoint_data> read_checkpoint(const std::string& path);

/// Removes checkpoint files of generations below `keep_from` from `dir`,
/// finished or left half-written (.tmp) by a crash, and temporary files
/// that name no generation; a .tmp of a kept generation may still be
/// being written and stays. Returns how many files it removed.
size_t remove_old_checkpoints(const std::string& dir, uint64_t keep_from);

/// Removes the whole files of generation `generation` from `dir`: those of
/// a checkpoint that failed, which no manifest names (on a disk near full
/// they kept every later one from fitting). Its temporary files may be
/// writes still under way: remove_old_checkpoints takes them once the
/// generation is old. Returns how many it removed.
size_t remove_generation(const std::string& dir, uint64_t generation);

} // namespace troupe
