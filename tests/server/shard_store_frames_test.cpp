// A store keeps the parts it holds where they came (the pushed frame, no
// copy), and gives the same bits as with copies: in a sync round, a
// running sum, a part that changes (a slice twice in one push, a second
// worker's part under one running sum), a held async push, an undo. The
// frames are let go once nothing needs them.
#define BOOST_TEST_MODULE shard_store_frames_tests
#include <boost/test/unit_test.hpp>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/server/server_optimizer.hpp"
#include "actors/server/shard_store.hpp"

using namespace troupe;

namespace {

// 256 KiB: malloc maps such a buffer apart and unmaps it when it is freed,
// so a store that read a frame after letting it go would crash, not read
// stale floats.
constexpr uint32_t n = 1u << 16;
const slice_id big{5, 0};
const slice_id small{6, 0};

using frame_ptr = std::shared_ptr<std::vector<float>>;

/// Values of one push: distinct per worker, clock and element, and not
/// exactly representable sums, so that a part added twice, lost, or added
/// in another order shows in the bits.
std::vector<float> values_of(uint32_t w, uint64_t clock, float scale = 1.0f) {
  std::vector<float> v(n);
  for (uint32_t i = 0; i < n; ++i)
    v[i] = scale * (0.1f * float(w + 1) + 0.01f * float(clock) +
                    1e-5f * float(i % 977));
  return v;
}

struct pair_of_stores {
  shard_store copies; // pushed without a frame: the store copies
  shard_store framed; // pushed with one: the store keeps it
  std::vector<std::weak_ptr<std::vector<float>>> frames;

  /// With `cuts`, a primary's store (`replica`: a backup's); workers 0 to
  /// `workers` - 1.
  pair_of_stores(const std::string& mode, bool cuts, optimizer_settings opt,
                 uint32_t workers = 3, bool replica = false)
      : copies(*parse_consistency(mode), make_optimizer_fn(opt)),
        framed(*parse_consistency(mode), make_optimizer_fn(opt)) {
    std::set<uint32_t> ranks;
    for (uint32_t w = 0; w < workers; ++w)
      ranks.insert(w);
    for (auto* s : {&copies, &framed}) {
      if (cuts)
        s->await_cuts(capture_optimizer, step_from_optimizer);
      s->replica(replica);
      s->set_owned({{big, n}, {small, 1}});
      s->set_workers(ranks);
      BOOST_REQUIRE(!s->init(init_request{
          0, 1, {{big, std::vector<float>(n, 0.5f)}, {small, {0.0f}}}}));
    }
  }

  /// Worker `w` pushes `clock` whole to both; with `twice`, the push names
  /// `big` twice (each is added).
  void push(uint32_t w, uint64_t clock, bool twice = false,
            uint64_t acked = 0) {
    auto one = std::make_shared<std::vector<float>>(values_of(w, clock));
    auto two = std::make_shared<std::vector<float>>(values_of(w, clock, 3.0f));
    std::vector<slice_view> xs{slice_view{big, one->data(), n}};
    if (twice)
      xs.push_back(slice_view{big, two->data(), n});
    push_request req{w, clock, 1, 0, 1, {}, acked};
    auto c = copies.push(req, xs);
    BOOST_REQUIRE_MESSAGE(c, "the copying store refused a push");
    // The framed store is the frame's only owner from here on.
    auto keep = std::make_shared<std::vector<frame_ptr>>();
    keep->push_back(one);
    if (twice)
      keep->push_back(two);
    frames.push_back(one);
    std::shared_ptr<const void> frame = keep;
    keep.reset();
    one.reset();
    two.reset();
    auto f = framed.push(req, xs, std::move(frame));
    BOOST_REQUIRE_MESSAGE(f, "the framed store refused a push");
    BOOST_CHECK_EQUAL(c->duplicate, f->duplicate);
  }

  void expect_same_bits(const std::string& when) {
    auto x = copies.read({big, small});
    auto y = framed.read({big, small});
    BOOST_REQUIRE(x && y);
    BOOST_CHECK_EQUAL(copies.version(), framed.version());
    for (size_t s = 0; s < 2; ++s) {
      auto& u = x->slices[s].values;
      auto& v = y->slices[s].values;
      BOOST_REQUIRE_EQUAL(u.size(), v.size());
      size_t differ = 0;
      for (size_t i = 0; i < u.size(); ++i)
        differ += u[i] != v[i];
      BOOST_CHECK_MESSAGE(differ == 0, when << ": " << differ
                                            << " floats differ in slice " << s);
    }
  }

