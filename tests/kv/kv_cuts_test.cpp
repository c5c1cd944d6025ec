// Atomic pushes across servers (issue 41, docs/atomic-pushes.md): a worker
// that dies having pushed a clock to one server but not the other leaves
// every slice of every array with the same pushes: the servers' cut drops
// that clock everywhere, also where a backup serves the slices of the
// server that held it.
#define BOOST_TEST_MODULE kv_cuts_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <caf/io/middleman.hpp>

#include "actors/base/log.hpp"
#include "actors/base/machine_id.hpp"
#include "actors/cluster/placement.hpp"
#include "actors/scheduler/scheduler_internal.hpp"
#include "tests/kv/kv_helpers.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

namespace {

/// A worker without a kv client: it registers, and sends each server only
/// what the test says, as a worker that dies halfway through a push would
/// have.
struct raw_worker {
  cluster& c;
  std::optional<caf::scoped_actor> self;
  register_reply joined;
  std::vector<caf::actor> servers;
  explicit raw_worker(cluster& c) : c(c), self(std::in_place, c.b) {
    (*self)
        ->request(
            c.remote_sched, 10s, register_atom_v,
            encode(register_request{
                role::worker, "", 0, 1, {0, machine_id(), ""}, 0, "", "", ""}))
        .receive([&](const frame& f) { BOOST_REQUIRE(!decode(f, joined)); },
                 [](const caf::error& err) { BOOST_FAIL(describe(err)); });
    // The servers' own handles, asked from their own nodes
    // (cluster::self_for): every node is in this process, so requests go
    // straight to their mailboxes. Reached through system b's middleman
    // instead (remote_actor on a node b is connected to already), a request
    // was now and then never answered, and that connection missed its
    // heartbeats until it timed out (1 run in 5 or so, at a756b76). Each
    // server first answers an empty pull. servers[k] is the server of rank
    // k.
    for (uint32_t k = 0; k < c.servers.size(); ++k)
      servers.push_back(c.servers[c.index_of(joined.view, k)]);
    for (size_t k = 0; k < servers.size(); ++k) {
      bool answered = false;
      c.self_for(servers[k])
          ->request(servers[k], 10s, pull_atom_v,
                    encode(pull_request{joined.rank, 0, joined.view.epoch, {}}))
          .receive([&](const frame&) { answered = true; },
                   [](const caf::error& err) { BOOST_FAIL(describe(err)); });
      BOOST_REQUIRE_MESSAGE(answered, "server " << k << " silent");
    }
  }
  /// Pushes `x` into every slice of key 1 that server `server` holds, as
  /// the whole of clock `clock` there, saying that every server
  /// acknowledged its clocks below `acked`; waits for the acknowledgement.
  void push_to(uint32_t server, uint64_t clock, float x, uint32_t part = 0,
               uint32_t parts = 1, uint64_t acked = 0) {
    push_request req{joined.rank, clock, joined.view.epoch, part, parts,
                     {},          acked};
    size_t k = 0; // the server's slices are dealt out to the parts in turn
    for (auto& p : joined.view.placement)
      if (p.key == 1 && p.server == server && k++ % parts == part) {
        auto r = slice_range(joined.view.keys.front().size,
                             joined.view.slice_floats, p.index);
        req.slices.push_back(
            {slice_id{1, p.index}, std::vector<float>(r.second - r.first, x)});
      }
    BOOST_REQUIRE(!req.slices.empty());
    c.self_for(servers.at(server))
        ->request(servers.at(server), 10s, push_atom_v, encode(req))
        .receive([](const frame&) {},
                 [](const caf::error& err) { BOOST_FAIL(describe(err)); });
  }
  void die() { self.reset(); }
};

/// Runs clock `clock` on the kv workers (each pushes 1 everywhere) and
/// returns what worker 0 pulled after it.
std::vector<named_array> step(cluster& c, uint64_t clock, size_t n) {
  std::vector<std::thread> ts;
  std::vector<caf::expected<std::vector<named_array>>> got(
      c.workers.size(), caf::make_error(caf::sec::unexpected_response));
  for (size_t w = 0; w < c.workers.size(); ++w)
    ts.emplace_back([&, w] {
      got[w] = c.workers[w]->push_pull(clock, filled(1, n, 1.0f), {1});
    });
  for (auto& t : ts)
    t.join();
  for (auto& g : got)
    BOOST_REQUIRE_MESSAGE(g, why(g));
  return *got[0];
}

/// The one value of every float of `xs`, or a failure naming two that
/// differ.
float uniform_value(const std::vector<named_array>& xs) {
  BOOST_REQUIRE(!xs.empty() && !xs[0].values.empty());
  auto v = xs[0].values[0];
  for (size_t i = 0; i < xs[0].values.size(); ++i)
    BOOST_REQUIRE_MESSAGE(xs[0].values[i] == v,
                          "element " << i << " is " << xs[0].values[i]
                                     << ", element 0 " << v);
  return v;
}

/// The detail of the scheduler's cut event for worker `rank`.
std::string cut_of(cluster& c, uint32_t rank) {
  for (int i = 0; i < 100; ++i) {
    auto log = c.events(10s);
    for (auto& e : log)
      if (e.kind == "cut" && e.rank == rank)
        return e.detail;
    c.events_of("cut", 1s, log.size());
  }
  BOOST_FAIL("no cut event for worker " << rank);
  return {};
}

/// Key 1 of `n` floats initialised, and a raw worker (rank 2) whose clock
/// 0 is whole on both servers, in `parts` parts each, and in round 0 with
/// the kv workers' (3 everywhere).
std::unique_ptr<raw_worker> with_clock_0_everywhere(cluster& c, size_t n,
                                                    uint32_t parts = 1) {
  init_all(c, n);
  auto dying = std::make_unique<raw_worker>(c);
  BOOST_CHECK_EQUAL(dying->joined.rank, 2u);
  for (uint32_t s = 0; s < 2; ++s)
    for (uint32_t part = 0; part < parts; ++part)
      dying->push_to(s, 0, 1.0f, part, parts);
  BOOST_CHECK_EQUAL(uniform_value(step(c, 0, n)), 3.0f);
  return dying;
}

/// async and ssp: each kv worker reads at `clock`, which applies its
/// pushes every server acknowledged; then worker 0 reads what they hold.
std::vector<named_array> read_settled(cluster& c, uint64_t clock) {
  for (auto& w : c.workers)
    BOOST_REQUIRE(w->pull(clock, {1}));
  auto got = c.workers[0]->pull(clock, {1});
  BOOST_REQUIRE_MESSAGE(got, why(got));
  return *got;
}

/// async and ssp: the raw worker (rank 2) pushes clock 0 to both servers,
/// then clock 1 to server 0 alone, saying clock 0 was acknowledged (1
/// everywhere), and dies. Returns server 0.
caf::actor dies_with_clock_1_on_server_0(cluster& c, size_t n) {
  init_all(c, n);
  raw_worker dying{c};
  BOOST_CHECK_EQUAL(dying.joined.rank, 2u);
  dying.push_to(0, 0, 1.0f);
  dying.push_to(1, 0, 1.0f);
  dying.push_to(0, 1, 1.0f, 0, 1, 1);
  dying.die();
  return dying.servers[0];
}

/// Waits for worker `rank`'s cut and checks that it keeps `keep` clocks.
void check_cut(cluster& c, uint32_t rank, uint64_t keep) {
  auto detail = cut_of(c, rank);
  BOOST_CHECK_MESSAGE(detail.find(str("clocks below ", keep, " are kept")) !=
                          std::string::npos,
                      detail);
}

/// After worker 2 died with its clock 1 on some servers only: the cut
/// keeps its clock 0 alone, and two more rounds of the kv workers give
/// 3 + 2 + 2 everywhere.
void then_clock_1_is_nowhere(cluster& c, size_t n) {
  check_cut(c, 2, 1);
  step(c, 1, n);
  BOOST_CHECK_EQUAL(uniform_value(step(c, 2, n)), 7.0f);
}

} // namespace

