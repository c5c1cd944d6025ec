// kv_throughput's troupe-node processes: finding the binary, starting the
// scheduler and the servers, and stopping them on every path out.
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "bench/kv_throughput.hpp"

namespace troupe::bench::kv_throughput {

caf::expected<std::string> default_node_path() {
  char buf[4096];
  auto n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0)
    return sys_error("reading /proc/self/exe");
  std::string dir{buf, static_cast<size_t>(n)};
  dir.erase(dir.rfind('/'));
  for (auto& path : {dir + "/troupe-node", dir + "/../troupe-node"})
    if (::access(path.c_str(), X_OK) == 0)
      return path;
  return caf::make_error(errc::bad_file, "no troupe-node in", dir,
                         "nor its parent; pass --node=PATH");
}

node_group::~node_group() {
  for (auto i = pids.rbegin(); i != pids.rend(); ++i) {
    ::kill(*i, SIGTERM);
    auto t0 = steady::now();
    int status = 0;
    pid_t r;
    while ((r = ::waitpid(*i, &status, WNOHANG)) == 0 && since(t0) < 2)
      std::this_thread::sleep_for(std::chrono::milliseconds{5});
    if (r == 0 && ::kill(*i, SIGKILL) == 0)
      ::waitpid(*i, &status, 0);
  }
}

caf::expected<uint16_t> node_group::start(const std::string& path,
                                          std::vector<std::string> args) {
  // stdout is a memory file: unlike a pipe it never fills up or breaks.
  int fd = ::memfd_create("troupe-node-stdout", MFD_CLOEXEC);
  if (fd < 0)
    return sys_error("memfd_create");
  args.insert(args.begin(), path);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL); // no orphans if we get killed
    ::dup2(fd, STDOUT_FILENO);
    ::execv(path.c_str(), argv.data());
    ::_exit(127);
  }
  if (pid > 0)
    pids.push_back(pid);
  auto port = pid > 0 ? await_port(pid, fd) : sys_error("fork");
  ::close(fd);
  return port;
}

caf::expected<uint16_t> node_group::await_port(pid_t pid, int fd) {
  for (auto t0 = steady::now(); since(t0) < 10;) {
    char buf[4096];
    auto n = std::max(::pread(fd, buf, sizeof(buf), 0), ssize_t{0});
    uint16_t port = 0;
    if (listen_port(std::string{buf, static_cast<size_t>(n)}, port))
      return port;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      pids.pop_back();
      return caf::make_error(errc::peer_down,
                             "troupe-node exited before"
                             " it listened, wait status",
                             status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{10});
  }
  return caf::make_error(errc::timeout, "troupe-node did not listen in 10 s");
}

caf::expected<uint16_t> start_cluster(node_group& nodes, const options& opt,
                                      const std::vector<std::string>& tls) {
  // error level: a warning after our JSON line would end the output.
  std::vector<std::string> sched{
      "--role=scheduler", "--scheduler-port=0", "--log-level=error",
      "--cluster.servers=" + std::to_string(opt.servers),
      "--cluster.workers=1"};
  sched.insert(sched.end(), tls.begin(), tls.end());
  auto port = nodes.start(opt.node, sched);
  for (uint32_t i = 0; port && i < opt.servers; ++i) {
    std::vector<std::string> server{
        "--role=server", "--log-level=error",
        "--scheduler-port=" + std::to_string(*port),
        "--server.mode=" + opt.mode,
        "--road.spin-us=" + std::to_string(opt.spin_us),
        "--road.frame-spin-us=" + std::to_string(opt.frame_spin_us),
        // The frames the servers take: as large as the client cuts them.
        "--kv.max-message-bytes=" + std::to_string(opt.max_message_bytes)};
    server.insert(server.end(), tls.begin(), tls.end());
    if (auto p = nodes.start(opt.node, server); !p)
      return p.error();
  }
  return port;
}

} // namespace troupe::bench::kv_throughput
