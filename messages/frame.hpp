// A flattened Cap'n Proto message as CAF carries it between actors and nodes.
#pragma once

#include <cstdint>
#include <memory>
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

/// Bytes of a frame held elsewhere (a frame, a reused receive buffer, a
/// shared-memory ring): what decoders read. Must stay valid while read.
///
/// A frame whose segments were read apart (a reply landed straight in its
/// destination: actors/road/road.hpp, road_landing) also names its segments,
/// each 8-byte aligned: decoders read those, and `data` then holds the
/// flat form with holes where segments landed elsewhere (read it only
/// through the segments). `size` is the flat form's size either way.
struct bytes_view {
  const uint8_t* data = nullptr;
  size_t size = 0;
  const bytes_view* segments = nullptr; // segment_count of them, or none
  size_t segment_count = 0;
  bytes_view() = default;
  bytes_view(const uint8_t* d, size_t n) : data(d), size(n) {}
  bytes_view(const frame& f) : data(f.bytes.data()), size(f.bytes.size()) {}
};

/// A built Cap'n Proto message ready for any road, as the pieces of its
/// flat form in order (segment table, then segments). Segments may point
/// straight into the memory it was encoded from (a user's arrays, a
/// server's store): valid only while that memory is alive and unchanged.
class outbound {
public:
  struct piece {
    const uint8_t* data;
    size_t size;
  };
  struct impl;
  outbound();
  explicit outbound(std::unique_ptr<impl> x);
  outbound(outbound&&) noexcept;
  outbound& operator=(outbound&&) noexcept;
  ~outbound();
  /// Bytes of the flat form.
  size_t bytes() const { return bytes_; }
  const std::vector<piece>& pieces() const { return pieces_; }
  /// The flat form in one buffer (for the CAF road).
  frame flatten() const;

private:
  std::unique_ptr<impl> impl_;
  std::vector<piece> pieces_;
  size_t bytes_ = 0;
};

/// Largest frame troupe accepts from the network, in bytes.
constexpr size_t max_frame_bytes = size_t{256} << 20;

} // namespace troupe
