// cuBLASLt's fused dense GEMMs (cuda_lt.hpp).
#include "kernels/cuda/cuda_lt.hpp"

#include <cstdlib>
#include <string>

#include "kernels/cuda/cuda_internal.hpp"

namespace troupe::cuda {

namespace {

/// The largest power of two up to 256 that `p` is aligned to: cuBLASLt's
/// heuristic is told, so that its kernel fits every pointer of the shape.
uint32_t alignment(const void* p) {
  auto v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0)
    a /= 2;
  return a;
}

template <class T>
cublasStatus_t set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t at,
                   const T& v) {
  return cublasLtMatmulDescSetAttribute(d, at, &v, sizeof(v));
}

} // namespace

lt_plans::~lt_plans() {
  for (auto& [k, p] : plans_) {
    for (auto* l : {p.a, p.b, p.d})
      if (l != nullptr)
        cublasLtMatrixLayoutDestroy(l);
    if (p.desc != nullptr)
      cublasLtMatmulDescDestroy(p.desc);
  }
  if (handle_ != nullptr)
    cublasLtDestroy(handle_);
}

cuda_status lt_plans::open(void* workspace, size_t bytes) {
  space_ = workspace;
  bytes_ = bytes;
  auto* tune = std::getenv("TROUPE_LT_TUNE");
  tune_ = tune == nullptr || std::string{tune} != "0";
  return check(cublasLtCreate(&handle_), "cublasLtCreate");
}

cuda_status lt_plans::make_plan(const lt_gemm& g, plan& p, cudaStream_t stream,
                                const unfused_path& unfused) const {
  auto ep = g.what == lt_gemm::epilogue::bias_add ? CUBLASLT_EPILOGUE_BIAS
                                                  : CUBLASLT_EPILOGUE_BGRADA;
  auto op = [](bool t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; };
  cuda_status st;
  if (!(st = check(
            cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            "cublasLtMatmulDescCreate"))
           .ok() ||
      !(st = check(set(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, op(g.ta)),
                   "cublasLtMatmulDescSetAttribute"))
           .ok() ||
      !(st = check(set(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, op(g.tb)),
                   "cublasLtMatmulDescSetAttribute"))
           .ok() ||
      !(st = check(set(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, ep),
                   "cublasLtMatmulDescSetAttribute"))
           .ok() ||
      // The heuristic reads the bias pointer's alignment from its value.
      !(st = check(set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias),
                   "cublasLtMatmulDescSetAttribute (bias)"))
           .ok())
    return st;
  // Stored shapes: op(A) is m x k, op(B) is k x n.
  auto layout = [](cublasLtMatrixLayout_t* l, size_t rows, size_t cols,
                   size_t ld) {
    return check(
        cublasLtMatrixLayoutCreate(l, CUDA_R_32F, rows, cols, int64_t(ld)),
        "cublasLtMatrixLayoutCreate");
  };
  if (!(st = layout(&p.a, g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda)).ok() ||
      !(st = layout(&p.b, g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb)).ok() ||
      !(st = layout(&p.d, g.m, g.n, g.ldd)).ok())
    return st;
  cublasLtMatmulPreference_t pref = nullptr;
  if (!(st = check(cublasLtMatmulPreferenceCreate(&pref),
                   "cublasLtMatmulPreferenceCreate"))
           .ok())
    return st;
  auto set_pref = [pref](cublasLtMatmulPreferenceAttributes_t at, auto v) {
    return cublasLtMatmulPreferenceSetAttribute(pref, at, &v, sizeof(v));
  };
  // A preference not taken could let the heuristic pick a kernel the
  // pointers do not fit: then the shape runs unfused.
  bool told =
      set_pref(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(bytes_)) ==
          CUBLAS_STATUS_SUCCESS &&
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignment(g.a)) ==
          CUBLAS_STATUS_SUCCESS &&
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignment(g.b)) ==
          CUBLAS_STATUS_SUCCESS &&
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignment(g.d)) ==
          CUBLAS_STATUS_SUCCESS &&
      set_pref(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignment(g.d)) ==
          CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulHeuristicResult_t found[candidates_tried]{};
  int count = 0;
  // No kernel for this shape and epilogue (or a refusal) is not an error:
  // the caller runs it unfused.
  auto hs = told
                ? cublasLtMatmulAlgoGetHeuristic(handle_, p.desc, p.a, p.b, p.d,
                                                 p.d, pref, candidates_tried,
                                                 found, &count)
                : CUBLAS_STATUS_NOT_SUPPORTED;
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; hs == CUBLAS_STATUS_SUCCESS && i < count; ++i)
    if (found[i].state == CUBLAS_STATUS_SUCCESS)
      algos.push_back(found[i].algo);
  p.usable = !algos.empty();
  if (!p.usable)
    return {};
  p.algo = algos[0]; // the heuristic's first, unless timing says otherwise
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  if (tune_ && capturing == cudaStreamCaptureStatusNone &&
      (algos.size() > 1 || unfused))
    tune(g, p, algos, stream, unfused);
  return {};
}

