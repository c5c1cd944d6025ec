// Starting troupe-node processes for multi-process tests: a scheduler on a
// free port (read from its output), servers, and the flags they share.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <algorithm>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "actors/cluster/connect.hpp"
#include "actors/node/node_config.hpp"
#include "messages/membership.hpp"
#include "tests/system/child_process.hpp"

namespace troupe::test {

using namespace std::chrono_literals;

inline const std::string node_bin = TROUPE_NODE_BIN;

/// The rank of the process `pid` among `nodes` (a view's servers or
/// workers), if it is there: ranks follow registration, not start order.
inline std::optional<uint32_t> rank_of(const std::vector<node_info>& nodes,
                                       pid_t pid) {
  for (auto& n : nodes)
    if (n.pid == static_cast<uint32_t>(pid))
      return n.rank;
  return std::nullopt;
}

// Fast failure detection for the tests: heartbeats every 100 ms.
inline const std::vector<std::string> fast_heartbeats{
    "--middleman.heartbeat-interval=100ms",
    "--middleman.connection-timeout=1s"};

/// Where the tests' certificates are (CTest's test_certs fixture makes
/// them with deploy/make-certs.sh): the cluster's, and a rogue CA's.
inline const std::string test_certs = TROUPE_BUILD_DIR "/test-certs";
inline const std::string rogue_certs = TROUPE_BUILD_DIR "/test-certs-rogue";

/// The flags of mutual TLS with the certificates in `dir`.
inline std::vector<std::string> tls_flags(const std::string& dir = test_certs) {
  return tls_flags_for(dir);
}

/// Makes `cfg`, the test process's own node, speak mutual TLS with the
/// test certificates, as the cluster's nodes do; before finish().
inline void use_test_tls(node_config& cfg) {
  cfg.use_certificates(test_certs);
}

/// A troupe-node command line (or `program`'s, a node of its own):
/// `args`, fast heartbeats and, as every cluster runs by default
/// (deploy/local-cluster.sh), mutual TLS unless `tls` is false.
inline std::vector<std::string>
node_args(std::vector<std::string> args, bool tls = true,
          const std::string& program = node_bin) {
  args.insert(args.begin(), program);
  args.insert(args.end(), fast_heartbeats.begin(), fast_heartbeats.end());
  if (tls) {
    auto flags = tls_flags();
    args.insert(args.end(), flags.begin(), flags.end());
  }
  return args;
}

/// The value of the last --server.mode= in `flags`, or "".
inline std::string mode_in(const std::vector<std::string>& flags) {
  std::string out;
  const std::string flag = "--server.mode=";
  for (auto& f : flags)
    if (f.rfind(flag, 0) == 0)
      out = f.substr(flag.size());
  return out;
}

/// `flags` and --server.mode=`mode`.
inline std::vector<std::string> with_mode(std::vector<std::string> flags,
                                          const std::string& mode) {
  flags.push_back("--server.mode=" + mode);
  return flags;
}

/// A scheduler process and its port.
struct scheduler_process {
  std::unique_ptr<child_process> proc;
  uint16_t port = 0;
  /// Its --server.mode, which every node must be given (the scheduler
  /// refuses others): start_counter and start_agent pass it on.
  std::string mode = "sync";
  scheduler_process(uint32_t servers, uint32_t workers,
                    std::vector<std::string> extra = {}) {
    if (auto m = mode_in(extra); !m.empty())
      mode = m;
    extra.insert(extra.begin(),
                 {"--role=scheduler", "--scheduler-port=0",
                  "--cluster.servers=" + std::to_string(servers),
                  "--cluster.workers=" + std::to_string(workers)});
    listening(std::make_unique<child_process>(node_args(std::move(extra))));
  }
  /// A scheduler started by the caller (its own TLS flags, say).
  explicit scheduler_process(std::unique_ptr<child_process> p) {
    listening(std::move(p));
  }
  /// Waits (bounded) until `p` listens, and takes it and its port.
  void listening(std::unique_ptr<child_process> p) {
    proc = std::move(p);
    auto line = proc->wait_for_line("scheduler listening on", 20s);
    BOOST_REQUIRE_MESSAGE(line, "no scheduler: " << proc->output());
    port = static_cast<uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
  }
  std::string flag() const {
    return "--scheduler-port=" + std::to_string(port);
  }
};

/// A server in `mode`, with `extra` flags; returns once it listens.
inline std::unique_ptr<child_process>
start_server(const scheduler_process& s, const std::string& mode,
             std::vector<std::string> extra = {}) {
  extra.insert(extra.begin(),
               {"--role=server", s.flag(), "--server.mode=" + mode});
  auto p = std::make_unique<child_process>(node_args(std::move(extra)));
  BOOST_REQUIRE_MESSAGE(p->wait_for_line("server listening on", 20s),
                        p->output());
  return p;
}

/// `flags` with the scheduler's --server.mode in front where they name
/// none.
inline std::vector<std::string> in_mode_of(const scheduler_process& s,
                                           std::vector<std::string> flags) {
  if (mode_in(flags).empty())
    flags.insert(flags.begin(), "--server.mode=" + s.mode);
  return flags;
}

/// A worker of the counter workload (every worker adds 1 per clock to 3
/// arrays of 40000 floats), with `extra` flags (and the scheduler's mode);
/// starts at once.
inline std::unique_ptr<child_process>
start_counter(const scheduler_process& s, uint32_t steps,
              std::vector<std::string> extra = {}) {
  extra = in_mode_of(s, std::move(extra));
  extra.insert(extra.begin(),
               {"--role=worker", "--worker.task=counter", s.flag(),
                "--worker.steps=" + std::to_string(steps), "--worker.keys=3",
                "--worker.key-floats=40000"});
  return std::make_unique<child_process>(node_args(std::move(extra)));
}

inline const std::string config_file = TROUPE_SOURCE_DIR "/deploy/local.ini";

/// An agent of `servers` servers and `workers` workers (the cluster's
/// size, too) with the main job's config; children write to the agent's
/// own output. Returns once it starts its children.
inline std::unique_ptr<child_process>
start_agent(const scheduler_process& s, uint32_t servers, uint32_t workers,
            std::vector<std::string> extra) {
  extra = in_mode_of(s, std::move(extra));
  extra.insert(extra.begin(),
               {"--role=agent", "--config-file=" + config_file, s.flag(),
                "--agent.servers=" + std::to_string(servers),
                "--agent.workers=" + std::to_string(workers),
                "--cluster.servers=" + std::to_string(servers),
                // A servers-only agent's job has its workers elsewhere
                // (--cluster.workers=0 is refused).
                "--cluster.workers=" + std::to_string(std::max(workers, 1u)),
                "--log-level=info"});
  auto p = std::make_unique<child_process>(node_args(std::move(extra)));
  BOOST_REQUIRE_MESSAGE(p->wait_for_line("agent starting", 20s), p->output());
  return p;
}

/// A TCP connection to loopback port `port` whose reads give up after
/// `limit_s` seconds (0: never).
inline int connect_loopback(uint16_t port, time_t limit_s = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) ==
                0);
  timeval limit{limit_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  return fd;
}

/// The figure of the agent's (or a worker's) "final test accuracy: " line.
inline double final_accuracy(child_process& p) {
  auto line = p.wait_for_line("final test accuracy: ", 1s);
  BOOST_REQUIRE_MESSAGE(line, p.output());
  return std::stod(line->substr(line->find(": ") + 2));
}

/// A command line that must be refused: exit `code` (0: any nonzero
/// one), saying `says`.
struct bad_command {
  std::vector<std::string> args; // the program first
  std::string says;
  int code = 0;
};

inline void check_refused(const std::vector<bad_command>& cases) {
  for (auto& c : cases) {
    child_process p{c.args};
    auto rc = p.wait_exit(20s);
    BOOST_REQUIRE(rc);
    BOOST_CHECK_NE(*rc, 0);
    if (c.code != 0)
      BOOST_CHECK_MESSAGE(*rc == c.code, "exit " << *rc << ": " << p.output());
    BOOST_CHECK_MESSAGE(p.output().find(c.says) != std::string::npos,
                        p.output());
  }
}

} // namespace troupe::test
