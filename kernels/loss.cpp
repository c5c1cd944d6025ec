// Softmax cross-entropy loss and accuracy on the CPU.
#include "kernels/loss.hpp"

#include <algorithm>
#include <cmath>

namespace troupe {

namespace {

bool valid(const float* logits, const uint8_t* labels, size_t batch,
           size_t classes, const void* out) {
  if (!logits || !labels || !out || batch == 0 || classes == 0 || classes > 256)
    return false;
  return std::all_of(labels, labels + batch,
                     [classes](uint8_t y) { return y < classes; });
}

/// Loss of one row; writes softmax(row) - onehot into grad if not null,
/// scaled by `scale`.
double row_xent(const float* row, uint8_t label, size_t classes, float scale,
                float* grad) {
  float max = *std::max_element(row, row + classes);
  double sum = 0.0;
  for (size_t j = 0; j < classes; ++j)
    sum += std::exp(double(row[j] - max));
  double log_sum = std::log(sum);
  if (grad) {
    for (size_t j = 0; j < classes; ++j) {
      double p = std::exp(double(row[j] - max) - log_sum);
      grad[j] = float((p - (j == label ? 1.0 : 0.0)) * scale);
    }
  }
  return log_sum - double(row[label] - max);
}

} // namespace

kernel_status softmax_xent_cpu(const float* logits, const uint8_t* labels,
                               size_t batch, size_t classes, float* loss,
                               float* dlogits) {
  if (!valid(logits, labels, batch, classes, loss))
    return kernel_status::bad_input;
  float scale = 1.0f / float(batch);
  double total = 0.0;
  for (size_t i = 0; i < batch; ++i)
    total += row_xent(logits + i * classes, labels[i], classes, scale,
                      dlogits ? dlogits + i * classes : nullptr);
  *loss = float(total / double(batch));
  return kernel_status::ok;
}

kernel_status accuracy_count_cpu(const float* logits, const uint8_t* labels,
                                 size_t batch, size_t classes,
                                 size_t* correct) {
  if (!valid(logits, labels, batch, classes, correct))
    return kernel_status::bad_input;
  size_t n = 0;
  for (size_t i = 0; i < batch; ++i) {
    const float* row = logits + i * classes;
    auto best = std::max_element(row, row + classes) - row;
    n += size_t(best) == labels[i] ? 1 : 0;
  }
  *correct = n;
  return kernel_status::ok;
}

} // namespace troupe
