// CUDA twins of the CPU kernels (cuda_device.hpp): cuBLAS for the dense
// layers' three GEMMs (cuBLASLt with the bias fused in, where it has a
// kernel: cuda_lt.hpp), small kernels for the rest. Each kernel repeats
// its CPU twin's arithmetic per element, in the same order where it sums
// (but the bias gradient, summed in a tree), so results agree to rounding
// (nvcc may fuse a multiply and an add).
#include "kernels/cuda/cuda_device.hpp"
#include "kernels/cuda/cuda_internal.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace troupe::cuda {

namespace {

/// The launcher's grid: threads per block, and blocks for n elements (the
/// kernels stride over what one grid does not cover).
constexpr unsigned block_threads = 256;
constexpr size_t max_blocks = 65535;

unsigned blocks_for(size_t n) {
  return static_cast<unsigned>(
      std::min(max_blocks, (n + block_threads - 1) / block_threads));
}

bool fits_int(size_t n) {
  return n > 0 && n <= size_t(INT_MAX);
}

#define TROUPE_GRID_STRIDE(i, n)                                               \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n);      \
       i += size_t(blockDim.x) * gridDim.x)

__global__ void fill_rows(float* y, const float* b, size_t rows, size_t cols) {
  TROUPE_GRID_STRIDE(k, rows * cols) {
    y[k] = b[k % cols];
  }
}

/// db[j] = the column sum of dy (rows x cols): a block per 32 columns,
/// 32 lanes of rows per column, their sums added in shared memory (one
/// thread per column, in row order, was half the GEMMs' speed).
constexpr unsigned sum_lanes = 32;

__global__ void column_sums(const float* dy, float* db, size_t rows,
                            size_t cols) {
  __shared__ float part[sum_lanes][sum_lanes + 1];
  size_t j = size_t(blockIdx.x) * sum_lanes + threadIdx.x;
  float s = 0.0f;
  if (j < cols)
    for (size_t i = threadIdx.y; i < rows; i += sum_lanes)
      s += dy[i * cols + j];
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    float t = 0.0f;
    for (unsigned r = 0; r < sum_lanes; ++r)
      t += part[r][threadIdx.x];
    db[j] = t;
  }
}

__global__ void relu_fwd(const float* x, float* y, size_t n) {
  TROUPE_GRID_STRIDE(i, n) {
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
}

__global__ void relu_bwd(const float* x, const float* dy, float* dx, size_t n) {
  TROUPE_GRID_STRIDE(i, n) {
    dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  }
}

/// One row per thread, in double as softmax_xent_cpu; a label out of
/// range raises `bad`.
__global__ void xent_rows(const float* logits, const uint8_t* labels,
                          size_t batch, size_t classes, float scale,
                          double* row_loss, float* dlogits, uint32_t* bad) {
  TROUPE_GRID_STRIDE(i, batch) {
    const float* row = logits + i * classes;
    unsigned label = labels[i];
    if (label >= classes) {
      atomicExch(bad, 1u);
      row_loss[i] = 0.0;
      continue;
    }
    float max = row[0];
    for (size_t j = 1; j < classes; ++j)
      max = row[j] > max ? row[j] : max;
    double sum = 0.0;
    for (size_t j = 0; j < classes; ++j)
      sum += exp(double(row[j] - max));
    double log_sum = log(sum);
    if (dlogits != nullptr)
      for (size_t j = 0; j < classes; ++j) {
        double p = exp(double(row[j] - max) - log_sum);
        dlogits[i * classes + j] =
            float((p - (j == label ? 1.0 : 0.0)) * scale);
      }
    row_loss[i] = log_sum - double(row[label] - max);
  }
}

/// The rows' losses summed in row order, as the CPU does.
__global__ void mean_loss(const double* row_loss, size_t batch, float* loss) {
  if (blockIdx.x != 0 || threadIdx.x != 0)
    return;
  double total = 0.0;
  for (size_t i = 0; i < batch; ++i)
    total += row_loss[i];
  *loss = float(total / double(batch));
}

__global__ void argmax_hits(const float* logits, const uint8_t* labels,
                            size_t batch, size_t classes, uint32_t* correct,
                            uint32_t* bad) {
  TROUPE_GRID_STRIDE(i, batch) {
    const float* row = logits + i * classes;
    if (labels[i] >= classes) {
      atomicExch(bad, 1u);
      continue;
    }
    size_t best = 0; // the first largest, as std::max_element
    for (size_t j = 1; j < classes; ++j)
      if (row[j] > row[best])
        best = j;
    if (best == labels[i])
      atomicAdd(correct, 1u);
  }
}

__global__ void sgd_step(float* w, const float* g, size_t n, float lr, float wd,
                         float d) {
  TROUPE_GRID_STRIDE(i, n) {
    w[i] -= lr * (g[i] / d + wd * w[i]);
  }
}

__global__ void momentum_step(float* w, const float* g, float* v, size_t n,
                              float lr, float mu, float wd, float d,
                              bool nesterov) {
  TROUPE_GRID_STRIDE(i, n) {
    if (nesterov) {
      float gi = g[i] / d + wd * w[i];
      v[i] = mu * v[i] + gi;
      w[i] -= lr * (gi + mu * v[i]);
    } else {
      v[i] = mu * v[i] + (g[i] / d + wd * w[i]);
      w[i] -= lr * v[i];
    }
  }
}

__global__ void adam_step(float* w, const float* g, float* m, float* v,
                          size_t n, float lr, float b1, float b2, float eps,
                          float wd, float d, float c1, float c2) {
  TROUPE_GRID_STRIDE(i, n) {
    float gi = g[i] / d;
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    float step = m[i] * c1 / (sqrtf(v[i] * c2) + eps);
    w[i] -= lr * (step + wd * w[i]);
  }
}

__global__ void add_into(float* acc, const float* x, size_t n) {
  TROUPE_GRID_STRIDE(i, n) {
    acc[i] += x[i];
  }
}

__global__ void scale_by(float* x, size_t n, float a) {
  TROUPE_GRID_STRIDE(i, n) {
    x[i] *= a;
  }
}

/// One thread watching the GPU's nanosecond clock for `ns`.
__global__ void hold_for(unsigned long long ns) {
  unsigned long long from = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(from));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - from < ns);
}