BOOST_AUTO_TEST_SUITE(kv_cuts_tests)

BOOST_AUTO_TEST_CASE(a_cut_is_the_least_answer_and_never_below_the_last) {
  using sched::worker_cut;
  BOOST_CHECK_EQUAL(worker_cut({{0, 7}, {1, 5}}, std::nullopt), 5u);
  BOOST_CHECK_EQUAL(worker_cut({{0, no_whole_clocks}, {1, 5}}, std::nullopt),
                    5u);
  BOOST_CHECK_EQUAL(worker_cut({{0, no_whole_clocks}}, std::nullopt),
                    no_whole_clocks);
  // As seen in CI: a server restarted meanwhile placed the new process at
  // 0; the process resumed at 896, and its rank's cut before was 822.
  BOOST_CHECK_EQUAL(worker_cut({{0, 896}, {1, 0}}, 822), 822u);
  BOOST_CHECK_EQUAL(worker_cut({{0, 900}, {1, 897}}, 822), 897u);
  BOOST_CHECK_EQUAL(worker_cut({{0, no_whole_clocks}}, 822), no_whole_clocks);
  BOOST_CHECK_EQUAL(worker_cut({{0, 3}}, no_whole_clocks), 3u);
}

BOOST_AUTO_TEST_CASE(a_replicas_stages_are_cut_at_the_least_of_their_cuts) {
  using sched::replica_stage_cuts;
  using cuts = std::map<uint32_t, uint64_t>;
  // Stage 1 died in its push of 10; stages 0 and 2 had pushed 10 whole.
  BOOST_CHECK(replica_stage_cuts({{0, 11}, {1, 10}, {2, 11}}, {}) ==
              (cuts{{0, 10}, {1, 10}, {2, 10}}));
  // A stage that pushed nothing anywhere adds no bound, and is cut there
  // too (it holds no part).
  BOOST_CHECK(replica_stage_cuts({{0, no_whole_clocks}, {1, 7}}, {}) ==
              (cuts{{0, 7}, {1, 7}}));
  BOOST_CHECK(
      replica_stage_cuts({{0, no_whole_clocks}, {1, no_whole_clocks}}, {}) ==
      (cuts{{0, no_whole_clocks}, {1, no_whole_clocks}}));
  // Never below a rank's floor (its process before was cut there).
  BOOST_CHECK(replica_stage_cuts({{0, 12}, {1, 9}}, {{0, 11}}) ==
              (cuts{{0, 11}, {1, 9}}));
  BOOST_CHECK(replica_stage_cuts({{0, 12}, {1, 9}}, {{0, no_whole_clocks}}) ==
              (cuts{{0, 9}, {1, 9}}));
}

