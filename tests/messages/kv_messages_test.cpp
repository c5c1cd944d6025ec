// Encode/decode of the kv conversation: sizes from 0 to large tensors, and
// malformed bytes.
#define BOOST_TEST_MODULE kv_messages_tests
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstring>
#include <numeric>

#include <caf/sec.hpp>
#include <capnp/message.h>
#include <capnp/serialize.h>

#include "messages/errors.hpp"
#include "messages/kv.capnp.h"
#include "messages/kv.hpp"
#include "tests/messages/raw_frame.hpp"

using namespace troupe;
using troupe::test::raw;

namespace {

std::vector<float> iota_floats(size_t n, float start = 0.5f) {
  std::vector<float> xs(n);
  std::iota(xs.begin(), xs.end(), start);
  return xs;
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_messages_tests)

BOOST_AUTO_TEST_CASE(push_keeps_every_value_for_sizes_from_zero_up) {
  for (size_t n : {0, 1, 3, 7, 1000, 65537}) {
    push_request p{
        3, 9, 2,
        1, 2, {{{5, 0}, iota_floats(n)}, {{6, 1}, iota_floats(n / 2 + 1)}}};
    push_request q;
    BOOST_REQUIRE(!decode(encode(p), q));
    BOOST_CHECK(q.worker == 3 && q.clock == 9 && q.epoch == 2);
    BOOST_CHECK(q.part == 1 && q.parts == 2);
    BOOST_CHECK(q.slices == p.slices);
  }
}

BOOST_AUTO_TEST_CASE(init_pull_and_replies_round_trip) {
  init_request i{1, 4, {{{2, 3}, iota_floats(10)}}}, i2;
  BOOST_REQUIRE(!decode(encode(i), i2));
  BOOST_CHECK(i2.worker == 1 && i2.epoch == 4 && i2.slices == i.slices);

  pull_request p{2, 5, 6, {{1, 0}, {1, 1}, {9, 4}}}, p2;
  BOOST_REQUIRE(!decode(encode(p), p2));
  BOOST_CHECK(p2.worker == 2 && p2.clock == 5 && p2.epoch == 6);
  BOOST_CHECK(p2.slices == p.slices);

  pull_reply r{11, {{{1, 0}, iota_floats(5)}, {{1, 1}, {}}}, 42}, r2;
  BOOST_REQUIRE(!decode(encode(r), r2));
  BOOST_CHECK_EQUAL(r2.version, 11u);
  BOOST_CHECK_EQUAL(r2.clock, 42u);
  BOOST_CHECK(r2.slices == r.slices);

  push_reply a{8, true}, a2;
  BOOST_REQUIRE(!decode(encode(a), a2));
  BOOST_CHECK(a2.version == 8 && a2.duplicate);
}

BOOST_AUTO_TEST_CASE(requests_without_values_are_built_in_one_segment) {
  // Their first segment is sized to them (not Cap'n Proto's 8 KiB default):
  // a flat frame whose segment table says one segment (0 = count - 1) and
  // whose size is that one segment, so the estimate holds from no slice to
  // thousands, and every slice named comes back.
  auto one_segment = [](const frame& f) {
    uint32_t extra = 1;
    BOOST_REQUIRE_GE(f.bytes.size(), 8u);
    std::memcpy(&extra, f.bytes.data(), sizeof(extra));
    return extra == 0;
  };
  for (size_t n : {0, 1, 2, 7, 100, 5000}) {
    pull_request p{1, 2, 3, {}}, q;
    for (size_t i = 0; i < n; ++i)
      p.slices.push_back(slice_id{i * 7, static_cast<uint32_t>(i % 5)});
    auto f = encode(p);
    BOOST_CHECK_MESSAGE(one_segment(f), n << " slices");
    BOOST_CHECK_LT(f.bytes.size(), 72 + 16 * n); // 64 bytes with none
    BOOST_REQUIRE(!decode(f, q));
    BOOST_CHECK(q.slices == p.slices);
  }
  auto f = encode(push_reply{~uint64_t{0}, true});
  BOOST_CHECK(one_segment(f));
  push_reply a;
  BOOST_REQUIRE(!decode(f, a));
  BOOST_CHECK(a.version == ~uint64_t{0} && a.duplicate);
}

BOOST_AUTO_TEST_CASE(a_pull_reply_read_apart_sees_every_segment) {
  // As a tcp road reads a reply apart: each large slice a segment of its
  // own, the frame seen through its segment table. Frames of fewer and of
  // more segments than a reader keeps without allocating (8) read alike.
  for (size_t n : {1, 6, 7, 8, 9, 20}) {
    std::vector<std::vector<float>> values;
    std::vector<slice_view> views;
    for (size_t i = 0; i < n; ++i)
      values.push_back(iota_floats(1024 + 2 * i, float(i)));
    for (size_t i = 0; i < n; ++i)
      views.push_back(slice_view{slice_id{3, static_cast<uint32_t>(i)},
                                 values[i].data(), values[i].size()});
    auto f = encode_pull_reply(5, views, 6).flatten();
    std::vector<uint64_t> words(f.bytes.size() / 8);
    std::memcpy(words.data(), f.bytes.data(), f.bytes.size());
    auto* base = reinterpret_cast<const uint8_t*>(words.data());
    auto segs = test::segments_of(base);
    BOOST_REQUIRE(segs.back().data + segs.back().size == base + f.bytes.size());
    BOOST_REQUIRE_EQUAL(segs.size(), n + 1); // the first, then one a slice
    bytes_view apart{base, f.bytes.size()};
    apart.segments = segs.data();
    apart.segment_count = segs.size();
    uint64_t version = 0;
    size_t seen = 0;
    BOOST_REQUIRE(!visit_pull_reply(
        apart, version, [&](slice_id id, const float* xs, size_t k) {
          BOOST_CHECK(id == views[seen].id);
          BOOST_CHECK(std::vector<float>(xs, xs + k) == values[seen]);
          ++seen;
          return caf::error{};
        }));
    BOOST_CHECK_EQUAL(version, 5u);
    BOOST_CHECK_MESSAGE(seen == n, seen << " of " << n << " slices");
  }
}

BOOST_AUTO_TEST_CASE(encoding_from_views_equals_encoding_from_vectors) {
  auto a = iota_floats(1000), b = iota_floats(7, -3.0f);
  std::vector<slice_view> views{{{1, 0}, a.data(), 600},
                                {{1, 1}, a.data() + 600, 400},
                                {{2, 0}, b.data(), 7}};
  push_request header{4, 5, 6, 0, 1, {}};
  push_request q;
  BOOST_REQUIRE(!decode(encode_push(header, views).flatten(), q));
  BOOST_CHECK(q.worker == 4 && q.clock == 5 && q.epoch == 6);
  BOOST_REQUIRE_EQUAL(q.slices.size(), 3u);
  BOOST_CHECK(q.slices[1].values ==
              std::vector<float>(a.begin() + 600, a.end()));
  BOOST_CHECK(q.slices[2].values == b);
  // A PullReply read in place sees the same values, in order.
  auto f = encode_pull_reply(9, views, 17).flatten();
  uint64_t version = 0, clock = 0;
  size_t seen = 0;
  BOOST_REQUIRE(!visit_pull_reply(
      f, version,
      [&](slice_id id, const float* xs, size_t n) {
        BOOST_CHECK(id == views[seen].id);
        BOOST_CHECK(std::equal(xs, xs + n, views[seen].data));
        BOOST_CHECK_EQUAL(n, views[seen].size);
        ++seen;
        return caf::error{};
      },
      &clock));
  BOOST_CHECK_EQUAL(version, 9u);
  BOOST_CHECK_EQUAL(clock, 17u);
  BOOST_CHECK_EQUAL(seen, 3u);
}

BOOST_AUTO_TEST_CASE(a_visitor_error_stops_the_visit_and_bad_bytes_fail) {
  auto a = iota_floats(10);
  auto f = encode_pull_reply(1, {{{1, 0}, a.data(), 5}, {{1, 1}, a.data(), 5}})
               .flatten();
  uint64_t version = 0;
  size_t calls = 0;
  auto err = visit_pull_reply(f, version, [&](slice_id, const float*, size_t) {
    ++calls;
    return caf::make_error(errc::bad_shape);
  });
  BOOST_CHECK(err == errc::bad_shape);
  BOOST_CHECK_EQUAL(calls, 1u);
  auto garbage = visit_pull_reply(
      frame{std::vector<uint8_t>(24, 0xCC)}, version,
      [](slice_id, const float*, size_t) { return caf::error{}; });
  BOOST_CHECK(garbage == errc::malformed_message);
}

BOOST_AUTO_TEST_CASE(a_tensor_above_the_default_reader_limit_decodes) {
  // 80 MiB in one slice: beyond Cap'n Proto's default 64 MiB traversal
  // limit, which troupe raises deliberately for tensor frames.
  push_request p{0, 0, 1, 0, 1, {{{1, 0}, iota_floats(20u << 20)}}};
  push_request q;
  BOOST_REQUIRE(!decode(encode(p), q));
  BOOST_REQUIRE_EQUAL(q.slices.size(), 1u);
  BOOST_CHECK(q.slices[0].values == p.slices[0].values);
}

BOOST_AUTO_TEST_CASE(bad_parts_are_malformed) {
  push_request q;
  BOOST_CHECK(decode(encode(push_request{0, 0, 1, 0, 0, {}}), q) ==
              errc::malformed_message);
  BOOST_CHECK(decode(encode(push_request{0, 0, 1, 2, 2, {}}), q) ==
              errc::malformed_message);
}

BOOST_AUTO_TEST_CASE(a_small_frame_claiming_a_million_slices_fails_at_once) {
  // 64 bytes: a Push whose slices are a list of 1M zero-sized structs (a
  // legal Cap'n Proto encoding of no data). At bc0f027 the reader's
  // traversal floor (8M words) let it through, and the server sorted 1M
  // slice ids for 41 ms before it found the frame malformed. The limit now
  // scales with the frame: refused by the reader itself.
  std::vector<uint64_t> words{
      uint64_t{7} << 32,                             // 1 segment of 7 words
      (uint64_t{1} << 48) | (uint64_t{4} << 32),     // root: 4 data, 1 ptr
      0,                                             // worker, part
      0,                                             // clock
      0,                                             // epoch
      1,                                             // parts
      (uint64_t{0} << 35) | (uint64_t{7} << 32) | 1, // list: composite
      uint64_t{1000000} << 2};                       // tag: 1M of 0 words
  frame f;
  f.bytes.resize(words.size() * 8);
  std::memcpy(f.bytes.data(), words.data(), f.bytes.size());
  BOOST_REQUIRE_EQUAL(f.bytes.size(), 64u);
  push_request x;
  auto err = decode(f, x);
  BOOST_CHECK(err == errc::malformed_message);
  BOOST_CHECK_MESSAGE(describe(err).find("traversal limit") !=
                          std::string::npos,
                      describe(err));
  // A frame of real slices of that count would be at least 24 MB.
}

BOOST_AUTO_TEST_CASE(a_slice_named_twice_in_a_request_is_malformed) {
  std::vector<float> v(8, 1.0f);
  push_request p{0, 0, 1, 0, 1, {{{3, 2}, v}, {{3, 1}, v}, {{3, 2}, v}}};
  push_request q;
  auto err = decode(encode(p), q);
  BOOST_CHECK(err == errc::malformed_message);
  BOOST_CHECK_MESSAGE(describe(err).find("key 3, index 2") !=
                              std::string::npos &&
                          describe(err).find("push") != std::string::npos,
                      describe(err));
  init_request i{0, 1, {{{3, 2}, v}, {{3, 2}, v}}};
  init_request j;
  BOOST_CHECK(decode(encode(i), j) == errc::malformed_message);
  pull_request r{0, 0, 1, {{3, 1}, {3, 2}, {3, 1}}};
  pull_request s;
  BOOST_CHECK(decode(encode(r), s) == errc::malformed_message);
  // The same key with distinct indices is fine.
  p.slices.pop_back();
  BOOST_CHECK(!decode(encode(p), q));
  BOOST_CHECK_EQUAL(q.slices.size(), 2u);
}

BOOST_AUTO_TEST_CASE(values_not_a_multiple_of_four_bytes_are_malformed) {
  capnp::MallocMessageBuilder msg;
  auto p = msg.initRoot<schema::Push>();
  p.setParts(1);
  auto s = p.initSlices(1);
  s[0].initValues(7);
  push_request q;
  BOOST_CHECK(decode(raw(msg), q) == errc::malformed_message);
}

BOOST_AUTO_TEST_CASE(truncated_and_garbage_frames_are_malformed) {
  auto f = encode(push_request{1, 2, 3, 0, 1, {{{1, 0}, iota_floats(64)}}});
  push_request q;
  for (size_t cut = 8; cut < f.bytes.size(); cut += 8) {
    frame t{std::vector<uint8_t>(f.bytes.begin(), f.bytes.begin() + cut)};
    BOOST_CHECK_MESSAGE(decode(t, q) == errc::malformed_message,
                        "truncated to " << cut << " bytes");
  }
  pull_request pr;
  BOOST_CHECK(decode(frame{std::vector<uint8_t>(800, 0xEE)}, pr) ==
              errc::malformed_message);
  pull_reply rr;
  BOOST_CHECK(decode(frame{std::vector<uint8_t>(3, 0)}, rr) ==
              errc::malformed_message);
}

BOOST_AUTO_TEST_CASE(a_frame_of_one_schema_read_as_another_does_not_crash) {
  // Cap'n Proto cannot tell schemas apart; the invariants can: a Pull has
  // no `parts` field, so read as a Push it has parts == 0.
  auto f = encode(pull_request{1, 2, 3, {{4, 5}}});
  push_request q;
  BOOST_CHECK(decode(f, q) == errc::malformed_message);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(large_slices_are_referenced_not_copied) {
  // 4096 floats (16 KiB) aligned: referenced; 1025 floats: odd size in
  // words, copied; 7 floats: small, copied.
  auto a = iota_floats(4096), b = iota_floats(1025, 5.0f), c = iota_floats(7);
  std::vector<slice_view> views{{{1, 0}, a.data(), a.size()},
                                {{2, 0}, b.data(), b.size()},
                                {{3, 0}, c.data(), c.size()}};
  auto out = encode_push(push_request{1, 2, 3, 0, 1, {}}, views);
  // Segment table, the message segment, and one segment for `a` itself.
  BOOST_REQUIRE_EQUAL(out.pieces().size(), 3u);
  BOOST_CHECK(out.pieces()[2].data == reinterpret_cast<uint8_t*>(a.data()));
  size_t sum = 0;
  for (auto& p : out.pieces())
    sum += p.size;
  BOOST_CHECK_EQUAL(sum, out.bytes());
  // Read in place, without copying into vectors.
  auto f = out.flatten();
  push_request header;
  std::vector<std::vector<float>> seen;
  BOOST_REQUIRE(
      !visit_push(f, header, [&](slice_id, const float* xs, size_t n) {
        seen.emplace_back(xs, xs + n);
        return caf::error{};
      }));
  BOOST_CHECK(header.worker == 1 && header.clock == 2 && header.epoch == 3);
  BOOST_REQUIRE_EQUAL(seen.size(), 3u);
  BOOST_CHECK(seen[0] == a);
  BOOST_CHECK(seen[1] == b);
  BOOST_CHECK(seen[2] == c);
}

BOOST_AUTO_TEST_CASE(
    a_reply_of_many_large_slices_keeps_the_rest_in_one_segment) {
  // Each referenced slice needs a landing pad for its far pointer: all of
  // them must fit in the first segment, or a reader that lands the values
  // in place before reading the other segments cannot find them.
  for (size_t count : {size_t{1}, size_t{16}, size_t{256}, size_t{4096}}) {
    auto a = iota_floats(1024); // 4 KiB: the smallest that is referenced
    std::vector<slice_view> views;
    for (uint32_t i = 0; i < count; ++i)
      views.push_back(slice_view{{1, i}, a.data(), a.size()});
    auto out = encode_pull_reply(1, views, 2);
    // The segment table, the message segment, one segment per slice.
    BOOST_CHECK_EQUAL(out.pieces().size(), count + 2);
    for (size_t i = 2; i < out.pieces().size(); ++i)
      BOOST_CHECK(out.pieces()[i].data ==
                  reinterpret_cast<const uint8_t*>(a.data()));
  }
}

BOOST_AUTO_TEST_CASE(a_replicate_keeps_its_link_numbers_and_payload) {
  // The payload is a frame (here a Push's), referenced when large.
  for (size_t n : {0, 3, 70000}) {
    frame payload;
    if (n > 0)
      payload = encode(push_request{1, 2, 3, 0, 1, {{{4, 0}, iota_floats(n)}}});
    replicate_request r{7, (uint64_t{5} << 32) | 3, 0xfeedbeefcafe0001, 8,
                        4, {1, 0, 1000, 2, 1, 24},  bytes_view{payload}};
    auto flat = encode(r).flatten();
    replicate_request q;
    BOOST_REQUIRE(!decode(flat, q));
    BOOST_CHECK_EQUAL(q.primary, 7u);
    BOOST_CHECK_EQUAL(q.link, r.link);
    BOOST_CHECK_EQUAL(q.store, r.store);
    BOOST_CHECK_EQUAL(q.origin, 8u);
    BOOST_CHECK_EQUAL(q.op, 4u);
    BOOST_CHECK(q.numbers == r.numbers);
    BOOST_REQUIRE_EQUAL(q.payload.size, payload.bytes.size());
    BOOST_CHECK(
        std::equal(payload.bytes.begin(), payload.bytes.end(), q.payload.data));
  }
}

BOOST_AUTO_TEST_CASE(failures_keep_troupe_codes_and_text) {
  auto sent = caf::make_error(errc::clock_gap, "worker", 3);
  auto err = decode_failure(encode_failure(sent));
  BOOST_CHECK(err == errc::clock_gap);
  // Said as the sender would (it read "clock_gap: clock_gap: worker 3").
  BOOST_CHECK_EQUAL(describe(err), describe(sent));
  BOOST_CHECK_EQUAL(describe(decode_failure(
                        encode_failure(caf::make_error(errc::non_finite)))),
                    "non_finite");
  // The last code travels too (a decoder that bounds codes by an older
  // last one turns it into a runtime_error, which no one resends).
  BOOST_CHECK(decode_failure(encode_failure(
                  caf::make_error(errc::unreplicated))) == errc::unreplicated);
  auto other =
      decode_failure(encode_failure(caf::make_error(caf::sec::runtime_error)));
  BOOST_CHECK(other == caf::sec::runtime_error);
  BOOST_CHECK(decode_failure(frame{std::vector<uint8_t>(16, 0xAB)}) ==
              errc::malformed_message);
}
