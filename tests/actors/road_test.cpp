// The fast road alone, without actors: frames of every size echoed over TCP
// and shared memory, concurrent requests and connections, garbage peers,
// ring bookkeeping, and rings unmapped once a connection is gone.
#define BOOST_TEST_MODULE road_tests
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/log.hpp"
#include "actors/road.hpp"
#include "messages/kv.hpp"
#include "tests/actors/road_peers.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// Ring bytes of the shm connections: room for every ring frame of the size
/// sweep at once, so where each frame goes does not depend on timing.
constexpr size_t sweep_ring_bytes = 64u << 20;

/// The frame sizes of the brief: edges of the inline/ring threshold, of 1
/// and 16 MiB, and the largest frame troupe accepts.
const std::vector<size_t> sweep_sizes{0,
                                      8,
                                      min_ring_frame - 8,
                                      min_ring_frame,
                                      (1u << 20) + 8,
                                      (16u << 20) + 24,
                                      max_frame_bytes};

/// Sends frame `id` of `bytes` and checks the echo byte for byte, and which
/// road each direction took.
void echo_one(road_client& c, uint64_t id, size_t bytes) {
  BOOST_TEST_MESSAGE(to_string(c.conn->kind()) << ": " << bytes << " bytes");
  auto words = pattern(bytes, id);
  auto inline0 = c.conn->inline_bytes();
  auto ring0 = c.conn->ring_bytes_sent();
  BOOST_REQUIRE(!c.conn->send(road_op::push, id, view_of(words)));
  bool ring = c.conn->kind() == road_kind::shm && bytes >= min_ring_frame &&
              bytes <= sweep_ring_bytes;
  BOOST_CHECK_EQUAL(c.conn->inline_bytes() - inline0, ring ? 0 : bytes);
  BOOST_CHECK_EQUAL(c.conn->ring_bytes_sent() - ring0, ring ? bytes : 0);
  auto m = c.box->take(id);
  BOOST_REQUIRE_MESSAGE(m, "no echo of " << bytes
                                         << " bytes: " << c.box->reason());
  BOOST_CHECK(m->op == road_op::reply);
  BOOST_CHECK_MESSAGE(same_bytes(*m, words),
                      "echo of " << bytes << " bytes differs");
  BOOST_CHECK_EQUAL(m->ring_bytes > 0, ring); // the reply took the same road
}

/// Requests of mixed sizes from `threads` threads at once on `c`, each
/// thread sending all of its requests before it reads any reply. Returns
/// what went wrong, or "".
std::string echo_concurrently(road_client& c, uint64_t first_id, size_t threads,
                              size_t per_thread) {
  const std::vector<size_t> sizes{8, min_ring_frame, (64u << 10) + 8,
                                  (1u << 20) + 8, (4u << 20) + 16};
  std::mutex mtx;
  std::string errors;
  auto fail = [&mtx, &errors](const std::string& what) {
    std::lock_guard<std::mutex> guard{mtx};
    errors += what + "; ";
  };
  std::vector<std::thread> ts;
  for (size_t t = 0; t < threads; ++t)
    ts.emplace_back([&c, &fail, &sizes, first_id, t, per_thread] {
      std::vector<std::vector<uint64_t>> sent;
      auto id0 = first_id + t * per_thread;
      for (size_t j = 0; j < per_thread; ++j) {
        sent.push_back(pattern(sizes[(t + j) % sizes.size()], id0 + j));
        if (auto err = c.conn->send(road_op::push, id0 + j, view_of(sent[j])))
          return fail("send: " + describe(err));
      }
      for (size_t j = 0; j < per_thread; ++j) {
        auto m = c.box->take(id0 + j);
        if (!m)
          return fail("no reply to " + std::to_string(id0 + j));
        if (!same_bytes(*m, sent[j]))
          fail("reply " + std::to_string(id0 + j) + " differs");
      }
    });
  for (auto& t : ts)
    t.join();
  return errors;
}

/// TROUPE_TEST_LOG=debug shows troupe's log.
struct log_level_from_env {
  log_level_from_env() {
    if (const char* lvl = std::getenv("TROUPE_TEST_LOG"))
      set_log_level(lvl);
  }
};

