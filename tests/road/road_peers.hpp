// Both ends of the fast road for tests without actors: an echoing
// road_listener, a dialled connection whose replies wait in an inbox (or
// whose caller reads them itself), frames filled with a pattern, and a
// raw socket that plays a broken peer.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "tests/test_support.hpp"

#include "actors/road/road.hpp"
#include "messages/errors.hpp"
#include "tests/road/road_traces.hpp"
#include "tests/test_road_key.hpp"

namespace troupe::test {

using namespace std::chrono_literals;

/// Every wait of the road tests gives up after this long.
constexpr uint32_t road_timeout_ms = 20000;

/// Frames below this size go inline even on the shm road
/// (actors/road/road_internal.hpp).
constexpr size_t min_ring_frame = 16 * 1024;

/// Messages read by a dialled connection, until the test takes them. The
/// handlers hold it weakly: a message holds its connection, which holds the
/// handlers, and a strong reference would keep all of them alive.
struct inbox {
  std::mutex mtx;
  std::condition_variable cv;
  std::map<uint64_t, road_message_ptr> by_id;
  bool down = false;
  std::string why; // of `down`

  static road_handler on_msg(const std::shared_ptr<inbox>& box) {
    return [weak = std::weak_ptr<inbox>{box}](road_message_ptr m) {
      if (auto self = weak.lock()) {
        std::lock_guard<std::mutex> guard{self->mtx};
        auto id = m->id;
        self->by_id[id] = std::move(m);
        self->cv.notify_all();
      }
    };
  }

  static road_down_handler on_down(const std::shared_ptr<inbox>& box) {
    return [weak = std::weak_ptr<inbox>{box}](uint64_t, const caf::error& err) {
      if (auto self = weak.lock()) {
        std::lock_guard<std::mutex> guard{self->mtx};
        self->down = true;
        self->why = describe(err);
        self->cv.notify_all();
      }
    };
  }

  /// The message with `id`, or null if the connection ended or time ran out.
  road_message_ptr
  take(uint64_t id, std::chrono::milliseconds limit = road_timeout_ms * 1ms) {
    std::unique_lock<std::mutex> guard{mtx};
    cv.wait_for(guard, limit, [this, id] { return down || by_id.count(id); });
    auto i = by_id.find(id);
    if (i == by_id.end())
      return nullptr;
    auto m = std::move(i->second);
    by_id.erase(i);
    return m;
  }

  /// Waits until the connection reports its end; false on timeout.
  bool wait_down(std::chrono::milliseconds limit = road_timeout_ms * 1ms) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, limit, [this] { return down; });
  }

  /// Why the connection ended, or "".
  std::string reason() {
    std::lock_guard<std::mutex> guard{mtx};
    return why;
  }

  void clear() {
    std::lock_guard<std::mutex> guard{mtx};
    by_id.clear();
  }
};

/// A listener whose handler answers each request with its own bytes; its
/// connections poll as `settings` say.
inline std::unique_ptr<road_listener>
start_echo_listener(uint32_t send_timeout_ms = road_timeout_ms,
                    road_settings settings = {}) {
  auto l =
      road_listener::start("127.0.0.1", 0, send_timeout_ms, settings,
                           test_keys(), [](road_message_ptr m) {
                             m->conn->send(road_op::reply, m->id, m->bytes);
                           });
  BOOST_REQUIRE_MESSAGE(l, "listener: " << why(l));
  BOOST_REQUIRE((*l)->info().port != 0);
  BOOST_REQUIRE(!(*l)->info().socket.empty());
  return std::move(*l);
}

/// A dialled connection and the inbox of its replies.
struct road_client {
  std::shared_ptr<inbox> box = std::make_shared<inbox>();
  road_conn_ptr conn;

  road_client(const road_listener& l, road_kind want, size_t ring_bytes,
              uint32_t timeout_ms = road_timeout_ms,
              road_settings settings = {},
              const road_credential& cred = test_member()) {
    auto c = road_dial("127.0.0.1", l.info(), want, ring_bytes, timeout_ms,
                       settings, cred, inbox::on_msg(box), inbox::on_down(box));
    BOOST_REQUIRE_MESSAGE(c, "dial: " << why(c));
    conn = std::move(*c);
  }

  ~road_client() {
    if (conn)
      conn->close();
  }
};

/// Deterministic words: the contents of frame `seed`.
inline std::vector<uint64_t> pattern(size_t bytes, uint64_t seed) {
  BOOST_REQUIRE(bytes % 8 == 0);
  std::vector<uint64_t> out(bytes / 8);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull;
  for (auto& w : out) { // xorshift64*: cheap enough for 256 MiB
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    w = (x + 1) * 0x2545f4914f6cdd1dull;
  }
  return out;
}

