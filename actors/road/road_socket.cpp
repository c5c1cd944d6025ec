// Socket plumbing of the road: options, addresses, connecting with a
// deadline, and what a listener checks about a peer.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "actors/road/road_internal.hpp"
#include "messages/errors.hpp"

namespace troupe::road_detail {

void set_timeout(int fd, int opt, uint32_t ms) {
  timeval tv{static_cast<time_t>(ms / 1000),
             static_cast<suseconds_t>((ms % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void keep_alive(int fd) {
  int one = 1, idle = road_keepalive_idle_s, gap = road_keepalive_gap_s,
      probes = road_keepalive_probes;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &gap, sizeof(gap));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

caf::expected<sockaddr_in> ipv4_of(const std::string& host, uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  auto name = host.empty() ? std::string{"0.0.0.0"} : host;
  if (::inet_pton(AF_INET, name.c_str(), &sa.sin_addr) == 1)
    return sa;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0 || !res)
    return caf::make_error(errc::invalid_config, "road: cannot resolve", name);
  sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
  ::freeaddrinfo(res);
  return sa;
}

socklen_t abstract_addr(const std::string& name, sockaddr_un& sa) {
  sa = sockaddr_un{};
  sa.sun_family = AF_UNIX;
  auto n = std::min(name.size(), sizeof(sa.sun_path) - 1);
  std::memcpy(sa.sun_path + 1, name.data(), n); // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

caf::expected<int> connect_with_timeout(int domain, const sockaddr* sa,
                                        socklen_t len, uint32_t timeout_ms) {
  int fd = ::socket(domain, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return sys_error("road socket");
  if (::connect(fd, sa, len) < 0 && errno != EINPROGRESS) {
    auto err = caf::make_error(errc::not_connected, "road connect",
                               std::string{strerror(errno)});
    ::close(fd);
    return err;
  }
  pollfd p{fd, POLLOUT, 0};
  int soerr = 0;
  socklen_t sl = sizeof(soerr);
  if (::poll(&p, 1, static_cast<int>(timeout_ms)) != 1 ||
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
    auto err = caf::make_error(errc::not_connected, "road connect",
                               soerr ? std::string{strerror(soerr)}
                                     : std::string{"timed out"});
    ::close(fd);
    return err;
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

uint32_t peer_ipv4(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0 ||
      sa.sin_family != AF_INET)
    return 0;
  return sa.sin_addr.s_addr;
}

std::string peer_address(int fd) {
  sockaddr_storage sa{};
  socklen_t len = sizeof(sa);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    return "an unknown peer";
  char host[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET) {
    auto& in = reinterpret_cast<const sockaddr_in&>(sa);
    ::inet_ntop(AF_INET, &in.sin_addr, host, sizeof(host));
    return std::string{host} + ":" + std::to_string(ntohs(in.sin_port));
  }
  if (sa.ss_family == AF_INET6) {
    auto& in = reinterpret_cast<const sockaddr_in6&>(sa);
    ::inet_ntop(AF_INET6, &in.sin6_addr, host, sizeof(host));
    return "[" + std::string{host} + "]:" + std::to_string(ntohs(in.sin6_port));
  }
  return "a local socket";
}

bool unix_stream_socket(int fd) {
  struct stat st;
  int type = 0;
  int domain = 0;
  socklen_t len = sizeof(int);
  socklen_t dlen = sizeof(int);
  return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) &&
         ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 &&
         type == SOCK_STREAM &&
         ::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &dlen) == 0 &&
         domain == AF_UNIX;
}

bool same_user(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return false;
  return cred.uid == ::geteuid() || cred.uid == 0;
}

} // namespace troupe::road_detail
