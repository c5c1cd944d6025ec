// A check in a forked child, for what ends its process (the step watch:
// actors/base/step_watch.hpp): the child's exit code and stderr.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>

namespace troupe::test {

using namespace std::chrono_literals;

struct child_result {
  int code = -1; // the exit code; -1 if it did not exit by itself
  std::string err;
};

/// Reads what is there on non-blocking `fd` into `out`.
inline void drain(int fd, std::string& out) {
  char buf[512];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    out.append(buf, size_t(n));
}

/// Reads non-blocking `fd` into `out` until it holds `text`, 5 s at most
/// (a bounded poll); whether it does.
inline bool read_until(int fd, std::string& out, const std::string& text) {
  auto deadline = std::chrono::steady_clock::now() + 5s;
  for (drain(fd, out); out.find(text) == std::string::npos; drain(fd, out)) {
    if (std::chrono::steady_clock::now() > deadline)
      return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

/// What runs here beside a child: its pid, and a wait until its stderr
/// says a text (read_until).
using beside_child =
    std::function<void(pid_t, const std::function<bool(const std::string&)>&)>;

/// Runs `body` in a forked child that exits 0 after it, its stderr read
/// back; killed (code -1) if it runs past 20 s. Checks in `body` exit
/// with a code of their own (Boost's would not reach us). `meanwhile`
/// runs here beside it.
inline child_result in_child(const std::function<void()>& body,
                             const beside_child& meanwhile = {}) {
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  std::fflush(nullptr); // not written again by the child
  auto pid = ::fork();
  BOOST_REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    body();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  ::close(fds[1]);
  ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
  child_result out;
  if (meanwhile)
    meanwhile(pid, [&](const std::string& text) {
      return read_until(fds[0], out.err, text);
    });
  auto deadline = std::chrono::steady_clock::now() + 20s;
  int status = 0;
  for (;;) {
    drain(fds[0], out.err);
    if (::waitpid(pid, &status, WNOHANG) == pid)
      break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  drain(fds[0], out.err);
  ::close(fds[0]);
  if (WIFEXITED(status))
    out.code = WEXITSTATUS(status);
  return out;
}

} // namespace troupe::test
