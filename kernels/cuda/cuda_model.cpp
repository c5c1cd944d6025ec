// The MLP on one GPU (cuda_model.hpp), through the CUDA twins: the same
// layers in the same order as model::compute_gradients.
#include "kernels/cuda/cuda_model.hpp"
#include "kernels/cuda/layer_pairs.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>

namespace troupe::cuda {

namespace {

/// `queue()`'s status once everything queued is done, whatever failed,
/// also where it throws (a bad_alloc): nothing queued may still read the
/// caller's batch (a pinned one goes up from its memory) or the staging
/// buffers, or write the caller's arrays, when the step returns.
template <class F> cuda_status then_synced(device& dev, F queue) {
  cuda_status st;
  try {
    st = queue();
  } catch (...) {
    dev.sync();
    throw;
  }
  if (auto waited = dev.sync(); st.ok())
    st = waited;
  return st;
}

} // namespace

std::unique_ptr<cuda_model> cuda_model::load(device& dev, model& m,
                                             cuda_status& st) {
  auto ps = m.parameters();
  if (ps.size() != 2 * m.layer_count()) {
    st = {"cuda_model: the layers of " + m.spec() +
          " are cut into row blocks; the GPU twin runs whole layers"};
    return nullptr;
  }
  std::unique_ptr<cuda_model> g{new cuda_model{dev}};
  for (size_t l = 0; l < m.layer_count(); ++l) {
    auto& w = ps[2 * l];
    auto& b = ps[2 * l + 1];
    layer L;
    L.out = b.size;
    L.in = w.size / b.size;
    if (!(st = dev.alloc(L.w, w.size)).ok() ||
        !(st = dev.alloc(L.b, b.size)).ok() ||
        !(st = dev.alloc(L.dw, w.size)).ok() ||
        !(st = dev.alloc(L.db, b.size)).ok())
      return nullptr;
    g->layers_.push_back(std::move(L));
  }
  if (!(st = dev.alloc(g->loss_, 1)).ok() ||
      !(st = g->upload_parameters(m)).ok())
    return nullptr;
  return g;
}

template <class Move>
cuda_status cuda_model::pair_up(const std::vector<param_ref>& refs, bool grads,
                                Move move) {
  return pair_layers(layers_, refs, grads,
                     grads ? "cuda_model: another model's gradients"
                           : "cuda_model: another model's parameters",
                     move);
}

cuda_status cuda_model::upload_parameters(model& m) {
  return upload_parameters(m.parameters());
}

cuda_status cuda_model::upload_parameters(const std::vector<param_ref>& ps) {
  return pair_up(ps, false, [this](float* host, float* dev, size_t n) {
    return dev_.to_device(dev, host, n);
  });
}

cuda_status cuda_model::reserve(size_t batch) {
  if (batch <= rows_)
    return {};
  step_graph_ = graph{}; // it holds the buffers about to go
  graph_rows_ = 0;
  acts_.clear();
  acts_.resize(layers_.size() + 1);
  size_t widest = 0;
  cuda_status st;
  for (size_t l = 0; l <= layers_.size(); ++l) {
    auto width = l == 0 ? layers_[0].in : layers_[l - 1].out;
    widest = std::max(widest, width);
    if (!(st = dev_.alloc(acts_[l], batch * width)).ok())
      return st;
  }
  if (!(st = dev_.alloc(dlogits_, batch * layers_.back().out)).ok() ||
      !(st = dev_.alloc(scratch_a_, batch * widest)).ok() ||
      !(st = dev_.alloc(scratch_b_, batch * widest)).ok() ||
      !(st = dev_.alloc(labels_, batch)).ok() ||
      !(st = dev_.alloc_pinned(x_stage_, batch * layers_[0].in)).ok() ||
      !(st = dev_.alloc_pinned(y_stage_, batch)).ok() ||
      (loss_stage_.size() == 0 &&
       !(st = dev_.alloc_pinned(loss_stage_, 1)).ok()))
    return st;
  rows_ = batch;
  return {};
}

cuda_status cuda_model::check_batch(const float* x, const uint8_t* labels,
                                    size_t batch, const float* loss) const {
  if (!x || !labels || !loss || batch == 0)
    return {"bad input: cuda_model::compute_gradients: no batch"};
  auto classes = layers_.back().out;
  for (size_t i = 0; i < batch; ++i)
    if (labels[i] >= classes)
      return {"bad input: cuda_model::compute_gradients: label " +
              std::to_string(labels[i]) + " of row " + std::to_string(i) +
              " >= " + std::to_string(classes) + " classes"};
  return {};
}

cuda_status cuda_model::compute_gradients(const float* x, const uint8_t* labels,
                                          size_t batch, float* loss) {
  cuda_status st;
  if (!(st = check_batch(x, labels, batch, loss)).ok() ||
      !(st = reserve(batch)).ok())
    return st;
  st = then_synced(dev_, [&] { return run_step(x, labels, batch); });
  if (!st.ok())
    return st;
  *loss = loss_stage_.data()[0];
  return {};
}

cuda_status cuda_model::run_step(const float* x, const uint8_t* labels,
                                 size_t batch) {
  cuda_status st;
  if (!(st = upload(x, labels, batch)).ok())
    return st;
  replayed_ = false;
  if (graphs_ && graph_rows_ != batch && last_rows_ == batch) {
    // The shapes are fixed (and every buffer made): record the step.
    if (!(st = dev_.begin_capture()).ok())
      return st;
    // Into a graph of its own: one that failed (a part recorded, or none)
    // is never replayed, and the last one stays with its batch.
    cuda_status queued;
    graph recorded;
    try {
      queued = queue_step(batch);
    } catch (...) { // the capture ends first: then_synced's sync can wait
      dev_.end_capture(recorded);
      throw;
    }
    st = dev_.end_capture(recorded); // ends the capture in any case
    if (!queued.ok())
      return queued;
    if (!st.ok())
      return st;
    step_graph_ = std::move(recorded);
    graph_rows_ = batch;
  }
  last_rows_ = batch;
  if (graphs_ && graph_rows_ == batch) {
    st = dev_.launch(step_graph_);
    replayed_ = st.ok();
  } else {
    st = queue_step(batch);
  }
  return st;
}

cuda_status cuda_model::upload(const float* x, const uint8_t* labels,
                               size_t batch) {
  // The step waited for the one before: the staging buffers are free.
  auto n = batch * layers_[0].in;
  const float* from = x;
  if (!dev_.is_pinned(x)) {
    std::memcpy(x_stage_.data(), x, n * sizeof(float));
    from = x_stage_.data();
  }
  std::memcpy(y_stage_.data(), labels, batch);
  if (auto st = dev_.to_device(acts_[0].data(), from, n); !st.ok())
    return st;
  return dev_.to_device(labels_.data(), y_stage_.data(), batch);
}

cuda_status cuda_model::queue_step(size_t batch, step_hooks* hooks) {
  cuda_status st;
  auto n_layers = layers_.size();
  for (size_t l = 0; l < n_layers; ++l) {
    auto& L = layers_[l];
    if (hooks && !(st = hooks->before_forward(l)).ok())
      return st;
    if (!(st = dev_.dense_forward(acts_[l].data(), L.w.data(), L.b.data(),
                                  acts_[l + 1].data(), batch, L.in, L.out))
             .ok())
      return st;
    if (l + 1 < n_layers &&
        !(st = dev_.relu_forward(acts_[l + 1].data(), acts_[l + 1].data(),
                                 batch * L.out))
             .ok())
      return st;
  }
  // Labels were checked on the host: nothing to wait for here.
  if (!(st = dev_.softmax_xent_unchecked(acts_.back().data(), labels_.data(),
                                         batch, layers_.back().out,
                                         loss_.data(), dlogits_.data()))
           .ok())
    return st;
  // Backward, the gradient at a layer's output in `dy`, at its input in
  // `dx`; ReLU's output is > 0 exactly where its input was.
  const float* dy = dlogits_.data();
  float* dx = scratch_a_.data();
  float* spare = scratch_b_.data();
  for (size_t l = n_layers; l-- > 0;) {
    auto& L = layers_[l];
    if (!(st = dev_.dense_backward(acts_[l].data(), L.w.data(), dy,
                                   l > 0 ? dx : nullptr, L.dw.data(),
                                   L.db.data(), batch, L.in, L.out))
             .ok())
      return st;
    if (hooks && !(st = hooks->after_backward(l)).ok())
      return st;
    if (l > 0) {
      if (!(st = dev_.relu_backward(acts_[l].data(), dx, dx, batch * L.in))
               .ok())
        return st;
      dy = dx;
      std::swap(dx, spare);
    }
  }
  return dev_.to_host_async(loss_stage_.data(), loss_.data(), 1);
}

// -- a device alone's whole step ----------------------------------------------

size_t cuda_model::parameter_floats() const {
  size_t n = 0;
  for (auto& L : layers_)
    n += L.w.size() + L.b.size();
  return n;
}

cuda_status cuda_model::full_step(const std::vector<param_ref>& ps,
                                  const float* x, const uint8_t* labels,
                                  size_t batch, float* loss,
                                  const std::vector<param_ref>& gs) {
  overlapped_ = false;
  // Every size and label checked before anything moves, either way.
  auto same = [](float*, float*, size_t) { return cuda_status{}; };
  cuda_status st;
  if ((!ps.empty() && !(st = pair_up(ps, false, same)).ok()) ||
      (!gs.empty() && !(st = pair_up(gs, true, same)).ok()) ||
      !(st = check_batch(x, labels, batch, loss)).ok())
    return st;
  bool overlap = transfers_ == transfers::overlapped ||
                 (transfers_ == transfers::automatic &&
                  parameter_floats() >= overlap_floats);
  // Pinned staging the size of the parameters; where the host has none to
  // give, the copies go one after the other.
  if (overlap && xfer_.size() == 0 &&
      (no_pinned_xfer_ || !dev_.alloc_pinned(xfer_, parameter_floats()).ok())) {
    no_pinned_xfer_ = true;
    overlap = false;
  }
  if (!overlap) {
    if (!ps.empty() && !(st = upload_parameters(ps)).ok())
      return st;
    if (!(st = compute_gradients(x, labels, batch, loss)).ok())
      return st;
    return gs.empty() ? cuda_status{} : download_gradients(gs);
  }
  if (!(st = reserve(batch)).ok())
    return st;
  replayed_ = false;
  st = then_synced(dev_,
                   [&] { return run_overlapped(ps, x, labels, batch, gs); });
  if (!st.ok())
    return st;
  overlapped_ = true;
  *loss = loss_stage_.data()[0];
  return {};
}

/// full_step's overlapped copies. Signals: layer l's weights up (l), its
/// backward done (L + l), the stream's work before the step (2 L: the
/// lane's first copy into a layer waits for it, e.g. a copy up still in
/// flight), chunk k of the gradients down (2 L + 1 + k). Each
/// array has the staging at its offset in model::parameters() order, for
/// its weights going up and then its gradients coming down: the copy lane
/// runs in order, and a layer's backward follows every layer's forward,
/// which waited for every upload.
class cuda_model::overlapped_copies final : public step_hooks {
public:
  /// Floats a host copy and a DMA move at a time.
  static constexpr size_t chunk = size_t{1} << 20;

