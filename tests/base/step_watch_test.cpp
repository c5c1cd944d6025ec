// The watch over a worker's own work (actors/base/step_watch.hpp): work
// past its bound ends the process with exit_failed and one line naming
// it, work within it does not, and SIGUSR1 stalls the next watched work.
// Each case runs in a forked child, since the watch ends its process.
#define BOOST_TEST_MODULE step_watch
#include <boost/test/unit_test.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

#include "actors/base/exit_codes.hpp"
#include "actors/base/step_watch.hpp"
#include "actors/worker/worker.hpp"
#include "tests/forked_child.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_CASE(work_past_its_bound_ends_the_process_naming_it) {
  auto r = in_child([] {
    start_step_watch(300ms);
    { watched_work w{"worker 0: step 1"}; } // within: nothing
    watched_work w{"worker 1: step 12"};
    std::this_thread::sleep_for(15s); // hung, as far as the watch knows
  });
  BOOST_CHECK_EQUAL(r.code, exit_failed);
  BOOST_CHECK_MESSAGE(r.err.find("*** worker 1: step 12 has run for ") == 0,
                      r.err);
  BOOST_CHECK_MESSAGE(
      r.err.find(", past its bound of 300 ms") != std::string::npos, r.err);
  BOOST_CHECK_MESSAGE(r.err.find("its agent restarts it") != std::string::npos,
                      r.err);
}

BOOST_AUTO_TEST_CASE(work_within_its_bound_and_time_between_work_are_fine) {
  auto r = in_child([] {
    start_step_watch(400ms);
    for (int i = 0; i < 5; ++i) {
      watched_work w{"step"};
      std::this_thread::sleep_for(100ms);
    }
    std::this_thread::sleep_for(1s); // waiting on others is not work
    start_step_watch(50ms);          // the first watch counts
    if (step_watch_limit() != 400ms)
      std::_Exit(7);
    watched_work w{"step"};
    std::this_thread::sleep_for(200ms);
  });
  BOOST_CHECK_MESSAGE(r.code == 0, r.code << ": " << r.err);
  BOOST_CHECK_MESSAGE(r.err.empty(), r.err);
}

BOOST_AUTO_TEST_CASE(the_oldest_of_several_works_is_the_one_named) {
  auto r = in_child([] {
    start_step_watch(500ms);
    std::thread old{[] {
      watched_work w{"stage 1: F0 of mini-batch 3"};
      std::this_thread::sleep_for(15s);
    }};
    for (;;) { // younger work that keeps ending does not hide it
      watched_work w{"stage 1: B0 of mini-batch 3"};
      std::this_thread::sleep_for(50ms);
    }
  });
  BOOST_CHECK_EQUAL(r.code, exit_failed);
  BOOST_CHECK_MESSAGE(
      r.err.find("*** stage 1: F0 of mini-batch 3 has run for ") == 0, r.err);
}

BOOST_AUTO_TEST_CASE(sigusr1_stalls_the_next_watched_work_which_is_ended) {
  auto r = in_child([] {
    start_step_watch(300ms);
    ::raise(SIGUSR1); // handled (before raise returns): the process goes on
    watched_work w{"worker 1: step 4"}; // never returns
  });
  BOOST_CHECK_EQUAL(r.code, exit_failed);
  BOOST_CHECK_MESSAGE(r.err.find("never ends") != std::string::npos, r.err);
  BOOST_CHECK_MESSAGE(r.err.find("*** worker 1: step 4 has run for ") !=
                          std::string::npos,
                      r.err);
}

BOOST_AUTO_TEST_CASE(no_watch_means_no_bound) {
  auto r = in_child([] {
    start_step_watch(0ms);
    if (step_watch_limit() != 0ms)
      std::_Exit(7);
    watched_work w{"step"};
    std::this_thread::sleep_for(500ms);
  });
  BOOST_CHECK_MESSAGE(r.code == 0, r.code << ": " << r.err);
}

