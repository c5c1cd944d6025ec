// A blocking caller that reads its own replies: the road left to it by
// the reader thread, given back on a send outside its scope or with
// replies due, and never held by a peer that dies or stops mid-frame.
#define BOOST_TEST_MODULE road_caller_tests
#include <boost/test/unit_test.hpp>

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/road/road.hpp"
#include "tests/road/road_checks.hpp"
#include "tests/road/road_peers.hpp"

using namespace troupe;
using namespace troupe::test;

BOOST_TEST_GLOBAL_FIXTURE(log_level_from_env);

BOOST_AUTO_TEST_SUITE(road_caller_tests)

BOOST_AUTO_TEST_CASE(
    a_blocking_caller_reads_its_own_replies_once_the_reader_leaves) {
  auto l = start_echo_listener();
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    traced_client c{*l, kind};
    auto id = c.until_callers_read(1);
    // From then on every reply is read by the caller that waits for it.
    for (int i = 0; i < 20; ++i)
      BOOST_CHECK_MESSAGE(c.call(id++), to_string(kind) << ": call " << i
                                                        << " read elsewhere");
    BOOST_CHECK_EQUAL(c.conn->outstanding(), 0u);
    c.conn->close(); // wakes and joins the resting reader thread
    BOOST_CHECK(c.conn->closed());
  }
}

BOOST_AUTO_TEST_CASE(a_send_outside_a_caller_scope_gives_the_road_back) {
  auto l = start_echo_listener();
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    traced_client c{*l, kind};
    auto id = c.until_callers_read(1);
    // Nobody reads on our side now; a plain send must wake the reader
    // thread, or its reply would wait forever.
    std::vector<uint64_t> words{7, 8, 9};
    BOOST_REQUIRE(!c.conn->send(road_op::pull, id, view_of(words)));
    auto m = c.box->take(id);
    BOOST_REQUIRE_MESSAGE(m, to_string(kind) << ": the reply was never read");
    BOOST_CHECK(same_bytes(*m, words));
    BOOST_CHECK(c.thread_of(id) != std::this_thread::get_id());
  }
}

BOOST_AUTO_TEST_CASE(a_caller_done_with_replies_due_leaves_them_to_the_reader) {
  auto l = start_echo_listener();
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    traced_client c{*l, kind};
    auto id = c.until_callers_read(1);
    std::vector<uint64_t> words{id};
    c.send_as_caller(id, words);
    c.conn->caller_done(); // gave up without reading: the reply is due
    auto m = c.box->take(id);
    BOOST_REQUIRE_MESSAGE(m, to_string(kind) << ": the reply was never read");
    BOOST_CHECK(c.thread_of(id) != std::this_thread::get_id());
  }
}

BOOST_AUTO_TEST_CASE(a_caller_that_sent_on_two_roads_leaves_both_to_readers) {
  auto l = start_echo_listener();
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    traced_client a{*l, kind};
    traced_client b{*l, kind};
    auto id = std::max(a.until_callers_read(1), b.until_callers_read(1));
    std::vector<uint64_t> words{id};
    {
      road_caller_scope scope; // a request split over two servers, say
      BOOST_REQUIRE(!a.conn->send(road_op::pull, id, view_of(words)));
      BOOST_REQUIRE(!b.conn->send(road_op::pull, id, view_of(words)));
      BOOST_REQUIRE(!scope.claim_only_conn());
    }
    for (auto* c : {&a, &b}) {
      auto m = c->box->take(id);
      BOOST_REQUIRE_MESSAGE(m, to_string(kind) << ": a reply was never read");
      BOOST_CHECK(c->thread_of(id) != std::this_thread::get_id());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_peer_that_dies_while_a_caller_reads_ends_the_road) {
  // This listener answers nothing: it drops each connection that asks.
  auto l =
      road_listener::start("127.0.0.1", 0, road_timeout_ms, road_settings{},
                           test_keys(), [](road_message_ptr m) {
                             if (m->id >= 1000)
                               m->conn->close();
                             else
                               m->conn->send(road_op::reply, m->id, m->bytes);
                           });
  BOOST_REQUIRE_MESSAGE(l, "listener: " << why(l));
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    traced_client c{**l, kind};
    c.until_callers_read(1);
    std::vector<uint64_t> words{1000};
    {
      road_caller_scope scope;
      BOOST_REQUIRE(!c.conn->send(road_op::pull, 1000, view_of(words)));
    }
    bool ended = false;
    for (int i = 0; i < 5000 && !ended; ++i)
      ended = !c.conn->pump_once(std::chrono::milliseconds{2});
    c.conn->caller_done();
    BOOST_CHECK_MESSAGE(ended, to_string(kind) << ": still reading");
    BOOST_CHECK(c.box->wait_down()); // the owner heard of it
    BOOST_CHECK(c.conn->closed());
  }
}

