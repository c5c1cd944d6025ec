// A stage's optimizer (stage_actor.hpp): the update of each parameter
// array once per mini-batch, and its state, which goes out with the
// weights (pull) and comes back with them (reset).
#include <algorithm>

#include "actors/pipeline/stage_actor_internal.hpp"
#include "kernels/optimizer.hpp"
#include "messages/errors.hpp"

namespace troupe {

namespace stage_impl {

namespace {

/// The state array `j` of parameter array `i` (stage_state_key).
std::vector<float>& state_array(stage_ptr self, size_t i, uint32_t j) {
  auto& st = self->state;
  if (st.cfg.update.name == "adam")
    return j == 0 ? st.moments[i].m : st.moments[i].v;
  return st.velocity[i].velocity;
}

} // namespace

/// The optimizer's step on parameter array `i` (cfg.update).
kernel_status update_array(stage_ptr self, float lr, size_t i,
                           const param_ref& w, const param_ref& g) {
  auto& st = self->state;
  return optimizer_step(st.cfg.update, lr, w.data, g.data, w.size, 1.0f,
                        st.velocity[i], st.moments[i]);
}

caf::error take_update(stage_ptr self) {
  auto& st = self->state;
  auto& x = st.cfg.update;
  if (x.name != "sgd" && x.name != "momentum" && x.name != "nesterov" &&
      x.name != "adam")
    return caf::make_error(errc::invalid_config,
                           "pipeline: a stage applies sgd, momentum,"
                           " nesterov or adam, not " +
                               x.name);
  auto n = st.model->parameters().size();
  st.velocity.resize(n);
  st.moments.resize(n);
  return validate(x);
}

/// Takes `w` as the stage's weights after `step` mini-batches: the arrays
/// its pull names (the weights, then the optimizer's state).
caf::error load_weights(stage_ptr self, const std::vector<named_array>& w,
                        uint64_t step) {
  auto& st = self->state;
  auto& m = *st.model;
  auto params = m.parameters();
  auto per = static_cast<uint32_t>(optimizer_state_arrays(st.cfg.update.name));
  auto want = params.size() * (1 + per);
  if (w.size() != want)
    return caf::make_error(
        errc::invalid_config, who(self) + ": weights of", w.size(),
        "arrays, want", want, "(the weights, and the optimizer's state of",
        st.cfg.update.name + ": a checkpoint of another optimizer?)");
  for (size_t k = 0; k < want; ++k) {
    auto i = k % params.size();
    auto key = stage_key(m.first_layer(), i);
    if (k >= params.size())
      key = stage_state_key(key, uint32_t(k / params.size() - 1));
    if (w[k].key != key || w[k].values.size() != params[i].size)
      return caf::make_error(errc::bad_shape,
                             who(self) + ": weights of the wrong key or size",
                             w[k].key, w[k].values.size());
  }
  for (size_t i = 0; i < params.size(); ++i)
    std::copy(w[i].values.begin(), w[i].values.end(), params[i].data);
  for (size_t k = params.size(); k < want; ++k)
    state_array(self, k % params.size(), uint32_t(k / params.size() - 1)) =
        w[k].values;
  for (auto& a : st.moments)
    a.step = step; // one update per mini-batch, from mini-batch 0
  if (auto up = m.upload_parameters(); !up.ok())
    return caf::make_error(errc::device_failed,
                           who(self) + ": loading weights: " + up.error);
  return caf::none;
}

std::vector<named_array> arrays_of(stage_ptr self,
                                   const std::vector<param_ref>& xs) {
  auto& m = *self->state.model;
  std::vector<named_array> out;
  for (size_t i = 0; i < xs.size(); ++i) // weights, bias, per layer
    out.push_back(
        named_array{stage_key(m.first_layer(), i),
                    std::vector<float>(xs[i].data, xs[i].data + xs[i].size)});
  return out;
}

/// The weights, then the optimizer's state arrays (zeros before its
/// first update), as pull_atom gives them.
std::vector<named_array> weights_and_state(stage_ptr self) {
  auto params = self->state.model->parameters();
  auto out = arrays_of(self, params);
  auto per = optimizer_state_arrays(self->state.cfg.update.name);
  for (uint32_t j = 0; j < uint32_t(per); ++j)
    for (size_t i = 0; i < params.size(); ++i) {
      auto& x = state_array(self, i, j);
      out.push_back({stage_state_key(out[i].key, j),
                     x.empty() ? std::vector<float>(params[i].size) : x});
    }
  return out;
}

} // namespace stage_impl
} // namespace troupe
