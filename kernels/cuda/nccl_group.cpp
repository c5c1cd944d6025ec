// NCCL behind the communicator interface (nccl_group.hpp). Every CUDA and
// NCCL return code is checked; a failure says the call and the library's
// message.
#include "kernels/cuda/nccl_group.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda/cuda_device.hpp"

namespace troupe::cuda {

namespace {

std::string cuda_error(cudaError_t e, const char* what) {
  cudaGetLastError();
  return std::string{what} + ": " + cudaGetErrorName(e) + ": " +
         cudaGetErrorString(e);
}

class nccl_communicator : public communicator {
public:
  nccl_communicator(ncclComm_t comm, cudaStream_t stream, int ordinal, int rank,
                    int size)
      : comm_(comm), stream_(stream), ordinal_(ordinal), rank_(rank),
        size_(size) {}
  ~nccl_communicator() override {
    cudaSetDevice(ordinal_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  comm_status all_reduce_sum(float* data, size_t n) override {
    if (n == 0)
      return {};
    if (data == nullptr)
      return {"all_reduce_sum: no array"};
    return finish(
        ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, stream_),
        "ncclAllReduce");
  }

  comm_status broadcast(float* data, size_t n, int root) override {
    if (n == 0)
      return {};
    if (data == nullptr || root < 0 || root >= size_)
      return {"broadcast: no array, or no rank " + std::to_string(root)};
    return finish(ncclBroadcast(data, data, n, ncclFloat, root, comm_, stream_),
                  "ncclBroadcast");
  }

private:
  /// The call's result, then our stream's.
  comm_status finish(ncclResult_t r, const char* what) {
    if (r != ncclSuccess)
      return {std::string{what} + ": " + ncclGetErrorString(r) + ": " +
              ncclGetLastError(comm_)};
    if (auto e = cudaStreamSynchronize(stream_); e != cudaSuccess)
      return {cuda_error(e, "cudaStreamSynchronize")};
    return {};
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  int ordinal_, rank_, size_;
};

} // namespace

std::vector<std::unique_ptr<communicator>>
make_nccl_group(const std::vector<int>& ordinals, std::string& why) {
  std::vector<std::unique_ptr<communicator>> out;
  std::string no_gpu;
  int found = device_count(&no_gpu);
  for (int d : ordinals)
    if (d < 0 || d >= found) {
      why = "no GPU cuda:" + std::to_string(d) + " (" +
            (found == 0 ? no_gpu : std::to_string(found) + " found") + ")";
      return out;
    }
  if (ordinals.empty()) {
    why = "a group of no GPU";
    return out;
  }
  int n = static_cast<int>(ordinals.size());
  std::vector<ncclComm_t> comms(ordinals.size());
  if (auto r = ncclCommInitAll(comms.data(), n, ordinals.data());
      r != ncclSuccess) {
    why = std::string{"ncclCommInitAll: "} + ncclGetErrorString(r);
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaStream_t s = nullptr;
    auto e = cudaSetDevice(ordinals[size_t(i)]);
    if (e == cudaSuccess)
      e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      why = cuda_error(e, "cudaStreamCreate");
      for (int j = i; j < n; ++j) // those not handed over yet
        ncclCommDestroy(comms[size_t(j)]);
      out.clear();
      return out;
    }
    out.push_back(std::make_unique<nccl_communicator>(
        comms[size_t(i)], s, ordinals[size_t(i)], i, n));
  }
  return out;
}

} // namespace troupe::cuda
