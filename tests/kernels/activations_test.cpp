// relu forward and backward against plain reference loops.
#define BOOST_TEST_MODULE activations_tests
#include <boost/test/unit_test.hpp>

#include <vector>

#include "kernels/activations.hpp"

using namespace troupe;

BOOST_AUTO_TEST_SUITE(activations_tests)

BOOST_AUTO_TEST_CASE(relu_forward_clamps_negatives_to_zero) {
  std::vector<float> x{-2.0f, -0.0f, 0.0f, 1e-30f, 3.5f, -1e-30f};
  std::vector<float> y(x.size(), -7.0f);
  BOOST_REQUIRE(relu_forward_cpu(x.data(), y.data(), x.size()) ==
                kernel_status::ok);
  for (size_t i = 0; i < x.size(); ++i)
    BOOST_TEST(y[i] == (x[i] > 0.0f ? x[i] : 0.0f));
}

BOOST_AUTO_TEST_CASE(relu_forward_works_in_place) {
  std::vector<float> x{-1.0f, 2.0f, -3.0f, 4.0f};
  BOOST_REQUIRE(relu_forward_cpu(x.data(), x.data(), x.size()) ==
                kernel_status::ok);
  std::vector<float> want{0.0f, 2.0f, 0.0f, 4.0f};
  BOOST_TEST(x == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(
    relu_backward_passes_gradient_only_where_input_was_positive) {
  std::vector<float> x{-1.0f, 0.0f, 0.5f, 2.0f};
  std::vector<float> dy{10.0f, 20.0f, 30.0f, 40.0f};
  std::vector<float> dx(4, -1.0f);
  BOOST_REQUIRE(relu_backward_cpu(x.data(), dy.data(), dx.data(), 4) ==
                kernel_status::ok);
  std::vector<float> want{0.0f, 0.0f, 30.0f, 40.0f}; // 0 at the kink
  BOOST_TEST(dx == want, boost::test_tools::per_element());
  // In place, and with the forward output instead of the input.
  std::vector<float> y(4);
  relu_forward_cpu(x.data(), y.data(), 4);
  BOOST_REQUIRE(relu_backward_cpu(y.data(), dy.data(), dy.data(), 4) ==
                kernel_status::ok);
  BOOST_TEST(dy == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(null_pointers_are_bad_input_unless_empty) {
  float x = 1.0f;
  BOOST_CHECK(relu_forward_cpu(nullptr, &x, 1) == kernel_status::bad_input);
  BOOST_CHECK(relu_backward_cpu(&x, nullptr, &x, 1) ==
              kernel_status::bad_input);
  BOOST_CHECK(relu_forward_cpu(nullptr, nullptr, 0) == kernel_status::ok);
}

BOOST_AUTO_TEST_SUITE_END()
