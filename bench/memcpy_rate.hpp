// The copy limit of this machine: how fast one thread moves bytes from one
// buffer to another. No transfer inside the machine that copies its bytes
// even once can beat it.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

namespace troupe::bench {

/// GB/s of memcpy between two 64 MiB buffers (bytes copied per second),
/// for about `seconds` (at least one copy); 0 if the copies went wrong.
inline double memcpy_gbps(double seconds) {
  using clock = std::chrono::steady_clock;
  auto since = [](clock::time_point t0) {
    return std::chrono::duration<double>(clock::now() - t0).count();
  };
  std::vector<char> a(64u << 20, 'x'), b(64u << 20, 'y');
  uint64_t bytes = 0;
  auto t0 = clock::now();
  while (since(t0) < seconds || bytes == 0) {
    std::memcpy(b.data(), a.data(), a.size());
    a.swap(b);
    bytes += a.size();
  }
  auto secs = since(t0);
  // From the first copy on, both buffers hold 'x' only.
  return a[12345] == 'x' && a[a.size() - 1] == 'x' ? bytes / secs / 1e9 : 0.0;
}

} // namespace troupe::bench