  /// How many frames the framed store still holds.
  size_t held() const {
    size_t k = 0;
    for (auto& f : frames)
      k += !f.expired();
    return k;
  }
};

/// An optimizer by name, with the defaults (lr 0.1, momentum 0.9).
optimizer_settings named(const char* name) {
  optimizer_settings x;
  x.name = name;
  return x;
}
const optimizer_settings sum = named("sum");
const optimizer_settings momentum = named("momentum");

} // namespace

BOOST_AUTO_TEST_SUITE(shard_store_frames_tests)

BOOST_AUTO_TEST_CASE(sync_rounds_from_frames_equal_rounds_from_copies) {
  // Without cuts: one running sum. With: a primary (two workers step from
  // the image with both parts; three keep running sums) and a replica.
  struct setup {
    bool cuts;
    uint32_t workers;
    bool replica;
  };
  for (auto x :
       {setup{false, 3, false}, setup{false, 2, false}, setup{true, 3, false},
        setup{true, 2, false}, setup{true, 3, true}})
    for (auto opt : {sum, momentum}) {
      BOOST_TEST_MESSAGE("cuts " << x.cuts << ", workers " << x.workers
                                 << ", replica " << x.replica << ", "
                                 << opt.name);
      pair_of_stores p{"sync", x.cuts, opt, x.workers, x.replica};
      // Arrival out of rank order, and a push naming big twice.
      for (uint64_t clock = 0; clock < 4; ++clock) {
        for (uint32_t w = x.workers; w-- > 0;)
          p.push(w, clock, clock == 1 && w == 0);
        if (!x.replica) // a replica applies a round once it is settled
          p.expect_same_bits("after round " + std::to_string(clock));
      }
      p.expect_same_bits("after the rounds");
      // Rounds 0 and 1 are settled (every worker pushed later): their
      // frames are let go. Without cuts none is kept past its round.
      for (size_t k = 0; k < 2 * x.workers; ++k)
        BOOST_CHECK_MESSAGE(p.frames[k].expired(),
                            "frame " << k << " of an old round is held");
      if (!x.cuts)
        BOOST_CHECK_EQUAL(p.held(), 0u);
      else if (!x.replica)
        BOOST_CHECK(p.framed.tentative());
    }
}

BOOST_AUTO_TEST_CASE(a_departed_workers_part_comes_out_of_frames_as_of_copies) {
  // Worker 1 pushes clock 2 and leaves; its cut keeps clocks below 2, so
  // round 2 is applied again without it: from the image, and from the
  // other workers' parts, still in their frames.
  pair_of_stores p{"sync", true, momentum};
  for (uint64_t clock = 0; clock < 2; ++clock)
    for (uint32_t w : {0u, 1u, 2u})
      p.push(w, clock);
  p.push(1, 2);
  p.push(0, 2);
  p.push(2, 2); // round 2 applied, tentatively
  p.expect_same_bits("round 2 with worker 1");
  for (auto* s : {&p.copies, &p.framed}) {
    s->set_workers({0, 2});
    BOOST_CHECK(s->cut(1, 2));
  }
  p.expect_same_bits("round 2 without worker 1");
  p.push(0, 3);
  p.push(2, 3);
  p.expect_same_bits("round 3");
  // Round 3 is tentative until clock 4: only its two frames are held.
  BOOST_CHECK(p.framed.tentative());
  BOOST_CHECK_EQUAL(p.held(), 2u);
  BOOST_CHECK(p.frames.back().lock() != nullptr);
}

BOOST_AUTO_TEST_CASE(held_async_pushes_from_frames_equal_those_from_copies) {
  // Awaiting cuts, async holds each push until its worker says every
  // server acknowledged it (`acked` of a later push): held in its frame.
  pair_of_stores p{"async", true, momentum};
  for (uint64_t clock = 0; clock < 3; ++clock)
    for (uint32_t w : {1u, 0u, 2u})
      p.push(w, clock, clock == 1 && w == 2, clock);
  BOOST_CHECK_EQUAL(p.framed.held(), p.copies.held());
  BOOST_CHECK_EQUAL(p.framed.held(), 3u); // clock 2 of each, held
  p.expect_same_bits("clocks 0 and 1 applied");
  for (size_t k = 0; k < 6; ++k)
    BOOST_CHECK_MESSAGE(p.frames[k].expired(),
                        "frame " << k << " of an applied push is held");
  BOOST_CHECK_EQUAL(p.held(), 3u);
  for (uint32_t w : {1u, 0u, 2u})
    p.push(w, 3, false, 3);
  p.expect_same_bits("clock 2 applied");
  BOOST_CHECK_EQUAL(p.held(), 3u); // now clock 3's
}

BOOST_AUTO_TEST_SUITE_END()
