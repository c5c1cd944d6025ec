// Device and pinned memory, copies and graphs of a cuda::device
// (cuda_device.hpp).
#include "kernels/cuda/cuda_internal.hpp"

namespace troupe::cuda {

namespace {

template <bool Host> void release(void* p) {
  if constexpr (Host)
    cudaFreeHost(p); // null: nothing
  else
    cudaFree(p);
}

} // namespace

template <class T, bool Host>
memory<T, Host>& memory<T, Host>::operator=(memory&& x) noexcept {
  if (this != &x) {
    release<Host>(p_);
    p_ = x.p_;
    n_ = x.n_;
    x.p_ = nullptr;
    x.n_ = 0;
  }
  return *this;
}

template <class T, bool Host> memory<T, Host>::~memory() {
  release<Host>(p_);
}

template class memory<float, false>;
template class memory<uint8_t, false>;
template class memory<uint32_t, false>;
template class memory<double, false>;
template class memory<float, true>;
template class memory<uint8_t, true>;

graph& graph::operator=(graph&& x) noexcept {
  if (this != &x) {
    if (exec_ != nullptr)
      cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    exec_ = x.exec_;
    x.exec_ = nullptr;
  }
  return *this;
}

graph::~graph() {
  if (exec_ != nullptr)
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

cuda_status device::alloc(buffer<float>& b, size_t n) {
  cudaSetDevice(ordinal_);
  return alloc_into(b, n, b.p_, b.n_);
}

cuda_status device::alloc(buffer<uint8_t>& b, size_t n) {
  cudaSetDevice(ordinal_);
  return alloc_into(b, n, b.p_, b.n_);
}

cuda_status device::alloc(buffer<uint32_t>& b, size_t n) {
  cudaSetDevice(ordinal_);
  return alloc_into(b, n, b.p_, b.n_);
}

cuda_status device::alloc_pinned(pinned<float>& p, size_t n) {
  return alloc_into(p, n, p.p_, p.n_);
}

cuda_status device::alloc_pinned(pinned<uint8_t>& p, size_t n) {
  return alloc_into(p, n, p.p_, p.n_);
}

std::shared_ptr<float> device::shared_pinned(size_t n, cuda_status& st) {
  void* raw = nullptr;
  st =
      n == 0
          ? bad_input("an allocation of 0 elements")
          : check(cudaHostAlloc(&raw, n * sizeof(float), cudaHostAllocPortable),
                  "cudaHostAlloc");
  if (!st.ok())
    return nullptr;
  return std::shared_ptr<float>(static_cast<float*>(raw),
                                [](float* p) { cudaFreeHost(p); });
}

bool device::is_pinned(const void* p) const {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); // not an error to report: not pinned
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

cuda_status device::to_device(float* dst, const float* src, size_t n) {
  return check(cudaMemcpyAsync(dst, src, n * sizeof(float),
                               cudaMemcpyHostToDevice, impl_->stream),
               "cudaMemcpyAsync to the device");
}

cuda_status device::to_device(uint8_t* dst, const uint8_t* src, size_t n) {
  return check(
      cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, impl_->stream),
      "cudaMemcpyAsync to the device");
}

cuda_status device::to_host(float* dst, const float* src, size_t n) {
  auto st = check(cudaMemcpyAsync(dst, src, n * sizeof(float),
                                  cudaMemcpyDeviceToHost, impl_->stream),
                  "cudaMemcpyAsync to the host");
  return st.ok() ? sync() : st;
}

cuda_status device::to_host(uint32_t* dst, const uint32_t* src, size_t n) {
  auto st = check(cudaMemcpyAsync(dst, src, n * sizeof(uint32_t),
                                  cudaMemcpyDeviceToHost, impl_->stream),
                  "cudaMemcpyAsync to the host");
  return st.ok() ? sync() : st;
}

cuda_status device::to_host_async(float* dst, const float* src, size_t n) {
  return check(cudaMemcpyAsync(dst, src, n * sizeof(float),
                               cudaMemcpyDeviceToHost, impl_->stream),
               "cudaMemcpyAsync to the host");
}

cuda_status device::begin_capture() {
  // Thread-local: other threads' CUDA calls (other devices' actors) go on.
  return check(
      cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal),
      "cudaStreamBeginCapture");
}

cuda_status device::end_capture(graph& g) {
  g = graph{};
  cudaGraph_t recorded = nullptr;
  auto st = check(cudaStreamEndCapture(impl_->stream, &recorded),
                  "cudaStreamEndCapture");
  if (!st.ok())
    return st;
  cudaGraphExec_t exec = nullptr;
  st = check(cudaGraphInstantiate(&exec, recorded, 0), "cudaGraphInstantiate");
  cudaGraphDestroy(recorded); // the executable graph is a copy
  if (st.ok())
    g.exec_ = exec;
  return st;
}

cuda_status device::launch(const graph& g) {
  if (!g.ready())
    return bad_input("launch: no graph recorded");
  return check(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(g.exec_), impl_->stream),
      "cudaGraphLaunch");
}

cuda_status device::sync() {
  auto st =
      check(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize");
  auto lane = check(cudaStreamSynchronize(impl_->lane),
                    "cudaStreamSynchronize (the copy lane)");
  return st.ok() ? lane : st;
}

// -- the copy lane ------------------------------------------------------------

cuda_status device::lane_to_device(float* dst, const float* src, size_t n) {
  return check(cudaMemcpyAsync(dst, src, n * sizeof(float),
                               cudaMemcpyHostToDevice, impl_->lane),
               "cudaMemcpyAsync to the device (the copy lane)");
}

cuda_status device::lane_to_host(float* dst, const float* src, size_t n) {
  return check(cudaMemcpyAsync(dst, src, n * sizeof(float),
                               cudaMemcpyDeviceToHost, impl_->lane),
               "cudaMemcpyAsync to the host (the copy lane)");
}

namespace {

/// Signal `i` of `signals`, made on first use; null with the reason in
/// `st`.
cudaEvent_t signal_of(std::vector<cudaEvent_t>& signals, size_t i,
                      cuda_status& st) {
  if (i >= signals.size())
    signals.resize(i + 1, nullptr);
  auto& e = signals[i];
  if (e == nullptr)
    st = check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
               "cudaEventCreate");
  return e;
}

} // namespace

cuda_status device::signal(size_t i, bool lane) {
  cuda_status st;
  auto e = signal_of(impl_->signals, i, st);
  if (!st.ok())
    return st;
  return check(cudaEventRecord(e, lane ? impl_->lane : impl_->stream),
               "cudaEventRecord");
}

cuda_status device::await(size_t i, bool lane) {
  cuda_status st;
  auto e = signal_of(impl_->signals, i, st);
  if (!st.ok())
    return st;
  return check(cudaStreamWaitEvent(lane ? impl_->lane : impl_->stream, e, 0),
               "cudaStreamWaitEvent");
}

cuda_status device::host_await(size_t i) {
  cuda_status st;
  auto e = signal_of(impl_->signals, i, st);
  if (!st.ok())
    return st;
  return check(cudaEventSynchronize(e), "cudaEventSynchronize");
}

} // namespace troupe::cuda
