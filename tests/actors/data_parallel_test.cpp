// Data-parallel equivalence: sync training with W workers through the kv
// store (the optimizer on the server) gives the weights of one process
// training on the same global batches.
#define BOOST_TEST_MODULE data_parallel_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstring>

#include "actors/server_optimizer.hpp"
#include "kernels/blas.hpp"
#include "kernels/idx.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "messages/errors.hpp"
#include "tests/actors/local_cluster.hpp"

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
    auto ps = ref.parameters();
    auto gs = ref.gradients();
    for (size_t i = 0; i < ps.size(); ++i)
      sgd_update_cpu(ps[i].data, gs[i].data, ps[i].size, sgd_params{lr, 0});
  }
  // The cluster: worker w trains on part w of each global batch.
  optimizer_settings opt;
  opt.name = "sgd";
  opt.lr = lr;
  cluster c{"sync", 2, workers, 16u << 20, make_update_fn(opt), 4096};
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
  auto want = arrays_of(ref.parameters());
  for (size_t i = 0; i < want.size(); ++i) {
    double diff = 0, norm = 0;
    for (size_t j = 0; j < want[i].values.size(); ++j) {
      double d = (*final_weights)[i].values[j] - want[i].values[j];
      diff += d * d;
      norm += double(want[i].values[j]) * want[i].values[j];
    }
    auto rel = std::sqrt(diff / norm);
    BOOST_TEST_MESSAGE("array " << i + 1 << ": relative difference " << rel);
    BOOST_CHECK_LE(rel, 1e-5);
  }
}

BOOST_AUTO_TEST_SUITE_END()
