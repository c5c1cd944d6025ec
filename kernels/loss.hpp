// Softmax cross-entropy loss and accuracy on the CPU, for classifiers whose
// last layer emits one logit per class.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/status.hpp"

namespace troupe {

/// Mean softmax cross-entropy over the batch, computed stably (log-sum-exp
/// after subtracting each row's max). logits: batch x classes; labels: batch
/// values, each < classes (else bad_input); *loss: the mean; dlogits (may be
/// null): batch x classes, (softmax(logits) - onehot(label)) / batch, i.e.
/// the gradient of the mean loss. batch, classes > 0; classes <= 256.
kernel_status softmax_xent_cpu(const float* logits, const uint8_t* labels,
                               size_t batch, size_t classes, float* loss,
                               float* dlogits);

/// *correct = number of rows whose argmax (the first on ties) equals the
/// label. logits: batch x classes; labels: batch values < classes.
kernel_status accuracy_count_cpu(const float* logits, const uint8_t* labels,
                                 size_t batch, size_t classes, size_t* correct);

} // namespace troupe
