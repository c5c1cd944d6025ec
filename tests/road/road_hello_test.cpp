// A road's hello and the peers that get it wrong: garbage, bad headers,
// tcp reply connections that pair with nothing, shm hellos without proper
// rings or reply socket, and connections from another user.
#define BOOST_TEST_MODULE road_hello_tests
#include <boost/test/unit_test.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/base/log.hpp"
#include "actors/road/road.hpp"
#include "tests/road/road_checks.hpp"
#include "tests/road/road_peers.hpp"

using namespace troupe;
using namespace troupe::test;

BOOST_TEST_GLOBAL_FIXTURE(log_level_from_env);

namespace {

/// One byte with room for one descriptor (SCM_RIGHTS): a socket passed
/// between processes.
struct one_fd_message {
  char byte = 1;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  one_fd_message() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctl;
    msg.msg_controllen = sizeof(ctl);
  }
  one_fd_message(const one_fd_message&) = delete;
  one_fd_message& operator=(const one_fd_message&) = delete;
  /// Puts `fd` in, to send.
  void put(int fd) {
    auto* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cm), &fd, sizeof(int));
  }
  /// The descriptor received, or -1.
  int fd() {
    auto* cm = CMSG_FIRSTHDR(&msg);
    int out = -1;
    if (cm && cm->cmsg_type == SCM_RIGHTS)
      std::memcpy(&out, CMSG_DATA(cm), sizeof(int));
    return out;
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(road_hello_tests)

// -- broken peers -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_peer_sending_garbage_is_dropped_and_others_go_on) {
  auto l = start_echo_listener();
  road_client good{*l, road_kind::tcp, 0};
  echo_one(good, 1, 1024);
  const char junk[] = "GET / HTTP/1.1\r\nHost: troupe\r\n\r\nnot a road peer!";
  static_assert(sizeof(junk) >= sizeof(raw_header));
  for (bool unix_socket : {false, true}) {
    raw_peer bad{*l, unix_socket};
    bad.write(junk, sizeof(junk));
    BOOST_CHECK_MESSAGE(bad.dropped(), "garbage on "
                                           << (unix_socket ? "unix" : "tcp")
                                           << " was not dropped");
    echo_one(good, 2 + unix_socket, 4096);
  }
  BOOST_CHECK_EQUAL(l->connections(), 1u);
}

BOOST_AUTO_TEST_CASE(a_flood_of_garbage_peers_gives_a_few_lines_naming_them) {
  // At bc0f027, 20,000 malformed frames gave 20,000 lines, and none named
  // the peer. Now each line names it, and at most 5 per 10 s are written.
  set_log_level("warning");
  auto lines = std::make_shared<std::vector<std::string>>();
  auto mtx = std::make_shared<std::mutex>();
  set_log_observer(
      [lines, mtx](log_level, const std::string&, const std::string& what) {
        std::lock_guard<std::mutex> guard{*mtx};
        lines->push_back(what);
      });
  auto l = start_echo_listener();
  const char junk[] = "GET / HTTP/1.1\r\nHost: troupe\r\n\r\nnot a road peer!";
  for (int i = 0; i < 50; ++i) {
    raw_peer bad{*l, false};
    bad.write(junk, sizeof(junk));
    BOOST_REQUIRE(bad.dropped());
  }
  set_log_observer({});
  std::lock_guard<std::mutex> guard{*mtx};
  BOOST_CHECK_LE(lines->size(), 5u);
  BOOST_CHECK(!lines->empty()); // the case before used 2 of the 5
  for (auto& x : *lines)
    BOOST_CHECK_MESSAGE(x.find("from 127.0.0.1:") != std::string::npos, x);
}

