// The fast road: sockets, memfd rings, the wire header and the threads that
// read (actors/road.hpp has the design).
#include "actors/road.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <optional>

#include "actors/log.hpp"
#include "messages/errors.hpp"

namespace troupe {

namespace {

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
/// the socket its reader reads (one socket both ways: 125-133k round
/// trips/s with 8 in flight between two threads and an echo here, two:
/// 197k). A hello without flags gets one connection both ways.
constexpr uint16_t hello_replies_apart = 1; // answer on the reply connection
constexpr uint16_t hello_reply_conn = 2;    // this is that connection

std::atomic<uint64_t> next_serial{1};

caf::error sys_error(const char* what) {
  return caf::make_error(errc::peer_down, what, std::string{strerror(errno)});
}

/// Most descriptors a message carries: the hello on the shm road carries
/// the two rings and the reply socket.
constexpr size_t max_passed_fds = 3;

/// Writes every byte of `iov` (advancing it on partial writes), with the
/// descriptors `fds` (at most max_passed_fds) on the first byte.
caf::error send_all(int fd, std::vector<iovec>& iov,
                    const std::vector<int>& fds = {}) {
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

std::atomic<int64_t> spin_us{0}; // set_road_spin
std::atomic<int64_t> caller_spin_us{
    road_caller_spin_default_us};     // set_road_caller_spin
std::atomic<uint64_t> spins_found{0}; // road_spins_found
std::atomic<int64_t> frame_spin_us{
    road_frame_spin_default_us};            // set_road_frame_spin
std::atomic<uint64_t> frame_spins_found{0}; // road_frame_spins_found
std::atomic<bool> replies_apart{true};      // set_road_reply_connection

/// Polls `fd` for input, yielding the core between polls, for at most
/// `setting` (a reader's: set_road_spin(), by default; a blocking
/// caller's: set_road_caller_spin(); inside a large frame:
/// set_road_frame_spin()) and `cap`: true once it is readable (or ended:
/// the read that follows sees that), counted in `found`; false if the
/// time ran out or spinning is off.
bool spin_until_readable(
    int fd, std::chrono::microseconds cap = std::chrono::microseconds::max(),
    const std::atomic<int64_t>& setting = spin_us,
    std::atomic<uint64_t>& found = spins_found) {
  auto limit =
      std::min<int64_t>(setting.load(std::memory_order_relaxed), cap.count());
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
size_t recv_some(int fd, void* buf, size_t n, int flags) {
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

/// Reads exactly `n` bytes; false on EOF or error (errno set, 0 on EOF).
bool recv_all(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    auto got = recv_some(fd, p, n, MSG_WAITALL);
    if (got == 0)
      return false;
    p += got;
    n -= got;
  }
  return true;
}

/// Reads exactly `n` bytes of a large frame, whose sender is writing it
/// now: whatever has come, then, each time the reader caught up, polling
/// for more for up to set_road_frame_spin() instead of sleeping; once that
/// ran out, as recv_all does (a caller's read deadline counts from there).
/// False on EOF or error (errno set, 0 on EOF).
bool recv_frame_rest(int fd, void* buf, size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    auto got = recv_some(fd, p, n, MSG_DONTWAIT);
    if (got == 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return false;
      if (!spin_until_readable(fd, std::chrono::microseconds::max(),
                               frame_spin_us, frame_spins_found))
        return recv_all(fd, p, n);
      continue;
    }
    p += got;
    n -= got;
  }
  return true;
}

/// Reads a stream through a buffer: a small message costs one recv instead
/// of two, and messages that arrive together share one. Large payloads go
/// straight to their destination.
class stream_reader {
public:
  explicit stream_reader(int fd) : fd_(fd), buf_(new char[capacity]) {}

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
      return recv_frame_rest(fd_, out, n);
    while (end_ < n) {
      spin_until_readable(fd_); // then the recv below need not sleep
      auto got = recv_some(fd_, buf_.get() + end_, capacity - end_, 0);
      if (got == 0)
        return false;
      end_ += got;
    }
    std::memcpy(out, buf_.get(), n);
    begin_ = n;
    return true;
  }

  /// Bytes read from the socket and not yet taken.
  size_t buffered() const { return end_ - begin_; }

  /// The first of them.
  const char* peek() const { return buf_.get() + begin_; }

private:
  static constexpr size_t capacity = 64 * 1024;
  int fd_;
  std::unique_ptr<char[]> buf_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

/// Reads a header that may carry up to max_passed_fds file descriptors
/// (hello on unix) into `fds` (-1 where none came); closes any beyond.
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
      h.op > static_cast<uint8_t>(road_op::replicate))
    return caf::make_error(errc::malformed_message, "road: unknown op",
                           static_cast<uint32_t>(h.op));
  if (h.op != static_cast<uint8_t>(road_op::release) &&
      (h.bytes > max_frame_bytes || h.bytes % 8 != 0))
    return caf::make_error(errc::malformed_message, "road: frame size",
                           h.bytes);
  return caf::none;
}

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

/// Connects with a deadline; returns the fd or an error.
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

/// A sealed memfd of `bytes`: the peer may trust its size.
caf::expected<int> make_ring_fd(size_t bytes) {
  int fd = ::memfd_create("troupe-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0)
    return sys_error("memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) !=
          0) {
    auto err = sys_error("ring setup");
    ::close(fd);
    return err;
  }
  return fd;
}

uint8_t* map_ring(int fd, size_t bytes) {
  auto* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

} // namespace

/// A connection's reading side: whoever has the turn reads through it.
class road_stream : public stream_reader {
public:
  using stream_reader::stream_reader;
};

caf::error accept_hello(road_conn& c, uint32_t timeout_ms,
                        road_pairing* pairing, bool& handed_over);

// -- road_kind
// ------------------------------------------------------------------

void set_road_spin(std::chrono::microseconds x) {
  spin_us.store(x.count(), std::memory_order_relaxed);
}

void set_road_caller_spin(std::chrono::microseconds x) {
  caller_spin_us.store(x.count(), std::memory_order_relaxed);
}

void set_road_reply_connection(bool on) {
  replies_apart.store(on, std::memory_order_relaxed);
}

uint64_t road_spins_found() {
  return spins_found.load(std::memory_order_relaxed);
}

void set_road_frame_spin(std::chrono::microseconds x) {
  frame_spin_us.store(x.count(), std::memory_order_relaxed);
}

uint64_t road_frame_spins_found() {
  return frame_spins_found.load(std::memory_order_relaxed);
}

caf::expected<road_kind> parse_road(const std::string& x) {
  if (x == "auto" || x == "shm")
    return road_kind::shm;
  if (x == "tcp")
    return road_kind::tcp;
  if (x == "middleman")
    return road_kind::middleman;
  return caf::make_error(errc::invalid_config,
                         "--kv.road must be auto, shm, tcp or middleman, got",
                         x);
}

const char* to_string(road_kind x) {
  switch (x) {
  case road_kind::middleman:
    return "middleman";
  case road_kind::tcp:
    return "tcp";
  default:
    return "shm";
  }
}

std::string road_machine_id() {
  std::string boot;
  std::ifstream in{"/proc/sys/kernel/random/boot_id"};
  std::getline(in, boot);
  char ns[128] = {0};
  auto n = ::readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  return boot + "/" + (n > 0 ? std::string(ns, static_cast<size_t>(n)) : "");
}

// -- ring_space
// -------------------------------------------------------------------

ring_space::ring_space(size_t bytes) {
  free_.emplace_back(0, bytes);
}

size_t ring_space::take(size_t n) {
  n = (n + 63) & ~size_t{63};
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto i = free_.begin(); i != free_.end(); ++i)
    if (i->second >= n) {
      auto off = i->first;
      i->first += n;
      i->second -= n;
      if (i->second == 0)
        free_.erase(i);
      taken_.emplace(off, n);
      return off;
    }
  return SIZE_MAX;
}

bool ring_space::give(size_t offset, size_t n) {
  n = (n + 63) & ~size_t{63};
  std::lock_guard<std::mutex> guard{mtx_};
  auto t = taken_.find(offset);
  if (t == taken_.end() || t->second != n)
    return false;
  taken_.erase(t);
  auto i = std::lower_bound(free_.begin(), free_.end(),
                            std::make_pair(offset, size_t{0}));
  i = free_.emplace(i, offset, n);
  if (auto next = i + 1;
      next != free_.end() && i->first + i->second == next->first) {
    i->second += next->second;
    free_.erase(next);
  }
  if (i != free_.begin()) {
    auto prev = i - 1;
    if (prev->first + prev->second == i->first) {
      prev->second += i->second;
      free_.erase(i);
    }
  }
  return true;
}

size_t ring_space::free_bytes() const {
  std::lock_guard<std::mutex> guard{mtx_};
  size_t n = 0;
  for (auto& f : free_)
    n += f.second;
  return n;
}

// -- road_message
// -----------------------------------------------------------------

road_message::~road_message() {
  if (ring_bytes > 0 && conn)
    conn->release(ring_offset, ring_bytes);
  if (buffer && conn)
    conn->give_buffer(std::move(buffer), buffer_words);
}

// -- road_conn
// ----------------------------------------------------------------------

road_conn::road_conn(int fd, road_kind kind, uint32_t send_timeout_ms)
    : fd_(fd), read_fd_(fd), write_fd_(fd), send_timeout_ms_(send_timeout_ms),
      kind_(kind), serial_(next_serial++) {
  set_timeout(fd_, SO_SNDTIMEO, send_timeout_ms);
  if (kind_ == road_kind::tcp) {
    no_delay(fd_);
    keep_alive(fd_);
  }
}

road_conn::~road_conn() {
  close();
  if (reader_.joinable()) {
    if (reader_.get_id() == std::this_thread::get_id())
      reader_.detach(); // the reader held the last reference and is ending
    else
      reader_.join();
  }
  if (out_.base)
    ::munmap(out_.base, out_.bytes);
  if (in_.base)
    ::munmap(in_.base, in_.bytes);
  ::close(fd_);
  if (int side = side_fd_; side >= 0)
    ::close(side);
  if (int efd = wake_efd_; efd >= 0)
    ::close(efd);
}

void road_conn::use_reply_socket(int fd, bool we_read) {
  side_fd_ = fd;
  if (we_read) {
    read_fd_ = fd;
  } else {
    write_fd_ = fd;
    set_timeout(fd, SO_SNDTIMEO, send_timeout_ms_);
  }
}

caf::error road_conn::map_rings(int out_fd, int in_fd, size_t bytes) {
  out_.base = map_ring(out_fd, bytes);
  in_.base = map_ring(in_fd, bytes);
  out_.bytes = in_.bytes = bytes; // the destructor unmaps what was mapped
  if (!out_.base || !in_.base)
    return sys_error("mmap of a road ring");
  out_space_ = std::make_unique<ring_space>(bytes);
  return caf::none;
}

void road_conn::start(road_handler on_msg, road_down_handler on_down) {
  stream_ = std::make_unique<road_stream>(read_fd_);
  on_msg_ = std::move(on_msg);
  on_down_ = std::move(on_down);
  reader_ = std::thread{[self = shared_from_this()] {
    self->reader_id_ = std::this_thread::get_id();
    self->read_loop();
  }};
}

void road_conn::start_accepted(uint32_t timeout_ms, road_handler on_msg,
                               road_down_handler on_down,
                               std::shared_ptr<road_pairing> pairing) {
  stream_ = std::make_unique<road_stream>(read_fd_);
  on_msg_ = std::move(on_msg);
  on_down_ = std::move(on_down);
  reader_ = std::thread{
      [self = shared_from_this(), timeout_ms, pairing = std::move(pairing)] {
        self->reader_id_ = std::this_thread::get_id();
        bool handed_over = false;
        if (auto err =
                accept_hello(*self, timeout_ms, pairing.get(), handed_over)) {
          TROUPE_LOG(warning, "road", "refused a connection: ", describe(err));
          self->fail(err);
          return;
        }
        if (handed_over) {
          self->end_handed_over();
          return;
        }
        self->read_loop();
      }};
}

namespace {

/// Frames from this size on are copied into the ring in chunks of
/// split_copy_chunk bytes by the sender's loop, if it gave one.
constexpr size_t min_split_copy = 256 * 1024;
constexpr size_t split_copy_chunk = 64 * 1024;

/// The largest message a reply may be corked behind, and the largest
/// corked reply.
constexpr size_t max_cork_frame = 4096;

/// Corked bytes that are sent at once, whatever comes next.
constexpr size_t max_cork_bytes = 64 * 1024;

/// A frame this large takes long enough to make (a part of a large pull)
/// that a caller does not poll for the next one, nor take the road from
/// the reader thread for it, while such frames are recent: within the
/// last large_traffic_frames frames sent or read on the connection.
constexpr uint64_t min_large_frame = 64 * 1024;

/// The connection whose reader runs on this thread, while it reads.
thread_local const road_conn* reading_conn = nullptr;

std::atomic<uint64_t> corked_messages{0};

/// Copies `pieces` one after another to `dst`: in chunks that `loop` runs,
/// or (no loop) in place.
void copy_pieces(const std::vector<outbound::piece>& pieces, uint8_t* dst,
                 const loop_fn* loop) {
  if (!loop) {
    for (auto& p : pieces) {
      std::memcpy(dst, p.data, p.size);
      dst += p.size;
    }
    return;
  }
  struct chunk {
    uint8_t* to;
    const uint8_t* from;
    size_t n;
  };
  std::vector<chunk> chunks;
  for (auto& p : pieces)
    for (size_t at = 0; at < p.size; at += split_copy_chunk) {
      auto n = std::min(split_copy_chunk, p.size - at);
      chunks.push_back(chunk{dst, p.data + at, n});
      dst += n;
    }
  (*loop)(chunks.size(), [&](size_t k) {
    std::memcpy(chunks[k].to, chunks[k].from, chunks[k].n);
  });
}

} // namespace

caf::error road_conn::send(road_op op, uint64_t id, const outbound& out,
                           const loop_fn* copy) {
  return write_guarded(op, id, out.pieces(), out.bytes(), copy);
}

caf::error road_conn::send(road_op op, uint64_t id, bytes_view f) {
  return write_guarded(op, id, {outbound::piece{f.data, f.size}}, f.size);
}

caf::error road_conn::write_guarded(road_op op, uint64_t id,
                                    const std::vector<outbound::piece>& pieces,
                                    size_t bytes, const loop_fn* copy) {
  try {
    return write_pieces(op, id, pieces, bytes, copy);
  } catch (const std::exception& e) {
    // No memory for the cork or the copy's chunks, a copy loop that could
    // not start: the message may be half in the cork or the ring, so the
    // connection ends (its rings and buffers with it) and the caller sees
    // why, as for any failed write.
    auto err = caf::make_error(errc::peer_down, "road send failed", e.what());
    fail(err);
    return err;
  }
}

caf::error road_conn::write_pieces(road_op op, uint64_t id,
                                   const std::vector<outbound::piece>& pieces,
                                   size_t bytes, const loop_fn* copy) {
  if (closed_)
    return caf::make_error(errc::peer_down, "road closed");
  note_send(op); // before the bytes leave: the reply may come at once
  note_frame(bytes);
  wire_header h;
  h.op = static_cast<uint8_t>(op);
  h.id = id;
  h.bytes = bytes;
  std::lock_guard<std::mutex> guard{write_mtx_};
  // Releases waiting to go out ride along, in the same write.
  auto& rel = write_releases_;
  auto& iov = write_iov_;
  iov.clear();
  take_releases(rel, iov);
  iov.push_back(iovec{&h, sizeof(h)});
  auto off = SIZE_MAX;
  if (out_space_ && bytes >= min_ring_frame)
    off = out_space_->take(bytes);
  if (off == SIZE_MAX && bytes <= max_cork_frame && reading_conn == this &&
      small_requests_buffered(2) >= (corked_ ? 1 : 2)) {
    for (auto& v : iov) {
      auto p = static_cast<const uint8_t*>(v.iov_base);
      cork_.insert(cork_.end(), p, p + v.iov_len);
    }
    for (auto& p : pieces)
      cork_.insert(cork_.end(), p.data, p.data + p.size);
    inline_bytes_ += bytes;
    ++corked_messages;
    corked_ = true;
    if (cork_.size() < max_cork_bytes)
      return caf::none;
    iov.assign(1, iovec{cork_.data(), cork_.size()}); // full: out it goes
  } else {
    if (!cork_.empty()) // what was corked goes first
      iov.insert(iov.begin(), iovec{cork_.data(), cork_.size()});
    if (off != SIZE_MAX) { // the one copy: into the ring
      copy_pieces(pieces, out_.base + off,
                  copy && bytes >= min_split_copy ? copy : nullptr);
      h.in_ring = 1;
      h.offset = off;
      ring_bytes_sent_ += bytes;
    } else {
      for (auto& p : pieces)
        if (p.size > 0)
          iov.push_back(iovec{const_cast<uint8_t*>(p.data), p.size});
      inline_bytes_ += bytes;
    }
  }
  auto err = send_all(write_fd_, iov);
  cork_.clear();
  corked_ = false;
  if (err) {
    if (off != SIZE_MAX)
      out_space_->give(off, bytes);
    fail(err);
  }
  return err;
}

void road_conn::release(uint64_t offset, uint64_t bytes) {
  if (closed_)
    return;
  std::lock_guard<std::mutex> guard{write_mtx_};
  pending_releases_.emplace_back(offset, bytes);
  // The next message we send carries it: no wake-up of its own. A reader
  // never writes by itself (its peer may wait for it to read): there
  // releases always wait for the next message.
  if (pending_releases_.size() < max_pending_releases || on_road_reader())
    return;
  write_iov_.clear();
  take_releases(write_releases_, write_iov_);
  if (auto err = send_all(write_fd_, write_iov_))
    fail(err);
}

void road_conn::take_releases(std::vector<release_header>& headers,
                              std::vector<iovec>& iov) {
  headers.resize(pending_releases_.size());
  for (size_t i = 0; i < headers.size(); ++i) {
    wire_header h;
    h.op = static_cast<uint8_t>(road_op::release);
    h.offset = pending_releases_[i].first;
    h.bytes = pending_releases_[i].second;
    static_assert(sizeof(h) == sizeof(release_header));
    std::memcpy(headers[i].bytes, &h, sizeof(h));
    iov.push_back(iovec{headers[i].bytes, sizeof(h)});
  }
  pending_releases_.clear();
}

/// Receive buffers kept per connection, and the smallest worth keeping.
constexpr size_t pooled_buffers = 4;
constexpr size_t min_pooled_words = 64 * 1024 / 8;
constexpr size_t max_pooled_words = road_pool_budget / 8;

std::unique_ptr<uint64_t[]> road_conn::take_buffer(size_t words,
                                                   size_t& capacity) {
  {
    std::lock_guard<std::mutex> guard{pool_mtx_};
    for (auto i = pool_.begin(); i != pool_.end(); ++i)
      if (i->first >= words) {
        capacity = i->first;
        auto buf = std::move(i->second);
        pool_.erase(i);
        return buf;
      }
  }
  capacity = words;
  return std::unique_ptr<uint64_t[]>(new uint64_t[words]); // not zeroed
}

void road_conn::give_buffer(std::unique_ptr<uint64_t[]> buf, size_t capacity) {
  if (capacity < min_pooled_words || capacity > max_pooled_words)
    return;
  std::lock_guard<std::mutex> guard{pool_mtx_};
  // Keep the largest, up to pooled_buffers of them and road_pool_budget
  // bytes in all: smaller ones go first to make room.
  pool_.emplace_back(capacity, std::move(buf));
  std::sort(pool_.begin(), pool_.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  size_t words = 0;
  size_t keep = 0;
  while (keep < pool_.size() && keep < pooled_buffers &&
         words + pool_[keep].first <= max_pooled_words)
    words += pool_[keep++].first;
  pool_.resize(keep);
}

size_t road_conn::pooled_bytes() const {
  std::lock_guard<std::mutex> guard{pool_mtx_};
  size_t words = 0;
  for (auto& x : pool_)
    words += x.first;
  return words * 8;
}

void road_conn::released(uint64_t offset, uint64_t bytes) {
  if (!out_space_ || !out_space_->give(offset, bytes))
    fail(caf::make_error(errc::malformed_message,
                         "road: release of a ring region not in use"));
}

void road_conn::close() {
  down_told_ = true; // the owner closes: it knows
  if (!closed_.exchange(true))
    shut_down();
  wake_reader();
  if (reader_id_.load() == std::this_thread::get_id())
    return; // the reader itself: it ends on its own
  std::lock_guard<std::mutex> guard{join_mtx_}; // one joins, others wait
  if (reader_.joinable())
    reader_.join();
}

void road_conn::shut_down() {
  ::shutdown(fd_, SHUT_RDWR);
  if (int side = side_fd_; side >= 0)
    ::shutdown(side, SHUT_RDWR);
}

void road_conn::end_handed_over() {
  closed_ = true; // the socket lives on in the connection that took it
  wake_reader();
  if (!down_told_.exchange(true) && on_down_)
    on_down_(serial_, caf::error{});
}

void road_conn::fail(caf::error err) {
  closed_ = true;
  shut_down();
  wake_reader();
  if (!down_told_.exchange(true) && on_down_)
    on_down_(serial_, err);
}

namespace {
/// Set on the threads that read roads (on_road_reader).
thread_local bool reading_a_road = false;
} // namespace

bool on_road_reader() {
  return reading_a_road;
}

bool road_reply_corked() {
  return reading_conn && reading_conn->corked_.load();
}

void road_conn::read_loop() {
  reading_a_road = true;
  read_messages();
}

void road_conn::read_messages() {
  // The hello, the only message with file descriptors, is read before.
  // Descriptors a peer sends later are dropped by the kernel.
  reading_conn = this;
  while (wait_for_turn()) {
    if (wake_efd_ >= 0 && stream_->buffered() < sizeof(wire_header) &&
        !await_input())
      continue; // a caller wants the road: wait_for_turn leaves it
    if (!read_one(true))
      break;
    if (corked_ && small_requests_buffered(1) == 0)
      flush_cork(); // before the reader may wait
  }
  reading_conn = nullptr;
  flush_cork();
}

size_t road_conn::small_requests_buffered(size_t enough) const {
  auto& in = *stream_;
  size_t n = 0;
  for (size_t at = 0;
       n < enough && in.buffered() - at >= sizeof(wire_header);) {
    wire_header h;
    std::memcpy(&h, in.peek() + at, sizeof(h));
    at += sizeof(h);
    if (h.op == static_cast<uint8_t>(road_op::release))
      continue; // a header alone (its `bytes` are the region's): no request
    if (h.bytes > max_cork_frame)
      break;
    if (!h.in_ring) { // the frame follows the header
      if (in.buffered() - at < h.bytes)
        break;
      at += h.bytes;
    }
    ++n;
  }
  return n;
}

void road_conn::flush_cork() {
  if (!corked_)
    return;
  std::lock_guard<std::mutex> guard{write_mtx_};
  if (cork_.empty())
    return;
  std::vector<iovec> iov{iovec{cork_.data(), cork_.size()}};
  auto err = closed_ ? caf::none : send_all(write_fd_, iov);
  cork_.clear();
  corked_ = false;
  if (err)
    fail(err);
}

bool road_conn::read_one(bool on_reader) {
  try {
    return read_next(on_reader);
  } catch (const std::exception& e) { // e.g. no memory for a huge frame
    fail(caf::make_error(errc::peer_down, "road reader failed", e.what()));
    return false;
  }
}

bool road_conn::read_next(bool on_reader) {
  auto& in = *stream_;
  wire_header h;
  if (!in.read(&h, sizeof(h))) {
    fail(caf::make_error(errc::peer_down, "road connection lost",
                         errno ? std::string{strerror(errno)}
                               : std::string{"closed by peer"}));
    return false;
  }
  if (auto err = check_header(h)) {
    TROUPE_LOG(warning, "road", "dropping a connection: ", describe(err));
    fail(err);
    return false;
  }
  auto op = static_cast<road_op>(h.op);
  if (op == road_op::release) {
    released(h.offset, h.bytes);
    return !closed_;
  }
  note_frame(h.bytes);
  auto m = std::make_shared<road_message>();
  m->op = op;
  m->id = h.id;
  m->conn = shared_from_this();
  if (h.in_ring) {
    if (!in_.base || h.offset > in_.bytes || h.bytes > in_.bytes - h.offset) {
      fail(caf::make_error(errc::malformed_message,
                           "road: ring region out of bounds"));
      return false;
    }
    m->bytes = bytes_view{in_.base + h.offset, h.bytes};
    m->ring_offset = h.offset;
    m->ring_bytes = h.bytes;
  } else if (auto l = op == road_op::reply || op == road_op::failure
                          ? take_landing(h.id)
                          : nullptr;
             l && op == road_op::reply) {
    if (!read_landed(h.bytes, *l, *m))
      return false;
    m->landing = std::move(l);
  } else {
    m->buffer = take_buffer(h.bytes / 8 + 1, m->buffer_words);
    if (!in.read(m->buffer.get(), h.bytes))
      return lost_mid_frame();
    m->bytes = bytes_view{reinterpret_cast<uint8_t*>(m->buffer.get()), h.bytes};
  }
  if (op == road_op::reply || op == road_op::failure) {
    std::lock_guard<std::mutex> guard{turn_mtx_};
    outstanding_ -= outstanding_ > 0 ? 1 : 0;
    // The last reply due: the reader thread leaves the road (if a caller
    // asked) before handing the reply over, so that the caller, woken by
    // it, finds the road its own for the next call.
    if (on_reader)
      leave_to_callers_if_asked();
  }
  if (on_msg_)
    on_msg_(std::move(m));
  return true;
}

bool road_conn::lost_mid_frame() {
  if (errno == EAGAIN || errno == EWOULDBLOCK) // a caller's read deadline
    fail(caf::make_error(errc::timeout, "road peer sent nothing more of a",
                         "frame for", send_timeout_ms_, "ms"));
  else
    fail(caf::make_error(errc::peer_down, "road connection lost mid-frame",
                         errno ? std::string{strerror(errno)}
                               : std::string{"closed by peer"}));
  return false;
}

namespace {

std::atomic<uint64_t> landed_bytes{0};

/// Most segments a landed frame may have: a pull reply has one per slice
/// of at least 4 KiB, and one message holds at most kv.max-message-bytes.
constexpr uint32_t max_landed_segments = 4096;

} // namespace

bool road_conn::read_landed(uint64_t bytes, road_landing& l, road_message& m) {
  auto& in = *stream_;
  m.buffer = take_buffer(bytes / 8 + 1, m.buffer_words);
  auto* base = reinterpret_cast<uint8_t*>(m.buffer.get());
  m.bytes = bytes_view{base, bytes};
  size_t got = 0;
  // Whatever is not a well-formed segment table is read flat: the decoder
  // then says what is wrong with it.
  auto rest_flat = [&] {
    return in.read(base + got, bytes - got) || lost_mid_frame();
  };
  if (bytes < 8) // check_header saw to whole words
    return rest_flat();
  if (!in.read(base, 8))
    return lost_mid_frame();
  got = 8;
  uint32_t first = 0;
  std::memcpy(&first, base, 4);
  if (first >= max_landed_segments)
    return rest_flat();
  size_t count = size_t{first} + 1;
  size_t table = (4 * (count + 1) + 7) & ~size_t{7};
  if (table > bytes)
    return rest_flat();
  if (!in.read(base + got, table - got))
    return lost_mid_frame();
  got = table;
  std::vector<uint32_t> words(count);
  std::memcpy(words.data(), base + 4, 4 * count);
  uint64_t total = table;
  for (auto w : words)
    total += uint64_t{w} * 8;
  if (total != bytes)
    return rest_flat();
  m.segments.resize(count);
  for (size_t i = 0, off = table; i < count; off += size_t{words[i]} * 8, ++i)
    m.segments[i] = bytes_view{base + off, size_t{words[i]} * 8};
  if (!in.read(base + got, m.segments[0].size))
    return lost_mid_frame();
  std::vector<uint8_t*> at(count, nullptr);
  l.place(m.segments, at);
  for (size_t i = 1; i < count; ++i) {
    auto& seg = m.segments[i];
    if (at[i] != nullptr && reinterpret_cast<uintptr_t>(at[i]) % 8 == 0) {
      seg.data = at[i];
      landed_bytes += seg.size;
    }
    if (!in.read(const_cast<uint8_t*>(seg.data), seg.size))
      return lost_mid_frame();
  }
  m.bytes.segments = m.segments.data();
  m.bytes.segment_count = m.segments.size();
  return true;
}

uint64_t road_corked_messages() {
  return corked_messages.load();
}

uint64_t road_landed_bytes() {
  return landed_bytes;
}

void road_conn::land_reply(uint64_t id, road_landing_ptr l) {
  if (kind_ != road_kind::tcp || !l)
    return;
  std::lock_guard<std::mutex> guard{landing_mtx_};
  landings_[id] = std::move(l);
}

void road_conn::forget_landing(uint64_t id) {
  std::lock_guard<std::mutex> guard{landing_mtx_};
  landings_.erase(id);
}

road_landing_ptr road_conn::take_landing(uint64_t id) {
  std::lock_guard<std::mutex> guard{landing_mtx_};
  auto i = landings_.find(id);
  if (i == landings_.end())
    return nullptr;
  auto l = std::move(i->second);
  landings_.erase(i);
  return l;
}

// -- a blocking caller reading its own replies --------------------------------

namespace {
thread_local road_caller_scope* this_threads_scope = nullptr;
} // namespace

road_caller_scope::road_caller_scope() : outer_(this_threads_scope) {
  this_threads_scope = this;
}

road_caller_scope::~road_caller_scope() {
  this_threads_scope = outer_;
  for (size_t i = claimed_ ? 1 : 0; i < conns_.size(); ++i)
    conns_[i]->caller_done(); // nobody here reads it: replies are due
}

road_caller_scope* road_caller_scope::current() {
  return this_threads_scope;
}

void road_caller_scope::note(road_conn_ptr c) {
  if (std::find(conns_.begin(), conns_.end(), c) == conns_.end())
    conns_.push_back(std::move(c));
}

road_conn_ptr road_caller_scope::claim_only_conn() {
  claimed_ = conns_.size() == 1;
  return claimed_ ? conns_.front() : nullptr;
}

void road_conn::leave_to_callers_if_asked() {
  // With nothing outstanding, nothing arrives until a caller sends; with
  // replies outstanding, a caller waits for them on the road.
  if (callers_want_ && (outstanding_ == 0 || caller_waiting_) &&
      turn_ == turn::reader) {
    turn_ = turn::callers_idle;
    turn_cv_.notify_all();
  }
}

bool road_conn::await_input() {
  if (spin_until_readable(read_fd_))
    return true;
  pollfd p[2] = {{read_fd_, POLLIN, 0}, {wake_efd_, POLLIN, 0}};
  while (::poll(p, 2, -1) < 0 && errno == EINTR) {
  }
  if ((p[1].revents & POLLIN) == 0)
    return true;
  uint64_t n = 0;
  [[maybe_unused]] auto got = ::read(wake_efd_, &n, sizeof(n));
  return false;
}

bool road_conn::wait_for_turn() {
  std::unique_lock<std::mutex> guard{turn_mtx_};
  leave_to_callers_if_asked();
  turn_cv_.wait(guard, [this] { return turn_ == turn::reader || closed_; });
  return !closed_;
}

void road_conn::note_send(road_op op) {
  bool request = op == road_op::init || op == road_op::push ||
                 op == road_op::pull || op == road_op::replicate;
  auto scope = road_caller_scope::current();
  {
    std::lock_guard<std::mutex> guard{turn_mtx_};
    outstanding_ += request ? 1 : 0;
    if (!scope && turn_ == turn::callers_idle) {
      // Not a caller that reads its own reply: the reader thread must.
      turn_ = turn::reader;
      callers_want_ = false;
      turn_cv_.notify_all();
    }
  }
  if (scope)
    scope->note(shared_from_this());
}

void road_conn::wake_reader() {
  std::lock_guard<std::mutex> guard{turn_mtx_};
  turn_cv_.notify_all();
}

bool road_conn::pump_once(std::chrono::milliseconds wait) {
  {
    std::unique_lock<std::mutex> guard{turn_mtx_};
    if (closed_)
      return false;
    if (turn_ == turn::reader) {
      callers_want_ = true; // the reader thread leaves once it may
      // Amid large frames, a wake-up is nothing beside their copies, and
      // the caller's poll would take a core from them: it waits by mail.
      if (outstanding_ == 0 || large_traffic())
        return false;
      // Replies are due: the reader thread waits for them, woken for us.
      caller_waiting_ = true;
      if (wake_efd_ < 0)
        wake_efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
      if (wake_efd_ < 0)
        return false;
      uint64_t one = 1;
      [[maybe_unused]] auto put = ::write(wake_efd_, &one, sizeof(one));
      if (!turn_cv_.wait_for(
              guard, wait, [this] { return turn_ != turn::reader || closed_; }))
        return true; // not yet: the caller looks at its mailbox again
      if (closed_)
        return false;
    } else if (outstanding_ == 0 && stream_->buffered() == 0) {
      // Every reply has been read (one handed to a scheduler thread, say, a
      // large one): nothing more comes here; the caller's comes by mail.
      turn_ = turn::callers_idle;
      return false;
    }
    turn_ = turn::caller_reading;
  }
  // A caller looks at its mailbox between pumps, and one that asks
  // without waiting must not wait: it polls no longer than `wait`.
  // Amid large frames, the next (a large pull's next part) is far off:
  // the poll would only take a core from the threads copying them.
  if (stream_->buffered() < sizeof(wire_header) &&
      (large_traffic() ||
       !spin_until_readable(read_fd_, wait, caller_spin_us))) {
    pollfd p{read_fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0)
      return !closed_; // nothing yet (or EINTR): the caller looks again
  }
  struct reader_flag { // the kv client defers writes here, as on a reader
    bool before = reading_a_road;
    reader_flag() { reading_a_road = true; }
    ~reader_flag() { reading_a_road = before; }
  } flag;
  // A peer that stops in the middle of a frame (a stopped or swapping
  // process) must not hold the caller beyond the connection's timeout,
  // while the reply it waits for may have failed meanwhile: a read that
  // waits that long fails the connection, as a send would. (The reader
  // thread may wait: nothing waits on it.)
  struct read_deadline {
    int fd;
    bool set;
    read_deadline(int f, uint32_t ms) : fd(f), set(ms > 0) {
      if (set)
        set_timeout(fd, SO_RCVTIMEO, ms);
    }
    ~read_deadline() {
      if (set)
        set_timeout(fd, SO_RCVTIMEO, 0);
    }
  } deadline{read_fd_, send_timeout_ms_};
  // What arrived together is dispatched together (a push's ack and the
  // reply of the pull sent with it, say).
  bool ok = read_one(false);
  while (ok && stream_->buffered() >= sizeof(wire_header))
    ok = read_one(false);
  return ok;
}

void road_conn::caller_done() {
  std::lock_guard<std::mutex> guard{turn_mtx_};
  caller_waiting_ = false;
  if (turn_ == turn::reader)
    return;
  if (outstanding_ == 0) {
    turn_ = turn::callers_idle;
    return;
  }
  turn_ = turn::reader; // replies still due: the reader thread reads them
  turn_cv_.notify_all();
}

uint64_t road_conn::outstanding() const {
  std::lock_guard<std::mutex> guard{turn_mtx_};
  return outstanding_;
}

void road_conn::note_frame(uint64_t bytes) {
  auto n = frames_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (bytes >= min_large_frame)
    last_large_frame_.store(n, std::memory_order_relaxed);
}

bool road_conn::large_traffic() const {
  auto last = last_large_frame_.load(std::memory_order_relaxed);
  return last != 0 &&
         frames_.load(std::memory_order_relaxed) - last < large_traffic_frames;
}

bool road_conn::read_by_callers() const {
  std::lock_guard<std::mutex> guard{turn_mtx_};
  return turn_ != turn::reader;
}

// -- server side
// ---------------------------------------------------------------------

/// True if `fd` is a unix stream socket (what a reply socket must be).
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

/// A listener's tcp connections that wait for their pair: a worker's
/// reply connection offers its socket under the token of its hello, and
/// the first connection, whose hello announced it, takes it. Each side
/// waits for the other up to the hello's timeout, then gives up (the
/// offering connection closes its socket): nothing stays behind.
class road_pairing {
public:
  /// Offers `fd`, a reply connection from `peer` (an IPv4 address), under
  /// `token`, until taken (true) or `wait` is up or `gone` says the
  /// connection ended (false). A token already offered is refused.
  bool offer(uint64_t token, int fd, uint32_t peer,
             std::chrono::milliseconds wait,
             const std::function<bool()>& gone) {
    std::unique_lock<std::mutex> guard{mtx_};
    if (!offers_.emplace(token, entry{fd, peer, false}).second)
      return false;
    cv_.notify_all();
    wait_until(guard, wait, gone,
               [this, token] { return offers_.at(token).taken; });
    bool taken = offers_.at(token).taken;
    offers_.erase(token);
    return taken;
  }

  /// Waits up to `wait` for the reply connection of `token` from `peer`
  /// and returns a descriptor of its own for the socket.
  caf::expected<int> take(uint64_t token, uint32_t peer,
                          std::chrono::milliseconds wait,
                          const std::function<bool()>& gone) {
    std::unique_lock<std::mutex> guard{mtx_};
    auto offered_now = [this, token] {
      auto i = offers_.find(token);
      return i != offers_.end() && !i->second.taken;
    };
    wait_until(guard, wait, gone, offered_now);
    if (!offered_now())
      return caf::make_error(errc::peer_down,
                             "road: the reply connection never came");
    auto& o = offers_.at(token);
    if (o.peer != peer)
      return caf::make_error(errc::malformed_message,
                             "road: a reply connection from another host");
    int fd = ::fcntl(o.fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      return sys_error("road: taking the reply connection");
    o.taken = true;
    cv_.notify_all();
    return fd;
  }

  /// Connections waiting for their pair (for tests).
  size_t offered() const {
    std::lock_guard<std::mutex> guard{mtx_};
    return offers_.size();
  }

private:
  struct entry {
    int fd;
    uint32_t peer;
    bool taken;
  };
  /// Waits until `done` or `gone` holds, or `wait` is up; looks at `gone`
  /// (a connection closed meanwhile) every 20 ms.
  template <class Done>
  void wait_until(std::unique_lock<std::mutex>& guard,
                  std::chrono::milliseconds wait,
                  const std::function<bool()>& gone, Done done) {
    auto until = std::chrono::steady_clock::now() + wait;
    while (!done() && !gone() && std::chrono::steady_clock::now() < until)
      cv_.wait_for(guard, std::chrono::milliseconds{20});
  }

  mutable std::mutex mtx_;
  std::condition_variable cv_;
  std::map<uint64_t, entry> offers_; // token -> reply connection
};

namespace {

/// The IPv4 address of the peer of `fd`, or 0 if it has none.
uint32_t peer_ipv4(int fd) {
  sockaddr_in sa{};
  socklen_t len = sizeof(sa);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0 ||
      sa.sin_family != AF_INET)
    return 0;
  return sa.sin_addr.s_addr;
}

} // namespace

/// Server end of a fresh connection: reads the hello (with the rings and
/// the reply socket on the shm road), maps the rings, answers hello. A
/// tcp hello may announce a reply connection, which it then waits for
/// (through `pairing`), or be that reply connection: its socket goes to
/// the connection it names, and `handed_over` is set (nothing answered).
caf::error accept_hello(road_conn& c, uint32_t timeout_ms,
                        road_pairing* pairing, bool& handed_over) {
  set_timeout(c.fd(), SO_RCVTIMEO, timeout_ms);
  wire_header h;
  int fds[max_passed_fds] = {-1, -1, -1};
  auto ok = recv_header(c.fd(), h, fds);
  set_timeout(c.fd(), SO_RCVTIMEO, 0);
  auto close_fds = [&fds] {
    for (int fd : fds)
      if (fd >= 0)
        ::close(fd);
  };
  if (!ok) {
    close_fds();
    return caf::make_error(errc::peer_down, "road: no hello");
  }
  if (auto err = check_header(h); err || h.op != uint8_t(road_op::hello)) {
    close_fds();
    return err ? err
               : caf::make_error(errc::malformed_message,
                                 "road: first message is not hello");
  }
  if (h.flags != 0 &&
      (c.kind() != road_kind::tcp || !pairing || h.id == 0 ||
       (h.flags != hello_replies_apart && h.flags != hello_reply_conn))) {
    close_fds();
    return caf::make_error(errc::malformed_message, "road: hello flags",
                           static_cast<uint32_t>(h.flags));
  }
  auto timeout = std::chrono::milliseconds{timeout_ms};
  auto gone = [&c] { // closed here, or the peer ended its side
    pollfd p{c.fd(), POLLRDHUP, 0};
    return c.closed() ||
           (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP)));
  };
  if (h.flags == hello_reply_conn) { // our socket is another's reply socket
    close_fds();
    if (!pairing->offer(h.id, c.fd(), peer_ipv4(c.fd()), timeout, gone))
      return caf::make_error(errc::peer_down,
                             "road: a reply connection nobody took");
    handed_over = true;
    return caf::none;
  }
  if (h.flags == hello_replies_apart) {
    close_fds();
    auto fd = pairing->take(h.id, peer_ipv4(c.fd()), timeout, gone);
    if (!fd)
      return std::move(fd.error());
    c.use_reply_socket(*fd, false);
  }
  if (c.kind() == road_kind::shm && h.offset > 0) {
    struct stat st[2];
    bool sane = fds[0] >= 0 && fds[1] >= 0 && h.offset <= max_ring_bytes &&
                h.offset % 4096 == 0;
    for (int i = 0; sane && i < 2; ++i) {
      auto seals = ::fcntl(fds[i], F_GET_SEALS);
      sane = ::fstat(fds[i], &st[i]) == 0 &&
             static_cast<uint64_t>(st[i].st_size) == h.offset && seals >= 0 &&
             (seals & F_SEAL_SHRINK) != 0;
    }
    // One memfd as both rings: we would read in place what we write.
    sane =
        sane && !(st[0].st_dev == st[1].st_dev && st[0].st_ino == st[1].st_ino);
    // Worker writes c2s (fds[0]) and reads s2c (fds[1]); we answer on the
    // reply socket (fds[2]).
    auto err = sane ? c.map_rings(fds[1], fds[0], h.offset)
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
    close_fds();
    if (err)
      return err;
  } else {
    close_fds();
  }
  wire_header ack;
  ack.op = static_cast<uint8_t>(road_op::hello);
  ack.flags = h.flags; // the worker checks we answer where it asked
  std::vector<iovec> iov{{&ack, sizeof(ack)}};
  return send_all(c.fd(), iov);
}

