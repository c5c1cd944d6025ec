// What travels on a road, as its users see it: the kinds of message, a
// message read off a connection, and where a reply's segments may land.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>

#include "messages/frame.hpp"

namespace troupe {

/// Message kinds on the wire.
enum class road_op : uint8_t {
  hello = 1,
  init,
  push,
  pull,
  reply,
  failure,
  release,
  replicate,  // server -> its backup: a replica operation
  activation, // pipeline stage -> the next one: a StageTensor
  gradient,   // pipeline stage -> the one before: a StageTensor
};

/// The last op on the wire: a header with a larger one is malformed.
constexpr road_op road_op_last = road_op::gradient;

/// True for the ops that ask for a reply (or failure) with the same id.
constexpr bool is_request(road_op op) {
  return op == road_op::init || op == road_op::push || op == road_op::pull ||
         op == road_op::replicate || op == road_op::activation ||
         op == road_op::gradient;
}

class road_conn;
class road_intake;

/// Where the segments of one reply's frame may be read straight to, on a
/// tcp road: the kv client's pull destinations, so that a pulled tensor is
/// copied once, by the kernel, from the socket into its array. The reader
/// reads the segment table and the first segment into its buffer, then
/// asks `place`; what it leaves null goes to the buffer as usual.
struct road_landing {
  virtual ~road_landing() = default;
  /// `segs`: every segment of the frame, the first read, the others where
  /// the receive buffer would hold them (not read yet). Sets `at[i]`
  /// (i >= 1) to where segment i's `segs[i].size` bytes go instead: 8-byte
  /// aligned memory the landing keeps alive while it lives. Runs on the
  /// reading thread; must not throw.
  virtual void place(const std::vector<bytes_view>& segs,
                     std::vector<uint8_t*>& at) = 0;
};

using road_landing_ptr = std::shared_ptr<road_landing>;

/// A message read off a road: `bytes` stays valid while it lives; dropping
/// it gives its buffer or ring region back.
struct road_message {
  road_op op = road_op::reply;
  uint64_t id = 0;
  bytes_view bytes;
  std::shared_ptr<road_conn> conn;    // to reply on, and to release into
  std::unique_ptr<uint64_t[]> buffer; // inline frames (8-byte aligned)
  size_t buffer_words = 0;
  uint64_t ring_offset = 0;
  uint64_t ring_bytes = 0; // > 0: the frame is in the peer's ring
  /// A frame read apart (road_landing): its segments, which `bytes` names,
  /// and the landing that owns the memory some of them lie in.
  std::vector<bytes_view> segments;
  road_landing_ptr landing;
  /// Set where the road skipped the frame unread (road_intake): `bytes`
  /// is empty, and the request is to be answered with this error.
  caf::error refused;
  /// What this frame took of its server's intake budget, given back here.
  std::shared_ptr<road_intake> intake;
  uint64_t intake_bytes = 0;
  /// The frame is handled, though it may be kept (a store keeps a push's
  /// values where they came): its bytes no longer count as in flight.
  void release_intake();
  road_message() = default;
  road_message(const road_message&) = delete;
  road_message& operator=(const road_message&) = delete;
  ~road_message();
};

using road_message_ptr = std::shared_ptr<road_message>;
using road_handler = std::function<void(road_message_ptr)>;
/// Runs once when a connection ends by itself: its serial and why.
using road_down_handler =
    std::function<void(uint64_t serial, const caf::error&)>;

} // namespace troupe
