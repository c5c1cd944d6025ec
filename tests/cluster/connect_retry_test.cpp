// A fault of CAF 0.17 and its workaround (actors/cluster/connect.hpp): a
// new connection whose handshake is still pending when a heartbeat tick
// comes fails with connection_timeout at that tick, long before
// --middleman.connection-timeout. connect_actor tries again at once, and
// the new try has a whole interval for its handshake; connect_scheduler
// waits a random while after the second cut in a row (a storm else).
#define BOOST_TEST_MODULE connect_retry_tests
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/cluster/connect.hpp"
#include "actors/node/node_config.hpp"
#include "messages/type_ids.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

/// A node with fast heartbeats and a connection timeout far above them.
std::unique_ptr<node_config> config() {
  auto cfg = std::make_unique<node_config>();
  cfg->load<caf::io::middleman>();
  cfg->set("middleman.heartbeat-interval", caf::timespan{100ms});
  cfg->set("middleman.connection-timeout", caf::timespan{5s});
  BOOST_REQUIRE(!cfg->finish());
  return cfg;
}

int loopback_socket(uint16_t port, bool listen_here) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  BOOST_REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  auto* sa = reinterpret_cast<sockaddr*>(&a);
  if (listen_here)
    BOOST_REQUIRE(::bind(fd, sa, sizeof a) == 0 && ::listen(fd, 16) == 0);
  else
    BOOST_REQUIRE(::connect(fd, sa, sizeof a) == 0);
  return fd;
}

/// A TCP relay on a free loopback port to `target`: its first `silent`
/// connections are accepted and never answered (a peer too busy to
/// shake hands), the others relayed both ways.
struct relay {
  int fd = -1;
  uint16_t port = 0;
  std::atomic<int> accepted{0};
  std::atomic<bool> stop{false};
  std::vector<int> held;
  std::vector<std::thread> threads;

  relay(uint16_t target, int silent) {
    fd = loopback_socket(0, true);
    sockaddr_in a{};
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    threads.emplace_back([this, target, silent] {
      while (!stop) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0)
          continue;
        int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0)
          continue;
        if (accepted++ < silent) {
          held.push_back(c);
          continue;
        }
        int t = loopback_socket(target, false);
        threads.emplace_back([this, c, t] { pump(c, t); });
      }
    });
  }
  void pump(int a, int b) {
    char buf[65536];
    while (!stop) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0)
        continue;
      for (int i = 0; i < 2; ++i)
        if (p[i].revents != 0) {
          auto n = ::read(p[i].fd, buf, sizeof buf);
          if (n <= 0 || ::write(p[1 - i].fd, buf, size_t(n)) != n) {
            ::close(a);
            ::close(b);
            return;
          }
        }
    }
    ::close(a);
    ::close(b);
  }
  ~relay() {
    stop = true;
    threads.front().join(); // the acceptor: no pump starts after it
    for (size_t i = 1; i < threads.size(); ++i)
      threads[i].join();
    for (int c : held)
      ::close(c);
    ::close(fd);
  }
};