caf::expected<std::unique_ptr<road_listener>>
road_listener::start(const std::string& host, uint16_t port,
                     uint32_t send_timeout_ms, road_handler on_msg) {
  std::unique_ptr<road_listener> l{new road_listener};
  l->send_timeout_ms_ = send_timeout_ms;
  l->pairing_ = std::make_shared<road_pairing>();
  l->on_msg_ = std::move(on_msg);
  auto sa = ipv4_of(host, port);
  if (!sa)
    return std::move(sa.error());
  l->tcp_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(l->tcp_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  socklen_t len = sizeof(*sa);
  if (l->tcp_fd_ < 0 ||
      ::bind(l->tcp_fd_, reinterpret_cast<sockaddr*>(&*sa), len) != 0 ||
      ::listen(l->tcp_fd_, 64) != 0 ||
      ::getsockname(l->tcp_fd_, reinterpret_cast<sockaddr*>(&*sa), &len) != 0)
    return caf::make_error(errc::invalid_config, "road: cannot listen on",
                           host + ":" + std::to_string(port),
                           std::string{strerror(errno)});
  l->info_.port = ntohs(sa->sin_port);
  l->info_.machine = road_machine_id();
  // The shm road's socket: abstract, so nothing is left on disk.
  auto name = "troupe-road-" + std::to_string(::getpid()) + "-" +
              std::to_string(l->info_.port);
  sockaddr_un ua;
  auto ulen = abstract_addr(name, ua);
  l->unix_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (l->unix_fd_ >= 0 &&
      ::bind(l->unix_fd_, reinterpret_cast<sockaddr*>(&ua), ulen) == 0 &&
      ::listen(l->unix_fd_, 64) == 0) {
    l->info_.socket = name;
  } else {
    TROUPE_LOG(warning, "road",
               "no shared-memory road (unix socket: ", strerror(errno),
               "); TCP only");
    if (l->unix_fd_ >= 0)
      ::close(l->unix_fd_);
    l->unix_fd_ = -1;
  }
  l->wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (l->wake_fd_ < 0)
    return sys_error("road: eventfd");
  l->acceptor_ = std::thread{[p = l.get()] { p->accept_loop(); }};
  return l;
}

road_listener::~road_listener() {
  uint64_t one = 1;
  if (acceptor_.joinable()) {
    if (::write(wake_fd_, &one, sizeof(one)) < 0)
      TROUPE_LOG(warning, "road", "cannot wake the acceptor");
    acceptor_.join();
  }
  for (int fd : {tcp_fd_, unix_fd_, wake_fd_})
    if (fd >= 0)
      ::close(fd);
  std::vector<road_conn_ptr> conns;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    conns.swap(conns_);
  }
  for (auto& c : conns)
    c->close();
}

