// A pipeline stage's settings and checkpoint files: flags that are wrong
// are refused with the flag's name; checkpoints round-trip, the two newest
// are kept, and a file of another stage, model or a corrupt one is refused;
// a metrics path that cannot be written is said.
#define BOOST_TEST_MODULE stage_files_test
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>

#include "actors/pipeline/pipeline_settings.hpp"
#include "actors/pipeline/stage_driver_internal.hpp"
#include "messages/errors.hpp"
#include "tests/test_support.hpp"

using namespace troupe;
using namespace troupe::pipe;
using troupe::test::temp_dir;
namespace fs = std::filesystem;

namespace {

stage_checkpoint sample(uint32_t stage, uint64_t step) {
  stage_checkpoint x;
  x.stage = stage;
  x.step = step;
  x.spec = "mlp:784-64-10";
  x.first = 1;
  x.last = 2;
  x.arrays = {{2, {1.5f, -2.0f, float(step)}}, {3, {0.25f}}};
  return x;
}

std::string message_of(const caf::error& err) {
  return describe(err);
}

} // namespace

BOOST_AUTO_TEST_CASE(settings_refuse_what_is_wrong_and_name_the_flag) {
  pipeline_settings x;
  BOOST_REQUIRE(!validate(x)); // the defaults
  BOOST_CHECK(x.schedule == pipeline_schedule::one_f_one_b);
  auto refused = [](pipeline_settings y, const std::string& flag) {
    auto err = validate(y);
    BOOST_CHECK_MESSAGE(err == errc::invalid_config &&
                            message_of(err).find(flag) != std::string::npos,
                        flag << ": " << message_of(err));
  };
  auto y = x;
  y.stages = 1;
  refused(y, "--pipeline.stages");
  y = x;
  y.schedule_text = "2f2b";
  refused(y, "1f1b");
  y = x;
  y.micro_batches = 0;
  refused(y, "--pipeline.micro-batches");
  for (auto cut : {"3,2", "0,2", "2,x", "2,,3", "2"}) {
    y = x;
    y.cut_text = cut; // 3 stages need 2 increasing boundaries above 0
    refused(y, "--pipeline.cut");
  }
  y = x;
  y.checkpoint_every = 0;
  refused(y, "--pipeline.checkpoint-every");
  for (auto f : {"3@10",
                 "1",
                 "1@",
                 "x@2",
                 "1@2x",
                 "1@2:pull",
                 ":push",
                 "1@:push",
                 "1@2:push:push",
                 "1/1@2",
                 "1/@2",
                 "1/0/0@2",
                 "1@2:eval:push",
                 "1@2:push:eval",
                 "1@:eval",
                 "1@2eval",
                 "1@2:device:eval",
                 "1@:device",
                 "1@2:stall:device",
                 "1@:stall",
                 "4294967297@2",
                 "-1@2",
                 "1@-2",
                 "1@ 2",
                 "1@99999999999999999999",
                 "+1@2"}) {
    y = x;
    y.fault_kill = f;
    refused(y, "--pipeline.fault-kill");
  }
  using at = pipeline_settings::fault_at;
  y = x;
  y.fault_kill = "1@25";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.fault_stage == 1 && y.fault_step == 25 &&
              y.fault_in == at::step);
  y.fault_kill = "2@7:push";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.fault_stage == 2 && y.fault_step == 7 &&
              y.fault_in == at::push);
  BOOST_CHECK(y.fault_replica == pipeline_settings::any_replica);
  // Stage 2 of replica 0 (x has one replica).
  y.fault_kill = "2/0@8";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.fault_stage == 2 && y.fault_replica == 0 && y.fault_step == 8 &&
              y.fault_in == at::step);
  y.fault_kill = "2/0@8:eval";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.fault_stage == 2 && y.fault_replica == 0 && y.fault_step == 8 &&
              y.fault_in == at::eval);
  y.fault_kill = "0@3:device";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.fault_stage == 0 && y.fault_step == 3 &&
              y.fault_in == at::device);
  y.fault_kill = "1@4:stall";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.fault_stage == 1 && y.fault_step == 4 &&
              y.fault_in == at::stall);
  for (auto f : {"3", "x", "-1", "1/", "/0", "1/1", "1/0/0", "1@2", "1 ",
                 "4294967297"}) {
    y = x;
    y.fault_lose_sync = f;
    refused(y, "--pipeline.fault-lose-sync");
    y = x;
    y.fault_lose_finish = f;
    refused(y, "--pipeline.fault-lose-finish");
  }
  y = x;
  BOOST_CHECK(y.lose_sync_stage == pipeline_settings::none); // off
  y.fault_lose_sync = "2";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.lose_sync_stage == 2 &&
              y.lose_sync_replica == pipeline_settings::any_replica);
  y.fault_lose_sync = "1/0";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.lose_sync_stage == 1 && y.lose_sync_replica == 0);
  for (auto f : {"1", "3@4", "1/1@4", "1@", "@4", "1@x", "1@4:push", "1@-1"}) {
    y = x;
    y.fault_lose_commit = f;
    refused(y, "--pipeline.fault-lose-commit");
  }
  y = x;
  y.lose_commit_stage = 0; // validate() says off
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.lose_commit_stage == pipeline_settings::none);
  y.fault_lose_commit = "1/0@47";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.lose_commit_stage == 1 && y.lose_commit_replica == 0 &&
              y.lose_commit_step == 47);
  y.fault_lose_finish = "0/0";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.lose_finish_stage == 0 && y.lose_finish_replica == 0);
  y.fault_lose_commit = "2@0";
  BOOST_REQUIRE(!validate(y));
  BOOST_CHECK(y.lose_commit_stage == 2 &&
              y.lose_commit_replica == pipeline_settings::any_replica &&
              y.lose_commit_step == 0);
}

