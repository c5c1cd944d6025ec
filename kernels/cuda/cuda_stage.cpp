// The CUDA twin of stage_model (cuda_stage.hpp): the same layers and the
// same order of work, through cuda::device's kernels.
#include "kernels/cuda/cuda_stage.hpp"

#include <map>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_device.hpp"
#include "kernels/cuda/layer_pairs.hpp"
#include "kernels/stage.hpp"

namespace troupe::cuda {

namespace {

device_status bad(const std::string& what) {
  return {"bad input: cuda stage: " + what};
}

class cuda_stage final : public stage_backend {
public:
  cuda_stage(std::unique_ptr<device> dev, model& m, size_t first, size_t last)
      : dev_(std::move(dev)), host_(m, first, last) {}

  /// The layers' buffers on the GPU and the weights copied up.
  device_status load() {
    auto ps = host_.parameters();
    for (size_t i = 0; i + 1 < ps.size(); i += 2) {
      layer L;
      L.out = ps[i + 1].size;
      L.in = ps[i].size / L.out;
      device_status st;
      if (!(st = dev_->alloc(L.w, ps[i].size)).ok() ||
          !(st = dev_->alloc(L.b, L.out)).ok() ||
          !(st = dev_->alloc(L.dw, ps[i].size)).ok() ||
          !(st = dev_->alloc(L.db, L.out)).ok() ||
          !(st = dev_->alloc(L.sw, ps[i].size)).ok() ||
          !(st = dev_->alloc(L.sb, L.out)).ok())
        return st;
      layers_.push_back(std::move(L));
    }
    if (auto st = upload_parameters(); !st.ok())
      return st;
    return zero_gradients();
  }

  std::string describe() const override { return dev_->describe(); }
  size_t input_size() const override { return host_.input_size(); }
  size_t output_size() const override { return host_.output_size(); }
  bool is_last() const override { return host_.is_last(); }
  size_t first_layer() const override { return host_.first_layer(); }

  std::vector<param_ref> parameters() override { return host_.parameters(); }
  device_status upload_parameters() override {
    if (auto st = dev_->use(); !st.ok()) // this thread's GPU
      return st;
    return each_pair(false, [this](float* host, float* dev, size_t n) {
      return dev_->to_device(dev, host, n);
    });
  }
  std::vector<param_ref> gradients() override { return host_.gradients(); }
  device_status download_gradients() override {
    if (auto st = dev_->use(); !st.ok()) // this thread's GPU
      return st;
    return each_pair(true, [this](float* host, float* dev, size_t n) {
      return dev_->to_host(host, dev, n);
    });
  }
  device_status zero_gradients() override {
    if (auto st = dev_->use(); !st.ok()) // this thread's GPU
      return st;
    host_.zero_gradients();
    return each_pair(true, [this](float*, float* dev, size_t n) {
      return dev_->zero(dev, n);
    });
  }

  device_status forward(uint32_t micro, const float* x, size_t rows) override {
    if (auto st = dev_->use(); !st.ok()) // this thread's GPU
      return st;
    if (!x || rows == 0 || micros_.count(micro) != 0)
      return bad("forward of micro-batch " + std::to_string(micro) +
                 ": no input, or it is held already");
    micro_state m;
    m.rows = rows;
    if (auto st = run_layers(x, rows, m.acts); !st.ok()) {
      give_back(m);
      return st;
    }
    m.out = tensor({rows, output_size()});
    if (auto st =
            dev_->to_host(m.out.data(), m.acts.back().data(), m.out.size());
        !st.ok()) {
      give_back(m);
      return st;
    }
    micros_.emplace(micro, std::move(m));
    return {};
  }

  device_status infer(const float* x, size_t rows, tensor& out) override {
    if (auto st = dev_->use(); !st.ok()) // this thread's GPU
      return st;
    if (!x || rows == 0)
      return bad("infer: no input");
    micro_state m;
    auto st = run_layers(x, rows, m.acts);
    if (st.ok()) {
      out = tensor({rows, output_size()});
      st = dev_->to_host(out.data(), m.acts.back().data(), out.size());
    }
    give_back(m);
    return st;
  }

