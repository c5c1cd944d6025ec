// The worker actor's loop, plain and pipelined, against a real cluster in
// one process (tests/local_cluster.hpp): which weights each step
// sees, and that every step's push lands exactly once.
#define BOOST_TEST_MODULE worker_pipeline_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <vector>

#include "tests/test_support.hpp"

#include "actors/worker/worker.hpp"
#include "tests/local_cluster.hpp"

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

/// Why a worker of `logic` ended, the only one of a one-server cluster in
/// `mode` (30 s at most).
caf::error ended(std::shared_ptr<worker_logic> logic, bool pipeline,
                 const std::string& mode = "async") {
  cluster c{mode, 1, 1};
  worker_options opts;
  opts.pipeline = pipeline;
  auto w = spawn_worker(c.b, c.workers.front()->handle(), logic, opts);
  c.self->monitor(w);
  auto reason = troupe::test::await_down(c.self, std::chrono::seconds{30});
  BOOST_REQUIRE_MESSAGE(reason, "the worker did not end in 30 s");
  return *reason;
}

/// Runs `steps` steps of one worker on a one-server cluster in `mode`;
/// the logic once its worker finished (bounded: 30 s).
std::shared_ptr<recording_logic> run(const std::string& mode, uint64_t steps,
                                     bool pipeline) {
  auto logic = std::make_shared<recording_logic>(steps);
  auto done = logic->final.get_future();
  auto reason = ended(logic, pipeline, mode);
  BOOST_REQUIRE_MESSAGE(troupe::test::normal_exit(reason),
                        "worker failed: " << describe(reason));
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

// -- overlapped steps: blocks pushed as the step hands them over ------------

namespace {

/// Three keys of one float in two blocks, {3} then {1, 2}, summed by the
/// servers: every step pushes 1 to each key. Records the values each step
/// saw (keys 1, 2, 3).
struct blocked_logic : worker_logic {
  enum class how {
    streamed,
    by_default,
    out_of_order,
    one_block_short,
    key_twice
  };
  blocked_logic(uint64_t n, how h) : steps(n), way(h) {}
  uint64_t steps;
  how way;
  std::map<uint64_t, std::vector<float>> seen;
  /// weights_arrived calls: (clock, block) -> the values handed over.
  std::map<std::pair<uint64_t, size_t>, std::vector<float>> arrived;
  std::promise<std::vector<float>> final;

  void weights_arrived(uint64_t clock, size_t b,
                       std::vector<named_array>& w) override {
    auto& got = arrived[{clock, b}];
    BOOST_CHECK_MESSAGE(got.empty(), "block " << b << " of step " << clock
                                              << " arrived twice");
    for (auto& a : w)
      got.push_back(a.values.at(0));
  }

  static std::vector<named_array> ones(std::vector<uint64_t> keys) {
    std::vector<named_array> out;
    for (auto k : keys)
      out.push_back(named_array{k, {1.0f}});
    return out;
  }
  std::vector<named_array> parameters() override {
    return {named_array{1, {0.0f}}, named_array{2, {0.0f}},
            named_array{3, {0.0f}}};
  }
  std::vector<std::vector<uint64_t>> blocks() override {
    if (way == how::key_twice)
      return {{3}, {1, 3}};
    return {{3}, {1, 2}};
  }
  void start(uint32_t, uint32_t) override {}
  bool done(uint64_t clock) override { return clock >= steps; }
  caf::expected<std::vector<named_array>>
  step(uint64_t clock, const std::vector<named_array>& w) override {
    seen[clock] = {w.at(0).values.at(0), w.at(1).values.at(0),
                   w.at(2).values.at(0)};
    return ones({1, 2, 3});
  }
  caf::error step_blocked(uint64_t clock, std::vector<named_array>& w,
                          const emit_fn& emit) override {
    if (way == how::by_default)
      return worker_logic::step_blocked(clock, w, emit);
    seen[clock] = {w.at(0).values.at(0), w.at(1).values.at(0),
                   w.at(2).values.at(0)};
    if (way == how::out_of_order) {
      emit(1, ones({1, 2}));
      return caf::none;
    }
    emit(0, ones({3}));
    if (way == how::streamed)
      emit(1, ones({1, 2}));
    return caf::none;
  }
  void finish(const std::vector<named_array>& w) override {
    final.set_value(
        {w.at(0).values.at(0), w.at(1).values.at(0), w.at(2).values.at(0)});
  }
};

/// Runs one overlapped worker per logic on a one-server cluster in
/// `mode`; each logic is done once its worker is down (bounded: 30 s).
/// The worker's exit reasons, in order.
std::vector<caf::error>
run_overlapped(const std::string& mode,
               std::vector<std::shared_ptr<blocked_logic>> logics,
               const std::function<void(cluster&)>& before = {}) {
  cluster c{mode, 1, static_cast<uint32_t>(logics.size())};
  if (before)
    before(c);
  worker_options opts;
  opts.overlap = true;
  std::vector<caf::actor> ws;
  for (size_t i = 0; i < logics.size(); ++i) {
    ws.push_back(spawn_worker(c.b, c.workers[i]->handle(), logics[i], opts));
    c.self->monitor(ws.back());
  }
  std::vector<caf::error> reasons;
  for (size_t i = 0; i < ws.size(); ++i) {
    auto reason = troupe::test::await_down(c.self, std::chrono::seconds{30});
    BOOST_REQUIRE_MESSAGE(reason, "a worker did not finish in 30 s");
    reasons.push_back(*reason);
  }
  return reasons;
}

} // namespace

BOOST_AUTO_TEST_CASE(overlapped_sync_workers_see_whole_steps) {
  // Two workers, sync: step t sees both workers' pushes of steps < t on
  // every key, though each block is a round of its own on the server.
  for (auto way :
       {blocked_logic::how::streamed, blocked_logic::how::by_default}) {
    auto a = std::make_shared<blocked_logic>(5, way),
         b = std::make_shared<blocked_logic>(5, way);
    auto fa = a->final.get_future();
    for (auto& r : run_overlapped("sync", {a, b}))
      BOOST_REQUIRE_MESSAGE(troupe::test::normal_exit(r),
                            "worker failed: " << describe(r));
    for (auto* l : {a.get(), b.get()}) {
      for (uint64_t t = 0; t < 5; ++t) {
        auto want = static_cast<float>(2 * t);
        BOOST_CHECK_MESSAGE(l->seen[t] == std::vector<float>(3, want),
                            "step " << t << " saw " << l->seen[t][0] << ", "
                                    << l->seen[t][1] << ", " << l->seen[t][2]);
      }
      // Each block of steps 1..4 came back once, before its step ran,
      // holding that step's weights (block 0: key 3; block 1: keys 1, 2).
      BOOST_CHECK_EQUAL(l->arrived.size(), 8u);
      for (uint64_t t = 1; t < 5; ++t) {
        auto want = static_cast<float>(2 * t);
        BOOST_CHECK((l->arrived[{t, 0}] == std::vector<float>{want}));
        BOOST_CHECK((l->arrived[{t, 1}] == std::vector<float>(2, want)));
      }
    }
    BOOST_REQUIRE(fa.wait_for(std::chrono::seconds{0}) ==
                  std::future_status::ready);
    BOOST_CHECK(fa.get() == std::vector<float>(3, 10.0f));
  }
}

BOOST_AUTO_TEST_CASE(an_overlapped_worker_back_mid_step_gives_up_its_rest) {
  // Before the worker starts, this rank already pushed step 0 whole and
  // block 0 of step 1 (servers' clocks 0, 1, 2). Step 1's weights are gone
  // (key 3 holds its result), so the worker computes nothing on them: its
  // block 1 of step 1 goes out empty, and it runs step 2 whole.
  auto l = std::make_shared<blocked_logic>(3, blocked_logic::how::streamed);
  auto f = l->final.get_future();
  auto reasons = run_overlapped("sync", {l}, [&l](cluster& c) {
    auto& kv = *c.workers.front();
    BOOST_REQUIRE(kv.init(l->parameters())); // zeros
    BOOST_REQUIRE(kv.push(0, blocked_logic::ones({3})));
    BOOST_REQUIRE(kv.push(1, blocked_logic::ones({1, 2})));
    BOOST_REQUIRE(kv.push(2, blocked_logic::ones({3})));
  });
  BOOST_REQUIRE_MESSAGE(troupe::test::normal_exit(reasons.at(0)),
                        "worker failed: " << describe(reasons.at(0)));
  BOOST_CHECK(l->seen.count(0) == 0); // done before
  BOOST_CHECK(l->seen.count(1) == 0); // given up
  BOOST_CHECK(l->seen[2] == (std::vector<float>{1, 1, 2}));
  BOOST_REQUIRE(f.wait_for(std::chrono::seconds{0}) ==
                std::future_status::ready);
  BOOST_CHECK(f.get() == (std::vector<float>{2, 2, 3}));
}

BOOST_AUTO_TEST_CASE(blocks_handed_over_wrong_stop_the_worker) {
  for (auto way : {blocked_logic::how::out_of_order,
                   blocked_logic::how::one_block_short}) {
    auto l = std::make_shared<blocked_logic>(3, way);
    auto reasons = run_overlapped("async", {l});
    BOOST_CHECK(reasons.at(0) == errc::bad_shape);
    BOOST_CHECK_MESSAGE(describe(reasons.at(0)).find("block") !=
                            std::string::npos,
                        describe(reasons.at(0)));
  }
  // Blocks that name a key twice (and miss one) are refused at the start.
  auto l = std::make_shared<blocked_logic>(3, blocked_logic::how::key_twice);
  auto reasons = run_overlapped("async", {l});
  BOOST_CHECK(reasons.at(0) == errc::invalid_config);
  BOOST_CHECK(l->seen.empty());
}

namespace {

/// Parameters and steps given as they are, right or wrong.
struct given_logic : worker_logic {
  std::vector<named_array> params;
  std::function<std::vector<named_array>()> out;
  std::vector<named_array> parameters() override { return params; }
  void start(uint32_t, uint32_t) override {}
  bool done(uint64_t clock) override { return clock >= 3; }
  caf::expected<std::vector<named_array>>
  step(uint64_t, const std::vector<named_array>&) override {
    return out();
  }
  void finish(const std::vector<named_array>&) override {}
};

} // namespace

BOOST_AUTO_TEST_CASE(a_step_that_leaves_a_key_out_stops_the_worker) {
  // It ran to the end: the key left out kept its first values, silently.
  for (bool pipeline : {false, true}) {
    auto l = std::make_shared<given_logic>();
    l->params = {named_array{1, {0.0f}}, named_array{2, {0.0f}}};
    l->out = [] { return std::vector<named_array>{named_array{1, {1.0f}}}; };
    auto why = ended(l, pipeline);
    BOOST_CHECK(why == errc::bad_shape);
    BOOST_CHECK_EQUAL(describe(why),
                      "bad_shape: step() returned no array for key 2, which"
                      " parameters() declared: return one per key");
  }
  auto l = std::make_shared<given_logic>();
  l->params = {named_array{1, {0.0f}}};
  l->out = [] {
    return std::vector<named_array>{named_array{1, {1.0f}},
                                    named_array{1, {1.0f}}};
  };
  BOOST_CHECK_EQUAL(describe(ended(l, false)),
                    "bad_shape: step() returned key 1 twice");
  l->out = [] {
    return std::vector<named_array>{named_array{1, {1.0f}},
                                    named_array{9, {1.0f}}};
  };
  BOOST_CHECK_EQUAL(describe(ended(l, true)),
                    "unknown_key: step() returned key 9, which parameters()"
                    " did not declare");
}

BOOST_AUTO_TEST_CASE(parameters_named_twice_or_empty_are_refused_at_start) {
  // They read as a malformed message: "key listed twice", "key size out of
  // range".
  auto l = std::make_shared<given_logic>();
  l->out = [] { return std::vector<named_array>{}; };
  l->params = {named_array{1, {0.0f}}, named_array{1, {0.0f}}};
  BOOST_CHECK_EQUAL(describe(ended(l, false)),
                    "invalid_config: parameters() lists key 1 twice");
  l->params = {named_array{7, {}}};
  BOOST_CHECK_EQUAL(describe(ended(l, false)),
                    "invalid_config: parameters() gives key 7 no values: an"
                    " array holds one float or more");
}

BOOST_AUTO_TEST_CASE(an_exception_from_the_workers_code_names_itself) {
  // It ended with a bare system_error(runtime_error), the what() only in
  // CAF's warning above it.
  for (bool pipeline : {false, true}) {
    auto l = std::make_shared<given_logic>();
    l->params = {named_array{1, {0.0f}}};
    l->out = []() -> std::vector<named_array> {
      throw std::runtime_error{"no batch left"};
    };
    BOOST_CHECK_EQUAL(describe(ended(l, pipeline)),
                      "runtime_error: the worker's code threw"
                      " std::runtime_error: no batch left");
  }
  struct no_parameters : given_logic {
    std::vector<named_array> parameters() override { throw 7; }
  };
  BOOST_CHECK_EQUAL(describe(ended(std::make_shared<no_parameters>(), false)),
                    "runtime_error: the worker's code threw int");
}
