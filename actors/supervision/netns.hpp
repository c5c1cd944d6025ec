// Network namespaces for cutting a child off the network (fault injection:
// `cut:` in --fault.plan). A child named in a cut runs from its first start
// in a namespace of its own, troupe-<agent pid>-<child>, joined to the
// agent's namespace by a veth pair: the agent's end trKh holds
// 10.213.x.y+1/30, the child's end trKc 10.213.x.y+2/30, and the child's
// default route goes through the agent's end.
//
//   agent's namespace                       the child's namespace
//   scheduler, servers  --- trKh ===== trKc --- the child (--host=x.y+2)
//   (on ADDR, not 127.0.0.1)  10.213.x.y+1/30     10.213.x.y+2/30
//
// The child reaches every address of the agent's namespace but loopback
// (its 127.0.0.1 is its own), so the cluster must run on another address
// (--scheduler-host, --host); it is reached at its own end's address, which
// it publishes on. A cut sets the agent's end down: the child's
// connections fall silent as with a pulled cable, and peers notice through
// heartbeats. Heal sets it up again. Children restarted by the agent start
// in the same namespace, cut or not.
//
// Uses iproute2's `ip` and needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
// Namespaces carry the agent's pid: an agent removes those of agents that
// are gone (SIGKILLed, say) before it makes its own.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace troupe {

/// One child's namespace and link. Not copyable; removed on destruction,
/// which must come after the child (and any restart of it) is gone.
class child_netns {
public:
  /// Makes the namespace and link for the agent's child `child` (e.g.
  /// "worker-1"); an error says what `ip` refused.
  static caf::expected<std::unique_ptr<child_netns>>
  make(const std::string& child);

  ~child_netns();
  child_netns(const child_netns&) = delete;
  child_netns& operator=(const child_netns&) = delete;

  /// The namespace's name, e.g. "troupe-4242-worker-1".
  const std::string& name() const { return name_; }
  /// The child's address, e.g. "10.213.3.2".
  const std::string& address() const { return child_ip_; }
  /// The agent's end of the link, e.g. "tr777h".
  const std::string& link() const { return host_link_; }

  /// `argv` run inside the namespace with the same pid (ip netns exec).
  std::vector<std::string> wrap(const std::vector<std::string>& argv) const;

  /// Sets the agent's end down: the child is cut off.
  caf::error cut();
  /// Sets it up again.
  caf::error heal();

private:
  child_netns() = default;
  std::string name_, host_link_, host_ip_, child_ip_;
};

/// Why this process cannot make network namespaces (not root, no `ip`), as
/// one line; none if it can.
caf::error netns_unavailable();

/// Removes the namespaces of agents no longer running; how many.
size_t remove_stale_netns();

/// True for 127.0.0.0/8, ::1, 0.0.0.0 and "localhost": addresses another
/// network namespace cannot reach.
bool is_loopback_host(const std::string& host);

} // namespace troupe
