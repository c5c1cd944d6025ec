// The CUDA backend (cuda_backend.hpp): the device_backend calls on a
// cuda::device and a cuda_model.
#include "kernels/cuda/cuda_backend.hpp"

#include "kernels/cuda/cuda_device.hpp"
#include "kernels/cuda/cuda_model.hpp"

namespace troupe::cuda {

namespace {

class cuda_backend final : public device_backend {
public:
  cuda_backend(std::unique_ptr<device> dev, std::unique_ptr<cuda_model> net)
      : dev_(std::move(dev)), net_(std::move(net)) {}

  std::string describe() const override { return dev_->describe(); }

  device_status attach() override { return dev_->use(); }

  device_status set_parameters(const std::vector<param_ref>& ps) override {
    return net_->upload_parameters(ps);
  }

  device_status compute_gradients(const float* x, const uint8_t* labels,
                                  size_t rows, float* loss) override {
    return net_->compute_gradients(x, labels, rows, loss);
  }

  device_status step_alone(const std::vector<param_ref>& ps, const float* x,
                           const uint8_t* labels, size_t rows, float* loss,
                           const std::vector<param_ref>& gs) override {
    return net_->full_step(ps, x, labels, rows, loss, gs);
  }

  device_status scale_gradients(float a) override {
    return net_->scale_gradients(a);
  }

  std::vector<device_array> parameter_arrays() override {
    return net_->parameter_arrays();
  }
  std::vector<device_array> gradient_arrays() override {
    return net_->gradient_arrays();
  }

  device_status sync() override { return dev_->sync(); }

  device_status get_gradients(const std::vector<param_ref>& gs) override {
    return net_->download_gradients(gs);
  }

  std::shared_ptr<float> host_floats(size_t n) override {
    device_status st;
    if (auto p = dev_->use().ok() ? dev_->shared_pinned(n, st) : nullptr)
      return p;
    return device_backend::host_floats(n); // plain: staged, as before
  }

private:
  std::unique_ptr<device> dev_; // outlives net_, which holds its memory
  std::unique_ptr<cuda_model> net_;
};

} // namespace

std::unique_ptr<device_backend> make_cuda_backend(int ordinal, model& m,
                                                  device_status& st) {
  auto dev = device::open(ordinal, st);
  if (!dev)
    return nullptr;
  // Whole layers, whatever row blocks `m` was cut into.
  auto whole = model::from_spec(m.spec(), nullptr);
  if (!whole) {
    st = {"bad input: " + m.spec()};
    return nullptr;
  }
  auto net = cuda_model::load(*dev, *whole, st);
  if (!net)
    return nullptr;
  return std::make_unique<cuda_backend>(std::move(dev), std::move(net));
}

} // namespace troupe::cuda