BOOST_AUTO_TEST_CASE(the_stall_watch_waits_longer_while_steps_are_slow) {
  using pipe::stall_wait, pipe::stalls_after_commit;
  using std::chrono::seconds;
  caf::timespan base = seconds{20};
  BOOST_CHECK(stall_wait(base, 0) == seconds{20});
  BOOST_CHECK(stall_wait(base, 1) == seconds{40});
  BOOST_CHECK(stall_wait(base, 6) == seconds{20 * 64});
  BOOST_CHECK(stall_wait(base, 60) == seconds{20 * 64}); // no more
  // A lost message: the mini-batch after the start again is quick, and
  // the wait shrinks back, one stall per commit.
  BOOST_CHECK_EQUAL(stalls_after_commit(2, seconds{1}, base), 1u);
  BOOST_CHECK_EQUAL(stalls_after_commit(1, seconds{1}, base), 0u);
  BOOST_CHECK_EQUAL(stalls_after_commit(0, seconds{1}, base), 0u);
  // Mini-batches of 50 s: the wait grew to 80 s (2 stalls) and stays,
  // where one of 40 s would have started them again for ever.
  BOOST_CHECK_EQUAL(stalls_after_commit(2, seconds{50}, base), 2u);
  BOOST_CHECK_EQUAL(stalls_after_commit(1, seconds{50}, base), 1u);
}

BOOST_AUTO_TEST_CASE(a_cut_must_fit_the_model) {
  pipeline_settings x;
  x.cut_text = "2,3";
  BOOST_REQUIRE(!validate(x));
  auto cut = cut_for(x, 5, {});
  BOOST_REQUIRE(cut);
  BOOST_CHECK((*cut == std::vector<size_t>{0, 2, 3, 5}));
  BOOST_CHECK(cut_for(x, 3, {}).error() == errc::invalid_config);
  pipeline_settings even;
  BOOST_REQUIRE(!validate(even));
  auto e = cut_for(even, 5, {0, 1, 3, 5});
  BOOST_REQUIRE(e);
  BOOST_CHECK((*e == std::vector<size_t>{0, 1, 3, 5}));
  // cut_layers found no even cut: fewer layers than stages
  BOOST_CHECK(cut_for(even, 2, {}).error() == errc::invalid_config);
}

BOOST_AUTO_TEST_CASE(checkpoints_round_trip_and_the_two_newest_stay) {
  temp_dir d;
  auto dir = d.path;
  BOOST_CHECK((checkpoint_steps(dir, 1) == std::vector<uint64_t>{0}));
  for (uint64_t step : {20, 40, 60})
    BOOST_REQUIRE(!write_stage_checkpoint(dir, sample(1, step)));
  BOOST_REQUIRE(!write_stage_checkpoint(dir, sample(2, 20)));
  BOOST_CHECK((checkpoint_steps(dir, 1) == std::vector<uint64_t>{0, 40, 60}));
  BOOST_CHECK((checkpoint_steps(dir, 2) == std::vector<uint64_t>{0, 20}));
  auto got = read_stage_checkpoint(dir, sample(1, 60));
  BOOST_REQUIRE(got);
  BOOST_REQUIRE_EQUAL(got->size(), 2u);
  BOOST_CHECK((*got)[0].key == 2 &&
              (*got)[0].values == sample(1, 60).arrays[0].values);
  BOOST_CHECK((*got)[1].key == 3 &&
              (*got)[1].values == std::vector<float>{0.25f});
  // Stray names in the folder are no checkpoints.
  std::ofstream{d / "stage-1-abc.ckpt"} << "x";
  std::ofstream{d / "stage-1-000000000080.tmp"} << "x";
  BOOST_CHECK((checkpoint_steps(dir, 1) == std::vector<uint64_t>{0, 40, 60}));
}