BOOST_AUTO_TEST_CASE(a_bad_header_after_hello_ends_only_that_connection) {
  auto l = start_echo_listener();
  road_client good{*l, road_kind::shm, 1u << 20};
  struct bad_case {
    const char* what;
    raw_header h;
  };
  std::vector<bad_case> cases(6);
  cases[0].what = "bad magic";
  cases[0].h.magic = 0xdeadbeef;
  cases[1].what = "unknown op";
  cases[1].h.op = 99;
  cases[2].what = "frame not a multiple of 8";
  cases[2].h.op = uint8_t(road_op::push);
  cases[2].h.bytes = 12;
  cases[3].what = "frame above the limit";
  cases[3].h.op = uint8_t(road_op::push);
  cases[3].h.bytes = uint64_t{1} << 40;
  cases[4].what = "ring frame without rings";
  cases[4].h.op = uint8_t(road_op::push);
  cases[4].h.in_ring = 1;
  cases[4].h.bytes = 64;
  cases[5].what = "release of a ring region not in use";
  cases[5].h.op = uint8_t(road_op::release);
  cases[5].h.bytes = 64;
  uint64_t id = 1;
  for (auto& c : cases) {
    BOOST_TEST_MESSAGE(c.what);
    raw_peer bad{*l, false};
    bad.handshake();
    BOOST_REQUIRE(await_connections(*l, 2));
    bad.write(&c.h, sizeof(c.h));
    BOOST_CHECK_MESSAGE(bad.dropped(), c.what << ": not dropped");
    BOOST_CHECK_MESSAGE(await_connections(*l, 1), c.what);
    echo_one(good, id++, 64u << 10);
  }
}

BOOST_AUTO_TEST_CASE(a_member_that_stalls_mid_frame_is_dropped) {
  // At bc0f027 a peer could send a frame's header and a part of it, and so
  // hold a buffer as large as the frame for good. Now the frame must keep
  // coming: a stall as long as the send timeout ends the connection.
  auto l = start_echo_listener(500);
  road_client good{*l, road_kind::tcp, 0};
  raw_peer bad{*l, false};
  bad.handshake();
  bad.begin_push(1u << 20);
  std::vector<char> part(4096, 0);
  bad.write(part.data(), part.size());
  BOOST_CHECK_MESSAGE(bad.dropped(), "a stalled frame held its connection");
  echo_one(good, 1, 1024);
}

BOOST_AUTO_TEST_CASE(a_unix_hello_that_claims_rings_without_them_is_refused) {
  auto l = start_echo_listener();
  raw_peer bad{*l, true};
  raw_header h;
  h.offset = 1u << 20; // ring bytes, but no descriptors come with it
  bad.write(&h, sizeof(h));
  BOOST_CHECK(bad.dropped());
  BOOST_CHECK_EQUAL(l->connections(), 0u);
  road_client good{*l, road_kind::shm, 1u << 20};
  echo_one(good, 1, 64u << 10);
}

// -- tcp reply connections ----------------------------------------------------

BOOST_AUTO_TEST_CASE(a_tcp_road_answers_on_a_reply_connection_of_its_own) {
  auto l = start_echo_listener();
  for (bool apart : {true, false}) {
    road_settings settings;
    settings.single_conn = !apart;
    {
      road_client c{*l, road_kind::tcp, 0, road_timeout_ms, settings};
      BOOST_CHECK_EQUAL(c.conn->has_reply_socket(), apart);
      auto errors = echo_concurrently(c, 4, 8, 16);
      BOOST_CHECK_MESSAGE(errors.empty(), "apart " << apart << ": " << errors);
      // The reply connection, handed over, counts as none of its own.
      BOOST_CHECK(await_connections(*l, 1));
    }
    BOOST_CHECK(await_connections(*l, 0));
  }
}

