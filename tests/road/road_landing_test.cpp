// Replies landed in place on a tcp road: a pull reply's segments read
// straight to where its landing places them, and the frames and roads
// that land nothing.
#define BOOST_TEST_MODULE road_landing_tests
#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "actors/road/road.hpp"
#include "tests/road/road_checks.hpp"
#include "tests/road/road_peers.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// Places every segment after the first in memory of its own, and notes
/// what it saw.
struct test_landing : road_landing {
  std::vector<std::vector<uint64_t>> places;
  size_t calls = 0;
  void place(const std::vector<bytes_view>& segs,
             std::vector<uint8_t*>& at) override {
    ++calls;
    places.resize(segs.size());
    for (size_t i = 1; i < segs.size(); ++i) {
      places[i].resize(segs[i].size / 8);
      at[i] = reinterpret_cast<uint8_t*>(places[i].data());
    }
  }
};

} // namespace

BOOST_TEST_GLOBAL_FIXTURE(log_level_from_env);

BOOST_AUTO_TEST_SUITE(road_landing_tests)

BOOST_AUTO_TEST_CASE(a_reply_lands_where_its_landing_places_it_over_tcp) {
  landing_frame f;
  BOOST_REQUIRE_GT(f.out.pieces().size(), 3u); // several segments
  auto l = start_echo_listener();
  road_client c{*l, road_kind::tcp, 0};
  auto land = std::make_shared<test_landing>();
  c.conn->land_reply(1, land);
  BOOST_REQUIRE(!c.conn->send(road_op::push, 1, f.out));
  auto m = c.box->take(1);
  BOOST_REQUIRE_MESSAGE(m, "no echo: " << c.box->reason());
  BOOST_CHECK_EQUAL(land->calls, 1u);
  BOOST_CHECK(m->landing == land);
  BOOST_REQUIRE_EQUAL(m->segments.size(), f.out.pieces().size() - 1);
  BOOST_REQUIRE(m->bytes.segments == m->segments.data());
  BOOST_CHECK_EQUAL(m->bytes.size, f.flat.bytes.size());
  for (size_t i = 1; i < m->segments.size(); ++i) {
    auto& piece = f.out.pieces()[i + 1]; // the table is piece 0
    BOOST_CHECK(m->segments[i].data ==
                reinterpret_cast<uint8_t*>(land->places[i].data()));
    BOOST_REQUIRE_EQUAL(m->segments[i].size, piece.size);
    BOOST_CHECK(std::memcmp(m->segments[i].data, piece.data, piece.size) == 0);
  }
  BOOST_CHECK(f.decodes(*m));
  // The landing served its reply: the next one with that id is read flat.
  BOOST_REQUIRE(!c.conn->send(road_op::push, 1, f.out));
  m = c.box->take(1);
  BOOST_REQUIRE(m);
  BOOST_CHECK(m->segments.empty() && !m->landing);
  BOOST_CHECK(f.decodes(*m));
  BOOST_CHECK_EQUAL(land->calls, 1u);
}

BOOST_AUTO_TEST_CASE(a_forgotten_landing_and_one_on_shm_land_nothing) {
  landing_frame f;
  auto l = start_echo_listener();
  road_client tcp{*l, road_kind::tcp, 0};
  road_client shm{*l, road_kind::shm, sweep_ring_bytes};
  auto land = std::make_shared<test_landing>();
  tcp.conn->land_reply(1, land);
  tcp.conn->forget_landing(1);
  shm.conn->land_reply(1, land);
  for (auto* c : {&tcp, &shm}) {
    BOOST_REQUIRE(!c->conn->send(road_op::push, 1, f.out));
    auto m = c->box->take(1);
    BOOST_REQUIRE_MESSAGE(m, "no echo: " << c->box->reason());
    BOOST_CHECK(m->segments.empty() && !m->landing);
    BOOST_CHECK(f.decodes(*m));
  }
  BOOST_CHECK_EQUAL(land->calls, 0u);
  BOOST_CHECK_EQUAL(land.use_count(), 1); // no road holds it
}

BOOST_AUTO_TEST_CASE(a_failure_in_place_of_a_reply_drops_its_landing) {
  auto l =
      road_listener::start("127.0.0.1", 0, road_timeout_ms, road_settings{},
                           test_keys(), [](road_message_ptr m) {
                             m->conn->send(road_op::failure, m->id, m->bytes);
                           });
  BOOST_REQUIRE(l);
  landing_frame f;
  road_client c{**l, road_kind::tcp, 0};
  auto land = std::make_shared<test_landing>();
  std::weak_ptr<test_landing> weak = land;
  c.conn->land_reply(1, std::move(land));
  BOOST_REQUIRE(!c.conn->send(road_op::push, 1, f.out));
  auto m = c.box->take(1);
  BOOST_REQUIRE(m);
  BOOST_CHECK(m->op == road_op::failure);
  BOOST_CHECK(m->segments.empty() && !m->landing);
  BOOST_CHECK(weak.expired());
}

BOOST_AUTO_TEST_CASE(a_reply_that_is_no_segment_table_is_read_flat) {
  // Frames a landing cannot split: a count of segments beyond any frame's,
  // sizes that do not add up, no bytes at all. Each comes back whole, and
  // the connection goes on.
  auto l = start_echo_listener();
  road_client c{*l, road_kind::tcp, 0};
  auto land = std::make_shared<test_landing>();
  auto huge_count = pattern(4096, 1);
  huge_count[0] = 0xffffffffu;
  auto bad_sizes = pattern(4096, 2);
  bad_sizes[0] = uint64_t{3} << 32; // one segment of 3 words in 4 KiB
  uint64_t id = 1;
  for (auto* words : {&huge_count, &bad_sizes}) {
    c.conn->land_reply(id, land);
    BOOST_REQUIRE(!c.conn->send(road_op::push, id, view_of(*words)));
    auto m = c.box->take(id);
    BOOST_REQUIRE_MESSAGE(m, "no echo: " << c.box->reason());
    BOOST_CHECK(same_bytes(*m, *words));
    BOOST_CHECK(m->segments.empty());
    ++id;
  }
  c.conn->land_reply(id, land);
  BOOST_REQUIRE(!c.conn->send(road_op::push, id, bytes_view{}));
  auto m = c.box->take(id);
  BOOST_REQUIRE(m);
  BOOST_CHECK_EQUAL(m->bytes.size, 0u);
  BOOST_CHECK(m->segments.empty());
  BOOST_CHECK_EQUAL(land->calls, 0u);
  echo_one(c, id + 1, 4096);
}

BOOST_AUTO_TEST_SUITE_END()
