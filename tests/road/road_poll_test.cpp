// How a road's readers poll before they sleep (road_settings): reader
// threads, blocking callers waiting for their reply, and readers inside a
// large frame; every frame still exact, and a peer's end seen at once.
#define BOOST_TEST_MODULE road_poll_tests
#include <boost/test/unit_test.hpp>

#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "actors/road/road.hpp"
#include "tests/road/road_checks.hpp"
#include "tests/road/road_peers.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// Settings whose blocking callers poll for `us` (0: off).
road_settings caller_spin(uint32_t us) {
  road_settings s;
  s.caller_spin_us = us;
  return s;
}

/// A handler that answers request 1 with the 1 MiB reply `want`: half of
/// it, then the rest in four pieces, each once our reader (reading
/// `reader_fd`, which the test sets) has read all that came before
/// (nothing unread on either socket), so that it waits inside the frame.
/// To request 2 it sends half a reply, waits the same way, then ends the
/// connection.
road_handler piecewise_replier(const std::vector<uint64_t>& want,
                               std::atomic<int>& reader_fd) {
  return [&want, &reader_fd](road_message_ptr m) {
    raw_header h;
    h.op = static_cast<uint8_t>(road_op::reply);
    h.id = m->id;
    h.bytes = want.size() * 8;
    auto send = [fd = m->conn->write_fd()](const void* p, size_t n) {
      for (auto* at = static_cast<const char*>(p); n > 0;) {
        auto got = ::send(fd, at, n, MSG_NOSIGNAL);
        if (got <= 0)
          return;
        at += got;
        n -= static_cast<size_t>(got);
      }
    };
    auto read_up = [out = m->conn->write_fd(), in = reader_fd.load()] {
      return poll_until(
          [out, in] {
            int unsent = 0, unread = 0; // unacknowledged, then unread
            return ::ioctl(out, SIOCOUTQ, &unsent) == 0 && unsent == 0 &&
                   ::ioctl(in, SIOCINQ, &unread) == 0 && unread == 0;
          },
          10s);
    };
    auto* bytes = reinterpret_cast<const char*>(want.data());
    size_t at = h.bytes / 2;
    send(&h, sizeof(h));
    send(bytes, at);
    read_up();
    if (m->id == 2) {
      m->conn->close();
      return;
    }
    for (size_t piece = (h.bytes - at) / 4; at < h.bytes; at += piece) {
      send(bytes + at, std::min<size_t>(piece, h.bytes - at));
      read_up();
    }
  };
}

} // namespace

BOOST_TEST_GLOBAL_FIXTURE(log_level_from_env);

BOOST_AUTO_TEST_SUITE(road_poll_tests)

BOOST_AUTO_TEST_CASE(a_blocking_caller_polls_for_its_reply_and_reads_it_exact) {
  // Reader threads never poll here (--road.spin-us is 0): whatever is
  // found while polling, a caller found.
  auto l = start_echo_listener();
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    {
      traced_client c{*l, kind, road_timeout_ms, caller_spin(0)};
      auto id = c.until_callers_read(1);
      auto before = road_spins_found();
      for (int i = 0; i < 20; ++i)
        BOOST_CHECK_MESSAGE(c.call(id++), to_string(kind) << ": call " << i
                                                          << " read elsewhere");
      BOOST_CHECK_EQUAL(road_spins_found(), before); // off: nobody polled
    }
    // An echo in this process answers well within 10 ms: callers find
    // their replies while they poll, read here and byte-exact (call()
    // checks), the road still theirs after.
    traced_client c{*l, kind, road_timeout_ms, caller_spin(10000)};
    auto id = c.until_callers_read(1);
    auto before = road_spins_found();
    for (int i = 0; i < 20; ++i)
      BOOST_CHECK_MESSAGE(c.call(id++), to_string(kind) << ": call " << i
                                                        << " read elsewhere");
    BOOST_CHECK_GT(road_spins_found(), before);
    BOOST_CHECK_EQUAL(c.conn->outstanding(), 0u);
  }
}

