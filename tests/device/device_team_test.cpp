// Device actors and the team a worker steps through (issue 38), on the
// CPU backend that every CI run has: a step on 1, 2 or 3 devices is the
// batch's mean gradient of the CPU model; a failing device fails the step
// on every rank, named, without hanging the others; devices that cannot be
// opened are one plain error. Where a GPU is found, a step on cuda:0 is
// checked against the CPU as well.
#define BOOST_TEST_MODULE device_team_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <thread>

#include <caf/send.hpp>

#include "actors/base/exit_codes.hpp"
#include "actors/base/step_watch.hpp"
#include "actors/device/device_actor.hpp"
#include "actors/device/device_team.hpp"
#include "actors/node/node_config.hpp"
#include "kernels/random.hpp"
#include "messages/errors.hpp"
#include "messages/type_ids.hpp"
#include "tests/forked_child.hpp"

using namespace troupe;

namespace {

const char* spec = "mlp:784-64-32-10";

model fresh_model() {
  auto m = model::from_spec(spec, nullptr);
  BOOST_REQUIRE(m);
  m->init_parameters(3);
  return std::move(*m);
}

/// A batch of `rows` random inputs and labels.
struct batch_of {
  std::vector<float> x;
  std::vector<uint8_t> y;
  explicit batch_of(size_t rows) : x(rows * 784), y(rows) {
    std::mt19937_64 r{11};
    for (auto& v : x)
      v = float(uniform01(r));
    for (auto& v : y)
      v = uint8_t(uniform_below(r, 10));
  }
};

/// ||a - b|| / ||b|| over every gradient array of two models.
double gradient_error(model& a, model& b) {
  auto ga = a.gradients(), gb = b.gradients();
  BOOST_REQUIRE_EQUAL(ga.size(), gb.size());
  double worst = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    double d = 0, n = 0;
    for (size_t k = 0; k < ga[i].size; ++k) {
      d += std::pow(double(ga[i].data[k]) - gb[i].data[k], 2);
      n += std::pow(double(gb[i].data[k]), 2);
    }
    worst = std::max(worst, std::sqrt(d) / std::max(std::sqrt(n), 1e-30));
  }
  return worst;
}

std::vector<device_name> cpus(size_t n) {
  return std::vector<device_name>(n, device_name{});
}

/// Runs one step of `rows` on `devices` and checks it against the CPU
/// model's own step within `bound`; returns the relative error.
double check_step(caf::actor_system& sys, const std::vector<device_name>& ds,
                  bool sum, size_t rows, double bound) {
  auto reference = fresh_model();
  auto m = fresh_model();
  batch_of b{rows};
  float want = 0, got = 0;
  BOOST_REQUIRE(reference.compute_gradients(b.x.data(), b.y.data(), rows,
                                            &want) == kernel_status::ok);
  std::string err;
  auto team = device_team::open(sys, ds, sum, m, rows, err);
  BOOST_REQUIRE_MESSAGE(team, err);
  BOOST_TEST_MESSAGE(team->describe());
  // The batch from the team's own host memory (pinned on a GPU), as a
  // trainer gathers it; made for `rows` rows, no more.
  float* x = team->batch_memory(b.x.size());
  BOOST_REQUIRE(x != nullptr);
  BOOST_CHECK(team->batch_memory(b.x.size() + 1) == nullptr);
  std::copy(b.x.begin(), b.x.end(), x);
  for (int i = 0; i < 3; ++i) { // the same step again: nothing carried over
    auto e = team->step(m, x, b.y.data(), rows, &got);
    if (e)
      BOOST_FAIL("step: " << to_string(e));
  }
  auto rel = gradient_error(m, reference);
  BOOST_TEST_MESSAGE(ds.size() << " device(s), " << rows
                               << " rows: relative error " << rel);
  BOOST_CHECK_LE(rel, bound);
  BOOST_CHECK_LE(std::abs(got - want), 1e-5 * std::abs(want));
  return rel;
}

