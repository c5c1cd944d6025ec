// The process supervisor: real processes (/bin/sh, /bin/true, /bin/sleep)
// started, killed and restarted (the restart policy with made-up times:
// restart_tracker_test.cpp).
#define BOOST_TEST_MODULE supervisor_tests
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actors/base/exit_codes.hpp"
#include "actors/supervision/supervisor.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

extern char** environ;

namespace {

/// True once `pid` is gone and reaped (a zombie still answers kill 0).
bool gone(int pid) {
  return kill(pid, 0) == -1 && errno == ESRCH;
}

/// Collects a supervisor's events.
struct recorder {
  std::vector<child_event> events;

  std::function<void(const child_event&)> callback() {
    return [this](const child_event& e) { events.push_back(e); };
  }

  /// "started,exited,..." for readable failures.
  std::string kinds() const {
    static const char* names[] = {"started", "exited", "restarting", "gave_up",
                                  "stopped"};
    std::string s;
    for (auto& e : events)
      s += (s.empty() ? "" : ",") + std::string{names[e.kind]};
    return s;
  }

  std::vector<child_event> of_kind(child_event::kind_t k) const {
    std::vector<child_event> out;
    std::copy_if(events.begin(), events.end(), std::back_inserter(out),
                 [k](const child_event& e) { return e.kind == k; });
    return out;
  }
};

/// Runs `sup` until `done()` or `timeout`; returns done().
bool run_until(process_supervisor& sup, const std::function<bool()>& done,
               milliseconds timeout) {
  auto deadline = steady_clock::now() + timeout;
  while (!done()) {
    auto now = steady_clock::now();
    if (now >= deadline)
      return false;
    sup.run_once(std::min(milliseconds{10},
                          std::chrono::ceil<milliseconds>(deadline - now)));
  }
  return true;
}

/// A duration in whole milliseconds, printable by Boost.Test.
template <class Duration> long ms(Duration d) {
  return static_cast<long>(std::chrono::duration_cast<milliseconds>(d).count());
}

/// Reads /proc/<pid>/comm without the newline.
std::string comm_of(int pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/comm"};
  std::string s;
  std::getline(in, s);
  return s;
}

/// A scratch directory, removed afterwards.
struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/supervisor_test.XXXXXX";
    BOOST_REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  /// Writes `text` to `name` with mode `mode`; returns its path.
  std::string write(const std::string& name, const std::string& text,
                    std::filesystem::perms mode) {
    std::string p = path + "/" + name;
    std::ofstream{p} << text;
    std::filesystem::permissions(p, mode);
    return p;
  }
};

/// Blocks SIGCHLD in this thread and runs a thread that takes it instead.
struct sigchld_on_other_thread {
  std::promise<void> quit;
  std::thread other;
  sigset_t old_mask;
  sigchld_on_other_thread() {
    // Started before blocking: the thread keeps SIGCHLD unblocked.
    other = std::thread{[f = quit.get_future()] { f.wait(); }};
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &chld, &old_mask);
  }
  ~sigchld_on_other_thread() {
    quit.set_value();
    other.join();
    pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  }
};

/// Fast back-off so that restart tests take milliseconds.
restart_policy fast_policy() {
  restart_policy p;
  p.max_restarts = 3;
  p.window = 30s;
  p.backoff_initial = 10ms;
  p.backoff_max = 40ms;
  return p;
}

} // namespace

// -- process_supervisor -------------------------------------------------------

BOOST_AUTO_TEST_SUITE(process_supervisor_tests)

