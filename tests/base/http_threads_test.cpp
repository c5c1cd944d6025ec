// The stacks threads ask for (actors/base/http_threads.hpp): a size below
// 1 MiB is raised to it (civetweb asks 100 KiB, of which OpenBLAS's
// thread-local storage takes 60), a larger one is kept.
#define BOOST_TEST_MODULE http_threads_tests
#include <boost/test/unit_test.hpp>

#include <pthread.h>

#include <string>
#include <vector>

#include "actors/base/http_threads.hpp"

using namespace troupe;

BOOST_AUTO_TEST_CASE(a_small_stack_asked_for_is_raised_and_a_large_one_kept) {
  pthread_attr_t a;
  BOOST_REQUIRE_EQUAL(pthread_attr_init(&a), 0);
  BOOST_REQUIRE_EQUAL(pthread_attr_setstacksize(&a, 100 * 1024), 0);
  size_t got = 0;
  BOOST_REQUIRE_EQUAL(pthread_attr_getstacksize(&a, &got), 0);
  BOOST_CHECK_EQUAL(got, least_thread_stack);
  BOOST_REQUIRE_EQUAL(pthread_attr_setstacksize(&a, size_t{8} << 20), 0);
  BOOST_REQUIRE_EQUAL(pthread_attr_getstacksize(&a, &got), 0);
  BOOST_CHECK_EQUAL(got, size_t{8} << 20);
  // Below the least a thread may have at all: raised too, not refused.
  BOOST_CHECK_EQUAL(pthread_attr_setstacksize(&a, 1), 0);
  pthread_attr_destroy(&a);
}

BOOST_AUTO_TEST_CASE(both_servers_run_four_threads_and_drop_half_requests) {
  auto opts = http_options("127.0.0.1:9100");
  BOOST_CHECK(opts == (std::vector<std::string>{
                          "listening_ports", "127.0.0.1:9100", "num_threads",
                          "4", "request_timeout_ms", "3000"}));
}
