// How a server's replies leave: on the shm road's reply socket, and
// corked while more small requests wait whole in the reader's buffer, but
// never behind a partial, large or paired request.
#define BOOST_TEST_MODULE road_cork_tests
#include <boost/test/unit_test.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "actors/road/road.hpp"
#include "tests/road/road_checks.hpp"
#include "tests/road/road_peers.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// A request as a peer writes it: header and frame.
std::vector<uint8_t> raw_request(uint64_t id, const std::vector<uint64_t>& w) {
  raw_header h;
  h.op = uint8_t(road_op::push);
  h.id = id;
  h.bytes = w.size() * 8;
  std::vector<uint8_t> out(sizeof(h) + h.bytes);
  std::memcpy(out.data(), &h, sizeof(h));
  std::memcpy(out.data() + sizeof(h), w.data(), h.bytes);
  return out;
}

/// Reads the next message on `fd` (at most road_timeout_ms) and checks
/// that it is the echo of request `id` with `words`.
void expect_echo(int fd, uint64_t id, const std::vector<uint64_t>& words) {
  timeval limit{road_timeout_ms / 1000, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  raw_header rep;
  BOOST_REQUIRE_EQUAL(::recv(fd, &rep, sizeof(rep), MSG_WAITALL),
                      ssize_t(sizeof(rep)));
  BOOST_CHECK_EQUAL(rep.op, uint8_t(road_op::reply));
  BOOST_CHECK_EQUAL(rep.id, id);
  BOOST_REQUIRE_EQUAL(rep.bytes, words.size() * 8);
  std::vector<uint64_t> got(words.size());
  BOOST_REQUIRE_EQUAL(::recv(fd, got.data(), rep.bytes, MSG_WAITALL),
                      ssize_t(rep.bytes));
  BOOST_CHECK(got == words);
}

} // namespace

BOOST_TEST_GLOBAL_FIXTURE(log_level_from_env);

BOOST_AUTO_TEST_SUITE(road_cork_tests)

// The server answers on the reply socket, not on the connection: each
// direction has a socket of its own (reading a message would otherwise wake
// the peer's reader for nothing).
BOOST_AUTO_TEST_CASE(an_shm_server_answers_on_the_reply_socket) {
  auto l = start_echo_listener();
  constexpr size_t ring = 1u << 20;
  raw_shm_peer shm{*l, ring, sealed_memfd(ring), sealed_memfd(ring)};
  shm.read_hello();
  auto words = pattern(64, 7); // inline: below the ring threshold
  auto req = raw_request(7, words);
  shm.peer.write(req.data(), req.size());
  expect_echo(shm.replies, 7, words); // a reply elsewhere times out here
  pollfd p{shm.peer.fd, POLLIN, 0};   // nothing came on the connection
  BOOST_CHECK_EQUAL(::poll(&p, 1, 0), 0);
}

// Small requests that arrive together: their replies, written on the
// reading thread, are corked and leave together, in order.
BOOST_AUTO_TEST_CASE(requests_that_arrive_together_are_answered_in_order) {
  auto l = start_echo_listener();
  raw_peer peer{*l, false};
  peer.handshake();
  std::vector<uint8_t> burst;
  std::vector<std::vector<uint64_t>> frames;
  for (uint64_t id = 1; id <= 16; ++id) {
    frames.push_back(pattern(8 * id, id));
    auto r = raw_request(id, frames.back());
    burst.insert(burst.end(), r.begin(), r.end());
  }
  auto corked0 = road_corked_messages();
  peer.write(burst.data(), burst.size()); // one write: read together
  for (uint64_t id = 1; id <= 16; ++id)
    expect_echo(peer.fd, id, frames[id - 1]);
  BOOST_CHECK_GT(road_corked_messages(), corked0);
}

// A reply is not held back for a request that has not fully arrived (the
// peer may wait for the reply before it sends the rest), nor for a large
// one, nor for the second of a pair (kv push_pull: the peer reads the
// first reply while the second is made): it goes out before the reader
// reads on.
BOOST_AUTO_TEST_CASE(
    a_reply_is_not_corked_behind_a_partial_large_or_paired_one) {
  auto l = start_echo_listener();
  raw_peer peer{*l, false};
  peer.handshake();
  auto corked0 = road_corked_messages();
  auto small = pattern(64, 1), rest = pattern(64, 2);
  auto first = raw_request(1, small), second = raw_request(2, rest);
  first.insert(first.end(), second.begin(), second.begin() + 40 + 8);
  peer.write(first.data(), first.size()); // request 2: header and 8 bytes
  expect_echo(peer.fd, 1, small);         // a corked reply times out here
  peer.write(second.data() + 48, second.size() - 48);
  expect_echo(peer.fd, 2, rest);
  auto large = pattern(64 * 1024, 3);
  auto third = raw_request(3, small), fourth = raw_request(4, large);
  third.insert(third.end(), fourth.begin(), fourth.end());
  peer.write(third.data(), third.size());
  expect_echo(peer.fd, 3, small);
  expect_echo(peer.fd, 4, large);
  auto pair = raw_request(5, small), pull = raw_request(6, rest);
  pair.insert(pair.end(), pull.begin(), pull.end());
  peer.write(pair.data(), pair.size());
  expect_echo(peer.fd, 5, small);
  expect_echo(peer.fd, 6, rest);
  BOOST_CHECK_EQUAL(road_corked_messages(), corked0);
}

// A release is no request: a pair (push, pull) with a release between
// them is a pair still, and the first reply is not corked behind it.
BOOST_AUTO_TEST_CASE(a_release_between_a_pair_does_not_cork_its_first_reply) {
  auto l = start_echo_listener();
  constexpr size_t ring = 1u << 20;
  raw_shm_peer shm{*l, ring, sealed_memfd(ring), sealed_memfd(ring)};
  shm.read_hello();
  // A large request: its echo comes through the server's ring, a region
  // we release below.
  auto large = pattern(64 * 1024, 9);
  auto req = raw_request(10, large);
  shm.peer.write(req.data(), req.size());
  raw_header rep;
  BOOST_REQUIRE_EQUAL(::recv(shm.replies, &rep, sizeof(rep), MSG_WAITALL),
                      ssize_t(sizeof(rep)));
  BOOST_REQUIRE_EQUAL(rep.id, 10u);
  BOOST_REQUIRE_EQUAL(rep.in_ring, 1);
  raw_header release;
  release.op = uint8_t(road_op::release);
  release.offset = rep.offset;
  release.bytes = rep.bytes;
  auto small = pattern(64, 1), rest = pattern(64, 2);
  auto burst = raw_request(11, small), pull = raw_request(12, rest);
  auto* r = reinterpret_cast<const uint8_t*>(&release);
  burst.insert(burst.end(), r, r + sizeof(release));
  burst.insert(burst.end(), pull.begin(), pull.end());
  auto corked0 = road_corked_messages();
  shm.peer.write(burst.data(), burst.size()); // read together
  expect_echo(shm.replies, 11, small);
  expect_echo(shm.replies, 12, rest);
  BOOST_CHECK_EQUAL(road_corked_messages(), corked0);
}

BOOST_AUTO_TEST_SUITE_END()