/// A CPU backend one of whose calls fails (a device that breaks).
class failing_backend final : public device_backend {
public:
  /// hang: its gradients never come (a hung device), as far as a watch
  /// can tell.
  enum class at { nowhere, attach, set_parameters, compute, hang };
  failing_backend(const model& m, at where)
      : cpu_(make_cpu_backend(m)), where_(where) {}
  std::string describe() const override { return "failing"; }
  device_status attach() override {
    return fails(at::attach, "attach: an injected failure");
  }
  device_status set_parameters(const std::vector<param_ref>& ps) override {
    auto st = fails(at::set_parameters, "set_parameters: an injected failure");
    return st.ok() ? cpu_->set_parameters(ps) : st;
  }
  device_status compute_gradients(const float* x, const uint8_t* y, size_t n,
                                  float* loss) override {
    if (where_ == at::hang)
      std::this_thread::sleep_for(std::chrono::seconds{30});
    auto st = fails(at::compute, "compute_gradients: an injected failure");
    return st.ok() ? cpu_->compute_gradients(x, y, n, loss) : st;
  }
  device_status scale_gradients(float a) override {
    return cpu_->scale_gradients(a);
  }
  std::vector<device_array> parameter_arrays() override {
    return cpu_->parameter_arrays();
  }
  std::vector<device_array> gradient_arrays() override {
    return cpu_->gradient_arrays();
  }
  device_status sync() override { return {}; }
  device_status get_gradients(const std::vector<param_ref>& gs) override {
    return cpu_->get_gradients(gs);
  }
  /// Counted, then the default: the three calls above in turn.
  device_status step_alone(const std::vector<param_ref>& ps, const float* x,
                           const uint8_t* y, size_t n, float* loss,
                           const std::vector<param_ref>& gs) override {
    ++alone_steps;
    return device_backend::step_alone(ps, x, y, n, loss, gs);
  }
  size_t alone_steps = 0;

private:
  device_status fails(at where, const char* what) const {
    return where == where_ ? device_status{what} : device_status{};
  }
  std::unique_ptr<device_backend> cpu_;
  at where_;
};

/// A team of two CPU devices in a CPU group waiting `wait`, rank `bad`'s
/// backend failing at `where`; the error of one step.
caf::error failed_step(caf::actor_system& sys, size_t bad,
                       failing_backend::at where,
                       std::chrono::milliseconds wait) {
  auto m = fresh_model();
  batch_of b{8};
  std::vector<std::shared_ptr<device_backend>> backends;
  for (size_t r = 0; r < 2; ++r)
    backends.push_back(
        r == bad ? std::make_shared<failing_backend>(m, where)
                 : std::shared_ptr<device_backend>{make_cpu_backend(m)});
  auto team = device_team::assemble(sys, cpus(2), std::move(backends),
                                    make_cpu_group(2, wait), wait, "test");
  float loss = 0;
  return team->step(m, b.x.data(), b.y.data(), 8, &loss);
}

} // namespace

BOOST_AUTO_TEST_SUITE(device_team_tests)

BOOST_AUTO_TEST_CASE(cpu_devices_compute_the_batchs_mean_gradient) {
  node_config cfg;
  caf::actor_system sys{cfg};
  // One device alone: the CPU model's own kernels on the same rows, bit
  // for bit.
  BOOST_CHECK_EQUAL(check_step(sys, cpus(1), false, 64, 0.0), 0.0);
  // The communicator of one rank (sync_device on one device).
  check_step(sys, cpus(1), true, 64, 0.0);
  // 2 and 3 devices share the rows (64 = 22 + 21 + 21): each device's mean
  // times its share, summed, is the batch's mean up to float rounding.
  check_step(sys, cpus(2), true, 64, 1e-5);
  check_step(sys, cpus(3), true, 64, 1e-5);
  check_step(sys, cpus(3), true, 7, 1e-5);
}

