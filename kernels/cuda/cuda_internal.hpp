// What cuda_device.cu and cuda_memory.cu share, and nothing outside
// kernels/cuda includes: the device's state, return-code checks, and the
// one allocation path of device and pinned memory.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_device.hpp"
#include "kernels/cuda/cuda_lt.hpp"

namespace troupe::cuda {

struct device::impl {
  cudaStream_t stream = nullptr;
  cudaStream_t lane = nullptr;      // the copy lane
  std::vector<cudaEvent_t> signals; // made on first use
  cublasHandle_t blas = nullptr;
  buffer<double> row_loss; // softmax_xent's per-row losses
  // Smaller row_loss buffers, kept until the device goes: a graph any
  // model on this device captured at a smaller batch still reads one.
  std::vector<buffer<double>> retired_row_loss;
  buffer<uint32_t> flag;         // a kernel's "bad input" flag
  buffer<uint8_t> blas_space;    // cuBLAS's workspace, ours: graph-safe
  std::unique_ptr<lt_plans> lt;  // the dense GEMMs with their bias fused
  bool fuse = true;              // use lt where it has a kernel
  size_t fused = 0, unfused = 0; // dense GEMMs run each way
  std::string name;
  size_t bytes = 0;
};

inline cuda_status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess)
    return {};
  cudaGetLastError(); // clear it: the next call must not report it again
  return {std::string{what} + ": " + cudaGetErrorName(e) + ": " +
          cudaGetErrorString(e)};
}

inline cuda_status check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return {};
  return {std::string{what} + ": " + cublasGetStatusName(s) + ": " +
          cublasGetStatusString(s)};
}

/// Queues a kernel that keeps the GPU busy about `us` microseconds, so
/// that work queued behind it (to be timed) runs without launch gaps.
cuda_status queue_hold(cudaStream_t stream, unsigned us);

inline cuda_status bad_input(const std::string& what) {
  return {"bad input: " + what};
}

/// `n` elements into `b` (freed first): cudaMalloc, or cudaMallocHost for
/// pinned memory; `p` and `size` are b's fields (device is their friend).
template <class T, bool Host>
cuda_status alloc_into(memory<T, Host>& b, size_t n, T*& p, size_t& size) {
  b = memory<T, Host>{};
  if (n == 0)
    return bad_input("an allocation of 0 elements");
  void* raw = nullptr;
  auto st = Host ? check(cudaMallocHost(&raw, n * sizeof(T)), "cudaMallocHost")
                 : check(cudaMalloc(&raw, n * sizeof(T)), "cudaMalloc");
  if (!st.ok())
    return st;
  p = static_cast<T*>(raw);
  size = n;
  return {};
}

} // namespace troupe::cuda
