// Reader of the IDX files of MNIST and Fashion-MNIST, gzipped or plain.
#include "kernels/idx.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include <zlib.h>

namespace troupe {

namespace {

constexpr uint32_t images_magic = 0x00000803;
constexpr uint32_t labels_magic = 0x00000801;
constexpr uint64_t max_body_bytes = uint64_t{1} << 32; // more: corrupt header

struct gz_closer {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

/// An open IDX file; zlib reads gzip and plain files alike.
struct idx_file {
  std::unique_ptr<gzFile_s, gz_closer> gz;
  bool gzip = false; // starts with the gzip magic 1f 8b
};

std::string hex(uint32_t x) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", x);
  return buf;
}

std::string kind_of(uint32_t magic) {
  return magic == images_magic ? "IDX images" : "IDX labels";
}

/// One line: the file, what is wrong and how to get the data.
std::string failure(const std::string& path, const idx_file& f,
                    const std::string& what) {
  return "IDX file " + path + (f.gzip ? " (gzip)" : "") + ": " + what +
         "; install Debian's dataset-fashion-mnist (files in " +
         fashion_mnist_dir + ")";
}

/// Opens `path` and sniffs the gzip magic; "" or the reason.
std::string open_idx(const std::string& path, idx_file& f) {
  std::FILE* raw = std::fopen(path.c_str(), "rb");
  if (!raw)
    return std::string{"cannot open: "} + std::strerror(errno);
  unsigned char head[2] = {0, 0};
  auto got = std::fread(head, 1, 2, raw);
  bool failed = std::ferror(raw); // e.g. a directory
  int read_errno = errno;
  std::fclose(raw);
  if (failed)
    return std::string{"cannot read: "} + std::strerror(read_errno);
  f.gzip = got == 2 && head[0] == 0x1f && head[1] == 0x8b;
  f.gz.reset(gzopen(path.c_str(), "rb"));
  if (!f.gz)
    return "zlib cannot open it";
  gzbuffer(f.gz.get(), 1 << 17);
  return "";
}

/// Reads up to `bytes` into buf, `got` of them; "" or zlib's reason.
std::string read_bytes(idx_file& f, uint8_t* buf, uint64_t bytes,
                       uint64_t& got) {
  got = 0;
  while (got < bytes) {
    auto chunk = unsigned(std::min<uint64_t>(bytes - got, 1u << 30));
    int n = gzread(f.gz.get(), buf + got, chunk);
    if (n < 0) {
      int code = 0;
      return std::string{"corrupt or truncated data (zlib: "} +
             gzerror(f.gz.get(), &code) + ")";
    }
    if (n == 0)
      break;
    got += uint64_t(n);
  }
  return "";
}

/// Reads and checks the magic, then `dims.size()` big-endian dims.
std::string read_header(idx_file& f, uint32_t magic,
                        std::vector<uint64_t>& dims) {
  uint8_t buf[16];
  uint64_t want = 4 * (1 + dims.size()), got = 0;
  if (auto err = read_bytes(f, buf, want, got); !err.empty())
    return err;
  if (got < want)
    return "truncated header: " + std::to_string(got) + " of " +
           std::to_string(want) + " bytes";
  auto be32 = [&buf](size_t i) {
    const uint8_t* p = buf + 4 * i;
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 |
           uint32_t(p[3]);
  };
  if (auto found = be32(0); found != magic) {
    auto other = magic == images_magic ? labels_magic : images_magic;
    auto hint = found == other ? " (this is a file of " + kind_of(other) + ")"
                               : std::string{};
    return "bad magic " + hex(found) + ", expected " + hex(magic) + " for " +
           kind_of(magic) + hint;
  }
  for (size_t i = 0; i < dims.size(); ++i)
    dims[i] = be32(i + 1);
  return "";
}

/// Reads exactly `bytes` bytes of body and checks nothing follows them;
/// `declared` says what the header declares, for the message.
std::string read_body(idx_file& f, uint64_t bytes, const std::string& declared,
                      std::vector<uint8_t>& body) {
  if (bytes > max_body_bytes)
    return "header declares " + declared + ", too large: corrupt header";
  // The body grows as it arrives, doubling from 64 KiB: a header that
  // claims more than the file holds costs about twice what the file holds,
  // not what it claims (libFuzzer found a 20-byte file that made us
  // allocate 3.4 GB up front).
  constexpr uint64_t first = uint64_t{64} << 10;
  body.clear();
  uint64_t got = 0;
  while (got < bytes) {
    auto want = std::min(std::max(first, got), bytes - got);
    body.resize(got + want);
    uint64_t now = 0;
    if (auto err = read_bytes(f, body.data() + got, want, now); !err.empty())
      return err;
    got += now;
    if (now < want)
      break;
  }
  if (got < bytes)
    return "truncated: header declares " + declared + " (" +
           std::to_string(bytes) + " bytes) but only " + std::to_string(got) +
           " bytes follow";
  uint8_t extra = 0;
  if (auto err = read_bytes(f, &extra, 1, got); !err.empty())
    return err;
  if (got > 0)
    return "more data than the header's " + declared +
           ": wrong count or corrupt file";
  return "";
}

/// a * b, or UINT64_MAX where that overflows (read_body rejects it).
uint64_t saturating_mul(uint64_t a, uint64_t b) {
  return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

/// `path` + ".gz" if that exists, else `path` if that exists, else the .gz.
std::string pick_path(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path + ".gz", ec) &&
      std::filesystem::exists(path, ec))
    return path;
  return path + ".gz";
}

} // namespace

