// The benchmarks' copy limit. Figures are never checked against a time,
// only for sense.
#define BOOST_TEST_MODULE memcpy_rate_tests
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "bench/memcpy_rate.hpp"

using namespace troupe::bench;

BOOST_AUTO_TEST_SUITE(memcpy_rate_tests)

BOOST_AUTO_TEST_CASE(a_rate_comes_back_even_for_no_time) {
  // No time asked: still at least one 64 MiB copy, timed.
  for (double seconds : {0.0, 0.05}) {
    auto gbps = memcpy_gbps(seconds);
    BOOST_TEST_MESSAGE(seconds << " s asked: " << gbps << " GB/s");
    BOOST_CHECK_GT(gbps, 0.0);
    BOOST_CHECK(std::isfinite(gbps));
  }
}

BOOST_AUTO_TEST_SUITE_END()
