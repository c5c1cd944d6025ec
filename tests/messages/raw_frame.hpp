// Frames built straight from Cap'n Proto builders, so tests can send bytes
// the encoders never would.
#pragma once

#include <capnp/message.h>
#include <capnp/serialize.h>

#include "messages/frame.hpp"

namespace troupe::test {

/// The flattened bytes of `msg` as a frame.
inline frame raw(capnp::MallocMessageBuilder& msg) {
  auto words = capnp::messageToFlatArray(msg);
  auto bytes = words.asBytes();
  return frame{std::vector<uint8_t>(bytes.begin(), bytes.end())};
}

} // namespace troupe::test