  overlapped_copies(cuda_model& m, const std::vector<param_ref>& ps,
                    const std::vector<param_ref>& gs)
      : m_(m), ps_(ps), gs_(gs) {
    size_t at = 0;
    for (auto& L : m.layers_) {
      offsets_.push_back(at);
      at += L.w.size() + L.b.size();
    }
  }

  cuda_status before_forward(size_t l) override {
    if (ps_.empty())
      return {};
    auto& L = m_.layers_[l];
    auto* stage = m_.xfer_.data() + offsets_[l];
    cuda_status st;
    for (auto& a : arrays(ps_, l, L.w, L.b)) {
      for (size_t i = 0; i < a.n; i += chunk) {
        auto k = std::min(chunk, a.n - i);
        std::memcpy(stage + i, a.host + i, k * sizeof(float));
        if (!(st = m_.dev_.lane_to_device(a.dev + i, stage + i, k)).ok())
          return st;
      }
      stage += a.n;
    }
    if (!(st = m_.dev_.signal(l, true)).ok())
      return st;
    return m_.dev_.await(l, false);
  }

  cuda_status after_backward(size_t l) override {
    if (gs_.empty())
      return {};
    auto& L = m_.layers_[l];
    auto layers = m_.layers_.size();
    cuda_status st;
    if (!(st = m_.dev_.signal(layers + l, false)).ok() ||
        !(st = m_.dev_.await(layers + l, true)).ok())
      return st;
    auto* stage = m_.xfer_.data() + offsets_[l];
    for (auto& a : arrays(gs_, l, L.dw, L.db)) {
      for (size_t i = 0; i < a.n; i += chunk) {
        auto k = std::min(chunk, a.n - i);
        size_t signal = 2 * layers + 1 + down_.size();
        if (!(st = m_.dev_.lane_to_host(stage + i, a.dev + i, k)).ok() ||
            !(st = m_.dev_.signal(signal, true)).ok())
          return st;
        down_.push_back({a.host + i, stage + i, k, signal});
      }
      stage += a.n;
    }
    return {};
  }