/// C = op(A) op(B) + beta C, column-major, alpha 1 (m x k by k x n): the
/// one cuBLAS call of the dense layers.
cuda_status gemm(cublasHandle_t h, bool ta, bool tb, size_t m, size_t n,
                 size_t k, const float* a, size_t lda, const float* b,
                 size_t ldb, float beta, float* c, size_t ldc,
                 const char* what) {
  const float one = 1.0f;
  return check(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                           tb ? CUBLAS_OP_T : CUBLAS_OP_N, int(m), int(n),
                           int(k), &one, a, int(lda), b, int(ldb), &beta, c,
                           int(ldc)),
               what);
}

bool in_unit(float x) {
  return x >= 0.0f && x < 1.0f;
}

bool valid_step(const void* w, const void* g, size_t n, float lr, float wd,
                float d) {
  return (n == 0 || (w != nullptr && g != nullptr)) && lr >= 0.0f &&
         wd >= 0.0f && d > 0.0f;
}

} // namespace

cuda_status queue_hold(cudaStream_t stream, unsigned us) {
  hold_for<<<1, 1, 0, stream>>>(1000ull * us);
  return check(cudaGetLastError(), "hold_for");
}

int device_count(std::string* why) {
  int n = 0;
  auto e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) { // no driver or no GPU: error 35 or 100
    if (why != nullptr)
      *why = std::string{"cudaGetDeviceCount: "} + cudaGetErrorName(e) + ": " +
             cudaGetErrorString(e);
    cudaGetLastError();
    return 0;
  }
  if (n == 0 && why != nullptr)
    *why = "the CUDA driver found no GPU";
  return n;
}

