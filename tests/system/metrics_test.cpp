// Live metrics (--metrics.port): an agent's children serve on the next
// ports, a scrape during a job shows them moving (samples, step times,
// round latencies, road bytes, the view, events, restarts), and a port
// that is taken is said once while the node goes on.
#define BOOST_TEST_MODULE metrics_tests
#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "actors/base/metrics.hpp"
#include "tests/system/nodes.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// A loopback socket listening on a free port; closed by the destructor.
struct held_port {
  int fd = -1;
  uint16_t port = 0;
  held_port() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) ==
                  0);
    BOOST_REQUIRE(::listen(fd, 1) == 0);
    socklen_t n = sizeof(sa);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &n);
    port = ntohs(sa.sin_port);
  }
  ~held_port() { ::close(fd); }
};

/// True if loopback port `p` can be bound now.
bool bindable(uint16_t p) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(p);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  ::close(fd);
  return ok;
}

/// A free port with the next `n` ports free too.
uint16_t free_ports(int n) {
  for (int tries = 0; tries < 100; ++tries) {
    uint16_t p = held_port{}.port;
    if (p + n > 65535)
      continue;
    bool all = true;
    for (int k = 0; k <= n && all; ++k)
      all = bindable(static_cast<uint16_t>(p + k));
    if (all)
      return p;
  }
  BOOST_FAIL("no run of free ports");
  return 0;
}

/// GET /metrics on loopback `port`: the body, or nothing if none answers.
std::optional<std::string> scrape(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval limit{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    ::close(fd);
    return std::nullopt;
  }
  std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof(buf), 0)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  auto body = out.find("\r\n\r\n");
  if (out.rfind("HTTP/1.", 0) != 0 || body == std::string::npos ||
      out.find(" 200 ") == std::string::npos)
    return std::nullopt;
  return out.substr(body + 4);
}

/// The value of the sample `series` (name with its labels, as written),
/// or nothing if the text has no such line.
std::optional<double> sample(const std::string& text,
                             const std::string& series) {
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0)
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
  return std::nullopt;
}

/// The job's progress lines as events to scrape at: rank 0 prints one
/// every half epoch ("epoch 0.50/12 ..."), through the agent's output. A
/// rank 0 that is restarted skips the lines of the steps it missed.
struct progress {
  child_process& agent;
  uint32_t epochs;
  uint32_t seen = 0; // half epochs
  /// Waits for a later line than the last; false once the job has none.
  bool next() {
    std::vector<std::string> later;
    for (auto k = seen + 1; k <= 2 * epochs; ++k) {
      char needle[32];
      std::snprintf(needle, sizeof(needle), "epoch %.2f/%u", k / 2.0, epochs);
      later.push_back(needle);
    }
    if (later.empty())
      return false;
    auto line = agent.wait_for_any_line(later, std::chrono::seconds(120));
    if (!line)
      return false;
    seen = static_cast<uint32_t>(
        2 * std::strtod(line->c_str() + line->find(' ') + 1, nullptr) + 0.5);
    return true;
  }
};

/// Scrapes `port` at each progress line until `ok` holds for the text;
/// the text, or the test fails naming `what` and the last scrape.
template <class Pred>
std::string scrape_until(uint16_t port, progress& job, Pred ok,
                         const std::string& what) {
  std::string last = "(nothing served)";
  do {
    if (auto t = scrape(port)) {
      last = *t;
      if (ok(last))
        return last;
    }
  } while (job.next());
  BOOST_FAIL("port " << port << ": " << what
                     << " not seen by the job's end; last scrape:\n"
                     << last << "\nagent:\n"
                     << job.agent.output());
  return last;
}

} // namespace

BOOST_AUTO_TEST_SUITE(metrics_tests)

BOOST_AUTO_TEST_CASE(the_registry_keeps_one_series_per_name_and_labels) {
  auto& a =
      metrics::counter("troupe_test_total", "a test counter", {{"k", "x"}});
  auto& b =
      metrics::counter("troupe_test_total", "a test counter", {{"k", "x"}});
  BOOST_CHECK(&a == &b);
  a.Increment(3);
  metrics::histogram("troupe_test_seconds", "a test histogram",
                     metrics::latency_buckets())
      .Observe(0.002);
  auto text = metrics::text();
  BOOST_CHECK_EQUAL(sample(text, "troupe_test_total{k=\"x\"}").value_or(-1),
                    3.0);
  BOOST_CHECK_EQUAL(sample(text, "troupe_test_seconds_count").value_or(-1),
                    1.0);
  BOOST_CHECK_EQUAL(
      sample(text, "troupe_test_seconds_bucket{le=\"0.001\"}").value_or(-1),
      0.0);
  BOOST_CHECK_EQUAL(
      sample(text, "troupe_test_seconds_bucket{le=\"0.0025\"}").value_or(-1),
      1.0);
}

