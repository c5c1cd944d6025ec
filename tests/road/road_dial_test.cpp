// Dialling a road and the faults around it: keepalive on a silent peer,
// a port that drops the dial, a server that answers no reply connection,
// closes from two threads, and a silent peer beside a good one.
#define BOOST_TEST_MODULE road_dial_tests
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>

#include "actors/road/road.hpp"
#include "tests/road/road_checks.hpp"
#include "tests/road/road_peers.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// A plain TCP socket listening on loopback with `backlog`, at `sa`.
int plain_listener(int backlog, sockaddr_in& sa) {
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  BOOST_REQUIRE(l >= 0);
  sa = sockaddr_in{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t n = sizeof(sa);
  BOOST_REQUIRE_EQUAL(::bind(l, reinterpret_cast<sockaddr*>(&sa), n), 0);
  BOOST_REQUIRE_EQUAL(::listen(l, backlog), 0);
  BOOST_REQUIRE_EQUAL(::getsockname(l, reinterpret_cast<sockaddr*>(&sa), &n),
                      0);
  return l;
}

} // namespace

BOOST_TEST_GLOBAL_FIXTURE(log_level_from_env);

BOOST_AUTO_TEST_SUITE(road_dial_tests)

BOOST_AUTO_TEST_CASE(tcp_roads_probe_a_peer_that_stays_silent) {
  // A peer whose machine vanished sends no FIN: keepalive ends the road.
  auto l = start_echo_listener();
  auto box = std::make_shared<inbox>();
  auto c = road_dial("127.0.0.1", l->info(), road_kind::tcp, 0, 2000,
                     road_settings{}, test_member(), inbox::on_msg(box),
                     inbox::on_down(box));
  BOOST_REQUIRE_MESSAGE(c, why(c));
  auto opt = [&](int fd, int level, int name) {
    int v = -1;
    socklen_t n = sizeof(v);
    BOOST_REQUIRE_EQUAL(::getsockopt(fd, level, name, &v, &n), 0);
    return v;
  };
  // Both sockets: the one we write and the reply connection we read.
  BOOST_REQUIRE((*c)->read_fd() != (*c)->fd());
  for (int fd : {(*c)->fd(), (*c)->read_fd()}) {
    BOOST_CHECK_EQUAL(opt(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    BOOST_CHECK_EQUAL(opt(fd, IPPROTO_TCP, TCP_KEEPIDLE),
                      road_keepalive_idle_s);
    BOOST_CHECK_EQUAL(opt(fd, IPPROTO_TCP, TCP_KEEPINTVL),
                      road_keepalive_gap_s);
    BOOST_CHECK_EQUAL(opt(fd, IPPROTO_TCP, TCP_KEEPCNT), road_keepalive_probes);
  }
  (*c)->close();
}

BOOST_AUTO_TEST_CASE(a_dial_to_a_port_that_drops_it_gives_up_at_its_deadline) {
  // A listener whose accept queue is full drops further SYNs, as a
  // firewall that lets CAF's port through but not the road's would: the
  // connect hangs. The dial gives up after road_dial_deadline_ms (2 s), not
  // after the 60 s its caller allows per request, so that CAF carries
  // that server's frames soon.
  sockaddr_in sa{};
  int l = plain_listener(0, sa); // room for one, never accepted
  socklen_t n = sizeof(sa);
  int first = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  BOOST_REQUIRE_EQUAL(::connect(first, reinterpret_cast<sockaddr*>(&sa), n),
                      0); // the queue is full now
  road_info info;
  info.port = ntohs(sa.sin_port);
  auto box = std::make_shared<inbox>();
  auto dial = std::async(std::launch::async, [&] {
    return road_dial("127.0.0.1", info, road_kind::tcp, 0, 60000,
                     road_settings{}, test_member(), inbox::on_msg(box),
                     inbox::on_down(box));
  });
  // Far past the deadline, far short of the 60 s.
  auto status = dial.wait_for(std::chrono::seconds{30});
  BOOST_CHECK_MESSAGE(status == std::future_status::ready,
                      "the dial still waits after 30 s");
  auto c = dial.get();
  BOOST_CHECK_MESSAGE(!c, "a dial to a port that drops it connected");
  if (!c)
    BOOST_CHECK_MESSAGE(why(c).find("timed out") != std::string::npos, why(c));
  ::close(first);
  ::close(l);
}

BOOST_AUTO_TEST_CASE(a_server_that_answers_no_reply_connection_is_named) {
  // A server of an older build acks the first hello without its flags and
  // would answer there, where the worker no longer reads: the dial fails
  // and says what to do, rather than every request timing out.
  sockaddr_in sa{};
  int l = plain_listener(4, sa);
  std::thread old_server{[l] {
    auto keys = test_keys();
    auto deadline = std::chrono::steady_clock::now() + 10s;
    int fds[2] = {::accept(l, nullptr, nullptr), -1};
    raw_header h;
    if (fds[0] >= 0 && check_member(fds[0], *keys, deadline) &&
        ::recv(fds[0], &h, sizeof(h), MSG_WAITALL) == ssize_t(sizeof(h))) {
      raw_header ack; // flags 0: one connection both ways
      ::send(fds[0], &ack, sizeof(ack), MSG_NOSIGNAL);
      fds[1] = ::accept(l, nullptr, nullptr); // the reply connection
      if (fds[1] >= 0 && !check_member(fds[1], *keys, deadline)) {
        ::close(fds[1]);
        fds[1] = -1;
      }
    }
    for (int fd : fds) { // until the worker gives up
      char buf[64];
      while (fd >= 0 && ::recv(fd, buf, sizeof(buf), 0) > 0) {
      }
      if (fd >= 0)
        ::close(fd);
    }
  }};
  road_info info;
  info.port = ntohs(sa.sin_port);
  auto box = std::make_shared<inbox>();
  auto c =
      road_dial("127.0.0.1", info, road_kind::tcp, 0, 5000, road_settings{},
                test_member(), inbox::on_msg(box), inbox::on_down(box));
  BOOST_CHECK_MESSAGE(!c, "dialled a server that answers elsewhere");
  if (!c)
    BOOST_CHECK_MESSAGE(why(c).find("--road.single-conn") != std::string::npos,
                        why(c));
  old_server.join(); // the failed dial closed both connections
  ::close(l);
}

BOOST_AUTO_TEST_CASE(closing_from_two_threads_at_once_ends_cleanly) {
  // close() promises to be safe from any thread, more than once: two at
  // once both found the reader joinable and joined it twice.
  auto l = start_echo_listener();
  for (int round = 0; round < 100; ++round) {
    auto box = std::make_shared<inbox>();
    auto c = road_dial("127.0.0.1", l->info(), road_kind::tcp, 0, 2000,
                       road_settings{}, test_member(), inbox::on_msg(box),
                       inbox::on_down(box));
    BOOST_REQUIRE_MESSAGE(c, why(c));
    auto conn = *c;
    std::thread other{[conn] { conn->close(); }};
    conn->close();
    other.join();
    BOOST_REQUIRE(conn->closed());
  }
}

BOOST_AUTO_TEST_CASE(a_silent_peer_does_not_hold_up_other_connections) {
  auto l = start_echo_listener(5000);
  raw_peer silent{*l, false};
  auto t0 = std::chrono::steady_clock::now();
  auto box = std::make_shared<inbox>();
  auto c = road_dial("127.0.0.1", l->info(), road_kind::tcp, 0, 2000,
                     road_settings{}, test_member(), inbox::on_msg(box),
                     inbox::on_down(box));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - t0)
                .count();
  // Not BOOST_REQUIRE: an aborted case fails even when failures are expected.
  BOOST_CHECK_MESSAGE(c, "dial beside a silent peer: " << why(c) << " after "
                                                       << ms << " ms");
  if (c)
    (*c)->close();
}

BOOST_AUTO_TEST_SUITE_END()
