// Optimizers as shard-server update hooks, with per-slice state.
#include "actors/server_optimizer.hpp"

#include <cmath>
#include <map>

#include "kernels/optimizer.hpp"
#include "messages/errors.hpp"

namespace troupe {

namespace {

/// What one slice remembers between updates.
struct slice_opt_state {
  uint64_t updates = 0;
  momentum_state momentum;
  adam_state adam;
};

float scheduled_lr(const optimizer_settings& x, uint64_t updates) {
  if (x.lr_decay_steps == 0)
    return x.lr;
  return x.lr * std::pow(x.lr_decay, float(updates / x.lr_decay_steps));
}

void apply(const optimizer_settings& x, slice_opt_state& st, float* w,
           const float* g, size_t n) {
  auto lr = scheduled_lr(x, st.updates++);
  if (x.name == "sgd")
    sgd_update_cpu(w, g, n, sgd_params{lr, x.weight_decay});
  else if (x.name == "momentum")
    momentum_update_cpu(w, g, n, st.momentum,
                        momentum_params{lr, x.momentum, x.weight_decay});
  else if (x.name == "nesterov")
    nesterov_update_cpu(w, g, n, st.momentum,
                        momentum_params{lr, x.momentum, x.weight_decay});
  else
    adam_update_cpu(w, g, n, st.adam,
                    adam_params{lr, x.beta1, x.beta2, x.eps, x.weight_decay});
}

} // namespace

caf::error validate(const optimizer_settings& x) {
  auto bad = [](const char* what) {
    return caf::make_error(errc::invalid_config, what);
  };
  if (x.name != "sum" && x.name != "sgd" && x.name != "momentum" &&
      x.name != "nesterov" && x.name != "adam")
    return caf::make_error(errc::invalid_config,
                           "--optimizer.name must be sum, sgd, momentum,"
                           " nesterov or adam, got",
                           x.name);
  if (x.on != "server" && x.on != "worker")
    return caf::make_error(errc::invalid_config,
                           "--optimizer.on must be server or worker, got",
                           x.on);
  if (!(x.lr >= 0.0f) || !std::isfinite(x.lr))
    return bad("--optimizer.lr must be >= 0");
  if (!(x.momentum >= 0.0f && x.momentum < 1.0f))
    return bad("--optimizer.momentum must be in [0, 1)");
  if (!(x.weight_decay >= 0.0f))
    return bad("--optimizer.weight-decay must be >= 0");
  if (!(x.beta1 >= 0.0f && x.beta1 < 1.0f && x.beta2 >= 0.0f &&
        x.beta2 < 1.0f && x.eps > 0.0f))
    return bad("--optimizer.beta1/beta2 must be in [0, 1), eps > 0");
  if (!(x.lr_decay > 0.0f && x.lr_decay <= 1.0f))
    return bad("--optimizer.lr-decay must be in (0, 1]");
  return caf::none;
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
  // State is captured by value: each copy of the hook (one per server)
  // owns its own, and only that server's actor runs it.
  return [x, states = std::map<slice_id, slice_opt_state>{},
          mean = std::vector<float>{}](slice_id id, std::vector<float>& values,
                                       const float* sum,
                                       uint32_t contributors) mutable {
    const float* g = sum;
    if (contributors > 1) {
      mean.resize(values.size());
      for (size_t i = 0; i < values.size(); ++i)
        mean[i] = sum[i] / float(contributors);
      g = mean.data();
    }
    apply(x, states[id], values.data(), g, values.size());
  };
}

} // namespace troupe
