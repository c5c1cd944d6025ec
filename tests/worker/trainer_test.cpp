// The built-in trainer's steps: taking the pulled arrays' storage
// (step_taking) computes exactly what copying them (step) does.
#define BOOST_TEST_MODULE trainer_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "actors/base/log.hpp"
#include "actors/node/node_config.hpp"
#include "actors/worker/trainer.hpp"
#include "kernels/blas.hpp"
#include "messages/errors.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
namespace tt = boost::test_tools;

namespace {

using arrays = std::vector<named_array>;

/// 32 samples of 2x2 "images" in 3 classes.
dataset tiny_data() {
  dataset d;
  d.images = tensor({32, 2, 2});
  for (size_t i = 0; i < d.images.size(); ++i)
    d.images[i] = float((i * 7) % 11) / 11.0f;
  for (size_t i = 0; i < 32; ++i)
    d.labels.push_back(uint8_t(i % 3));
  return d;
}

std::shared_ptr<worker_logic> tiny_trainer(const node_config& cfg) {
  auto m = model::from_spec(cfg.train.model, nullptr);
  BOOST_REQUIRE(m);
  auto t = make_trainer(cfg.trainer(), std::move(*m), tiny_data(), tiny_data());
  t->start(1, 2); // rank 1: no progress lines
  return t;
}

node_config tiny_config(const std::string& placement) {
  node_config cfg;
  cfg.train.model = "mlp:4-5-3";
  cfg.train.batch = 4;
  cfg.train.epochs = 2;
  cfg.optimizer.name = "momentum";
  cfg.optimizer.on = placement;
  return cfg;
}

/// Weights for `clock`: the declared values, moved a little per clock.
arrays weights_at(const arrays& first, uint64_t clock) {
  auto w = first;
  for (auto& a : w)
    for (size_t i = 0; i < a.values.size(); ++i)
      a.values[i] += 0.01f * float((i + clock) % 5) - 0.02f;
  return w;
}

void expect_same(const arrays& a, const arrays& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    BOOST_TEST(a[i].key == b[i].key);
    BOOST_TEST(a[i].values == b[i].values, tt::per_element());
  }
}

/// A rank-0 trainer (it reports) on the tiny data, writing its metrics
/// lines to a file of its own; lines() reads them once it is gone.
struct reporting_trainer {
  test::temp_dir dir;
  node_config cfg;
  std::shared_ptr<worker_logic> t;
  explicit reporting_trainer(uint32_t evals_per_epoch = 1)
      : cfg(tiny_config("server")) {
    cfg.train.evals_per_epoch = evals_per_epoch;
    cfg.train.metrics_file = dir / "metrics.jsonl";
    auto m = model::from_spec(cfg.train.model, nullptr);
    BOOST_REQUIRE(m);
    t = make_trainer(cfg.trainer(), std::move(*m), tiny_data(), tiny_data());
    t->start(0, 2);
  }
  /// Ends the trainer (closing its file) and reads its lines.
  std::vector<std::string> lines() {
    t.reset();
    std::ifstream in{cfg.train.metrics_file};
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
      out.push_back(line);
    return out;
  }
};

} // namespace

BOOST_AUTO_TEST_SUITE(trainer_tests)

