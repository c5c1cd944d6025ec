// Softmax cross-entropy and accuracy against plain reference loops.
#define BOOST_TEST_MODULE loss_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/loss.hpp"
#include "kernels/random.hpp"

using namespace troupe;

namespace {

/// Reference: softmax by the textbook formula in long double (no shift).
void reference_xent(const std::vector<float>& z, const std::vector<uint8_t>& y,
                    size_t classes, double& loss, std::vector<double>& grad) {
  size_t batch = y.size();
  loss = 0.0;
  grad.assign(z.size(), 0.0);
  for (size_t i = 0; i < batch; ++i) {
    long double sum = 0.0L;
    for (size_t j = 0; j < classes; ++j)
      sum += std::exp((long double)z[i * classes + j]);
    for (size_t j = 0; j < classes; ++j) {
      auto p = std::exp((long double)z[i * classes + j]) / sum;
      grad[i * classes + j] = double((p - (j == y[i])) / batch);
    }
    loss -=
        double(std::log(std::exp((long double)z[i * classes + y[i]]) / sum));
  }
  loss /= double(batch);
}

} // namespace

BOOST_AUTO_TEST_SUITE(loss_tests)

BOOST_AUTO_TEST_CASE(loss_and_gradient_match_a_reference_loop) {
  size_t batch = 9, classes = 10;
  std::mt19937_64 rng{7};
  std::vector<float> z(batch * classes);
  for (auto& v : z)
    v = float(8.0 * uniform01(rng) - 4.0);
  std::vector<uint8_t> y(batch);
  for (auto& v : y)
    v = uint8_t(uniform_below(rng, classes));
  float loss = -1.0f;
  std::vector<float> grad(z.size(), -1.0f);
  BOOST_REQUIRE(softmax_xent_cpu(z.data(), y.data(), batch, classes, &loss,
                                 grad.data()) == kernel_status::ok);
  double want_loss = 0.0;
  std::vector<double> want_grad;
  reference_xent(z, y, classes, want_loss, want_grad);
  BOOST_TEST(loss == want_loss, boost::test_tools::tolerance(1e-5));
  for (size_t i = 0; i < z.size(); ++i)
    BOOST_TEST(std::abs(grad[i] - want_grad[i]) < 1e-6);
}

BOOST_AUTO_TEST_CASE(uniform_logits_cost_log_of_the_class_count) {
  std::vector<float> z(3 * 4, 0.25f);
  std::vector<uint8_t> y{0, 1, 3};
  float loss = 0.0f;
  BOOST_REQUIRE(softmax_xent_cpu(z.data(), y.data(), 3, 4, &loss, nullptr) ==
                kernel_status::ok);
  BOOST_TEST(loss == std::log(4.0f), boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(huge_logits_stay_finite) {
  // Without the max shift, exp(1000) overflows to inf.
  std::vector<float> z{1000.0f, 0.0f, -1000.0f, 1000.0f, 999.0f, 0.0f};
  std::vector<uint8_t> y{2, 1};
  float loss = 0.0f;
  std::vector<float> grad(6);
  BOOST_REQUIRE(softmax_xent_cpu(z.data(), y.data(), 2, 3, &loss,
                                 grad.data()) == kernel_status::ok);
  // Row 0 costs 2000, row 1 log(1 + e) - 0 ~ 1.3133.
  double want = (2000.0 + std::log(1.0 + std::exp(1.0))) / 2.0;
  BOOST_TEST(loss == want, boost::test_tools::tolerance(1e-6));
  for (auto g : grad)
    BOOST_TEST(std::isfinite(g));
  BOOST_TEST(grad[0] == 0.5f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(grad[2] == -0.5f, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(each_gradient_row_sums_to_zero) {
  std::vector<float> z{0.1f, -2.0f, 3.0f, 0.7f, 0.7f, -0.7f};
  std::vector<uint8_t> y{0, 2};
  float loss = 0.0f;
  std::vector<float> grad(6);
  softmax_xent_cpu(z.data(), y.data(), 2, 3, &loss, grad.data());
  for (size_t i = 0; i < 2; ++i)
    BOOST_TEST(grad[3 * i] + grad[3 * i + 1] + grad[3 * i + 2] == 0.0f,
               boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(labels_out_of_range_and_empty_batches_are_bad_input) {
  std::vector<float> z(6, 0.0f);
  std::vector<uint8_t> y{0, 3};
  float loss = 0.0f;
  size_t correct = 0;
  BOOST_CHECK(softmax_xent_cpu(z.data(), y.data(), 2, 3, &loss, nullptr) ==
              kernel_status::bad_input);
  BOOST_CHECK(accuracy_count_cpu(z.data(), y.data(), 2, 3, &correct) ==
              kernel_status::bad_input);
  BOOST_CHECK(softmax_xent_cpu(z.data(), y.data(), 0, 3, &loss, nullptr) ==
              kernel_status::bad_input);
  BOOST_CHECK(softmax_xent_cpu(z.data(), y.data(), 1, 3, nullptr, nullptr) ==
              kernel_status::bad_input);
}

BOOST_AUTO_TEST_CASE(accuracy_counts_rows_whose_argmax_is_the_label) {
  std::vector<float> z{
      0.1f, 0.9f, 0.0f, // argmax 1
      2.0f, 1.0f, 0.0f, // argmax 0
      0.5f, 0.5f, 0.1f, // tie: the first, 0
      0.0f, 0.0f, 3.0f, // argmax 2
  };
  std::vector<uint8_t> y{1, 2, 0, 2};
  size_t correct = 99;
  BOOST_REQUIRE(accuracy_count_cpu(z.data(), y.data(), 4, 3, &correct) ==
                kernel_status::ok);
  BOOST_TEST(correct == 3u);
}

BOOST_AUTO_TEST_SUITE_END()