BOOST_AUTO_TEST_CASE(a_job_serves_metrics_that_move) {
  // Scheduler on its own port; an agent on P with a server (P + 1) and
  // two workers (P + 2, P + 3). Worker 1 is killed once: the agent counts
  // the restart, and the new process serves on the same port again.
  auto ps = free_ports(0);
  auto pa = free_ports(3);
  scheduler_process s(1, 2, {"--metrics.port=" + std::to_string(ps)});
  auto agent =
      start_agent(s, 1, 2,
                  {"--metrics.port=" + std::to_string(pa), "--train.epochs=12",
                   "--train.evals-per-epoch=2", "--train.eval-samples=500",
                   "--fault.plan=kill:worker-1@1500"});
  progress job{*agent, 12};
  uint16_t srv = pa + 1, w0 = pa + 2, w1 = pa + 3;
  auto samples = [](const std::string& t) {
    return sample(t, "troupe_samples_total").value_or(0);
  };
  auto first = scrape_until(
      w0, job, [&](const std::string& t) { return samples(t) > 0; },
      "a stepped sample");
  auto before = samples(first);
  BOOST_REQUIRE(job.next());
  auto later = scrape_until(
      w0, job, [&](const std::string& t) { return samples(t) > before; },
      "samples growing");
  BOOST_CHECK_EQUAL(
      sample(later, "troupe_node_info{role=\"worker\"}").value_or(0), 1.0);
  BOOST_CHECK_GT(sample(later, "troupe_step_compute_seconds_count").value_or(0),
                 0.0);
  BOOST_CHECK_GT(sample(later, "troupe_step_wait_seconds_count").value_or(0),
                 0.0);
  BOOST_CHECK_GT(
      sample(later, "troupe_kv_seconds_count{op=\"push_pull\"}").value_or(0),
      0.0);
  BOOST_CHECK_GE(sample(later, "troupe_view_epoch").value_or(0), 1.0);
  BOOST_CHECK_EQUAL(
      sample(later, "troupe_members{role=\"server\"}").value_or(0), 1.0);
  auto road_sent = [](const std::string& t) {
    return sample(t, "troupe_road_bytes_total{direction=\"sent\",road=\"shm\"}")
               .value_or(0) +
           sample(t, "troupe_road_bytes_total{direction=\"sent\",road=\"tcp\"}")
               .value_or(0);
  };
  BOOST_CHECK_GT(road_sent(later), 0.0);
  auto on_server = scrape_until(
      srv, job, [&](const std::string& t) { return road_sent(t) > 0; },
      "the server's replies");
  BOOST_CHECK_EQUAL(
      sample(on_server, "troupe_node_info{role=\"server\"}").value_or(0), 1.0);
  auto sched = scrape_until(
      ps, job,
      [](const std::string& t) {
        return sample(t, "troupe_events_total{kind=\"joined\"}").value_or(0) >=
               3;
      },
      "three joined events");
  BOOST_CHECK_GE(sample(sched, "troupe_view_epoch").value_or(0), 1.0);
  scrape_until(
      pa, job,
      [](const std::string& t) {
        return sample(t, "troupe_restarts_total{child=\"worker-1\"}")
                   .value_or(0) >= 1;
      },
      "worker-1's restart");
  scrape_until(
      w1, job,
      [](const std::string& t) {
        return sample(t, "troupe_node_info{role=\"worker\"}").has_value();
      },
      "the restarted worker-1 serving");
  BOOST_CHECK(agent->wait_for_line("final test accuracy: ", 240s));
  auto rc = agent->wait_exit(std::chrono::seconds(30));
  BOOST_CHECK_MESSAGE(rc && *rc == 0, agent->output());
}

BOOST_AUTO_TEST_CASE(a_taken_port_is_said_and_the_node_goes_on) {
  // The scheduler listens (scheduler_process waits for it) although its
  // metrics port is taken, and said why before.
  held_port taken;
  scheduler_process s(1, 1, {"--metrics.port=" + std::to_string(taken.port)});
  auto line = s.proc->wait_for_line("going on without them", 1s);
  BOOST_REQUIRE_MESSAGE(line, s.proc->output());
  BOOST_CHECK(line->find("--metrics.port=" + std::to_string(taken.port)) !=
              std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_taken_status_port_is_said_and_the_scheduler_goes_on) {
  held_port taken;
  scheduler_process s(1, 1,
                      {"--cluster.status-port=" + std::to_string(taken.port)});
  auto line = s.proc->wait_for_line("going on without it", 1s);
  BOOST_REQUIRE_MESSAGE(line, s.proc->output());
  BOOST_CHECK(line->find("--cluster.status-port=" +
                         std::to_string(taken.port)) != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