BOOST_AUTO_TEST_CASE(a_worker_dead_halfway_through_a_push_leaves_no_trace) {
  constexpr size_t n = 8; // slices of 2 floats over both servers
  cluster c{"sync", 2, 2, 16u << 20, add_update, 2, "auto", 1, 3, true};
  auto dying = with_clock_0_everywhere(c, n);
  dying->push_to(0, 1, 1.0f); // clock 1 on server 0 only: then it dies
  dying->die();
  then_clock_1_is_nowhere(c, n);
}

BOOST_AUTO_TEST_CASE(a_cut_reaches_the_backup_that_takes_over_the_slices) {
  // As above, and server 0, which alone took the dead worker's clock 1, dies
  // right after it: server 1 serves its slices from its replica, which has
  // that clock too, and the cut drops it there as well.
  constexpr size_t n = 8;
  cluster c{"sync", 2, 2, 16u << 20, add_update, 2, "auto", 2, 3, true};
  auto dying = with_clock_0_everywhere(c, n);
  dying->push_to(0, 1, 1.0f);
  auto server_0 = dying->servers[0];
  dying->die();
  caf::anon_send_exit(server_0, caf::exit_reason::kill);
  then_clock_1_is_nowhere(c, n);
}

BOOST_AUTO_TEST_CASE(a_worker_dead_after_one_part_of_two_leaves_no_trace) {
  // As the counter task's pushes are: several parts per server. The dying
  // worker's clock 1 is whole on server 0 and half there on server 1.
  constexpr size_t n = 16;
  cluster c{"sync", 2, 2, 16u << 20, add_update, 2, "auto", 1, 3, true};
  auto dying = with_clock_0_everywhere(c, n, 2);
  dying->push_to(0, 1, 1.0f, 0, 2);
  dying->push_to(0, 1, 1.0f, 1, 2);
  dying->push_to(1, 1, 1.0f, 0, 2);
  dying->die();
  then_clock_1_is_nowhere(c, n);
}

BOOST_AUTO_TEST_CASE(a_worker_dead_after_a_whole_push_keeps_it) {
  constexpr size_t n = 8;
  cluster c{"sync", 2, 2, 16u << 20, add_update, 2, "auto", 1, 3, true};
  init_all(c, n);
  raw_worker dying{c};
  dying.push_to(0, 0, 1.0f);
  dying.push_to(1, 0, 1.0f);
  dying.die();
  check_cut(c, 2, 1);
  step(c, 0, n);
  BOOST_CHECK_EQUAL(uniform_value(step(c, 1, n)), 5.0f);
}

// async and ssp hold each push until its worker says every server has it:
// the dead worker's clock 1, whole on server 0 only, is never applied
// there, and its clock 0, which server 1 still held, is applied by the cut.
// Then the kv workers' clock 0 (1 each) makes 3 everywhere.

BOOST_AUTO_TEST_CASE(
    async_a_worker_dead_halfway_through_a_push_leaves_no_trace) {
  constexpr size_t n = 8;
  cluster c{"async", 2, 2, 16u << 20, add_update, 2, "auto", 1, 3, true};
  dies_with_clock_1_on_server_0(c, n);
  check_cut(c, 2, 1);
  step(c, 0, n);
  BOOST_CHECK_EQUAL(uniform_value(read_settled(c, 1)), 3.0f);
}

BOOST_AUTO_TEST_CASE(ssp_a_cut_reaches_the_backup_that_takes_over_the_slices) {
  // As above in ssp, and server 0 dies right after the worker: server 1
  // serves its slices from its replica, which holds clock 1 as well.
  constexpr size_t n = 8;
  cluster c{"ssp:1", 2, 2, 16u << 20, add_update, 2, "auto", 2, 3, true};
  auto server_0 = dies_with_clock_1_on_server_0(c, n);
  caf::anon_send_exit(server_0, caf::exit_reason::kill);
  check_cut(c, 2, 1);
  step(c, 0, n);
  BOOST_CHECK_EQUAL(uniform_value(read_settled(c, 1)), 3.0f);
}

BOOST_AUTO_TEST_SUITE_END()
