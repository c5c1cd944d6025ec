// A model: a stack of dense layers built from a spec string.
#include "kernels/model.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <utility>

#include "kernels/activations.hpp"
#include "kernels/dense.hpp"
#include "kernels/init.hpp"
#include "kernels/loss.hpp"
#include "kernels/random.hpp"

namespace troupe {

namespace {

constexpr size_t max_width = size_t{1} << 24;
constexpr size_t max_params = size_t{1} << 30; // 4 GiB of float32

bool parse_size(const std::string& s, size_t& out) {
  if (s.empty() || s.size() > 8 || !std::all_of(s.begin(), s.end(), [](char c) {
        return std::isdigit(uint8_t(c));
      }))
    return false;
  out = std::stoul(s);
  return out >= 1 && out <= max_width;
}

/// The sizes of "A-B-C", or an empty vector and the reason in `what`.
std::vector<size_t> parse_sizes(const std::string& list, std::string& what) {
  std::vector<size_t> sizes;
  size_t pos = 0;
  for (;;) {
    auto end = list.find('-', pos);
    auto item = list.substr(pos, end == std::string::npos ? end : end - pos);
    size_t n = 0;
    if (!parse_size(item, n)) {
      what = "size '" + item + "' is not an integer in [1, 16777216]";
      return {};
    }
    sizes.push_back(n);
    if (end == std::string::npos)
      break;
    pos = end + 1;
  }
  if (sizes.size() < 2)
    what = "needs at least two sizes, the input and the output";
  return sizes.size() < 2 ? std::vector<size_t>{} : sizes;
}

/// The layer sizes of `spec`, or an empty vector and the reason in `what`.
std::vector<size_t> parse_spec(const std::string& spec, std::string& what) {
  auto colon = spec.find(':');
  if (colon == std::string::npos) {
    what = "no model kind before ':'";
    return {};
  }
  if (auto kind = spec.substr(0, colon); kind != "mlp") {
    what = "unknown model kind '" + kind + "'";
    return {};
  }
  auto sizes = parse_sizes(spec.substr(colon + 1), what);
  size_t params = 0;
  for (size_t i = 0; i + 1 < sizes.size(); ++i)
    params += sizes[i] * sizes[i + 1] + sizes[i + 1];
  if (params > max_params) {
    what = "more than 2^30 parameters";
    return {};
  }
  return sizes;
}

} // namespace

std::optional<model> model::from_spec(const std::string& spec,
                                      std::string* error) {
  std::string what;
  auto sizes = parse_spec(spec, what);
  if (sizes.empty()) {
    if (error)
      *error = "bad model spec '" + spec + "': " + what +
               " (expected mlp:IN-H1-...-OUT, e.g. mlp:784-256-128-10)";
    return std::nullopt;
  }
  model m;
  m.spec_ = spec;
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    layer L;
    L.in = sizes[i];
    L.out = sizes[i + 1];
    L.b = tensor({L.out});
    L.db = tensor({L.out});
    split_rows(L, 1);
    m.layers_.push_back(std::move(L));
  }
  m.acts_.resize(sizes.size());
  return m;
}

void model::split_rows(layer& L, size_t blocks) {
  // The whole matrix, row-major, from the blocks as they are.
  std::vector<float> all;
  all.reserve(L.in * L.out);
  for (auto& t : L.w)
    all.insert(all.end(), t.data(), t.data() + t.size());
  all.resize(L.in * L.out, 0.0f);
  L.w.clear();
  L.dw.clear();
  L.first.clear();
  for (size_t k = 0; k <= blocks; ++k)
    L.first.push_back(k * L.in / blocks);
  for (size_t k = 0; k < blocks; ++k) {
    auto r0 = L.first[k], rows = L.first[k + 1] - r0;
    L.w.emplace_back(std::vector<size_t>{rows, L.out},
                     std::vector<float>(all.begin() + r0 * L.out,
                                        all.begin() + (r0 + rows) * L.out));
    L.dw.emplace_back(std::vector<size_t>{rows, L.out});
  }
}

