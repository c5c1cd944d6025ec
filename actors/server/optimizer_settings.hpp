// Settings of the optimizer (INI group "optimizer"): which one, where it
// runs (on the shard servers or on the workers) and its hyper-parameters.
#pragma once

#include <cstdint>
#include <string>

#include <caf/error.hpp>

#include "kernels/optimizer.hpp"

namespace troupe {

/// Optimizer of the shard servers (INI group "optimizer"), or of the
/// workers (`on`). A pipeline stage without servers applies it itself
/// (sum is sgd there), with the schedule counted in its mini-batches.
struct optimizer_settings {
  /// sum (no optimizer: values += pushed sums), sgd, momentum, nesterov or
  /// adam.
  std::string name = "sum";
  /// Where the optimizer runs: server (state with the slices) or worker
  /// (servers only average each sync round's gradients; every worker
  /// applies the optimizer to its own replica). Default server.
  std::string on = "server";
  /// Step size. Default 0.1.
  float lr = 0.1f;
  /// Momentum of momentum and nesterov. Default 0.9.
  float momentum = 0.9f;
  /// Weight decay (L2 for the SGD family, decoupled for adam); 0 = off.
  float weight_decay = 0.0f;
  /// Adam's moment decays and epsilon.
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  /// Every lr_decay_steps updates of a slice (a stage's: mini-batches),
  /// lr *= lr_decay; 0 = constant.
  uint32_t lr_decay_steps = 0;
  /// Factor of the schedule, in (0, 1]. Default 1.
  float lr_decay = 1.0f;
};

/// Plain SGD at step size `lr`, the rest as the defaults.
inline optimizer_settings sgd_at(float lr) {
  optimizer_settings x;
  x.name = "sgd";
  x.lr = lr;
  return x;
}

/// Checks the settings; the error names the bad flag.
caf::error validate(const optimizer_settings& x);

/// What a node says of its optimizer when it joins (register_request):
/// "NAME@ON" and what the update reads, e.g. "momentum@server lr=0.05
/// weight-decay=0 decay=0.5/1400 momentum=0.9" (6 digits: settings that
/// close are one). Nodes that must agree compare it.
std::string optimizer_fingerprint(const optimizer_settings& x);

/// Where a fingerprint's optimizer runs: "server", "worker" or "".
std::string optimizer_place(const std::string& fingerprint);

/// Arrays of state optimizer `name` keeps beside each array: 1 (momentum,
/// nesterov: the velocity), 2 (adam: m, v), else 0 (sum, sgd).
size_t optimizer_state_arrays(const std::string& name);

/// One step of optimizer x.name (sgd, momentum, nesterov or adam) at `lr`
/// on the n floats of `w`, with gradient `g` / `divisor` and the array's
/// state (`m` for momentum and nesterov, `a` for adam): a shard server's
/// slice, or a pipeline stage's array.
kernel_status optimizer_step(const optimizer_settings& x, float lr, float* w,
                             const float* g, size_t n, float divisor,
                             momentum_state& m, adam_state& a);

} // namespace troupe