BOOST_AUTO_TEST_CASE(a_device_alone_steps_in_one_call) {
  // A device alone gets its whole step in one call (step_alone), which a
  // GPU overlaps with its copies; in a communicator, the calls one by one
  // around the collectives.
  node_config cfg;
  caf::actor_system sys{cfg};
  using at = failing_backend::at;
  for (bool sum : {false, true}) {
    auto reference = fresh_model();
    auto m = fresh_model();
    batch_of b{16};
    float want = 0, got = 0;
    BOOST_REQUIRE(reference.compute_gradients(b.x.data(), b.y.data(), 16,
                                              &want) == kernel_status::ok);
    auto backend = std::make_shared<failing_backend>(m, at::nowhere);
    std::vector<std::unique_ptr<communicator>> group;
    if (sum)
      group = make_cpu_group(1, std::chrono::seconds{30});
    auto team = device_team::assemble(sys, cpus(1), {backend}, std::move(group),
                                      std::chrono::seconds{30}, "test");
    for (int i = 0; i < 2; ++i)
      if (auto e = team->step(m, b.x.data(), b.y.data(), 16, &got))
        BOOST_FAIL("step: " << to_string(e));
    BOOST_CHECK(team->batch_memory(1) == nullptr); // assembled: none
    team.reset(); // the actor is done with the backend
    BOOST_CHECK_EQUAL(backend->alone_steps, sum ? 0u : 2u);
    BOOST_CHECK_EQUAL(gradient_error(m, reference), 0.0);
    BOOST_CHECK_EQUAL(got, want);
  }
  // A device alone that breaks fails the step in its own words.
  auto m = fresh_model();
  batch_of b{16};
  auto team = device_team::assemble(
      sys, cpus(1), {std::make_shared<failing_backend>(m, at::compute)}, {},
      std::chrono::seconds{30}, "test");
  float loss = 0;
  auto err = team->step(m, b.x.data(), b.y.data(), 16, &loss);
  BOOST_REQUIRE(err);
  BOOST_CHECK(err == errc::device_failed);
  BOOST_CHECK_MESSAGE(describe(err).find("compute_gradients: an injected") !=
                          std::string::npos,
                      describe(err));
}

BOOST_AUTO_TEST_CASE(a_failing_device_fails_the_step_named_without_a_hang) {
  // A rank whose own work fails still makes every collective, so the
  // other ends its step at once, well inside the group's 30 s wait; the
  // step names the rank that failed, in its backend's words.
  node_config cfg;
  caf::actor_system sys{cfg};
  using at = failing_backend::at;
  auto long_wait = std::chrono::seconds{30};
  for (auto [bad, where, words] :
       {std::tuple{size_t{1}, at::compute, "compute_gradients: an injected"},
        std::tuple{size_t{0}, at::set_parameters, "set_parameters: an"},
        std::tuple{size_t{0}, at::compute, "compute_gradients: an"}}) {
    auto began = std::chrono::steady_clock::now();
    auto err = failed_step(sys, bad, where, long_wait);
    BOOST_CHECK(std::chrono::steady_clock::now() - began < long_wait);
    BOOST_REQUIRE(err);
    BOOST_CHECK(err == errc::device_failed);
    auto said = describe(err);
    BOOST_TEST_MESSAGE(said);
    BOOST_CHECK_MESSAGE(said.find("cpu (rank " + std::to_string(bad) + ")") !=
                                std::string::npos &&
                            said.find(words) != std::string::npos,
                        said);
  }
}