size_t road_listener::reply_connections_waiting() const {
  return pairing_->offered();
}

size_t road_listener::connections() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return static_cast<size_t>(
      std::count_if(conns_.begin(), conns_.end(),
                    [](const road_conn_ptr& c) { return !c->closed(); }));
}

void road_listener::accept_loop() {
  for (;;) {
    pollfd ps[3] = {
        {wake_fd_, POLLIN, 0}, {tcp_fd_, POLLIN, 0}, {unix_fd_, POLLIN, 0}};
    auto n = ::poll(ps, unix_fd_ >= 0 ? 3 : 2, -1);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 || (ps[0].revents & POLLIN))
      return;
    if (ps[1].revents & POLLIN)
      accept_one(tcp_fd_, road_kind::tcp);
    if (unix_fd_ >= 0 && (ps[2].revents & POLLIN))
      accept_one(unix_fd_, road_kind::shm);
  }
}

namespace {

/// True if the process at the other end of unix socket `fd` runs as our
/// user (or as root). Any process of the network namespace can reach the
/// abstract socket of the shm road.
bool same_user(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
    return false;
  return cred.uid == ::geteuid() || cred.uid == 0;
}

} // namespace

void road_listener::accept_one(int lfd, road_kind kind) {
  int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) {
      TROUPE_LOG(warning, "road", "cannot accept: ", strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds{50});
    }
    return;
  }
  if (connections() >= max_connections) {
    TROUPE_LOG(warning, "road", "refused a connection: already ",
               max_connections);
    ::close(fd);
    return;
  }
  if (kind == road_kind::shm && !same_user(fd)) {
    TROUPE_LOG(warning, "road", "refused a shared-memory connection from",
               " another user: its rings would be read in place, and it",
               " could change them as they are read");
    ::close(fd);
    return;
  }
  try {
    start_conn(fd, kind);
  } catch (const std::exception& e) { // no thread or memory left
    TROUPE_LOG(warning, "road", "refused a connection: ", e.what());
  }
}

