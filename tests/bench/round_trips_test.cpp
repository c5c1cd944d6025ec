// The benchmarks' small-message limit: raw round trips between two
// processes. Figures are never checked against a time, only for sense.
#define BOOST_TEST_MODULE round_trips_tests
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>

#include <cerrno>

#include "bench/round_trips.hpp"

using namespace troupe::bench;

namespace {

/// True if this process has no child left, running or unreaped.
bool no_children() {
  errno = 0;
  return ::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD;
}

} // namespace

BOOST_AUTO_TEST_SUITE(round_trips_tests)

BOOST_AUTO_TEST_CASE(every_socket_and_depth_gives_a_rate_and_reaps_its_echo) {
  for (auto kind : {rt_socket::unix_pair, rt_socket::tcp})
    for (size_t depth : {1, 8, 64}) {
      auto r = round_trips_per_s(kind, depth, 0.02);
      BOOST_TEST_MESSAGE("kind " << static_cast<int>(kind) << ", depth "
                                 << depth << ": " << r.per_s << "/s");
      BOOST_CHECK_MESSAGE(r.why.empty(), r.why);
      BOOST_CHECK_GT(r.per_s, 0.0);
      BOOST_CHECK(no_children());
    }
}

BOOST_AUTO_TEST_CASE(a_depth_out_of_range_is_refused_without_a_child) {
  for (size_t depth : {0, 65}) {
    auto r = round_trips_per_s(rt_socket::unix_pair, depth, 0.02);
    BOOST_CHECK_LT(r.per_s, 0.0);
    BOOST_CHECK_EQUAL(r.why, "depth must be 1..64");
    BOOST_CHECK(no_children());
  }
}

BOOST_AUTO_TEST_SUITE_END()
