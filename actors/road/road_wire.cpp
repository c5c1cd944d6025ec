// The road's wire format: the 40-byte header written and read, the hello
// that carries descriptors, and the messages it frames.
#include "actors/road/road_wire.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "actors/road/road_intake.hpp"
#include "actors/road/road_internal.hpp"
#include "messages/errors.hpp"

namespace troupe {

namespace road_detail {

caf::error sys_error(const char* what) {
  return caf::make_error(errc::peer_down, what, std::string{strerror(errno)});
}

caf::error send_all(int fd, std::vector<iovec>& iov,
                    const std::vector<int>& fds) {
  size_t first = 0;
  bool fds_sent = fds.empty();
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    alignas(cmsghdr) char ctrl[CMSG_SPACE(max_passed_fds * sizeof(int))];
    if (!fds_sent) {
      auto n = std::min(fds.size(), max_passed_fds);
      msg.msg_control = ctrl;
      msg.msg_controllen = CMSG_SPACE(n * sizeof(int));
      auto* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(n * sizeof(int));
      std::memcpy(CMSG_DATA(c), fds.data(), n * sizeof(int));
    }
    auto n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return caf::make_error(errc::timeout, "road send: peer not reading");
      return sys_error("road send");
    }
    fds_sent = true;
    auto left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len)
      left -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return caf::none;
}

bool recv_header(int fd, wire_header& h, int (&fds)[max_passed_fds]) {
  iovec iov{&h, sizeof(h)};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE((max_passed_fds + 1) * sizeof(int))];
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof(ctrl);
  ssize_t got;
  do
    got = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  while (got < 0 && errno == EINTR);
  if (got <= 0) {
    if (got == 0)
      errno = 0;
    return false;
  }
  for (auto* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      auto n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      std::vector<int> got(n);
      std::memcpy(got.data(), CMSG_DATA(c), n * sizeof(int));
      for (size_t i = 0; i < n; ++i)
        if (i < max_passed_fds)
          fds[i] = got[i];
        else
          ::close(got[i]);
    }
  auto rest = sizeof(h) - static_cast<size_t>(got);
  return rest == 0 || recv_all(fd, reinterpret_cast<char*>(&h) + got, rest);
}

caf::error check_header(const wire_header& h) {
  if (h.magic != wire_magic)
    return caf::make_error(errc::malformed_message,
                           "road: bad magic (not a troupe road peer?)");
  if (h.op < static_cast<uint8_t>(road_op::hello) ||
      h.op > static_cast<uint8_t>(road_op_last))
    return caf::make_error(errc::malformed_message, "road: unknown op",
                           static_cast<uint32_t>(h.op));
  if (h.op != static_cast<uint8_t>(road_op::release) &&
      (h.bytes > max_frame_bytes || h.bytes % 8 != 0))
    return caf::make_error(errc::malformed_message, "road: frame size",
                           h.bytes);
  return caf::none;
}

} // namespace road_detail

// -- road_message -------------------------------------------------------------

void road_message::release_intake() {
  if (intake)
    intake->give_back(intake_bytes);
  intake_bytes = 0;
}

road_message::~road_message() {
  release_intake();
  if (ring_bytes > 0 && conn)
    conn->release(ring_offset, ring_bytes);
  if (buffer && conn)
    conn->give_buffer(std::move(buffer), buffer_words);
}

} // namespace troupe
