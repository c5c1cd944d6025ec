// The kv API over each road (middleman, tcp, shared memory): arrays of one
// float to 256 MiB, cut into parts at the default --kv.max-message-bytes,
// come back exact, and pipelined requests keep their order.
#define BOOST_TEST_MODULE kv_roads_tests
#include <boost/test/unit_test.hpp>

#include "tests/test_support.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <sstream>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/base/log.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "tests/local_cluster.hpp"
#include "tests/road/road_traces.hpp"

using namespace troupe;
using troupe::test::cluster;
using troupe::test::why;
using namespace std::chrono_literals;

namespace {

/// Floats of the arrays of the size sweep: tiny ones, one slice plus one
/// float, 16 MiB plus one float (two parts to one server), and 256 MiB
/// (many parts). An empty array cannot be declared (checked apart).
const std::vector<size_t> sweep_floats{1, 3, 4097, (16u << 20) / 4 + 1,
                                       64u << 20};

/// Slice bound of the scheduler: troupe's default, 64 KiB.
constexpr uint32_t slice_floats = 16384;

/// Values exact in float32 whatever is added below: small integers.
float init_value(uint64_t key, size_t i) {
  return static_cast<float>((i + key) % 1024);
}
float grad_value(uint64_t key, size_t i) {
  return static_cast<float>((i * 7 + key) % 13 + 1);
}

named_array init_array(uint64_t key, size_t n) {
  named_array x{key, std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i)
    x.values[i] = init_value(key, i);
  return x;
}

named_array grad_array(uint64_t key, size_t n) {
  named_array x{key, std::vector<float>(n)};
  for (size_t i = 0; i < n; ++i)
    x.values[i] = grad_value(key, i);
  return x;
}

/// "" if `x` is key `key` of `n` floats holding init + pushes * grad.
std::string check_values(const named_array& x, uint64_t key, size_t n,
                         float pushes) {
  if (x.key != key || x.values.size() != n)
    return "got key " + std::to_string(x.key) + " of " +
           std::to_string(x.values.size()) + " floats";
  for (size_t i = 0; i < n; ++i) {
    auto want = init_value(key, i) + pushes * grad_value(key, i);
    if (x.values[i] != want) {
      std::ostringstream out;
      out << "key " << key << " float " << i << " of " << n << " is "
          << x.values[i] << ", expected " << want;
      return out.str();
    }
  }
  return "";
}

/// Checks that worker `w`'s kv frames take `road`: shared memory maps
/// rings (two per server, mapped by both ends in this process), tcp holds
/// connections to each server's road port, middleman neither.
void check_road_in_use(kv& w, const std::string& road) {
  auto v = w.view();
  BOOST_REQUIRE_MESSAGE(v, why(v));
  size_t conns = 0;
  for (auto& s : v->second.servers) {
    BOOST_REQUIRE_NE(s.road.port, 0);
    conns += test::tcp_connections_on(s.road.port);
  }
  auto servers = v->second.servers.size();
  BOOST_CHECK_EQUAL(test::ring_mappings(),
                    road == "auto" ? 4 * servers : size_t{0});
  BOOST_CHECK_EQUAL(conns, road == "tcp" ? servers * test::tcp_road_connections
                                         : size_t{0});
}

/// Bytes of the slices of an array of `n` floats that a pull reply carries
/// as segments of their own (whole words, 4 KiB or more: messages/kv.cpp),
/// which the tcp road lands in place.
size_t landing_bytes(size_t n) {
  size_t out = 0;
  for (size_t at = 0; at < n; at += slice_floats) {
    auto bytes = std::min<size_t>(slice_floats, n - at) * sizeof(float);
    out += bytes >= 4096 && bytes % 8 == 0 ? bytes : 0;
  }
  return out;
}

/// Checks that the pulls since `before` (road_landed_bytes) landed `want`
/// bytes in place on the tcp road, and none on the others.
void check_landed(const std::string& road, uint64_t before, size_t want) {
  auto landed = road_landed_bytes() - before;
  BOOST_CHECK_MESSAGE(road == "tcp" ? landed >= want : landed == 0,
                      road << ": " << landed << " bytes landed in place for "
                           << want << " that could");
}

/// Declares every array of the sweep, then pushes and pulls each in turn.
void sweep_sizes(const std::string& road) {
  // The roads under test, without replication (which forwards every push
  // to the backup over CAF; server_faults_test covers it).
  cluster c{"async", 2, 1, 16u << 20, add_update, slice_floats, road, 0};
  auto& w = *c.workers.front();
  auto empty = w.init({named_array{100, {}}});
  BOOST_REQUIRE_MESSAGE(!empty, road << ": an empty array was declared");
  BOOST_CHECK(empty.error() == errc::malformed_message);
  BOOST_CHECK_MESSAGE(why(empty).find("key size out of range") !=
                          std::string::npos,
                      why(empty));
  std::vector<named_array> xs;
  for (size_t k = 0; k < sweep_floats.size(); ++k)
    xs.push_back(init_array(k + 1, sweep_floats[k]));
  auto got = w.init(xs);
  BOOST_REQUIRE_MESSAGE(got, road << ": init: " << why(got));
  BOOST_REQUIRE_EQUAL(got->size(), xs.size());
  for (size_t k = 0; k < xs.size(); ++k) {
    auto bad = check_values((*got)[k], k + 1, sweep_floats[k], 0);
    BOOST_CHECK_MESSAGE(bad.empty(), road << ": init: " << bad);
  }
  got->clear();
  xs.clear();
  check_road_in_use(w, road);
  auto landed = road_landed_bytes();
  size_t could = 0;
  for (uint64_t clock = 0; clock < sweep_floats.size(); ++clock) {
    auto key = clock + 1;
    auto n = sweep_floats[clock];
    could += landing_bytes(n);
    BOOST_TEST_MESSAGE(road << ": push and pull " << n << " floats");
    auto acked = w.push(clock, {grad_array(key, n)});
    BOOST_REQUIRE_MESSAGE(acked, road << ": push: " << why(acked));
    auto pulled = w.pull(clock + 1, {key});
    BOOST_REQUIRE_MESSAGE(pulled, road << ": pull: " << why(pulled));
    BOOST_REQUIRE_EQUAL(pulled->size(), 1u);
    auto bad = check_values(pulled->front(), key, n, 1);
    BOOST_CHECK_MESSAGE(bad.empty(), road << ": " << bad);
  }
  BOOST_CHECK_GT(could, 0u);
  check_landed(road, landed, could);
}

/// The same sweep through push_pull: each step's push and the pull after
/// it in one call, which must read its own push whole.
void sweep_push_pull(const std::string& road) {
  // The roads under test, without replication (which forwards every push
  // to the backup over CAF; server_faults_test covers it).
  cluster c{"async", 2, 1, 16u << 20, add_update, slice_floats, road, 0};
  auto& w = *c.workers.front();
  std::vector<named_array> xs;
  for (size_t k = 0; k < sweep_floats.size(); ++k)
    xs.push_back(init_array(k + 1, sweep_floats[k]));
  auto got = w.init(std::move(xs));
  BOOST_REQUIRE_MESSAGE(got, road << ": init: " << why(got));
  got->clear();
  auto landed = road_landed_bytes();
  size_t could = 0;
  for (uint64_t clock = 0; clock < sweep_floats.size(); ++clock) {
    auto key = clock + 1;
    auto n = sweep_floats[clock];
    could += landing_bytes(n);
    BOOST_TEST_MESSAGE(road << ": push_pull " << n << " floats");
    auto pulled = w.push_pull(clock, {grad_array(key, n)}, {key});
    BOOST_REQUIRE_MESSAGE(pulled, road << ": push_pull: " << why(pulled));
    BOOST_REQUIRE_EQUAL(pulled->size(), 1u);
    auto bad = check_values(pulled->front(), key, n, 1);
    BOOST_CHECK_MESSAGE(bad.empty(), road << ": push_pull: " << bad);
  }
  check_landed(road, landed, could);
}

// -- pipelined requests -------------------------------------------------------

/// A request in flight: a push, or a pull that must see `pushes` pushes.
struct pending {
  caf::response_handle<caf::blocking_actor, caf::message, true> reply;
  bool pull;
  float pushes;
};

/// Alternates pushes and pulls of `key` (`n` floats) with `depth` requests
/// in flight, `total` in all; each pull, sent after the pushes before it,
/// must read exactly those, or with `resent` (a pull sent again may find
/// pushes after it that the server had taken already) at least those and
/// at most all sent so far. With `until`, it goes on past `total`,
/// `depth` always in flight, until that holds (looked at after each
/// reply), for 20 s at most. Returns what went wrong, or "".
std::string pipeline(cluster& c, kv& w, uint64_t key, size_t n, size_t depth,
                     size_t total, uint64_t& clock, bool resent = false,
                     const std::function<bool()>& until = {}) {
  // Built up front, so that the first `depth` requests reach the kv client
  // at once, as from a training loop that does not wait.
  std::vector<std::vector<named_array>> pushes_to_send(
      total / 2 + 1, std::vector<named_array>{grad_array(key, n)});
  std::deque<pending> in_flight;
  float pushes = 0;
  size_t sent = 0;
  auto deadline = std::chrono::steady_clock::now() + 20s;
  bool more = static_cast<bool>(until); // sending past `total`
  auto more_to_send = [&] {
    if (sent < total)
      return true;
    if (more && (until() || std::chrono::steady_clock::now() > deadline))
      more = false;
    return more;
  };
  while (more_to_send() || !in_flight.empty()) {
    for (; more_to_send() && in_flight.size() < depth; ++sent)
      if (sent % 2 == 0) {
        pushes += 1;
        auto xs = sent / 2 < pushes_to_send.size()
                      ? std::move(pushes_to_send[sent / 2])
                      : std::vector<named_array>{grad_array(key, n)};
        in_flight.push_back({c.self->request(w.handle(), 60s, push_atom_v,
                                             clock++, std::move(xs)),
                             false, pushes});
      } else {
        in_flight.push_back({c.self->request(w.handle(), 60s, pull_atom_v,
                                             clock, std::vector<uint64_t>{key}),
                             true, pushes});
      }
    std::string bad;
    auto& p = in_flight.front();
    auto on_error = [&bad](caf::error& err) { bad = describe(err); };
    if (p.pull)
      p.reply.receive(
          [&bad, &p, key, n, resent, pushes](std::vector<named_array>& got) {
            if (got.size() != 1) {
              bad = "pulled " + std::to_string(got.size()) + " arrays";
              return;
            }
            auto seen = p.pushes; // pushes its values hold
            if (resent && !got[0].values.empty())
              seen =
                  (got[0].values[0] - init_value(key, 0)) / grad_value(key, 0);
            bad = check_values(got[0], key, n, seen);
            if (bad.empty() && (seen < p.pushes || seen > pushes))
              bad = "read " + std::to_string(seen) + " pushes, sent " +
                    std::to_string(p.pushes) + " before it and " +
                    std::to_string(pushes) + " in all";
          },
          on_error);
    else
      p.reply.receive([](uint64_t) {}, on_error);
    if (!bad.empty())
      return (p.pull ? "pull: " : "push: ") + bad;
    in_flight.pop_front();
  }
  if (until && !until())
    return "sent " + std::to_string(sent) + " requests, " +
           std::to_string(depth) + " in flight, for 20 s: what they waited" +
           " for never came";
  return "";
}

/// Declares key 1 of `n` floats on one server and pipelines pushes and
/// pulls of it, 8 in flight.
void pipeline_on(const std::string& road, size_t n) {
  cluster c{"async", 1, 1, 16u << 20, add_update, slice_floats, road};
  auto& w = *c.workers.front();
  auto got = w.init({init_array(1, n)});
  BOOST_REQUIRE_MESSAGE(got, road << ": init: " << why(got));
  uint64_t clock = 0;
  auto bad = pipeline(c, w, 1, n, 8, 32, clock);
  BOOST_CHECK_MESSAGE(bad.empty(), road << ", " << n << " floats: " << bad);
}

/// 16 MiB + 4 bytes: two parts, and four pushes of it fill the window
/// (64 MiB: --kv.window-bytes on a road, 4 x max-message-bytes over CAF) so
/// that requests wait.
constexpr size_t window_filling_floats = (16u << 20) / 4 + 1;

/// Floats of the key the road-cut tests push and pull.
constexpr size_t cut_floats = 4097;
/// ... and with requests always in flight: 256 KiB, so that CAF, which
/// carries them while the road is down, always has some in flight.
constexpr size_t in_flight_floats = 65536;

/// One server (`mode`, no replicas) and a worker whose fast road ends
/// right after its `cut`-th request on it (--fault.cut-road-after), the
/// server staying up; key 1 initialised with `floats` floats.
struct cut_road_job {
  cluster c;
  kv_settings ks;
  std::unique_ptr<kv> w;
  cut_road_job(const std::string& road, uint32_t cut,
               const std::string& mode = "async", size_t floats = cut_floats)
      : c{mode, 1, 0, 16u << 20, add_update, slice_floats, road, 0, 1} {
    ks.request_timeout_ms = 10000;
    ks.road_text = road;
    ks.road = *parse_road(road);
    ks.faults.cut_road_after = cut;
    w = std::make_unique<kv>(c.b, c.remote_sched, ks);
    auto got = w->init({init_array(1, floats)});
    BOOST_REQUIRE_MESSAGE(got, road << ": init: " << why(got));
  }
};

/// Every call of a worker whose road is cut still succeeds, over CAF
/// (resent there 100 ms on, rather than failing after the request
/// timeout), and each pull reads exactly the pushes before it (a push the
/// server took before the road broke, resent over CAF, is dropped as the
/// duplicate it is). A second later the road is dialled again, and calls
/// over it stay exact.
void survive_a_road_cut(const std::string& road, uint32_t cut) {
  cut_road_job job{road, cut};
  auto& w = *job.w;
  constexpr size_t n = cut_floats;
  auto v = w.view();
  BOOST_REQUIRE(v && v->second.servers.size() == 1);
  auto road_port = v->second.servers.front().road.port;
  auto step = [&w, &road](uint64_t clock) {
    auto acked = w.push(clock, {grad_array(1, n)});
    BOOST_REQUIRE_MESSAGE(acked,
                          road << ": push " << clock << ": " << why(acked));
    auto pulled = w.pull(clock + 1, {1});
    BOOST_REQUIRE_MESSAGE(pulled, road << ": pull " << clock + 1 << ": "
                                       << why(pulled));
    BOOST_REQUIRE_EQUAL(pulled->size(), 1u);
    auto bad = check_values(pulled->front(), 1, n, clock + 1);
    BOOST_CHECK_MESSAGE(bad.empty(),
                        road << ", clock " << clock << ": " << bad);
  };
  uint64_t clock = 0;
  for (; clock < 6; ++clock)
    step(clock);
  // The road is back (rings mapped, a connection to its port), and carries
  // the calls from then on.
  if (job.ks.road == road_kind::shm)
    BOOST_CHECK(
        test::poll_until([] { return test::ring_mappings() > 0; }, 10s));
  else
    BOOST_CHECK(test::poll_until(
        [road_port] {
          return test::tcp_connections_on(road_port) ==
                 test::tcp_road_connections;
        },
        10s));
  for (; clock < 9; ++clock)
    step(clock);
}

/// The same with 8 requests in flight, pushes and pulls alternating: the
/// requests sent while the road's failed ones wait to be resent must not
/// overtake them (a push for clock c + 1 reaching the server before the
/// one for c is refused), and no push counts twice. A pull resent may read
/// pushes sent after it that the server had taken before the road broke
/// (async mode promises no fewer, not exactly those).
void survive_a_road_cut_in_flight(const std::string& road, uint32_t cut) {
  cut_road_job job{road, cut};
  uint64_t clock = 0;
  auto bad = pipeline(job.c, *job.w, 1, cut_floats, 8, 48, clock, true);
  BOOST_CHECK_MESSAGE(bad.empty(),
                      road << ", cut after " << cut << ": " << bad);
}

/// Waits for a log line of this process that holds `text`, from its
/// construction on (the kv client logs what no other sign shows); info
/// lines are written meanwhile, whatever TROUPE_TEST_LOG says.
class log_waiter {
public:
  explicit log_waiter(std::string text)
      : seen_(std::make_shared<seen>()),
        was_quiet_(!log_enabled(log_level::info)),
        was_error_only_(!log_enabled(log_level::warning)) {
    if (was_quiet_)
      set_log_level("info");
    // The observer holds what it touches: a line written as it is
    // replaced may still reach it (set_log_observer).
    set_log_observer(
        [s = seen_, text = std::move(text)](log_level, const std::string&,
                                            const std::string& what) {
          if (what.find(text) == std::string::npos)
            return;
          std::lock_guard<std::mutex> guard{s->mtx};
          s->yes = true;
          s->cv.notify_all();
        });
  }
  ~log_waiter() {
    set_log_observer({});
    if (was_quiet_)
      set_log_level(was_error_only_ ? "error" : "warning");
  }
  log_waiter(const log_waiter&) = delete;
  log_waiter& operator=(const log_waiter&) = delete;
  /// True once such a line came, within `timeout`.
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> guard{seen_->mtx};
    return seen_->cv.wait_for(guard, timeout, [this] { return seen_->yes; });
  }

private:
  struct seen {
    std::mutex mtx;
    std::condition_variable cv;
    bool yes = false;
  };
  std::shared_ptr<seen> seen_;
  bool was_quiet_, was_error_only_;
};

