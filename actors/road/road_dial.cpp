// A worker's dial of a server's road: the socket (shm, else tcp), the
// hello with the rings or the reply connection, and the server's answer.
#include "actors/road/road_dial.hpp"

#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <optional>
#include <vector>

#include "actors/base/log.hpp"
#include "actors/base/machine_id.hpp"
#include "actors/road/road_auth.hpp"
#include "actors/road/road_internal.hpp"
#include "messages/errors.hpp"

namespace troupe {

using namespace road_detail;

namespace {

/// A connected socket of a dial, and what its hello needs.
struct dial_socket {
  int fd = -1;
  bool shm = false;
  std::optional<sockaddr_in> tcp_addr; // where the reply connection goes
  std::chrono::steady_clock::time_point deadline; // for the server's hello
};

/// Connects to the server's abstract unix socket if `shm`, else (or if
/// that fails) to its TCP port, each within `dial_ms`.
caf::expected<dial_socket> connect_socket(const std::string& host,
                                          const road_info& info, bool shm,
                                          uint32_t dial_ms) {
  dial_socket out;
  out.deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds{dial_ms};
  if (shm) {
    sockaddr_un ua;
    auto len = abstract_addr(info.socket, ua);
    auto fd = connect_with_timeout(AF_UNIX, reinterpret_cast<sockaddr*>(&ua),
                                   len, dial_ms);
    if (fd) {
      out.fd = *fd;
      out.shm = true;
      return out;
    }
    TROUPE_LOG(warning, "road", "shared-memory road to ", host, " failed (",
               describe(fd.error()), "): using TCP");
  }
  out.deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds{dial_ms};
  auto sa = ipv4_of(host, info.port);
  if (!sa)
    return std::move(sa.error());
  auto fd = connect_with_timeout(AF_INET, reinterpret_cast<sockaddr*>(&*sa),
                                 sizeof(*sa), dial_ms);
  if (!fd)
    return std::move(fd.error());
  out.fd = *fd;
  out.tcp_addr = *sa;
  return out;
}

/// Sends the hello of shm connection `c` with two rings of `ring_bytes`
/// (rounded up to pages, mapped) and the server's end of a reply socket;
/// without rings, a plain hello: frames then go on the socket.
caf::error send_shm_hello(road_conn& c, wire_header& hello, size_t ring_bytes,
                          const std::string& host) {
  std::vector<iovec> iov{{&hello, sizeof(hello)}};
  caf::error err;
  ring_bytes = (ring_bytes + 4095) & ~size_t{4095};
  auto c2s = make_ring_fd(ring_bytes);
  auto s2c = make_ring_fd(ring_bytes);
  int reply[2] = {-1, -1}; // ours, the server's
  if (!c2s || !s2c)
    err = c2s ? s2c.error() : c2s.error();
  else if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, reply) != 0)
    err = sys_error("road: reply socket");
  else if ((err = c.map_rings(*c2s, *s2c, ring_bytes)))
    for (int fd : reply) // no out space: a half-mapped ring stays unused
      ::close(fd);
  if (!err) {
    c.use_reply_socket(reply[0], true);
    hello.offset = ring_bytes;
    err = send_all(c.fd(), iov, {*c2s, *s2c, reply[1]});
    ::close(reply[1]); // the server's now: its end closes with it
  } else {
    TROUPE_LOG(warning, "road", "no rings for the shm road to ", host, " (",
               describe(err), "): frames go on the socket");
    err = send_all(c.fd(), iov); // no rings: frames go inline
  }
  for (auto* x : {&c2s, &s2c})
    if (*x)
      ::close(**x); // the mappings keep the rings
  return err;
}

