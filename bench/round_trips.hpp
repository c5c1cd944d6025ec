// The small-message limit of this machine: round trips per second of a
// 64-byte message between two processes over a socket, with 1 or 8 in
// flight. The echo process answers whatever it read in one write, so this
// is a bound no request/reply protocol over the same socket can beat: a
// kv round trip also crosses the same two processes, and on a virtual
// machine the wake-ups, not the bytes, set the price.
#pragma once

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

namespace troupe::bench {

/// Which socket the round trips take: a unix socketpair per direction
/// (as the shm road's headers do) or one loopback TCP connection with
/// TCP_NODELAY (as the tcp road).
enum class rt_socket { unix_pair, tcp };

/// Round trips per second, or a negative value with `why` set.
struct rt_result {
  double per_s = -1;
  std::string why;
};

/// Connects two TCP sockets on loopback: `a` dialled, `b` accepted; false
/// (errno set, nothing left open) if that fails.
inline bool connect_loopback_tcp(int& a, int& b) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  auto sa = reinterpret_cast<sockaddr*>(&addr);
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  a = ::socket(AF_INET, SOCK_STREAM, 0);
  b = -1;
  if (lfd >= 0 && a >= 0 && ::bind(lfd, sa, len) == 0 &&
      ::listen(lfd, 1) == 0 && ::getsockname(lfd, sa, &len) == 0 &&
      ::connect(a, sa, len) == 0)
    b = ::accept(lfd, nullptr, nullptr);
  int saved = errno;
  if (lfd >= 0)
    ::close(lfd);
  if (b < 0 && a >= 0)
    ::close(a);
  errno = saved;
  return b >= 0;
}

namespace detail {

/// Two connected descriptors each way: [0] we write, [1] the echo reads,
/// [2] the echo writes, [3] we read (the same socket twice for tcp).
inline bool rt_connect(rt_socket kind, int (&fds)[4]) {
  if (kind == rt_socket::unix_pair) {
    int a[2], b[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, a) != 0)
      return false;
    if (::socketpair(AF_UNIX, SOCK_STREAM, 0, b) != 0) {
      ::close(a[0]);
      ::close(a[1]);
      return false;
    }
    fds[0] = a[0], fds[1] = a[1], fds[2] = b[1], fds[3] = b[0];
    return true;
  }
  int cfd, afd;
  if (!connect_loopback_tcp(cfd, afd))
    return false;
  int one = 1;
  ::setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(afd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fds[0] = fds[3] = cfd;
  fds[1] = fds[2] = afd;
  return true;
}

/// The echo process: writes back what it reads until EOF.
[[noreturn]] inline void rt_echo(int in, int out) {
  char buf[4096];
  for (;;) {
    auto n = ::read(in, buf, sizeof(buf));
    if (n <= 0)
      ::_exit(0);
    for (ssize_t off = 0; off < n;) {
      auto w = ::write(out, buf + off, static_cast<size_t>(n - off));
      if (w <= 0)
        ::_exit(1);
      off += w;
    }
  }
}

} // namespace detail

/// Round trips per second of 64-byte messages with `depth` in flight
/// (1..64) for about `seconds`. Each message carries its sequence number,
/// and every echo is checked against it before a figure is returned.
inline rt_result round_trips_per_s(rt_socket kind, size_t depth,
                                   double seconds) {
  constexpr size_t msg = 64;
  rt_result out;
  int fds[4];
  if (depth < 1 || depth > 64 || !detail::rt_connect(kind, fds)) {
    out.why = depth < 1 || depth > 64
                  ? "depth must be 1..64"
                  : std::string{"connecting: "} + std::strerror(errno);
    return out;
  }
  bool pair = fds[0] != fds[3];
  pid_t pid = ::fork();
  if (pid == 0) { // only read, write and _exit here: we may have threads
    ::close(fds[0]);
    if (pair)
      ::close(fds[3]);
    detail::rt_echo(fds[1], fds[2]);
  }
  ::close(fds[1]);
  if (pair)
    ::close(fds[2]);
  if (pid < 0) {
    out.why = std::string{"fork: "} + std::strerror(errno);
    ::close(fds[0]);
    if (pair)
      ::close(fds[3]);
    return out;
  }
  using clock = std::chrono::steady_clock;
  auto send = [&fds](uint64_t seq) {
    char m[msg] = {};
    std::memcpy(m, &seq, sizeof(seq));
    return ::write(fds[0], m, msg) == static_cast<ssize_t>(msg);
  };
  uint64_t sent = 0, got = 0;
  bool ok = true;
  for (; ok && sent < depth; ++sent)
    ok = send(sent);
  char buf[msg * 64];
  size_t have = 0;
  auto t0 = clock::now();
  double secs = 0;
  while (ok && got < sent) {
    auto n = ::read(fds[3], buf + have, sizeof(buf) - have);
    ok = n > 0;
    have += ok ? static_cast<size_t>(n) : 0;
    size_t at = 0;
    for (; ok && have - at >= msg; at += msg, ++got) {
      uint64_t seq;
      std::memcpy(&seq, buf + at, sizeof(seq));
      if (seq != got) {
        out.why = "an echo came back out of order or corrupt";
        ok = false;
      }
    }
    std::memmove(buf, buf + at, have - at);
    have -= at;
    secs = std::chrono::duration<double>(clock::now() - t0).count();
    bool more = secs < seconds || got < 100;
    for (; ok && more && sent < got + depth; ++sent)
      ok = send(sent);
  }
  ::shutdown(fds[0], SHUT_WR); // the echo reads EOF and exits
  ::close(fds[0]);
  if (pair)
    ::close(fds[3]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!ok && out.why.empty())
    out.why = std::string{"echo lost: "} + std::strerror(errno);
  if (ok)
    out.per_s = static_cast<double>(got) / secs;
  return out;
}

} // namespace troupe::bench