  void drop_micro_batches() override {
    for (auto& [micro, m] : micros_)
      give_back(m);
    micros_.clear();
  }

  const tensor& output(uint32_t micro) const override {
    return micros_.at(micro).out;
  }

  device_status backward_input(uint32_t micro, const float* dy,
                               bool want_dx) override {
    if (auto st = dev_->use(); !st.ok()) // this thread's GPU
      return st;
    auto i = micros_.find(micro);
    if (!dy || i == micros_.end() || !i->second.dys.empty())
      return bad("B of micro-batch " + std::to_string(micro) +
                 " without its forward, or twice");
    auto& m = i->second;
    auto st = input_gradients(m, dy, want_dx);
    if (!st.ok()) { // as before B: a retry may run it again
      for (auto& b : m.dys)
        give(std::move(b));
      m.dys.clear();
    }
    return st;
  }

  const tensor& input_grad() const override { return dx_; }

  device_status backward_weight(uint32_t micro) override {
    if (auto st = dev_->use(); !st.ok()) // this thread's GPU
      return st;
    auto i = micros_.find(micro);
    if (i == micros_.end() || i->second.dys.empty())
      return bad("W of micro-batch " + std::to_string(micro) + " before its B");
    auto& m = i->second;
    for (size_t l = 0; l < layers_.size(); ++l) {
      auto& L = layers_[l];
      device_status st;
      // This micro-batch's gradients, then added to the mini-batch's.
      if (!(st = dev_->dense_backward(m.acts[l].data(), L.w.data(),
                                      m.dys[l].data(), nullptr, L.sw.data(),
                                      L.sb.data(), m.rows, L.in, L.out))
               .ok() ||
          !(st = dev_->add(L.dw.data(), L.sw.data(), L.in * L.out)).ok() ||
          !(st = dev_->add(L.db.data(), L.sb.data(), L.out)).ok())
        return st;
    }
    give_back(m);
    micros_.erase(i);
    return {};
  }

  size_t held() const override { return micros_.size(); }

  /// The activations' and gradients' own sizes, as stage_model counts
  /// them (a pooled buffer may be larger: that slack is the pool's).
  size_t held_bytes() const override {
    size_t acts = input_size(), dys = 0;
    for (auto& L : layers_) {
      acts += L.out;
      dys += L.out;
    }
    size_t n = 0;
    for (auto& [micro, m] : micros_)
      n += m.rows * (acts + (m.dys.empty() ? 0 : dys));
    return n * sizeof(float);
  }

private:
  struct layer {
    size_t in = 0, out = 0;
    buffer<float> w, b, dw, db, sw, sb; // sw, sb: one micro-batch's W
  };
  struct micro_state {
    size_t rows = 0;
    std::vector<buffer<float>> acts; // [0] input; [l + 1] layer l's output
    std::vector<buffer<float>> dys;  // after B: at layer l's output
    tensor out;                      // acts.back() in host memory
  };

  /// The host weights (`grads`: gradients) beside each layer's buffers.
  template <class Move> device_status each_pair(bool grads, Move move) {
    return pair_layers(layers_, grads ? host_.gradients() : host_.parameters(),
                       grads, "cuda stage: its own arrays", move);
  }

