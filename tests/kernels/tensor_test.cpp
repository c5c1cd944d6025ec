// The minimal host tensor: shapes, the matrix view and resizing.
#define BOOST_TEST_MODULE tensor_tests
#include <boost/test/unit_test.hpp>

#include <limits>
#include <vector>

#include "kernels/tensor.hpp"

using namespace troupe;

BOOST_AUTO_TEST_SUITE(tensor_tests)

BOOST_AUTO_TEST_CASE(a_default_tensor_is_empty_with_shape_zero) {
  tensor t;
  BOOST_TEST(t.shape() == std::vector<size_t>{0});
  BOOST_TEST(t.size() == 0u);
  BOOST_TEST(t.rows() == 0u);
}

BOOST_AUTO_TEST_CASE(a_shaped_tensor_is_zero_filled_and_reads_as_a_matrix) {
  tensor t({5, 28, 28});
  BOOST_TEST(t.rank() == 3u);
  BOOST_TEST(t.size() == 5u * 784u);
  BOOST_TEST(t.rows() == 5u);
  BOOST_TEST(t.cols() == 784u);
  for (size_t i = 0; i < t.size(); ++i)
    BOOST_REQUIRE(t[i] == 0.0f);
  tensor v({7});
  BOOST_TEST(v.rows() == 7u);
  BOOST_TEST(v.cols() == 1u);
}

BOOST_AUTO_TEST_CASE(values_are_kept_in_row_major_order) {
  tensor t({2, 3}, {1, 2, 3, 4, 5, 6});
  // Element (r, c) is at r * cols + c.
  BOOST_TEST(t[1 * t.cols() + 0] == 4.0f);
  BOOST_TEST(t.data()[2] == 3.0f);
  t.data()[5] = 9.0f;
  BOOST_TEST(t.values().back() == 9.0f);
}

BOOST_AUTO_TEST_CASE(resize_keeps_leading_values_and_zero_fills_the_rest) {
  tensor t({2, 2}, {1, 2, 3, 4});
  t.resize({3, 2});
  BOOST_TEST(t.shape() == (std::vector<size_t>{3, 2}));
  std::vector<float> want{1, 2, 3, 4, 0, 0};
  BOOST_TEST(t.values() == want, boost::test_tools::per_element());
  t.resize({1, 3});
  BOOST_TEST(t.size() == 3u);
  BOOST_TEST(t[2] == 3.0f);
}

BOOST_AUTO_TEST_CASE(shape_size_is_the_product_of_the_dims) {
  BOOST_TEST(shape_size({}) == 1u);
  BOOST_TEST(shape_size({4, 0, 3}) == 0u);
  BOOST_TEST(shape_size({2, 3, 4}) == 24u);
}

BOOST_AUTO_TEST_CASE(all_finite_finds_any_nan_or_infinity_anywhere) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs(67, 1.0f); // not a multiple of any vector width
  xs[3] = std::numeric_limits<float>::max();
  xs[4] = -std::numeric_limits<float>::max();
  xs[5] = std::numeric_limits<float>::denorm_min();
  xs[6] = -0.0f;
  BOOST_CHECK(all_finite(xs.data(), xs.size()));
  BOOST_CHECK(all_finite(xs.data(), 0));
  for (float bad : {nan, -nan, inf, -inf})
    for (size_t at : {size_t{0}, size_t{31}, size_t{66}}) {
      auto ys = xs;
      ys[at] = bad;
      BOOST_CHECK_MESSAGE(!all_finite(ys.data(), ys.size()),
                          bad << " at " << at);
      BOOST_CHECK(all_finite(ys.data(), at)); // before it: fine
    }
}

BOOST_AUTO_TEST_SUITE_END()