/// True once worker-side road `road` ("tcp" or "auto": shm) to the one
/// server, on `road_port` if tcp, is open.
bool road_is_back(const std::string& road, uint16_t road_port) {
  if (road == "tcp")
    return test::tcp_connections_on(road_port) == test::tcp_road_connections;
  return test::ring_mappings() > 0;
}

/// A worker that keeps 8 requests in flight gets its road back too: the
/// redial does not wait for a moment with none in flight over CAF, which
/// never comes; it holds later requests until those drain. Every pull
/// stays within the pushes sent.
void get_the_road_back_in_flight(const std::string& road) {
  cut_road_job job{road, 9, "async", in_flight_floats};
  auto v = job.w->view();
  BOOST_REQUIRE(v && v->second.servers.size() == 1);
  auto port = v->second.servers.front().road.port;
  uint64_t clock = 0;
  auto bad = pipeline(job.c, *job.w, 1, in_flight_floats, 8, 32, clock, true,
                      [&road, port] { return road_is_back(road, port); });
  BOOST_CHECK_MESSAGE(bad.empty(), road << ": " << bad);
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_roads_tests)

BOOST_AUTO_TEST_CASE(a_road_that_breaks_under_a_live_server_resends_over_caf) {
  // Cut with a push in flight (the 3rd request on the road: push 0) and
  // with a pull in flight (the 4th: pull 1).
  for (auto road : {"tcp", "auto"})
    for (uint32_t cut : {4u, 3u})
      survive_a_road_cut(road, cut);
}