  /// B of `m` from `dy` (host): each layer's output gradient kept in
  /// m.dys for W, the input gradient into dx_ (want_dx), as
  /// stage_model::backward_input.
  device_status input_gradients(micro_state& m, const float* dy, bool want_dx) {
    size_t rows = m.rows;
    buffer<float> g;
    device_status st;
    size_t n = rows * output_size();
    if (!(st = take(n, g)).ok() ||
        !(st = dev_->to_device(g.data(), dy, n)).ok())
      return st;
    if (!is_last() && // our output went through a relu
        !(st = dev_->relu_backward(m.acts.back().data(), g.data(), g.data(), n))
             .ok())
      return st;
    m.dys.resize(layers_.size());
    for (size_t l = layers_.size(); l-- > 0;) {
      auto& L = layers_[l];
      m.dys[l] = std::move(g);
      if (l == 0 && !want_dx)
        break;
      buffer<float> dx;
      size_t k = rows * L.in;
      if (!(st = take(k, dx)).ok() ||
          !(st = dev_->dense_input_grad(L.w.data(), m.dys[l].data(), dx.data(),
                                        rows, L.in, L.out))
               .ok())
        return st;
      if (l > 0) { // acts[l] is relu's output: > 0 where its input was
        if (!(st = dev_->relu_backward(m.acts[l].data(), dx.data(), dx.data(),
                                       k))
                 .ok())
          return st;
        g = std::move(dx);
      } else { // the stage before masks it with its own relu
        dx_ = tensor({rows, L.in});
        st = dev_->to_host(dx_.data(), dx.data(), k);
        give(std::move(dx));
        if (!st.ok())
          return st;
      }
    }
    return {};
  }

  /// The layers on x (host, rows x input_size) into `acts`, as
  /// stage_model::run_layers.
  device_status run_layers(const float* x, size_t rows,
                           std::vector<buffer<float>>& acts) {
    acts.resize(layers_.size() + 1);
    device_status st;
    size_t n = rows * input_size();
    if (!(st = take(n, acts[0])).ok() ||
        !(st = dev_->to_device(acts[0].data(), x, n)).ok())
      return st;
    for (size_t l = 0; l < layers_.size(); ++l) {
      auto& L = layers_[l];
      size_t k = rows * L.out;
      if (!(st = take(k, acts[l + 1])).ok() ||
          !(st = dev_->dense_forward(acts[l].data(), L.w.data(), L.b.data(),
                                     acts[l + 1].data(), rows, L.in, L.out))
               .ok())
        return st;
      if ((l + 1 < layers_.size() || !is_last()) &&
          !(st = dev_->relu_forward(acts[l + 1].data(), acts[l + 1].data(), k))
               .ok())
        return st;
    }
    return {};
  }

  /// A buffer of at least `n` floats: one given back before if one fits
  /// (at most twice as large), else a new one. Micro-batches of a
  /// mini-batch have the same shapes, so after the first few steps the
  /// stage allocates nothing.
  device_status take(size_t n, buffer<float>& out) {
    auto i = pool_.lower_bound(n);
    if (i != pool_.end() && i->first <= 2 * n) {
      out = std::move(i->second);
      pool_.erase(i);
      return {};
    }
    return dev_->alloc(out, n);
  }
  void give(buffer<float>&& b) {
    if (b.size() > 0)
      pool_.emplace(b.size(), std::move(b));
  }
  void give_back(micro_state& m) {
    for (auto& b : m.acts)
      give(std::move(b));
    for (auto& b : m.dys)
      give(std::move(b));
    m.acts.clear();
    m.dys.clear();
  }

  std::unique_ptr<device> dev_; // outlives every buffer below
  stage_model host_;            // the host arrays: weights and gradients
  std::vector<layer> layers_;
  std::map<uint32_t, micro_state> micros_;
  std::multimap<size_t, buffer<float>> pool_;
  tensor dx_;
};

} // namespace

std::unique_ptr<stage_backend> make_cuda_stage(int ordinal, model& m,
                                               size_t first, size_t last,
                                               device_status& st) {
  auto dev = device::open(ordinal, st);
  if (!dev)
    return nullptr;
  auto s = std::make_unique<cuda_stage>(std::move(dev), m, first, last);
  if (!(st = s->load()).ok())
    return nullptr;
  return s;
}

} // namespace troupe::cuda
