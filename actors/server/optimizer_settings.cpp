// Checks of the optimizer's settings.
#include "actors/server/optimizer_settings.hpp"

#include <cmath>
#include <sstream>

#include "messages/errors.hpp"

namespace troupe {

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
  // A float past 3.4e38 is infinite: it trained to nothing, or diverged
  // with a hint to lower the rate.
  if (!(x.lr >= 0.0f) || !std::isfinite(x.lr))
    return bad("--optimizer.lr must be finite and >= 0");
  if (!(x.momentum >= 0.0f && x.momentum < 1.0f))
    return bad("--optimizer.momentum must be in [0, 1)");
  if (!(x.weight_decay >= 0.0f) || !std::isfinite(x.weight_decay))
    return bad("--optimizer.weight-decay must be finite and >= 0");
  if (!(x.beta1 >= 0.0f && x.beta1 < 1.0f && x.beta2 >= 0.0f &&
        x.beta2 < 1.0f && x.eps > 0.0f) ||
      !std::isfinite(x.eps))
    return bad("--optimizer.beta1/beta2 must be in [0, 1), eps finite and >"
               " 0 (as a float: 1e-45 or more)");
  if (!(x.lr_decay > 0.0f && x.lr_decay <= 1.0f))
    return bad("--optimizer.lr-decay must be in (0, 1]");
  return caf::none;
}

std::string optimizer_fingerprint(const optimizer_settings& x) {
  std::ostringstream out;
  out << x.name << '@' << x.on;
  if (x.name != "sum") // sum reads nothing else
    out << " lr=" << x.lr << " weight-decay=" << x.weight_decay;
  if (x.name != "sum" && x.lr_decay_steps != 0 && x.lr_decay != 1.0f)
    out << " decay=" << x.lr_decay << '/' << x.lr_decay_steps;
  if (x.name == "momentum" || x.name == "nesterov")
    out << " momentum=" << x.momentum;
  if (x.name == "adam")
    out << " betas=" << x.beta1 << ',' << x.beta2 << " eps=" << x.eps;
  return out.str();
}

std::string optimizer_place(const std::string& fingerprint) {
  auto at = fingerprint.find('@');
  if (at == std::string::npos)
    return {};
  auto end = fingerprint.find(' ', at);
  return fingerprint.substr(at + 1, end == std::string::npos ? std::string::npos
                                                             : end - at - 1);
}

size_t optimizer_state_arrays(const std::string& name) {
  if (name == "momentum" || name == "nesterov")
    return 1;
  return name == "adam" ? 2 : 0;
}

kernel_status optimizer_step(const optimizer_settings& x, float lr, float* w,
                             const float* g, size_t n, float divisor,
                             momentum_state& m, adam_state& a) {
  if (x.name == "momentum" || x.name == "nesterov") {
    momentum_params p{lr, x.momentum, x.weight_decay, divisor};
    return x.name == "momentum" ? momentum_update_cpu(w, g, n, m, p)
                                : nesterov_update_cpu(w, g, n, m, p);
  }
  if (x.name == "adam")
    return adam_update_cpu(
        w, g, n, a,
        adam_params{lr, x.beta1, x.beta2, x.eps, x.weight_decay, divisor});
  return sgd_update_cpu(w, g, n, sgd_params{lr, x.weight_decay, divisor});
}

} // namespace troupe
