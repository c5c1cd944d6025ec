// This machine's identity from /proc, and loopback addresses.
#include "actors/base/machine_id.hpp"

#include <unistd.h>

#include <fstream>

namespace troupe {

std::string machine_id() {
  std::string boot;
  std::ifstream in{"/proc/sys/kernel/random/boot_id"};
  std::getline(in, boot);
  char ns[128] = {0};
  auto n = ::readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  return boot + "/" + (n > 0 ? std::string(ns, static_cast<size_t>(n)) : "");
}

bool is_loopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost";
}

} // namespace troupe
