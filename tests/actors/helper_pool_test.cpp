// Loops shared between a caller and helper threads.
#define BOOST_TEST_MODULE helper_pool_tests
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/helper_pool.hpp"

using namespace troupe;

BOOST_AUTO_TEST_SUITE(helper_pool_tests)

BOOST_AUTO_TEST_CASE(every_index_runs_exactly_once_per_loop) {
  helper_pool pool{3};
  for (size_t n : {0, 1, 2, 3, 7, 64, 1000}) {
    for (int round = 0; round < 20; ++round) {
      std::vector<std::atomic<int>> runs(n);
      pool.run(n, [&](size_t i) { ++runs[i]; });
      for (size_t i = 0; i < n; ++i)
        BOOST_REQUIRE_MESSAGE(runs[i] == 1, "n " << n << ", index " << i
                                                 << " ran " << runs[i]
                                                 << " times");
    }
  }
}

BOOST_AUTO_TEST_CASE(run_returns_only_after_every_call_returned) {
  helper_pool pool{2};
  for (int round = 0; round < 50; ++round) {
    std::vector<int> out(16, 0); // plain ints: run() must publish them
    pool.run(out.size(), [&](size_t i) {
      std::this_thread::yield();
      out[i] = int(i) + round;
    });
    for (size_t i = 0; i < out.size(); ++i)
      BOOST_REQUIRE_EQUAL(out[i], int(i) + round);
  }
}

BOOST_AUTO_TEST_CASE(a_helper_runs_items_beside_the_caller) {
  // Both items wait until both are running: only two threads at once can
  // finish this loop. A bounded wait turns a missing helper into a
  // failure instead of a hang.
  helper_pool pool{1};
  std::mutex mtx;
  std::condition_variable cv;
  int running = 0;
  bool together = true;
  std::vector<std::thread::id> ran_on(2);
  pool.run(2, [&](size_t i) {
    ran_on[i] = std::this_thread::get_id();
    std::unique_lock<std::mutex> guard{mtx};
    ++running;
    cv.notify_all();
    together &= cv.wait_for(guard, std::chrono::seconds{30},
                            [&] { return running == 2; });
  });
  BOOST_CHECK(together);
  BOOST_CHECK(ran_on[0] != ran_on[1]);
  BOOST_CHECK_EQUAL(pool.helped(), 1u);
}

BOOST_AUTO_TEST_CASE(run_waits_for_a_helper_that_outlasts_the_spin) {
  // The helper's item takes far longer than run() spins (50 us), so the
  // caller must go to sleep and be woken when the helper leaves; the
  // item's plain write must be visible after run() returns.
  helper_pool pool{1};
  auto caller = std::this_thread::get_id();
  std::mutex mtx;
  std::condition_variable cv;
  int running = 0;
  bool together = true, slow_done = false;
  for (int round = 0; round < 5; ++round) {
    running = 0;
    slow_done = false;
    pool.run(2, [&](size_t) {
      {
        std::unique_lock<std::mutex> guard{mtx};
        ++running;
        cv.notify_all();
        together &= cv.wait_for(guard, std::chrono::seconds{30},
                                [&] { return running >= 2; });
      }
      if (std::this_thread::get_id() != caller) {
        std::this_thread::sleep_for(std::chrono::milliseconds{20});
        slow_done = true;
      }
    });
    BOOST_REQUIRE(together);
    BOOST_REQUIRE_MESSAGE(slow_done, "run() returned before the helper's item"
                                     " (round "
                                         << round << ")");
  }
}

BOOST_AUTO_TEST_CASE(without_helpers_the_caller_runs_every_item) {
  helper_pool pool{0};
  auto me = std::this_thread::get_id();
  std::vector<size_t> order;
  pool.run(5, [&](size_t i) {
    BOOST_CHECK(std::this_thread::get_id() == me);
    order.push_back(i);
  });
  BOOST_CHECK(order == std::vector<size_t>({0, 1, 2, 3, 4}));
  BOOST_CHECK_EQUAL(pool.helped(), 0u);
  std::vector<size_t> serial;
  run_serially(3, [&](size_t i) { serial.push_back(i); });
  BOOST_CHECK(serial == std::vector<size_t>({0, 1, 2}));
}

BOOST_AUTO_TEST_SUITE_END()
