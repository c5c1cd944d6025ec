// Pieces both benchmark programs use: seconds since a time point, the
// port in the line a troupe-node prints once it listens, and the check of
// --node.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace troupe::bench {

using steady = std::chrono::steady_clock;

inline double since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

/// Finds "troupe-node: ROLE listening on HOST:PORT (pid N)" in `out`, a
/// node's output so far; true with `port` set if it is there.
inline bool listen_port(const std::string& out, uint16_t& port) {
  auto at = out.find(" listening on ");
  auto end = out.find(" (pid", at);
  if (at == std::string::npos || end == std::string::npos)
    return false;
  port = static_cast<uint16_t>(std::stoul(out.substr(out.rfind(':', end) + 1)));
  return true;
}

/// Why --node=`path` cannot be the troupe-node to run: "" if it is an
/// executable file (a folder passes access(X_OK), and its runs then failed
/// with exit 127 and no word why).
inline std::string not_a_node(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      ::access(path.c_str(), X_OK) != 0)
    return "--node: no executable file at '" + path + "'";
  return "";
}

} // namespace troupe::bench
