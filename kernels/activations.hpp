// Element-wise activations on the CPU. Device-neutral signatures: n floats
// behind each pointer, on the kernel's device.
#pragma once

#include <cstddef>

#include "kernels/status.hpp"

namespace troupe {

/// y[i] = max(x[i], 0) for i in [0, n); y may be x (in place). Null
/// pointers with n > 0 give bad_input.
kernel_status relu_forward_cpu(const float* x, float* y, size_t n);

/// dx[i] = dy[i] if x[i] > 0, else 0, for i in [0, n). x is the forward
/// input, or equally the forward output (both are > 0 at the same places).
/// dx may be dy (in place). Null pointers with n > 0 give bad_input.
kernel_status relu_backward_cpu(const float* x, const float* dy, float* dx,
                                size_t n);

} // namespace troupe
