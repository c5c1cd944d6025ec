// Dense (fully connected) layer on the CPU via OpenBLAS sgemm.
#include "kernels/dense.hpp"

#include <algorithm>
#include <climits>

#include <cblas.h>

namespace troupe {

namespace {

bool valid_dims(size_t batch, size_t in, size_t out) {
  auto ok = [](size_t n) { return n > 0 && n <= size_t(INT_MAX); };
  return ok(batch) && ok(in) && ok(out);
}

} // namespace

kernel_status dense_forward_cpu(const float* x, const float* w, const float* b,
                                float* y, size_t batch, size_t in, size_t out) {
  if (!x || !w || !b || !y || !valid_dims(batch, in, out))
    return kernel_status::bad_input;
  // Seed every row of y with b, then accumulate x W on top (beta = 1).
  for (size_t i = 0; i < batch; ++i)
    std::copy(b, b + out, y + i * out);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(batch), int(out),
              int(in), 1.0f, x, int(in), w, int(out), 1.0f, y, int(out));
  return kernel_status::ok;
}

kernel_status dense_backward_cpu(const float* x, const float* w,
                                 const float* dy, float* dx, float* dw,
                                 float* db, size_t batch, size_t in,
                                 size_t out) {
  if (!x || !w || !dy || !dw || !db || !valid_dims(batch, in, out))
    return kernel_status::bad_input;
  // dw (in x out) = x^T (in x batch) dy (batch x out)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(in), int(out),
              int(batch), 1.0f, x, int(in), dy, int(out), 0.0f, dw, int(out));
  // dx (batch x in) = dy (batch x out) W^T (out x in)
  if (dx)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(batch), int(in),
                int(out), 1.0f, dy, int(out), w, int(out), 0.0f, dx, int(in));
  return dense_bias_grad_cpu(dy, db, batch, out);
}

kernel_status dense_bias_grad_cpu(const float* dy, float* db, size_t batch,
                                  size_t out) {
  if (!dy || !db || !valid_dims(batch, 1, out))
    return kernel_status::bad_input;
  std::fill(db, db + out, 0.0f);
  for (size_t i = 0; i < batch; ++i)
    for (size_t j = 0; j < out; ++j)
      db[j] += dy[i * out + j];
  return kernel_status::ok;
}

kernel_status dense_forward_block_cpu(const float* x, size_t ldx,
                                      const float* w, float* y, size_t batch,
                                      size_t rows, size_t out) {
  if (!x || !w || !y || !valid_dims(batch, rows, out) ||
      !valid_dims(1, ldx, 1) || ldx < rows)
    return kernel_status::bad_input;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(batch), int(out),
              int(rows), 1.0f, x, int(ldx), w, int(out), 1.0f, y, int(out));
  return kernel_status::ok;
}

kernel_status dense_backward_block_cpu(const float* x, size_t ldx,
                                       const float* w, const float* dy,
                                       float* dx, float* dw, size_t batch,
                                       size_t rows, size_t out) {
  if (!x || !w || !dy || (!dw && !dx) || !valid_dims(batch, rows, out) ||
      !valid_dims(1, ldx, 1) || ldx < rows)
    return kernel_status::bad_input;
  if (dw)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(rows), int(out),
                int(batch), 1.0f, x, int(ldx), dy, int(out), 0.0f, dw,
                int(out));
  if (dx)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(batch), int(rows),
                int(out), 1.0f, dy, int(out), w, int(out), 0.0f, dx, int(ldx));
  return kernel_status::ok;
}

kernel_status dense_forward_cpu(const tensor& x, const tensor& w,
                                const tensor& b, tensor& y) {
  if (w.rank() != 2 || w.rows() != x.cols() || b.size() != w.cols())
    return kernel_status::shape_mismatch;
  y.resize({x.rows(), w.cols()});
  return dense_forward_cpu(x.data(), w.data(), b.data(), y.data(), x.rows(),
                           w.rows(), w.cols());
}

kernel_status dense_backward_cpu(const tensor& x, const tensor& w,
                                 const tensor& dy, tensor* dx, tensor& dw,
                                 tensor& db) {
  if (w.rank() != 2 || w.rows() != x.cols() || dy.rows() != x.rows() ||
      dy.cols() != w.cols())
    return kernel_status::shape_mismatch;
  if (dx)
    dx->resize(x.shape());
  dw.resize(w.shape());
  db.resize({w.cols()});
  return dense_backward_cpu(x.data(), w.data(), dy.data(),
                            dx ? dx->data() : nullptr, dw.data(), db.data(),
                            x.rows(), w.rows(), w.cols());
}

} // namespace troupe
