// Reader of the IDX files of MNIST and Fashion-MNIST, gzipped or plain. Every
// failure is one line that names the file, says what is wrong and how to get
// the data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/tensor.hpp"

namespace troupe {

/// Where Debian's dataset-fashion-mnist package puts its files.
inline constexpr const char* fashion_mnist_dir =
    "/usr/share/datasets/fashion-mnist";

/// One split of an image classification data set.
struct dataset {
  tensor images;               ///< n x rows x cols, pixel / 255 in [0, 1]
  std::vector<uint8_t> labels; ///< n class indices
};

/// Reads an IDX image file (magic 0x00000803: n x rows x cols bytes), gzip
/// or plain, into images (n x rows x cols floats in [0, 1]). Returns "" on
/// success, else one line: the path, what is wrong, how to get the data.
std::string read_idx_images(const std::string& path, tensor& images);

/// Reads an IDX label file (magic 0x00000801: n bytes), gzip or plain, into
/// labels (n values). Returns "" or one line, as read_idx_images.
std::string read_idx_labels(const std::string& path,
                            std::vector<uint8_t>& labels);

/// Reads split `split` ("train" or "t10k") of `dir`:
/// <dir>/<split>-images-idx3-ubyte.gz and <dir>/<split>-labels-idx1-ubyte.gz
/// (or the same names without .gz), and checks that their counts agree.
/// Returns "" or one line, as read_idx_images.
std::string load_fashion_mnist(const std::string& dir, const std::string& split,
                               dataset& out);

/// Whether the images of `train` and `test` (the splits of `dir`) are of
/// one size: "" if so, else one line saying both (the test images were
/// read in steps of the train images' size, past their end).
std::string splits_match(const std::string& dir, const dataset& train,
                         const dataset& test);

/// The classes of `d`: its largest label + 1 (0 if it has none).
size_t classes_of(const dataset& d);

/// Whether model `spec`, which takes `inputs` values a sample and gives
/// `outputs` logits, fits data of `pixels` values an image and `classes`
/// classes: "" if so, else one line naming --train.model and the size it
/// needs (a model of another width read past each image, or trained on
/// the wrong pixels; one of fewer logits than classes cannot be scored).
std::string model_fits(const std::string& spec, size_t inputs, size_t outputs,
                       size_t pixels, size_t classes);

} // namespace troupe
