// Checks and frames the road tests share: echoes of frames of every size,
// one at a time and from several threads at once, and PullReply frames
// whose segments a landing may place.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "actors/base/log.hpp"
#include "actors/road/road.hpp"
#include "messages/kv.hpp"
#include "tests/road/road_peers.hpp"

namespace troupe::test {

/// Ring bytes of the shm connections: room for every ring frame of the size
/// sweep at once, so where each frame goes does not depend on timing.
constexpr size_t sweep_ring_bytes = 64u << 20;

/// The frame sizes of the brief: edges of the inline/ring threshold, of 1
/// and 16 MiB, and the largest frame troupe accepts.
inline const std::vector<size_t> sweep_sizes{0,
                                             8,
                                             min_ring_frame - 8,
                                             min_ring_frame,
                                             (1u << 20) + 8,
                                             (16u << 20) + 24,
                                             max_frame_bytes};

/// Sends frame `id` of `bytes` and checks the echo byte for byte, and which
/// road each direction took.
inline void echo_one(road_client& c, uint64_t id, size_t bytes) {
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
inline std::string echo_concurrently(road_client& c, uint64_t first_id,
                                     size_t threads, size_t per_thread) {
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

/// Echoes every sweep size over `kind`, both ends polling as `settings`
/// say; returns the bytes that went through the ring.
inline uint64_t sweep_over(road_kind kind, road_settings settings = {}) {
  auto l = start_echo_listener(road_timeout_ms, settings);
  road_client c{*l, kind, sweep_ring_bytes, road_timeout_ms, settings};
  BOOST_REQUIRE(c.conn->kind() == kind);
  uint64_t id = 1;
  for (auto bytes : sweep_sizes)
    echo_one(c, id++, bytes);
  return c.conn->ring_bytes_sent();
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

} // namespace troupe::test
