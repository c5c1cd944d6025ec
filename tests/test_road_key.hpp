// The road key of test clusters and listeners, and a member's credential
// under it: a test speaks on a road as that member would.
#pragma once

#include <memory>

#include "actors/road/road_auth.hpp"

namespace troupe::test {

/// The cluster key of test listeners and of tests/local_cluster.hpp's
/// scheduler.
inline const secret& test_road_key() {
  static const secret key = random_secret();
  return key;
}

/// A keyring that holds test_road_key().
inline std::shared_ptr<road_keyring> test_keys() {
  auto keys = std::make_shared<road_keyring>();
  keys->set(test_road_key());
  return keys;
}

/// What member `who` dials test listeners and test clusters with.
inline road_credential test_member(member_id who = {role::worker, 0}) {
  return {who, member_token(test_road_key(), who)};
}

} // namespace troupe::test
