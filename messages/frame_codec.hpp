// Private to messages/: turns Cap'n Proto builders into frames and frames
// into readers with deliberate limits. Never include outside messages/.
#pragma once

#include <memory>
#include <optional>

#include <caf/error.hpp>
#include <capnp/message.h>
#include <capnp/serialize.h>

#include "messages/frame.hpp"

namespace troupe::detail {

/// Flattens `msg` into a frame with one pass over its segments.
frame to_frame(capnp::MessageBuilder& msg);

/// Takes `msg` (and whatever its external segments point to, which the
/// caller keeps alive) as an outbound message.
outbound to_outbound(std::unique_ptr<capnp::MallocMessageBuilder> msg);

/// Owns what a reader of a frame needs: an aligned copy when the frame's
/// bytes are not 8-byte aligned, and the reader itself.
class frame_reader {
public:
  /// Checks sizes (at most `limit` bytes); on failure `error()` says why
  /// and `get` must not be used. Reads a flat frame, or the segments of
  /// one read apart (bytes_view::segments).
  explicit frame_reader(bytes_view f, size_t limit = max_frame_bytes);
  frame_reader(const frame_reader&) = delete; // reader_ points into it
  frame_reader& operator=(const frame_reader&) = delete;
  const caf::error& error() const { return err_; }
  template <class T> typename T::Reader get() { return reader_->getRoot<T>(); }

private:
  /// A frame read apart (bytes_view::segments).
  void read_segments(bytes_view f, size_t limit);
  /// Segment tables up to this long are kept here, not on the heap.
  static constexpr size_t few_segments = 8;
  caf::error err_;
  kj::Array<capnp::word> aligned_;
  kj::ArrayPtr<const capnp::word> few_[few_segments];
  kj::Array<kj::ArrayPtr<const capnp::word>> many_;
  // The reader lives in place (a decode per message: no allocation for it).
  std::optional<capnp::FlatArrayMessageReader> flat_;
  std::optional<capnp::SegmentArrayMessageReader> split_;
  capnp::MessageReader* reader_ = nullptr;
};

/// Runs `fn` and turns a kj::Exception (malformed bytes) into
/// errc::malformed_message; the one place that catches it.
template <class F>
caf::error decode_guarded(bytes_view f, const char* what, F fn,
                          size_t limit = max_frame_bytes);

} // namespace troupe::detail

#include "messages/errors.hpp"

namespace troupe::detail {

template <class F>
caf::error decode_guarded(bytes_view f, const char* what, F fn, size_t limit) {
  try {
    frame_reader rd{f, limit};
    if (rd.error())
      return rd.error();
    return fn(rd);
  } catch (const kj::Exception& e) {
    return caf::make_error(errc::malformed_message, what,
                           std::string{e.getDescription().cStr()});
  }
}

} // namespace troupe::detail
