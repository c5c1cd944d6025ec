// Optimizers applied to one flat parameter slice.
#include "kernels/optimizer.hpp"

#include <cmath>

namespace troupe {

namespace {

bool in_unit(float x) {
  return x >= 0.0f && x < 1.0f;
}

bool valid_slice(const float* w, const float* g, size_t n, float lr,
                 float weight_decay) {
  return (n == 0 || (w && g)) && lr >= 0.0f && weight_decay >= 0.0f;
}

/// Sizes an empty state vector to n zeros; false if it holds another size.
bool fit_state(std::vector<float>& xs, size_t n) {
  if (xs.empty())
    xs.assign(n, 0.0f);
  return xs.size() == n;
}

/// Shared by momentum and Nesterov; they differ only in the final step.
kernel_status momentum_step(float* w, const float* g, size_t n,
                            momentum_state& st, const momentum_params& p,
                            bool nesterov) {
  if (!valid_slice(w, g, n, p.lr, p.weight_decay) || !in_unit(p.momentum))
    return kernel_status::bad_input;
  if (!fit_state(st.velocity, n))
    return kernel_status::shape_mismatch;
  float* v = st.velocity.data();
  for (size_t i = 0; i < n; ++i) {
    float gi = g[i] + p.weight_decay * w[i];
    v[i] = p.momentum * v[i] + gi;
    w[i] -= p.lr * (nesterov ? gi + p.momentum * v[i] : v[i]);
  }
  return kernel_status::ok;
}

} // namespace

kernel_status sgd_update_cpu(float* w, const float* g, size_t n,
                             const sgd_params& p) {
  if (!valid_slice(w, g, n, p.lr, p.weight_decay))
    return kernel_status::bad_input;
  for (size_t i = 0; i < n; ++i)
    w[i] -= p.lr * (g[i] + p.weight_decay * w[i]);
  return kernel_status::ok;
}

kernel_status momentum_update_cpu(float* w, const float* g, size_t n,
                                  momentum_state& st,
                                  const momentum_params& p) {
  return momentum_step(w, g, n, st, p, false);
}

kernel_status nesterov_update_cpu(float* w, const float* g, size_t n,
                                  momentum_state& st,
                                  const momentum_params& p) {
  return momentum_step(w, g, n, st, p, true);
}

kernel_status adam_update_cpu(float* w, const float* g, size_t n,
                              adam_state& st, const adam_params& p) {
  if (!valid_slice(w, g, n, p.lr, p.weight_decay) || !in_unit(p.beta1) ||
      !in_unit(p.beta2) || !(p.eps > 0.0f))
    return kernel_status::bad_input;
  if (!fit_state(st.m, n) || !fit_state(st.v, n))
    return kernel_status::shape_mismatch;
  auto t = double(++st.step);
  auto c1 = float(1.0 / (1.0 - std::pow(double(p.beta1), t)));
  auto c2 = float(1.0 / (1.0 - std::pow(double(p.beta2), t)));
  float* m = st.m.data();
  float* v = st.v.data();
  for (size_t i = 0; i < n; ++i) {
    m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g[i];
    v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g[i] * g[i];
    float step = m[i] * c1 / (std::sqrt(v[i] * c2) + p.eps);
    w[i] -= p.lr * (step + p.weight_decay * w[i]);
  }
  return kernel_status::ok;
}

} // namespace troupe