  /// The gradients out of the staging, chunk by chunk as each arrives.
  cuda_status finish() {
    for (auto& d : down_) {
      if (auto st = m_.dev_.host_await(d.signal); !st.ok())
        return st;
      std::memcpy(d.host, d.stage, d.n * sizeof(float));
    }
    return {};
  }

private:
  /// A host array beside its device buffer.
  struct pair {
    float* host;
    float* dev;
    size_t n;
  };
  /// Layer l's weights and bias (or their gradients): `refs` beside `w`
  /// and `b` (sizes checked by full_step).
  static std::array<pair, 2> arrays(const std::vector<param_ref>& refs,
                                    size_t l, buffer<float>& w,
                                    buffer<float>& b) {
    return {pair{refs[2 * l].data, w.data(), w.size()},
            pair{refs[2 * l + 1].data, b.data(), b.size()}};
  }
  struct download {
    float* host;
    const float* stage;
    size_t n, signal;
  };
  cuda_model& m_;
  const std::vector<param_ref>& ps_;
  const std::vector<param_ref>& gs_;
  std::vector<size_t> offsets_; // each layer's in the staging
  std::vector<download> down_;
};

cuda_status cuda_model::run_overlapped(const std::vector<param_ref>& ps,
                                       const float* x, const uint8_t* labels,
                                       size_t batch,
                                       const std::vector<param_ref>& gs) {
  cuda_status st;
  auto before = 2 * layers_.size();
  if (!(st = dev_.signal(before, false)).ok() ||
      !(st = dev_.await(before, true)).ok() ||
      !(st = upload(x, labels, batch)).ok())
    return st;
  overlapped_copies copies{*this, ps, gs};
  if (!(st = queue_step(batch, &copies)).ok())
    return st;
  return copies.finish();
}

cuda_status cuda_model::download_gradients(model& m) {
  return download_gradients(m.gradients());
}

cuda_status cuda_model::download_gradients(const std::vector<param_ref>& gs) {
  return pair_up(gs, true, [this](float* host, float* dev, size_t n) {
    return dev_.to_host(host, dev, n);
  });
}

cuda_status cuda_model::scale_gradients(float a) {
  for (auto& g : gradient_arrays())
    if (auto st = dev_.scale(g.data, g.size, a); !st.ok())
      return st;
  return {};
}

std::vector<device_array> cuda_model::arrays(bool grads) {
  std::vector<device_array> out;
  // (Not a range-for over `grads ? {..} : {..}`: the braced lists' arrays
  // die before the loop reads them.)
  for (auto& L : layers_) {
    auto& a = grads ? L.dw : L.w;
    auto& b = grads ? L.db : L.b;
    out.push_back({a.data(), a.size()});
    out.push_back({b.data(), b.size()});
  }
  return out;
}

} // namespace troupe::cuda