std::unique_ptr<device> device::open(int ordinal, cuda_status& st) {
  std::string why;
  int n = device_count(&why);
  if (ordinal < 0 || ordinal >= n) {
    st = {"no GPU cuda:" + std::to_string(ordinal) + " (" +
          (n == 0 ? why : std::to_string(n) + " found") + ")"};
    return nullptr;
  }
  std::unique_ptr<device> d{new device};
  d->ordinal_ = ordinal;
  d->impl_ = std::make_unique<impl>();
  auto& x = *d->impl_;
  cudaDeviceProp prop{};
  if (!(st = check(cudaSetDevice(ordinal), "cudaSetDevice")).ok() ||
      !(st = check(cudaGetDeviceProperties(&prop, ordinal),
                   "cudaGetDeviceProperties"))
           .ok() ||
      !(st = check(cudaStreamCreateWithFlags(&x.stream, cudaStreamNonBlocking),
                   "cudaStreamCreate"))
           .ok() ||
      !(st = check(cudaStreamCreateWithFlags(&x.lane, cudaStreamNonBlocking),
                   "cudaStreamCreate (the copy lane)"))
           .ok() ||
      !(st = check(cublasCreate(&x.blas), "cublasCreate")).ok() ||
      !(st = check(cublasSetStream(x.blas, x.stream), "cublasSetStream"))
           .ok() ||
      // fp32 GEMMs in fp32: no TF32 unless a caller chooses it.
      !(st = check(cublasSetMathMode(x.blas, CUBLAS_DEFAULT_MATH),
                   "cublasSetMathMode"))
           .ok())
    return nullptr;
  x.name = prop.name;
  x.bytes = prop.totalGlobalMem;
  if (!(st = d->alloc(x.flag, 1)).ok())
    return nullptr;
  // A workspace of our own (32 MiB, cuBLAS's advice for Hopper), set after
  // the stream (which resets it): a captured GEMM then allocates nothing.
  constexpr size_t blas_bytes = size_t{32} << 20;
  if (!(st = d->alloc(x.blas_space, blas_bytes)).ok() ||
      !(st = check(cublasSetWorkspace(x.blas, x.blas_space.data(), blas_bytes),
                   "cublasSetWorkspace"))
           .ok())
    return nullptr;
  x.lt = std::make_unique<lt_plans>();
  if (!(st = x.lt->open(x.blas_space.data(), blas_bytes)).ok())
    return nullptr;
  return d;
}

device::~device() {
  if (!impl_)
    return;
  cudaSetDevice(ordinal_);
  if (impl_->stream != nullptr)
    cudaStreamSynchronize(impl_->stream);
  if (impl_->lane != nullptr)
    cudaStreamSynchronize(impl_->lane);
  impl_->row_loss = {};
  impl_->retired_row_loss.clear();
  impl_->flag = {};
  impl_->lt.reset();
  if (impl_->blas != nullptr)
    cublasDestroy(impl_->blas);
  impl_->blas_space = {}; // after the handles that used it
  if (impl_->stream != nullptr)
    cudaStreamDestroy(impl_->stream);
  if (impl_->lane != nullptr)
    cudaStreamDestroy(impl_->lane);
  for (auto e : impl_->signals)
    if (e != nullptr)
      cudaEventDestroy(e);
}

cuda_status device::use() {
  return check(cudaSetDevice(ordinal_), "cudaSetDevice");
}

std::string device::describe() const {
  return impl_->name + " (cuda:" + std::to_string(ordinal_) + ", " +
         std::to_string(impl_->bytes >> 30) + " GiB)";
}

// -- memory -------------------------------------------------------------------

// -- the layers ---------------------------------------------------------------

cuda_status device::dense_forward(const float* x, const float* w,
                                  const float* b, float* y, size_t batch,
                                  size_t in, size_t out) {
  if (!x || !w || !b || !y || !fits_int(batch) || !fits_int(in) ||
      !fits_int(out))
    return bad_input("dense_forward: a null operand or a size of 0");
  auto& s = impl_->stream;
  // Row-major y = x w is column-major y^T = w^T x^T: (out x in)(in x batch).
  auto unfused = [&]() -> cuda_status {
    fill_rows<<<blocks_for(batch * out), block_threads, 0, s>>>(y, b, batch,
                                                                out);
    if (auto st = check(cudaGetLastError(), "fill_rows"); !st.ok())
      return st;
    return gemm(impl_->blas, false, false, out, batch, in, w, out, x, in, 1.0f,
                y, out, "cublasSgemm (dense forward)");
  };
  if (impl_->fuse) {
    bool fused = false;
    auto st =
        impl_->lt->run({lt_gemm::epilogue::bias_add, false, false, out, batch,
                        in, w, out, x, in, y, out, const_cast<float*>(b)},
                       s, fused, unfused);
    if (!st.ok() || fused) {
      impl_->fused += fused;
      return st;
    }
  }
  ++impl_->unfused;
  return unfused();
}