void model::set_row_blocks(size_t max_floats) {
  for (auto& L : layers_) {
    size_t blocks = 1;
    if (max_floats > 0 && L.in * L.out > max_floats)
      blocks = std::min(L.in, (L.in * L.out + max_floats - 1) / max_floats);
    if (blocks != L.w.size())
      split_rows(L, blocks);
  }
}

size_t model::input_size() const {
  return layers_.front().in;
}

size_t model::output_size() const {
  return layers_.back().out;
}

void model::init_parameters(uint64_t seed) {
  std::vector<float> w;
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto& L = layers_[l];
    w.assign(L.in * L.out, 0.0f);
    auto layer_seed = derive_seed(seed, l);
    // Each call below only fails for fan_in == 0, which from_spec excludes.
    // The whole matrix at once: its values do not depend on the blocks.
    if (l + 1 < layers_.size())
      he_normal_cpu(w.data(), w.size(), L.in, layer_seed);
    else
      xavier_uniform_cpu(w.data(), w.size(), L.in, L.out, layer_seed);
    for (size_t k = 0; k < L.w.size(); ++k)
      std::copy(w.begin() + L.first[k] * L.out,
                w.begin() + L.first[k + 1] * L.out, L.w[k].data());
    L.b = tensor(L.b.shape());
  }
}

kernel_status model::forward(const float* x, size_t batch) {
  if (auto st = forward_begin(x, batch); st != kernel_status::ok)
    return st;
  return forward_end();
}

void model::seed_output(size_t l, size_t batch) {
  auto& L = layers_[l];
  auto& y = acts_[l + 1];
  y.resize({batch, L.out});
  // Every row of y starts as b; each block's x W_k is added on top.
  for (size_t i = 0; i < batch; ++i)
    std::copy(L.b.data(), L.b.data() + L.out, y.data() + i * L.out);
}

kernel_status model::add_block(size_t l, size_t k) {
  auto& L = layers_[l];
  return dense_forward_block_cpu(
      acts_[l].data() + L.first[k], L.in, L.w[k].data(), acts_[l + 1].data(),
      acts_[l].rows(), L.first[k + 1] - L.first[k], L.out);
}

kernel_status model::forward_begin(const float* x, size_t batch) {
  next_block_ = no_forward;
  if (!x || batch == 0)
    return kernel_status::bad_input;
  acts_[0].resize({batch, input_size()});
  std::copy(x, x + acts_[0].size(), acts_[0].data());
  seed_output(0, batch);
  next_block_ = 0;
  return kernel_status::ok;
}

kernel_status model::forward_next() {
  if (next_block_ >= layers_[0].w.size())
    return kernel_status::bad_input;
  return add_block(0, next_block_++);
}

kernel_status model::forward_end() {
  if (next_block_ == no_forward)
    return kernel_status::bad_input;
  size_t batch = acts_[0].rows();
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (l > 0) {
      seed_output(l, batch);
      next_block_ = 0;
    }
    for (; next_block_ < layers_[l].w.size(); ++next_block_)
      if (auto st = add_block(l, next_block_); st != kernel_status::ok) {
        next_block_ = no_forward;
        return st;
      }
    if (l + 1 < layers_.size())
      relu_forward_cpu(acts_[l + 1].data(), acts_[l + 1].data(),
                       acts_[l + 1].size());
  }
  next_block_ = no_forward;
  return kernel_status::ok;
}

kernel_status model::backward(const float* dlogits, const ready_fn& ready) {
  const tensor& out = acts_.back();
  if (!dlogits || out.size() == 0)
    return kernel_status::bad_input;
  size_t batch = out.rows();
  dy_.resize(out.shape());
  std::copy(dlogits, dlogits + out.size(), dy_.data());
  // parameters() index of layer l's first array: its blocks, then its bias.
  auto base = first_params();
  for (size_t l = layers_.size(); l-- > 0;) {
    auto& L = layers_[l];
    auto st = dense_bias_grad_cpu(dy_.data(), L.db.data(), batch, L.out);
    if (st != kernel_status::ok)
      return st;
    if (ready)
      ready(base[l] + L.w.size());
    if (l > 0) // no gradient w.r.t. the input
      dx_.resize({batch, L.in});
    for (size_t k = 0; k < L.w.size(); ++k) {
      st = dense_backward_block_cpu(
          acts_[l].data() + L.first[k], L.in, L.w[k].data(), dy_.data(),
          l > 0 ? dx_.data() + L.first[k] : nullptr, L.dw[k].data(), batch,
          L.first[k + 1] - L.first[k], L.out);
      if (st != kernel_status::ok)
        return st;
      if (ready)
        ready(base[l] + k);
    }
    if (l > 0) {
      // acts_[l] is relu's output: > 0 exactly where its input was.
      relu_backward_cpu(acts_[l].data(), dx_.data(), dx_.data(), dx_.size());
      std::swap(dy_, dx_);
    }
  }
  return kernel_status::ok;
}

