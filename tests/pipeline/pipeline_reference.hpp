// What the pipeline tests compare against: a small model trained by
// ordinary SGD steps on fixed mini-batches, and how far two sets of
// weights are apart.
#pragma once

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/stage.hpp"
#include "tests/kernels/random_values.hpp"

namespace troupe::test {

using weights = std::map<std::string, std::vector<float>>;

inline const std::string spec = "mlp:20-16-12-8-5"; // 4 layers: up to 4 stages
inline constexpr size_t batch = 24;                 // M in {1, 4, 8} divides it
inline constexpr float lr = 0.1f;

/// A mini-batch: inputs and labels of step `k`.
struct mini_batch {
  std::vector<float> x;
  std::vector<uint8_t> labels;
  explicit mini_batch(uint64_t k) : x(random_values(batch * 20, 100 + k)) {
    auto r = random_values(batch, 200 + k);
    for (auto v : r)
      labels.push_back(uint8_t(std::abs(v) * 5) % 5);
  }
};

inline model fresh_model() {
  std::string err;
  auto m = model::from_spec(spec, &err);
  BOOST_REQUIRE_MESSAGE(m, err);
  m->init_parameters(7);
  return std::move(*m);
}

/// One SGD step on every array of `params` with `grads`.
/// `m` cut into `stages` stages of about as many parameters each.
inline std::vector<size_t> cut_of(model& m, uint32_t stages) {
  auto cut = cut_model(m, stages);
  BOOST_REQUIRE_EQUAL(cut.size(), stages + 1);
  return cut;
}

inline void sgd_step(std::vector<param_ref> params,
                     std::vector<param_ref> grads,
                     sgd_params p = {lr, 0.0f, 1.0f}) {
  BOOST_REQUIRE_EQUAL(params.size(), grads.size());
  for (size_t i = 0; i < params.size(); ++i)
    BOOST_REQUIRE(sgd_update_cpu(params[i].data, grads[i].data, params[i].size,
                                 p) == kernel_status::ok);
}

/// The rest of a stage's update beside `lr` (stage_settings): L2 weight
/// decay (decoupled for adam), lr times `decay` every `every` mini-batches
/// (0 = never), and the optimizer, with stage_settings' defaults of its
/// hyper-parameters.
struct update_plan {
  float weight_decay = 0.0f;
  uint32_t every = 0;
  float decay = 1.0f;
  std::string optimizer = "sgd";
};

/// Weights by name after `steps` ordinary steps under `plan`.
inline weights ordinary(uint32_t steps, const update_plan& plan = {}) {
  auto m = fresh_model();
  float step_lr = lr;
  auto n = m.parameters().size();
  std::vector<momentum_state> velocity(n);
  std::vector<adam_state> moments(n);
  for (uint32_t k = 0; k < steps; ++k) {
    if (plan.every != 0 && k > 0 && k % plan.every == 0)
      step_lr *= plan.decay;
    mini_batch b{k};
    float loss = 0;
    BOOST_REQUIRE(m.compute_gradients(b.x.data(), b.labels.data(), batch,
                                      &loss) == kernel_status::ok);
    auto ws = m.parameters();
    auto gs = m.gradients();
    momentum_params mp{step_lr, 0.9f, plan.weight_decay, 1.0f};
    adam_params ap{step_lr, 0.9f, 0.999f, 1e-8f, plan.weight_decay, 1.0f};
    for (size_t i = 0; i < n; ++i) {
      auto& o = plan.optimizer;
      auto r =
          o == "momentum"   ? momentum_update_cpu(ws[i].data, gs[i].data,
                                                  ws[i].size, velocity[i], mp)
          : o == "nesterov" ? nesterov_update_cpu(ws[i].data, gs[i].data,
                                                  ws[i].size, velocity[i], mp)
          : o == "adam"
              ? adam_update_cpu(ws[i].data, gs[i].data, ws[i].size, moments[i],
                                ap)
              : sgd_update_cpu(ws[i].data, gs[i].data, ws[i].size,
                               sgd_params{step_lr, plan.weight_decay, 1.0f});
      BOOST_REQUIRE(r == kernel_status::ok);
    }
  }
  weights out;
  for (auto& p : m.parameters())
    out[p.name].assign(p.data, p.data + p.size);
  return out;
}

/// ||a - b|| / ||a|| per array, the largest.
inline double worst_relative(const weights& a, const weights& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double worst = 0;
  for (auto& [name, xs] : a) {
    auto& ys = b.at(name);
    BOOST_REQUIRE_EQUAL(xs.size(), ys.size());
    double d = 0, n = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      d += (double(xs[i]) - ys[i]) * (double(xs[i]) - ys[i]);
      n += double(xs[i]) * xs[i];
    }
    worst = std::max(worst, std::sqrt(d / std::max(n, 1e-30)));
  }
  return worst;
}

} // namespace troupe::test