/// A PullReply of slices of the given sizes, values 1, 2, 3, ... in order.
struct pull_reply_frame {
  std::vector<std::vector<float>> values;
  outbound out;
  frame flat;
  explicit pull_reply_frame(const std::vector<size_t>& sizes) {
    std::vector<slice_view> views;
    uint64_t k = 0;
    for (auto floats : sizes) {
      values.emplace_back(floats);
      for (auto& x : values.back())
        x = float(++k);
    }
    for (size_t i = 0; i < values.size(); ++i)
      views.push_back(
          slice_view{slice_id{i + 1, 0}, values[i].data(), values[i].size()});
    out = encode_pull_reply(7, views, 3);
    flat = out.flatten();
  }
  /// True if `m` decodes to exactly these values.
  bool decodes(const road_message& m) const {
    uint64_t version = 0;
    size_t i = 0;
    bool same = true;
    auto err = visit_pull_reply(
        m.bytes, version, [&](slice_id, const float* xs, size_t n) {
          same = same && i < values.size() && n == values[i].size() &&
                 std::equal(xs, xs + n, values[i].begin());
          ++i;
          return caf::error{};
        });
    return !err && same && i == values.size() && version == 7;
  }
};

/// Slices of sizes no multiple of the chunk, nor of 8: some large enough to
/// be segments of their own.
struct landing_frame : pull_reply_frame {
  landing_frame() : pull_reply_frame({100002, 1, 4097, 2048, 0, 65536}) {}
};

} // namespace

BOOST_TEST_GLOBAL_FIXTURE(log_level_from_env);

BOOST_AUTO_TEST_SUITE(road_tests)

// -- ring_space ---------------------------------------------------------------

BOOST_AUTO_TEST_CASE(ring_space_takes_first_fit_in_64_byte_units) {
  ring_space r{1024};
  BOOST_CHECK_EQUAL(r.take(100), 0u);  // 128 bytes
  BOOST_CHECK_EQUAL(r.take(64), 128u); // 64 bytes
  BOOST_CHECK_EQUAL(r.free_bytes(), 1024u - 192u);
  BOOST_CHECK_EQUAL(r.take(1024), SIZE_MAX);
  r.give(0, 100);
  BOOST_CHECK_EQUAL(r.free_bytes(), 1024u - 64u);
  BOOST_CHECK_EQUAL(r.take(128), 0u); // the hole at the front fits again
  BOOST_CHECK_EQUAL(r.take(1024 - 192), 192u);
  BOOST_CHECK_EQUAL(r.free_bytes(), 0u);
  BOOST_CHECK_EQUAL(r.take(1), SIZE_MAX); // full
}

BOOST_AUTO_TEST_CASE(ring_space_gives_back_only_regions_in_use) {
  ring_space r{1024};
  auto a = r.take(256);
  BOOST_REQUIRE_EQUAL(a, 0u);
  BOOST_CHECK(!r.give(256, 256)); // never taken
  BOOST_CHECK(!r.give(0, 64));    // not the size taken
  BOOST_CHECK(!r.give(1016, 8));  // would reach past the end once rounded
  BOOST_CHECK_EQUAL(r.free_bytes(), 768u);
  BOOST_CHECK(r.give(a, 256));
  BOOST_CHECK(!r.give(a, 256)); // twice
  BOOST_CHECK_EQUAL(r.free_bytes(), 1024u);
  BOOST_CHECK_EQUAL(r.take(1024), 0u); // whole again, not more
  BOOST_CHECK_EQUAL(r.take(64), SIZE_MAX);
}

BOOST_AUTO_TEST_CASE(ring_space_coalesces_regions_given_back_in_any_order) {
  ring_space r{1024};
  for (size_t i = 0; i < 4; ++i)
    BOOST_REQUIRE_EQUAL(r.take(256), i * 256);
  BOOST_CHECK_EQUAL(r.take(64), SIZE_MAX);
  r.give(256, 256);
  r.give(768, 256);
  BOOST_CHECK_EQUAL(r.free_bytes(), 512u);
  BOOST_CHECK_EQUAL(r.take(512), SIZE_MAX); // two holes of 256, not one
  r.give(512, 256);                         // joins both neighbours
  BOOST_CHECK_EQUAL(r.take(768), 256u);
  r.give(256, 768);
  r.give(0, 256); // joins the region after it
  BOOST_CHECK_EQUAL(r.free_bytes(), 1024u);
  BOOST_CHECK_EQUAL(r.take(1024), 0u);
}

// -- transfers ----------------------------------------------------------------

/// Echoes every sweep size over `kind`; returns the bytes that went
/// through the ring.
uint64_t sweep_over(road_kind kind) {
  auto l = start_echo_listener();
  road_client c{*l, kind, sweep_ring_bytes};
  BOOST_REQUIRE(c.conn->kind() == kind);
  uint64_t id = 1;
  for (auto bytes : sweep_sizes)
    echo_one(c, id++, bytes);
  return c.conn->ring_bytes_sent();
}

