// A minimal host tensor: row-major float32 values that own their storage.
#pragma once

#include <cstddef>
#include <vector>

namespace troupe {

/// Row-major float32 array of any rank; owns its values. A rank >= 1 tensor
/// also reads as a matrix of rows() x cols(), e.g. images n x 28 x 28 as
/// n x 784. The default tensor has shape {0} and no values.
class tensor {
public:
  /// An empty tensor of shape {0}.
  tensor();

  /// A zero-filled tensor of `shape`; the product of the dims is its size.
  explicit tensor(std::vector<size_t> shape);

  /// A tensor of `shape` holding `values`; values.size() must equal the
  /// product of the dims (asserted: a mismatch is a bug in the caller).
  tensor(std::vector<size_t> shape, std::vector<float> values);

  /// Changes the shape; keeps the first values, zero-fills new ones.
  void resize(std::vector<size_t> shape);

  /// The dims, outermost first.
  const std::vector<size_t>& shape() const { return shape_; }

  /// Number of dims.
  size_t rank() const { return shape_.size(); }

  /// Number of values: the product of the dims.
  size_t size() const { return values_.size(); }

  /// shape()[0], or 1 for rank 0.
  size_t rows() const;

  /// Product of the dims after the first (1 for rank <= 1).
  size_t cols() const;

  /// The size() values, row-major.
  float* data() { return values_.data(); }

  /// The size() values, row-major.
  const float* data() const { return values_.data(); }

  /// Value `i` of the flat row-major array, i < size().
  float& operator[](size_t i) { return values_[i]; }

  /// Value `i` of the flat row-major array, i < size().
  float operator[](size_t i) const { return values_[i]; }

  /// The values as a vector, row-major.
  const std::vector<float>& values() const { return values_; }
  /// Exchanges the values with `other` if it holds size() floats (true);
  /// otherwise false and nothing changes. Hands storage in and out without
  /// a copy.
  bool swap_values(std::vector<float>& other);

private:
  std::vector<size_t> shape_;
  std::vector<float> values_;
};

/// Product of `shape`'s dims (1 for an empty shape).
size_t shape_size(const std::vector<size_t>& shape);

/// True if none of `xs[0..n)` is a NaN or an infinity (exponent bits all
/// ones), at memory speed: a shard server checks every push with it.
bool all_finite(const float* xs, size_t n);

} // namespace troupe
