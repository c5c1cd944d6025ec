// Taking a trained model out of troupe: the arrays of a checkpoint's last
// complete generation (its MANIFEST), reassembled from the servers' slices
// and written as a NumPy .npz file (a zip of .npy files, one per array,
// named key_K, float32, one dimension), which numpy.load reads.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace troupe {

/// The arrays of checkpoint folder `dir`, by key: each slice of each key
/// exactly once (replicas agreeing), every slice present and ready, or an
/// error (errc::bad_file) naming what is missing or disagrees.
caf::expected<std::map<uint64_t, std::vector<float>>>
checkpoint_arrays(const std::string& dir);

/// Why `path` is not ours to replace: it exists and is no zip (an .npz
/// is one; an empty file is taken too) or no regular file, so a mistyped path
/// does not destroy a checkpoint's MANIFEST or anything else; "" where it may
/// be written.
std::string not_an_npz(const std::string& path);

/// Writes `arrays` to `path` as .npz (an error carries libzip's message).
caf::error write_npz(const std::string& path,
                     const std::map<uint64_t, std::vector<float>>& arrays);

/// One .npy file (format 1.0) of `xs`: float32, shape (n,).
std::string npy_of(const std::vector<float>& xs);

} // namespace troupe
