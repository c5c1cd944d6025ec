// A child process for multi-process tests: started with fork/exec, its
// stdout and stderr read through one pipe, waited on with deadlines, and
// always killed and reaped by pid when the test lets go of it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace troupe::test {

class child_process {
public:
  explicit child_process(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ < 0)
      throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      std::vector<char*> args;
      for (auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    fd_ = fds[0];
  }

  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  ~child_process() {
    if (!status_) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
    ::close(fd_);
  }

  pid_t pid() const { return pid_; }

  /// Everything the process printed so far.
  const std::string& output() const { return out_; }

  void signal(int sig) { ::kill(pid_, sig); }

  /// Reads output until a line contains `needle`; returns that line, or
  /// nothing if the deadline passed or the process closed its output.
  std::optional<std::string> wait_for_line(const std::string& needle,
                                           std::chrono::milliseconds limit) {
    return wait_for_any_line({needle}, limit);
  }

  /// Like wait_for_line, for the first line holding any of `needles`.
  std::optional<std::string>
  wait_for_any_line(const std::vector<std::string>& needles,
                    std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      for (auto& needle : needles)
        if (auto line = find_line(needle))
          return line;
      if (!read_some(deadline))
        return std::nullopt;
    }
  }

  /// Reads what the process printed so far without waiting: a test that
  /// works a while between waits calls it, or a full pipe blocks the
  /// process on its next log line.
  void drain() {
    while (read_some(std::chrono::steady_clock::now()))
      ;
  }

  /// Waits for the process to exit; its exit code (128 + signal if killed),
  /// or nothing if the deadline passed.
  std::optional<int> wait_exit(std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!status_) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        break;
      }
      if (!read_some(deadline) && std::chrono::steady_clock::now() >= deadline)
        return std::nullopt;
    }
    while (read_some(std::chrono::steady_clock::now()))
      ; // drain what is left in the pipe
    return status_;
  }

private:
  std::optional<std::string> find_line(const std::string& needle) const {
    auto at = out_.find(needle);
    if (at == std::string::npos)
      return std::nullopt;
    auto begin = out_.rfind('\n', at);
    auto end = out_.find('\n', at);
    if (end == std::string::npos)
      return std::nullopt; // the line is not complete yet
    begin = begin == std::string::npos ? 0 : begin + 1;
    return out_.substr(begin, end - begin);
  }

  /// Reads what is there, waiting at most until `deadline` (polling in
  /// short slices so that an exit is noticed); false on EOF or deadline.
  bool read_some(std::chrono::steady_clock::time_point deadline) {
    using namespace std::chrono;
    auto left = duration_cast<milliseconds>(deadline - steady_clock::now());
    pollfd p{fd_, POLLIN, 0};
    int ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 50));
    if (::poll(&p, 1, ms) <= 0)
      return steady_clock::now() < deadline;
    char buf[4096];
    auto n = ::read(fd_, buf, sizeof(buf));
    if (n <= 0)
      return false;
    out_.append(buf, static_cast<size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
  std::optional<int> status_;
};

} // namespace troupe::test
