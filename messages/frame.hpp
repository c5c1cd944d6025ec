// A flattened Cap'n Proto message as CAF carries it between actors and nodes.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/meta/type_name.hpp>

namespace troupe {

/// Bytes of one flattened Cap'n Proto message (8-byte words). CAF moves a
/// `std::vector<uint8_t>` with one memcpy, so this is the wire type of every
/// conversation; the atom beside it says which schema the bytes follow.
struct frame {
  std::vector<uint8_t> bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, frame& x) {
  return f(caf::meta::type_name("frame"), x.bytes);
}

/// Largest frame troupe accepts from the network, in bytes.
constexpr size_t max_frame_bytes = size_t{256} << 20;

} // namespace troupe