BOOST_AUTO_TEST_CASE(a_hung_device_is_named_by_the_step_watch) {
  // The worker's step watch (default: 5 s in sync) ends a hung step long
  // before the team's own watch (twice the group's wait), whose line names
  // the device: its line named only the worker's step. Now it names the
  // device's share of the step under way beside it too.
  auto r = test::in_child([] {
    node_config cfg;
    caf::actor_system sys{cfg};
    start_step_watch(std::chrono::milliseconds{500});
    auto m = fresh_model();
    batch_of b{8};
    std::vector<std::shared_ptr<device_backend>> backends{
        std::shared_ptr<device_backend>{make_cpu_backend(m)},
        std::make_shared<failing_backend>(m, failing_backend::at::hang)};
    auto wait = std::chrono::seconds{30};
    auto team = device_team::assemble(sys, cpus(2), std::move(backends),
                                      make_cpu_group(2, wait), wait, "test");
    float loss = 0;
    watched_work w{"worker 0: step 3"};
    team->step(m, b.x.data(), b.y.data(), 8, &loss);
  });
  BOOST_TEST_MESSAGE(r.err);
  BOOST_CHECK_EQUAL(r.code, exit_failed);
  BOOST_CHECK_MESSAGE(
      r.err.find("*** worker 0: step 3 has run for ") != std::string::npos &&
          r.err.find("; under way beside it: ") != std::string::npos &&
          r.err.find("cpu (rank 1): its share of the step for ") !=
              std::string::npos,
      r.err);
  // Rank 0, through its own share, waits for rank 1 in the collective.
  BOOST_CHECK_MESSAGE(r.err.find("cpu (rank 0): a collective, waiting for"
                                 " the other devices for ") !=
                          std::string::npos,
                      r.err);
}

BOOST_AUTO_TEST_CASE(a_device_that_never_comes_fails_the_others_in_time) {
  // Rank 1 cannot attach and makes no collective: rank 0 gives up on it
  // after the group's wait (2 s), and the step names rank 1's own failure
  // rather than rank 0's "did not join".
  node_config cfg;
  caf::actor_system sys{cfg};
  auto err =
      failed_step(sys, 1, failing_backend::at::attach, std::chrono::seconds{2});
  BOOST_REQUIRE(err);
  BOOST_CHECK(err == errc::device_failed);
  auto said = describe(err);
  BOOST_TEST_MESSAGE(said);
  BOOST_CHECK_MESSAGE(said.find("cpu (rank 1)") != std::string::npos &&
                          said.find("attach: an injected failure") !=
                              std::string::npos,
                      said);
}

BOOST_AUTO_TEST_CASE(devices_that_cannot_be_opened_are_one_plain_error) {
  node_config cfg;
  caf::actor_system sys{cfg};
  auto m = fresh_model();
  std::string err;
  // Several devices sum on the node only with sync_device.
  BOOST_CHECK(!device_team::open(sys, cpus(2), false, m, 64, err));
  BOOST_CHECK_MESSAGE(
      err.find("--server.mode=sync_device") != std::string::npos, err);
  // Fewer rows than devices.
  BOOST_CHECK(!device_team::open(sys, cpus(3), true, m, 2, err));
  BOOST_CHECK_MESSAGE(err.find("a batch of 2 rows cannot be shared among 3") !=
                          std::string::npos,
                      err);
  // No machine has a hundredth GPU: the error names it, with the driver's
  // reason (or that troupe was built without CUDA).
  device_name far{device_name::kind_t::cuda, 99};
  BOOST_CHECK(!device_team::open(sys, {far}, false, m, 64, err));
  BOOST_TEST_MESSAGE(err);
  BOOST_CHECK_MESSAGE(err.rfind("--device=cuda:99: cuda:99: ", 0) == 0 &&
                          (err.find("no GPU cuda:99 (") != std::string::npos ||
                           err.find("built without CUDA") != std::string::npos),
                      err);
}

BOOST_AUTO_TEST_CASE(where_a_gpu_is_found_its_step_matches_the_cpus) {
  std::string why;
  int gpus = gpus_found(why);
  if (gpus == 0) {
    BOOST_TEST_MESSAGE("no GPU here (" << why
                                       << "): the GPU step is checked by"
                                          " cuda_kernels_test where one is");
    device_settings auto_cfg;
    BOOST_REQUIRE(!validate(auto_cfg));
    auto ds = resolve_devices(auto_cfg, gpus, true);
    BOOST_CHECK(cpu_alone(ds)); // auto falls back to the CPU
    return;
  }
  node_config cfg;
  caf::actor_system sys{cfg};
  device_name gpu{device_name::kind_t::cuda, 0};
  check_step(sys, {gpu}, false, 64, 1e-5);
  check_step(sys, {gpu}, true, 64, 1e-5); // NCCL as one rank
}

BOOST_AUTO_TEST_SUITE_END()