/// Sends the hello of tcp connection `c`, which asks the server to answer
/// on a second connection, then dials that one (to `addr`, by `deadline`)
/// and gives it to `c` to read: each direction gets a socket of its own
/// (see hello_replies_apart).
caf::error
dial_reply_connection(road_conn& c, wire_header& hello, const sockaddr_in& addr,
                      const road_credential& cred,
                      std::chrono::steady_clock::time_point deadline) {
  uint64_t token = 0;
  if (::getrandom(&token, sizeof(token), 0) != sizeof(token))
    return sys_error("road: no random token for the reply connection");
  hello.flags = hello_replies_apart;
  hello.id = token == 0 ? 1 : token;
  std::vector<iovec> iov{{&hello, sizeof(hello)}};
  if (auto err = send_all(c.fd(), iov))
    return err;
  auto fd =
      connect_with_timeout(AF_INET, reinterpret_cast<const sockaddr*>(&addr),
                           sizeof(addr), ms_until(deadline));
  if (!fd)
    return std::move(fd.error());
  no_delay(*fd);
  keep_alive(*fd); // we only read it: a vanished server must still end it
  c.use_reply_socket(*fd, true); // c owns it now
  if (auto err = prove_member(*fd, cred, deadline))
    return err;
  wire_header mine = hello;
  mine.flags = hello_reply_conn;
  std::vector<iovec> riov{{&mine, sizeof(mine)}};
  return send_all(*fd, riov);
}

/// Waits until `deadline` for the server's answer to `hello`, which must
/// carry the same flags.
caf::error read_hello_answer(road_conn& c, const wire_header& hello,
                             std::chrono::steady_clock::time_point deadline,
                             const std::string& host) {
  caf::error err;
  wire_header ack;
  set_timeout(c.fd(), SO_RCVTIMEO, ms_until(deadline));
  if (!recv_all(c.fd(), &ack, sizeof(ack)) || ack.magic != wire_magic ||
      ack.op != hello.op)
    err = caf::make_error(errc::not_connected, "road: no hello from", host);
  else if (ack.flags != hello.flags) // a server that answers elsewhere
    err = caf::make_error(errc::not_connected, "road: the server at", host,
                          "does not answer on a reply connection (an older"
                          " build?): start workers with --road.single-conn");
  set_timeout(c.fd(), SO_RCVTIMEO, 0);
  return err;
}

} // namespace

caf::expected<road_conn_ptr>
road_dial(const std::string& host, const road_info& info, road_kind want,
          size_t ring_bytes, uint32_t timeout_ms, road_settings settings,
          const road_credential& cred, road_handler on_msg,
          road_down_handler on_down) {
  if (want == road_kind::middleman || info.port == 0)
    return caf::make_error(errc::not_connected, "no fast road to", host);
  bool shm = want == road_kind::shm && !info.socket.empty() &&
             info.machine == machine_id() && ring_bytes > 0;
  auto s = connect_socket(host, info, shm,
                          std::min(timeout_ms, road_dial_deadline_ms));
  if (!s)
    return std::move(s.error());
  road_conn_ptr c;
  try {
    c = adopt(s->fd, s->shm ? road_kind::shm : road_kind::tcp, timeout_ms,
              settings);
  } catch (const std::exception& e) { // no memory for it
    return caf::make_error(errc::not_connected, "road: no connection to", host,
                           e.what());
  }
  wire_header hello;
  hello.op = static_cast<uint8_t>(road_op::hello);
  auto err = prove_member(c->fd(), cred, s->deadline);
  if (!err && s->shm) {
    err = send_shm_hello(*c, hello, ring_bytes, host);
  } else if (!err && !settings.single_conn) {
    err = dial_reply_connection(*c, hello, *s->tcp_addr, cred, s->deadline);
  } else if (!err) {
    std::vector<iovec> iov{{&hello, sizeof(hello)}};
    err = send_all(c->fd(), iov);
  }
  if (!err)
    err = read_hello_answer(*c, hello, s->deadline, host);
  if (err) {
    c->close();
    return err;
  }
  c->start(std::move(on_msg), std::move(on_down));
  return c;
}

} // namespace troupe
