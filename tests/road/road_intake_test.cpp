// What a server's road takes in from its members (road_intake.hpp): a
// worker's frame over the size limit and frames past the budget of bytes
// in flight are refused unread, the connection going on; a frame that
// trickles in ends its connection.
#define BOOST_TEST_MODULE road_intake_tests
#include <boost/test/unit_test.hpp>

#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "actors/base/log.hpp"
#include "actors/road/road.hpp"
#include "messages/errors.hpp"
#include "messages/kv.hpp"
#include "tests/road/road_checks.hpp"
#include "tests/road/road_peers.hpp"

using namespace troupe;
using namespace troupe::test;

BOOST_TEST_GLOBAL_FIXTURE(log_level_from_env);

namespace {

/// A listener whose workers' frames go through an intake, and that keeps
/// every request it takes until the test lets go of them; a refused
/// request is answered with its error, as a server answers it.
struct intake_server {
  std::shared_ptr<road_intake> intake;
  std::unique_ptr<road_listener> l;
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<road_message_ptr> kept;
  size_t refused = 0;

  intake_server(uint64_t budget, uint64_t frame_limit)
      : intake(std::make_shared<road_intake>(budget)) {
    intake->limit_worker_frames(frame_limit);
    auto x = road_listener::start(
        "127.0.0.1", 0, road_timeout_ms, road_settings{}, test_keys(),
        [this](road_message_ptr m) {
          std::lock_guard<std::mutex> guard{mtx};
          if (m->refused) {
            ++refused;
            m->conn->send(road_op::failure, m->id, encode_failure(m->refused));
          } else {
            kept.push_back(std::move(m));
          }
          cv.notify_all();
        },
        intake);
    BOOST_REQUIRE_MESSAGE(x, "listener: " << why(x));
    l = std::move(*x);
  }

  /// Waits until `n` requests are kept; false on timeout.
  bool await_kept(size_t n) {
    std::unique_lock<std::mutex> guard{mtx};
    return cv.wait_for(guard, road_timeout_ms * 1ms,
                       [&] { return kept.size() >= n; });
  }

  /// Answers every kept request with its bytes, and lets go of them.
  void answer_kept() {
    std::vector<road_message_ptr> xs;
    {
      std::lock_guard<std::mutex> guard{mtx};
      xs.swap(kept);
    }
    for (auto& m : xs)
      m->conn->send(road_op::reply, m->id, m->bytes);
  }
};

/// The error a refused request got; none if it was answered.
caf::error answer_of(road_client& c, uint64_t id) {
  auto m = c.box->take(id);
  if (!m)
    return caf::make_error(errc::timeout, "no answer:", c.box->reason());
  if (m->op == road_op::failure)
    return decode_failure(m->bytes);
  return caf::none;
}

/// Sends frame `id` of `bytes` on `c`.
void send_frame(road_client& c, uint64_t id, size_t bytes) {
  auto words = pattern(bytes, id);
  BOOST_REQUIRE(!c.conn->send(road_op::push, id, view_of(words)));
}

} // namespace

BOOST_AUTO_TEST_SUITE(road_intake_tests)

BOOST_AUTO_TEST_CASE(a_worker_frame_over_the_limit_is_refused_unread) {
  // At 18d411b a member's frame of up to 256 MiB was read into memory
  // whatever --kv.max-message-bytes said.
  intake_server s{64u << 20, 64u << 10};
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    BOOST_TEST_MESSAGE(to_string(kind));
    road_client c{*s.l, kind, 1u << 20};
    // More refused ring frames than the ring holds: each region comes back.
    for (uint64_t id = 1; id <= 12; ++id) {
      send_frame(c, id, 128u << 10);
      auto err = answer_of(c, id);
      BOOST_REQUIRE(err);
      BOOST_CHECK(err == errc::message_too_large);
      auto text = describe(err);
      BOOST_CHECK_MESSAGE(text.find("--kv.max-message-bytes") !=
                                  std::string::npos &&
                              text.find("worker 0") != std::string::npos,
                          text);
    }
    // The connection goes on: a frame within the limit is taken.
    send_frame(c, 100, 64u << 10);
    BOOST_REQUIRE(s.await_kept(1));
    s.answer_kept();
    BOOST_CHECK(!answer_of(c, 100));
    BOOST_CHECK(!c.conn->closed());
  }
  BOOST_CHECK_EQUAL(s.intake->in_flight(), 0u);
}

