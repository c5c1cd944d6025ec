// What the harnesses share: the fuzzer's bytes laid out in memory as troupe
// lays out bytes it receives (aligned buffers of exactly their size, frames
// read apart as a tcp road reads a landed reply, files on disk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "messages/frame.hpp"

namespace troupe::fuzz {

/// A copy of the input in a buffer of exactly its size, 8-byte aligned as
/// CAF's frame vectors and the road's receive buffers are: a read one byte
/// past the end is a heap overflow that AddressSanitizer reports.
class aligned_copy {
public:
  aligned_copy(const uint8_t* data, size_t size)
      : bytes_(new uint8_t[size]), size_(size) {
    if (size > 0)
      std::memcpy(bytes_.get(), data, size);
  }
  const uint8_t* data() const { return bytes_.get(); }
  size_t size() const { return size_; }
  bytes_view view() const { return bytes_view{bytes_.get(), size_}; }

private:
  std::unique_ptr<uint8_t[]> bytes_;
  size_t size_;
};

/// A frame read apart as actors/road/road_read.cpp (read_landed) reads a
/// landed reply: a well-formed segment table names the segments, and each
/// segment after the first lies in a buffer of its own, exactly its size,
/// as where a landing puts it. Frames without such a table stay flat.
class read_apart {
public:
  /// Most segments the road reads apart (road_read.cpp, max_landed_segments).
  static constexpr uint32_t max_segments = 4096;

  explicit read_apart(const aligned_copy& in) : flat_(in.view()) {
    auto* base = in.data();
    auto bytes = in.size();
    if (bytes < 8)
      return;
    uint32_t first = 0;
    std::memcpy(&first, base, 4);
    if (first >= max_segments)
      return;
    size_t count = size_t{first} + 1;
    size_t table = (4 * (count + 1) + 7) & ~size_t{7};
    if (table > bytes)
      return;
    std::vector<uint32_t> words(count);
    std::memcpy(words.data(), base + 4, 4 * count);
    uint64_t total = table;
    for (auto w : words)
      total += uint64_t{w} * 8;
    if (total != bytes)
      return;
    size_t off = table;
    for (size_t i = 0; i < count; ++i) {
      size_t n = size_t{words[i]} * 8;
      const uint8_t* at = base + off;
      if (i > 0) { // landed elsewhere
        landed_.emplace_back(new uint64_t[words[i]]);
        std::memcpy(landed_.back().get(), at, n);
        at = reinterpret_cast<const uint8_t*>(landed_.back().get());
      }
      segments_.push_back(bytes_view{at, n});
      off += n;
    }
  }

  /// True if the input had a segment table the road would read apart.
  bool apart() const { return !segments_.empty(); }

  /// The frame as a decoder gets it: its segments, or flat.
  bytes_view view() const {
    auto out = flat_;
    if (apart()) {
      out.segments = segments_.data();
      out.segment_count = segments_.size();
    }
    return out;
  }

private:
  bytes_view flat_;
  std::vector<bytes_view> segments_;
  std::vector<std::unique_ptr<uint64_t[]>> landed_;
};

/// Reads every float a decoder hands out, so that a view past its buffer
/// is reported; the sum keeps the reads from being optimised away.
inline float touch(const float* xs, size_t n) {
  float sum = 0;
  for (size_t i = 0; i < n; ++i)
    sum += xs[i];
  return sum;
}

/// Scratch files of this process, in a folder of its own under /dev/shm if
/// there is one (files there cost no disk writes). Files and folder are
/// removed when the process exits.
class scratch {
public:
  /// The folder.
  static const std::string& dir() { return get().dir_; }
  /// The path of file `name` in it (ask once per name).
  static std::string file(const std::string& name) {
    auto& s = get();
    s.paths_.push_back(s.dir_ + "/" + name);
    return s.paths_.back();
  }

private:
  scratch() {
    const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    dir_ = std::string{base} + "/troupe-fuzz-" + std::to_string(getpid());
    mkdir(dir_.c_str(), 0700);
  }
  ~scratch() {
    for (auto& p : paths_)
      unlink(p.c_str());
    rmdir(dir_.c_str());
  }
  static scratch& get() {
    static scratch s;
    return s;
  }
  std::string dir_;
  std::vector<std::string> paths_;
};

/// Writes `size` bytes to `path`, replacing it; false if that failed.
inline bool write_file(const std::string& path, const uint8_t* data,
                       size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr)
    return false;
  bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok;
}

} // namespace troupe::fuzz
