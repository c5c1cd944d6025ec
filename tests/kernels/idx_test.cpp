// The IDX reader on the real Fashion-MNIST files and on small good and broken
// files written to a temporary directory.
#define BOOST_TEST_MODULE idx_tests
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "kernels/idx.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using troupe::test::idx_bytes;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> gzipped(const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> out(compressBound(raw.size()) + 64);
  z_stream zs{};
  // windowBits 15 + 16: a gzip wrapper instead of zlib's.
  BOOST_REQUIRE(
      deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  zs.next_in = const_cast<uint8_t*>(raw.data());
  zs.avail_in = unsigned(raw.size());
  zs.next_out = out.data();
  zs.avail_out = unsigned(out.size());
  BOOST_REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

/// Owns a fresh temporary directory for one test case.
struct temp_dir {
  fs::path dir;
  temp_dir() {
    dir = fs::temp_directory_path() /
          ("troupe_idx_test_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string write(const std::string& name, const std::vector<uint8_t>& b) {
    auto path = (dir / name).string();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()),
              std::streamsize(b.size()));
    return path;
  }
};

/// Two 3x2 images: pixels 0, 51, 255, ... (51 / 255 = 0.2).
const std::vector<uint8_t> two_images{0, 51, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9};

/// Checks that `err` is the one clear line for `path` that mentions `what`.
void check_error(const std::string& err, const std::string& path,
                 const std::string& what) {
  BOOST_TEST_CONTEXT("error: " << err) {
    BOOST_TEST(err.find(path) != std::string::npos);
    BOOST_TEST(err.find(what) != std::string::npos);
    BOOST_TEST(err.find("install Debian's dataset-fashion-mnist (files in "
                        "/usr/share/datasets/fashion-mnist)") !=
               std::string::npos);
    BOOST_TEST(err.find('\n') == std::string::npos);
  }
}

} // namespace

BOOST_AUTO_TEST_SUITE(idx_tests)

BOOST_AUTO_TEST_CASE(the_real_fashion_mnist_files_load_with_their_shapes) {
  dataset train, test;
  auto err = load_fashion_mnist(fashion_mnist_dir, "train", train);
  BOOST_REQUIRE_MESSAGE(err.empty(), err);
  err = load_fashion_mnist(fashion_mnist_dir, "t10k", test);
  BOOST_REQUIRE_MESSAGE(err.empty(), err);
  BOOST_TEST(train.images.shape() == (std::vector<size_t>{60000, 28, 28}));
  BOOST_TEST(test.images.shape() == (std::vector<size_t>{10000, 28, 28}));
  BOOST_TEST(train.labels.size() == 60000u);
  BOOST_TEST(test.labels.size() == 10000u);
  // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
  std::vector<size_t> per_class(10, 0);
  for (auto y : train.labels)
    per_class.at(y) += 1; // at(): a label >= 10 fails loudly
  BOOST_TEST(per_class == std::vector<size_t>(10, 6000),
             boost::test_tools::per_element());
  BOOST_TEST(std::all_of(test.labels.begin(), test.labels.end(),
                         [](uint8_t y) { return y < 10; }));
  auto [lo, hi] = std::minmax_element(test.images.values().begin(),
                                      test.images.values().end());
  BOOST_TEST(*lo == 0.0f);
  BOOST_TEST(*hi == 1.0f);
}

BOOST_AUTO_TEST_CASE(splits_of_two_image_sizes_are_refused) {
  // Test images of 14x14 under train images of 28x28 were read 784 floats
  // at a time, about 23 MB past their end, and scored 0.10 with exit 0.
  dataset train, test;
  train.images.resize({2, 3, 2});
  test.images.resize({4, 3, 2});
  BOOST_CHECK_EQUAL(splits_match("/d", train, test), "");
  test.images.resize({4, 2, 2});
  BOOST_CHECK_EQUAL(splits_match("/d", train, test),
                    "the images in /d are of two sizes: t10k 2x2, train 3x2;"
                    " both splits must be of one (Debian's"
                    " dataset-fashion-mnist has them in"
                    " /usr/share/datasets/fashion-mnist)");
}

