// Element-wise activations on the CPU.
#include "kernels/activations.hpp"

namespace troupe {

kernel_status relu_forward_cpu(const float* x, float* y, size_t n) {
  if (n > 0 && (!x || !y))
    return kernel_status::bad_input;
  for (size_t i = 0; i < n; ++i)
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return kernel_status::ok;
}

kernel_status relu_backward_cpu(const float* x, const float* dy, float* dx,
                                size_t n) {
  if (n > 0 && (!x || !dy || !dx))
    return kernel_status::bad_input;
  for (size_t i = 0; i < n; ++i)
    dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  return kernel_status::ok;
}

} // namespace troupe
