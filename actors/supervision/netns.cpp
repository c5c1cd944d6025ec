// Network namespaces for cut-off faults; see the header.
#include "actors/supervision/netns.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <set>

#include "messages/errors.hpp"

namespace troupe {

namespace {

/// Link subnets: /30s in 10.213.0.0/16.
constexpr uint32_t subnets = 1u << 14;

/// iproute2's ip, or "" if none.
const std::string& ip_path() {
  static const std::string path = [] {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
      if (::access(p, X_OK) == 0)
        return std::string{p};
    return std::string{};
  }();
  return path;
}

/// Runs `ip ARGS`; its output (stdout and stderr) in `out`. Arguments are
/// names and addresses we made: no shell quoting needed, and checked.
caf::error run_ip(const std::string& args, std::string* out = nullptr) {
  for (char c : args)
    if (!(isalnum(static_cast<unsigned char>(c)) ||
          std::string{" -./_"}.find(c) != std::string::npos))
      return caf::make_error(errc::invalid_config, "bad ip arguments", args);
  if (ip_path().empty())
    return caf::make_error(errc::invalid_config,
                           "no ip command (apt-get install iproute2)");
  auto cmd = ip_path() + " " + args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr)
    return caf::make_error(errc::invalid_config, "cannot run", cmd);
  std::string text;
  char buf[512];
  while (auto n = std::fread(buf, 1, sizeof(buf), f))
    text.append(buf, n);
  int status = ::pclose(f);
  while (!text.empty() && text.back() == '\n')
    text.pop_back();
  if (out != nullptr)
    *out = text;
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return caf::make_error(errc::invalid_config,
                           "ip " + args + " failed: " + text);
  return caf::none;
}

/// "10.213.A.B" for subnet `k` and host `h` (1 or 2) in it.
std::string subnet_address(uint32_t k, uint32_t h) {
  auto x = k * 4 + h;
  return "10.213." + std::to_string(x / 256) + "." + std::to_string(x % 256);
}

/// The first free subnet from a start drawn from our pid: its address and
/// link names are not in use in this namespace.
caf::expected<uint32_t> free_subnet() {
  std::string addrs, links;
  if (auto err = run_ip("-o -4 addr show", &addrs))
    return err;
  if (auto err = run_ip("-o link show", &links))
    return err;
  auto used = [&](uint32_t k) {
    auto k_text = std::to_string(k);
    for (uint32_t h : {1u, 2u})
      if (addrs.find(" " + subnet_address(k, h) + "/") != std::string::npos)
        return true;
    return links.find(" tr" + k_text + "h:") != std::string::npos ||
           links.find(" tr" + k_text + "h@") != std::string::npos;
  };
  auto first = static_cast<uint32_t>(::getpid()) * 8 % subnets;
  for (uint32_t i = 0; i < subnets; ++i) {
    auto k = (first + i) % subnets;
    if (!used(k))
      return k;
  }
  return caf::make_error(errc::invalid_config,
                         "no free link subnet in 10.213.0.0/16");
}

std::string agent_prefix(int pid) {
  return "troupe-" + std::to_string(pid) + "-";
}

} // namespace

caf::expected<std::unique_ptr<child_netns>>
child_netns::make(const std::string& child) {
  if (auto err = netns_unavailable())
    return err;
  auto k = free_subnet();
  if (!k)
    return std::move(k.error());
  std::unique_ptr<child_netns> ns{new child_netns};
  ns->name_ = agent_prefix(::getpid()) + child;
  ns->host_link_ = "tr" + std::to_string(*k) + "h";
  auto child_link = "tr" + std::to_string(*k) + "c";
  ns->host_ip_ = subnet_address(*k, 1);
  ns->child_ip_ = subnet_address(*k, 2);
  auto& n = ns->name_;
  for (auto& step : {
           "netns add " + n,
           "link add " + ns->host_link_ + " type veth peer name " + child_link +
               " netns " + n,
           "addr add " + ns->host_ip_ + "/30 dev " + ns->host_link_,
           "link set " + ns->host_link_ + " up",
           "-n " + n + " link set lo up",
           "-n " + n + " addr add " + ns->child_ip_ + "/30 dev " + child_link,
           "-n " + n + " link set " + child_link + " up",
           "-n " + n + " route add default via " + ns->host_ip_,
       })
    if (auto err = run_ip(step)) // the destructor removes what was made
      return caf::make_error(
          errc::invalid_config,
          "cannot give " + child +
              " a network namespace of its own: " + describe(err));
  return ns;
}

child_netns::~child_netns() {
  // Removing the namespace also removes the link once its last process is
  // gone; remove the link at once anyway, so its address is free.
  (void)run_ip("link del " + host_link_);
  (void)run_ip("netns del " + name_);
}

std::vector<std::string>
child_netns::wrap(const std::vector<std::string>& argv) const {
  std::vector<std::string> out{ip_path(), "netns", "exec", name_};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

caf::error child_netns::cut() {
  return run_ip("link set " + host_link_ + " down");
}

caf::error child_netns::heal() {
  return run_ip("link set " + host_link_ + " up");
}

caf::error netns_unavailable() {
  if (::geteuid() != 0)
    return caf::make_error(errc::invalid_config,
                           "cutting a child off the network needs root (it"
                           " runs in a network namespace of its own); run the"
                           " agent as root or take cut: out of --fault.plan");
  if (ip_path().empty())
    return caf::make_error(errc::invalid_config,
                           "cutting a child off the network needs iproute2's"
                           " ip: apt-get install iproute2");
  return caf::none;
}

size_t remove_stale_netns() {
  size_t removed = 0;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
    auto name = e.path().filename().string();
    if (name.rfind("troupe-", 0) != 0)
      continue;
    auto dash = name.find('-', 7);
    if (dash == std::string::npos)
      continue;
    int pid = 0;
    try {
      pid = std::stoi(name.substr(7, dash - 7));
    } catch (...) {
      continue;
    }
    if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH &&
        !run_ip("netns del " + name))
      ++removed;
  }
  return removed;
}

bool is_loopback_host(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "::1" || host == "localhost" ||
         host == "0.0.0.0" || host.empty();
}

} // namespace troupe