BOOST_AUTO_TEST_CASE(plain_and_gzip_files_read_alike) {
  temp_dir tmp;
  auto raw = idx_bytes(0x803, {2, 3, 2}, two_images);
  for (auto path :
       {tmp.write("plain", raw), tmp.write("zipped.gz", gzipped(raw))}) {
    tensor images;
    auto err = read_idx_images(path, images);
    BOOST_REQUIRE_MESSAGE(err.empty(), err);
    BOOST_TEST(images.shape() == (std::vector<size_t>{2, 3, 2}));
    BOOST_TEST(images[0] == 0.0f);
    BOOST_TEST(images[1] == 0.2f, boost::test_tools::tolerance(1e-6f));
    BOOST_TEST(images[2] == 1.0f);
    BOOST_TEST(images[11] == 9.0f / 255.0f);
  }
  std::vector<uint8_t> labels;
  auto path = tmp.write("labels.gz", gzipped(idx_bytes(0x801, {3}, {7, 0, 9})));
  BOOST_REQUIRE(read_idx_labels(path, labels).empty());
  BOOST_TEST(labels == (std::vector<uint8_t>{7, 0, 9}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_missing_file_says_so_and_how_to_get_the_data) {
  temp_dir tmp;
  auto path = (tmp.dir / "nope-images-idx3-ubyte.gz").string();
  tensor images;
  check_error(read_idx_images(path, images), path,
              "cannot open: No such file or directory");
  dataset ds;
  check_error(load_fashion_mnist(tmp.dir.string(), "train", ds),
              "train-images-idx3-ubyte.gz", "cannot open");
}

BOOST_AUTO_TEST_CASE(a_bad_magic_is_rejected) {
  temp_dir tmp;
  auto labels = tmp.write("labels", idx_bytes(0x801, {12}, two_images));
  tensor images;
  check_error(read_idx_images(labels, images), labels,
              "bad magic 0x00000801, expected 0x00000803 for IDX images "
              "(this is a file of IDX labels)");
  auto junk =
      tmp.write("junk.gz", gzipped(idx_bytes(0x12345678, {3}, {1, 2, 3})));
  std::vector<uint8_t> ys;
  check_error(read_idx_labels(junk, ys), junk, "bad magic 0x12345678");
}

BOOST_AUTO_TEST_CASE(a_truncated_file_is_rejected) {
  temp_dir tmp;
  auto raw = idx_bytes(0x803, {2, 3, 2}, two_images);
  raw.resize(raw.size() - 4); // 8 of 12 pixel bytes
  tensor images;
  auto path = tmp.write("short", raw);
  check_error(read_idx_images(path, images), path,
              "truncated: header declares 2 images of 3x2 (12 bytes) but "
              "only 8 bytes follow");
  auto header = tmp.write("header", {0, 0, 8, 3, 0});
  check_error(read_idx_images(header, images), header,
              "truncated header: 5 of 16 bytes");
  // A gzip stream cut short is reported by zlib.
  auto gz = gzipped(idx_bytes(0x803, {2, 3, 2}, two_images));
  gz.resize(gz.size() / 2);
  auto cut = tmp.write("cut.gz", gz);
  check_error(read_idx_images(cut, images), cut, "(gzip)");
  BOOST_TEST(read_idx_images(cut, images).find("truncated") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_header_that_claims_gigabytes_costs_what_the_file_holds) {
  // libFuzzer (fuzz/fuzz_idx.cpp) found that a 20-byte file whose header
  // declared 65535 images of 256x256 made the reader allocate 4.3 GB
  // before it found the file short. A child with 512 MiB more address
  // space than it has now reads such a file: it must fail as truncated,
  // not run out of memory.
  temp_dir tmp;
  auto path = tmp.write("liar", idx_bytes(0x803, {65535, 256, 256}, {1, 2, 3}));
  pid_t kid = ::fork();
  BOOST_REQUIRE(kid >= 0);
  if (kid == 0) {
    long pages = 0;
    std::ifstream{"/proc/self/statm"} >> pages;
    rlimit as{};
    as.rlim_cur = as.rlim_max =
        rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t{512} << 20);
    if (::setrlimit(RLIMIT_AS, &as) != 0)
      ::_exit(3);
    try {
      tensor images;
      auto err = read_idx_images(path, images);
      ::_exit(err.find("truncated: header declares 65535 images") !=
                      std::string::npos
                  ? 0
                  : 1);
    } catch (...) { // std::bad_alloc
      ::_exit(2);
    }
  }
  int st = 0;
  BOOST_REQUIRE_EQUAL(::waitpid(kid, &st, 0), kid);
  BOOST_REQUIRE(WIFEXITED(st));
  BOOST_CHECK_MESSAGE(WEXITSTATUS(st) == 0,
                      "exit " << WEXITSTATUS(st) << " (2: out of memory)");
}

BOOST_AUTO_TEST_CASE(a_count_that_disagrees_with_the_data_is_rejected) {
  temp_dir tmp;
  tensor images;
  auto fewer = tmp.write("fewer", idx_bytes(0x803, {1, 3, 2}, two_images));
  check_error(read_idx_images(fewer, images), fewer,
              "more data than the header's 1 images of 3x2");
  auto more = tmp.write("more.gz", gzipped(idx_bytes(0x801, {5}, {1, 2, 3})));
  std::vector<uint8_t> labels;
  check_error(read_idx_labels(more, labels), more,
              "header declares 5 labels (5 bytes) but only 3 bytes follow");
  auto empty = tmp.write("empty", idx_bytes(0x803, {2, 0, 2}, {}));
  check_error(read_idx_images(empty, images), empty, "zero image size 0x2");
}

BOOST_AUTO_TEST_CASE(images_and_labels_of_different_counts_are_rejected) {
  temp_dir tmp;
  tmp.write("train-images-idx3-ubyte", idx_bytes(0x803, {2, 3, 2}, two_images));
  tmp.write("train-labels-idx1-ubyte.gz",
            gzipped(idx_bytes(0x801, {3}, {1, 2, 3})));
  dataset ds;
  check_error(load_fashion_mnist(tmp.dir.string(), "train", ds),
              "train-labels-idx1-ubyte.gz", "2 images but 3 labels");
}

// A model must take an image's pixels and give a logit a class or more:
// else it read past each image (a crash) or trained on the wrong pixels.
BOOST_AUTO_TEST_CASE(a_model_must_fit_the_images_and_the_classes) {
  BOOST_CHECK_EQUAL(model_fits("mlp:784-10", 784, 10, 784, 10), "");
  BOOST_CHECK_EQUAL(model_fits("mlp:784-12", 784, 12, 784, 10), "");
  BOOST_CHECK_EQUAL(model_fits("mlp:785-10", 785, 10, 784, 10),
                    "--train.model=mlp:785-10 takes 785 values a sample, but"
                    " the images have 784 pixels: its first size must be 784");
  BOOST_CHECK_EQUAL(model_fits("mlp:100-10", 100, 10, 784, 10),
                    "--train.model=mlp:100-10 takes 100 values a sample, but"
                    " the images have 784 pixels: its first size must be 784");
  BOOST_CHECK_EQUAL(model_fits("mlp:784-5", 784, 5, 784, 10),
                    "--train.model=mlp:784-5 gives 5 logits a sample, but the"
                    " labels have 10 classes: its last size must be 10 or"
                    " more");
  dataset d;
  BOOST_CHECK_EQUAL(classes_of(d), 0u);
  d.labels = {3, 9, 0};
  BOOST_CHECK_EQUAL(classes_of(d), 10u);
}

BOOST_AUTO_TEST_SUITE_END()