kernel_status model::compute_gradients(const float* x, const uint8_t* labels,
                                       size_t batch, float* loss,
                                       const ready_fn& ready) {
  if (auto st = forward_begin(x, batch); st != kernel_status::ok)
    return st;
  return finish_gradients(labels, loss, ready);
}

kernel_status model::finish_gradients(const uint8_t* labels, float* loss,
                                      const ready_fn& ready) {
  size_t batch = acts_[0].rows();
  if (auto st = forward_end(); st != kernel_status::ok)
    return st;
  dlogits_.resize(logits().shape());
  auto st = softmax_xent_cpu(logits().data(), labels, batch, output_size(),
                             loss, dlogits_.data());
  if (st != kernel_status::ok)
    return st;
  return backward(dlogits_.data(), ready);
}

namespace {

/// The arrays of a model's layers (weights or gradients), as param_refs.
template <class Layers, class W, class B>
std::vector<param_ref> refs_of(Layers& layers, W w, B b) {
  std::vector<param_ref> refs;
  for (size_t l = 0; l < layers.size(); ++l) {
    auto prefix = "dense" + std::to_string(l);
    auto& L = layers[l];
    auto& ws = L.*w;
    for (size_t k = 0; k < ws.size(); ++k)
      refs.push_back(param_ref{
          prefix + ".w" + (ws.size() > 1 ? "." + std::to_string(k) : ""),
          ws[k].data(), ws[k].size()});
    auto& bias = L.*b;
    refs.push_back(param_ref{prefix + ".b", bias.data(), bias.size()});
  }
  return refs;
}

} // namespace

std::vector<param_ref> model::parameters() {
  return refs_of(layers_, &layer::w, &layer::b);
}

std::vector<param_ref> model::gradients() {
  return refs_of(layers_, &layer::dw, &layer::db);
}

std::vector<size_t> model::gradient_order() const {
  auto base = first_params();
  std::vector<size_t> order;
  for (size_t l = layers_.size(); l-- > 0;) {
    order.push_back(base[l] + layers_[l].w.size());
    for (size_t k = 0; k < layers_[l].w.size(); ++k)
      order.push_back(base[l] + k);
  }
  return order;
}

std::vector<size_t> model::first_params() const {
  std::vector<size_t> base(layers_.size() + 1, 0);
  for (size_t l = 0; l < layers_.size(); ++l)
    base[l + 1] = base[l] + layers_[l].w.size() + 1;
  return base;
}

bool model::locate(size_t i, size_t& layer, size_t& block) const {
  for (layer = 0; layer < layers_.size(); ++layer) {
    auto n = layers_[layer].w.size() + 1;
    if (i < n) {
      block = i + 1 == n ? SIZE_MAX : i;
      return true;
    }
    i -= n;
  }
  return false;
}

bool model::is_row_block(size_t i) const {
  size_t l = 0, k = 0;
  return locate(i, l, k) && k != SIZE_MAX && layers_[l].w.size() > 1;
}

bool model::swap_parameter(size_t i, std::vector<float>& xs) {
  size_t l = 0, k = 0;
  if (!locate(i, l, k))
    return false;
  auto& L = layers_[l];
  return (k == SIZE_MAX ? L.b : L.w[k]).swap_values(xs);
}

bool model::swap_gradient(size_t i, std::vector<float>& xs) {
  size_t l = 0, k = 0;
  if (!locate(i, l, k))
    return false;
  auto& L = layers_[l];
  return (k == SIZE_MAX ? L.db : L.dw[k]).swap_values(xs);
}

} // namespace troupe
