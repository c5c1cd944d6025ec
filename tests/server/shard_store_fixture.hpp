// The store every shard_store test starts from: slices a and b, workers
// 0, 1 and 2, initialised to zeros.
#pragma once

#include <boost/test/unit_test.hpp>

#include <string>

#include "actors/server/shard_store.hpp"

namespace troupe::test {

const slice_id a{1, 0};
const slice_id b{2, 0};

/// A store owning slices a (3 floats) and b (2 floats), initialised to 0,
/// with workers 0, 1 and 2.
struct fixture {
  shard_store store;
  explicit fixture(const std::string& mode) : store(*parse_consistency(mode)) {
    store.set_owned({{a, 3}, {b, 2}});
    store.set_workers({0, 1, 2});
    BOOST_REQUIRE(
        !store.init(init_request{0, 1, {{a, {0, 0, 0}}, {b, {0, 0}}}}));
  }
  caf::expected<push_reply> push(uint32_t w, uint64_t clock, float x,
                                 uint32_t part = 0, uint32_t parts = 1) {
    return store.push(
        push_request{w, clock, 1, part, parts, {{a, {x, x, x}}, {b, {x, x}}}});
  }
  float value_of(slice_id id) {
    auto r = store.read({id});
    BOOST_REQUIRE(r);
    return r->slices[0].values[0];
  }
};

} // namespace troupe::test
