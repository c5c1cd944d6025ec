// A minimal host tensor: row-major float32 values that own their storage.
#include "kernels/tensor.hpp"

#include <cassert>
#include <cstdint>
#include <cstring>
#include <utility>

#include "kernels/wide_loop.hpp"

namespace troupe {

size_t shape_size(const std::vector<size_t>& shape) {
  size_t n = 1;
  for (auto d : shape)
    n *= d;
  return n;
}

tensor::tensor() : shape_{0} {
  // nop
}

tensor::tensor(std::vector<size_t> shape)
    : shape_(std::move(shape)), values_(shape_size(shape_), 0.0f) {
  // nop
}

tensor::tensor(std::vector<size_t> shape, std::vector<float> values)
    : shape_(std::move(shape)), values_(std::move(values)) {
  assert(values_.size() == shape_size(shape_));
}

void tensor::resize(std::vector<size_t> shape) {
  shape_ = std::move(shape);
  values_.resize(shape_size(shape_), 0.0f);
}

bool tensor::swap_values(std::vector<float>& other) {
  if (other.size() != values_.size())
    return false;
  values_.swap(other);
  return true;
}

size_t tensor::rows() const {
  return shape_.empty() ? 1 : shape_[0];
}

size_t tensor::cols() const {
  size_t n = 1;
  for (size_t i = 1; i < shape_.size(); ++i)
    n *= shape_[i];
  return n;
}

TROUPE_WIDE_LOOP
bool all_finite(const float* xs, size_t n) {
  // Integer compares of the exponent bits vectorise; a float compare of
  // x - x against 0 would too, but not under every math flag.
  constexpr uint32_t exponent = 0x7f800000u;
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, xs + i, sizeof bits);
    bad |= (bits & exponent) == exponent;
  }
  return bad == 0;
}

} // namespace troupe
