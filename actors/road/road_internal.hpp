// What the road's .cpp files share and its users never see: the wire
// header, the socket helpers, the buffered reading side of a connection
// and the process's road statistics.
#pragma once

#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "actors/base/metrics.hpp"
#include "actors/road/road_conn.hpp"
#include "actors/road/road_settings.hpp"

namespace troupe {

// -- wire format --------------------------------------------------------------

namespace road_detail {

constexpr uint32_t wire_magic = 0x31505254; // "TRP1"

/// Frames smaller than this go inline even on the shm road: a ring buys
/// nothing for them and costs a release message.
constexpr size_t min_ring_frame = 16 * 1024;

/// Largest ring a worker may offer.
constexpr uint64_t max_ring_bytes = uint64_t{1} << 30;

struct wire_header {
  uint32_t magic = wire_magic;
  uint8_t op = 0;
  uint8_t in_ring = 0; // 1: the frame is at `offset` in the sender's ring
  uint16_t flags = 0;  // hello on tcp: hello_replies_apart, hello_reply_conn
  uint32_t zero2 = 0;
  uint32_t zero3 = 0;
  uint64_t id = 0;
  uint64_t bytes = 0;  // frame bytes
  uint64_t offset = 0; // ring offset; hello: ring bytes (0 = no rings)
};
static_assert(sizeof(wire_header) == 40, "the header is 40 bytes on the wire");

/// A tcp hello's flags. The worker's first connection announces that the
/// server is to answer on a second one, which the worker dials next (both
/// hellos carry the same random token in `id`): each direction then has a
/// socket of its own, and a worker's sending thread never contends for
/// the socket its reader reads (docs/benchmarks.md). A hello without flags
/// gets one connection both ways.
constexpr uint16_t hello_replies_apart = 1; // answer on the reply connection
constexpr uint16_t hello_reply_conn = 2;    // this is that connection

/// Most descriptors a message carries: the hello on the shm road carries
/// the two rings and the reply socket.
constexpr size_t max_passed_fds = 3;

caf::error sys_error(const char* what);

/// troupe_road_bytes_total{road, direction}: frame bytes sent or received
/// on roads of `kind` (--metrics.port).
prometheus::Counter& road_bytes(road_kind kind, bool sent);

/// Writes every byte of `iov` (advancing it on partial writes), with the
/// descriptors `fds` (at most max_passed_fds) on the first byte.
caf::error send_all(int fd, std::vector<iovec>& iov,
                    const std::vector<int>& fds = {});

/// Reads a header that may carry up to max_passed_fds file descriptors
/// (hello on unix) into `fds` (-1 where none came); closes any beyond.
bool recv_header(int fd, wire_header& h, int (&fds)[max_passed_fds]);

caf::error check_header(const wire_header& h);

// -- sockets ------------------------------------------------------------------

void set_timeout(int fd, int opt, uint32_t ms);

/// What is left until `deadline`, at least 1 ms (0 would wait forever).
inline uint32_t ms_until(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<uint32_t>(std::max<int64_t>(left.count(), 1));
}

void no_delay(int fd);

void keep_alive(int fd);

caf::expected<sockaddr_in> ipv4_of(const std::string& host, uint16_t port);

socklen_t abstract_addr(const std::string& name, sockaddr_un& sa);

/// Connects with a deadline; returns the fd or an error.
caf::expected<int> connect_with_timeout(int domain, const sockaddr* sa,
                                        socklen_t len, uint32_t timeout_ms);

/// The IPv4 address of the peer of `fd`, or 0 if it has none.
uint32_t peer_ipv4(int fd);

/// "ADDRESS:PORT" of the peer of socket `fd` ("a local socket" for a unix
/// one, "an unknown peer" if it cannot tell): for lines about a peer.
std::string peer_address(int fd);

/// True if `fd` is a unix stream socket (what a reply socket must be).
bool unix_stream_socket(int fd);

/// True if the process at the other end of unix socket `fd` runs as our
/// user (or as root). Any process of the network namespace can reach the
/// abstract socket of the shm road.
bool same_user(int fd);

// -- rings --------------------------------------------------------------------

/// A sealed memfd of `bytes`: the peer may trust its size.
caf::expected<int> make_ring_fd(size_t bytes);

uint8_t* map_ring(int fd, size_t bytes);

// -- connections --------------------------------------------------------------

/// A connection with `settings` that owns `fd`; closes it if none could
/// be made.
road_conn_ptr adopt(int fd, road_kind kind, uint32_t send_timeout_ms,
                    const road_settings& settings);

/// The connection whose reader runs on this thread, while it reads.
extern thread_local const road_conn* reading_conn;

/// Set on the threads that read roads (on_road_reader).
extern thread_local bool reading_a_road;

// -- statistics (process-wide, read-only to users) ----------------------------

extern std::atomic<uint64_t> spins_found;       // road_spins_found
extern std::atomic<uint64_t> frame_spins_found; // road_frame_spins_found

// -- reading ------------------------------------------------------------------

/// Polls `fd` for input, yielding the core between polls, for at most
/// `limit_us` (a reader's: road_settings::spin_us; a blocking caller's:
/// caller_spin_us; inside a large frame: frame_spin_us) and `cap`: true
/// once it is readable (or ended: the read that follows sees that),
/// counted in `found`; false if the time ran out or spinning is off.
inline bool spin_until_readable(
    int fd, uint32_t limit_us, std::atomic<uint64_t>& found,
    std::chrono::microseconds cap = std::chrono::microseconds::max()) {
  auto limit = std::min<int64_t>(limit_us, cap.count());
  if (limit <= 0)
    return false;
  auto until =
      std::chrono::steady_clock::now() + std::chrono::microseconds{limit};
  pollfd p{fd, POLLIN, 0};
  for (;;) {
    if (::poll(&p, 1, 0) > 0) {
      found.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (std::chrono::steady_clock::now() >= until)
      return false;
    ::sched_yield();
  }
}

/// One recv, retried on EINTR: bytes read, or 0 on EOF or error (errno
/// set, 0 on EOF).
inline size_t recv_some(int fd, void* buf, size_t n, int flags) {
  for (;;) {
    auto got = ::recv(fd, buf, n, flags);
    if (got > 0)
      return static_cast<size_t>(got);
    if (got < 0 && errno == EINTR)
      continue;
    if (got == 0)
      errno = 0;
    return 0;
  }
}

/// No deadline: a read may take as long as its socket's timeout allows.
constexpr auto no_deadline = std::chrono::steady_clock::time_point::max();

/// False with errno ETIMEDOUT if `until` has passed (a frame too slow).
inline bool before(std::chrono::steady_clock::time_point until) {
  if (until == no_deadline || std::chrono::steady_clock::now() < until)
    return true;
  errno = ETIMEDOUT;
  return false;
}

/// Reads exactly `n` bytes; false on EOF or error (errno set, 0 on EOF),
/// or past `until` (ETIMEDOUT; checked after each recv, which the socket's
/// receive timeout bounds).
inline bool
recv_all(int fd, void* buf, size_t n,
         std::chrono::steady_clock::time_point until = no_deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    auto got = recv_some(fd, p, n, MSG_WAITALL);
    if (got == 0)
      return false;
    p += got;
    n -= got;
    if (n > 0 && !before(until))
      return false;
  }
  return true;
}

/// Reads exactly `n` bytes of a large frame, whose sender is writing it
/// now: whatever has come, then, each time the reader caught up, polling
/// for more for up to `frame_spin_us` instead of sleeping; once that ran
/// out, as recv_all does (a caller's read deadline counts from there).
/// False on EOF or error (errno set, 0 on EOF).
inline bool
recv_frame_rest(int fd, void* buf, size_t n, uint32_t frame_spin_us,
                std::chrono::steady_clock::time_point until = no_deadline) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    auto got = recv_some(fd, p, n, MSG_DONTWAIT);
    if (got == 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return false;
      if (!before(until))
        return false;
      if (!spin_until_readable(fd, frame_spin_us, frame_spins_found))
        return recv_all(fd, p, n, until);
      continue;
    }
    p += got;
    n -= got;
  }
  return true;
}

