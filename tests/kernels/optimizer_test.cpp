// Optimizers against steps computed by hand (the arithmetic is in comments).
#define BOOST_TEST_MODULE optimizer_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "kernels/optimizer.hpp"
#include "tests/kernels/random_values.hpp"

using namespace troupe;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_SUITE(optimizer_tests)

BOOST_AUTO_TEST_CASE(sgd_steps_against_the_gradient) {
  std::vector<float> w{1.0f, -2.0f}, g{0.5f, 0.25f};
  BOOST_REQUIRE(sgd_update_cpu(w.data(), g.data(), 2, sgd_params{0.1f, 0.0f}) ==
                kernel_status::ok);
  BOOST_TEST(w[0] == 0.95f, tt::tolerance(1e-6f));   // 1 - 0.1 * 0.5
  BOOST_TEST(w[1] == -2.025f, tt::tolerance(1e-6f)); // -2 - 0.1 * 0.25
}

BOOST_AUTO_TEST_CASE(sgd_weight_decay_is_l2_added_to_the_gradient) {
  std::vector<float> w{1.0f, -2.0f}, g{0.5f, 0.25f};
  sgd_update_cpu(w.data(), g.data(), 2, sgd_params{0.1f, 0.01f});
  BOOST_TEST(w[0] == 0.949f, tt::tolerance(1e-6f));  // 1 - 0.1 (0.5 + 0.01)
  BOOST_TEST(w[1] == -2.023f, tt::tolerance(1e-6f)); // -2 - 0.1 (0.25 - 0.02)
}

BOOST_AUTO_TEST_CASE(momentum_accumulates_velocity_across_steps) {
  std::vector<float> w{1.0f}, g{0.5f};
  momentum_state st;
  momentum_params p{0.1f, 0.9f, 0.0f};
  BOOST_REQUIRE(momentum_update_cpu(w.data(), g.data(), 1, st, p) ==
                kernel_status::ok);
  BOOST_TEST(st.velocity.size() == 1u);            // sized on first use
  BOOST_TEST(w[0] == 0.95f, tt::tolerance(1e-6f)); // v = 0.5
  momentum_update_cpu(w.data(), g.data(), 1, st, p);
  BOOST_TEST(st.velocity[0] == 0.95f, tt::tolerance(1e-6f)); // 0.45 + 0.5
  BOOST_TEST(w[0] == 0.855f, tt::tolerance(1e-6f));          // 0.95 - 0.095
}

