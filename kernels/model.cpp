// A model: a stack of dense layers built from a spec string.
#include "kernels/model.hpp"

#include <algorithm>
#include <cctype>
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
    auto in = sizes[i], out = sizes[i + 1];
    m.layers_.push_back(layer{tensor({in, out}), tensor({out}),
                              tensor({in, out}), tensor({out})});
  }
  m.acts_.resize(sizes.size());
  return m;
}

size_t model::input_size() const {
  return layers_.front().w.rows();
}

size_t model::output_size() const {
  return layers_.back().w.cols();
}

void model::init_parameters(uint64_t seed) {
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto& w = layers_[l].w;
    auto layer_seed = derive_seed(seed, l);
    // Each call below only fails for fan_in == 0, which from_spec excludes.
    if (l + 1 < layers_.size())
      he_normal_cpu(w.data(), w.size(), w.rows(), layer_seed);
    else
      xavier_uniform_cpu(w.data(), w.size(), w.rows(), w.cols(), layer_seed);
    layers_[l].b = tensor(layers_[l].b.shape());
  }
}

kernel_status model::forward(const float* x, size_t batch) {
  if (!x || batch == 0)
    return kernel_status::bad_input;
  acts_[0].resize({batch, input_size()});
  std::copy(x, x + acts_[0].size(), acts_[0].data());
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto& y = acts_[l + 1];
    auto st = dense_forward_cpu(acts_[l], layers_[l].w, layers_[l].b, y);
    if (st != kernel_status::ok)
      return st;
    if (l + 1 < layers_.size())
      relu_forward_cpu(y.data(), y.data(), y.size());
  }
  return kernel_status::ok;
}

kernel_status model::backward(const float* dlogits) {
  const tensor& out = acts_.back();
  if (!dlogits || out.size() == 0)
    return kernel_status::bad_input;
  dy_.resize(out.shape());
  std::copy(dlogits, dlogits + out.size(), dy_.data());
  for (size_t l = layers_.size(); l-- > 0;) {
    auto& L = layers_[l];
    tensor* dx = l > 0 ? &dx_ : nullptr; // no gradient w.r.t. the input
    auto st = dense_backward_cpu(acts_[l], L.w, dy_, dx, L.dw, L.db);
    if (st != kernel_status::ok)
      return st;
    if (l > 0) {
      // acts_[l] is relu's output: > 0 exactly where its input was.
      relu_backward_cpu(acts_[l].data(), dx_.data(), dx_.data(), dx_.size());
      std::swap(dy_, dx_);
    }
  }
  return kernel_status::ok;
}

kernel_status model::compute_gradients(const float* x, const uint8_t* labels,
                                       size_t batch, float* loss) {
  if (auto st = forward(x, batch); st != kernel_status::ok)
    return st;
  dlogits_.resize(logits().shape());
  auto st = softmax_xent_cpu(logits().data(), labels, batch, output_size(),
                             loss, dlogits_.data());
  if (st != kernel_status::ok)
    return st;
  return backward(dlogits_.data());
}

std::vector<param_ref> model::parameters() {
  std::vector<param_ref> refs;
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto prefix = "dense" + std::to_string(l);
    auto& L = layers_[l];
    refs.push_back(param_ref{prefix + ".w", L.w.data(), L.w.size()});
    refs.push_back(param_ref{prefix + ".b", L.b.data(), L.b.size()});
  }
  return refs;
}

std::vector<param_ref> model::gradients() {
  std::vector<param_ref> refs;
  for (size_t l = 0; l < layers_.size(); ++l) {
    auto prefix = "dense" + std::to_string(l);
    auto& L = layers_[l];
    refs.push_back(param_ref{prefix + ".w", L.dw.data(), L.dw.size()});
    refs.push_back(param_ref{prefix + ".b", L.db.data(), L.db.size()});
  }
  return refs;
}

bool model::swap_parameter(size_t i, std::vector<float>& xs) {
  if (i / 2 >= layers_.size())
    return false;
  auto& L = layers_[i / 2];
  return (i % 2 == 0 ? L.w : L.b).swap_values(xs);
}

bool model::swap_gradient(size_t i, std::vector<float>& xs) {
  if (i / 2 >= layers_.size())
    return false;
  auto& L = layers_[i / 2];
  return (i % 2 == 0 ? L.dw : L.db).swap_values(xs);
}

} // namespace troupe