BOOST_AUTO_TEST_CASE(a_pull_ahead_of_its_push_does_not_hold_up_the_redial) {
  // Sync mode: a pull for clock 2 waits at the server for round 1, i.e.
  // for a push that this worker sends after it. The redial, due 1 s after
  // the cut, finds the pull in flight over CAF and holds later operations
  // so that it drains: push 1, sent during that hold, must go on once it
  // runs out (100 ms), or it waits until the request timeout and the pull
  // with it.
  for (auto road : {"tcp", "auto"}) {
    cut_road_job job{road, 3, "sync"}; // the 3rd request: push 0
    auto& w = *job.w;
    constexpr size_t n = cut_floats;
    auto v = w.view();
    BOOST_REQUIRE(v && v->second.servers.size() == 1);
    auto port = v->second.servers.front().road.port;
    auto acked = w.push(0, {grad_array(1, n)});
    BOOST_REQUIRE_MESSAGE(acked, road << ": push 0: " << why(acked));
    log_waiter hold{"is dialled again once what is in flight"};
    auto ahead = job.c.self->request(w.handle(), 60s, pull_atom_v, uint64_t{2},
                                     std::vector<uint64_t>{1});
    BOOST_REQUIRE_MESSAGE(hold.wait(10s), road << ": no hold began");
    acked = w.push(1, {grad_array(1, n)});
    BOOST_CHECK_MESSAGE(acked,
                        road << ": push 1 behind a pull ahead: " << why(acked));
    std::string bad = "no reply";
    ahead.receive(
        [&bad](std::vector<named_array>& got) {
          bad = got.size() == 1 ? check_values(got[0], 1, n, 2)
                                : "pulled " + std::to_string(got.size());
        },
        [&bad](caf::error& err) { bad = describe(err); });
    BOOST_CHECK_MESSAGE(bad.empty(), road << ": pull 2: " << bad);
    // The road comes back once nothing is in flight, and carries the next
    // rounds exactly.
    BOOST_CHECK(
        test::poll_until([&] { return road_is_back(road, port); }, 10s));
    for (uint64_t clock = 2; clock < 4; ++clock) {
      acked = w.push(clock, {grad_array(1, n)});
      BOOST_REQUIRE_MESSAGE(acked,
                            road << ": push " << clock << ": " << why(acked));
      auto pulled = w.pull(clock + 1, {1});
      BOOST_REQUIRE_MESSAGE(pulled, road << ": pull: " << why(pulled));
      BOOST_CHECK_EQUAL(check_values(pulled->front(), 1, n, clock + 1), "");
    }
  }
}

