// Stage actors (actors/pipeline/stage_actor.hpp) train what the whole
// model trains: under each schedule, P stages exchanging StageTensors give
// the weights of ordinary SGD steps within 1e-5 relative, in one actor
// system and with each stage in an actor system of its own, over the
// network (CAF's middleman on loopback). Bad input is refused clearly.
#define BOOST_TEST_MODULE stage_actor_tests
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/io/middleman.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/node/node_config.hpp"
#include "actors/pipeline/stage_actor.hpp"
#include "kernels/stage_backend.hpp"
#include "messages/errors.hpp"
#include "messages/pipeline.hpp"
#include "messages/type_ids.hpp"
#include "tests/pipeline/pipeline_reference.hpp"
#include "tests/pipeline/stage_pipeline.hpp"

using namespace troupe;
using namespace troupe::test;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(stage_actor_tests)

BOOST_AUTO_TEST_CASE(stage_tensors_round_trip_and_bad_ones_are_refused) {
  stage_tensor x{5, 2, 2, 3, {1, 2, 3, 4, 5, 6}}, y;
  BOOST_REQUIRE(!decode(encode(x), y));
  BOOST_CHECK(y.step == 5 && y.micro == 2 && y.rows == 2 && y.cols == 3 &&
              y.values == x.values);
  x.cols = 4; // 8 floats claimed, 6 sent
  auto err = decode(encode(x), y);
  BOOST_CHECK(err == errc::malformed_message);
  frame garbage{std::vector<uint8_t>(24, 0xff)};
  BOOST_CHECK(decode(garbage, y) == errc::malformed_message);
}