/// Reads a stream through a buffer: a small message costs one recv instead
/// of two, and messages that arrive together share one. Large payloads go
/// straight to their destination. Polls as `settings` say. A deadline, while
/// set, ends a read that has not finished by then (ETIMEDOUT).
class stream_reader {
public:
  stream_reader(int fd, const road_settings& settings)
      : fd_(fd), spin_us_(settings.spin_us),
        frame_spin_us_(settings.frame_spin_us), buf_(new char[capacity]) {}

  /// Copies the next `n` bytes to `dst`; false on EOF or error (errno set,
  /// 0 on EOF).
  bool read(void* dst, size_t n) {
    auto* out = static_cast<char*>(dst);
    auto avail = end_ - begin_;
    if (avail >= n) {
      std::memcpy(out, buf_.get() + begin_, n);
      begin_ += n;
      return true;
    }
    std::memcpy(out, buf_.get() + begin_, avail);
    out += avail;
    n -= avail;
    begin_ = end_ = 0;
    if (n >= capacity / 2) // the rest of a large frame, coming now
      return recv_frame_rest(fd_, out, n, frame_spin_us_, until_);
    while (end_ < n) {
      // then the recv below need not sleep
      spin_until_readable(fd_, spin_us_, spins_found);
      auto got = recv_some(fd_, buf_.get() + end_, capacity - end_, 0);
      if (got == 0)
        return false;
      end_ += got;
      if (end_ < n && !before(until_))
        return false;
    }
    std::memcpy(out, buf_.get(), n);
    begin_ = n;
    return true;
  }

  /// Bytes read from the socket and not yet taken.
  size_t buffered() const { return end_ - begin_; }

  /// Reads end by `t` (no_deadline: never), until set again.
  void set_deadline(std::chrono::steady_clock::time_point t) { until_ = t; }

  /// The first of them.
  const char* peek() const { return buf_.get() + begin_; }

private:
  static constexpr size_t capacity = 64 * 1024;
  int fd_;
  uint32_t spin_us_;
  uint32_t frame_spin_us_;
  std::unique_ptr<char[]> buf_;
  size_t begin_ = 0;
  size_t end_ = 0;
  std::chrono::steady_clock::time_point until_ = no_deadline;
};

} // namespace road_detail

/// A connection's reading side: whoever has the turn reads through it.
class road_stream : public road_detail::stream_reader {
public:
  using stream_reader::stream_reader;
};

/// Server end of a fresh connection: reads the hello (with the rings and
/// the reply socket on the shm road), maps the rings, answers hello. A
/// tcp hello may announce a reply connection, which it then waits for
/// (through `pairing`), or be that reply connection: its socket goes to
/// the connection it names, and `handed_over` is set (nothing answered).
caf::error accept_hello(road_conn& c,
                        std::chrono::steady_clock::time_point deadline,
                        road_pairing* pairing, bool& handed_over);

} // namespace troupe
