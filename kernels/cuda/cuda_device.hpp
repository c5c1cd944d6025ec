// The CUDA twins of the CPU kernels (issue 38): one GPU's stream and cuBLAS
// handle, device memory, and the layers' math on device pointers with the
// same arguments and meaning as kernels/*.hpp's *_cpu functions. Built only
// where nvcc is found (TROUPE_HAVE_CUDA); no CUDA header leaks out of here,
// so host code includes it freely.
//
// Every CUDA and cuBLAS return code is checked; a failure comes back as a
// cuda_status carrying the library's own message ("cublasSgemm:
// CUBLAS_STATUS_EXECUTION_FAILED ..."). The launcher owns the grid math:
// callers pass sizes, never blocks or threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/optimizer.hpp"
#include "kernels/status.hpp"

namespace troupe::cuda {

/// The outcome of a call: ok, or what failed and the library's message.
using cuda_status = troupe::device_status;

/// CUDA devices the driver finds; 0 where there is none, with the driver's
/// reason in `why` (if given). Clears the error it leaves behind.
int device_count(std::string* why = nullptr);

/// `n` elements of T, freed with it: device memory (`Host` false), or
/// page-locked host memory (`Host` true), which copies from and to run
/// without the host waiting, and which a graph can hold.
template <class T, bool Host> class memory {
public:
  memory() = default;
  memory(memory&& x) noexcept : p_(x.p_), n_(x.n_) {
    x.p_ = nullptr;
    x.n_ = 0;
  }
  memory& operator=(memory&& x) noexcept;
  memory(const memory&) = delete;
  memory& operator=(const memory&) = delete;
  ~memory();
  T* data() const { return p_; }
  size_t size() const { return n_; }

private:
  friend class device;
  T* p_ = nullptr;
  size_t n_ = 0;
};

/// Device memory of `n` elements of T.
template <class T> using buffer = memory<T, false>;
/// Page-locked host memory of `n` elements of T.
template <class T> using pinned = memory<T, true>;

/// A stream's work recorded once (a CUDA graph) and replayed whole: one
/// launch instead of one per kernel and copy. Holds the device pointers it
/// was recorded with: whoever frees or moves those drops the graph.
class graph {
public:
  graph() = default;
  graph(graph&& x) noexcept : exec_(x.exec_) { x.exec_ = nullptr; }
  graph& operator=(graph&& x) noexcept;
  graph(const graph&) = delete;
  graph& operator=(const graph&) = delete;
  ~graph();
  bool ready() const { return exec_ != nullptr; }

private:
  friend class device;
  void* exec_ = nullptr; // cudaGraphExec_t
};

/// One GPU: its stream and cuBLAS handle. Calls queue on the stream; the
/// copies back to the host wait for it. Not thread-safe: one owner (a
/// device actor) at a time, on a thread whose current device is this one
/// (the thread that opened it, or one after use()).
class device {
public:
  /// Opens GPU `ordinal`; null with the reason in `st` if it cannot.
  static std::unique_ptr<device> open(int ordinal, cuda_status& st);
  ~device();
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  int ordinal() const { return ordinal_; }
  /// Makes this GPU the calling thread's current device.
  cuda_status use();
  /// "NVIDIA H200 (cuda:0, 139 GiB)".
  std::string describe() const;

  // -- memory ----------------------------------------------------------------
  cuda_status alloc(buffer<float>& b, size_t n);
  cuda_status alloc(buffer<uint8_t>& b, size_t n);
  cuda_status alloc(buffer<uint32_t>& b, size_t n);
  cuda_status alloc_pinned(pinned<float>& p, size_t n);
  cuda_status alloc_pinned(pinned<uint8_t>& p, size_t n);
  /// Host -> device and back, `n` elements; to_host waits for the stream.
  cuda_status to_device(float* dst, const float* src, size_t n);
  cuda_status to_device(uint8_t* dst, const uint8_t* src, size_t n);
  cuda_status to_host(float* dst, const float* src, size_t n);
  cuda_status to_host(uint32_t* dst, const uint32_t* src, size_t n);
  /// Device -> host without waiting: `dst` is pinned memory, read after
  /// sync().
  cuda_status to_host_async(float* dst, const float* src, size_t n);
  /// Waits for everything queued, on the stream and the copy lane.
  cuda_status sync();
  /// `n` floats of pinned host memory that every GPU copies from directly
  /// (cudaHostAllocPortable), freed with the last owner; null with the
  /// reason in `st`.
  std::shared_ptr<float> shared_pinned(size_t n, cuda_status& st);
  /// Whether host memory at `p` is pinned (cudaMallocHost, or registered):
  /// a copy from it goes straight to the device.
  bool is_pinned(const void* p) const;

