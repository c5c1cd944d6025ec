// What the fast road leaves in /proc, for tests: the shared-memory rings a
// process maps (memfds named "troupe-ring") and TCP connections to a port.
#pragma once

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace troupe::test {

/// Lines of /proc/<pid>/maps that map a road ring ("self" for this process).
inline size_t ring_mappings(const std::string& pid = "self") {
  std::ifstream in{"/proc/" + pid + "/maps"};
  size_t n = 0;
  for (std::string line; std::getline(in, line);)
    if (line.find("troupe-ring") != std::string::npos)
      ++n;
  return n;
}

/// Polls `pred` with back-off until it holds; false if `limit` passed
/// first. For state with no event to wait on (/proc, a listener's count).
inline bool poll_until(const std::function<bool()>& pred,
                       std::chrono::milliseconds limit) {
  using namespace std::chrono;
  auto deadline = steady_clock::now() + limit;
  for (auto delay = milliseconds{1};; delay = std::min(delay * 2, 50ms)) {
    if (pred())
      return true;
    if (steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(delay);
  }
}

/// Polls until at most `n` ring mappings are left in `pid`; false if the
/// deadline passed. A process that is gone maps nothing: check it lives.
inline bool await_ring_mappings_at_most(
    size_t n, const std::string& pid = "self",
    std::chrono::milliseconds limit = std::chrono::seconds{10}) {
  return poll_until([&pid, n] { return ring_mappings(pid) <= n; }, limit);
}

/// Connections a tcp road holds to its server's road port: the worker's,
/// and the reply connection the server answers on (actors/road/road.hpp).
constexpr size_t tcp_road_connections = 2;

/// ESTABLISHED IPv4 sockets bound to local port `port` in this network
/// namespace (every process of a loopback cluster shares it).
inline size_t tcp_connections_on(uint16_t port) {
  std::ifstream in{"/proc/self/net/tcp"};
  std::string line;
  std::getline(in, line); // header
  size_t n = 0;
  while (std::getline(in, line)) {
    std::istringstream fields{line};
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    auto colon = local.rfind(':');
    if (state == "01" && colon != std::string::npos &&
        std::stoul(local.substr(colon + 1), nullptr, 16) == port)
      ++n;
  }
  return n;
}

} // namespace troupe::test
