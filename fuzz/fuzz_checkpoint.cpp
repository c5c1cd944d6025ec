// libFuzzer harness of the checkpoint readers (messages/checkpoint.hpp). The
// input is a checkpoint's or manifest's frame: decoded from memory, as a
// backup restores a replica; read from a file whose header matches it, as a
// resume reads MANIFEST and the servers' files; and, taken as a whole file
// with no header written for it, given to the header check.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.hpp"
#include "messages/checkpoint.hpp"

namespace {

using namespace troupe;

/// The header write_checked_file puts before a payload (checkpoint.cpp):
/// magic, payload bytes and FNV-1a of the payload, little-endian.
std::vector<uint8_t> with_header(const uint8_t* data, size_t size) {
  std::vector<uint8_t> out(24 + size);
  std::memcpy(out.data(), "TROUPECK", 8);
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) {
    h ^= data[i];
    h *= 1099511628211ull;
  }
  for (int i = 0; i < 8; ++i) {
    out[8 + i] = static_cast<uint8_t>(uint64_t{size} >> (8 * i));
    out[16 + i] = static_cast<uint8_t>(h >> (8 * i));
  }
  if (size > 0)
    std::memcpy(out.data() + 24, data, size);
  return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto manifest = fuzz::scratch::file(manifest_name);
  static const auto raw = fuzz::scratch::file("raw.bin");
  // Errors are the answer to malformed bytes; only a crash or a sanitizer
  // report is a finding.
  fuzz::aligned_copy in{data, size};
  checkpoint_data ck;
  static_cast<void>(decode(in.view(), ck));
  checkpoint_manifest m;
  static_cast<void>(decode(in.view(), m));
  auto file = with_header(data, size);
  if (fuzz::write_file(manifest, file.data(), file.size())) {
    static_cast<void>(read_manifest(fuzz::scratch::dir()));
    static_cast<void>(read_checkpoint(manifest));
  }
  if (fuzz::write_file(raw, data, size))
    static_cast<void>(read_checked_file(raw));
  return 0;
}