BOOST_AUTO_TEST_CASE(taking_the_weights_gives_the_gradients_of_copying_them) {
  set_blas_threads(1);
  for (const char* placement : {"server", "worker"}) {
    BOOST_TEST_CONTEXT("optimizer on the " << placement) {
      auto cfg = tiny_config(placement);
      auto copying = tiny_trainer(cfg), taking = tiny_trainer(cfg);
      auto first = copying->parameters();
      expect_same(first, taking->parameters());
      for (uint64_t clock = 0; clock < 4; ++clock) {
        auto w = weights_at(first, clock);
        auto mine = w; // step_taking may take its storage
        auto a = copying->step(clock, w);
        auto b = taking->step_taking(clock, mine);
        BOOST_REQUIRE(a);
        BOOST_REQUIRE(b);
        expect_same(*a, *b);
        // Gradients, not weights: every array changed.
        for (size_t i = 0; i < b->size(); ++i)
          BOOST_CHECK((*b)[i].values != w[i].values);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(overlapped_steps_hand_over_the_gradients_block_by_block) {
  set_blas_threads(1);
  for (const char* placement : {"server", "worker"}) {
    BOOST_TEST_CONTEXT("optimizer on the " << placement) {
      auto cfg = tiny_config(placement);
      cfg.worker.overlap = true;
      cfg.train.block_floats = 8; // 4x5 weights: 3 row blocks; 5x3: 2
      auto copying = tiny_trainer(cfg), blocked = tiny_trainer(cfg);
      auto first = copying->parameters();
      BOOST_REQUIRE_EQUAL(first.size(), 7u); // 3 + 1 + 2 + 1 arrays
      // Blocks in the order backward finishes them: the last layer's bias
      // and its first row block, its second, then the first layer's.
      auto blocks = blocked->blocks();
      BOOST_CHECK(blocks == (std::vector<std::vector<uint64_t>>{
                                {7, 5}, {6}, {4, 1}, {2}, {3}}));
      for (uint64_t clock = 0; clock < 6; ++clock) {
        auto w = weights_at(first, clock);
        auto mine = w;
        auto want = copying->step(clock, w);
        BOOST_REQUIRE(want);
        // From clock 2 on, the first clock % 4 + 1 blocks come back early
        // (weights_arrived: the trainer may take them and begin the
        // forward); the step must compute the same, bit for bit.
        size_t early = clock < 2 ? 0 : clock % 4 + 1;
        for (size_t b = 0; b < early; ++b) {
          arrays part;
          for (auto key : blocks[b])
            part.push_back(std::move(mine[key - 1]));
          blocked->weights_arrived(clock, b, part);
          for (size_t i = 0; i < part.size(); ++i)
            mine[blocks[b][i] - 1] = std::move(part[i]);
        }
        std::map<uint64_t, std::vector<float>> got;
        size_t next = 0;
        auto err = blocked->step_blocked(clock, mine, [&](size_t b, arrays xs) {
          BOOST_CHECK_EQUAL(b, next++);
          BOOST_REQUIRE_EQUAL(xs.size(), blocks.at(b).size());
          for (size_t i = 0; i < xs.size(); ++i) {
            BOOST_CHECK_EQUAL(xs[i].key, blocks[b][i]);
            got[xs[i].key] = xs[i].values;
          }
        });
        BOOST_REQUIRE(!err);
        BOOST_CHECK_EQUAL(next, blocks.size());
        for (auto& a : *want)
          BOOST_TEST(got[a.key] == a.values, "clock " << clock << " key "
                                                      << a.key
                                                      << tt::per_element());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(rank_0_back_mid_step_still_reports_the_evaluation_point) {
  // 32 samples, 2 workers, batch 4: 4 steps per epoch, so the step at
  // clock 4 is an evaluation point (epoch 1 done). Rank 0 reports there;
  // if it came back in the middle of that step (overlapped workers give
  // the rest of it up), it reports at the next step, under clock 4; a
  // step skipped elsewhere reports nothing.
  struct run {
    int64_t skipped; // -1: none
    uint64_t stepped;
    size_t lines;
  };
  for (auto r : {run{-1, 4, 1}, run{4, 5, 1}, run{5, 6, 0}, run{-1, 5, 0}}) {
    reporting_trainer rt;
    auto w = rt.t->parameters();
    if (r.skipped >= 0)
      rt.t->step_skipped(uint64_t(r.skipped));
    BOOST_REQUIRE(rt.t->step(r.stepped, w));
    auto lines = rt.lines();
    BOOST_CHECK_MESSAGE(lines.size() == r.lines,
                        "skipped " << r.skipped << ", stepped " << r.stepped
                                   << ": " << lines.size() << " lines");
    if (r.lines == 1 && !lines.empty()) {
      BOOST_CHECK_MESSAGE(lines[0].rfind("{\"epoch\":1,", 0) == 0, lines[0]);
      // No step of this rank before it: no loss, no rate (not zeros).
      BOOST_CHECK_MESSAGE(
          lines[0].find("\"train_loss\":null") != std::string::npos &&
              lines[0].find("\"samples_per_s\":null") != std::string::npos,
          lines[0]);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_metrics_line_is_json_also_when_the_weights_diverged) {
  // --optimizer.lr=1000 once wrote "train_loss":-nan, which JSON readers
  // reject, line and all. Weights gone to NaN now stop the training (the
  // step fails), and the evaluation point's line still reads as JSON.
  reporting_trainer rt;
  auto w = rt.t->parameters();
  for (auto& x : w)
    std::fill(x.values.begin(), x.values.end(),
              std::numeric_limits<float>::quiet_NaN());
  auto st = rt.t->step(4, w); // clock 4 reports, then fails
  BOOST_REQUIRE(!st);
  BOOST_CHECK(st.error() == errc::non_finite);
  auto lines = rt.lines();
  BOOST_REQUIRE_EQUAL(lines.size(), 1u);
  auto j = nlohmann::json::parse(lines[0], nullptr, false);
  BOOST_REQUIRE_MESSAGE(!j.is_discarded(), "not JSON: " << lines[0]);
  BOOST_CHECK_MESSAGE(j.at("train_loss").is_null(), lines[0]);
  BOOST_CHECK_MESSAGE(j.at("test_accuracy").is_number(), lines[0]);
  // What the line's numbers go through: no NaN or infinity gets out.
  BOOST_CHECK_EQUAL(json_number(std::nan("")), "null");
  BOOST_CHECK_EQUAL(json_number(-HUGE_VAL), "null");
  BOOST_CHECK_EQUAL(json_number(0.25), "0.25");
}

BOOST_AUTO_TEST_CASE(rank_0_back_in_the_last_step_reports_it_before_the_end) {
  // 4 evaluations per epoch of 4 steps: every step is an evaluation point,
  // the last (clock 7) too. Given up, it is reported at finish(), before
  // the final line (clock 8).
  reporting_trainer rt{4};
  auto w = rt.t->parameters();
  BOOST_REQUIRE(!rt.t->done(7));
  rt.t->step_skipped(7);
  BOOST_REQUIRE(rt.t->done(8));
  rt.t->finish(w);
  auto lines = rt.lines();
  BOOST_REQUIRE_EQUAL(lines.size(), 2u);
  BOOST_CHECK_MESSAGE(lines[0].rfind("{\"epoch\":1.75,", 0) == 0, lines[0]);
  BOOST_CHECK_MESSAGE(lines[1].rfind("{\"epoch\":2,", 0) == 0, lines[1]);
}

BOOST_AUTO_TEST_CASE(a_metrics_file_that_cannot_be_opened_is_said_at_start) {
  // At f9f4d5e rank 0 went on without a word, and its metrics went
  // nowhere. troupe-node now refuses such a file before joining
  // (training_cluster_test); one that goes away after that check leaves
  // training going on (its lines print), and the log says why the file
  // stays empty (errors are logged at every level).
  auto lines = std::make_shared<std::vector<std::string>>();
  set_log_observer(
      [lines](log_level lvl, const std::string&, const std::string& what) {
        if (lvl == log_level::error)
          lines->push_back(what);
      });
  auto cfg = tiny_config("server");
  cfg.train.metrics_file = "/nonexistent/metrics.jsonl";
  auto t = tiny_trainer(cfg);
  t->start(0, 2);
  set_log_observer({});
  BOOST_REQUIRE_EQUAL(lines->size(), 1u);
  BOOST_CHECK_EQUAL(lines->front(),
                    "--train.metrics-file: cannot open "
                    "/nonexistent/metrics.jsonl: No such file or directory;"
                    " no metrics written");
}

BOOST_AUTO_TEST_CASE(arrays_of_the_wrong_shape_are_an_error_not_a_crash) {
  auto cfg = tiny_config("server");
  auto t = tiny_trainer(cfg);
  auto w = t->parameters();
  auto short_one = w;
  short_one[1].values.pop_back();
  auto missing = w;
  missing.pop_back();
  for (auto* bad : {&short_one, &missing}) {
    auto copy = *bad;
    auto a = t->step(0, *bad);
    auto b = t->step_taking(0, copy);
    BOOST_REQUIRE(!a);
    BOOST_REQUIRE(!b);
    BOOST_CHECK(a.error() == errc::bad_shape);
    BOOST_CHECK(b.error() == errc::bad_shape);
  }
  BOOST_TEST(bool(t->step(0, w))); // and it still trains
}

// A batch above a worker's share of the samples would run no step (and
// print an epoch of NaN): the first step says so instead, as a setting.
BOOST_AUTO_TEST_CASE(a_batch_above_a_workers_share_fails_its_first_step) {
  auto cfg = tiny_config("server");
  cfg.train.batch = 17; // 32 samples over 2 workers: 16 each
  auto m = model::from_spec(cfg.train.model, nullptr);
  BOOST_REQUIRE(m);
  auto t = make_trainer(cfg.trainer(), std::move(*m), tiny_data(), tiny_data());
  t->start(1, 2);
  BOOST_CHECK(!t->done(0)); // the step must run, to fail
  auto w = t->parameters();
  auto r = t->step(0, w);
  BOOST_REQUIRE(!r);
  BOOST_CHECK(r.error() == errc::invalid_config);
  BOOST_CHECK_EQUAL(describe(r.error()),
                    "invalid_config: --train.batch 17 is more than this"
                    " worker's share of the 32 training samples (2 workers):"
                    " at most 16");
  auto fits = tiny_config("server"); // 16 a worker: one step an epoch
  fits.train.batch = 16;
  auto ok = tiny_trainer(fits);
  BOOST_CHECK(bool(ok->step(0, w)));
  BOOST_CHECK(ok->done(2));
}

BOOST_AUTO_TEST_SUITE_END()