BOOST_AUTO_TEST_CASE(child_exiting_zero_is_not_restarted) {
  recorder rec;
  process_supervisor sup{fast_policy(), rec.callback()};
  BOOST_REQUIRE_EQUAL(sup.add({"ok", {"/bin/true"}, ""}), "");
  BOOST_TEST(rec.kinds() == "started");
  int pid = rec.events[0].pid;
  BOOST_TEST(pid > 0);
  BOOST_REQUIRE(run_until(
      sup, [&sup = sup] { return sup.idle(); }, 5s));
  BOOST_TEST(rec.kinds() == "started,exited");
  BOOST_TEST(rec.events[1].pid == pid);
  BOOST_TEST(rec.events[1].detail == "exit code 0");
  BOOST_TEST(rec.events[1].child == "ok");
  sup.run_once(50ms); // a restart would be due by now
  BOOST_TEST(rec.kinds() == "started,exited");
  BOOST_TEST(!sup.gave_up());
  BOOST_TEST(sup.pid_of("ok") == 0);
  BOOST_TEST(gone(pid));
}

BOOST_AUTO_TEST_CASE(failing_child_is_restarted_then_given_up) {
  recorder rec;
  process_supervisor sup{fast_policy(), rec.callback()};
  BOOST_REQUIRE_EQUAL(sup.add({"bad", {"/bin/sh", "-c", "exit 3"}, ""}), "");
  BOOST_REQUIRE(run_until(
      sup, [&sup = sup] { return sup.idle(); }, 10s));
  BOOST_TEST(rec.kinds() ==
             "started,exited,restarting,started,exited,restarting,started,"
             "exited,restarting,started,exited,gave_up");
  BOOST_TEST(sup.gave_up());
  auto started = rec.of_kind(child_event::started);
  auto exited = rec.of_kind(child_event::exited);
  auto restarting = rec.of_kind(child_event::restarting);
  BOOST_REQUIRE_EQUAL(started.size(), 4u);
  BOOST_REQUIRE_EQUAL(exited.size(), 4u);
  BOOST_REQUIRE_EQUAL(restarting.size(), 3u);
  std::set<int> pids;
  for (size_t i = 0; i < 4; ++i) {
    BOOST_TEST(exited[i].pid == started[i].pid);
    BOOST_TEST(exited[i].detail == "exit code 3");
    pids.insert(started[i].pid);
  }
  BOOST_TEST(pids.size() == 4u);
  std::vector<std::string> delays;
  for (auto& e : restarting)
    delays.push_back(e.detail);
  BOOST_TEST(delays ==
                 (std::vector<std::string>{"in 10 ms", "in 20 ms", "in 40 ms"}),
             boost::test_tools::per_element());
  // Each restart waited its delay.
  for (size_t i = 0; i < 3; ++i)
    BOOST_TEST(ms(started[i + 1].at - exited[i].at) >= (10L << i) - 1);
  BOOST_TEST(rec.events.back().detail ==
             "exited 4 times within 30 s (last: exit code 3)");
}

