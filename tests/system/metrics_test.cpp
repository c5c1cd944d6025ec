// Live metrics (--metrics.port): an agent's children serve on the next
// ports, a scrape during a job shows them moving (samples, step times,
// round latencies, road bytes, the view, events, restarts), a port that
// is taken is said once while the node goes on, and requests neither
// server serves (a HEAD, a POST, another path, half a request) are
// answered while the node goes on.
#define BOOST_TEST_MODULE metrics_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "actors/base/metrics.hpp"
#include "tests/system/http_client.hpp"
#include "tests/system/nodes.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

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

BOOST_AUTO_TEST_CASE(
    requests_it_does_not_serve_are_answered_and_the_node_lives) {
  // civetweb's own answers (to a HEAD, a POST, a path without a handler)
  // overflowed its threads' stacks, which OpenBLAS's thread-local storage
  // had shrunk (http_threads.hpp): one such request ended the scheduler.
  auto p = free_ports(1);
  uint16_t metrics = p, page = p + 1;
  scheduler_process s(1, 1,
                      {"--metrics.port=" + std::to_string(metrics),
                       "--cluster.status-port=" + std::to_string(page)});
  BOOST_REQUIRE_MESSAGE(s.proc->wait_for_line("status page on", 5s),
                        s.proc->output());
  auto status = [](const std::string& answer) {
    return answer.substr(0, answer.find("\r\n"));
  };
  // The status page: a HEAD as a GET without its body, other methods 405.
  auto head = http(page, "HEAD", "/status.json");
  BOOST_CHECK_EQUAL(status(head), "HTTP/1.1 200 OK");
  BOOST_CHECK(head.find("Content-Length: ") != std::string::npos);
  BOOST_CHECK_EQUAL(head.substr(head.find("\r\n\r\n") + 4), "");
  for (auto m : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH"}) {
    auto a = http(page, m, "/");
    BOOST_CHECK_MESSAGE(status(a) == "HTTP/1.1 405 Method Not Allowed" &&
                            a.find("Allow: GET, HEAD") != std::string::npos,
                        m << ": " << a);
  }
  BOOST_CHECK_EQUAL(status(http(page, "GET", "/nope")),
                    "HTTP/1.1 404 Not Found");
  // Before the first member joins, the JSON is an empty view.
  auto first = scrape(page, "/status.json");
  BOOST_REQUIRE(first);
  BOOST_CHECK(first->find("\"members\":[]") != std::string::npos);
  // The metrics port: civetweb's own 4xx for the rest.
  for (auto [m, path] : {std::pair{"GET", "/"},
                         {"GET", "/nope"},
                         {"HEAD", "/metrics"},
                         {"POST", "/metrics"}}) {
    auto a = status(http(metrics, m, path));
    BOOST_CHECK_MESSAGE(a.rfind("HTTP/1.", 0) == 0 && a.size() > 9 &&
                            a[9] == '4',
                        m << " " << path << ": " << a);
  }
  BOOST_REQUIRE_MESSAGE(!s.proc->wait_exit(0ms), s.proc->output());
  // Clients that send half a request hold a thread each, as many as each
  // server has (4), until its request timeout drops them (3 s; civetweb's
  // own is 30 s, past a scrape's 10): the next GET is answered then.
  std::vector<std::unique_ptr<http_client>> halves;
  for (int i = 0; i < 4; ++i)
    for (auto port : {page, metrics})
      halves.push_back(std::make_unique<http_client>(
          port, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  auto late_get = [](uint16_t port, const std::string& path) {
    auto a =
        http_client{port, "GET " + path + " HTTP/1.0\r\n\r\n", 20}.answer();
    return a.substr(0, a.find("\r\n"));
  };
  for (auto [port, path] :
       {std::pair{page, "/status.json"}, std::pair{metrics, "/metrics"}}) {
    auto status = late_get(port, path);
    BOOST_CHECK_MESSAGE(status.find(" 200 ") != std::string::npos,
                        path << ": '" << status << "'");
  }
  BOOST_CHECK_MESSAGE(!s.proc->wait_exit(0ms), s.proc->output());
}

BOOST_AUTO_TEST_SUITE_END()
