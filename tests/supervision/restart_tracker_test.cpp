// The process supervisor's restart policy with made-up times, and how an
// exit reads (the supervisor with real processes: supervisor_test.cpp).
#define BOOST_TEST_MODULE restart_tracker_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <csignal>
#include <string>

#include <spawn.h>
#include <sys/wait.h>

#include "actors/base/exit_codes.hpp"
#include "actors/supervision/supervisor.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

extern char** environ;

namespace {

/// Linux waitpid statuses, for the tracker fed without processes.
int exited_with(int code) {
  return code << 8;
}
int killed_by(int sig) {
  return sig;
}

/// The waitpid status of `/bin/sh -c script`.
int status_of_shell(const char* script) {
  const char* argv[] = {"/bin/sh", "-c", script, nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, "/bin/sh", nullptr, nullptr,
                       const_cast<char**>(argv), environ);
  BOOST_REQUIRE_EQUAL(rc, 0);
  int st = 0;
  BOOST_REQUIRE_EQUAL(waitpid(pid, &st, 0), pid);
  return st;
}

const auto t0 = steady_clock::time_point{} + 1000s;

} // namespace

// -- restart_tracker ----------------------------------------------------------

BOOST_AUTO_TEST_SUITE(restart_tracker_tests)

BOOST_AUTO_TEST_CASE(encoded_statuses_match_linux) {
  BOOST_TEST(WIFEXITED(exited_with(3)));
  BOOST_TEST(WEXITSTATUS(exited_with(3)) == 3);
  BOOST_TEST(WIFSIGNALED(killed_by(9)));
  BOOST_TEST(WTERMSIG(killed_by(9)) == 9);
}

BOOST_AUTO_TEST_CASE(normal_exit_is_done) {
  restart_tracker t{restart_policy{}};
  BOOST_TEST(t.on_exit(t0, exited_with(0)).kind ==
             restart_tracker::decision::done);
  // Also after failures: a clean exit is never restarted.
  BOOST_TEST(t.on_exit(t0 + 1s, exited_with(1)).kind ==
             restart_tracker::decision::restart);
  BOOST_TEST(t.on_exit(t0 + 2s, exited_with(0)).kind ==
             restart_tracker::decision::done);
}

BOOST_AUTO_TEST_CASE(a_job_whose_check_failed_is_done_not_restarted) {
  // At bc0f027 a counter worker whose sums differed exited 1 at the job's
  // end, and was restarted to run the end again, four times.
  restart_tracker t{restart_policy{}};
  BOOST_TEST(t.on_exit(t0, exited_with(exit_job_failed)).kind ==
             restart_tracker::decision::done);
}

BOOST_AUTO_TEST_CASE(a_stage_that_cannot_go_on_is_done_not_restarted) {
  // A pipeline stage whose neighbour stayed away past --pipeline.stage-wait-ms
  // exits exit_job_stuck: restarted, it would wait for the same neighbour
  // again, and an agent restarting it so, minutes apart, never gave it up.
  restart_tracker t{restart_policy{}};
  BOOST_TEST(t.on_exit(t0, exited_with(exit_job_stuck)).kind ==
             restart_tracker::decision::done);
}

BOOST_AUTO_TEST_CASE(a_bad_configuration_is_given_up_at_once) {
  // At 461a80d a trainer asking for --device=cuda:99 on a machine without
  // it exited 2 with its line, and was restarted into the same line four
  // times before the agent gave it up.
  restart_tracker t{restart_policy{}};
  auto d = t.on_exit(t0, exited_with(exit_bad_config));
  BOOST_TEST(d.kind == restart_tracker::decision::give_up);
  BOOST_TEST(d.reason == "exit code 2: a bad configuration, which a restart"
                         " cannot mend (the child's last line says what)");
  // Other codes still restart.
  restart_tracker u{restart_policy{}};
  BOOST_TEST(u.on_exit(t0, exited_with(3)).kind ==
             restart_tracker::decision::restart);
}

