// Loops shared between a caller and helper threads.
#define BOOST_TEST_MODULE helper_pool_tests
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include "actors/base/helper_pool.hpp"

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

/// The scheduler state of thread `tid` of this process ('R' running, 'S'
/// sleeping, ...), from /proc; '?' if it cannot be read.
char thread_state(pid_t tid) {
  std::ifstream in{"/proc/self/task/" + std::to_string(tid) + "/stat"};
  std::string line;
  std::getline(in, line);
  auto end = line.rfind(')'); // the name may hold spaces and parentheses
  return end == std::string::npos || end + 2 >= line.size() ? '?'
                                                            : line[end + 2];
}

BOOST_AUTO_TEST_CASE(run_waits_for_a_helper_that_outlasts_the_spin) {
  // The helper's item ends only once the caller, its own item done, has
  // given up spinning and gone to sleep in run(): the caller must then be
  // woken when the helper leaves, and see the item's plain write. The
  // helper polls the caller's state, bounded, instead of sleeping a while.
  helper_pool pool{1};
  auto caller = std::this_thread::get_id();
  auto caller_tid = static_cast<pid_t>(::syscall(SYS_gettid));
  std::mutex mtx;
  std::condition_variable cv;
  for (int round = 0; round < 5; ++round) {
    int running = 0;
    bool together = true, slow_done = false;
    std::atomic<bool> caller_done{false}, saw_sleep{false};
    pool.run(2, [&](size_t) {
      {
        std::unique_lock<std::mutex> guard{mtx};
        ++running;
        cv.notify_all();
        together &= cv.wait_for(guard, std::chrono::seconds{30},
                                [&] { return running >= 2; });
      }
      if (std::this_thread::get_id() == caller) {
        caller_done = true;
        return;
      }
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds{10};
      while (!saw_sleep && std::chrono::steady_clock::now() < until) {
        saw_sleep = caller_done && thread_state(caller_tid) == 'S';
        std::this_thread::yield();
      }
      slow_done = true;
    });
    BOOST_REQUIRE(together);
    BOOST_REQUIRE_MESSAGE(slow_done, "run() returned before the helper's item"
                                     " (round "
                                         << round << ")");
    BOOST_CHECK_MESSAGE(saw_sleep, "the caller never slept in run() (round "
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
