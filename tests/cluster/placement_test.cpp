// Slicing and the consistent-hash placement with bounded loads.
#define BOOST_TEST_MODULE placement_tests
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <set>

#include "actors/cluster/placement.hpp"

using namespace troupe;

namespace {

/// The parameter arrays of an MLP 784-256-128-10 and of a small CNN
/// (conv 5x5x1x32, conv 5x5x32x64, fc 3136x1024, fc 1024x10).
std::vector<key_info> realistic_model() {
  std::vector<uint64_t> sizes{
      784 * 256,       256, 256 * 128,   128,  128 * 10,  10, 5 * 5 * 32, 32,
      5 * 5 * 32 * 64, 64,  3136 * 1024, 1024, 1024 * 10, 10};
  std::vector<key_info> keys;
  for (size_t i = 0; i < sizes.size(); ++i)
    keys.push_back(key_info{100 + i, sizes[i]});
  return keys;
}

double max_over_min(const std::map<uint32_t, uint64_t>& load) {
  uint64_t lo = UINT64_MAX, hi = 0;
  for (auto& [s, floats] : load) {
    lo = std::min(lo, floats);
    hi = std::max(hi, floats);
  }
  return double(hi) / double(lo);
}

cluster_view as_view(const std::vector<key_info>& keys,
                     const std::vector<slice_place>& placement,
                     const std::vector<uint32_t>& servers,
                     uint32_t slice_floats) {
  cluster_view v;
  v.epoch = 1;
  v.slice_floats = slice_floats;
  for (auto s : servers)
    v.servers.push_back(node_info{role::server, s, "h", 1, 1, {}});
  v.keys = keys;
  v.placement = placement;
  return v;
}

} // namespace

BOOST_AUTO_TEST_SUITE(placement_tests)

BOOST_AUTO_TEST_CASE(slices_cover_an_array_exactly) {
  BOOST_CHECK_EQUAL(slice_count(0, 4), 0u);
  BOOST_CHECK_EQUAL(slice_count(1, 4), 1u);
  BOOST_CHECK_EQUAL(slice_count(8, 4), 2u);
  BOOST_CHECK_EQUAL(slice_count(9, 4), 3u);
  uint64_t covered = 0;
  for (uint32_t i = 0; i < slice_count(9, 4); ++i) {
    auto r = slice_range(9, 4, i);
    BOOST_CHECK_EQUAL(r.first, covered);
    covered = r.second;
  }
  BOOST_CHECK_EQUAL(covered, 9u);
  BOOST_CHECK(slice_range(9, 4, 2) == std::make_pair(uint64_t{8}, uint64_t{9}));
}

BOOST_AUTO_TEST_CASE(the_ring_lists_each_server_once_and_is_deterministic) {
  hash_ring a{{0, 1, 2, 3}, 64}, b{{3, 2, 1, 0}, 64};
  for (uint64_t h : {0ull, 1ull, 0x8000000000000000ull, ~0ull}) {
    auto p = a.preference(h);
    BOOST_CHECK_EQUAL(p.size(), 4u);
    BOOST_CHECK_EQUAL(std::set<uint32_t>(p.begin(), p.end()).size(), 4u);
    BOOST_CHECK(p == b.preference(h));
  }
}

BOOST_AUTO_TEST_CASE(a_realistic_model_is_balanced_over_four_servers) {
  placement_params params;
  auto keys = realistic_model();
  auto placed = place(keys, {}, {0, 1, 2, 3}, params);
  BOOST_REQUIRE(
      !validate(as_view(keys, placed, {0, 1, 2, 3}, params.slice_floats)));
  auto load = load_of(keys, placed, params.slice_floats);
  BOOST_REQUIRE_EQUAL(load.size(), 4u);
  auto ratio = max_over_min(load);
  BOOST_TEST_MESSAGE("max/min floats per server: " << ratio);
  BOOST_CHECK_LE(ratio, 1.3);
}

BOOST_AUTO_TEST_CASE(the_mlp_alone_is_balanced_too) {
  placement_params params;
  auto keys = realistic_model();
  keys.resize(6); // the MLP's arrays only: about 0.9 MiB
  auto placed = place(keys, {}, {0, 1, 2, 3}, params);
  auto ratio = max_over_min(load_of(keys, placed, params.slice_floats));
  BOOST_TEST_MESSAGE("MLP max/min floats per server: " << ratio);
  BOOST_CHECK_LE(ratio, 1.3);
}

BOOST_AUTO_TEST_CASE(removing_a_server_moves_only_its_slices) {
  placement_params params;
  auto keys = realistic_model();
  auto before = place(keys, {}, {0, 1, 2, 3}, params);
  for (uint32_t gone = 0; gone < 4; ++gone) {
    std::vector<uint32_t> rest;
    for (uint32_t s = 0; s < 4; ++s)
      if (s != gone)
        rest.push_back(s);
    auto after = place(keys, before, rest, params);
    BOOST_REQUIRE(!validate(as_view(keys, after, rest, params.slice_floats)));
    BOOST_REQUIRE_EQUAL(after.size(), before.size());
    size_t moved = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      BOOST_REQUIRE(before[i].key == after[i].key &&
                    before[i].index == after[i].index);
      if (before[i].server != gone)
        BOOST_CHECK_EQUAL(after[i].server, before[i].server);
      else
        ++moved;
    }
    BOOST_CHECK_GT(moved, 0u);
    BOOST_CHECK_LE(max_over_min(load_of(keys, after, params.slice_floats)),
                   1.5);
  }
}

BOOST_AUTO_TEST_CASE(new_keys_leave_placed_slices_where_they_are) {
  placement_params params;
  auto keys = realistic_model();
  std::vector<key_info> first(keys.begin(), keys.begin() + 6);
  auto before = place(first, {}, {0, 1, 2}, params);
  auto after = place(keys, before, {0, 1, 2}, params);
  for (auto& p : before)
    BOOST_CHECK(std::find(after.begin(), after.end(), p) != after.end());
  BOOST_CHECK(!validate(as_view(keys, after, {0, 1, 2}, params.slice_floats)));
}

BOOST_AUTO_TEST_SUITE_END()
