// Whether a file or folder named by a flag can be written (writable.hpp).
#include "actors/base/writable.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace troupe {

namespace fs = std::filesystem;

std::string unwritable(const std::string& path) {
  if (path.empty())
    return {};
  fs::path p{path};
  std::error_code ec;
  if (fs::is_directory(p, ec))
    return "cannot write " + path + ": a folder";
  auto target = fs::exists(p, ec)     ? p
                : p.has_parent_path() ? p.parent_path()
                                      : fs::path{"."};
  if (::access(target.c_str(), W_OK) != 0)
    return "cannot write " + path + ": " + std::strerror(errno);
  return {};
}

std::string unwritable_folder(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return "cannot make " + dir + ": " + ec.message();
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return "cannot write in " + dir + ": " + std::strerror(errno);
  return {};
}

} // namespace troupe
