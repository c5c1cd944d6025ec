// One walk shared by cuda_model and cuda_stage: a host model's arrays
// (param_ref, weights then bias per layer) beside a GPU twin's layers'
// buffers. Internal to kernels/cuda.
#pragma once

#include <vector>

#include "kernels/cuda/cuda_device.hpp"
#include "kernels/model.hpp"

namespace troupe::cuda {

/// Calls move(host, device, n) on each pair of `refs` and `layers`' w, b
/// (`grads`: dw, db) buffers; `what` if the counts or a size differ. Each
/// layer has buffer<float> members w, b, dw, db.
template <class Layers, class Move>
cuda_status pair_layers(Layers& layers, const std::vector<param_ref>& refs,
                        bool grads, const char* what, Move move) {
  if (refs.size() != 2 * layers.size())
    return {what};
  for (size_t l = 0; l < layers.size(); ++l) {
    auto& L = layers[l];
    auto& w = grads ? L.dw : L.w;
    auto& b = grads ? L.db : L.b;
    if (refs[2 * l].size != w.size() || refs[2 * l + 1].size != b.size())
      return {what};
    if (auto st = move(refs[2 * l].data, w.data(), w.size()); !st.ok())
      return st;
    if (auto st = move(refs[2 * l + 1].data, b.data(), b.size()); !st.ok())
      return st;
  }
  return {};
}

} // namespace troupe::cuda