BOOST_AUTO_TEST_CASE(a_worker_always_in_flight_gets_its_broken_road_back) {
  for (auto road : {"tcp", "auto"})
    get_the_road_back_in_flight(road);
}

BOOST_AUTO_TEST_CASE(requests_in_flight_when_a_road_breaks_keep_their_order) {
  for (auto road : {"tcp", "auto"})
    for (uint32_t cut : {9u, 12u, 16u})
      survive_a_road_cut_in_flight(road, cut);
}

BOOST_AUTO_TEST_CASE(a_worker_cutting_larger_frames_than_its_server_is_told) {
  // The servers cut at 1 MiB (--kv.max-message-bytes), this worker at
  // 16 MiB: its 16 MiB Init is refused unread, with the flag to fix.
  for (auto road : {"tcp", "auto"}) {
    cluster c{"async", 1, 0, 1u << 20, add_update, slice_floats, road, 0, 1};
    kv_settings ks;
    ks.request_timeout_ms = 10000;
    ks.max_message_bytes = 16u << 20;
    ks.road_text = road;
    ks.road = *parse_road(road);
    kv w{c.b, c.remote_sched, ks};
    auto got = w.init({init_array(1, (16u << 20) / 4)});
    BOOST_REQUIRE_MESSAGE(!got, road << ": a 16 MiB frame was taken");
    BOOST_CHECK(got.error() == errc::message_too_large);
    BOOST_CHECK_MESSAGE(describe(got.error()).find("--kv.max-message-bytes") !=
                            std::string::npos,
                        describe(got.error()));
  }
}