std::string read_idx_images(const std::string& path, tensor& images) {
  idx_file f;
  std::vector<uint64_t> dims(3); // n, rows, cols
  std::vector<uint8_t> body;
  auto err = open_idx(path, f);
  if (err.empty())
    err = read_header(f, images_magic, dims);
  if (err.empty() && (dims[1] == 0 || dims[2] == 0))
    err = "zero image size " + std::to_string(dims[1]) + "x" +
          std::to_string(dims[2]);
  if (err.empty())
    err = read_body(f, saturating_mul(dims[0], dims[1] * dims[2]),
                    std::to_string(dims[0]) + " images of " +
                        std::to_string(dims[1]) + "x" + std::to_string(dims[2]),
                    body);
  if (!err.empty())
    return failure(path, f, err);
  images.resize({dims[0], dims[1], dims[2]});
  for (size_t i = 0; i < body.size(); ++i)
    images[i] = float(body[i]) * (1.0f / 255.0f);
  return "";
}

std::string read_idx_labels(const std::string& path,
                            std::vector<uint8_t>& labels) {
  idx_file f;
  std::vector<uint64_t> dims(1); // n
  auto err = open_idx(path, f);
  if (err.empty())
    err = read_header(f, labels_magic, dims);
  if (err.empty())
    err = read_body(f, dims[0], std::to_string(dims[0]) + " labels", labels);
  return err.empty() ? "" : failure(path, f, err);
}

std::string load_fashion_mnist(const std::string& dir, const std::string& split,
                               dataset& out) {
  auto images_path = pick_path(dir + "/" + split + "-images-idx3-ubyte");
  auto labels_path = pick_path(dir + "/" + split + "-labels-idx1-ubyte");
  if (auto err = read_idx_images(images_path, out.images); !err.empty())
    return err;
  if (auto err = read_idx_labels(labels_path, out.labels); !err.empty())
    return err;
  if (out.images.rows() == out.labels.size())
    return "";
  return "IDX files " + images_path + " and " + labels_path + ": " +
         std::to_string(out.images.rows()) + " images but " +
         std::to_string(out.labels.size()) +
         " labels; install Debian's dataset-fashion-mnist (files in " +
         fashion_mnist_dir + ")";
}

std::string splits_match(const std::string& dir, const dataset& train,
                         const dataset& test) {
  auto size = [](const dataset& d) {
    auto& s = d.images.shape();
    std::string out;
    for (size_t i = 1; i < s.size(); ++i)
      out += (i > 1 ? "x" : "") + std::to_string(s[i]);
    return out;
  };
  if (size(train) == size(test))
    return "";
  return "the images in " + dir + " are of two sizes: t10k " + size(test) +
         ", train " + size(train) +
         "; both splits must be of one (Debian's dataset-fashion-mnist has"
         " them in " +
         fashion_mnist_dir + ")";
}

size_t classes_of(const dataset& d) {
  if (d.labels.empty())
    return 0;
  return size_t{*std::max_element(d.labels.begin(), d.labels.end())} + 1;
}

std::string model_fits(const std::string& spec, size_t inputs, size_t outputs,
                       size_t pixels, size_t classes) {
  if (inputs != pixels)
    return "--train.model=" + spec + " takes " + std::to_string(inputs) +
           " values a sample, but the images have " + std::to_string(pixels) +
           " pixels: its first size must be " + std::to_string(pixels);
  if (outputs < classes)
    return "--train.model=" + spec + " gives " + std::to_string(outputs) +
           " logits a sample, but the labels have " + std::to_string(classes) +
           " classes: its last size must be " + std::to_string(classes) +
           " or more";
  return "";
}

} // namespace troupe