namespace {

/// A connection that owns `fd`; closes it if none could be made.
road_conn_ptr adopt(int fd, road_kind kind, uint32_t send_timeout_ms) {
  try {
    return std::make_shared<road_conn>(fd, kind, send_timeout_ms);
  } catch (...) {
    ::close(fd); // the connection never owned it
    throw;
  }
}

} // namespace

void road_listener::start_conn(int fd, road_kind kind) {
  auto c = adopt(fd, kind, send_timeout_ms_);
  // The hello is read on the connection's own thread: a silent peer holds
  // up no one else. `this` outlives the handler: ~road_listener joins the
  // reader of every connection it still holds.
  std::lock_guard<std::mutex> guard{mtx_};
  c->start_accepted(
      send_timeout_ms_, on_msg_,
      [this](uint64_t serial, const caf::error& err) {
        if (err)
          TROUPE_LOG(debug, "road", "worker connection ended: ", describe(err));
        forget(serial);
      },
      pairing_);
  conns_.push_back(std::move(c));
}

void road_listener::forget(uint64_t serial) {
  road_conn_ptr gone; // released after the lock
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = std::find_if(
      conns_.begin(), conns_.end(),
      [serial](const road_conn_ptr& x) { return x->serial() == serial; });
  if (i != conns_.end()) {
    gone = std::move(*i);
    conns_.erase(i);
  }
}

