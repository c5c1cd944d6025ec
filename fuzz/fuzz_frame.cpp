// libFuzzer harness of the frame reader (messages/frame_codec.hpp): any bytes
// as a frame, read flat from an aligned buffer, flat from a misaligned one
// (the reader copies it), and read apart as a tcp road reads a landed reply;
// each message that opens is walked whole.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include <capnp/any.h>

#include "fuzz/fuzz_input.hpp"
#include "messages/frame_codec.hpp"

namespace {

using namespace troupe;

/// Opens `f` as the decoders do and visits every word its root reaches:
/// targetSize follows each pointer, so every bound check of the reader runs.
void walk(bytes_view f) {
  auto err = detail::decode_guarded(f, "fuzz", [](detail::frame_reader& rd) {
    rd.get<capnp::AnyPointer>().targetSize();
    return caf::error{};
  });
  static_cast<void>(err); // malformed bytes are an answer, not a finding
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::aligned_copy in{data, size};
  walk(in.view());
  // One byte off a word: the reader must copy before it reads.
  std::unique_ptr<uint8_t[]> odd{new uint8_t[size + 1]};
  if (size > 0)
    std::memcpy(odd.get() + 1, data, size);
  walk(bytes_view{odd.get() + 1, size});
  fuzz::read_apart apart{in};
  if (apart.apart())
    walk(apart.view());
  return 0;
}