  // -- the copy lane: a second stream whose copies run beside the kernels ---
  /// Pinned host `src` -> device `dst` (n floats), queued on the copy lane.
  cuda_status lane_to_device(float* dst, const float* src, size_t n);
  /// Device `src` -> pinned host `dst` (n floats), queued on the copy lane.
  cuda_status lane_to_host(float* dst, const float* src, size_t n);
  /// Signal `i` (a CUDA event; any number, made on first use) marks what is
  /// queued so far on the copy lane (`lane` true) or the stream.
  cuda_status signal(size_t i, bool lane);
  /// What is queued next on the copy lane (`lane` true) or the stream waits
  /// for signal `i`'s last mark.
  cuda_status await(size_t i, bool lane);
  /// The host waits for signal `i`'s last mark.
  cuda_status host_await(size_t i);

  // -- graphs ----------------------------------------------------------------
  /// Records what this thread queues on the stream from here on, without
  /// running it, until end_capture makes `g` of it. No call in between may
  /// wait for the stream or allocate (copies to or from pageable memory,
  /// to_host, the checked softmax_xent, alloc): those fail the capture.
  cuda_status begin_capture();
  cuda_status end_capture(graph& g);
  /// Queues `g` (recorded on this device) on the stream.
  cuda_status launch(const graph& g);

  // -- the layers (device pointers; as kernels/dense.hpp etc.) --------------
  /// y (batch x out) = x (batch x in) w (in x out) + b, row-major.
  cuda_status dense_forward(const float* x, const float* w, const float* b,
                            float* y, size_t batch, size_t in, size_t out);
  /// dw = x^T dy, db = column sums of dy, dx = dy w^T (dx null: skipped).
  cuda_status dense_backward(const float* x, const float* w, const float* dy,
                             float* dx, float* dw, float* db, size_t batch,
                             size_t in, size_t out);
  /// dx = dy w^T alone (a pipeline stage's B: its weight gradient waits).
  cuda_status dense_input_grad(const float* w, const float* dy, float* dx,
                               size_t batch, size_t in, size_t out);
  /// Whether the dense layers take cuBLASLt's fused bias where it has a
  /// kernel (the default), and how many dense GEMMs ran fused and unfused.
  void fuse_bias(bool on);
  size_t fused_gemms() const;
  size_t unfused_gemms() const;
  cuda_status relu_forward(const float* x, float* y, size_t n);
  cuda_status relu_backward(const float* x, const float* dy, float* dx,
                            size_t n);
  /// Mean loss over the batch into `loss` (one float on the device), and
  /// (softmax - onehot) / batch into `dlogits` (null: skipped). Labels
  /// must be below `classes` (<= 256): checked on the host first.
  cuda_status softmax_xent(const float* logits, const uint8_t* labels,
                           size_t batch, size_t classes, float* loss,
                           float* dlogits);
  /// As softmax_xent, without waiting to check the labels on the device:
  /// for callers that checked them on the host, and for graphs.
  cuda_status softmax_xent_unchecked(const float* logits, const uint8_t* labels,
                                     size_t batch, size_t classes, float* loss,
                                     float* dlogits);
  /// Rows whose first largest logit is the label, into `correct` (one
  /// uint32 on the device).
  cuda_status accuracy_count(const float* logits, const uint8_t* labels,
                             size_t batch, size_t classes, uint32_t* correct);

  // -- optimizers and sums (as kernels/optimizer.hpp, state on the device) ---
  cuda_status sgd_update(float* w, const float* g, size_t n,
                         const sgd_params& p);
  /// `v` (n floats) starts at zero: the caller clears it once.
  cuda_status momentum_update(float* w, const float* g, float* v, size_t n,
                              const momentum_params& p, bool nesterov);
  /// `step` counts updates as adam_state::step does: this one is step + 1.
  cuda_status adam_update(float* w, const float* g, float* m, float* v,
                          size_t n, uint64_t step, const adam_params& p);
  /// acc += x, n floats (gradient sums).
  cuda_status add(float* acc, const float* x, size_t n);
  /// x *= a, n floats (a device's share of a batch's mean gradient).
  cuda_status scale(float* x, size_t n, float a);
  /// Sets n floats to zero.
  cuda_status zero(float* x, size_t n);

private:
  device() = default;
  struct impl;
  std::unique_ptr<impl> impl_;
  int ordinal_ = 0;
};

} // namespace troupe::cuda
