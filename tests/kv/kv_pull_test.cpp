// Pulled arrays filled from replies: a reply read apart on a tcp road, its
// large slices landed in place and the rest copied; values that lie
// anywhere else refused; nothing landed where arrays are not sized in full.
#define BOOST_TEST_MODULE kv_pull_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "actors/cluster/placement.hpp"
#include "actors/kv/kv_pull.hpp"
#include "messages/errors.hpp"
#include "tests/messages/raw_frame.hpp"

using namespace troupe;

namespace {

/// Slices of 8 KiB: key 1 (5000 floats) has two of them, a segment each
/// in a reply, and a 3616-byte tail that stays in the first segment; key 2
/// (1025 floats: not whole words) stays there too.
constexpr uint32_t bound = 2048;
constexpr size_t floats1 = 5000;
constexpr size_t floats2 = 1025;

/// What a server holds, and its PullReply for every slice of both keys,
/// flat in an aligned buffer as a road reads it.
struct reply_frame {
  std::vector<float> key1, key2;
  std::vector<uint64_t> words;  // the flat frame
  std::vector<bytes_view> segs; // its segments, in the buffer
  bytes_view flat() const {
    return {reinterpret_cast<const uint8_t*>(words.data()), words.size() * 8};
  }
  reply_frame() : key1(floats1), key2(floats2) {
    for (size_t i = 0; i < key1.size(); ++i)
      key1[i] = 0.5f * float(i);
    for (size_t i = 0; i < key2.size(); ++i)
      key2[i] = -float(i);
    std::vector<slice_view> views;
    for (uint32_t i = 0; i < slice_count(floats1, bound); ++i) {
      auto r = slice_range(floats1, bound, i);
      views.push_back(slice_view{slice_id{1, i}, key1.data() + r.first,
                                 r.second - r.first});
    }
    views.push_back(slice_view{slice_id{2, 0}, key2.data(), key2.size()});
    auto f = encode_pull_reply(9, views, 4).flatten();
    words.resize(f.bytes.size() / 8);
    std::memcpy(words.data(), f.bytes.data(), f.bytes.size());
    auto* base = reinterpret_cast<const uint8_t*>(words.data());
    segs = test::segments_of(base);
    BOOST_REQUIRE(segs.back().data + segs.back().size == base + f.bytes.size());
  }
};

/// A target for both keys; key 1 sized in full (stale values) when `full`.
std::shared_ptr<pull_target> target(bool full) {
  auto t = std::make_shared<pull_target>();
  t->add(1, floats1, bound,
         full ? std::vector<float>(floats1, NAN) : std::vector<float>{});
  t->add(2, floats2, bound);
  return t;
}

/// Reads segment `i` of `r` to `at` (as the road does) and points it there.
void land(reply_frame& r, size_t i, uint8_t* at) {
  std::memcpy(at, r.segs[i].data, r.segs[i].size);
  r.segs[i].data = at;
}

/// Checks that reply `f` (of `r`) fills both keys of `t` with the values.
void fills_both(const reply_frame& r, pull_target& t, bytes_view f) {
  BOOST_REQUIRE(!copy_reply(f, t, bound));
  BOOST_REQUIRE(!t.complete());
  BOOST_CHECK(t.out[0].values == r.key1);
  BOOST_CHECK(t.out[1].values == r.key2);
}

bytes_view apart(const reply_frame& r) {
  auto f = r.flat();
  f.segments = r.segs.data();
  f.segment_count = r.segs.size();
  return f;
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_pull_tests)

BOOST_AUTO_TEST_CASE(large_slices_land_in_place_and_the_rest_is_copied) {
  reply_frame r;
  BOOST_REQUIRE_EQUAL(r.segs.size(), 3u); // two slices are segments
  auto t = target(true);
  pull_landing l{t, bound};
  std::vector<uint8_t*> at(r.segs.size(), nullptr);
  l.place(r.segs, at);
  auto* dst = reinterpret_cast<uint8_t*>(t->out[0].values.data());
  BOOST_CHECK(at[0] == nullptr);
  BOOST_CHECK(at[1] == dst);
  BOOST_CHECK(at[2] == dst + bound * sizeof(float));
  for (size_t i = 1; i < at.size(); ++i)
    land(r, i, at[i]);
  fills_both(r, *t, apart(r));
}

BOOST_AUTO_TEST_CASE(values_that_lie_in_another_slices_place_are_refused) {
  reply_frame r;
  auto t = target(true);
  auto* dst = reinterpret_cast<uint8_t*>(t->out[0].values.data());
  // Each of the two segments read into the other slice's place.
  land(r, 1, dst + bound * sizeof(float));
  land(r, 2, dst);
  auto err = copy_reply(apart(r), *t, bound);
  BOOST_CHECK(err == errc::malformed_message);
  BOOST_TEST_MESSAGE(describe(err));
}

BOOST_AUTO_TEST_CASE(values_that_lie_outside_the_frame_are_refused) {
  reply_frame r;
  auto t = target(true);
  std::vector<uint64_t> elsewhere(r.segs[1].size / 8);
  land(r, 1, reinterpret_cast<uint8_t*>(elsewhere.data()));
  BOOST_CHECK(copy_reply(apart(r), *t, bound) == errc::malformed_message);
}

BOOST_AUTO_TEST_CASE(nothing_lands_in_arrays_not_sized_in_full) {
  reply_frame r;
  auto t = target(false);
  pull_landing l{t, bound};
  std::vector<uint8_t*> at(r.segs.size(), nullptr);
  l.place(r.segs, at);
  for (auto p : at)
    BOOST_CHECK(p == nullptr);
  fills_both(r, *t, r.flat()); // read flat: the reply is copied in
}

BOOST_AUTO_TEST_CASE(a_frame_that_does_not_parse_lands_nothing) {
  reply_frame r;
  auto t = target(true);
  pull_landing l{t, bound};
  std::vector<uint64_t> junk(r.segs[0].size / 8, ~uint64_t{0});
  r.segs[0].data = reinterpret_cast<const uint8_t*>(junk.data());
  std::vector<uint8_t*> at(r.segs.size(), nullptr);
  l.place(r.segs, at);
  for (auto p : at)
    BOOST_CHECK(p == nullptr);
  BOOST_CHECK(copy_reply(apart(r), *t, bound) == errc::malformed_message);
}

BOOST_AUTO_TEST_CASE(a_reply_missing_slices_leaves_the_target_incomplete) {
  reply_frame r;
  auto t = target(false);
  t->add(3, 10, bound); // asked, never answered
  BOOST_REQUIRE(!copy_reply(r.flat(), *t, bound));
  BOOST_CHECK(t->complete() == errc::malformed_message);
}

BOOST_AUTO_TEST_SUITE_END()
