// time_to_accuracy's troupe-node processes: starting one with its output
// in a memory file, reading that output, reaping and stopping them.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "bench/time_to_accuracy.hpp"

namespace troupe::bench::time_to_accuracy {

std::string output(const child& c, bool all) {
  std::string out(1 << 16, '\0');
  out.resize(
      size_t(std::max(::pread(c.out, &out[0], out.size(), 0), ssize_t{0})));
  while (!all && !out.empty() && out.back() == '\n')
    out.pop_back();
  return all ? out : out.substr(out.rfind('\n') + 1, 200);
}

std::string exit_text(int status) {
  return WIFSIGNALED(status) ? strf("killed by signal %d", WTERMSIG(status))
                             : strf("exited with %d", WEXITSTATUS(status));
}

bool reap(child& c) {
  if (c.pid > 0 && ::waitpid(c.pid, &c.status, WNOHANG) == c.pid)
    c.pid = -1;
  return c.pid < 0;
}

node_group::~node_group() {
  for (auto& c : kids)
    if (c.pid > 0)
      ::kill(c.pid, SIGTERM);
  auto t0 = steady::now();
  for (auto& c : kids) {
    while (!reap(c) && since(t0) < 2)
      std::this_thread::sleep_for(std::chrono::milliseconds{5});
    if (c.pid > 0 && ::kill(c.pid, SIGKILL) == 0)
      ::waitpid(c.pid, &c.status, 0);
    ::close(c.out);
  }
}

std::string node_group::start(const std::string& path,
                              std::vector<std::string> args) {
  int fd = ::memfd_create("troupe-node-out", MFD_CLOEXEC);
  args.insert(args.begin(), path);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  auto parent = ::getpid();
  pid_t pid = fd < 0 ? -1 : ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL); // no orphans if we get killed
    if (::getppid() != parent)
      ::_exit(127);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execv(path.c_str(), argv.data());
    ::_exit(127);
  }
  if (pid < 0) {
    auto err = std::string{"fork: "} + std::strerror(errno);
    ::close(fd);
    return err;
  }
  kids.push_back(child{pid, fd, 0});
  return "";
}

std::string await_port(child& c, uint16_t& port) {
  for (auto t0 = steady::now(); since(t0) < 10;) {
    if (listen_port(output(c, true), port))
      return "";
    if (reap(c))
      return exit_text(c.status) + " before it listened: " + output(c);
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  return "did not listen in 10 s";
}

} // namespace troupe::bench::time_to_accuracy