namespace {

/// A tcp hello as a raw peer writes it: `flags` 1 asks for answers on a
/// reply connection, 2 says this is one; both carry `token`.
raw_header tcp_hello(uint16_t flags, uint64_t token) {
  raw_header h;
  h.flags = flags;
  h.id = token;
  return h;
}

/// Polls until no reply connection waits at `l` for its pair.
bool no_reply_connection_waits(const road_listener& l) {
  return poll_until([&l] { return l.reply_connections_waiting() == 0; }, 10s);
}

/// A hello that pairs with nothing, from a raw peer.
struct unpaired_hello {
  const char* what;
  bool unix_socket;
  uint16_t flags;
  uint64_t token;
};

/// Sends hello `c` and checks that `l` drops it and keeps nothing of it.
void expect_unpaired_hello_refused(road_listener& l, const unpaired_hello& c) {
  BOOST_TEST_MESSAGE(c.what);
  raw_peer bad{l, c.unix_socket};
  auto h = tcp_hello(c.flags, c.token);
  bad.write(&h, sizeof(h));
  BOOST_CHECK_MESSAGE(bad.dropped(), c.what << ": not dropped");
  BOOST_CHECK_MESSAGE(await_connections(l, 0), c.what);
  BOOST_CHECK(no_reply_connection_waits(l));
}

/// A reply connection from another address than the connection that
/// announced it: refused, both of them.
void expect_pair_across_hosts_refused(road_listener& l) {
  raw_peer first{l, false};
  auto h = tcp_hello(1, 5151);
  first.write(&h, sizeof(h));
  raw_peer other{l, false, "127.0.0.2"};
  h.flags = 2;
  other.write(&h, sizeof(h));
  BOOST_CHECK_MESSAGE(first.dropped(), "paired with another host");
  BOOST_CHECK_MESSAGE(other.dropped(), "taken by another host");
  BOOST_CHECK(await_connections(l, 0));
  BOOST_CHECK(no_reply_connection_waits(l));
}

/// Requests on `first` are answered on its reply connection `reply`.
void expect_answer_on_reply_connection(raw_peer& first, raw_peer& reply) {
  std::vector<uint64_t> words{7, 8, 9};
  raw_header req;
  req.op = static_cast<uint8_t>(road_op::pull);
  req.id = 5;
  req.bytes = words.size() * 8;
  first.write(&req, sizeof(req));
  first.write(words.data(), req.bytes);
  raw_header rep;
  BOOST_REQUIRE_EQUAL(::recv(reply.fd, &rep, sizeof(rep), MSG_WAITALL),
                      ssize_t(sizeof(rep)));
  BOOST_CHECK_EQUAL(rep.op, static_cast<uint8_t>(road_op::reply));
  BOOST_CHECK_EQUAL(rep.id, 5u);
  std::vector<uint64_t> back(words.size());
  BOOST_REQUIRE_EQUAL(::recv(reply.fd, back.data(), req.bytes, MSG_WAITALL),
                      ssize_t(req.bytes));
  BOOST_CHECK(back == words);
}

} // namespace

// A reply connection pairs with the connection whose hello announced it,
// by the random token both hellos carry; whatever does not pair is refused
// within the hello's timeout (1 s here), and nothing waits behind.
BOOST_AUTO_TEST_CASE(a_reply_connection_that_pairs_with_nothing_is_refused) {
  auto l = start_echo_listener(1000);
  for (auto c :
       {unpaired_hello{"a reply connection nobody announced", false, 2, 77},
        unpaired_hello{"an announced reply connection never dialled", false, 1,
                       78},
        unpaired_hello{"unknown hello flags", false, 3, 79},
        unpaired_hello{"a reply connection without a token", false, 2, 0},
        unpaired_hello{"hello flags on the shm road", true, 1, 80}})
    expect_unpaired_hello_refused(*l, c);
  expect_pair_across_hosts_refused(*l);
  // Two reply connections with one token: the second is refused at once
  // (well before this listener's 20 s hello timeout), the first pairs
  // with the connection that announced it.
  l = start_echo_listener(20000);
  auto h = tcp_hello(2, 4242);
  raw_peer reply{*l, false};
  reply.write(&h, sizeof(h));
  BOOST_REQUIRE(
      poll_until([&l] { return l->reply_connections_waiting() == 1; }, 10s));
  raw_peer twin{*l, false};
  twin.write(&h, sizeof(h));
  BOOST_CHECK_MESSAGE(twin.dropped(5s), "a second reply connection");
  raw_peer first{*l, false};
  h.flags = 1;
  first.write(&h, sizeof(h));
  raw_header ack;
  BOOST_REQUIRE_EQUAL(::recv(first.fd, &ack, sizeof(ack), MSG_WAITALL),
                      ssize_t(sizeof(ack)));
  BOOST_CHECK_EQUAL(ack.op, 1);
  BOOST_CHECK_EQUAL(ack.flags, 1); // answers on the reply connection
  BOOST_CHECK(no_reply_connection_waits(*l));
  expect_answer_on_reply_connection(first, reply);
  BOOST_CHECK(await_connections(*l, 1));
  road_client good{*l, road_kind::tcp, 0};
  echo_one(good, 1, 64u << 10);
}

// -- shm hellos ---------------------------------------------------------------

