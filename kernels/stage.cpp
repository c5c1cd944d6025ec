// A pipeline stage's share of a model: see the header.
#include "kernels/stage.hpp"

#include <algorithm>
#include <numeric>
#include <utility>

#include "kernels/activations.hpp"
#include "kernels/dense.hpp"

namespace troupe {

std::vector<size_t> cut_layers(const std::vector<size_t>& layer_params,
                               uint32_t stages) {
  auto n = layer_params.size();
  if (stages == 0 || n < stages)
    return {};
  auto total =
      std::accumulate(layer_params.begin(), layer_params.end(), size_t{0});
  std::vector<size_t> cut{0};
  size_t sum = 0;
  for (size_t l = 0; l < n && cut.size() < stages; ++l) {
    sum += layer_params[l];
    auto left = stages - cut.size(); // stages still to open after this one
    // Close the stage at l once it holds its share, or when the layers
    // left are just enough for one each.
    if ((sum * stages >= total * cut.size() && n - (l + 1) >= left) ||
        n - (l + 1) == left)
      cut.push_back(l + 1);
  }
  cut.push_back(n);
  return cut;
}

std::vector<size_t> cut_model(model& m, uint32_t stages) {
  std::vector<size_t> layer_params(m.layer_count(), 0);
  for (auto& p : m.parameters()) // "dense<i>.w", "dense<i>.w.<k>", "dense<i>.b"
    layer_params.at(std::stoul(p.name.substr(5))) += p.size;
  return cut_layers(layer_params, stages);
}

stage_model::stage_model(model& m, size_t first, size_t last) {
  auto params = m.parameters();
  last_of_model_ = last == m.layer_count();
  for (size_t l = first; l < last; ++l) {
    layer L;
    L.index = l;
    auto w_name = "dense" + std::to_string(l) + ".w";
    auto b_name = "dense" + std::to_string(l) + ".b";
    std::vector<float> w;
    for (auto& p : params) // row blocks, if any, hold consecutive rows
      if (p.name == w_name || p.name.rfind(w_name + ".", 0) == 0)
        w.insert(w.end(), p.data, p.data + p.size);
    for (auto& p : params)
      if (p.name == b_name)
        L.b = tensor({p.size}, std::vector<float>(p.data, p.data + p.size));
    L.out = L.b.size();
    L.in = w.size() / L.out;
    L.w = tensor({L.in, L.out}, std::move(w));
    L.dw = tensor({L.in, L.out});
    L.db = tensor({L.out});
    layers_.push_back(std::move(L));
  }
}

std::vector<param_ref> stage_model::refs(tensor layer::*w, tensor layer::*b) {
  std::vector<param_ref> out;
  for (auto& L : layers_) {
    auto name = "dense" + std::to_string(L.index);
    out.push_back({name + ".w", (L.*w).data(), (L.*w).size()});
    out.push_back({name + ".b", (L.*b).data(), (L.*b).size()});
  }
  return out;
}

std::vector<param_ref> stage_model::parameters() {
  return refs(&layer::w, &layer::b);
}

std::vector<param_ref> stage_model::gradients() {
  return refs(&layer::dw, &layer::db);
}

void stage_model::zero_gradients() {
  for (auto& L : layers_) {
    L.dw = tensor(L.dw.shape());
    L.db = tensor(L.db.shape());
  }
}

kernel_status stage_model::run_layers(const float* x, size_t batch,
                                      std::vector<tensor>& acts) {
  acts.clear();
  acts.emplace_back(std::vector<size_t>{batch, input_size()},
                    std::vector<float>(x, x + batch * input_size()));
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto& L = layers_[l];
    tensor y({batch, L.out});
    auto s = dense_forward_cpu(acts[l].data(), L.w.data(), L.b.data(), y.data(),
                               batch, L.in, L.out);
    if (s != kernel_status::ok)
      return s;
    if (l + 1 < layers_.size() || !last_of_model_)
      relu_forward_cpu(y.data(), y.data(), y.size());
    acts.push_back(std::move(y));
  }
  return kernel_status::ok;
}