BOOST_AUTO_TEST_CASE(frames_past_the_budget_are_refused_until_some_are_done) {
  // A worker that ignores its window (--kv.window-bytes) could have the
  // server read any number of frames into memory before it handled them.
  intake_server s{256u << 10, 128u << 10};
  road_client c{*s.l, road_kind::tcp, 0};
  send_frame(c, 1, 100u << 10);
  send_frame(c, 2, 100u << 10);
  BOOST_REQUIRE(s.await_kept(2));
  BOOST_CHECK_EQUAL(s.intake->in_flight(), 2 * (100u << 10));
  send_frame(c, 3, 100u << 10);
  auto err = answer_of(c, 3);
  BOOST_REQUIRE(err);
  BOOST_CHECK_MESSAGE(describe(err).find("server busy") != std::string::npos &&
                          describe(err).find("--server.inflight-bytes") !=
                              std::string::npos,
                      describe(err));
  s.answer_kept(); // handled: their bytes are given back
  BOOST_CHECK(!answer_of(c, 1));
  BOOST_CHECK(!answer_of(c, 2));
  BOOST_CHECK_EQUAL(s.intake->in_flight(), 0u);
  send_frame(c, 4, 100u << 10);
  BOOST_REQUIRE(s.await_kept(1));
  s.answer_kept();
  BOOST_CHECK(!answer_of(c, 4));
}

BOOST_AUTO_TEST_CASE(a_server_frame_is_not_limited_as_a_worker_frame) {
  // A replica link carries whole stores: only workers' frames are limited.
  intake_server s{256u << 10, 64u << 10};
  road_client c{*s.l,
                road_kind::tcp,
                0,
                road_timeout_ms,
                road_settings{},
                test_member({role::server, 1})};
  send_frame(c, 1, 1u << 20);
  BOOST_REQUIRE(s.await_kept(1));
  s.answer_kept();
  BOOST_CHECK(!answer_of(c, 1));
}

BOOST_AUTO_TEST_CASE(a_frame_that_trickles_in_ends_its_connection) {
  // At 18d411b only a stall as long as the send timeout ended a frame: a
  // peer that sent a byte now and then held its buffer for good.
  auto l = start_echo_listener(500);
  road_client good{*l, road_kind::tcp, 0};
  raw_peer bad{*l, false};
  bad.handshake();
  bad.begin_push(256u << 10); // due within 0.5 s + 0.25 s
  // A byte each time the listener has not dropped us for 100 ms, for 10 s.
  bool dropped = false;
  char byte = 0;
  for (int i = 0; i < 100 && !dropped; ++i)
    dropped = ::send(bad.fd, &byte, 1, MSG_NOSIGNAL) != 1 || bad.dropped(100ms);
  BOOST_CHECK_MESSAGE(dropped, "a frame that trickled in held its connection");
  echo_one(good, 1, 1024);
}

BOOST_AUTO_TEST_CASE(a_worker_frame_bound_holds_the_parts_a_worker_cuts) {
  // A part is full at max-message-bytes of values or max_slices_per_part
  // slices: the frame of either kind stays within the bound.
  constexpr uint64_t max_message = 64u << 10;
  std::vector<std::vector<float>> values;
  auto frame_of = [&](size_t slices, size_t floats) {
    values.assign(slices, std::vector<float>(floats, 1.0f));
    std::vector<slice_view> views;
    for (size_t i = 0; i < slices; ++i)
      views.push_back({slice_id{i, 0}, values[i].data(), floats});
    return encode_push(push_request{0, 1, 1, 0, 1, {}}, views).bytes();
  };
  auto tiny = frame_of(max_slices_per_part(max_message), 1);
  auto full = frame_of(16, 1024);   // 16 slices of 4 KiB: max_message of values
  auto one = frame_of(1, 1u << 20); // one slice over max_message
  BOOST_CHECK_LE(tiny, worker_frame_bound(max_message, 1024));
  BOOST_CHECK_LE(full, worker_frame_bound(max_message, 1024));
  BOOST_CHECK_LE(one, worker_frame_bound(max_message, 1u << 20));
  BOOST_CHECK_GT(one, worker_frame_bound(max_message, 1024));
}

BOOST_AUTO_TEST_SUITE_END()
