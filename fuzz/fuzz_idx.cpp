// libFuzzer harness of the IDX reader (kernels/idx.hpp): the input is the
// content of a data file, plain or gzip, read as an image file and as a
// label file, as a worker reads its data set.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_input.hpp"
#include "kernels/idx.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto path = troupe::fuzz::scratch::file("data-idx-ubyte");
  if (!troupe::fuzz::write_file(path, data, size))
    return 0;
  // A refusal is one line of text, the answer to a bad file; only a crash
  // or a sanitizer report is a finding.
  troupe::tensor images;
  static_cast<void>(troupe::read_idx_images(path, images));
  std::vector<uint8_t> labels;
  static_cast<void>(troupe::read_idx_labels(path, labels));
  return 0;
}
