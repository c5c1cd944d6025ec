// Flattening Cap'n Proto messages into frames and reading them back.
#include "messages/frame_codec.hpp"

#include <cstring>

#include <kj/io.h>

namespace troupe::detail {

frame to_frame(capnp::MessageBuilder& msg) {
  frame out;
  out.bytes.resize(capnp::computeSerializedSizeInWords(msg) *
                   sizeof(capnp::word));
  kj::ArrayOutputStream stream{kj::arrayPtr(
      reinterpret_cast<kj::byte*>(out.bytes.data()), out.bytes.size())};
  capnp::writeMessage(stream, msg);
  return out;
}

frame_reader::frame_reader(const frame& f) {
  auto n = f.bytes.size();
  if (n == 0 || n % sizeof(capnp::word) != 0 || n > max_frame_bytes) {
    err_ = caf::make_error(errc::malformed_message, "frame size",
                           static_cast<uint64_t>(n));
    return;
  }
  auto words = n / sizeof(capnp::word);
  const auto* data = reinterpret_cast<const capnp::word*>(f.bytes.data());
  if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) != 0) {
    aligned_ = kj::heapArray<capnp::word>(words);
    std::memcpy(aligned_.begin(), f.bytes.data(), n);
    data = aligned_.begin();
  }
  capnp::ReaderOptions opts;
  // Tensor frames are large: allow each word to be visited a few times,
  // never less than the library default.
  opts.traversalLimitInWords = std::max<uint64_t>(words * 4, 8u << 20);
  opts.nestingLimit = 16;
  reader_ = std::make_unique<capnp::FlatArrayMessageReader>(
      kj::arrayPtr(data, words), opts);
}

} // namespace troupe::detail