// -- worker side
// -----------------------------------------------------------------------

namespace {

/// What is left until `deadline`, at least 1 ms (0 would wait forever).
uint32_t ms_left(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<uint32_t>(std::max<int64_t>(left.count(), 1));
}

/// Sends the hello of tcp connection `c`, which asks the server to answer
/// on a second connection, then dials that one (to `addr`, by `deadline`)
/// and gives it to `c` to read: each direction gets a socket of its own
/// (see hello_replies_apart).
caf::error
dial_reply_connection(road_conn& c, wire_header& hello, const sockaddr_in& addr,
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
                           sizeof(addr), ms_left(deadline));
  if (!fd)
    return std::move(fd.error());
  no_delay(*fd);
  keep_alive(*fd); // we only read it: a vanished server must still end it
  c.use_reply_socket(*fd, true); // c owns it now
  wire_header mine = hello;
  mine.flags = hello_reply_conn;
  std::vector<iovec> riov{{&mine, sizeof(mine)}};
  return send_all(*fd, riov);
}

} // namespace

caf::expected<road_conn_ptr> road_dial(const std::string& host,
                                       const road_info& info, road_kind want,
                                       size_t ring_bytes, uint32_t timeout_ms,
                                       road_handler on_msg,
                                       road_down_handler on_down) {
  if (want == road_kind::middleman || info.port == 0)
    return caf::make_error(errc::not_connected, "no fast road to", host);
  bool shm = want == road_kind::shm && !info.socket.empty() &&
             info.machine == road_machine_id() && ring_bytes > 0;
  auto dial_ms = std::min(timeout_ms, road_dial_deadline_ms);
  auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds{dial_ms};
  caf::expected<int> fd{-1};
  std::optional<sockaddr_in> tcp_addr; // where the reply connection goes
  if (shm) {
    sockaddr_un ua;
    auto len = abstract_addr(info.socket, ua);
    fd = connect_with_timeout(AF_UNIX, reinterpret_cast<sockaddr*>(&ua), len,
                              dial_ms);
    if (!fd) {
      TROUPE_LOG(warning, "road", "shared-memory road to ", host, " failed (",
                 describe(fd.error()), "): using TCP");
      shm = false;
    }
  }
  if (!shm) {
    deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds{dial_ms};
    auto sa = ipv4_of(host, info.port);
    if (!sa)
      return std::move(sa.error());
    fd = connect_with_timeout(AF_INET, reinterpret_cast<sockaddr*>(&*sa),
                              sizeof(*sa), dial_ms);
    if (!fd)
      return std::move(fd.error());
    tcp_addr = *sa;
  }
  road_conn_ptr c;
  try {
    c = adopt(*fd, shm ? road_kind::shm : road_kind::tcp, timeout_ms);
  } catch (const std::exception& e) { // no memory for it
    return caf::make_error(errc::not_connected, "road: no connection to", host,
                           e.what());
  }
  wire_header hello;
  hello.op = static_cast<uint8_t>(road_op::hello);
  std::vector<iovec> iov{{&hello, sizeof(hello)}};
  caf::error err;
  if (shm) {
    ring_bytes = (ring_bytes + 4095) & ~size_t{4095};
    auto c2s = make_ring_fd(ring_bytes);
    auto s2c = make_ring_fd(ring_bytes);
    int reply[2] = {-1, -1}; // ours, the server's
    if (!c2s || !s2c)
      err = c2s ? s2c.error() : c2s.error();
    else if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, reply) != 0)
      err = sys_error("road: reply socket");
    else if ((err = c->map_rings(*c2s, *s2c, ring_bytes)))
      for (int fd : reply) // no out space: a half-mapped ring stays unused
        ::close(fd);
    if (!err) {
      c->use_reply_socket(reply[0], true);
      hello.offset = ring_bytes;
      err = send_all(c->fd(), iov, {*c2s, *s2c, reply[1]});
      ::close(reply[1]); // the server's now: its end closes with it
    } else {
      TROUPE_LOG(warning, "road", "no rings for the shm road to ", host, " (",
                 describe(err), "): frames go on the socket");
      err = send_all(c->fd(), iov); // no rings: frames go inline
    }
    for (auto* x : {&c2s, &s2c})
      if (*x)
        ::close(**x); // the mappings keep the rings
  } else if (replies_apart.load(std::memory_order_relaxed)) {
    err = dial_reply_connection(*c, hello, *tcp_addr, deadline);
  } else {
    err = send_all(c->fd(), iov);
  }
  wire_header ack;
  set_timeout(c->fd(), SO_RCVTIMEO, ms_left(deadline));
  if (!err && (!recv_all(c->fd(), &ack, sizeof(ack)) ||
               ack.magic != wire_magic || ack.op != hello.op))
    err = caf::make_error(errc::not_connected, "road: no hello from", host);
  if (!err && ack.flags != hello.flags) // a server that answers elsewhere
    err = caf::make_error(errc::not_connected, "road: the server at", host,
                          "does not answer on a reply connection (an older"
                          " build?): start workers with --road.single-conn");
  set_timeout(c->fd(), SO_RCVTIMEO, 0);
  if (err) {
    c->close();
    return err;
  }
  c->start(std::move(on_msg), std::move(on_down));
  return c;
}

} // namespace troupe
