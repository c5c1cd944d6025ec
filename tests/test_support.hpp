// Small helpers every kind of test uses: an error's text for a failure
// message, a temporary folder that removes itself, a file's text, and the
// bytes of an IDX file (a data set of its own).
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <caf/expected.hpp>

#include "messages/errors.hpp"

namespace troupe::test {

/// The error of `x` for a failure message; "" if it holds a value (Boost
/// builds a check's message even when the check passes).
template <class T> std::string why(const caf::expected<T>& x) {
  return x ? std::string{} : describe(x.error());
}

/// The whole text of the file at `path`; "" if it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream in{path};
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

/// How many times `what` occurs in `text` (a line each of several
/// processes, say).
inline size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1))
    ++n;
  return n;
}

/// A fresh folder under /tmp, removed with everything in it at the end.
struct temp_dir {
  std::string path;
  temp_dir() {
    char name[] = "/tmp/troupe-test-XXXXXX";
    BOOST_REQUIRE(::mkdtemp(name) != nullptr);
    path = name;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const {
    return path + "/" + name;
  }
};

/// Bytes of an IDX file: magic, dims (big-endian), then `body`.
inline std::vector<uint8_t> idx_bytes(uint32_t magic,
                                      const std::vector<uint32_t>& dims,
                                      const std::vector<uint8_t>& body) {
  std::vector<uint8_t> bytes;
  auto be32 = [&bytes](uint32_t x) {
    for (int shift = 24; shift >= 0; shift -= 8)
      bytes.push_back(uint8_t(x >> shift));
  };
  be32(magic);
  for (auto d : dims)
    be32(d);
  bytes.insert(bytes.end(), body.begin(), body.end());
  return bytes;
}

} // namespace troupe::test
