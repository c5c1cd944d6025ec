// libFuzzer harness of the membership conversation's decoders
// (messages/membership.hpp): the input is one frame as CAF hands it to the
// scheduler or a node, given to every decoder in turn.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "messages/membership.hpp"

namespace {

using namespace troupe;

/// Decodes `f` as `T`; an error is the answer to malformed bytes, only a
/// crash or a sanitizer report is a finding.
template <class T> void try_decode(const frame& f) {
  T x;
  static_cast<void>(decode(f, x));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // CAF delivers a frame as a vector of exactly its bytes.
  frame f{std::vector<uint8_t>(data, data + size)};
  try_decode<register_request>(f);
  try_decode<register_reply>(f);
  try_decode<cluster_view>(f);
  try_decode<declare_request>(f);
  try_decode<declare_reply>(f);
  try_decode<barrier_request>(f);
  // Decoded events are logged as JSON lines (to_json).
  std::vector<event_record> log;
  if (!decode(f, log))
    for (auto& e : log)
      to_json(e);
  event_record e;
  if (!decode(f, e))
    to_json(e);
  return 0;
}
