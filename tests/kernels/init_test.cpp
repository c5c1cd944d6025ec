// Seeded initialisers: deterministic per seed, with the right statistics.
#define BOOST_TEST_MODULE init_tests
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/init.hpp"

using namespace troupe;

namespace {

struct moments {
  double mean = 0.0, std_dev = 0.0;
};

moments moments_of(const std::vector<float>& xs) {
  moments m;
  for (auto x : xs)
    m.mean += x;
  m.mean /= double(xs.size());
  for (auto x : xs)
    m.std_dev += (x - m.mean) * (x - m.mean);
  m.std_dev = std::sqrt(m.std_dev / double(xs.size() - 1));
  return m;
}

constexpr size_t samples = 200000;

} // namespace

BOOST_AUTO_TEST_SUITE(init_tests)

BOOST_AUTO_TEST_CASE(the_same_seed_gives_the_same_values_and_another_differs) {
  std::vector<float> a(1000), b(1000), c(1000);
  BOOST_REQUIRE(he_normal_cpu(a.data(), a.size(), 64, 42) == kernel_status::ok);
  he_normal_cpu(b.data(), b.size(), 64, 42);
  he_normal_cpu(c.data(), c.size(), 64, 43);
  BOOST_TEST(a == b, boost::test_tools::per_element());
  BOOST_TEST(a != c);
  xavier_uniform_cpu(a.data(), a.size(), 64, 10, 7);
  xavier_uniform_cpu(b.data(), b.size(), 64, 10, 7);
  xavier_uniform_cpu(c.data(), c.size(), 64, 10, 8);
  BOOST_TEST(a == b, boost::test_tools::per_element());
  BOOST_TEST(a != c);
}

BOOST_AUTO_TEST_CASE(he_normal_has_mean_zero_and_std_sqrt_two_over_fan_in) {
  std::vector<float> w(samples);
  BOOST_REQUIRE(he_normal_cpu(w.data(), w.size(), 50, 1) == kernel_status::ok);
  auto m = moments_of(w);
  double want_std = std::sqrt(2.0 / 50.0); // 0.2
  // Standard errors: std / sqrt(n) ~ 4.5e-4 for the mean, ~0.16% for std.
  BOOST_TEST(std::abs(m.mean) < 5 * want_std / std::sqrt(double(samples)));
  BOOST_TEST(m.std_dev == want_std, boost::test_tools::tolerance(0.01));
  // A normal has ~4.55% of its mass beyond 2 std; a uniform has none.
  auto tails = std::count_if(w.begin(), w.end(), [want_std](float x) {
    return std::abs(x) > 2 * want_std;
  });
  BOOST_TEST(double(tails) / samples == 0.0455,
             boost::test_tools::tolerance(0.05));
}

BOOST_AUTO_TEST_CASE(xavier_uniform_stays_within_its_bound_and_fills_it) {
  std::vector<float> w(samples);
  size_t fan_in = 300, fan_out = 100;
  BOOST_REQUIRE(xavier_uniform_cpu(w.data(), w.size(), fan_in, fan_out, 3) ==
                kernel_status::ok);
  double a = std::sqrt(6.0 / double(fan_in + fan_out));
  auto [lo, hi] = std::minmax_element(w.begin(), w.end());
  BOOST_TEST(*lo >= -a);
  BOOST_TEST(*hi <= a);
  BOOST_TEST(*lo < -0.999 * a);
  BOOST_TEST(*hi > 0.999 * a);
  auto m = moments_of(w);
  BOOST_TEST(std::abs(m.mean) < 5 * a / std::sqrt(3.0 * samples));
  // U(-a, a) has std a / sqrt(3) = sqrt(2 / (fan_in + fan_out)).
  BOOST_TEST(m.std_dev == a / std::sqrt(3.0),
             boost::test_tools::tolerance(0.01));
}

BOOST_AUTO_TEST_CASE(zero_fans_and_null_pointers_are_bad_input) {
  float w[4];
  BOOST_CHECK(he_normal_cpu(w, 4, 0, 1) == kernel_status::bad_input);
  BOOST_CHECK(he_normal_cpu(nullptr, 4, 3, 1) == kernel_status::bad_input);
  BOOST_CHECK(xavier_uniform_cpu(w, 4, 0, 0, 1) == kernel_status::bad_input);
  BOOST_CHECK(xavier_uniform_cpu(nullptr, 0, 2, 2, 1) == kernel_status::ok);
}

BOOST_AUTO_TEST_SUITE_END()