BOOST_AUTO_TEST_CASE(spinning_readers_deliver_every_frame_and_see_a_peer_end) {
  // Off, nobody polls.
  auto callers_off = caller_spin(0);
  auto before = road_spins_found();
  BOOST_CHECK_GT(sweep_over(road_kind::shm, callers_off), 0u);
  BOOST_CHECK_EQUAL(road_spins_found(), before);
  {
    // Replies of an echo in this process come well within 2 ms: readers
    // find them while polling, and every frame still comes back exact, to
    // reader threads and to callers reading their own replies alike.
    auto spin = callers_off;
    spin.spin_us = 2000;
    BOOST_CHECK_EQUAL(sweep_over(road_kind::tcp, spin), 0u);
    BOOST_CHECK_GT(sweep_over(road_kind::shm, spin), 0u);
    BOOST_CHECK_GT(road_spins_found(), before);
    auto l = start_echo_listener(road_timeout_ms, spin);
    for (auto kind : {road_kind::tcp, road_kind::shm}) {
      road_client c{*l, kind, 8u << 20, road_timeout_ms, spin};
      auto errors = echo_concurrently(c, 1, 4, 16);
      BOOST_CHECK_MESSAGE(errors.empty(), to_string(kind) << ": " << errors);
      traced_client t{*l, kind, road_timeout_ms, spin};
      auto id = t.until_callers_read(1);
      for (int i = 0; i < 20; ++i)
        BOOST_CHECK_MESSAGE(t.call(id++), to_string(kind) << ": call " << i
                                                          << " read elsewhere");
    }
  }
  // A peer that ends its side while our reader polls: the road ends, at
  // once rather than after the poll time (10 s here).
  auto spin = callers_off;
  spin.spin_us = 10000000;
  auto l =
      road_listener::start("127.0.0.1", 0, road_timeout_ms, spin, test_keys(),
                           [](road_message_ptr m) { m->conn->close(); });
  BOOST_REQUIRE_MESSAGE(l, "listener: " << why(l));
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    road_client c{**l, kind, 0, road_timeout_ms, spin};
    std::vector<uint64_t> words{1};
    auto t0 = std::chrono::steady_clock::now();
    BOOST_REQUIRE(!c.conn->send(road_op::pull, 1, view_of(words)));
    BOOST_CHECK(c.box->wait_down());
    BOOST_CHECK(std::chrono::steady_clock::now() - t0 <
                std::chrono::seconds{5});
    BOOST_CHECK(!c.box->take(1, 0ms));
  }
}

BOOST_AUTO_TEST_CASE(a_reader_polls_for_the_rest_of_a_large_frame) {
  // The listener (piecewise_replier) makes our reader wait inside a 1 MiB
  // reply four times, or ends the connection inside one.
  auto want = pattern(1u << 20, 11);
  std::atomic<int> reader_fd{-1}; // our end, which the test sets
  auto l =
      road_listener::start("127.0.0.1", 0, road_timeout_ms, road_settings{},
                           test_keys(), piecewise_replier(want, reader_fd));
  BOOST_REQUIRE_MESSAGE(l, "listener: " << why(l));
  std::vector<uint64_t> words{1};
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    // Polling (10 s here), the reader finds the pieces without sleeping;
    // off, it sleeps until each comes. The reply is whole and exact
    // either way.
    for (auto us : {0, 10000000}) {
      road_settings spin;
      spin.frame_spin_us = us;
      road_client c{**l, kind, 0, road_timeout_ms, spin};
      reader_fd = c.conn->read_fd();
      auto before = road_frame_spins_found();
      BOOST_REQUIRE(!c.conn->send(road_op::pull, 1, view_of(words)));
      auto m = c.box->take(1);
      BOOST_REQUIRE_MESSAGE(m, to_string(kind) << ": " << c.box->reason());
      BOOST_CHECK(same_bytes(*m, want));
      if (us == 0)
        BOOST_CHECK_EQUAL(road_frame_spins_found(), before); // nobody polled
      else
        BOOST_CHECK_GT(road_frame_spins_found(), before);
    }
    // A peer that ends the connection mid-frame while our reader polls for
    // the rest: the road ends at once, not after the poll time.
    road_settings spin;
    spin.frame_spin_us = 10000000;
    road_client c{**l, kind, 0, road_timeout_ms, spin};
    reader_fd = c.conn->read_fd();
    auto t0 = std::chrono::steady_clock::now();
    BOOST_REQUIRE(!c.conn->send(road_op::pull, 2, view_of(words)));
    BOOST_CHECK(c.box->wait_down());
    BOOST_CHECK(std::chrono::steady_clock::now() - t0 <
                std::chrono::seconds{5});
    BOOST_CHECK(!c.box->take(2, 0ms)); // no half reply handed on
  }
}

BOOST_AUTO_TEST_SUITE_END()
