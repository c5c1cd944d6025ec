// What a server's road takes in from its workers: frames up to a size,
// and, over all workers' connections together, a budget of bytes read and
// not yet handled. A frame past either is skipped on the wire and refused
// with an error the server answers with; it never reaches memory.
#pragma once

#include <atomic>
#include <cstdint>

#include <caf/error.hpp>

#include "actors/base/member_secret.hpp"

namespace troupe {

/// Limits on what a server's road reads from workers (a replica link, a
/// server's, is not limited here: chain replication must never wait for
/// workers' frames to go). Thread-safe.
class road_intake {
public:
  /// Frames of workers read and not yet handled, over every connection,
  /// stay within `budget_bytes` (--server.inflight-bytes).
  explicit road_intake(uint64_t budget_bytes) : budget_(budget_bytes) {}

  /// Workers' frames are at most `bytes` from now on (the server sets it
  /// from --kv.max-message-bytes and the view's slice bound).
  void limit_worker_frames(uint64_t bytes) { frame_limit_ = bytes; }
  uint64_t worker_frame_limit() const { return frame_limit_; }

  /// message_too_large if a frame of `bytes` from `from` is over the size
  /// limit.
  caf::error check_size(const member_id& from, uint64_t bytes) const;
  /// Takes `bytes` of the budget for a frame of `from`, or says why not:
  /// the frame is over the size limit, or the budget has no room now.
  caf::error take(const member_id& from, uint64_t bytes);
  /// Gives back what take() took, once the frame is handled.
  void give_back(uint64_t bytes) { in_flight_ -= bytes; }

  /// Bytes taken and not yet given back (for tests and logs).
  uint64_t in_flight() const { return in_flight_; }
  uint64_t budget() const { return budget_; }

private:
  uint64_t budget_;
  std::atomic<uint64_t> frame_limit_{UINT64_MAX};
  std::atomic<uint64_t> in_flight_{0};
};

/// Rate a member's frame must at least keep once begun: a frame of N bytes
/// is read within the send timeout plus N at this rate, or its connection
/// ends (a peer that sends a byte now and then holds no buffer for long).
constexpr uint64_t road_min_frame_rate = uint64_t{1} << 20; // bytes per s

} // namespace troupe
