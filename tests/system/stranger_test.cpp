// Strangers against a training cluster (issue 36's targets): strangers
// flood every port a node opens with what cost memory at bc0f027, before
// the main job (where RSS is measured) and while it trains. No node grows
// by 64 MiB or more, and training still reaches 0.88.
#define BOOST_TEST_MODULE stranger_tests
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/system/nodes.hpp"
#include "tests/system/scheduler_client.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// Peak resident memory of process `pid` so far (VmHWM), in bytes.
uint64_t peak_rss(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stoull(line.substr(6)) * 1024; // "  1234 kB"
  BOOST_FAIL("no VmHWM for pid " << pid);
  return 0;
}

/// A stranger's TCP connection to 127.0.0.1:port.
struct stranger {
  int fd = -1;
  explicit stranger(uint16_t port) : fd(connect_loopback(port)) {}
  ~stranger() { ::close(fd); }
  /// Sends what it can of `n` bytes at `p` (the node may end it first).
  void send(const void* p, size_t n) {
    ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  /// True once the node ended the connection (within `limit`).
  bool ended(std::chrono::milliseconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    char buf[4096];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0)
        return false;
      auto n = ::recv(fd, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET))
        return true;
    }
  }
};

/// What a stranger sent at bc0f027 to cost memory: on a CAF port, a BASP
/// client handshake that announces a 1 GiB payload (CAF 0.17 writes the
/// operation, the flags, then the payload length, big-endian; four of
/// them kill a plaintext scheduler); on a road port, a header for a
/// 256 MiB push with no handshake before it. Both followed by 1 MiB.
std::vector<char> attack_bytes(bool road) {
  std::vector<char> out(1u << 20, 0);
  if (road) {
    uint32_t magic = 0x31505254;
    uint8_t op = 3; // push
    uint64_t bytes = uint64_t{256} << 20;
    std::memcpy(out.data(), &magic, 4);
    std::memcpy(out.data() + 4, &op, 1);
    std::memcpy(out.data() + 24, &bytes, 8);
  } else {
    uint32_t payload = htonl(1u << 30);
    out[0] = 1; // client_handshake
    std::memcpy(out.data() + 2, &payload, 4);
  }
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(stranger_tests)

BOOST_AUTO_TEST_CASE(strangers_on_every_port_cost_little_and_training_goes_on) {
  std::vector<std::string> job{"--config-file=" + config_file};
  scheduler_process s{2, 2, job};
  auto srv0 = start_server(s, "sync", job);
  auto srv1 = start_server(s, "sync", job);
  scheduler_client c{s.port};
  BOOST_REQUIRE(c.wait_for_view(
      [](const cluster_view& v) { return v.servers.size() == 2; }));
  auto v = c.view();
  std::map<std::string, pid_t> nodes{{"scheduler", s.proc->pid()},
                                     {"server 0", srv0->pid()},
                                     {"server 1", srv1->pid()}};
  // Every port a node opens: the scheduler's and servers' CAF ports, the
  // servers' roads.
  std::vector<std::pair<uint16_t, bool>> ports{{s.port, false}};
  for (auto& n : v.servers) {
    ports.emplace_back(n.port, false);
    ports.emplace_back(n.road.port, true);
  }
  // 16 strangers on each send the costly bytes; 300 more on each road stay
  // silent. Each is ended by its node: a failed TLS or road handshake, or
  // the 3 s (TLS) and 5 s (road) handshake limits. True once all ended.
  auto attack = [&ports](bool silent_ones) {
    std::vector<std::unique_ptr<stranger>> xs;
    for (auto [port, road] : ports) {
      auto bytes = attack_bytes(road);
      for (int i = 0; i < 16; ++i) {
        xs.push_back(std::make_unique<stranger>(port));
        xs.back()->send(bytes.data(), bytes.size());
      }
      for (int i = 0; silent_ones && road && i < 300; ++i)
        xs.push_back(std::make_unique<stranger>(port));
    }
    size_t ended = 0;
    for (auto& x : xs)
      ended += x->ended(20s) ? 1 : 0;
    BOOST_CHECK_EQUAL(ended, xs.size());
  };
  // The cost, measured on nodes that do nothing else: the job has not
  // started, so their peak RSS moves only for the strangers.
  std::map<std::string, uint64_t> before;
  for (auto& [name, pid] : nodes)
    before[name] = peak_rss(pid);
  attack(true);
  for (auto& [name, pid] : nodes) {
    auto grew = peak_rss(pid) - before[name];
    BOOST_TEST_MESSAGE(name << ": peak RSS grew by " << (grew >> 10) << " KiB");
    BOOST_CHECK_MESSAGE(grew < (uint64_t{64} << 20),
                        name << " grew by " << (grew >> 20) << " MiB");
  }
  // Training, with strangers at every port again once it is under way.
  std::vector<std::unique_ptr<child_process>> workers;
  for (int i = 0; i < 2; ++i) {
    auto args = job;
    args.insert(args.begin(), {"--role=worker", s.flag()});
    workers.push_back(std::make_unique<child_process>(node_args(args)));
  }
  BOOST_REQUIRE_MESSAGE(c.wait_for_view([](const cluster_view& x) {
    return x.workers.size() == 2;
  }),
                        workers[0]->output());
  attack(false);
  for (auto& w : workers) {
    auto rc = w->wait_exit(300s);
    BOOST_REQUIRE_MESSAGE(rc && *rc == 0, w->output());
  }
  // Rank 0 reports the accuracy: whichever process that is.
  double acc = 0;
  for (auto& w : workers)
    if (w->wait_for_line("final test accuracy: ", 1s))
      acc = final_accuracy(*w);
  BOOST_TEST_MESSAGE("final test accuracy " << acc);
  BOOST_CHECK_GE(acc, 0.88);
}

BOOST_AUTO_TEST_SUITE_END()