BOOST_AUTO_TEST_CASE(frames_of_every_size_come_back_byte_exact_over_tcp) {
  BOOST_CHECK_EQUAL(sweep_over(road_kind::tcp), 0u);
}

BOOST_AUTO_TEST_CASE(frames_of_every_size_come_back_byte_exact_over_shm) {
  BOOST_CHECK_GT(sweep_over(road_kind::shm), 0u);
}

BOOST_AUTO_TEST_CASE(a_frame_copied_into_the_ring_by_helpers_comes_back_exact) {
  // A server splits the copy of a large reply over its helper threads:
  // pieces of sizes that are no multiple of the chunk, nor of 8 bytes.
  auto pool = loop_on(std::make_shared<helper_pool>(2));
  pull_reply_frame f{{100003, 16384, 7, 0, 65537}};
  auto& out = f.out;
  auto& flat = f.flat;
  BOOST_REQUIRE_GT(out.pieces().size(), 2u);
  auto l = start_echo_listener();
  road_client c{*l, road_kind::shm, sweep_ring_bytes};
  BOOST_REQUIRE(!c.conn->send(road_op::push, 1, out, &pool));
  BOOST_CHECK_EQUAL(c.conn->ring_bytes_sent(), out.bytes());
  auto m = c.box->take(1);
  BOOST_REQUIRE_MESSAGE(m, "no echo: " << c.box->reason());
  BOOST_REQUIRE_EQUAL(m->bytes.size, flat.bytes.size());
  BOOST_CHECK(std::memcmp(m->bytes.data, flat.bytes.data(), m->bytes.size) ==
              0);
}

BOOST_AUTO_TEST_CASE(a_send_whose_copy_throws_fails_the_connection_instead) {
  // A copy loop that cannot start (no memory, no thread) once the frame has
  // its ring region: the send reports it, and the connection ends, as for
  // any failed write, instead of throwing through the caller with the
  // region taken and the write lock's state unknown.
  loop_fn failing = [](size_t, const loop_body&) { throw std::bad_alloc{}; };
  auto l = start_echo_listener();
  road_client c{*l, road_kind::shm, sweep_ring_bytes};
  pull_reply_frame f{{1u << 18}}; // 1 MiB: past the size split over loops
  caf::error err;
  BOOST_REQUIRE_NO_THROW(err = c.conn->send(road_op::push, 1, f.out, &failing));
  BOOST_REQUIRE(err);
  BOOST_TEST_MESSAGE("send: " << describe(err));
  BOOST_CHECK(c.conn->closed());
  BOOST_CHECK(c.box->wait_down());
  BOOST_CHECK(c.conn->send(road_op::push, 2, view_of(pattern(8, 2))));
}

BOOST_AUTO_TEST_CASE(the_receive_buffer_pool_keeps_no_more_than_its_budget) {
  auto l = start_echo_listener();
  road_client c{*l, road_kind::tcp, 0};
  auto& conn = *c.conn;
  auto give = [&](size_t bytes) {
    size_t cap = 0;
    auto buf = conn.take_buffer(bytes / 8, cap);
    BOOST_REQUIRE_GE(cap, bytes / 8);
    auto at = buf.get();
    conn.give_buffer(std::move(buf), cap);
    return at;
  };
  // Buffers of frames larger than the budget are not kept (their pages are
  // never touched here, so this costs no memory).
  for (int i = 0; i < 4; ++i)
    give(size_t{256} << 20);
  BOOST_CHECK_EQUAL(conn.pooled_bytes(), 0u);
  // Of four 20 MiB buffers held at once, as many as fit the budget stay.
  std::vector<std::pair<std::unique_ptr<uint64_t[]>, size_t>> held(4);
  for (auto& x : held)
    x.first = conn.take_buffer((size_t{20} << 20) / 8, x.second);
  for (auto& x : held)
    conn.give_buffer(std::move(x.first), x.second);
  BOOST_CHECK_EQUAL(conn.pooled_bytes(), size_t{60} << 20);
  BOOST_CHECK_LE(conn.pooled_bytes(), road_pool_budget);
  // A kept buffer is reused.
  size_t cap = 0;
  auto reused = conn.take_buffer((size_t{1} << 20) / 8, cap);
  BOOST_CHECK_EQUAL(cap, (size_t{20} << 20) / 8);
  conn.give_buffer(std::move(reused), cap);
  BOOST_CHECK_EQUAL(conn.pooled_bytes(), size_t{60} << 20);
}

