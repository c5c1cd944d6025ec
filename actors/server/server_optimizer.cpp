// Optimizers as shard-server update hooks, with per-slice state.
#include "actors/server/server_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "kernels/optimizer.hpp"
#include "messages/errors.hpp"

namespace troupe {

namespace {

float scheduled_lr(const optimizer_settings& x, uint64_t updates) {
  return decayed_lr(x.lr, x.lr_decay_steps, x.lr_decay, updates);
}

} // namespace

slice_optimizer::slice_optimizer(optimizer_settings x) : x_(std::move(x)) {
  // empty
}

slice_optimizer::slice_optimizer(const slice_optimizer& other)
    : x_(other.x_), states_(other.states_), captured_(other.captured_),
      capturing_(other.capturing_) {
  // a mutex of its own
}

slice_optimizer::slice_state& slice_optimizer::state_of(slice_id id) {
  std::lock_guard<std::mutex> guard{*states_mtx_};
  return states_[id]; // map nodes stay put: the reference outlives the lock
}

void slice_optimizer::operator()(slice_id id, std::vector<float>& values,
                                 const float* sum, uint32_t contributors) {
  // The mean of the sum is taken inside the update's own pass.
  auto d = float(std::max<uint32_t>(contributors, 1));
  auto n = values.size();
  if (capturing_)
    capture_slice(id);
  auto& st = state_of(id);
  auto lr = scheduled_lr(x_, st.updates++);
  optimizer_step(x_, lr, values.data(), sum, n, d, st.momentum, st.adam);
}

void slice_optimizer::save(slice_snapshot& s) const {
  s.state.clear();
  auto i = states_.find(s.id);
  if (i == states_.end()) {
    s.updates = s.step = 0;
    return;
  }
  s.updates = i->second.updates;
  s.step = i->second.adam.step;
  if (x_.name == "momentum" || x_.name == "nesterov")
    s.state.push_back(i->second.momentum.velocity);
  else if (x_.name == "adam")
    s.state = {i->second.adam.m, i->second.adam.v};
}

caf::error slice_optimizer::load(const slice_snapshot& s) {
  auto arrays = optimizer_state_arrays(x_.name);
  if (s.state.size() != arrays && !(s.state.empty() && s.updates == 0))
    return caf::make_error(errc::bad_file, "checkpointed optimizer state of",
                           s.id.key, s.id.index, "has", s.state.size(),
                           "arrays; --optimizer.name", x_.name, "needs",
                           arrays);
  slice_state st;
  st.updates = s.updates;
  st.adam.step = s.step;
  if (arrays == 1 && !s.state.empty())
    st.momentum.velocity = s.state[0];
  if (arrays == 2 && !s.state.empty()) {
    st.adam.m = s.state[0];
    st.adam.v = s.state[1];
  }
  states_[s.id] = std::move(st);
  return caf::none;
}

void slice_optimizer::capture() {
  capturing_ = true;
  for (auto& [id, c] : captured_)
    c.taken = false;
}

slice_optimizer::capture_slot* slice_optimizer::claim_slot(slice_id id) {
  std::lock_guard<std::mutex> guard{*states_mtx_};
  auto* c = &captured_[id]; // map nodes stay put, as in state_of
  if (c->taken)
    return nullptr;
  c->taken = true;
  c->existed = states_.count(id) != 0;
  return c;
}

void slice_optimizer::capture_slice(slice_id id) {
  auto* c = claim_slot(id);
  if (c != nullptr && c->existed)
    c->state = state_of(id); // vectors keep their buffers from the last copy
}

void slice_optimizer::restore() {
  for (auto& [id, c] : captured_) {
    if (!c.taken)
      continue; // not updated since capture()
    if (c.existed)
      states_[id] = c.state;
    else
      states_.erase(id);
  }
}

bool slice_optimizer::step_from(slice_id id, const float* w_in, float* w_out,
                                size_t n, const float* g0, const float* g1,
                                uint32_t contributors) {
  if (!capturing_)
    return false;
  auto* c = claim_slot(id);
  if (c == nullptr)
    return false;
  auto* st = &state_of(id);
  // The state before goes aside whole; the slice keeps the buffers of the
  // last copy, written below. Empty arrays are zeros: made so, n long.
  std::swap(c->state, *st);
  auto& before = c->state;
  st->updates = before.updates;
  st->adam.step = before.adam.step;
  auto d = float(std::max<uint32_t>(contributors, 1));
  auto lr = scheduled_lr(x_, st->updates++);
  step_arrays a{w_in, w_out, g0, g1, n};
  auto sized = [n](std::vector<float>& in, std::vector<float>& out) {
    if (in.empty())
      in.assign(n, 0.0f);
    out.resize(n);
    return in.size() == n;
  };
  auto status = kernel_status::shape_mismatch;
  if (x_.name == "sgd") {
    status = sgd_step_from(a, sgd_params{lr, x_.weight_decay, d});
  } else if (x_.name == "momentum" || x_.name == "nesterov") {
    if (sized(before.momentum.velocity, st->momentum.velocity))
      status = momentum_step_from(
          a, before.momentum.velocity.data(), st->momentum.velocity.data(),
          momentum_params{lr, x_.momentum, x_.weight_decay, d},
          x_.name == "nesterov");
  } else if (sized(before.adam.m, st->adam.m) &&
             sized(before.adam.v, st->adam.v)) {
    status = adam_step_from(
        a, before.adam.m.data(), st->adam.m.data(), before.adam.v.data(),
        st->adam.v.data(), ++st->adam.step,
        adam_params{lr, x_.beta1, x_.beta2, x_.eps, x_.weight_decay, d});
  }
  if (status != kernel_status::ok) { // as in place: the values stay
    std::copy(w_in, w_in + n, w_out);
    *st = before;
  }
  return true;
}

bool step_from_optimizer(update_fn& fn, slice_id id, const float* w_in,
                         float* w_out, size_t n, const float* g0,
                         const float* g1, uint32_t contributors) {
  auto* opt = optimizer_of(fn);
  return opt != nullptr &&
         opt->step_from(id, w_in, w_out, n, g0, g1, contributors);
}

shard_store::restore_fn capture_optimizer(update_fn& fn) {
  auto* opt = optimizer_of(fn);
  if (opt == nullptr)
    return nullptr;
  opt->capture();
  return [](update_fn& g) {
    if (auto* o = optimizer_of(g))
      o->restore();
  };
}

slice_optimizer* optimizer_of(update_fn& fn) {
  return fn.target<slice_optimizer>();
}

update_fn make_update_fn(const optimizer_settings& x) {
  if (x.on == "worker")
    return [](slice_id, std::vector<float>& values, const float* sum,
              uint32_t contributors) {
      for (size_t i = 0; i < values.size(); ++i)
        values[i] = sum[i] / float(contributors);
    };
  return make_optimizer_fn(x);
}

update_fn make_optimizer_fn(const optimizer_settings& x) {
  if (x.name == "sum")
    return add_update;
  return slice_optimizer{x}; // each copy of the hook owns its state
}

} // namespace troupe
