// Dense (fully connected) layer on the CPU via OpenBLAS sgemm. All matrices
// are row-major float32; the raw-pointer forms are the device-neutral ones.
#pragma once

#include <cstddef>

#include "kernels/status.hpp"
#include "kernels/tensor.hpp"

namespace troupe {

/// y = x W + b. x: batch x in, w: in x out, b: out, y: batch x out (written,
/// not accumulated; must not alias x, w or b). All sizes > 0 and <= INT_MAX,
/// all pointers non-null, else bad_input.
kernel_status dense_forward_cpu(const float* x, const float* w, const float* b,
                                float* y, size_t batch, size_t in, size_t out);

/// Gradients of y = x W + b given dy = dL/dy (batch x out):
/// dx = dy W^T (batch x in), dw = x^T dy (in x out), db = column sums of dy
/// (out). Outputs are overwritten, not accumulated, and must not alias the
/// inputs. dx may be null to skip it (the first layer); the others must not
/// be. Sizes as dense_forward_cpu.
kernel_status dense_backward_cpu(const float* x, const float* w,
                                 const float* dy, float* dx, float* dw,
                                 float* db, size_t batch, size_t in,
                                 size_t out);

/// Row-block forms, for a weight matrix stored as blocks of its rows (each
/// block's push can then leave while the next block's gradient is made).
/// Block k holds rows [r0, r0 + rows) of W; `x` points at column r0 of the
/// input, whose rows are `ldx` floats apart (ldx >= rows).
/// y += x[:, r0:r0+rows] W_k (y: batch x out, already holding the bias and
/// any other blocks' terms).
kernel_status dense_forward_block_cpu(const float* x, size_t ldx,
                                      const float* w, float* y, size_t batch,
                                      size_t rows, size_t out);

/// dw = x[:, r0:r0+rows]^T dy (rows x out, overwritten) and
/// dx[:, r0:r0+rows] = dy W_k^T (dx: column r0 of a batch x ldx matrix,
/// those columns overwritten). Either may be null to skip it (a pipeline
/// stage makes the input gradient and the weight gradient apart), not
/// both. Sizes as dense_forward_block_cpu.
kernel_status dense_backward_block_cpu(const float* x, size_t ldx,
                                       const float* w, const float* dy,
                                       float* dx, float* dw, size_t batch,
                                       size_t rows, size_t out);

/// db = column sums of dy (batch x out), overwritten.
kernel_status dense_bias_grad_cpu(const float* dy, float* db, size_t batch,
                                  size_t out);

/// Tensor form of dense_forward_cpu: x is read as x.rows() x x.cols(), w must
/// be rank 2 with w.rows() == x.cols(), b must hold w.cols() values, else
/// shape_mismatch. y is resized to {x.rows(), w.cols()}.
kernel_status dense_forward_cpu(const tensor& x, const tensor& w,
                                const tensor& b, tensor& y);

/// Tensor form of dense_backward_cpu with the shapes of dense_forward_cpu;
/// dy must be x.rows() x w.cols(). dx (if not null), dw and db are resized
/// to the shapes of x, w and b.
kernel_status dense_backward_cpu(const tensor& x, const tensor& w,
                                 const tensor& dy, tensor* dx, tensor& dw,
                                 tensor& db);

} // namespace troupe
