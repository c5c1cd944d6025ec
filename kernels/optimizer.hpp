// Optimizers applied to one flat parameter slice: w (n floats) is updated in
// place from its gradient g (n floats). Per-slice state lives in a struct the
// caller owns, so a shard server keeps it next to its slice.
//
// Weight decay: SGD, momentum and Nesterov use L2 decay (weight_decay * w is
// added to the gradient, as PyTorch's SGD); Adam uses decoupled decay (AdamW:
// w shrinks by lr * weight_decay * w outside the adaptive step, since L2 in
// Adam would be rescaled per weight by the second-moment estimate).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/status.hpp"

namespace troupe {

/// Hyper-parameters of plain SGD.
struct sgd_params {
  float lr = 0.01f;          ///< step size, >= 0
  float weight_decay = 0.0f; ///< L2 coefficient, >= 0; 0 = off
  float grad_divisor = 1.0f; ///< g is divided by it first (k: the mean of a
                             ///< sum of k gradients), > 0
};

/// Hyper-parameters of SGD with (heavy-ball or Nesterov) momentum.
struct momentum_params {
  float lr = 0.01f;          ///< step size, >= 0
  float momentum = 0.9f;     ///< velocity decay mu, in [0, 1)
  float weight_decay = 0.0f; ///< L2 coefficient, >= 0; 0 = off
  float grad_divisor = 1.0f; ///< as sgd_params::grad_divisor
};

/// Hyper-parameters of Adam with decoupled weight decay (AdamW).
struct adam_params {
  float lr = 1e-3f;          ///< step size, >= 0
  float beta1 = 0.9f;        ///< first-moment decay, in [0, 1)
  float beta2 = 0.999f;      ///< second-moment decay, in [0, 1)
  float eps = 1e-8f;         ///< added to sqrt(v_hat), > 0
  float weight_decay = 0.0f; ///< decoupled coefficient, >= 0; 0 = off
  float grad_divisor = 1.0f; ///< as sgd_params::grad_divisor
};

/// State of one slice under momentum or Nesterov.
struct momentum_state {
  /// n floats; empty means all zero and is sized on the first update.
  std::vector<float> velocity;
};

/// State of one slice under Adam.
struct adam_state {
  std::vector<float> m; ///< first moment, n floats; empty = zeros
  std::vector<float> v; ///< second moment, n floats; empty = zeros
  uint64_t step = 0;    ///< updates applied so far (for bias correction)
};

/// The step size of a step schedule after `updates` updates:
/// lr * decay^floor(updates / every); every 0 = lr throughout. The shard
/// servers' (per slice) and the pipeline stages' (per mini-batch).
float decayed_lr(float lr, uint32_t every, float decay, uint64_t updates);

/// w -= lr * (g + weight_decay * w).
kernel_status sgd_update_cpu(float* w, const float* g, size_t n,
                             const sgd_params& p);

/// g' = g + weight_decay * w; v = mu * v + g'; w -= lr * v. A non-empty
/// velocity of another size than n gives shape_mismatch.
kernel_status momentum_update_cpu(float* w, const float* g, size_t n,
                                  momentum_state& st, const momentum_params& p);

/// Nesterov (PyTorch form): g' = g + weight_decay * w; v = mu * v + g';
/// w -= lr * (g' + mu * v). State as momentum_update_cpu.
kernel_status nesterov_update_cpu(float* w, const float* g, size_t n,
                                  momentum_state& st, const momentum_params& p);

/// t = ++step; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
/// w -= lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps)
///            + weight_decay * w).
/// Non-empty m or v of another size than n gives shape_mismatch.
kernel_status adam_update_cpu(float* w, const float* g, size_t n,
                              adam_state& st, const adam_params& p);

/// One step out of place: reads the values (`w_in`) and state before,
/// writes the values (`w_out`) and state after into other arrays, none
/// overlapping. The gradient is g0 + g1 (g1 null: g0 alone), added per
/// element first: the same operations per element as the in-place update
/// of the summed gradient, so the same bits. A shard server steps so from
/// the undo image it keeps anyway, instead of copying the values into it
/// (docs/atomic-pushes.md).
struct step_arrays {
  const float* w_in = nullptr;
  float* w_out = nullptr;
  const float* g0 = nullptr;
  const float* g1 = nullptr;
  size_t n = 0;
};
kernel_status sgd_step_from(const step_arrays& a, const sgd_params& p);
/// Velocity from `v_in` (n floats) into `v_out`.
kernel_status momentum_step_from(const step_arrays& a, const float* v_in,
                                 float* v_out, const momentum_params& p,
                                 bool nesterov);
/// Moments from `m_in`, `v_in` into `m_out`, `v_out`; `step` is the step
/// number after this one (adam_state::step once incremented).
kernel_status adam_step_from(const step_arrays& a, const float* m_in,
                             float* m_out, const float* v_in, float* v_out,
                             uint64_t step, const adam_params& p);

} // namespace troupe