BOOST_AUTO_TEST_CASE(child_exiting_2_is_given_up_without_a_restart) {
  recorder rec;
  process_supervisor sup{fast_policy(), rec.callback()};
  BOOST_REQUIRE_EQUAL(
      sup.add({"misconfigured",
               {"/bin/sh", "-c", "echo '*** bad flag' >&2; exit 2"},
               ""}),
      "");
  BOOST_REQUIRE(run_until(
      sup, [&sup = sup] { return sup.idle(); }, 10s));
  BOOST_TEST(rec.kinds() == "started,exited,gave_up");
  BOOST_TEST(sup.gave_up());
  BOOST_TEST(rec.events[1].detail == "exit code 2");
  // The give-up names the process given up (the scheduler maps it to its
  // rank).
  BOOST_TEST(rec.events[2].pid != 0);
  BOOST_TEST(rec.events[2].pid == rec.events[0].pid);
  BOOST_TEST(rec.events.back().detail.find("bad configuration") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(killed_child_is_noticed_at_once_and_restarted) {
  recorder rec;
  process_supervisor sup{fast_policy(), rec.callback()};
  BOOST_REQUIRE_EQUAL(sup.add({"sleeper", {"/bin/sleep", "30"}, ""}), "");
  int first = sup.pid_of("sleeper");
  BOOST_REQUIRE(first > 0);
  BOOST_REQUIRE(sup.signal("sleeper", SIGKILL));
  // One call with a long limit: it must return when the exit is seen, not
  // at the limit (no polling).
  auto before = steady_clock::now();
  sup.run_once(5s);
  auto took = steady_clock::now() - before;
  BOOST_TEST(ms(took) < 500);
  BOOST_TEST(rec.kinds() == "started,exited,restarting");
  BOOST_TEST(rec.events[1].pid == first);
  BOOST_TEST(rec.events[1].detail == "killed by signal 9 (Killed)");
  BOOST_REQUIRE(run_until(
      sup, [&sup = sup] { return sup.pid_of("sleeper") != 0; }, 5s));
  int second = sup.pid_of("sleeper");
  BOOST_TEST(second != first);
  BOOST_TEST(rec.kinds() == "started,exited,restarting,started");
  BOOST_TEST(gone(first));
  BOOST_TEST(!sup.signal("nobody", SIGKILL));
}

BOOST_AUTO_TEST_CASE(exit_is_noticed_when_sigchld_lands_on_another_thread) {
  // As in the node agent, where CAF threads take the signal: only the
  // self-pipe can wake run_once here, not EINTR.
  sigchld_on_other_thread elsewhere;
  recorder rec;
  process_supervisor sup{fast_policy(), rec.callback()};
  BOOST_REQUIRE_EQUAL(sup.add({"sleeper", {"/bin/sleep", "30"}, ""}), "");
  BOOST_REQUIRE(sup.signal("sleeper", SIGTERM));
  auto before = steady_clock::now();
  sup.run_once(5s);
  BOOST_TEST(ms(steady_clock::now() - before) < 500);
  BOOST_TEST(rec.kinds() == "started,exited,restarting");
  BOOST_TEST(rec.events[1].detail == "killed by signal 15 (Terminated)");
}

BOOST_AUTO_TEST_CASE(bad_specs_give_a_clear_error) {
  temp_dir dir;
  recorder rec;
  process_supervisor sup{fast_policy(), rec.callback()};
  BOOST_TEST(sup.add({"x", {"/nonexistent/troupe-no-such-binary"}, ""}) ==
             "cannot execute /nonexistent/troupe-no-such-binary: No such "
             "file or directory");
  auto plain = dir.write("plain.txt", "hello\n",
                         std::filesystem::perms::owner_read |
                             std::filesystem::perms::owner_write);
  BOOST_TEST(sup.add({"x", {plain}, ""}) ==
             "cannot execute " + plain + ": Permission denied");
  BOOST_TEST(sup.add({"x", {"/bin/true"}, "/nonexistent/dir/x.log"}) ==
             "cannot open log file /nonexistent/dir/x.log: No such file or "
             "directory");
  BOOST_TEST(sup.add({"x", {}, ""}) == "child 'x' has no argv");
  // Nothing was started or kept, so no restart loop either.
  BOOST_TEST(rec.events.empty());
  BOOST_TEST(sup.idle());
  sup.run_once(30ms);
  BOOST_TEST(rec.events.empty());
  // A second live child of the same name is refused.
  BOOST_REQUIRE_EQUAL(sup.add({"x", {"/bin/sleep", "30"}, ""}), "");
  BOOST_TEST(sup.add({"x", {"/bin/sleep", "30"}, ""}) ==
             "child 'x' is already supervised");
}

BOOST_AUTO_TEST_CASE(failed_restart_counts_as_an_exit_with_its_reason) {
  temp_dir dir;
  // A binary, not a script: once exec'd it runs whatever happens to its
  // file (a script's shell may find it gone, and exit 2: a bad
  // configuration, given up at once).
  std::string script = dir.path + "/fail";
  std::filesystem::copy_file("/bin/false", script);
  restart_policy p = fast_policy();
  p.max_restarts = 2;
  recorder rec;
  process_supervisor sup{p, rec.callback()};
  // The first run exec'd before add() returns; its complaint, if any, goes
  // to the log.
  std::string log = dir.path + "/fail.log";
  BOOST_REQUIRE_EQUAL(sup.add({"gone", {script}, log}), "");
  std::filesystem::remove(script); // later restarts cannot exec it
  BOOST_REQUIRE(run_until(
      sup, [&sup = sup] { return sup.idle(); }, 5s));
  BOOST_TEST(rec.kinds() == "started,exited,restarting,exited,restarting,"
                            "exited,gave_up");
  std::string why = "cannot execute " + script + ": No such file or directory";
  BOOST_TEST(rec.events[3].detail == why);
  BOOST_TEST(rec.events.back().detail ==
             "exited 3 times within 30 s (last: " + why + ")");
  BOOST_TEST(sup.gave_up());
}

BOOST_AUTO_TEST_CASE(log_file_collects_stdout_and_stderr) {
  temp_dir dir;
  std::string log = dir.path + "/child.log";
  recorder rec;
  process_supervisor sup{fast_policy(), rec.callback()};
  child_spec spec{"talker", {"/bin/sh", "-c", "echo out; echo err >&2"}, log};
  BOOST_REQUIRE_EQUAL(sup.add(spec), "");
  BOOST_REQUIRE(run_until(
      sup, [&sup = sup] { return sup.idle(); }, 5s));
  BOOST_TEST(test::read_file(log) == "out\nerr\n");
  // A finished child may be added again; the log is appended to.
  BOOST_REQUIRE_EQUAL(sup.add(spec), "");
  BOOST_REQUIRE(run_until(
      sup, [&sup = sup] { return sup.idle(); }, 5s));
  BOOST_TEST(test::read_file(log) == "out\nerr\nout\nerr\n");
  BOOST_TEST(rec.kinds() == "started,exited,started,exited");
}

BOOST_AUTO_TEST_CASE(stop_all_kills_and_reaps_everything) {
  restart_policy p = fast_policy();
  p.backoff_initial = 10s; // "failing" stays waiting to restart
  p.backoff_max = 10s;
  recorder rec;
  process_supervisor sup{p, rec.callback()};
  BOOST_REQUIRE_EQUAL(sup.add({"polite", {"/bin/sleep", "30"}, ""}), "");
  BOOST_REQUIRE_EQUAL(
      sup.add({"stubborn",
               {"/bin/sh", "-c", "trap '' TERM; exec /bin/sleep 30"},
               ""}),
      "");
  BOOST_REQUIRE_EQUAL(sup.add({"failing", {"/bin/sh", "-c", "exit 1"}, ""}),
                      "");
  int polite = sup.pid_of("polite");
  int stubborn = sup.pid_of("stubborn");
  // Wait until "stubborn" ignores SIGTERM (it exec'd sleep) and "failing"
  // waits to restart.
  BOOST_REQUIRE(run_until(
      sup,
      [&sup = sup, &rec = rec, stubborn] {
        return comm_of(stubborn) == "sleep" &&
               !rec.of_kind(child_event::restarting).empty();
      },
      5s));
  rec.events.clear();
  auto before = steady_clock::now();
  sup.stop_all(300ms);
  auto took = steady_clock::now() - before;
  BOOST_TEST(ms(took) >= 300); // "stubborn" used up the grace
  BOOST_TEST(ms(took) < 3000);
  BOOST_TEST(rec.kinds() == "stopped,stopped,stopped");
  for (auto& e : rec.events) {
    if (e.child == "failing") {
      BOOST_TEST(e.pid == 0);
      BOOST_TEST(e.detail == "restart cancelled");
    } else if (e.child == "polite") {
      BOOST_TEST(e.pid == polite);
      BOOST_TEST(e.detail == "killed by signal 15 (Terminated)");
    } else {
      BOOST_TEST(e.pid == stubborn);
      BOOST_TEST(e.detail == "killed by signal 9 (Killed) after 300 ms grace");
    }
  }
  BOOST_TEST(gone(polite));
  BOOST_TEST(gone(stubborn));
  BOOST_TEST(sup.idle());
  BOOST_TEST(!sup.gave_up());
  BOOST_TEST(sup.pid_of("polite") == 0);
  sup.run_once(50ms); // no restarts after stop_all
  BOOST_TEST(rec.events.size() == 3u);
}

BOOST_AUTO_TEST_CASE(destructor_kills_and_reaps_children) {
  recorder rec;
  int a = 0, b = 0;
  {
    process_supervisor sup{fast_policy(), rec.callback()};
    BOOST_REQUIRE_EQUAL(sup.add({"a", {"/bin/sleep", "30"}, ""}), "");
    BOOST_REQUIRE_EQUAL(
        sup.add(
            {"b", {"/bin/sh", "-c", "trap '' TERM; exec /bin/sleep 30"}, ""}),
        "");
    a = sup.pid_of("a");
    b = sup.pid_of("b");
    BOOST_REQUIRE(a > 0 && b > 0);
    BOOST_TEST(!gone(a));
  }
  BOOST_TEST(gone(a));
  BOOST_TEST(gone(b));
  BOOST_TEST(rec.kinds() == "started,started"); // no events from ~
}

BOOST_AUTO_TEST_CASE(other_children_of_the_process_are_not_reaped) {
  const char* argv[] = {"/bin/true", nullptr};
  pid_t ours = 0;
  BOOST_REQUIRE_EQUAL(posix_spawn(&ours, "/bin/true", nullptr, nullptr,
                                  const_cast<char**>(argv), environ),
                      0);
  // Wait until it has exited, but leave it unreaped.
  siginfo_t info{};
  BOOST_REQUIRE_EQUAL(waitid(P_PID, ours, &info, WEXITED | WNOWAIT), 0);
  recorder rec;
  process_supervisor sup{fast_policy(), rec.callback()};
  BOOST_REQUIRE_EQUAL(sup.add({"ok", {"/bin/true"}, ""}), "");
  BOOST_REQUIRE(run_until(
      sup, [&sup = sup] { return sup.idle(); }, 5s));
  sup.run_once(20ms);
  int st = 0;
  BOOST_TEST(waitpid(ours, &st, WNOHANG) == ours); // still ours to reap
}

BOOST_AUTO_TEST_CASE(children_die_with_a_killed_supervisor) {
  // Orphans come to us, so we can see how the grandchild ended.
  BOOST_REQUIRE_EQUAL(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int fds[2];
  BOOST_REQUIRE_EQUAL(pipe(fds), 0);
  pid_t helper = fork();
  BOOST_REQUIRE(helper >= 0);
  if (helper == 0) {
    // The helper: a supervisor with one child, then wait to be killed.
    close(fds[0]);
    process_supervisor sup{fast_policy(), nullptr};
    int pid = sup.add({"sleeper", {"/bin/sleep", "30"}, ""}).empty()
                  ? sup.pid_of("sleeper")
                  : 0;
    if (write(fds[1], &pid, sizeof pid) != sizeof pid)
      _exit(1);
    for (;;)
      pause();
  }
  close(fds[1]);
  int grandchild = 0;
  BOOST_TEST(read(fds[0], &grandchild, sizeof grandchild) ==
             static_cast<ssize_t>(sizeof grandchild));
  close(fds[0]);
  kill(helper, SIGKILL);
  int st = 0;
  BOOST_TEST(waitpid(helper, &st, 0) == helper);
  BOOST_REQUIRE(grandchild > 0);
  // The grandchild must be killed by PR_SET_PDEATHSIG, not live 30 s.
  auto deadline = steady_clock::now() + 3s;
  pid_t r = 0;
  while ((r = waitpid(grandchild, &st, WNOHANG)) == 0 &&
         steady_clock::now() < deadline)
    usleep(5000);
  if (r == 0) { // failed: clean up
    kill(grandchild, SIGKILL);
    waitpid(grandchild, &st, 0);
  }
  BOOST_TEST(r == grandchild);
  BOOST_TEST(WIFSIGNALED(st));
  BOOST_TEST(WTERMSIG(st) == SIGKILL);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

BOOST_AUTO_TEST_SUITE_END()
