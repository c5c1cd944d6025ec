// Frames built straight from Cap'n Proto builders, so tests can send bytes
// the encoders never would.
#pragma once

#include <cstring>
#include <vector>

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

/// The segments of the flat frame at `base` (8-byte aligned), as a road
/// that reads a frame apart sees them: its segment table, then each
/// segment in turn. The caller checks that the last ends where the frame
/// does.
inline std::vector<bytes_view> segments_of(const uint8_t* base) {
  uint32_t extra = 0;
  std::memcpy(&extra, base, 4);
  size_t count = size_t{extra} + 1;
  size_t off = (4 * (count + 1) + 7) & ~size_t{7};
  std::vector<bytes_view> out;
  for (size_t i = 0; i < count; ++i) {
    uint32_t w = 0;
    std::memcpy(&w, base + 4 + 4 * i, 4);
    out.push_back(bytes_view{base + off, size_t{w} * 8});
    off += size_t{w} * 8;
  }
  return out;
}

} // namespace troupe::test