BOOST_AUTO_TEST_CASE(a_peer_that_stops_mid_frame_does_not_hold_a_caller) {
  // To request 1000 this listener sends the header of a 1 MiB reply and
  // half of its bytes, then nothing more, the connection open: a stopped
  // or swapping process. The caller reading its own replies waited in its
  // read for good, past any deadline of its call; now the read gives up
  // after the connection's timeout and fails the connection.
  auto l = road_listener::start(
      "127.0.0.1", 0, road_timeout_ms, road_settings{}, test_keys(),
      [](road_message_ptr m) {
        if (m->id < 1000) {
          m->conn->send(road_op::reply, m->id, m->bytes);
          return;
        }
        raw_header h;
        h.op = static_cast<uint8_t>(road_op::reply);
        h.id = m->id;
        h.bytes = 1u << 20;
        std::vector<uint8_t> half(h.bytes / 2, 0x42);
        ::send(m->conn->write_fd(), &h, sizeof(h), MSG_NOSIGNAL);
        ::send(m->conn->write_fd(), half.data(), half.size(), MSG_NOSIGNAL);
      });
  BOOST_REQUIRE_MESSAGE(l, "listener: " << why(l));
  traced_client c{**l, road_kind::tcp, 300};
  c.until_callers_read(1);
  std::vector<uint64_t> words{1000};
  c.send_as_caller(1000, words);
  // If the read never gives up, this ends it after 15 s (the test fails:
  // the reason is then another).
  std::mutex mtx;
  std::condition_variable cv;
  bool finished = false;
  std::thread watchdog{[&] {
    std::unique_lock<std::mutex> guard{mtx};
    if (!cv.wait_for(guard, 15s, [&] { return finished; }))
      c.conn->close();
  }};
  bool ended = false;
  for (int i = 0; i < 10000 && !ended; ++i)
    ended = !c.conn->pump_once(std::chrono::milliseconds{2});
  c.conn->caller_done();
  {
    std::lock_guard<std::mutex> guard{mtx};
    finished = true;
  }
  cv.notify_all();
  watchdog.join();
  BOOST_CHECK(ended);
  BOOST_REQUIRE(c.box->wait_down());
  BOOST_CHECK_MESSAGE(c.box->reason().find("sent nothing more of a frame") !=
                          std::string::npos,
                      c.box->reason());
  BOOST_CHECK(!c.box->take(1000, 0ms)); // no half reply handed on
}

