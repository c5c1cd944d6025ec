// Whether a file or folder named by a flag can be written, checked before
// a node joins: one that cannot fails at once rather than mid-job.
#pragma once

#include <string>

namespace troupe {

/// Why `path` (a file to append to) could not be written: it is a folder,
/// it exists and is not writable, or its folder does not exist or is not
/// writable; "" where it could, or for an empty path.
std::string unwritable(const std::string& path);

/// Why folder `dir` (made if missing) could not hold new files: it cannot
/// be made (a file in the way too) or is not writable; "" where it could.
std::string unwritable_folder(const std::string& dir);

} // namespace troupe