cuda_status device::dense_backward(const float* x, const float* w,
                                   const float* dy, float* dx, float* dw,
                                   float* db, size_t batch, size_t in,
                                   size_t out) {
  if (!x || !w || !dy || !dw || !db || !fits_int(batch) || !fits_int(in) ||
      !fits_int(out))
    return bad_input("dense_backward: a null operand or a size of 0");
  // dw (in x out) = x^T dy: column-major dw^T = dy^T x, (out x batch)(batch
  // x in); db sums dy^T's rows over the batch, cuBLASLt's BGRADA.
  auto unfused = [&]() -> cuda_status {
    if (auto st = gemm(impl_->blas, false, true, out, in, batch, dy, out, x, in,
                       0.0f, dw, out, "cublasSgemm (dense weight gradient)");
        !st.ok())
      return st;
    column_sums<<<unsigned((out + sum_lanes - 1) / sum_lanes),
                  dim3(sum_lanes, sum_lanes), 0, impl_->stream>>>(dy, db, batch,
                                                                  out);
    return check(cudaGetLastError(), "column_sums");
  };
  bool fused = false;
  if (impl_->fuse)
    if (auto st = impl_->lt->run({lt_gemm::epilogue::bias_grad, false, true,
                                  out, in, batch, dy, out, x, in, dw, out, db},
                                 impl_->stream, fused, unfused);
        !st.ok())
      return st;
  if (fused) {
    ++impl_->fused;
  } else {
    ++impl_->unfused;
    if (auto st = unfused(); !st.ok())
      return st;
  }
  // dx (batch x in) = dy w^T: column-major dx^T = w dy^T, (in x out)(out x
  // batch).
  if (dx != nullptr)
    return dense_input_grad(w, dy, dx, batch, in, out);
  return {};
}

cuda_status device::dense_input_grad(const float* w, const float* dy, float* dx,
                                     size_t batch, size_t in, size_t out) {
  if (!w || !dy || !dx || !fits_int(batch) || !fits_int(in) || !fits_int(out))
    return bad_input("dense_input_grad: a null operand or a size of 0");
  return gemm(impl_->blas, true, false, in, batch, out, w, out, dy, out, 0.0f,
              dx, in, "cublasSgemm (dense input gradient)");
}

void device::fuse_bias(bool on) {
  impl_->fuse = on;
}

size_t device::fused_gemms() const {
  return impl_->fused;
}

size_t device::unfused_gemms() const {
  return impl_->unfused;
}

cuda_status device::relu_forward(const float* x, float* y, size_t n) {
  if (n == 0)
    return {};
  if (!x || !y)
    return bad_input("relu_forward: a null operand");
  relu_fwd<<<blocks_for(n), block_threads, 0, impl_->stream>>>(x, y, n);
  return check(cudaGetLastError(), "relu_fwd");
}

cuda_status device::relu_backward(const float* x, const float* dy, float* dx,
                                  size_t n) {
  if (n == 0)
    return {};
  if (!x || !dy || !dx)
    return bad_input("relu_backward: a null operand");
  relu_bwd<<<blocks_for(n), block_threads, 0, impl_->stream>>>(x, dy, dx, n);
  return check(cudaGetLastError(), "relu_bwd");
}

namespace {

/// Reads a kernel's "bad input" flag (waits for the stream) and clears it.
cuda_status read_flag(device& d, uint32_t* flag, const char* what) {
  uint32_t bad = 0;
  if (auto st = d.to_host(&bad, flag, 1); !st.ok())
    return st;
  if (bad == 0)
    return {};
  auto st = d.zero(reinterpret_cast<float*>(flag), 1);
  return st.ok() ? bad_input(what) : st;
}

} // namespace

cuda_status device::softmax_xent(const float* logits, const uint8_t* labels,
                                 size_t batch, size_t classes, float* loss,
                                 float* dlogits) {
  auto st =
      softmax_xent_unchecked(logits, labels, batch, classes, loss, dlogits);
  if (!st.ok())
    return st;
  return read_flag(*this, impl_->flag.data(),
                   "softmax_xent: a label >= classes");
}

cuda_status device::softmax_xent_unchecked(const float* logits,
                                           const uint8_t* labels, size_t batch,
                                           size_t classes, float* loss,
                                           float* dlogits) {
  if (!logits || !labels || !loss || batch == 0 || classes == 0 ||
      classes > 256)
    return bad_input("softmax_xent: a null operand, or classes not in 1..256");
  auto& x = *impl_;
  if (x.row_loss.size() < batch) {
    cudaSetDevice(ordinal_);
    if (x.row_loss.size() > 0)
      x.retired_row_loss.push_back(std::move(x.row_loss));
    if (auto st = alloc_into(x.row_loss, batch, x.row_loss.p_, x.row_loss.n_);
        !st.ok())
      return st;
  }
  xent_rows<<<blocks_for(batch), block_threads, 0, x.stream>>>(
      logits, labels, batch, classes, 1.0f / float(batch), x.row_loss.data(),
      dlogits, x.flag.data());
  if (auto st = check(cudaGetLastError(), "xent_rows"); !st.ok())
    return st;
  mean_loss<<<1, 1, 0, x.stream>>>(x.row_loss.data(), batch, loss);
  return check(cudaGetLastError(), "mean_loss");
}