namespace {

/// Opens and closes a server's replies: a server that holds its replies
/// until the test opens its gate keeps the requests outstanding meanwhile.
struct gate {
  std::mutex mtx;
  std::condition_variable cv;
  bool open = false;
  void set(bool x) {
    std::lock_guard<std::mutex> guard{mtx};
    open = x;
    cv.notify_all();
  }
};

/// One round of `c` (a connection to a gated server) with two replies
/// outstanding, requests `id` and `id + 1`: round 0 lets the reader thread
/// learn that callers wait on this road (it then waits for input and for
/// them alike); in round 1 the caller must get the road before any reply
/// comes, and reads both.
void take_road_with_replies_due(traced_client& c, gate& g, road_kind kind,
                                uint64_t id, int round) {
  g.set(false);
  std::vector<uint64_t> first{id, 1}, second{id + 1, 2};
  // Sent by no caller: the road is the reader thread's again.
  BOOST_REQUIRE(!c.conn->send(road_op::pull, id, view_of(first)));
  c.send_as_caller(id + 1, second);
  BOOST_CHECK_EQUAL(c.conn->outstanding(), 2u);
  bool taken = false;
  for (int i = 0; i < 500 && !taken; ++i) {
    BOOST_REQUIRE(c.conn->pump_once(std::chrono::milliseconds{2}));
    taken = c.conn->read_by_callers();
  }
  if (round == 1)
    BOOST_REQUIRE_MESSAGE(taken, to_string(kind)
                                     << ": the reader thread kept the road"
                                        " with replies outstanding");
  g.set(true);
  // Until both are read; in round 0 the reader thread may read both
  // (pump_once says so: false), in round 1 the caller must (below).
  for (int i = 0; i < 5000 && (c.thread_of(id) == std::thread::id{} ||
                               c.thread_of(id + 1) == std::thread::id{});
       ++i)
    if (!c.conn->pump_once(std::chrono::milliseconds{2}))
      break;
  c.conn->caller_done();
  auto a = c.box->take(id);
  auto b = c.box->take(id + 1);
  BOOST_REQUIRE_MESSAGE(a && b, "no replies: " << c.box->reason());
  BOOST_CHECK(same_bytes(*a, first));
  BOOST_CHECK(same_bytes(*b, second));
  if (round == 1) { // both read here, as they came
    BOOST_CHECK(c.thread_of(id) == std::this_thread::get_id());
    BOOST_CHECK(c.thread_of(id + 1) == std::this_thread::get_id());
  }
  BOOST_CHECK_EQUAL(c.conn->outstanding(), 0u);
}

/// Done, with nothing outstanding: the road of `c` stays with callers, but
/// a caller finds nothing to read on it (its reply went elsewhere, say):
/// it is told so at once, to wait by mail. A send (request `id`) by no
/// caller gives the road back to the reader thread, which reads.
void expect_a_send_to_give_an_idle_road_back(traced_client& c, uint64_t id) {
  BOOST_CHECK(c.conn->read_by_callers());
  BOOST_CHECK(!c.conn->pump_once(std::chrono::milliseconds{2}));
  BOOST_CHECK(c.conn->read_by_callers());
  std::vector<uint64_t> last{id};
  BOOST_REQUIRE(!c.conn->send(road_op::pull, id, view_of(last)));
  BOOST_CHECK(!c.conn->read_by_callers());
  auto m = c.box->take(id);
  BOOST_REQUIRE_MESSAGE(m, "no reply: " << c.box->reason());
  BOOST_CHECK(c.thread_of(id) != std::this_thread::get_id());
}

/// Amid large frames a caller leaves the road of `c` to the reader thread
/// with replies outstanding (requests `id` and `id + 1`): their copies
/// need the cores it would poll on.
void expect_large_frames_to_leave_the_road_to_the_reader(traced_client& c,
                                                         gate& g, uint64_t id) {
  g.set(false);
  std::vector<uint64_t> large((64u << 10) / 8, id), small{id + 1};
  BOOST_REQUIRE(!c.conn->send(road_op::push, id, view_of(large)));
  c.send_as_caller(id + 1, small);
  BOOST_CHECK(!c.conn->pump_once(std::chrono::milliseconds{2}));
  BOOST_CHECK(!c.conn->read_by_callers());
  c.conn->caller_done();
  g.set(true);
  auto big = c.box->take(id);
  auto tiny = c.box->take(id + 1);
  BOOST_REQUIRE_MESSAGE(big && tiny, "no replies: " << c.box->reason());
  BOOST_CHECK(same_bytes(*big, large));
  BOOST_CHECK(same_bytes(*tiny, small));
  BOOST_CHECK(c.thread_of(id + 1) != std::this_thread::get_id());
}

} // namespace

BOOST_AUTO_TEST_CASE(a_caller_takes_the_road_while_replies_are_outstanding) {
  auto g = std::make_shared<gate>();
  auto l =
      road_listener::start("127.0.0.1", 0, road_timeout_ms, road_settings{},
                           test_keys(), [g](road_message_ptr m) {
                             {
                               std::unique_lock<std::mutex> guard{g->mtx};
                               g->cv.wait_for(guard, std::chrono::seconds{10},
                                              [&g] { return g->open; });
                             }
                             m->conn->send(road_op::reply, m->id, m->bytes);
                           });
  BOOST_REQUIRE_MESSAGE(l, "listener: " << why(l));
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    traced_client c{**l, kind};
    uint64_t id = 1;
    for (int round = 0; round < 2; ++round, id += 2)
      take_road_with_replies_due(c, *g, kind, id, round);
    expect_a_send_to_give_an_idle_road_back(c, id);
    ++id;
    expect_large_frames_to_leave_the_road_to_the_reader(c, *g, id);
  }
  g->set(true);
}

BOOST_AUTO_TEST_SUITE_END()