// An shm hello brings the two rings and the reply socket the server answers
// on; without a proper reply socket the server refuses the connection.
BOOST_AUTO_TEST_CASE(an_shm_hello_without_a_reply_socket_is_refused) {
  auto l = start_echo_listener();
  constexpr size_t ring = 1u << 20;
  struct bad_case {
    const char* what;
    bool third;  // pass a third descriptor
    bool socket; // ... that is a socket (a datagram one) or a memfd
  };
  for (auto c : {bad_case{"no reply socket", false, false},
                 bad_case{"a memfd as reply socket", true, false},
                 bad_case{"a datagram reply socket", true, true}}) {
    BOOST_TEST_MESSAGE(c.what);
    raw_peer bad{*l, true};
    raw_header h;
    h.offset = ring;
    std::vector<int> fds{sealed_memfd(ring), sealed_memfd(ring)};
    int pair[2] = {-1, -1};
    if (c.third && c.socket)
      BOOST_REQUIRE(::socketpair(AF_UNIX, SOCK_DGRAM, 0, pair) == 0);
    if (c.third)
      fds.push_back(c.socket ? pair[1] : sealed_memfd(ring));
    bad.write_with_fds(h, fds);
    for (int fd : fds)
      ::close(fd);
    if (pair[0] >= 0)
      ::close(pair[0]);
    BOOST_CHECK_MESSAGE(bad.dropped(), c.what << ": not dropped");
    BOOST_CHECK_MESSAGE(await_connections(*l, 0), c.what);
  }
  road_client good{*l, road_kind::shm, ring};
  BOOST_CHECK(good.conn->has_reply_socket());
  echo_one(good, 1, 64u << 10);
}

// The server reads the peer's ring in place and writes its own: one memfd
// passed as both would have it read what it writes.
BOOST_AUTO_TEST_CASE(an_shm_hello_with_one_memfd_as_both_rings_is_refused) {
  auto l = start_echo_listener();
  constexpr size_t ring = 1u << 20;
  {
    int one = sealed_memfd(ring);
    raw_shm_peer bad{*l, ring, one, one};
    BOOST_CHECK_MESSAGE(bad.peer.dropped(), "not dropped");
  }
  BOOST_CHECK(await_connections(*l, 0));
  road_client good{*l, road_kind::shm, ring};
  echo_one(good, 1, 64u << 10);
}

// Any process of the network namespace can reach the abstract socket of
// the shm road; the server reads its rings in place, and a peer could
// change them as they are read: only our own user (or root) may connect.
BOOST_AUTO_TEST_CASE(an_shm_connection_from_another_user_is_refused) {
  if (::geteuid() != 0) {
    BOOST_TEST_MESSAGE("not root: cannot connect as another user");
    return;
  }
  auto l = start_echo_listener();
  auto& name = l->info().socket;
  // A child that becomes user nobody connects and hands us the socket: the
  // server sees nobody at its other end (credentials are taken at
  // connect), and we speak on it as a member would.
  int pass[2] = {-1, -1};
  BOOST_REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pass) ==
                0);
  pid_t kid = ::fork();
  BOOST_REQUIRE(kid >= 0);
  if (kid == 0) { // only system calls here, then _exit
    if (::setgid(65534) != 0 || ::setuid(65534) != 0)
      ::_exit(2);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path + 1, name.data(), name.size());
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                      name.size());
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0)
      ::_exit(3);
    one_fd_message out;
    out.put(fd);
    ::_exit(::sendmsg(pass[1], &out.msg, 0) == 1 ? 0 : 4);
  }
  int st = 0;
  BOOST_REQUIRE_EQUAL(::waitpid(kid, &st, 0), kid);
  BOOST_REQUIRE(WIFEXITED(st));
  BOOST_REQUIRE_MESSAGE(WEXITSTATUS(st) == 0,
                        "the child: exit " << WEXITSTATUS(st));
  one_fd_message in;
  BOOST_REQUIRE_EQUAL(::recvmsg(pass[0], &in.msg, 0), 1);
  int fd = in.fd();
  BOOST_REQUIRE(fd >= 0);
  ::close(pass[0]);
  ::close(pass[1]);
  // The handshake and hello, as a member: the server must not answer.
  auto err =
      prove_member(fd, test_member(), std::chrono::steady_clock::now() + 10s);
  raw_header hello;
  bool answered = false;
  if (!err && ::send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) > 0) {
    timeval limit{road_timeout_ms / 1000, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    raw_header ack;
    answered =
        ::recv(fd, &ack, sizeof(ack), MSG_WAITALL) == ssize_t(sizeof(ack));
  }
  ::close(fd);
  BOOST_CHECK_MESSAGE(!answered, "another user's connection was answered");
  road_client good{*l, road_kind::shm, 1u << 20}; // ours still are
  echo_one(good, 1, 64u << 10);
}

BOOST_AUTO_TEST_SUITE_END()