kernel_status stage_model::forward(uint32_t micro, const float* x,
                                   size_t batch) {
  if (!x || batch == 0 || micros_.count(micro) != 0)
    return kernel_status::bad_input;
  micro_state st;
  if (auto s = run_layers(x, batch, st.acts); s != kernel_status::ok)
    return s;
  micros_.emplace(micro, std::move(st));
  return kernel_status::ok;
}

kernel_status stage_model::infer(const float* x, size_t batch, tensor& out) {
  if (!x || batch == 0)
    return kernel_status::bad_input;
  std::vector<tensor> acts;
  if (auto s = run_layers(x, batch, acts); s != kernel_status::ok)
    return s;
  out = std::move(acts.back());
  return kernel_status::ok;
}

size_t stage_model::held_bytes() const {
  size_t n = 0;
  for (auto& [micro, st] : micros_) {
    for (auto& t : st.acts)
      n += t.size();
    for (auto& t : st.dys)
      n += t.size();
  }
  return n * sizeof(float);
}

void stage_model::drop_micro_batches() {
  micros_.clear();
}

const tensor& stage_model::output(uint32_t micro) const {
  return micros_.at(micro).acts.back();
}

kernel_status stage_model::backward_input(uint32_t micro, const float* dy,
                                          bool want_dx) {
  auto i = micros_.find(micro);
  if (!dy || i == micros_.end() || !i->second.dys.empty())
    return kernel_status::bad_input;
  auto& st = i->second;
  size_t batch = st.acts[0].rows();
  const auto& out = st.acts.back();
  tensor g(out.shape(), std::vector<float>(dy, dy + out.size()));
  if (!last_of_model_) // our output went through a relu
    relu_backward_cpu(out.data(), g.data(), g.data(), g.size());
  st.dys.resize(layers_.size());
  for (size_t l = layers_.size(); l-- > 0;) {
    auto& L = layers_[l];
    st.dys[l] = g;
    if (l == 0 && !want_dx)
      break;
    tensor dx({batch, L.in});
    auto s =
        dense_backward_block_cpu(st.acts[l].data(), L.in, L.w.data(), g.data(),
                                 dx.data(), nullptr, batch, L.in, L.out);
    if (s != kernel_status::ok)
      return s;
    if (l > 0) // acts[l] is relu's output: > 0 exactly where its input was
      relu_backward_cpu(st.acts[l].data(), dx.data(), dx.data(), dx.size());
    else // the stage before masks it with its own relu
      dx_ = dx;
    g = std::move(dx);
  }
  return kernel_status::ok;
}

kernel_status stage_model::backward_weight(uint32_t micro) {
  auto i = micros_.find(micro);
  if (i == micros_.end() || i->second.dys.empty())
    return kernel_status::bad_input;
  auto& st = i->second;
  size_t batch = st.acts[0].rows();
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto& L = layers_[l];
    scratch_w_.resize({L.in, L.out});
    scratch_b_.resize({L.out});
    auto s = dense_backward_block_cpu(st.acts[l].data(), L.in, L.w.data(),
                                      st.dys[l].data(), nullptr,
                                      scratch_w_.data(), batch, L.in, L.out);
    if (s == kernel_status::ok)
      s = dense_bias_grad_cpu(st.dys[l].data(), scratch_b_.data(), batch,
                              L.out);
    if (s != kernel_status::ok)
      return s;
    for (size_t k = 0; k < L.dw.size(); ++k)
      L.dw.data()[k] += scratch_w_.data()[k];
    for (size_t k = 0; k < L.db.size(); ++k)
      L.db.data()[k] += scratch_b_.data()[k];
  }
  micros_.erase(i);
  return kernel_status::ok;
}

} // namespace troupe