/// An actor that echoes ints, published on a free loopback port of one
/// actor system, and another system to connect from.
struct published_echo {
  std::unique_ptr<node_config> cfg = config(), cfg2 = config();
  caf::actor_system sys{*cfg};
  caf::actor_system other{*cfg2};
  caf::actor echo =
      sys.spawn([]() -> caf::behavior { return {[](int x) { return x; }}; });
  uint16_t port = 0;
  published_echo() {
    auto p = publish_actor(sys, echo, 0, "127.0.0.1", true);
    BOOST_REQUIRE(p);
    port = *p;
  }
  ~published_echo() {
    caf::anon_send_exit(echo, caf::exit_reason::user_shutdown);
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(connect_retry_tests)

BOOST_AUTO_TEST_CASE(caf_cuts_a_pending_handshake_at_a_heartbeat_tick) {
  // The peer never shakes hands: CAF should wait for the 5 s connection
  // timeout, and gives up at a tick instead.
  auto cfg = config();
  caf::actor_system sys{*cfg};
  relay silent{1, 1}; // target unused: its one connection stays silent
  caf::scoped_actor self{sys};
  auto t0 = std::chrono::steady_clock::now();
  caf::error got;
  self->request(connector(sys), 10s, caf::connect_atom_v,
                std::string{"127.0.0.1"}, silent.port)
      .receive([](const caf::node_id&, caf::strong_actor_ptr&,
                  const std::set<std::string>&) {},
               [&got](caf::error& err) { got = std::move(err); });
  auto took = std::chrono::steady_clock::now() - t0;
  BOOST_TEST_MESSAGE("cut after " << (took / 1ms)
                                  << " ms: " << sys.render(got));
  BOOST_CHECK(tick_cut_handshake(got));
  BOOST_CHECK_LT(took / 1ms, 2000); // a tick or two, not the 5 s timeout
}

BOOST_AUTO_TEST_CASE(connect_actor_tries_again_at_once_after_a_cut) {
  published_echo e;
  auto& other = e.other;
  relay busy_first{e.port, 1};
  std::promise<std::string> result;
  other.spawn([&](caf::event_based_actor* self) {
    connect_actor(
        self, "127.0.0.1", busy_first.port, caf::timespan{10s},
        [&result](caf::strong_actor_ptr& ptr) {
          result.set_value(ptr ? "connected" : "no actor");
        },
        [&result, &other](caf::error& err) {
          result.set_value("failed: " + other.render(err));
        });
  });
  auto f = result.get_future();
  BOOST_REQUIRE(f.wait_for(20s) == std::future_status::ready);
  BOOST_CHECK_EQUAL(f.get(), "connected");
  BOOST_CHECK_EQUAL(busy_first.accepted, 2); // the cut try, then the next
}

BOOST_AUTO_TEST_CASE(tries_cut_again_and_again_wait_a_random_while) {
  // The first cut: at once. Then a random part of a doubling bound, so
  // that nodes cut together do not all come back together.
  for (uint32_t r : {0u, 1u, 99u, 4096u, 0xffffffffu})
    BOOST_CHECK_EQUAL(pause_after_cuts(1, r).count(), 0);
  std::vector<long> bounds;
  for (int cuts = 2; cuts <= 12; ++cuts) {
    long most = 0;
    std::set<long> seen;
    for (uint32_t r = 0; r < 5000; ++r) {
      auto p = pause_after_cuts(cuts, r * 2654435761u).count();
      BOOST_REQUIRE_GE(p, 0);
      most = std::max(most, p);
      seen.insert(p);
    }
    BOOST_CHECK_GT(seen.size(), 50u); // spread, not one value
    bounds.push_back(most);
  }
  BOOST_CHECK_EQUAL(bounds.front(), 100); // the second cut in a row
  BOOST_CHECK_EQUAL(bounds[1], 200);
  for (size_t i = 4; i < bounds.size(); ++i)
    BOOST_CHECK_EQUAL(bounds[i], 1600); // no longer than that
}

BOOST_AUTO_TEST_CASE(connect_scheduler_gets_through_three_cuts_in_a_row) {
  published_echo e;
  relay busy_first{e.port, 3};
  auto got = connect_scheduler(e.other, "127.0.0.1", busy_first.port, 20000);
  BOOST_CHECK_MESSAGE(got, (got ? "" : e.other.render(got.error())));
  BOOST_CHECK_EQUAL(busy_first.accepted, 4); // three cut, the fourth in
}

BOOST_AUTO_TEST_CASE(a_peer_that_closed_its_end_is_seen_before_its_data) {
  // What a TLS listener checks before it begins a session: a try given up
  // while it waited in the listen queue, its first bytes still unread.
  int listener = loopback_socket(0, true);
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  int client = loopback_socket(ntohs(a.sin_port), false);
  int served = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  BOOST_REQUIRE_GE(served, 0);
  BOOST_CHECK(!peer_closed(served));
  const char hello[] = "\x16\x03\x01 a client hello";
  BOOST_REQUIRE_EQUAL(::write(client, hello, sizeof hello),
                      ssize_t(sizeof hello));
  pollfd p{served, POLLIN, 0};
  BOOST_REQUIRE_EQUAL(::poll(&p, 1, 5000), 1);
  BOOST_CHECK(!peer_closed(served)); // data, and still there
  ::close(client);
  pollfd q{served, POLLRDHUP, 0};
  BOOST_REQUIRE_EQUAL(::poll(&q, 1, 5000), 1);
  BOOST_CHECK(peer_closed(served)); // gone, its data unread
  BOOST_CHECK(!peer_closed(-1));
  ::close(served);
  ::close(listener);
}

BOOST_AUTO_TEST_SUITE_END()