cuda_status device::accuracy_count(const float* logits, const uint8_t* labels,
                                   size_t batch, size_t classes,
                                   uint32_t* correct) {
  if (!logits || !labels || !correct || batch == 0 || classes == 0 ||
      classes > 256)
    return bad_input(
        "accuracy_count: a null operand, or classes not in 1..256");
  auto& x = *impl_;
  if (auto st = check(cudaMemsetAsync(correct, 0, sizeof(uint32_t), x.stream),
                      "cudaMemsetAsync");
      !st.ok())
    return st;
  argmax_hits<<<blocks_for(batch), block_threads, 0, x.stream>>>(
      logits, labels, batch, classes, correct, x.flag.data());
  if (auto st = check(cudaGetLastError(), "argmax_hits"); !st.ok())
    return st;
  return read_flag(*this, x.flag.data(), "accuracy_count: a label >= classes");
}

// -- optimizers and sums ------------------------------------------------------

cuda_status device::sgd_update(float* w, const float* g, size_t n,
                               const sgd_params& p) {
  if (!valid_step(w, g, n, p.lr, p.weight_decay, p.grad_divisor))
    return bad_input("sgd_update: a null operand or a bad hyper-parameter");
  if (n == 0)
    return {};
  sgd_step<<<blocks_for(n), block_threads, 0, impl_->stream>>>(
      w, g, n, p.lr, p.weight_decay, p.grad_divisor);
  return check(cudaGetLastError(), "sgd_step");
}

cuda_status device::momentum_update(float* w, const float* g, float* v,
                                    size_t n, const momentum_params& p,
                                    bool nesterov) {
  if (!valid_step(w, g, n, p.lr, p.weight_decay, p.grad_divisor) ||
      !in_unit(p.momentum) || (n > 0 && v == nullptr))
    return bad_input(
        "momentum_update: a null operand or a bad hyper-parameter");
  if (n == 0)
    return {};
  momentum_step<<<blocks_for(n), block_threads, 0, impl_->stream>>>(
      w, g, v, n, p.lr, p.momentum, p.weight_decay, p.grad_divisor, nesterov);
  return check(cudaGetLastError(), "momentum_step");
}

cuda_status device::adam_update(float* w, const float* g, float* m, float* v,
                                size_t n, uint64_t step, const adam_params& p) {
  if (!valid_step(w, g, n, p.lr, p.weight_decay, p.grad_divisor) ||
      !in_unit(p.beta1) || !in_unit(p.beta2) || !(p.eps > 0.0f) ||
      (n > 0 && (m == nullptr || v == nullptr)))
    return bad_input("adam_update: a null operand or a bad hyper-parameter");
  if (n == 0)
    return {};
  // The bias corrections in double on the host, as adam_update_cpu.
  auto t = double(step + 1);
  auto c1 = float(1.0 / (1.0 - std::pow(double(p.beta1), t)));
  auto c2 = float(1.0 / (1.0 - std::pow(double(p.beta2), t)));
  adam_step<<<blocks_for(n), block_threads, 0, impl_->stream>>>(
      w, g, m, v, n, p.lr, p.beta1, p.beta2, p.eps, p.weight_decay,
      p.grad_divisor, c1, c2);
  return check(cudaGetLastError(), "adam_step");
}

cuda_status device::add(float* acc, const float* x, size_t n) {
  if (n == 0)
    return {};
  if (!acc || !x)
    return bad_input("add: a null operand");
  add_into<<<blocks_for(n), block_threads, 0, impl_->stream>>>(acc, x, n);
  return check(cudaGetLastError(), "add_into");
}

cuda_status device::scale(float* x, size_t n, float a) {
  if (n == 0)
    return {};
  if (!x)
    return bad_input("scale: a null operand");
  scale_by<<<blocks_for(n), block_threads, 0, impl_->stream>>>(x, n, a);
  return check(cudaGetLastError(), "scale_by");
}

cuda_status device::zero(float* x, size_t n) {
  if (n == 0)
    return {};
  if (!x)
    return bad_input("zero: a null operand");
  return check(cudaMemsetAsync(x, 0, n * sizeof(float), impl_->stream),
               "cudaMemsetAsync");
}

} // namespace troupe::cuda
