// Key-value conversation (messages/kv.capnp) as plain C++ values, with
// encode/decode. decode checks what the bytes alone can tell (lengths,
// parts, counts); the shard server checks ownership and shapes.
#pragma once

#include <cstdint>
#include <functional>
#include <tuple>
#include <vector>

#include <caf/error.hpp>

#include "messages/frame.hpp"

namespace troupe {

/// Names slice `index` of the array `key`.
struct slice_id {
  uint64_t key = 0;
  uint32_t index = 0;
  bool operator<(const slice_id& y) const {
    return std::tie(key, index) < std::tie(y.key, y.index);
  }
  bool operator==(const slice_id& y) const {
    return key == y.key && index == y.index;
  }
};

/// One slice with its float32 values.
struct slice_data {
  slice_id id;
  std::vector<float> values;
  bool operator==(const slice_data& y) const {
    return id == y.id && values == y.values;
  }
};

/// A slice's values in memory owned elsewhere (a user's array, a server's
/// store): what encoders read from, so values are copied only into frames.
struct slice_view {
  slice_id id;
  const float* data = nullptr;
  size_t size = 0; ///< floats
};

/// Worker -> server: first values of slices.
struct init_request {
  uint32_t worker = 0;
  uint64_t epoch = 0;
  std::vector<slice_data> slices;
};

/// Worker -> server: one part of the worker's push for `clock`.
struct push_request {
  uint32_t worker = 0;
  uint64_t clock = 0;
  uint64_t epoch = 0;
  uint32_t part = 0;
  uint32_t parts = 1;
  std::vector<slice_data> slices;
  /// Every server acknowledged the sender's pushes of the clocks below
  /// this one (docs/atomic-pushes.md).
  uint64_t acked = 0;
};

/// Atomic pushes (docs/atomic-pushes.md). When worker w leaves, the
/// scheduler asks each server (cut_atom, w, epoch) how many of w's clocks it
/// took whole; a server with none of w's pushes answers no_whole_clocks.
/// The least answer is the cut, which the scheduler sends to every server
/// (cut_atom, keep_atom, w, cut): each keeps w's clocks below the cut.
constexpr uint64_t no_whole_clocks = ~uint64_t{0};

/// Server -> worker: the push was accepted (or was a duplicate).
struct push_reply {
  uint64_t version = 0;
  bool duplicate = false;
};

/// Primary -> backup on the fast road: one replica operation. Decoded,
/// `payload` points into the frame it came in.
struct replicate_request {
  uint32_t primary = 0;
  uint64_t link = 0;
  uint64_t store = 0;
  uint32_t origin = 0;
  uint8_t op = 0;
  std::vector<uint64_t> numbers;
  bytes_view payload;
};

/// Worker -> server: read slices as a worker at `clock`.
struct pull_request {
  uint32_t worker = 0;
  uint64_t clock = 0;
  uint64_t epoch = 0;
  std::vector<slice_id> slices;
  uint64_t acked = 0; ///< as push_request's
};

/// Server -> worker: values in the order asked for.
struct pull_reply {
  uint64_t version = 0;
  std::vector<slice_data> slices;
  uint64_t clock = 0; ///< the puller's clock at the server
};

/// Views of the values of `xs` (valid while `xs` is unchanged).
std::vector<slice_view> views_of(const std::vector<slice_data>& xs);

/// Most slices in one kv message.
constexpr size_t max_slices_per_message = size_t{1} << 20;

// -- how large a worker's frames are ------------------------------------------

/// Bytes a slice adds to a Push, Init or PullReply frame beyond its values,
/// at most: its list element (24), a far pointer's landing pad (16), a
/// segment table entry (4) and padding (7).
constexpr uint64_t slice_frame_overhead = 64;
/// Bytes of a kv frame beyond its slices, at most (root, segment table).
constexpr uint64_t kv_frame_overhead = 4096;

/// Slices a worker puts in one message cut at `max_message_bytes`: their
/// overhead stays within a sixteenth of it.
constexpr uint64_t max_slices_per_part(uint64_t max_message_bytes) {
  return max_message_bytes / (16 * slice_frame_overhead);
}

/// The largest frame a worker sends (and a server answers a pull with)
/// when it cuts its messages at `max_message_bytes` values bytes and
/// max_slices_per_part slices, with slices of at most `slice_floats`:
/// one slice alone, or a full part.
constexpr uint64_t worker_frame_bound(uint64_t max_message_bytes,
                                      uint64_t slice_floats) {
  auto part = max_message_bytes + max_message_bytes / 16;
  auto one = 4 * slice_floats + slice_frame_overhead;
  return (part > one ? part : one) + kv_frame_overhead;
}

frame encode(const init_request& x);
frame encode(const push_request& x);
frame encode(const push_reply& x);
/// A payload of 4 KiB or more (word-aligned) is referenced, not copied: it
/// must live until the outbound is sent.
outbound encode(const replicate_request& x);
frame encode(const pull_request& x);
frame encode(const pull_reply& x);

/// Encodes a Push (or PullReply) whose values are read from `slices`:
/// large word-aligned slices are not copied, the message points at them
/// (outbound's rule: keep them alive and unchanged until it is sent).
outbound encode_push(const push_request& header,
                     const std::vector<slice_view>& slices);
outbound encode_pull_reply(uint64_t version,
                           const std::vector<slice_view>& slices,
                           uint64_t clock = 0);

/// A failed request on the fast road (kv.capnp Failure): troupe codes keep
/// their code, others become their rendered text.
frame encode_failure(const caf::error& err);
caf::error decode_failure(bytes_view f);

/// Reads a PullReply without copying it into vectors: `fn` sees each slice
/// in place (valid only during the call) and may return an error to stop.
/// `clock`, if given, gets the reply's clock.
caf::error visit_pull_reply(
    bytes_view f, uint64_t& version,
    const std::function<caf::error(slice_id, const float*, size_t)>& fn,
    uint64_t* clock = nullptr);

caf::error decode(bytes_view f, init_request& x);
caf::error decode(bytes_view f, push_request& x);
caf::error decode(bytes_view f, push_reply& x);
caf::error decode(bytes_view f, replicate_request& x);
caf::error decode(bytes_view f, pull_request& x);
caf::error decode(bytes_view f, pull_reply& x);

/// Reads a Push without copying its values: `header` gets every field but
/// the slices; `fn` sees each slice in place (valid only during the call)
/// and may return an error to stop.
caf::error
visit_push(bytes_view f, push_request& header,
           const std::function<caf::error(slice_id, const float*, size_t)>& fn);

} // namespace troupe
