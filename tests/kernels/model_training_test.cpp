// End to end on the CPU: a tiny MLP trained with momentum SGD on a subset of
// the real Fashion-MNIST beats chance (0.1) by far on held-out images.
#define BOOST_TEST_MODULE training_tests
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <vector>

#include "kernels/idx.hpp"
#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/partition.hpp"
#include "tests/kernels/one_blas_thread.hpp"

using namespace troupe;

namespace {

constexpr size_t train_samples = 6000;
constexpr size_t test_samples = 1000;
constexpr size_t batch = 32;
constexpr size_t steps = 400;

/// Copies the rows `idx[first, first + batch)` of `ds` into x and y.
void gather(const dataset& ds, const std::vector<size_t>& idx, size_t first,
            std::vector<float>& x, std::vector<uint8_t>& y) {
  size_t cols = ds.images.cols();
  x.resize(batch * cols);
  y.resize(batch);
  for (size_t i = 0; i < batch; ++i) {
    size_t row = idx[first + i];
    std::copy(ds.images.data() + row * cols,
              ds.images.data() + (row + 1) * cols, x.data() + i * cols);
    y[i] = ds.labels[row];
  }
}

/// One momentum step on every parameter array.
void apply(model& m, std::vector<momentum_state>& states) {
  auto params = m.parameters();
  auto grads = m.gradients();
  momentum_params p{0.05f, 0.9f, 1e-4f};
  for (size_t a = 0; a < params.size(); ++a)
    BOOST_REQUIRE(momentum_update_cpu(params[a].data, grads[a].data,
                                      params[a].size, states[a],
                                      p) == kernel_status::ok);
}

} // namespace

BOOST_AUTO_TEST_SUITE(training_tests)

BOOST_AUTO_TEST_CASE(a_small_mlp_learns_fashion_mnist_well_above_chance) {
  dataset train, test;
  auto err = load_fashion_mnist(fashion_mnist_dir, "train", train);
  BOOST_REQUIRE_MESSAGE(err.empty(), err);
  err = load_fashion_mnist(fashion_mnist_dir, "t10k", test);
  BOOST_REQUIRE_MESSAGE(err.empty(), err);
  auto m = *model::from_spec("mlp:784-64-10", nullptr);
  m.init_parameters(1);
  std::vector<momentum_state> states(m.parameters().size());
  std::vector<float> x, losses;
  std::vector<uint8_t> y;
  std::vector<size_t> order;
  size_t per_epoch = train_samples / batch;
  for (size_t step = 0; step < steps; ++step) {
    if (step % per_epoch == 0)
      epoch_partition(train_samples, step / per_epoch, 7, 0, 1, order);
    gather(train, order, (step % per_epoch) * batch, x, y);
    float loss = 0.0f;
    BOOST_REQUIRE(m.compute_gradients(x.data(), y.data(), batch, &loss) ==
                  kernel_status::ok);
    losses.push_back(loss);
    apply(m, states);
  }
  BOOST_REQUIRE(m.forward(test.images.data(), test_samples) ==
                kernel_status::ok);
  size_t correct = 0;
  accuracy_count_cpu(m.logits().data(), test.labels.data(), test_samples, 10,
                     &correct);
  double accuracy = double(correct) / test_samples;
  BOOST_TEST_MESSAGE("test accuracy " << accuracy << ", first loss "
                                      << losses.front() << ", last loss "
                                      << losses.back());
  BOOST_TEST(accuracy > 0.7);
  BOOST_TEST(losses.back() < 0.5f * losses.front());
}

BOOST_AUTO_TEST_SUITE_END()