BOOST_AUTO_TEST_CASE(a_frame_above_the_limit_is_refused_by_the_receiver) {
  auto l = start_echo_listener();
  road_client c{*l, road_kind::tcp, 0};
  auto words = pattern(max_frame_bytes + 8, 1);
  // The sender may see the reset or not; the connection must end either way.
  c.conn->send(road_op::push, 1, view_of(words));
  BOOST_CHECK(c.box->wait_down());
  BOOST_CHECK(!c.box->take(1, 0ms));
}

BOOST_AUTO_TEST_CASE(requests_from_several_threads_share_one_connection) {
  auto l = start_echo_listener();
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    // A ring of 8 MiB fills up with 16 requests in flight: some frames go
    // inline, some through the ring, in an order set by timing.
    road_client c{*l, kind, 8u << 20};
    auto errors = echo_concurrently(c, 1, 4, 16);
    BOOST_CHECK_MESSAGE(errors.empty(), to_string(kind) << ": " << errors);
    if (kind == road_kind::shm) {
      BOOST_CHECK_GT(c.conn->ring_bytes_sent(), 0u);
      BOOST_CHECK_GT(c.conn->inline_bytes(), 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(two_connections_transfer_at_once) {
  auto l = start_echo_listener();
  road_client tcp{*l, road_kind::tcp, 0};
  road_client shm{*l, road_kind::shm, 8u << 20};
  BOOST_REQUIRE(shm.conn->kind() == road_kind::shm);
  // The tcp client's reply connection counts until its thread, woken by
  // the hand-over, ends it: just after the hello, under load, that can be
  // later (seen once under ctest -j2: 3 connections).
  BOOST_CHECK_MESSAGE(poll_until([&l] { return l->connections() == 2; }, 10s),
                      "connections: " << l->connections());
  std::string tcp_errors;
  std::thread t{
      [&tcp, &tcp_errors] { tcp_errors = echo_concurrently(tcp, 1, 2, 16); }};
  auto shm_errors = echo_concurrently(shm, 1, 2, 16);
  t.join();
  BOOST_CHECK_MESSAGE(tcp_errors.empty(), "tcp: " << tcp_errors);
  BOOST_CHECK_MESSAGE(shm_errors.empty(), "shm: " << shm_errors);
}

// -- replies landed in place (tcp) -------------------------------------------

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
  auto l = road_listener::start(
      "127.0.0.1", 0, road_timeout_ms, [](road_message_ptr m) {
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

// -- rings --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_full_ring_sends_frames_inline_until_space_returns) {
  // The listener holds every push; a pull drops them (releasing their ring
  // regions) and then answers, so its reply arrives after the releases.
  auto held = std::make_shared<std::vector<road_message_ptr>>();
  auto l = road_listener::start(
      "127.0.0.1", 0, road_timeout_ms, [held](road_message_ptr m) {
        if (m->op == road_op::push) {
          held->push_back(std::move(m));
          return;
        }
        held->clear();
        m->conn->send(road_op::reply, m->id, bytes_view{});
      });
  BOOST_REQUIRE(l);
  road_client c{**l, road_kind::shm, 64u << 10};
  BOOST_REQUIRE(c.conn->kind() == road_kind::shm);
  auto half = pattern(32u << 10, 7);
  for (uint64_t id = 1; id <= 2; ++id)
    BOOST_REQUIRE(!c.conn->send(road_op::push, id, view_of(half)));
  BOOST_CHECK_EQUAL(c.conn->ring_bytes_sent(), 2 * half.size() * 8);
  BOOST_CHECK_EQUAL(c.conn->inline_bytes(), 0u);
  BOOST_REQUIRE(!c.conn->send(road_op::push, 3, view_of(half)));
  BOOST_CHECK_EQUAL(c.conn->inline_bytes(), half.size() * 8); // ring full
  BOOST_REQUIRE(!c.conn->send(road_op::pull, 4, bytes_view{}));
  BOOST_REQUIRE(c.box->take(4));
  BOOST_REQUIRE(!c.conn->send(road_op::push, 5, view_of(half)));
  BOOST_CHECK_EQUAL(c.conn->ring_bytes_sent(), 3 * half.size() * 8);
  BOOST_CHECK_EQUAL(c.conn->inline_bytes(), half.size() * 8);
  // The held message holds the listener's connection, which holds this
  // handler and so `held`: let go, or none of them is ever freed.
  BOOST_REQUIRE(!c.conn->send(road_op::pull, 6, bytes_view{}));
  BOOST_REQUIRE(c.box->take(6));
}

BOOST_AUTO_TEST_CASE(replies_held_by_the_reader_fill_the_ring_then_go_inline) {
  auto l = start_echo_listener();
  road_client c{*l, road_kind::shm, 64u << 10};
  auto half = pattern(32u << 10, 9);
  std::vector<road_message_ptr> kept;
  for (uint64_t id = 1; id <= 3; ++id) {
    BOOST_REQUIRE(!c.conn->send(road_op::push, id, view_of(half)));
    kept.push_back(c.box->take(id));
    BOOST_REQUIRE(kept.back());
    BOOST_CHECK(same_bytes(*kept.back(), half));
  }
  BOOST_CHECK_GT(kept[0]->ring_bytes, 0u);
  BOOST_CHECK_GT(kept[1]->ring_bytes, 0u);
  BOOST_CHECK_EQUAL(kept[2]->ring_bytes, 0u); // the ring was full
}

BOOST_AUTO_TEST_CASE(a_closed_connection_keeps_its_rings_while_messages_live) {
  BOOST_REQUIRE_EQUAL(ring_mappings(), 0u);
  auto l = start_echo_listener();
  road_client c{*l, road_kind::shm, 4u << 20};
  // Both ends live in this process: two rings, each mapped by both.
  BOOST_CHECK_EQUAL(ring_mappings(), 4u);
  auto words = pattern(1u << 20, 3);
  BOOST_REQUIRE(!c.conn->send(road_op::push, 1, view_of(words)));
  auto m = c.box->take(1);
  BOOST_REQUIRE(m && m->ring_bytes > 0);
  c.conn->close();
  c.conn.reset();
  // A message from the ring keeps it mapped, and readable, after the close.
  BOOST_CHECK(same_bytes(*m, words));
  BOOST_CHECK_GE(ring_mappings(), 2u);
  m.reset();
  c.box->clear();
  BOOST_CHECK(await_ring_mappings_at_most(2)); // the dialling end let go
  l.reset();
  // The accepted end's reader may still be on its way out (its connection
  // ended when ours closed, so the listener no longer held it): it unmaps
  // as it leaves. Under load this took longer than the reset (1 of 44
  // tests failed once in `ctest -j2`).
  BOOST_CHECK(await_ring_mappings_at_most(0));
}

BOOST_AUTO_TEST_CASE(a_listener_unmaps_the_rings_of_a_worker_that_left) {
  BOOST_REQUIRE_EQUAL(ring_mappings(), 0u);
  auto l = start_echo_listener();
  {
    road_client c{*l, road_kind::shm, 4u << 20};
    echo_one(c, 1, 1u << 20);
  }
  BOOST_REQUIRE(await_connections(*l, 0));
  auto gone = await_ring_mappings_at_most(0, "self", 2s);
  BOOST_CHECK_MESSAGE(gone, ring_mappings() << " ring mappings left with the "
                                               "listener alive");
  // The next accept prunes the closed connection (and so, its rings).
  road_client next{*l, road_kind::tcp, 0};
  BOOST_CHECK(await_ring_mappings_at_most(0));
}

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

/// A process-wide road setting (set_road_spin and its kind) at `now`
/// while the test lives, then back at `after` (its default).
template <class T> struct setting_for_test {
  void (*set)(T);
  T after;
  setting_for_test(void (*s)(T), T now, T then) : set(s), after(then) {
    set(now);
  }
  ~setting_for_test() { set(after); }
};

/// Tcp roads of this process take a reply connection (the default) or not.
setting_for_test<bool> reply_connection_for_test(bool on) {
  return {set_road_reply_connection, on, true};
}

/// Readers of this process poll for `x` (then 0, the default).
setting_for_test<std::chrono::microseconds>
spin_for_test(std::chrono::microseconds x) {
  return {set_road_spin, x, std::chrono::microseconds{0}};
}

/// Blocking callers of this process poll for `x` (then the default).
setting_for_test<std::chrono::microseconds>
caller_spin_for_test(std::chrono::microseconds x) {
  return {set_road_caller_spin, x,
          std::chrono::microseconds{road_caller_spin_default_us}};
}

/// Readers of this process poll inside large frames for `x` (then the
/// default).
setting_for_test<std::chrono::microseconds>
frame_spin_for_test(std::chrono::microseconds x) {
  return {set_road_frame_spin, x,
          std::chrono::microseconds{road_frame_spin_default_us}};
}

BOOST_AUTO_TEST_CASE(a_tcp_road_answers_on_a_reply_connection_of_its_own) {
  auto l = start_echo_listener();
  for (bool apart : {true, false}) {
    auto setting = reply_connection_for_test(apart);
    {
      road_client c{*l, road_kind::tcp, 0};
      BOOST_CHECK_EQUAL(c.conn->has_reply_socket(), apart);
      auto errors = echo_concurrently(c, 4, 8, 16);
      BOOST_CHECK_MESSAGE(errors.empty(), "apart " << apart << ": " << errors);
      // The reply connection, handed over, counts as none of its own.
      BOOST_CHECK(await_connections(*l, 1));
    }
    BOOST_CHECK(await_connections(*l, 0));
  }
}

// A reply connection pairs with the connection whose hello announced it,
// by the random token both hellos carry; whatever does not pair is refused
// within the hello's timeout (1 s here), and nothing waits behind.
BOOST_AUTO_TEST_CASE(a_reply_connection_that_pairs_with_nothing_is_refused) {
  auto l = start_echo_listener(1000);
  struct bad_case {
    const char* what;
    bool unix_socket;
    uint16_t flags;
    uint64_t token;
  };
  for (auto c :
       {bad_case{"a reply connection nobody announced", false, 2, 77},
        bad_case{"an announced reply connection never dialled", false, 1, 78},
        bad_case{"unknown hello flags", false, 3, 79},
        bad_case{"a reply connection without a token", false, 2, 0},
        bad_case{"hello flags on the shm road", true, 1, 80}}) {
    BOOST_TEST_MESSAGE(c.what);
    raw_peer bad{*l, c.unix_socket};
    raw_header h;
    h.flags = c.flags;
    h.id = c.token;
    bad.write(&h, sizeof(h));
    BOOST_CHECK_MESSAGE(bad.dropped(), c.what << ": not dropped");
    BOOST_CHECK_MESSAGE(await_connections(*l, 0), c.what);
    BOOST_CHECK(
        poll_until([&l] { return l->reply_connections_waiting() == 0; }, 10s));
  }
  {
    // A reply connection from another address than the connection that
    // announced it: refused, both of them.
    raw_peer first{*l, false};
    raw_header h;
    h.flags = 1;
    h.id = 5151;
    first.write(&h, sizeof(h));
    raw_peer other{*l, false, "127.0.0.2"};
    h.flags = 2;
    other.write(&h, sizeof(h));
    BOOST_CHECK_MESSAGE(first.dropped(), "paired with another host");
    BOOST_CHECK_MESSAGE(other.dropped(), "taken by another host");
    BOOST_CHECK(await_connections(*l, 0));
    BOOST_CHECK(
        poll_until([&l] { return l->reply_connections_waiting() == 0; }, 10s));
  }
  // Two reply connections with one token: the second is refused at once
  // (well before this listener's 20 s hello timeout), the first pairs
  // with the connection that announced it.
  l = start_echo_listener(20000);
  raw_header h;
  h.flags = 2;
  h.id = 4242;
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
  BOOST_CHECK(
      poll_until([&l] { return l->reply_connections_waiting() == 0; }, 10s));
  // Requests on the first connection are answered on the reply connection.
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
  BOOST_CHECK(await_connections(*l, 1));
  road_client good{*l, road_kind::tcp, 0};
  echo_one(good, 1, 64u << 10);
}

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
  // A child that becomes user nobody, connects and sends a plain hello
  // (no rings): exit 0 if the server dropped it, 1 if it answered hello.
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
    timeval limit{road_timeout_ms / 1000, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
    raw_header hello;
    ::send(fd, &hello, sizeof(hello), MSG_NOSIGNAL);
    raw_header ack;
    auto n = ::recv(fd, &ack, sizeof(ack), MSG_WAITALL);
    ::_exit(n == ssize_t(sizeof(ack)) ? 1 : n <= 0 && errno != EAGAIN ? 0 : 4);
  }
  int st = 0;
  BOOST_REQUIRE_EQUAL(::waitpid(kid, &st, 0), kid);
  BOOST_REQUIRE(WIFEXITED(st));
  BOOST_CHECK_MESSAGE(WEXITSTATUS(st) == 0, "another user's connection: exit "
                                                << WEXITSTATUS(st)
                                                << " (1: answered)");
  road_client good{*l, road_kind::shm, 1u << 20}; // ours still are
  echo_one(good, 1, 64u << 10);
}

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

BOOST_AUTO_TEST_CASE(tcp_roads_probe_a_peer_that_stays_silent) {
  // A peer whose machine vanished sends no FIN: keepalive ends the road.
  auto l = start_echo_listener();
  auto box = std::make_shared<inbox>();
  auto c = road_dial("127.0.0.1", l->info(), road_kind::tcp, 0, 2000,
                     inbox::on_msg(box), inbox::on_down(box));
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
                     inbox::on_msg(box), inbox::on_down(box));
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
    int fds[2] = {::accept(l, nullptr, nullptr), ::accept(l, nullptr, nullptr)};
    raw_header h;
    if (fds[0] >= 0 &&
        ::recv(fds[0], &h, sizeof(h), MSG_WAITALL) == ssize_t(sizeof(h))) {
      raw_header ack; // flags 0: one connection both ways
      ::send(fds[0], &ack, sizeof(ack), MSG_NOSIGNAL);
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
  auto c = road_dial("127.0.0.1", info, road_kind::tcp, 0, 5000,
                     inbox::on_msg(box), inbox::on_down(box));
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
                       inbox::on_msg(box), inbox::on_down(box));
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
                     inbox::on_msg(box), inbox::on_down(box));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                std::chrono::steady_clock::now() - t0)
                .count();
  // Not BOOST_REQUIRE: an aborted case fails even when failures are expected.
  BOOST_CHECK_MESSAGE(c, "dial beside a silent peer: " << why(c) << " after "
                                                       << ms << " ms");
  if (c)
    (*c)->close();
}

