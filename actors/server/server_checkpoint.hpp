// A shard server's side of checkpoints, without the actor: taking a store's
// state with its optimizer state, loading the last checkpoint of a folder,
// and restoring a store from it. The shard server
// (actors/server/shard_server.cpp) drives these; the file format is
// messages/checkpoint.hpp.
#pragma once

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "actors/server/server_settings.hpp"
#include "actors/server/shard_store.hpp"
#include "messages/checkpoint.hpp"

namespace troupe {

/// The last checkpoint of a folder, read by a server that resumes.
struct resume_set {
  checkpoint_manifest manifest;
  std::vector<checkpoint_data> files;
  /// Every checkpointed slice: its store and itself, in `files`.
  std::map<slice_id, std::pair<const store_snapshot*, const slice_snapshot*>>
      slices;
  /// Clocks and version were restored (once, into the first store).
  bool meta_applied = false;
};

/// Reads the manifest of `cfg.dir` and every file it names. An error
/// (errc::bad_file or invalid_config) says what is missing or, with
/// `check_flags`, which file was written by servers with another mode or
/// optimizer than `cfg`'s (the scheduler, which runs neither, skips that).
caf::expected<std::unique_ptr<resume_set>>
load_resume_set(const checkpoint_settings& cfg, bool check_flags = true);

/// The applied state of `s` with its optimizer's state per slice.
store_snapshot snapshot_of(shard_store& s);

/// What `set` holds for the owned slices of `s` that are not initialised:
/// their state, with clocks and version taken from the checkpointed store
/// that held most of them. No slices: nothing to restore.
store_snapshot restorable(const resume_set& set, const shard_store& s);

/// Restores `snap` into `s`: values, optimizer state, clocks and version.
/// Returns the slices restored; an error if optimizer state does not fit.
caf::expected<size_t> apply_restore(shard_store& s, const store_snapshot& snap);

} // namespace troupe