BOOST_AUTO_TEST_CASE(momentum_weight_decay_enters_the_velocity) {
  std::vector<float> w{1.0f}, g{0.5f};
  momentum_state st;
  momentum_update_cpu(w.data(), g.data(), 1, st,
                      momentum_params{0.1f, 0.9f, 0.1f});
  BOOST_TEST(st.velocity[0] == 0.6f, tt::tolerance(1e-6f)); // 0.5 + 0.1 * 1
  BOOST_TEST(w[0] == 0.94f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(nesterov_looks_ahead_along_the_velocity) {
  std::vector<float> w{1.0f}, g{0.5f};
  momentum_state st;
  momentum_params p{0.1f, 0.9f, 0.0f};
  BOOST_REQUIRE(nesterov_update_cpu(w.data(), g.data(), 1, st, p) ==
                kernel_status::ok);
  BOOST_TEST(w[0] == 0.905f, tt::tolerance(1e-6f)); // 1 - 0.1 (0.5 + 0.45)
  nesterov_update_cpu(w.data(), g.data(), 1, st, p);
  // v = 0.45 + 0.5 = 0.95; w = 0.905 - 0.1 (0.5 + 0.855)
  BOOST_TEST(w[0] == 0.7695f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(adam_matches_two_hand_computed_steps) {
  std::vector<float> w{1.0f}, g{0.5f};
  adam_state st;
  adam_params p; // lr 1e-3, betas 0.9 / 0.999, eps 1e-8
  p.lr = 0.1f;
  BOOST_REQUIRE(adam_update_cpu(w.data(), g.data(), 1, st, p) ==
                kernel_status::ok);
  // m = 0.05, v = 0.00025; m_hat = 0.5, v_hat = 0.25; step = 0.5 / 0.5.
  BOOST_TEST(st.step == 1u);
  BOOST_TEST(st.m[0] == 0.05f, tt::tolerance(1e-4f));
  BOOST_TEST(st.v[0] == 0.00025f, tt::tolerance(1e-4f));
  BOOST_TEST(w[0] == 0.9f, tt::tolerance(1e-6f));
  g[0] = -0.25f;
  adam_update_cpu(w.data(), g.data(), 1, st, p);
  // m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225;
  // m_hat = 0.02 / 0.19, v_hat = 0.00031225 / 0.001999;
  // w = 0.9 - 0.1 * 0.105263 / 0.395225 = 0.873366.
  BOOST_TEST(st.step == 2u);
  BOOST_TEST(w[0] == 0.873366f, tt::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(adam_bias_correction_makes_the_first_step_lr_sized) {
  // Uncorrected, the first step would be lr * 0.1 / sqrt(0.001) = 3.16 lr;
  // corrected, it is lr * sign(g) whatever the size of g.
  for (float grad : {1e-4f, 1.0f, -250.0f}) {
    std::vector<float> w{0.0f}, g{grad};
    adam_state st;
    adam_params p;
    p.lr = 0.01f;
    adam_update_cpu(w.data(), g.data(), 1, st, p);
    BOOST_TEST(w[0] == (grad > 0 ? -0.01f : 0.01f), tt::tolerance(1e-3f));
  }
}

BOOST_AUTO_TEST_CASE(adam_weight_decay_is_decoupled_from_the_moments) {
  std::vector<float> w{1.0f}, g{0.5f};
  adam_state st;
  adam_params p;
  p.lr = 0.1f;
  p.weight_decay = 0.1f;
  adam_update_cpu(w.data(), g.data(), 1, st, p);
  // Moments see g alone; w = 1 - 0.1 (1 + 0.1 * 1).
  BOOST_TEST(st.m[0] == 0.05f, tt::tolerance(1e-4f));
  BOOST_TEST(st.v[0] == 0.00025f, tt::tolerance(1e-4f));
  BOOST_TEST(w[0] == 0.89f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(state_of_another_size_is_a_shape_mismatch) {
  std::vector<float> w{1.0f, 2.0f}, g{0.5f, 0.5f};
  momentum_state ms{{0.0f, 0.0f, 0.0f}};
  BOOST_CHECK(
      momentum_update_cpu(w.data(), g.data(), 2, ms, momentum_params{}) ==
      kernel_status::shape_mismatch);
  adam_state as;
  as.v.assign(1, 0.0f);
  BOOST_CHECK(adam_update_cpu(w.data(), g.data(), 2, as, adam_params{}) ==
              kernel_status::shape_mismatch);
  BOOST_TEST(w[0] == 1.0f); // untouched
}

BOOST_AUTO_TEST_CASE(bad_hyper_parameters_are_bad_input_and_change_nothing) {
  std::vector<float> w{1.0f}, g{0.5f};
  momentum_state ms;
  adam_state as;
  adam_params bad_beta;
  bad_beta.beta2 = 1.0f;
  adam_params bad_eps;
  bad_eps.eps = 0.0f;
  BOOST_CHECK(sgd_update_cpu(w.data(), g.data(), 1, sgd_params{-0.1f, 0.0f}) ==
              kernel_status::bad_input);
  BOOST_CHECK(nesterov_update_cpu(w.data(), g.data(), 1, ms,
                                  momentum_params{0.1f, 1.0f, 0.0f}) ==
              kernel_status::bad_input);
  BOOST_CHECK(adam_update_cpu(w.data(), g.data(), 1, as, bad_beta) ==
              kernel_status::bad_input);
  BOOST_CHECK(adam_update_cpu(w.data(), g.data(), 1, as, bad_eps) ==
              kernel_status::bad_input);
  BOOST_CHECK(sgd_update_cpu(nullptr, g.data(), 1, sgd_params{}) ==
              kernel_status::bad_input);
  BOOST_TEST(w[0] == 1.0f);
  BOOST_TEST(as.step == 0u);
  BOOST_TEST(ms.velocity.empty());
}

BOOST_AUTO_TEST_CASE(a_grad_divisor_of_k_steps_along_the_mean_of_a_sum) {
  // A sum of 3 gradients with divisor 3 must step exactly as the mean
  // (computed the same way: each element divided by 3) with divisor 1.
  std::vector<float> sum(37), mean(37);
  for (size_t i = 0; i < sum.size(); ++i) {
    sum[i] = 0.37f * float(i) - 5.0f;
    mean[i] = sum[i] / 3.0f;
  }
  auto w0 = std::vector<float>(37, 0.5f);
  auto a = w0, b = w0;
  sgd_update_cpu(a.data(), sum.data(), a.size(), sgd_params{0.1f, 0.01f, 3});
  sgd_update_cpu(b.data(), mean.data(), b.size(), sgd_params{0.1f, 0.01f});
  BOOST_TEST(a == b, tt::per_element());
  for (bool nesterov : {false, true}) {
    a = b = w0;
    momentum_state sa, sb;
    auto step = nesterov ? nesterov_update_cpu : momentum_update_cpu;
    for (int k = 0; k < 3; ++k) { // the velocity carries across steps
      step(a.data(), sum.data(), a.size(), sa,
           momentum_params{0.1f, 0.9f, 0.01f, 3});
      step(b.data(), mean.data(), b.size(), sb,
           momentum_params{0.1f, 0.9f, 0.01f});
    }
    BOOST_TEST(a == b, tt::per_element());
    BOOST_TEST(sa.velocity == sb.velocity, tt::per_element());
  }
  a = b = w0;
  adam_state ta, tb;
  adam_params pa, pb;
  pa.grad_divisor = 3;
  adam_update_cpu(a.data(), sum.data(), a.size(), ta, pa);
  adam_update_cpu(b.data(), mean.data(), b.size(), tb, pb);
  BOOST_TEST(a == b, tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_grad_divisor_not_above_zero_is_bad_input) {
  std::vector<float> w{1.0f}, g{0.5f};
  momentum_state ms;
  adam_state as;
  adam_params ap;
  ap.grad_divisor = -1.0f;
  BOOST_CHECK(
      sgd_update_cpu(w.data(), g.data(), 1, sgd_params{0.1f, 0.0f, 0.0f}) ==
      kernel_status::bad_input);
  BOOST_CHECK(momentum_update_cpu(w.data(), g.data(), 1, ms,
                                  momentum_params{0.1f, 0.9f, 0.0f, 0.0f}) ==
              kernel_status::bad_input);
  BOOST_CHECK(adam_update_cpu(w.data(), g.data(), 1, as, ap) ==
              kernel_status::bad_input);
  BOOST_TEST(w[0] == 1.0f);
  BOOST_TEST(ms.velocity.empty());
}

// The update loops are also built for AVX2 and picked at load time
// (kernels/wide_loop.hpp). Whichever build this machine runs, each element
// must get exactly the operations of a plain loop, in the same order: a
// fused multiply-add (or any reordering) would change the last bits, and
// a model trained on one machine would not match one trained on another.
BOOST_AUTO_TEST_CASE(updates_match_a_plain_loop_bit_for_bit) {
  const size_t n = 1037; // not a multiple of any vector width
  auto g = test::random_values(n, 11), w0 = test::random_values(n, 12);
  const float lr = 0.05f, mu = 0.9f, wd = 0.01f, d = 3.0f;
  {
    auto w = w0, ref = w0;
    BOOST_REQUIRE(sgd_update_cpu(w.data(), g.data(), n, {lr, wd, d}) ==
                  kernel_status::ok);
    for (size_t i = 0; i < n; ++i)
      ref[i] -= lr * (g[i] / d + wd * ref[i]);
    BOOST_TEST(w == ref, tt::per_element());
  }
  for (bool nesterov : {false, true}) {
    auto w = w0, ref = w0;
    std::vector<float> v(n, 0.0f);
    momentum_state st;
    auto step = nesterov ? nesterov_update_cpu : momentum_update_cpu;
    for (int k = 0; k < 3; ++k) { // velocity carried across steps
      BOOST_REQUIRE(step(w.data(), g.data(), n, st, {lr, mu, wd, d}) ==
                    kernel_status::ok);
      for (size_t i = 0; i < n; ++i) {
        float gi = g[i] / d + wd * ref[i];
        v[i] = mu * v[i] + gi;
        ref[i] -= nesterov ? lr * (gi + mu * v[i]) : lr * v[i];
      }
    }
    BOOST_TEST(w == ref, tt::per_element());
    BOOST_TEST(st.velocity == v, tt::per_element());
  }
  {
    auto w = w0, ref = w0;
    std::vector<float> m(n, 0.0f), v(n, 0.0f);
    adam_state st;
    adam_params p;
    p.lr = lr;
    p.weight_decay = wd;
    p.grad_divisor = d;
    for (int k = 1; k <= 3; ++k) {
      BOOST_REQUIRE(adam_update_cpu(w.data(), g.data(), n, st, p) ==
                    kernel_status::ok);
      auto c1 = float(1.0 / (1.0 - std::pow(double(p.beta1), double(k))));
      auto c2 = float(1.0 / (1.0 - std::pow(double(p.beta2), double(k))));
      for (size_t i = 0; i < n; ++i) {
        float gi = g[i] / d;
        m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * gi;
        v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * gi * gi;
        float a = m[i] * c1 / (std::sqrt(v[i] * c2) + p.eps);
        ref[i] -= lr * (a + wd * ref[i]);
      }
    }
    BOOST_TEST(w == ref, tt::per_element());
    BOOST_TEST(st.m == m, tt::per_element());
    BOOST_TEST(st.v == v, tt::per_element());
  }
}

// A shard server steps out of place from its undo image, with the two
// pushes of a round added per element: the bits must be those of the
// in-place update of their sum, which the backup's replica runs.
BOOST_AUTO_TEST_CASE(
    steps_out_of_place_match_the_in_place_updates_bit_for_bit) {
  const size_t n = 1037;
  auto g0 = test::random_values(n, 21), g1 = test::random_values(n, 22);
  auto w0 = test::random_values(n, 23);
  std::vector<float> sum(n);
  for (size_t i = 0; i < n; ++i)
    sum[i] = g0[i] + g1[i];
  const float lr = 0.05f, mu = 0.9f, wd = 0.01f, d = 2.0f;
  for (bool two : {false, true}) {
    const float* g = two ? sum.data() : g0.data();
    std::vector<float> out(n, -7.0f);
    step_arrays a{w0.data(), out.data(), g0.data(), two ? g1.data() : nullptr,
                  n};
    {
      auto w = w0;
      BOOST_REQUIRE(sgd_update_cpu(w.data(), g, n, {lr, wd, d}) ==
                    kernel_status::ok);
      BOOST_REQUIRE(sgd_step_from(a, {lr, wd, d}) == kernel_status::ok);
      BOOST_TEST(out == w, tt::per_element());
    }
    for (bool nesterov : {false, true}) {
      auto w = w0;
      momentum_state st;
      st.velocity = test::random_values(n, 24);
      auto v_in = st.velocity;
      std::vector<float> v_out(n, -7.0f);
      auto step = nesterov ? nesterov_update_cpu : momentum_update_cpu;
      BOOST_REQUIRE(step(w.data(), g, n, st, {lr, mu, wd, d}) ==
                    kernel_status::ok);
      BOOST_REQUIRE(momentum_step_from(a, v_in.data(), v_out.data(),
                                       {lr, mu, wd, d},
                                       nesterov) == kernel_status::ok);
      BOOST_TEST(out == w, tt::per_element());
      BOOST_TEST(v_out == st.velocity, tt::per_element());
    }
    {
      auto w = w0;
      adam_state st;
      st.m = test::random_values(n, 25);
      st.v = test::random_values(n, 26);
      for (auto& x : st.v)
        x = x * x; // a second moment is not negative
      st.step = 4;
      auto m_in = st.m, v_in = st.v;
      std::vector<float> m_out(n), v_out(n);
      adam_params p;
      p.lr = lr;
      p.weight_decay = wd;
      p.grad_divisor = d;
      BOOST_REQUIRE(adam_update_cpu(w.data(), g, n, st, p) ==
                    kernel_status::ok);
      BOOST_REQUIRE(adam_step_from(a, m_in.data(), m_out.data(), v_in.data(),
                                   v_out.data(), 5, p) == kernel_status::ok);
      BOOST_TEST(out == w, tt::per_element());
      BOOST_TEST(m_out == st.m, tt::per_element());
      BOOST_TEST(v_out == st.v, tt::per_element());
    }
  }
  std::vector<float> out(n);
  BOOST_CHECK(sgd_step_from({w0.data(), out.data(), nullptr, nullptr, n},
                            {lr, wd, d}) == kernel_status::bad_input);
  BOOST_CHECK(adam_step_from({w0.data(), out.data(), g0.data(), nullptr, n},
                             g0.data(), out.data(), g0.data(), out.data(), 0,
                             adam_params{}) == kernel_status::bad_input);
}

BOOST_AUTO_TEST_SUITE_END()
