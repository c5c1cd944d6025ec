// HTTP on loopback for the tests of the status page and --metrics.port:
// free ports to serve on, a request sent whole or in part, and its answer.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <fstream>
#include <optional>
#include <random>
#include <string>

namespace troupe::test {

/// A loopback socket listening on a free port; closed by the destructor.
struct held_port {
  int fd = -1;
  uint16_t port = 0;
  held_port() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) ==
                  0);
    BOOST_REQUIRE(::listen(fd, 1) == 0);
    socklen_t n = sizeof(sa);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &n);
    port = ntohs(sa.sin_port);
  }
  ~held_port() { ::close(fd); }
};

/// True if loopback port `p` can be bound now.
inline bool bindable(uint16_t p) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(p);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  ::close(fd);
  return ok;
}

/// The lowest port the kernel gives outgoing connections
/// (net.ipv4.ip_local_port_range); 32768 if it cannot be read.
inline uint16_t first_ephemeral_port() {
  std::ifstream in{"/proc/sys/net/ipv4/ip_local_port_range"};
  unsigned low = 0;
  return in >> low && low > 1024 && low < 65536 ? uint16_t(low) : 32768;
}

/// A free port with the next `n` ports free too, below the ports the
/// kernel gives outgoing connections: a node restarted on it finds it
/// free again (an ephemeral port taken by some connect in between made
/// metrics_test's restarted worker serve nothing, once in CI).
inline uint16_t free_ports(int n) {
  std::random_device seed;
  std::mt19937 draw{seed()};
  auto top = first_ephemeral_port();
  bool below = top > 10000 + n + 100;
  for (int tries = 0; tries < 100; ++tries) {
    uint16_t p = below ? uint16_t(std::uniform_int_distribution<unsigned>(
                             10000, top - n - 1)(draw))
                       : held_port{}.port;
    if (p + n > 65535)
      continue;
    bool all = true;
    for (int k = 0; k <= n && all; ++k)
      all = bindable(static_cast<uint16_t>(p + k));
    if (all)
      return p;
  }
  BOOST_FAIL("no run of free ports");
  return 0;
}

/// A connection to loopback `port` with `text` sent on it (a receive gives
/// up after `wait_s`); closed by the destructor.
struct http_client {
  int fd = -1;
  http_client(uint16_t port, const std::string& text, int wait_s = 5) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    timeval limit{wait_s, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      ::close(fd);
      fd = -1;
      return;
    }
    ::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
  }
  ~http_client() {
    if (fd >= 0)
      ::close(fd);
  }
  /// All that comes back until the server closes ("" if nothing does).
  std::string answer() {
    std::string out;
    char buf[4096];
    for (ssize_t n; fd >= 0 && (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
      out.append(buf, static_cast<size_t>(n));
    return out;
  }
};

/// `method` `path` on loopback `port`: the whole answer ("" if none).
inline std::string http(uint16_t port, const std::string& method,
                        const std::string& path) {
  return http_client{port, method + " " + path +
                               " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"}
      .answer();
}

/// GET `path` on loopback `port`: the body, or nothing if no 200 comes.
inline std::optional<std::string> scrape(uint16_t port,
                                         const std::string& path = "/metrics") {
  auto out = http(port, "GET", path);
  auto body = out.find("\r\n\r\n");
  if (out.rfind("HTTP/1.", 0) != 0 || body == std::string::npos ||
      out.find(" 200 ") == std::string::npos)
    return std::nullopt;
  return out.substr(body + 4);
}

} // namespace troupe::test