void lt_plans::tune(const lt_gemm& g, plan& p,
                    const std::vector<cublasLtMatmulAlgo_t>& algos,
                    cudaStream_t stream, const unfused_path& unfused) const {
  cudaEvent_t from = nullptr, to = nullptr;
  if (cudaEventCreate(&from) != cudaSuccess ||
      cudaEventCreate(&to) != cudaSuccess) {
    cudaGetLastError(); // untimed: the heuristic's first
    for (auto e : {from, to})
      if (e != nullptr)
        cudaEventDestroy(e);
    return;
  }
  // Milliseconds per run of `queue` (which writes only the call's own
  // outputs), once it has run twice; infinite if it fails. A kernel
  // holding the GPU first lets the host queue every timed run before the
  // first starts, so that the figure is the GPU's, not the launches'.
  constexpr int runs = 10;
  auto time = [&](auto queue) {
    constexpr double failed = 1e30;
    for (int i = 0; i < 2; ++i)
      if (!queue())
        return failed;
    if (!queue_hold(stream, 1000).ok() ||
        cudaEventRecord(from, stream) != cudaSuccess)
      return failed;
    for (int i = 0; i < runs; ++i)
      if (!queue())
        return failed;
    float ms = 0;
    if (cudaEventRecord(to, stream) != cudaSuccess ||
        cudaEventSynchronize(to) != cudaSuccess ||
        cudaEventElapsedTime(&ms, from, to) != cudaSuccess)
      return failed;
    return double(ms) / runs;
  };
  // The heuristic's first stands unless another is clearly faster; of
  // those, the fastest (the earlier on a tie).
  double first = 0, best = 0;
  for (size_t i = 0; i < algos.size(); ++i) {
    auto t = time([&] {
      return matmul(g, p, algos[i], stream) == CUBLAS_STATUS_SUCCESS;
    });
    if (i == 0) {
      first = best = t;
    } else if (t < margin * first && t < best) {
      best = t;
      p.algo = algos[i];
    }
  }
  if (unfused && time([&] { return unfused().ok(); }) < margin * best)
    p.usable = false;
  cudaStreamSynchronize(stream); // a failed run's queue, whatever it left
  cudaGetLastError();            // a timing's failure only chose for it
  cudaEventDestroy(from);
  cudaEventDestroy(to);
}

cublasStatus_t lt_plans::matmul(const lt_gemm& g, const plan& p,
                                const cublasLtMatmulAlgo_t& algo,
                                cudaStream_t stream) const {
  const float one = 1.0f, zero = 0.0f;
  return cublasLtMatmul(handle_, p.desc, &one, g.a, p.a, g.b, p.b, &zero, g.d,
                        p.d, g.d, p.d, &algo, space_, bytes_, stream);
}

cuda_status lt_plans::run(const lt_gemm& g, cudaStream_t stream, bool& fused,
                          const unfused_path& unfused) {
  fused = false;
  // A bias that is not 16-byte aligned is left to the unfused path.
  if (handle_ == nullptr || alignment(g.bias) < 16)
    return {};
  key k{int(g.what),
        g.ta,
        g.tb,
        g.m,
        g.n,
        g.k,
        g.lda,
        g.ldb,
        g.ldd,
        alignment(g.a),
        alignment(g.b),
        alignment(g.d),
        alignment(g.bias)};
  auto it = plans_.find(k);
  if (it == plans_.end()) {
    it = plans_.emplace(k, plan{}).first;
    if (auto st = make_plan(g, it->second, stream, unfused); !st.ok()) {
      it->second.usable = false; // asked again never; this call fails
      return st;
    }
  }
  auto& p = it->second;
  if (!p.usable)
    return {};
  if (auto st = check(set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, g.bias),
                      "cublasLtMatmulDescSetAttribute (bias)");
      !st.ok())
    return st;
  auto st = check(matmul(g, p, p.algo, stream),
                  g.what == lt_gemm::epilogue::bias_add
                      ? "cublasLtMatmul (dense forward, bias fused)"
                      : "cublasLtMatmul (dense weight gradient, bias "
                        "gradient fused)");
  fused = st.ok();
  return st;
}

} // namespace troupe::cuda