// -- a blocking caller reading its own replies
// ---------------------------------

namespace {

/// A dialled connection whose handler notes the thread each message was
/// handed over on, beside the usual inbox.
struct traced_client {
  std::shared_ptr<inbox> box = std::make_shared<inbox>();
  std::shared_ptr<std::map<uint64_t, std::thread::id>> threads =
      std::make_shared<std::map<uint64_t, std::thread::id>>();
  road_conn_ptr conn;

  /// `timeout_ms` bounds the connection's sends (and a caller's reads).
  traced_client(const road_listener& l, road_kind want,
                uint32_t timeout_ms = road_timeout_ms) {
    auto put = inbox::on_msg(box);
    auto seen = threads;
    auto box_ = box;
    auto c = road_dial(
        "127.0.0.1", l.info(), want, 8u << 20, timeout_ms,
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

} // namespace

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
  auto l = road_listener::start(
      "127.0.0.1", 0, road_timeout_ms, [](road_message_ptr m) {
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
      "127.0.0.1", 0, road_timeout_ms, [](road_message_ptr m) {
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

BOOST_AUTO_TEST_CASE(a_blocking_caller_polls_for_its_reply_and_reads_it_exact) {
  // Reader threads never poll here (--road.spin-us is 0): whatever is
  // found while polling, a caller found.
  auto l = start_echo_listener();
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    traced_client c{*l, kind};
    auto id = c.until_callers_read(1);
    {
      auto off = caller_spin_for_test(std::chrono::microseconds{0});
      auto before = road_spins_found();
      for (int i = 0; i < 20; ++i)
        BOOST_CHECK_MESSAGE(c.call(id++), to_string(kind) << ": call " << i
                                                          << " read elsewhere");
      BOOST_CHECK_EQUAL(road_spins_found(), before); // off: nobody polled
    }
    // An echo in this process answers well within 10 ms: callers find
    // their replies while they poll, read here and byte-exact (call()
    // checks), the road still theirs after.
    auto on = caller_spin_for_test(std::chrono::microseconds{10000});
    auto before = road_spins_found();
    for (int i = 0; i < 20; ++i)
      BOOST_CHECK_MESSAGE(c.call(id++), to_string(kind) << ": call " << i
                                                        << " read elsewhere");
    BOOST_CHECK_GT(road_spins_found(), before);
    BOOST_CHECK_EQUAL(c.conn->outstanding(), 0u);
  }
}

BOOST_AUTO_TEST_CASE(a_caller_takes_the_road_while_replies_are_outstanding) {
  // A server that holds its replies until the test opens its gate: the
  // requests stay outstanding meanwhile.
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
  auto g = std::make_shared<gate>();
  auto l = road_listener::start(
      "127.0.0.1", 0, road_timeout_ms, [g](road_message_ptr m) {
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
    // Round 0 lets the reader thread learn that callers wait on this road
    // (it then waits for input and for them alike); in round 1 the caller
    // must get the road before any reply comes.
    for (int round = 0; round < 2; ++round) {
      g->set(false);
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
      g->set(true);
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
      id += 2;
    }
    // Done, with nothing outstanding: the road stays with callers, but a
    // caller finds nothing to read on it (its reply went elsewhere, say):
    // it is told so at once, to wait by mail.
    BOOST_CHECK(c.conn->read_by_callers());
    BOOST_CHECK(!c.conn->pump_once(std::chrono::milliseconds{2}));
    BOOST_CHECK(c.conn->read_by_callers());
    // A send by no caller gives the road back to the reader thread, which
    // reads.
    std::vector<uint64_t> last{id};
    BOOST_REQUIRE(!c.conn->send(road_op::pull, id, view_of(last)));
    BOOST_CHECK(!c.conn->read_by_callers());
    auto m = c.box->take(id);
    BOOST_REQUIRE_MESSAGE(m, "no reply: " << c.box->reason());
    BOOST_CHECK(c.thread_of(id) != std::this_thread::get_id());
    ++id;
    // Amid large frames a caller leaves the road to the reader thread with
    // replies outstanding: their copies need the cores it would poll on.
    g->set(false);
    std::vector<uint64_t> large((64u << 10) / 8, id), small{id + 1};
    BOOST_REQUIRE(!c.conn->send(road_op::push, id, view_of(large)));
    c.send_as_caller(id + 1, small);
    BOOST_CHECK(!c.conn->pump_once(std::chrono::milliseconds{2}));
    BOOST_CHECK(!c.conn->read_by_callers());
    c.conn->caller_done();
    g->set(true);
    auto big = c.box->take(id);
    auto tiny = c.box->take(id + 1);
    BOOST_REQUIRE_MESSAGE(big && tiny, "no replies: " << c.box->reason());
    BOOST_CHECK(same_bytes(*big, large));
    BOOST_CHECK(same_bytes(*tiny, small));
    BOOST_CHECK(c.thread_of(id + 1) != std::this_thread::get_id());
  }
  g->set(true);
}

BOOST_AUTO_TEST_CASE(spinning_readers_deliver_every_frame_and_see_a_peer_end) {
  // Off, nobody polls.
  auto callers_off = caller_spin_for_test(std::chrono::microseconds{0});
  auto before = road_spins_found();
  BOOST_CHECK_GT(sweep_over(road_kind::shm), 0u);
  BOOST_CHECK_EQUAL(road_spins_found(), before);
  {
    // Replies of an echo in this process come well within 2 ms: readers
    // find them while polling, and every frame still comes back exact, to
    // reader threads and to callers reading their own replies alike.
    auto spin = spin_for_test(std::chrono::microseconds{2000});
    BOOST_CHECK_EQUAL(sweep_over(road_kind::tcp), 0u);
    BOOST_CHECK_GT(sweep_over(road_kind::shm), 0u);
    BOOST_CHECK_GT(road_spins_found(), before);
    auto l = start_echo_listener();
    for (auto kind : {road_kind::tcp, road_kind::shm}) {
      road_client c{*l, kind, 8u << 20};
      auto errors = echo_concurrently(c, 1, 4, 16);
      BOOST_CHECK_MESSAGE(errors.empty(), to_string(kind) << ": " << errors);
      traced_client t{*l, kind};
      auto id = t.until_callers_read(1);
      for (int i = 0; i < 20; ++i)
        BOOST_CHECK_MESSAGE(t.call(id++), to_string(kind) << ": call " << i
                                                          << " read elsewhere");
    }
  }
  // A peer that ends its side while our reader polls: the road ends, at
  // once rather than after the poll time (10 s here).
  auto spin = spin_for_test(std::chrono::microseconds{10000000});
  auto l = road_listener::start("127.0.0.1", 0, road_timeout_ms,
                                [](road_message_ptr m) { m->conn->close(); });
  BOOST_REQUIRE_MESSAGE(l, "listener: " << why(l));
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    road_client c{**l, kind, 0};
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
  // This listener answers request 1 with a 1 MiB reply: half of it, then
  // the rest in four pieces, each once our reader has read all that came
  // before (nothing unread on either socket), so that it waits inside the
  // frame. To request 2 it sends half a reply, waits the same way, then
  // ends the connection.
  auto want = pattern(1u << 20, 11);
  std::atomic<int> reader_fd{-1}; // our end, which the test sets
  auto l = road_listener::start(
      "127.0.0.1", 0, road_timeout_ms, [&want, &reader_fd](road_message_ptr m) {
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
      });
  BOOST_REQUIRE_MESSAGE(l, "listener: " << why(l));
  std::vector<uint64_t> words{1};
  for (auto kind : {road_kind::tcp, road_kind::shm}) {
    // Polling (10 s here), the reader finds the pieces without sleeping;
    // off, it sleeps until each comes. The reply is whole and exact
    // either way.
    for (auto us : {0, 10000000}) {
      auto spin = frame_spin_for_test(std::chrono::microseconds{us});
      road_client c{**l, kind, 0};
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
    auto spin = frame_spin_for_test(std::chrono::microseconds{10000000});
    road_client c{**l, kind, 0};
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
