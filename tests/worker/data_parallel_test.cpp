// Data-parallel equivalence: sync training with W workers through the kv
// store (the optimizer on the server) gives the weights of one process
// training on the same global batches.
#define BOOST_TEST_MODULE data_parallel_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>

#include "actors/node/node_config.hpp"
#include "actors/server/server_optimizer.hpp"
#include "actors/worker/trainer.hpp"
#include "actors/worker/worker.hpp"
#include "kernels/blas.hpp"
#include "kernels/idx.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/partition.hpp"
#include "messages/errors.hpp"
#include "tests/local_cluster.hpp"

using namespace troupe;
using troupe::test::cluster;

namespace {

constexpr size_t workers = 2, batch = 32, steps = 6;
constexpr float lr = 0.1f;

model fresh_model() {
  auto m = model::from_spec("mlp:784-32-10", nullptr);
  BOOST_REQUIRE(m);
  m->init_parameters(7);
  return std::move(*m);
}

std::vector<named_array> arrays_of(const std::vector<param_ref>& ps) {
  std::vector<named_array> out;
  for (size_t i = 0; i < ps.size(); ++i)
    out.push_back(
        {i + 1, std::vector<float>(ps[i].data, ps[i].data + ps[i].size)});
  return out;
}

void load(model& m, const std::vector<named_array>& xs) {
  auto ps = m.parameters();
  for (size_t i = 0; i < ps.size(); ++i)
    std::memcpy(ps[i].data, xs[i].values.data(), ps[i].size * sizeof(float));
}

/// One SGD step of `m` on its gradients.
void sgd_step(model& m) {
  auto ps = m.parameters();
  auto gs = m.gradients();
  for (size_t i = 0; i < ps.size(); ++i)
    sgd_update_cpu(ps[i].data, gs[i].data, ps[i].size, sgd_params{lr, 0});
}

/// A sync cluster of 2 servers and the workers whose servers take SGD
/// steps with lr.
std::unique_ptr<cluster> sgd_cluster() {
  optimizer_settings opt;
  opt.name = "sgd";
  opt.lr = lr;
  return std::make_unique<cluster>("sync", 2, workers, 16u << 20,
                                   make_update_fn(opt), 4096);
}

/// Each array of `got` within 1e-5 (relative, whole array) of `want`'s.
void expect_close(const std::vector<named_array>& got,
                  const std::vector<named_array>& want) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    double diff = 0, norm = 0;
    for (size_t j = 0; j < want[i].values.size(); ++j) {
      double d = got[i].values[j] - want[i].values[j];
      diff += d * d;
      norm += double(want[i].values[j]) * want[i].values[j];
    }
    auto rel = std::sqrt(diff / norm);
    BOOST_TEST_MESSAGE("array " << i + 1 << ": relative difference " << rel);
    BOOST_CHECK_LE(rel, 1e-5);
  }
}

/// Gradients of `m` on samples [first, first + n) of `d`.
void gradients(model& m, const dataset& d, size_t first, size_t n) {
  float loss = 0;
  BOOST_REQUIRE(m.compute_gradients(d.images.data() + first * 784,
                                    d.labels.data() + first, n,
                                    &loss) == kernel_status::ok);
}

} // namespace

BOOST_AUTO_TEST_SUITE(data_parallel_tests)

BOOST_AUTO_TEST_CASE(sync_training_equals_one_process_on_the_global_batch) {
  set_blas_threads(1);
  dataset train;
  auto err = load_fashion_mnist(fashion_mnist_dir, "train", train);
  BOOST_REQUIRE_MESSAGE(err.empty(), err);
  // One process: SGD on global batches of workers * batch samples.
  auto ref = fresh_model();
  for (size_t k = 0; k < steps; ++k) {
    gradients(ref, train, k * workers * batch, workers * batch);
    sgd_step(ref);
  }
  // The cluster: worker w trains on part w of each global batch.
  auto cp = sgd_cluster();
  auto& c = *cp;
  std::vector<model> replicas{fresh_model(), fresh_model()};
  std::vector<uint64_t> keys;
  for (auto& a : arrays_of(replicas[0].parameters()))
    keys.push_back(a.key);
  for (auto& w : c.workers)
    BOOST_REQUIRE(w->init(arrays_of(replicas[0].parameters())));
  for (size_t k = 0; k < steps; ++k)
    for (size_t w = 0; w < workers; ++w) {
      auto& kv = c.worker(static_cast<uint32_t>(w));
      auto weights = kv.pull(k, keys);
      BOOST_REQUIRE(weights);
      load(replicas[w], *weights);
      gradients(replicas[w], train, (k * workers + w) * batch, batch);
      BOOST_REQUIRE(kv.push(k, arrays_of(replicas[w].gradients())));
    }
  auto final_weights = c.worker(0).pull(steps, keys);
  BOOST_REQUIRE(final_weights);
  expect_close(*final_weights, arrays_of(ref.parameters()));
}