inline bytes_view view_of(const std::vector<uint64_t>& words) {
  return {reinterpret_cast<const uint8_t*>(words.data()), words.size() * 8};
}

/// True if `m` carries exactly the bytes of `words`.
inline bool same_bytes(const road_message& m,
                       const std::vector<uint64_t>& words) {
  auto want = view_of(words);
  return m.bytes.size == want.size &&
         (want.size == 0 ||
          std::memcmp(m.bytes.data, want.data, want.size) == 0);
}

/// A dialled connection whose handler notes the thread each message was
/// handed over on, beside the usual inbox.
struct traced_client {
  std::shared_ptr<inbox> box = std::make_shared<inbox>();
  std::shared_ptr<std::map<uint64_t, std::thread::id>> threads =
      std::make_shared<std::map<uint64_t, std::thread::id>>();
  road_conn_ptr conn;

  /// `timeout_ms` bounds the connection's sends (and a caller's reads);
  /// its reader and callers poll as `settings` say.
  traced_client(const road_listener& l, road_kind want,
                uint32_t timeout_ms = road_timeout_ms,
                road_settings settings = {}) {
    auto put = inbox::on_msg(box);
    auto seen = threads;
    auto box_ = box;
    auto c = road_dial(
        "127.0.0.1", l.info(), want, 8u << 20, timeout_ms, settings,
        test_member(),
        [put, seen, box_](road_message_ptr m) {
          {
            std::lock_guard<std::mutex> guard{box_->mtx}; // guards `seen` too
            (*seen)[m->id] = std::this_thread::get_id();
          }
          put(std::move(m));
        },
        inbox::on_down(box));
    BOOST_REQUIRE_MESSAGE(c, "dial: " << why(c));
    conn = std::move(*c);
  }

  ~traced_client() {
    if (conn)
      conn->close();
  }

  /// The thread message `id` was handed over on.
  std::thread::id thread_of(uint64_t id) {
    std::lock_guard<std::mutex> guard{box->mtx};
    return threads->count(id) ? threads->at(id) : std::thread::id{};
  }

  /// Sends `words` as request `id` of a blocking caller, which claims the
  /// road to read its reply.
  void send_as_caller(uint64_t id, const std::vector<uint64_t>& words) {
    road_caller_scope scope;
    BOOST_REQUIRE(!conn->send(road_op::pull, id, view_of(words)));
    BOOST_REQUIRE(scope.claim_only_conn() == conn);
  }

  /// Sends request `id` as a blocking caller, then reads the road here
  /// until its reply came (true) or the reader thread still has the road,
  /// in which case the reply comes from it (false).
  bool call(uint64_t id) {
    std::vector<uint64_t> words{id, id + 1};
    send_as_caller(id, words);
    // As kv's calls do, ask for the road at least once, even if the reader
    // thread was quicker with this reply.
    bool here = false;
    for (int i = 0; i < 5000; ++i) {
      if (!conn->pump_once(std::chrono::milliseconds{2}))
        break;
      here = true;
      if (thread_of(id) != std::thread::id{})
        break;
    }
    conn->caller_done();
    auto m = box->take(id);
    BOOST_REQUIRE_MESSAGE(m, "no reply to " << id << ": " << box->reason());
    BOOST_CHECK(same_bytes(*m, words));
    return here && thread_of(id) == std::this_thread::get_id();
  }

  /// Calls until a reply is read on this thread (the reader thread has
  /// left the road); returns the next free id.
  uint64_t until_callers_read(uint64_t id) {
    bool here = false;
    for (int i = 0; i < 50 && !here; ++i)
      here = call(id++);
    BOOST_REQUIRE_MESSAGE(here, "the reader thread never left the road");
    return id;
  }
};

// -- raw peers ----------------------------------------------------------------

/// The 40-byte wire header (actors/road/road_internal.hpp), to play a
/// broken peer.
struct raw_header {
  uint32_t magic = 0x31505254; // "TRP1"
  uint8_t op = 1;              // hello
  uint8_t in_ring = 0;
  uint16_t flags = 0; // tcp hello: 1 answer on a reply connection, 2 it is one
  uint32_t zero2 = 0;
  uint32_t zero3 = 0;
  uint64_t id = 0;
  uint64_t bytes = 0;
  uint64_t offset = 0;
};
static_assert(sizeof(raw_header) == 40);

/// A plain socket to the listener's TCP port or its abstract unix socket.
struct raw_peer {
  int fd = -1;

