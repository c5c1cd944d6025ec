// The CPU's stage_backend: stage_model's calls, their kernel_status said
// in words.
#include "kernels/stage_backend.hpp"

#include "kernels/blas.hpp"
#include "kernels/stage.hpp"

namespace troupe {

namespace {

/// A kernel's refusal, in words: "bad input: forward: shape_mismatch".
device_status said(kernel_status s, const char* what) {
  if (s == kernel_status::ok)
    return {};
  return {std::string{"bad input: "} + what + ": " + to_string(s)};
}

class cpu_stage final : public stage_backend {
public:
  cpu_stage(model& m, size_t first, size_t last) : s_(m, first, last) {}

  std::string describe() const override {
    return "cpu (" + blas_description() + ")";
  }
  size_t input_size() const override { return s_.input_size(); }
  size_t output_size() const override { return s_.output_size(); }
  bool is_last() const override { return s_.is_last(); }
  size_t first_layer() const override { return s_.first_layer(); }

  // The stage's own arrays: nothing to copy.
  std::vector<param_ref> parameters() override { return s_.parameters(); }
  device_status upload_parameters() override { return {}; }
  std::vector<param_ref> gradients() override { return s_.gradients(); }
  device_status download_gradients() override { return {}; }
  device_status zero_gradients() override {
    s_.zero_gradients();
    return {};
  }

  device_status forward(uint32_t micro, const float* x, size_t rows) override {
    return said(s_.forward(micro, x, rows), "forward");
  }
  device_status infer(const float* x, size_t rows, tensor& out) override {
    return said(s_.infer(x, rows, out), "infer");
  }
  void drop_micro_batches() override { s_.drop_micro_batches(); }
  const tensor& output(uint32_t micro) const override {
    return s_.output(micro);
  }
  device_status backward_input(uint32_t micro, const float* dy,
                               bool want_dx) override {
    return said(s_.backward_input(micro, dy, want_dx), "backward_input");
  }
  const tensor& input_grad() const override { return s_.input_grad(); }
  device_status backward_weight(uint32_t micro) override {
    return said(s_.backward_weight(micro), "backward_weight");
  }
  size_t held() const override { return s_.held(); }
  size_t held_bytes() const override { return s_.held_bytes(); }

private:
  stage_model s_;
};

} // namespace

std::unique_ptr<stage_backend> make_cpu_stage(model& m, size_t first,
                                              size_t last) {
  return std::make_unique<cpu_stage>(m, first, last);
}

} // namespace troupe
