// The road handshake (actors/road/road_auth.hpp): members get in on both
// roads, strangers and members of another cluster do not, and strangers
// that connect and stay silent cannot fill a listener.
#define BOOST_TEST_MODULE road_auth_tests
#include <boost/test/unit_test.hpp>

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/base/log.hpp"
#include "actors/road/road.hpp"
#include "tests/road/road_checks.hpp"
#include "tests/road/road_peers.hpp"

using namespace troupe;
using namespace troupe::test;

BOOST_TEST_GLOBAL_FIXTURE(log_level_from_env);

namespace {

/// True if the listener answers nothing on `p` and ends it.
bool ended_unanswered(raw_peer& p) {
  timeval limit{road_timeout_ms / 1000, 0};
  ::setsockopt(p.fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char buf[64];
  for (;;) { // a listener's answer to a handshake is 64 bytes; any is wrong
    auto n = ::recv(p.fd, buf, sizeof(buf), 0);
    if (n > 0)
      return false;
    return n == 0 || errno == ECONNRESET;
  }
}

caf::expected<road_conn_ptr> dial(const road_listener& l, road_kind kind,
                                  const road_credential& cred) {
  auto box = std::make_shared<inbox>();
  return road_dial("127.0.0.1", l.info(), kind, 1u << 20, 2000, road_settings{},
                   cred, inbox::on_msg(box), inbox::on_down(box));
}

} // namespace

BOOST_AUTO_TEST_SUITE(road_auth_tests)

BOOST_AUTO_TEST_CASE(a_member_gets_in_on_both_roads_and_is_bound_to_its_rank) {
  std::vector<member_id> seen;
  std::mutex mtx;
  auto l =
      road_listener::start("127.0.0.1", 0, road_timeout_ms, road_settings{},
                           test_keys(), [&](road_message_ptr m) {
                             {
                               std::lock_guard<std::mutex> guard{mtx};
                               seen.push_back(m->conn->member());
                             }
                             m->conn->send(road_op::reply, m->id, m->bytes);
                           });
  BOOST_REQUIRE_MESSAGE(l, why(l));
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    road_client c{**l,
                  kind,
                  1u << 20,
                  road_timeout_ms,
                  road_settings{},
                  test_member({role::worker, 7})};
    BOOST_CHECK(c.conn->kind() == kind);
    echo_one(c, 1, 4096);
  }
  std::lock_guard<std::mutex> guard{mtx};
  BOOST_REQUIRE_EQUAL(seen.size(), 2u);
  for (auto& who : seen)
    BOOST_CHECK_MESSAGE((who == member_id{role::worker, 7}), to_string(who));
}

BOOST_AUTO_TEST_CASE(a_stranger_without_credentials_gets_no_answer) {
  // At bc0f027 a stranger's hello was answered, and it could then pull and
  // push as any worker.
  auto l = start_echo_listener();
  for (bool unix_socket : {false, true}) {
    raw_peer stranger{*l, unix_socket, "127.0.0.1", false};
    raw_header hello; // what a road peer opened with before the handshake
    stranger.write(&hello, sizeof(hello));
    BOOST_CHECK_MESSAGE(ended_unanswered(stranger),
                        "a stranger's hello was answered");
  }
  road_client good{*l, road_kind::tcp, 0}; // members still get in
  echo_one(good, 1, 1024);
}

BOOST_AUTO_TEST_CASE(a_token_of_another_cluster_is_refused) {
  auto l = start_echo_listener();
  member_id who{role::worker, 0};
  road_credential other{who, member_token(random_secret(), who)};
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    auto c = dial(*l, kind, other);
    BOOST_CHECK_MESSAGE(!c, "a foreign token got in");
    if (!c)
      BOOST_CHECK(c.error() == errc::not_a_member);
  }
  // A token for rank 1 does not pass as rank 0's either.
  road_credential shifted{who,
                          member_token(test_road_key(), {role::worker, 1})};
  BOOST_CHECK(!dial(*l, road_kind::tcp, shifted));
  BOOST_CHECK(await_connections(*l, 0));
}

BOOST_AUTO_TEST_CASE(a_member_refuses_a_server_that_does_not_know_the_key) {
  // A stranger posing as a server cannot answer the handshake: the member
  // does not send it a frame.
  auto keys = std::make_shared<road_keyring>();
  keys->set(random_secret());
  auto l = road_listener::start("127.0.0.1", 0, road_timeout_ms,
                                road_settings{}, keys, [](road_message_ptr) {});
  BOOST_REQUIRE_MESSAGE(l, why(l));
  auto c = dial(**l, road_kind::tcp, test_member());
  BOOST_REQUIRE_MESSAGE(!c, "dialled a server of another cluster");
  BOOST_CHECK_MESSAGE(describe(c.error()).find("does not know this cluster") !=
                          std::string::npos,
                      describe(c.error()));
}

BOOST_AUTO_TEST_CASE(a_handshake_waits_for_a_key_that_comes_late) {
  // The listener starts before its server registers; a member that dials
  // in between gets in once the key arrives.
  auto keys = std::make_shared<road_keyring>();
  auto l =
      road_listener::start("127.0.0.1", 0, road_timeout_ms, road_settings{},
                           keys, [](road_message_ptr m) {
                             m->conn->send(road_op::reply, m->id, m->bytes);
                           });
  BOOST_REQUIRE_MESSAGE(l, why(l));
  auto dialled = std::async(std::launch::async, [&] {
    return dial(**l, road_kind::tcp, test_member());
  });
  BOOST_CHECK(poll_until([&] { return (*l)->connections() >= 1; }, 10s));
  keys->set(test_road_key());
  auto c = dialled.get();
  BOOST_CHECK_MESSAGE(c, why(c));
}

BOOST_AUTO_TEST_CASE(silent_strangers_cannot_fill_the_listener) {
  // At bc0f027, 1,024 idle connections filled a listener and the real
  // workers fell back to CAF. Now the oldest of them make way.
  auto l = start_echo_listener();
  std::vector<std::unique_ptr<raw_peer>> idle;
  for (int i = 0; i < 300; ++i)
    idle.push_back(std::make_unique<raw_peer>(*l, false, "127.0.0.1", false));
  BOOST_CHECK(poll_until(
      [&] { return l->connections() <= road_listener::max_unadmitted + 1; },
      10s));
  BOOST_CHECK_LE(l->connections(), road_listener::max_unadmitted + 1);
  road_client good{*l, road_kind::tcp, 0};
  echo_one(good, 1, 1024);
}

BOOST_AUTO_TEST_SUITE_END()