  /// `from`: the local IPv4 address a tcp peer connects from. A
  /// `member` first proves itself (road_auth.hpp) as worker 0 of the test
  /// key; a stranger sends only what the test writes.
  raw_peer(const road_listener& l, bool unix_socket,
           const char* from = "127.0.0.1", bool member = true) {
    if (unix_socket) {
      sockaddr_un sa{};
      sa.sun_family = AF_UNIX;
      auto& name = l.info().socket;
      std::memcpy(sa.sun_path + 1, name.data(), name.size());
      fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                        name.size());
      BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0);
    } else {
      sockaddr_in sa{};
      sa.sin_family = AF_INET;
      sa.sin_port = htons(l.info().port);
      sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in local{};
      local.sin_family = AF_INET;
      BOOST_REQUIRE(::inet_pton(AF_INET, from, &local.sin_addr) == 1);
      BOOST_REQUIRE(
          ::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) == 0);
      BOOST_REQUIRE(
          ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0);
    }
    if (member) {
      auto err = prove_member(fd, test_member(),
                              std::chrono::steady_clock::now() + 10s);
      BOOST_REQUIRE_MESSAGE(!err, "handshake: " << describe(err));
    }
  }
  ~raw_peer() { ::close(fd); }

  void write(const void* data, size_t n) {
    BOOST_REQUIRE_EQUAL(::send(fd, data, n, MSG_NOSIGNAL), ssize_t(n));
  }

  /// Sends `h` with the descriptors `fds` (SCM_RIGHTS), as an shm hello.
  void write_with_fds(const raw_header& h, const std::vector<int>& fds) {
    iovec iov{const_cast<raw_header*>(&h), sizeof(h)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char ctrl[CMSG_SPACE(4 * sizeof(int))];
    BOOST_REQUIRE(fds.size() <= 4);
    msg.msg_control = ctrl;
    msg.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    auto* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
    BOOST_REQUIRE_EQUAL(::sendmsg(fd, &msg, MSG_NOSIGNAL), ssize_t(sizeof(h)));
  }

  /// Sends the header of push `id`, a frame of `bytes`, and none of it.
  void begin_push(uint64_t bytes, uint64_t id = 1) {
    raw_header h;
    h.op = uint8_t(road_op::push);
    h.id = id;
    h.bytes = bytes;
    write(&h, sizeof(h));
  }

  /// Sends hello and reads the listener's hello.
  void handshake() {
    raw_header h;
    write(&h, sizeof(h));
    raw_header ack;
    BOOST_REQUIRE_EQUAL(::recv(fd, &ack, sizeof(ack), MSG_WAITALL),
                        ssize_t(sizeof(ack)));
    BOOST_REQUIRE_EQUAL(ack.magic, h.magic);
    BOOST_REQUIRE_EQUAL(ack.op, 1);
  }

  /// True once the listener closed the connection (EOF or reset).
  bool dropped(std::chrono::milliseconds limit = 10s) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0)
        return false;
      char buf[64];
      auto n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET))
        return true;
    }
  }
};

/// A ring as road_dial makes one: a memfd of `bytes`, sealed against
/// shrinking and growing. The caller closes it.
inline int sealed_memfd(size_t bytes) {
  int fd = ::memfd_create("test-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  BOOST_REQUIRE(fd >= 0);
  BOOST_REQUIRE(::ftruncate(fd, off_t(bytes)) == 0);
  BOOST_REQUIRE(
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0);
  return fd;
}

/// A raw peer on the listener's unix socket that sent an shm hello: rings
/// `c2s` and `s2c` (memfds of `ring` bytes, closed once sent) and the other
/// end of a socketpair as the reply socket, whose end `replies` it keeps.
struct raw_shm_peer {
  raw_peer peer;
  int replies = -1;

  raw_shm_peer(const road_listener& l, size_t ring, int c2s, int s2c)
      : peer{l, true} {
    raw_header h;
    h.offset = ring;
    int pair[2] = {-1, -1};
    BOOST_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
    peer.write_with_fds(h, {c2s, s2c, pair[1]});
    ::close(pair[1]);
    ::close(c2s);
    if (s2c != c2s)
      ::close(s2c);
    replies = pair[0];
  }
  ~raw_shm_peer() { ::close(replies); }
  raw_shm_peer(const raw_shm_peer&) = delete;
  raw_shm_peer& operator=(const raw_shm_peer&) = delete;

  /// Reads the hello's answer, which comes on the connection.
  void read_hello() {
    raw_header ack;
    BOOST_REQUIRE_EQUAL(::recv(peer.fd, &ack, sizeof(ack), MSG_WAITALL),
                        ssize_t(sizeof(ack)));
    BOOST_REQUIRE_EQUAL(ack.op, 1);
  }
};

/// Polls until the listener counts `n` live connections.
inline bool await_connections(const road_listener& l, size_t n) {
  return poll_until([&l, n] { return l.connections() == n; }, 10s);
}

} // namespace troupe::test
