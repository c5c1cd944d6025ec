// The CPU backend of device_backend.hpp: a model of its own on OpenBLAS.
#include "kernels/device_backend.hpp"

#include <cstring>

#include "kernels/blas.hpp"

namespace troupe {

device_status copy_arrays(const std::vector<param_ref>& from,
                          const std::vector<param_ref>& to, const char* what) {
  if (from.size() != to.size())
    return {std::string{"bad input: "} + what + ": " +
            std::to_string(from.size()) + " arrays, the model has " +
            std::to_string(to.size())};
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i].size != to[i].size)
      return {std::string{"bad input: "} + what + ": " + from[i].name +
              " holds " + std::to_string(from[i].size) +
              " floats, the model's " + std::to_string(to[i].size)};
    std::memcpy(to[i].data, from[i].data, from[i].size * sizeof(float));
  }
  return {};
}

device_status device_backend::step_alone(const std::vector<param_ref>& ps,
                                         const float* x, const uint8_t* labels,
                                         size_t rows, float* loss,
                                         const std::vector<param_ref>& gs) {
  device_status st;
  if (!ps.empty() && !(st = set_parameters(ps)).ok())
    return st;
  if (!(st = compute_gradients(x, labels, rows, loss)).ok())
    return st;
  return gs.empty() ? device_status{} : get_gradients(gs);
}

std::shared_ptr<float> device_backend::host_floats(size_t n) {
  return std::shared_ptr<float>(new float[n], std::default_delete<float[]>());
}

namespace {

std::vector<device_array> as_arrays(const std::vector<param_ref>& refs) {
  std::vector<device_array> out;
  for (auto& r : refs)
    out.push_back({r.data, r.size});
  return out;
}

class cpu_backend final : public device_backend {
public:
  explicit cpu_backend(model m) : net_(std::move(m)) {}

  std::string describe() const override {
    return "cpu (" + blas_description() + ")";
  }

  device_status attach() override { return {}; }

  device_status set_parameters(const std::vector<param_ref>& ps) override {
    return copy_arrays(ps, net_.parameters(), "set_parameters");
  }

  device_status compute_gradients(const float* x, const uint8_t* labels,
                                  size_t rows, float* loss) override {
    auto st = net_.compute_gradients(x, labels, rows, loss);
    if (st != kernel_status::ok)
      return {std::string{"compute_gradients: "} + to_string(st)};
    return {};
  }

  device_status scale_gradients(float a) override {
    for (auto& g : net_.gradients())
      for (size_t i = 0; i < g.size; ++i)
        g.data[i] *= a;
    return {};
  }

  std::vector<device_array> parameter_arrays() override {
    return as_arrays(net_.parameters());
  }
  std::vector<device_array> gradient_arrays() override {
    return as_arrays(net_.gradients());
  }

  device_status sync() override { return {}; }

  device_status get_gradients(const std::vector<param_ref>& gs) override {
    return copy_arrays(net_.gradients(), gs, "get_gradients");
  }

private:
  model net_;
};

} // namespace

std::unique_ptr<device_backend> make_cpu_backend(const model& m) {
  // The spec again: whole layers, whatever row blocks `m` was cut into.
  auto net = model::from_spec(m.spec(), nullptr);
  if (!net)
    return nullptr; // cannot happen: m was built from it
  return std::make_unique<cpu_backend>(std::move(*net));
}

} // namespace troupe