BOOST_AUTO_TEST_CASE(the_default_bound_is_half_what_the_others_wait) {
  // A hung worker must end before the others give up on it, or they end
  // instead of it.
  BOOST_CHECK_EQUAL(step_bound(0, 10000).count(), 5000);
  BOOST_CHECK_EQUAL(step_bound(0, 1).count(), 1);
  BOOST_CHECK_EQUAL(step_bound(3000, 10000).count(), 3000);
  BOOST_CHECK_EQUAL(step_bound(60000, 10000).count(), 60000);
  // Sync and ssp: the others' pulls wait a request timeout for its push;
  // async: only the end barrier waits for it.
  kv_settings kv;
  kv.request_timeout_ms = 8000;
  worker_options opts;
  for (auto mode : {"sync", "ssp:2"}) {
    kv.mode = mode;
    BOOST_CHECK_EQUAL(step_bound_of(opts, kv).count(), 4000);
  }
  kv.mode = "async";
  BOOST_CHECK_EQUAL(step_bound_of(opts, kv).count(),
                    opts.barrier_timeout_ms / 2);
  opts.step_timeout_ms = 700; // given: as it is
  BOOST_CHECK_EQUAL(step_bound_of(opts, kv).count(), 700);
}

BOOST_AUTO_TEST_CASE(a_signal_during_work_stalls_the_next_work_and_only_one) {
  auto r = in_child([] {
    start_step_watch(1000ms);
    {
      watched_work w{"worker 1: step 3"};
      ::raise(SIGUSR1); // the step under way goes on
    }
    // Its stall takes the signal, which its line says: read here (stderr
    // to a pipe of our own meanwhile) before more work starts.
    int own[2];
    if (::pipe(own) != 0)
      std::_Exit(7);
    ::fcntl(own[0], F_SETFL, O_NONBLOCK);
    int to_parent = ::dup(STDERR_FILENO);
    ::dup2(own[1], STDERR_FILENO);
    std::thread stalled{[] { watched_work w{"worker 1: step 4"}; }};
    std::string said;
    bool stalls = read_until(own[0], said, "step 4 never ends");
    ::dup2(to_parent, STDERR_FILENO);
    std::fputs(said.c_str(), stderr);
    if (!stalls)
      std::_Exit(8);
    for (int i = 0; i < 3; ++i) { // one stall per signal: these end
      watched_work w{"worker 1: its finish"};
    }
    std::fputs("after\n", stderr);
    stalled.join(); // never: the watch ends the process first
  });
  BOOST_CHECK_EQUAL(r.code, exit_failed);
  BOOST_CHECK_MESSAGE(r.err.find("step 4 never ends") != std::string::npos &&
                          r.err.find("after\n") != std::string::npos &&
                          r.err.find("*** worker 1: step 4 has run for ") !=
                              std::string::npos,
                      r.err);
  BOOST_CHECK_MESSAGE(r.err.find("step 3 never ends") == std::string::npos,
                      r.err);
}

BOOST_AUTO_TEST_CASE(time_the_process_was_stopped_is_not_work) {
  // A worker stopped (SIGSTOP) and continued mid-step is no hung one: the
  // watch, stopped too, wakes late and counts that time out.
  auto r = in_child(
      [] {
        // 2 s of work, 1.5 s of it stopped: 0.5 s run, within the bound,
        // and it goes on after the stop (the watch looks then).
        start_step_watch(1000ms);
        watched_work w{"worker 0: step 9"};
        std::fputs("in step 9\n", stderr);
        std::this_thread::sleep_for(2000ms);
      },
      [](pid_t child, const auto& says) {
        if (!says("in step 9\n")) // else it is killed by the bound below
          return;
        ::kill(child, SIGSTOP);
        std::this_thread::sleep_for(1500ms);
        ::kill(child, SIGCONT);
      });
  BOOST_CHECK_MESSAGE(r.code == 0, r.code << ": " << r.err);
}
