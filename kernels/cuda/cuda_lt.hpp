// The dense layers' GEMMs with the bias fused in, through cuBLASLt's
// epilogues: forward, D = op(A) op(B) + bias (one kernel, not a bias fill
// then a GEMM); backward, the weight gradient's GEMM also sums A's rows
// into the bias gradient (not a GEMM then a column-sum kernel). Internal
// to kernels/cuda, as cuda_internal.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <tuple>
#include <type_traits>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_device.hpp"

namespace troupe::cuda {

/// One GEMM, column-major: D (m x n) = op(A) op(B), alpha 1, beta 0, then
/// the epilogue: `bias_add` adds bias[i] to D's row i; `bias_grad` writes
/// A's rows summed over k into bias (m floats).
struct lt_gemm {
  enum class epilogue { bias_add, bias_grad };
  epilogue what;
  bool ta, tb;
  size_t m, n, k;
  const float* a;
  size_t lda;
  const float* b;
  size_t ldb;
  float* d;
  size_t ldd;
  float* bias;
};

/// What queues the same result on the stream without cuBLASLt: a
/// callable the caller keeps alive during run() (not copied: a GEMM's
/// call allocates nothing).
class unfused_path {
public:
  unfused_path() = default;
  template <class F, class = std::enable_if_t<
                         !std::is_same_v<std::decay_t<F>, unfused_path>>>
  unfused_path(F& f) // NOLINT: made from a caller's lambda in place
      : obj_(&f), call_([](void* o) { return (*static_cast<F*>(o))(); }) {}
  explicit operator bool() const { return call_ != nullptr; }
  cuda_status operator()() const { return call_(obj_); }

private:
  void* obj_ = nullptr;
  cuda_status (*call_)(void*) = nullptr;
};

/// A cuBLASLt handle and, per shape, the kernel chosen once (so a step
/// captured in a graph asks nothing): the fastest of the heuristic's first
/// candidates_tried and of the caller's unfused path, timed on the GPU at
/// the shape's first call (outside a capture; inside one, the heuristic's
/// first), a challenger only where clearly faster (margin).
class lt_plans {
public:
  lt_plans() = default;
  lt_plans(const lt_plans&) = delete;
  lt_plans& operator=(const lt_plans&) = delete;
  ~lt_plans();

  /// The handle, and the workspace every call may use (the device's, on
  /// the same stream as its cuBLAS calls).
  cuda_status open(void* workspace, size_t bytes);

  /// Candidates timed per shape, at most.
  static constexpr int candidates_tried = 8;
  /// How much faster than the heuristic's first (or than the best fused
  /// kernel, for the unfused path) a challenger must time to be chosen, so
  /// that noise seldom flips the choice. Seldom is not never: a kernel
  /// near the line may win in one run (or rank) and not another, so runs
  /// may differ in the last bits (ranks' sums stay equal: all-reduce).
  /// TROUPE_LT_TUNE=0 keeps the heuristic's first: the same kernels every
  /// run, and no timing under racecheck, where it means nothing.
  static constexpr double margin = 0.95;

  /// Queues `g` on `stream`, or sets `fused` false and queues nothing
  /// where cuBLASLt has no kernel for it, or where `unfused` (if given)
  /// timed faster (the caller then runs it unfused). A failing call is an
  /// error.
  cuda_status run(const lt_gemm& g, cudaStream_t stream, bool& fused,
                  const unfused_path& unfused = {});

private:
  struct plan {
    bool usable = false;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  using key =
      std::tuple<int, bool, bool, size_t, size_t, size_t, size_t, size_t,
                 size_t, uint32_t, uint32_t, uint32_t, uint32_t>;
  cuda_status make_plan(const lt_gemm& g, plan& p, cudaStream_t stream,
                        const unfused_path& unfused) const;
  /// Queues `g` with `p`'s descriptions (its bias pointer set in them
  /// first) and `algo`.
  cublasStatus_t matmul(const lt_gemm& g, const plan& p,
                        const cublasLtMatmulAlgo_t& algo,
                        cudaStream_t stream) const;
  /// Times `algos` for `g` (and `unfused`) on `stream`; the fastest into
  /// `p` (`usable` false where the unfused path won).
  void tune(const lt_gemm& g, plan& p,
            const std::vector<cublasLtMatmulAlgo_t>& algos, cudaStream_t stream,
            const unfused_path& unfused) const;

  cublasLtHandle_t handle_ = nullptr;
  void* space_ = nullptr;
  size_t bytes_ = 0;
  bool tune_ = true; // TROUPE_LT_TUNE is not "0"
  std::map<key, plan> plans_;
};

} // namespace troupe::cuda
