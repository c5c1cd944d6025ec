// The server's side of the hello: read and checked on an accepted
// connection's own thread, the shm road's rings and reply socket taken,
// a tcp road's two connections paired, and the hello answered.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "actors/road/road_internal.hpp"
#include "actors/road/road_pairing.hpp"
#include "messages/errors.hpp"

namespace troupe {

using namespace road_detail;

namespace {

void close_fds(const int (&fds)[max_passed_fds]) {
  for (int fd : fds)
    if (fd >= 0)
      ::close(fd);
}

/// Reads the hello of `c` (waiting up to `timeout_ms`) into `h`, with the
/// descriptors it carries into `fds`, and checks it: flags only on a tcp
/// road that may pair (`pairing`). On error, `fds` are closed.
caf::error read_hello(road_conn& c, uint32_t timeout_ms,
                      const road_pairing* pairing, wire_header& h,
                      int (&fds)[max_passed_fds]) {
  set_timeout(c.fd(), SO_RCVTIMEO, timeout_ms);
  auto ok = recv_header(c.fd(), h, fds);
  set_timeout(c.fd(), SO_RCVTIMEO, 0);
  if (!ok) {
    close_fds(fds);
    return caf::make_error(errc::peer_down, "road: no hello");
  }
  if (auto err = check_header(h); err || h.op != uint8_t(road_op::hello)) {
    close_fds(fds);
    return err ? err
               : caf::make_error(errc::malformed_message,
                                 "road: first message is not hello");
  }
  if (h.flags != 0 &&
      (c.kind() != road_kind::tcp || !pairing || h.id == 0 ||
       (h.flags != hello_replies_apart && h.flags != hello_reply_conn))) {
    close_fds(fds);
    return caf::make_error(errc::malformed_message, "road: hello flags",
                           static_cast<uint32_t>(h.flags));
  }
  return caf::none;
}

/// Pairs tcp connection `c`, whose hello `h` has flags, with the other
/// connection of its worker through `pairing` (waiting up to `timeout`):
/// the reply connection offers its socket and sets `handed_over` once it
/// is taken; the connection that announced it takes it to answer on.
caf::error pair_connections(road_conn& c, const wire_header& h,
                            road_pairing& pairing,
                            std::chrono::milliseconds timeout,
                            bool& handed_over) {
  auto gone = [&c] { // closed here, or the peer ended its side
    pollfd p{c.fd(), POLLRDHUP, 0};
    return c.closed() ||
           (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP)));
  };
  if (h.flags == hello_reply_conn) { // our socket is another's reply socket
    if (!pairing.offer(h.id, c.fd(), peer_ipv4(c.fd()), timeout, gone))
      return caf::make_error(errc::peer_down,
                             "road: a reply connection nobody took");
    handed_over = true;
    return caf::none;
  }
  auto fd = pairing.take(h.id, peer_ipv4(c.fd()), timeout, gone); // apart
  if (!fd)
    return std::move(fd.error());
  c.use_reply_socket(*fd, false);
  return caf::none;
}

/// True if `fds[0]` and `fds[1]` are two distinct memfds of `bytes`
/// (a sane ring size), sealed against shrinking.
bool sane_rings(const int (&fds)[max_passed_fds], uint64_t bytes) {
  struct stat st[2];
  bool sane = fds[0] >= 0 && fds[1] >= 0 && bytes <= max_ring_bytes &&
              bytes % 4096 == 0;
  for (int i = 0; sane && i < 2; ++i) {
    auto seals = ::fcntl(fds[i], F_GET_SEALS);
    sane = ::fstat(fds[i], &st[i]) == 0 &&
           static_cast<uint64_t>(st[i].st_size) == bytes && seals >= 0 &&
           (seals & F_SEAL_SHRINK) != 0;
  }
  // One memfd as both rings: we would read in place what we write.
  return sane &&
         !(st[0].st_dev == st[1].st_dev && st[0].st_ino == st[1].st_ino);
}

/// Takes the rings of an shm hello `h` (mapped) and its reply socket
/// (answered on) from `fds`; closes the rest.
caf::error accept_rings(road_conn& c, const wire_header& h,
                        int (&fds)[max_passed_fds]) {
  // Worker writes c2s (fds[0]) and reads s2c (fds[1]); we answer on the
  // reply socket (fds[2]).
  auto err = sane_rings(fds, h.offset)
                 ? c.map_rings(fds[1], fds[0], h.offset)
                 : caf::make_error(errc::malformed_message,
                                   "road: bad rings in hello");
  if (!err && (fds[2] < 0 || !unix_stream_socket(fds[2])))
    err = caf::make_error(errc::malformed_message,
                          "road: hello without a unix stream socket to "
                          "answer on");
  if (!err) {
    c.use_reply_socket(fds[2], false);
    fds[2] = -1; // the connection owns it now
  }
  close_fds(fds);
  return err;
}

} // namespace

caf::error accept_hello(road_conn& c,
                        std::chrono::steady_clock::time_point deadline,
                        road_pairing* pairing, bool& handed_over) {
  wire_header h;
  int fds[max_passed_fds] = {-1, -1, -1};
  if (auto err = read_hello(c, ms_until(deadline), pairing, h, fds))
    return err;
  if (h.flags != 0) { // a tcp road: read_hello checked that `pairing` pairs
    close_fds(fds);
    auto err = pair_connections(c, h, *pairing,
                                std::chrono::milliseconds{ms_until(deadline)},
                                handed_over);
    if (err || handed_over)
      return err;
  }
  if (c.kind() == road_kind::shm && h.offset > 0) {
    if (auto err = accept_rings(c, h, fds))
      return err;
  } else {
    close_fds(fds);
  }
  wire_header ack;
  ack.op = static_cast<uint8_t>(road_op::hello);
  ack.flags = h.flags; // the worker checks we answer where it asked
  std::vector<iovec> iov{{&ack, sizeof(ack)}};
  return send_all(c.fd(), iov);
}

} // namespace troupe