BOOST_AUTO_TEST_CASE(arrays_of_every_size_come_back_exact_over_the_middleman) {
  sweep_sizes("middleman");
}

BOOST_AUTO_TEST_CASE(arrays_of_every_size_come_back_exact_over_tcp) {
  sweep_sizes("tcp");
}

BOOST_AUTO_TEST_CASE(arrays_of_every_size_come_back_exact_over_shm) {
  sweep_sizes("auto");
}

BOOST_AUTO_TEST_CASE(push_pull_reads_its_own_push_over_the_middleman) {
  sweep_push_pull("middleman");
}

BOOST_AUTO_TEST_CASE(push_pull_reads_its_own_push_over_tcp) {
  sweep_push_pull("tcp");
}

BOOST_AUTO_TEST_CASE(push_pull_reads_its_own_push_over_shm) {
  sweep_push_pull("auto");
}

BOOST_AUTO_TEST_CASE(pipelined_small_requests_keep_their_order_on_each_road) {
  for (auto road : {"middleman", "tcp", "auto"})
    pipeline_on(road, 4097);
}

BOOST_AUTO_TEST_CASE(pipelined_large_requests_keep_their_order_over_middleman) {
  pipeline_on("middleman", window_filling_floats);
}

BOOST_AUTO_TEST_CASE(pipelined_large_requests_keep_their_order_over_tcp) {
  pipeline_on("tcp", window_filling_floats);
}

BOOST_AUTO_TEST_CASE(pipelined_large_requests_keep_their_order_over_shm) {
  pipeline_on("auto", window_filling_floats);
}

BOOST_AUTO_TEST_SUITE_END()