BOOST_AUTO_TEST_CASE(
    overlapped_trainers_equal_one_process_on_the_global_batch) {
  // The built-in trainer on two worker actors with --worker.overlap: each
  // block of gradients is its own sync round (clock t * B + b), the next
  // step begins on the first blocks back. Its weights must still be those
  // of one process taking every step whole on the global batch.
  set_blas_threads(1);
  constexpr size_t k_steps = 20, per_worker = 32;
  dataset full;
  auto err = load_fashion_mnist(fashion_mnist_dir, "train", full);
  BOOST_REQUIRE_MESSAGE(err.empty(), err);
  dataset train; // one epoch of k_steps global batches
  size_t n = workers * per_worker * k_steps;
  train.images = tensor({n, 28, 28});
  std::copy(full.images.data(), full.images.data() + n * 784,
            train.images.data());
  train.labels.assign(full.labels.begin(), full.labels.begin() + n);
  node_config cfg;
  cfg.train.model = "mlp:784-32-10";
  cfg.train.batch = per_worker;
  cfg.train.epochs = 1;
  cfg.train.seed = 7;
  cfg.train.block_floats = 8192; // the first layer in 4 row blocks
  cfg.worker.overlap = true;
  auto blocked = [&cfg] {
    auto m = model::from_spec(cfg.train.model, nullptr);
    BOOST_REQUIRE(m);
    m->set_row_blocks(cfg.train.block_floats);
    return std::move(*m);
  };
  // One process: SGD on global batches, worker 0's samples then worker 1's.
  auto ref = blocked();
  ref.init_parameters(cfg.train.seed);
  std::vector<std::vector<size_t>> parts(workers);
  for (uint32_t w = 0; w < workers; ++w)
    BOOST_REQUIRE(epoch_partition(n, 0, cfg.train.seed, w, workers, parts[w]) ==
                  kernel_status::ok);
  std::vector<float> xs(workers * per_worker * 784);
  std::vector<uint8_t> ys(workers * per_worker);
  for (size_t k = 0; k < k_steps; ++k) {
    for (uint32_t w = 0; w < workers; ++w)
      for (size_t i = 0; i < per_worker; ++i) {
        auto s = parts[w][k * per_worker + i], at = w * per_worker + i;
        std::copy(train.images.data() + s * 784,
                  train.images.data() + (s + 1) * 784, xs.data() + at * 784);
        ys[at] = train.labels[s];
      }
    float loss = 0;
    BOOST_REQUIRE(ref.compute_gradients(xs.data(), ys.data(), ys.size(),
                                        &loss) == kernel_status::ok);
    sgd_step(ref);
  }
  // The cluster, two overlapped trainers.
  auto cp = sgd_cluster();
  auto& c = *cp;
  worker_options wopts;
  wopts.overlap = true;
  std::vector<caf::actor> actors;
  size_t blocks = 0;
  for (uint32_t w = 0; w < workers; ++w) {
    auto logic = make_trainer(cfg.trainer(), blocked(), train, train);
    blocks = logic->blocks().size();
    actors.push_back(spawn_worker(c.b, c.workers[w]->handle(), logic, wopts));
    c.self->monitor(actors.back());
  }
  BOOST_TEST_MESSAGE(blocks << " blocks per step");
  BOOST_REQUIRE_GT(blocks, 2u);
  for (size_t i = 0; i < actors.size(); ++i) {
    auto reason = troupe::test::await_down(c.self, std::chrono::seconds{60});
    BOOST_REQUIRE_MESSAGE(reason, "a trainer did not finish in 60 s");
    BOOST_REQUIRE_MESSAGE(troupe::test::normal_exit(*reason),
                          "worker failed: " << describe(*reason));
  }
  auto want = arrays_of(ref.parameters());
  std::vector<uint64_t> keys;
  for (auto& a : want)
    keys.push_back(a.key);
  auto got = c.worker(0).pull(k_steps * blocks, keys);
  BOOST_REQUIRE(got);
  expect_close(*got, want);
}

BOOST_AUTO_TEST_SUITE_END()