/// Runs `steps` mini-batches through a pipeline of `p` stages spread over
/// `systems` (driven from the first) and checks its weights against
/// ordinary training.
void check_pipeline(std::vector<std::unique_ptr<caf::actor_system>>& systems,
                    pipeline_schedule s, uint32_t p, uint32_t m) {
  constexpr uint32_t steps = 3;
  auto& driver = *systems[0];
  pipeline pipe{driver, systems, s, p, m};
  for (uint64_t k = 0; k < steps; ++k)
    BOOST_CHECK_GT(pipe.step(driver, k), 0.0);
  auto rel = worst_relative(ordinary(steps), pipe.weights_of(driver));
  BOOST_CHECK_MESSAGE(rel <= 1e-5,
                      to_string(s) << " P=" << p << " M=" << m << ": " << rel);
  for (auto& st : pipe.stages)
    caf::anon_send_exit(st, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(stages_in_one_system_train_the_whole_model) {
  actor_systems one{1};
  for (auto s : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b,
                 pipeline_schedule::zb_h1})
    for (uint32_t p : {2u, 3u, 4u})
      for (uint32_t m : {1u, 4u, 8u})
        check_pipeline(one.systems, s, p, m);
}

BOOST_AUTO_TEST_CASE(stages_in_systems_of_their_own_talk_over_the_network) {
  // Four actor systems, one stage each, the driver in the first: the
  // StageTensors between stages 1, 2 and 3 cross CAF's middleman.
  actor_systems four{4};
  for (auto s : {pipeline_schedule::one_f_one_b, pipeline_schedule::zb_h1})
    check_pipeline(four.systems, s, 4, 4);
}

namespace {

/// The weights of 3 stages in one actor system (1F1B, 4 micro-batches)
/// after `steps` mini-batches under `plan`.
weights trained(const update_plan& plan, uint32_t steps) {
  actor_systems one{1};
  auto& driver = *one.systems[0];
  pipeline pipe{driver, one.systems, pipeline_schedule::one_f_one_b,
                3,      4,           road_kind::middleman,
                plan};
  for (uint64_t k = 0; k < steps; ++k)
    BOOST_CHECK_GT(pipe.step(driver, k), 0.0);
  return pipe.weights_of(driver);
}

} // namespace

BOOST_AUTO_TEST_CASE(stages_follow_the_lr_schedule_and_the_weight_decay) {
  // A stage keeping its own weights applies --optimizer.weight-decay and
  // the lr schedule, counted in mini-batches (at f9f4d5e it applied plain
  // SGD at --optimizer.lr and ignored both): lr halved every 2, L2 0.01.
  constexpr uint32_t steps = 5;
  update_plan plan{0.01f, 2, 0.5f};
  auto want = ordinary(steps, plan);
  auto rel = worst_relative(want, trained(plan, steps));
  BOOST_CHECK_MESSAGE(rel <= 1e-5, rel);
  // The plan shows in the weights: plain SGD ends elsewhere.
  auto apart = worst_relative(want, ordinary(steps));
  BOOST_CHECK_MESSAGE(apart > 1e-3, apart);
  BOOST_TEST_MESSAGE("with the plan: " << rel << " from ordinary training, "
                                       << apart << " from plain SGD");
}

BOOST_AUTO_TEST_CASE(stages_apply_momentum_nesterov_and_adam_exactly) {
  // A stage keeping its own weights applies --optimizer.name with its
  // state beside them (at 4fbc233 a pipeline without servers refused all
  // but sgd), under the lr schedule and the weight decay too.
  constexpr uint32_t steps = 5;
  for (std::string o : {"momentum", "nesterov", "adam"}) {
    update_plan plan{0.01f, 2, 0.5f, o};
    auto want = ordinary(steps, plan);
    auto rel = worst_relative(want, trained(plan, steps));
    BOOST_CHECK_MESSAGE(rel <= 1e-5, o << ": " << rel);
    // The optimizer shows in the weights: sgd ends elsewhere.
    auto apart = worst_relative(want, ordinary(steps, {0.01f, 2, 0.5f}));
    BOOST_CHECK_MESSAGE(apart > 1e-3, o << ": " << apart);
  }
}

BOOST_AUTO_TEST_CASE(a_pipeline_reset_with_the_pulled_state_goes_on_exactly) {
  // What a stage's checkpoint holds (its pull: the weights, then the
  // optimizer's state) and a restart gives back (reset): 3 mini-batches,
  // then new stages that take those, then 2 more, end where 5 in one go
  // do. Weights without their state (zeros) end elsewhere.
  actor_systems one{1};
  auto& driver = *one.systems[0];
  for (std::string o : {"momentum", "adam"}) {
    update_plan plan{0.0f, 0, 1.0f, o};
    auto run = [&](bool keep_state) {
      pipeline a{driver, one.systems, pipeline_schedule::one_f_one_b,
                 3,      4,           road_kind::middleman,
                 plan};
      for (uint64_t k = 0; k < 3; ++k)
        a.step(driver, k);
      auto arrays = a.pulled(driver);
      for (auto& stage : arrays) {
        BOOST_REQUIRE_EQUAL(stage.size() % (o == "adam" ? 3 : 2), 0u);
        for (auto& x : stage)
          if (!keep_state && x.key >= stage_state_key_step)
            std::fill(x.values.begin(), x.values.end(), 0.0f);
      }
      pipeline b{driver, one.systems, pipeline_schedule::one_f_one_b,
                 3,      4,           road_kind::middleman,
                 plan};
      b.reset(driver, arrays, 3);
      for (uint64_t k = 3; k < 5; ++k)
        b.step(driver, k);
      return worst_relative(ordinary(5, plan), b.weights_of(driver));
    };
    auto rel = run(true);
    BOOST_CHECK_MESSAGE(rel <= 1e-5, o << ": " << rel);
    auto without = run(false);
    BOOST_CHECK_MESSAGE(without > 1e-4, o << " without its state: " << without);
  }
}

/// One actor system, and the model cut into two stages, for a stage
/// actor tried alone.
struct lone_stage {
  std::unique_ptr<node_config> cfg = config();
  caf::actor_system sys{*cfg};
  caf::scoped_actor self{sys};
  model whole = fresh_model();
  std::vector<size_t> cut = cut_of(whole, 2);
};

BOOST_FIXTURE_TEST_CASE(a_stage_refuses_bad_mini_batches_and_bad_cuts,
                        lone_stage) {
  auto first = sys.spawn(
      stage_actor,
      stage_settings{spec, 7, cut, 0, 4, pipeline_schedule::gpipe, sgd_at(lr)});
  // 6 rows do not cut into 4 micro-batches; 19 columns are not the input.
  for (auto bad : {stage_tensor{0, 0, 6, 20, std::vector<float>(120)},
                   stage_tensor{0, 0, 8, 19, std::vector<float>(152)}})
    self->request(first, 10s, step_atom_v, uint64_t{0}, encode(bad))
        .receive([](double) { BOOST_FAIL("a bad mini-batch was taken"); },
                 [](caf::error& err) { BOOST_CHECK(err == errc::bad_shape); });
  self->request(first, 10s, step_atom_v, uint64_t{0}, frame{})
      .receive(
          [](double) { BOOST_FAIL("an empty frame was taken"); },
          [](caf::error& err) { BOOST_CHECK(err == errc::malformed_message); });
  // A cut that does not end at the model's last layer: the actor exits.
  auto bad = sys.spawn(
      stage_actor,
      stage_settings{
          spec, 7, {0, 2}, 0, 1, pipeline_schedule::gpipe, sgd_at(lr)});
  self->monitor(bad);
  self->receive([](const caf::down_msg& dm) {
    BOOST_CHECK(dm.reason == errc::invalid_config);
  });
  // An optimizer a stage does not apply: the actor exits, naming it.
  stage_settings sum{spec, 7, cut, 0, 1, pipeline_schedule::gpipe, sgd_at(lr)};
  sum.update.name = "sum";
  auto summing = sys.spawn(stage_actor, sum);
  self->monitor(summing);
  self->receive([&](const caf::down_msg& dm) {
    BOOST_CHECK(dm.reason == errc::invalid_config);
    BOOST_CHECK_MESSAGE(sys.render(dm.reason).find("not sum") !=
                            std::string::npos,
                        sys.render(dm.reason));
  });
  // Weights pulled under sgd (no state) given to an adam stage: refused,
  // saying why, and its weights stay.
  stage_settings adam{spec, 7, cut, 0, 4, pipeline_schedule::gpipe, sgd_at(lr)};
  adam.update.name = "adam";
  auto second = sys.spawn(stage_actor, adam);
  std::vector<named_array> sgd_weights;
  self->request(first, 10s, pull_atom_v)
      .receive([&](std::vector<named_array>& w) { sgd_weights = std::move(w); },
               [&](caf::error& err) { BOOST_FAIL(sys.render(err)); });
  self->request(second, 10s, reset_atom_v, uint64_t{0}, uint64_t{3},
                sgd_weights, caf::actor{}, caf::actor{}, caf::actor{})
      .receive([](uint64_t) { BOOST_FAIL("weights without adam's state"); },
               [&](caf::error& err) {
                 BOOST_CHECK(err == errc::invalid_config);
                 BOOST_CHECK_MESSAGE(sys.render(err).find(
                                         "a checkpoint of another optimizer") !=
                                         std::string::npos,
                                     sys.render(err));
               });
  caf::anon_send_exit(second, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(first, caf::exit_reason::user_shutdown);
}

namespace {

/// The CPU stage, but its device "breaks" at the first forward.
class breaking_stage final : public stage_backend {
public:
  explicit breaking_stage(std::unique_ptr<stage_backend> s)
      : s_(std::move(s)) {}
  std::string describe() const override { return "breaking"; }
  size_t input_size() const override { return s_->input_size(); }
  size_t output_size() const override { return s_->output_size(); }
  bool is_last() const override { return s_->is_last(); }
  size_t first_layer() const override { return s_->first_layer(); }
  std::vector<param_ref> parameters() override { return s_->parameters(); }
  device_status upload_parameters() override { return s_->upload_parameters(); }
  std::vector<param_ref> gradients() override { return s_->gradients(); }
  device_status download_gradients() override {
    return s_->download_gradients();
  }
  device_status zero_gradients() override { return s_->zero_gradients(); }
  device_status forward(uint32_t, const float*, size_t) override {
    return {"cudaMalloc: cudaErrorMemoryAllocation: out of memory"};
  }
  device_status infer(const float* x, size_t rows, tensor& out) override {
    return s_->infer(x, rows, out);
  }
  void drop_micro_batches() override { s_->drop_micro_batches(); }
  const tensor& output(uint32_t micro) const override {
    return s_->output(micro);
  }
  device_status backward_input(uint32_t micro, const float* dy,
                               bool want_dx) override {
    return s_->backward_input(micro, dy, want_dx);
  }
  const tensor& input_grad() const override { return s_->input_grad(); }
  device_status backward_weight(uint32_t micro) override {
    return s_->backward_weight(micro);
  }
  size_t held() const override { return s_->held(); }
  size_t held_bytes() const override { return s_->held_bytes(); }

private:
  std::unique_ptr<stage_backend> s_;
};

} // namespace

BOOST_FIXTURE_TEST_CASE(a_device_that_breaks_ends_its_stage, lone_stage) {
  // A kernel's refusal fails a mini-batch; a device's failure (out of
  // memory, a CUDA error) ends the stage, whose supervision restarts the
  // pipeline from its last commit, rather than a stage that hangs on.
  stage_settings s{spec, 7, cut, 0, 4, pipeline_schedule::gpipe, sgd_at(lr)};
  s.backend =
      std::make_shared<breaking_stage>(make_cpu_stage(whole, cut[0], cut[1]));
  auto first = sys.spawn(stage_actor, s);
  self->monitor(first);
  stage_tensor batch{0, 0, 8, 20, std::vector<float>(160, 0.5f)};
  self->request(first, 10s, step_atom_v, uint64_t{0}, encode(batch))
      .receive([](double) { BOOST_FAIL("a broken device's step passed"); },
               [](caf::error& err) {
                 BOOST_CHECK(err == errc::device_failed);
                 BOOST_CHECK_MESSAGE(describe(err).find("out of memory") !=
                                         std::string::npos,
                                     describe(err));
               });
  self->receive([](const caf::down_msg& dm) {
    BOOST_CHECK(dm.reason == errc::device_failed);
  });
}

BOOST_AUTO_TEST_SUITE_END()
