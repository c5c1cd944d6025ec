// Flattening Cap'n Proto messages into frames and reading them back.
#include "messages/frame_codec.hpp"

#include <cstring>

#include <kj/io.h>

namespace troupe {

struct outbound::impl {
  std::unique_ptr<capnp::MallocMessageBuilder> msg;
  std::vector<uint32_t> table; // the flat form's segment table
};

outbound::outbound() = default;
outbound::outbound(outbound&&) noexcept = default;
outbound& outbound::operator=(outbound&&) noexcept = default;
outbound::~outbound() = default;

outbound::outbound(std::unique_ptr<impl> x) : impl_(std::move(x)) {
  auto segments = impl_->msg->getSegmentsForOutput();
  // Flat form: (segments - 1), each segment's size in words, padded to a
  // word; then the segments (capnp/serialize.h).
  auto& t = impl_->table;
  t.push_back(static_cast<uint32_t>(segments.size() - 1));
  for (auto seg : segments)
    t.push_back(static_cast<uint32_t>(seg.size()));
  if (t.size() % 2 != 0)
    t.push_back(0);
  pieces_.push_back(piece{reinterpret_cast<const uint8_t*>(t.data()),
                          t.size() * sizeof(uint32_t)});
  for (auto seg : segments)
    pieces_.push_back(piece{reinterpret_cast<const uint8_t*>(seg.begin()),
                            seg.size() * sizeof(capnp::word)});
  for (auto& p : pieces_)
    bytes_ += p.size;
}

frame outbound::flatten() const {
  frame out;
  out.bytes.reserve(bytes_);
  for (auto& p : pieces_)
    out.bytes.insert(out.bytes.end(), p.data, p.data + p.size);
  return out;
}

namespace detail {

frame to_frame(capnp::MessageBuilder& msg) {
  frame out;
  out.bytes.resize(capnp::computeSerializedSizeInWords(msg) *
                   sizeof(capnp::word));
  kj::ArrayOutputStream stream{kj::arrayPtr(
      reinterpret_cast<kj::byte*>(out.bytes.data()), out.bytes.size())};
  capnp::writeMessage(stream, msg);
  return out;
}

outbound to_outbound(std::unique_ptr<capnp::MallocMessageBuilder> msg) {
  auto x = std::make_unique<outbound::impl>();
  x->msg = std::move(msg);
  return outbound{std::move(x)};
}

namespace {

capnp::ReaderOptions reader_options(size_t words) {
  capnp::ReaderOptions opts;
  // Each word may be visited a few times (a list read to check it, then
  // to use it), plus a little for tiny frames. No more: Cap'n Proto
  // charges a list of zero-sized elements a word per element, so a few
  // bytes claiming a million of them fail here, not after their decoding
  // cost a million steps.
  opts.traversalLimitInWords = words * 4 + 64;
  opts.nestingLimit = 16;
  return opts;
}

} // namespace

void frame_reader::read_segments(bytes_view f, size_t limit) {
  kj::ArrayPtr<kj::ArrayPtr<const capnp::word>> segments{few_, f.segment_count};
  if (f.segment_count > few_segments) {
    many_ = kj::heapArray<kj::ArrayPtr<const capnp::word>>(f.segment_count);
    segments = many_.asPtr();
  }
  size_t words = 0;
  for (size_t i = 0; i < f.segment_count; ++i) {
    auto& s = f.segments[i];
    if (s.size % sizeof(capnp::word) != 0 ||
        reinterpret_cast<uintptr_t>(s.data) % alignof(capnp::word) != 0) {
      err_ = caf::make_error(errc::malformed_message, "frame segment", i,
                             "misaligned or not whole words");
      return;
    }
    segments[i] = kj::arrayPtr(reinterpret_cast<const capnp::word*>(s.data),
                               s.size / sizeof(capnp::word));
    words += segments[i].size();
  }
  if (f.segment_count == 0 || words * sizeof(capnp::word) > limit) {
    err_ = caf::make_error(errc::malformed_message, "frame size",
                           static_cast<uint64_t>(words * sizeof(capnp::word)));
    return;
  }
  reader_ = &split_.emplace(segments.asConst(), reader_options(words));
}

frame_reader::frame_reader(bytes_view f, size_t limit) {
  if (f.segments != nullptr) {
    read_segments(f, limit);
    return;
  }
  auto n = f.size;
  if (n == 0 || n % sizeof(capnp::word) != 0 || n > limit) {
    err_ = caf::make_error(errc::malformed_message, "frame size",
                           static_cast<uint64_t>(n));
    return;
  }
  auto words = n / sizeof(capnp::word);
  const auto* data = reinterpret_cast<const capnp::word*>(f.data);
  if (reinterpret_cast<uintptr_t>(data) % alignof(capnp::word) != 0) {
    aligned_ = kj::heapArray<capnp::word>(words);
    std::memcpy(aligned_.begin(), f.data, n);
    data = aligned_.begin();
  }
  reader_ = &flat_.emplace(kj::arrayPtr(data, words), reader_options(words));
}

} // namespace detail

} // namespace troupe
