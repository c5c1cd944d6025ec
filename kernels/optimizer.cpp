// Optimizers applied to one flat parameter slice.
#include "kernels/optimizer.hpp"

#include <cmath>

#include "kernels/wide_loop.hpp"

namespace troupe {

namespace {

bool in_unit(float x) {
  return x >= 0.0f && x < 1.0f;
}

bool valid_slice(const float* w, const float* g, size_t n, float lr,
                 float weight_decay, float grad_divisor) {
  return (n == 0 || (w && g)) && lr >= 0.0f && weight_decay >= 0.0f &&
         grad_divisor > 0.0f;
}

/// Sizes an empty state vector to n zeros; false if it holds another size.
bool fit_state(std::vector<float>& xs, size_t n) {
  if (xs.empty())
    xs.assign(n, 0.0f);
  return xs.size() == n;
}

/// The loops below take restrict pointers and no branch so that they
/// vectorise (this file builds with -O3), and are built for AVX2 as well
/// (kernels/wide_loop.hpp): a shard server runs them over every slice each
/// round while the workers wait.

TROUPE_WIDE_LOOP
void sgd_loop(float* __restrict w, const float* __restrict g, size_t n,
              float lr, float wd, float d) {
  for (size_t i = 0; i < n; ++i)
    w[i] -= lr * (g[i] / d + wd * w[i]);
}

/// Shared by momentum and Nesterov; they differ only in the final step.
TROUPE_WIDE_LOOP
void momentum_loop(float* __restrict w, const float* __restrict g,
                   float* __restrict v, size_t n, const momentum_params& p,
                   bool nesterov) {
  const float lr = p.lr, mu = p.momentum, wd = p.weight_decay,
              d = p.grad_divisor;
  if (nesterov)
    for (size_t i = 0; i < n; ++i) {
      float gi = g[i] / d + wd * w[i];
      v[i] = mu * v[i] + gi;
      w[i] -= lr * (gi + mu * v[i]);
    }
  else
    for (size_t i = 0; i < n; ++i) {
      v[i] = mu * v[i] + (g[i] / d + wd * w[i]);
      w[i] -= lr * v[i];
    }
}

TROUPE_WIDE_LOOP
void adam_loop(float* __restrict w, const float* __restrict g,
               float* __restrict m, float* __restrict v, size_t n,
               const adam_params& p, float c1, float c2) {
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps, lr = p.lr,
              wd = p.weight_decay, d = p.grad_divisor;
  for (size_t i = 0; i < n; ++i) {
    float gi = g[i] / d;
    m[i] = b1 * m[i] + (1.0f - b1) * gi;
    v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
    float step = m[i] * c1 / (std::sqrt(v[i] * c2) + eps);
    w[i] -= lr * (step + wd * w[i]);
  }
}

// The out-of-place steps: Two = g1 is there. The gradient expression is
// the in-place loops' with g[i] replaced by (g0[i] + g1[i]).
template <bool Two>
TROUPE_WIDE_LOOP void
sgd_from_loop(float* __restrict wo, const float* __restrict wi,
              const float* __restrict g0, const float* __restrict g1, size_t n,
              float lr, float wd, float d) {
  for (size_t i = 0; i < n; ++i) {
    float g = Two ? g0[i] + g1[i] : g0[i];
    wo[i] = wi[i] - lr * (g / d + wd * wi[i]);
  }
}

template <bool Two>
TROUPE_WIDE_LOOP void
momentum_from_loop(float* __restrict wo, const float* __restrict wi,
                   const float* __restrict g0, const float* __restrict g1,
                   float* __restrict vo, const float* __restrict vi, size_t n,
                   const momentum_params& p, bool nesterov) {
  const float lr = p.lr, mu = p.momentum, wd = p.weight_decay,
              d = p.grad_divisor;
  if (nesterov)
    for (size_t i = 0; i < n; ++i) {
      float g = Two ? g0[i] + g1[i] : g0[i];
      float gi = g / d + wd * wi[i];
      float v = mu * vi[i] + gi;
      vo[i] = v;
      wo[i] = wi[i] - lr * (gi + mu * v);
    }
  else
    for (size_t i = 0; i < n; ++i) {
      float g = Two ? g0[i] + g1[i] : g0[i];
      float v = mu * vi[i] + (g / d + wd * wi[i]);
      vo[i] = v;
      wo[i] = wi[i] - lr * v;
    }
}

template <bool Two>
TROUPE_WIDE_LOOP void
adam_from_loop(float* __restrict wo, const float* __restrict wi,
               const float* __restrict g0, const float* __restrict g1,
               float* __restrict mo, const float* __restrict mi,
               float* __restrict vo, const float* __restrict vi, size_t n,
               const adam_params& p, float c1, float c2) {
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps, lr = p.lr,
              wd = p.weight_decay, d = p.grad_divisor;
  for (size_t i = 0; i < n; ++i) {
    float gi = (Two ? g0[i] + g1[i] : g0[i]) / d;
    float m = b1 * mi[i] + (1.0f - b1) * gi;
    float v = b2 * vi[i] + (1.0f - b2) * gi * gi;
    mo[i] = m;
    vo[i] = v;
    float step = m * c1 / (std::sqrt(v * c2) + eps);
    wo[i] = wi[i] - lr * (step + wd * wi[i]);
  }
}

bool valid_from(const step_arrays& a, float lr, float wd, float d) {
  return (a.n == 0 || (a.w_in && a.w_out && a.g0)) && lr >= 0.0f &&
         wd >= 0.0f && d > 0.0f;
}

kernel_status momentum_step(float* w, const float* g, size_t n,
                            momentum_state& st, const momentum_params& p,
                            bool nesterov) {
  if (!valid_slice(w, g, n, p.lr, p.weight_decay, p.grad_divisor) ||
      !in_unit(p.momentum))
    return kernel_status::bad_input;
  if (!fit_state(st.velocity, n))
    return kernel_status::shape_mismatch;
  momentum_loop(w, g, st.velocity.data(), n, p, nesterov);
  return kernel_status::ok;
}

} // namespace

float decayed_lr(float lr, uint32_t every, float decay, uint64_t updates) {
  if (every == 0)
    return lr;
  return lr * std::pow(decay, float(updates / every));
}

kernel_status sgd_update_cpu(float* w, const float* g, size_t n,
                             const sgd_params& p) {
  if (!valid_slice(w, g, n, p.lr, p.weight_decay, p.grad_divisor))
    return kernel_status::bad_input;
  sgd_loop(w, g, n, p.lr, p.weight_decay, p.grad_divisor);
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
  if (!valid_slice(w, g, n, p.lr, p.weight_decay, p.grad_divisor) ||
      !in_unit(p.beta1) || !in_unit(p.beta2) || !(p.eps > 0.0f))
    return kernel_status::bad_input;
  if (!fit_state(st.m, n) || !fit_state(st.v, n))
    return kernel_status::shape_mismatch;
  auto t = double(++st.step);
  auto c1 = float(1.0 / (1.0 - std::pow(double(p.beta1), t)));
  auto c2 = float(1.0 / (1.0 - std::pow(double(p.beta2), t)));
  adam_loop(w, g, st.m.data(), st.v.data(), n, p, c1, c2);
  return kernel_status::ok;
}

kernel_status sgd_step_from(const step_arrays& a, const sgd_params& p) {
  if (!valid_from(a, p.lr, p.weight_decay, p.grad_divisor))
    return kernel_status::bad_input;
  (a.g1 ? sgd_from_loop<true>
        : sgd_from_loop<false>)(a.w_out, a.w_in, a.g0, a.g1, a.n, p.lr,
                                p.weight_decay, p.grad_divisor);
  return kernel_status::ok;
}

kernel_status momentum_step_from(const step_arrays& a, const float* v_in,
                                 float* v_out, const momentum_params& p,
                                 bool nesterov) {
  if (!valid_from(a, p.lr, p.weight_decay, p.grad_divisor) ||
      !in_unit(p.momentum) || (a.n > 0 && !(v_in && v_out)))
    return kernel_status::bad_input;
  (a.g1 ? momentum_from_loop<true>
        : momentum_from_loop<false>)(a.w_out, a.w_in, a.g0, a.g1, v_out, v_in,
                                     a.n, p, nesterov);
  return kernel_status::ok;
}

kernel_status adam_step_from(const step_arrays& a, const float* m_in,
                             float* m_out, const float* v_in, float* v_out,
                             uint64_t step, const adam_params& p) {
  if (!valid_from(a, p.lr, p.weight_decay, p.grad_divisor) ||
      !in_unit(p.beta1) || !in_unit(p.beta2) || !(p.eps > 0.0f) || step == 0 ||
      (a.n > 0 && !(m_in && m_out && v_in && v_out)))
    return kernel_status::bad_input;
  auto t = double(step);
  auto c1 = float(1.0 / (1.0 - std::pow(double(p.beta1), t)));
  auto c2 = float(1.0 / (1.0 - std::pow(double(p.beta2), t)));
  (a.g1 ? adam_from_loop<true>
        : adam_from_loop<false>)(a.w_out, a.w_in, a.g0, a.g1, m_out, m_in,
                                 v_out, v_in, a.n, p, c1, c2);
  return kernel_status::ok;
}

} // namespace troupe