BOOST_AUTO_TEST_CASE(
    a_stage_at_its_end_takes_its_files_and_the_last_the_folder) {
  temp_dir d;
  auto dir = (std::filesystem::path{d.path} / "job").string();
  for (uint32_t stage : {0, 1})
    for (uint64_t step : {20, 40})
      BOOST_REQUIRE(!write_stage_checkpoint(dir, sample(stage, step)));
  remove_stage_checkpoints(dir, 0);
  BOOST_CHECK((checkpoint_steps(dir, 0) == std::vector<uint64_t>{0}));
  BOOST_CHECK((checkpoint_steps(dir, 1) == std::vector<uint64_t>{0, 20, 40}));
  remove_stage_checkpoints(dir, 1);
  BOOST_CHECK(!std::filesystem::exists(dir));
  // A file that is no stage's (a fault mark) keeps the folder.
  BOOST_REQUIRE(!write_stage_checkpoint(dir, sample(0, 20)));
  std::ofstream{std::filesystem::path{dir} / "fault-0-7"} << "killed once\n";
  remove_stage_checkpoints(dir, 0);
  BOOST_CHECK((checkpoint_steps(dir, 0) == std::vector<uint64_t>{0}));
  BOOST_CHECK(
      std::filesystem::exists(std::filesystem::path{dir} / "fault-0-7"));
}

BOOST_AUTO_TEST_CASE(a_torn_newest_checkpoint_is_passed_over) {
  // It was offered to the other stages, and the stage failed to load it at
  // every restart while they waited out --pipeline.stage-wait-ms.
  temp_dir d;
  auto dir = d.path;
  for (uint64_t step : {20, 40})
    BOOST_REQUIRE(!write_stage_checkpoint(dir, sample(1, step)));
  std::filesystem::resize_file(checkpoint_path(dir, 1, 40), 100);
  BOOST_CHECK((checkpoint_steps(dir, 1) == std::vector<uint64_t>{0, 20, 40}));
  BOOST_CHECK((whole_checkpoint_steps(dir, 1) == std::vector<uint64_t>{0, 20}));
  BOOST_CHECK(read_stage_checkpoint(dir, sample(1, 20)));
}

BOOST_AUTO_TEST_CASE(
    a_checkpoint_of_another_model_or_a_corrupt_one_is_refused) {
  temp_dir d;
  auto dir = d.path;
  BOOST_REQUIRE(!write_stage_checkpoint(dir, sample(1, 40)));
  auto other = sample(1, 40);
  other.spec = "mlp:784-128-10";
  // Another model, cut or optimizer: the same flags would fail again, so a
  // configuration's error (exit 2), saying what to change.
  auto err = read_stage_checkpoint(dir, other).error();
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_MESSAGE(message_of(err).find("another model or cut") !=
                          std::string::npos,
                      message_of(err));
  auto layers = sample(1, 40);
  layers.first = 0;
  BOOST_CHECK(read_stage_checkpoint(dir, layers).error() ==
              errc::invalid_config);
  auto adam = sample(1, 40);
  adam.optimizer = "adam";
  err = read_stage_checkpoint(dir, adam).error();
  BOOST_CHECK(err == errc::invalid_config);
  BOOST_CHECK_MESSAGE(
      message_of(err).find("another optimizer (sgd, its state beside the"
                           " weights): start with --optimizer.name=sgd") !=
          std::string::npos,
      message_of(err));
  // A momentum checkpoint is no nesterov one, though alike in shape.
  auto momentum = sample(1, 60);
  momentum.optimizer = "momentum";
  BOOST_REQUIRE(!write_stage_checkpoint(dir, momentum));
  BOOST_CHECK(read_stage_checkpoint(dir, momentum));
  auto nesterov = momentum;
  nesterov.optimizer = "nesterov";
  BOOST_CHECK(read_stage_checkpoint(dir, nesterov).error() ==
              errc::invalid_config);
  auto stage = sample(1, 40);
  stage.stage = 2;
  BOOST_CHECK(read_stage_checkpoint(dir, stage).error() == errc::bad_file);
  BOOST_CHECK(read_stage_checkpoint(dir, sample(1, 80)).error() ==
              errc::bad_file); // none of that step
  // Flip a byte in the middle of the file: the header's check catches it.
  auto path = checkpoint_path(dir, 1, 40);
  std::fstream f{path, std::ios::in | std::ios::out | std::ios::binary};
  f.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
  f.put('\x5a');
  f.close();
  BOOST_CHECK(read_stage_checkpoint(dir, sample(1, 40)).error() ==
              errc::bad_file);
}
