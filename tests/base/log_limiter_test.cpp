// A line a peer can repeat at will (one per malformed frame) is written at
// most 5 times per 10 s; the rest are counted and said with the next line
// let through.
#define BOOST_TEST_MODULE log_limiter_tests
#include <boost/test/unit_test.hpp>

#include <chrono>

#include "actors/base/log.hpp"

using namespace troupe;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(log_limiter_tests)

BOOST_AUTO_TEST_CASE(
    a_burst_passes_then_lines_are_counted_until_the_window_ends) {
  log_limiter lim{3, 10s};
  auto t0 = std::chrono::steady_clock::time_point{} + 1h;
  uint64_t held = 99;
  for (int i = 0; i < 3; ++i) {
    BOOST_CHECK(lim.admit(t0 + i * 1ms, held));
    BOOST_CHECK_EQUAL(held, 0u);
  }
  for (int i = 0; i < 1000; ++i) // a flood within the window
    BOOST_CHECK(!lim.admit(t0 + 5s, held));
  // The next window's first line comes with the count held back.
  BOOST_CHECK(lim.admit(t0 + 10s, held));
  BOOST_CHECK_EQUAL(held, 1000u);
  BOOST_CHECK(lim.admit(t0 + 10s, held));
  BOOST_CHECK_EQUAL(held, 0u); // said once
}

BOOST_AUTO_TEST_CASE(the_macro_writes_a_flood_as_a_few_lines_and_a_count) {
  set_log_level("warning");
  auto lines = std::make_shared<std::vector<std::string>>();
  set_log_observer(
      [lines](log_level, const std::string&, const std::string& what) {
        lines->push_back(what);
      });
  for (int i = 0; i < 20000; ++i)
    TROUPE_LOG_LIMITED(warning, "test", "malformed frame ", i);
  set_log_observer({});
  BOOST_CHECK_EQUAL(lines->size(), 5u); // the rest wait for a next window
  BOOST_CHECK_EQUAL(lines->front(), "malformed frame 0");
}

BOOST_AUTO_TEST_SUITE_END()
