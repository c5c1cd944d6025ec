// The worker actor's loop, plain and pipelined, against a real cluster in
// one process (tests/actors/local_cluster.hpp): which weights each step
// sees, and that every step's push lands exactly once.
#define BOOST_TEST_MODULE worker_pipeline_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <map>
#include <vector>

#include "tests/test_support.hpp"

#include "actors/worker.hpp"
#include "tests/actors/local_cluster.hpp"

using namespace troupe;
using troupe::test::cluster;

namespace {

/// One key of two floats, summed by the servers (add_update): step t
/// pushes {1, t}, so weights after pushes 0..k read {k + 1, 0 + ... + k}.
/// Records the first float each step saw; finish() hands the final weights
/// over.
struct recording_logic : worker_logic {
  explicit recording_logic(uint64_t n) : steps(n) {}
  uint64_t steps;
  std::vector<uint64_t> order;    // clocks in the order steps ran
  std::map<uint64_t, float> seen; // clock -> weights[0] the step saw
  std::promise<std::vector<float>> final;

  std::vector<named_array> parameters() override {
    return {named_array{1, {0.0f, 0.0f}}};
  }
  void start(uint32_t, uint32_t) override {}
  bool done(uint64_t clock) override { return clock >= steps; }
  caf::expected<std::vector<named_array>>
  step(uint64_t clock, const std::vector<named_array>& w) override {
    order.push_back(clock);
    seen[clock] = w.at(0).values.at(0);
    return std::vector<named_array>{
        named_array{1, {1.0f, static_cast<float>(clock)}}};
  }
  /// Takes the weights, as the trainer does: a loop that used them again
  /// would find them empty (and the step would throw).
  caf::expected<std::vector<named_array>>
  step_taking(uint64_t clock, std::vector<named_array>& w) override {
    auto out = step(clock, w);
    std::vector<named_array> taken;
    taken.swap(w);
    return out;
  }
  void finish(const std::vector<named_array>& w) override {
    final.set_value(w.at(0).values);
  }
};

/// Runs `steps` steps of one worker on a one-server cluster in `mode`;
/// the logic once its worker finished (bounded: 30 s).
std::shared_ptr<recording_logic> run(const std::string& mode, uint64_t steps,
                                     bool pipeline) {
  cluster c{mode, 1, 1};
  auto logic = std::make_shared<recording_logic>(steps);
  auto done = logic->final.get_future();
  worker_options opts;
  opts.pipeline = pipeline;
  auto w = spawn_worker(c.b, c.workers.front()->handle(), logic, opts);
  c.self->monitor(w);
  bool down = false;
  c.self->receive(
      [&](const caf::down_msg& dm) {
        down = true;
        BOOST_REQUIRE_MESSAGE(!dm.reason ||
                                  dm.reason == caf::exit_reason::normal,
                              "worker failed: " << describe(dm.reason));
      },
      caf::after(std::chrono::seconds{30}) >> [] {});
  BOOST_REQUIRE_MESSAGE(down, "the worker did not finish in 30 s");
  BOOST_REQUIRE(done.wait_for(std::chrono::seconds{0}) ==
                std::future_status::ready);
  auto final = done.get();
  // Every step pushed once: the sum of {1, t} over t < steps.
  BOOST_CHECK_EQUAL(final.at(0), static_cast<float>(steps));
  BOOST_CHECK_EQUAL(final.at(1), static_cast<float>(steps * (steps - 1) / 2));
  std::vector<uint64_t> in_order;
  for (uint64_t t = 0; t < steps; ++t)
    in_order.push_back(t);
  BOOST_CHECK(logic->order == in_order);
  return logic;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_plain_worker_sees_every_push_before_its_next_step) {
  auto logic = run("async", 6, false);
  for (uint64_t t = 0; t < 6; ++t)
    BOOST_CHECK_MESSAGE(logic->seen[t] == static_cast<float>(t),
                        "step " << t << " saw " << logic->seen[t]);
}

BOOST_AUTO_TEST_CASE(a_pipelined_worker_misses_only_its_last_push) {
  // Steps 0 and 1 run on the first weights; step t >= 2 on the weights
  // pulled with push t - 2, which hold pushes 0 .. t - 2.
  for (uint64_t steps : {1u, 2u, 3u, 7u}) {
    BOOST_TEST_CONTEXT("steps " << steps) {
      auto logic = run("async", steps, true);
      for (uint64_t t = 0; t < steps; ++t) {
        float want = t < 2 ? 0.0f : static_cast<float>(t - 1);
        BOOST_CHECK_MESSAGE(logic->seen[t] == want,
                            "step " << t << " saw " << logic->seen[t]
                                    << ", want " << want);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_pipelined_worker_runs_under_ssp) {
  // ssp:1 with one worker: its pulls at clock t + 1 are never held back,
  // and the pipelined loop pushes every step once, in order.
  auto logic = run("ssp:1", 5, true);
  BOOST_CHECK_EQUAL(logic->seen[4], 3.0f);
}
