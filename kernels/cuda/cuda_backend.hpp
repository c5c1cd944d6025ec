// The CUDA backend of kernels/device_backend.hpp: one GPU (cuda_device.hpp)
// and a model's layers on it (cuda_model.hpp). Built with the CUDA twins
// (TROUPE_HAVE_CUDA); no CUDA header leaks out of here.
#pragma once

#include <memory>

#include "kernels/device_backend.hpp"
#include "kernels/model.hpp"
#include "kernels/status.hpp"

namespace troupe::cuda {

/// A replica of `m`'s layers on GPU `ordinal`; null with the reason in
/// `st` (no such GPU: "no GPU cuda:N (...)"; memory; row blocks).
std::unique_ptr<device_backend> make_cuda_backend(int ordinal, model& m,
                                                  device_status& st);

} // namespace troupe::cuda