BOOST_AUTO_TEST_CASE(abnormal_exits_back_off_then_give_up) {
  restart_tracker t{restart_policy{}}; // 3 within 30 s, 200 ms doubling
  auto d1 = t.on_exit(t0, exited_with(3));
  auto d2 = t.on_exit(t0 + 1s, killed_by(SIGSEGV));
  auto d3 = t.on_exit(t0 + 2s, exited_with(1));
  for (auto* d : {&d1, &d2, &d3})
    BOOST_TEST(d->kind == restart_tracker::decision::restart);
  BOOST_TEST(d1.delay.count() == 200);
  BOOST_TEST(d2.delay.count() == 400);
  BOOST_TEST(d3.delay.count() == 800);
  auto d4 = t.on_exit(t0 + 3s, killed_by(SIGKILL));
  BOOST_TEST(d4.kind == restart_tracker::decision::give_up);
  BOOST_TEST(d4.reason ==
             "exited 4 times within 30 s (last: killed by signal 9 (Killed))");
}

BOOST_AUTO_TEST_CASE(restarts_older_than_the_window_are_forgotten) {
  restart_tracker t{restart_policy{}};
  t.on_exit(t0, exited_with(1));
  t.on_exit(t0 + 1s, exited_with(1));
  t.on_exit(t0 + 2s, exited_with(1));
  // 30.5 s: the restart at t0 left the window, two are still in it.
  auto d = t.on_exit(t0 + 30500ms, exited_with(1));
  BOOST_TEST(d.kind == restart_tracker::decision::restart);
  BOOST_TEST(d.delay.count() == 800);
  // 40 s: only the one at 30.5 s is left.
  d = t.on_exit(t0 + 40s, exited_with(1));
  BOOST_TEST(d.kind == restart_tracker::decision::restart);
  BOOST_TEST(d.delay.count() == 400);
  // 41 s: a third restart; 42 s: three in the window (30.5, 40, 41 s) -> out.
  d = t.on_exit(t0 + 41s, exited_with(1));
  BOOST_TEST(d.kind == restart_tracker::decision::restart);
  d = t.on_exit(t0 + 42s, exited_with(1));
  BOOST_TEST(d.kind == restart_tracker::decision::give_up);
}

BOOST_AUTO_TEST_CASE(backoff_is_capped_at_backoff_max) {
  restart_policy p;
  p.max_restarts = 100;
  p.backoff_initial = 200ms;
  p.backoff_max = 1000ms;
  restart_tracker t{p};
  std::vector<long> delays;
  for (int i = 0; i < 70; ++i) // 2^69 would overflow without the cap
    delays.push_back(
        t.on_exit(t0 + milliseconds{i}, exited_with(1)).delay.count());
  std::vector<long> head(delays.begin(), delays.begin() + 5);
  BOOST_TEST(head == (std::vector<long>{200, 400, 800, 1000, 1000}),
             boost::test_tools::per_element());
  BOOST_TEST(*std::max_element(delays.begin(), delays.end()) == 1000);
  BOOST_TEST(delays.back() == 1000);
}

BOOST_AUTO_TEST_CASE(zero_max_restarts_gives_up_at_once) {
  restart_policy p;
  p.max_restarts = 0;
  p.window = 1500ms;
  restart_tracker t{p};
  auto d = t.on_exit(t0, exited_with(1), "cannot execute /x: Bad thing");
  BOOST_TEST(d.kind == restart_tracker::decision::give_up);
  BOOST_TEST(d.reason ==
             "exited 1 time within 1500 ms (last: cannot execute /x: Bad "
             "thing)");
}

BOOST_AUTO_TEST_SUITE_END()

// -- describe_exit ------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(describe_exit_tests)

BOOST_AUTO_TEST_CASE(exit_code_and_signal_read_clearly) {
  BOOST_TEST(describe_exit(status_of_shell("exit 3")) == "exit code 3");
  BOOST_TEST(describe_exit(status_of_shell("exit 0")) == "exit code 0");
  BOOST_TEST(describe_exit(status_of_shell("kill -9 $$")) ==
             "killed by signal 9 (Killed)");
  BOOST_TEST(describe_exit(status_of_shell("kill -15 $$")) ==
             "killed by signal 15 (Terminated)");
}

BOOST_AUTO_TEST_SUITE_END()
