// The model: spec parsing, forward against reference loops, and backward
// against finite differences.
#define BOOST_TEST_MODULE model_tests
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/loss.hpp"
#include "kernels/model.hpp"
#include "kernels/random.hpp"
#include "tests/kernels/one_blas_thread.hpp"
#include "tests/kernels/random_values.hpp"

using namespace troupe;
using troupe::test::random_values;
namespace tt = boost::test_tools;

namespace {

model make(const std::string& spec) {
  std::string err;
  auto m = model::from_spec(spec, &err);
  BOOST_REQUIRE_MESSAGE(m, err);
  return std::move(*m);
}

/// Reference MLP forward in double from the model's own parameters; the
/// smallest |pre-activation| of any relu goes to *margin if not null.
std::vector<double> reference_logits(model& m, const std::vector<float>& x,
                                     size_t batch, double* margin = nullptr) {
  auto params = m.parameters();
  std::vector<double> act(x.begin(), x.end());
  size_t in = m.input_size();
  for (size_t l = 0; l < m.layer_count(); ++l) {
    const auto& w = params[2 * l];
    const auto& b = params[2 * l + 1];
    size_t out = b.size;
    std::vector<double> next(batch * out);
    for (size_t i = 0; i < batch; ++i)
      for (size_t j = 0; j < out; ++j) {
        double acc = b.data[j];
        for (size_t k = 0; k < in; ++k)
          acc += act[i * in + k] * w.data[k * out + j];
        bool hidden = l + 1 < m.layer_count();
        next[i * out + j] = hidden ? std::max(acc, 0.0) : acc;
        if (hidden && margin)
          *margin = std::min(*margin, std::abs(acc));
      }
    act = std::move(next);
    in = out;
  }
  return act;
}

float loss_of(model& m, const std::vector<float>& x,
              const std::vector<uint8_t>& y) {
  float loss = 0.0f;
  m.forward(x.data(), y.size());
  softmax_xent_cpu(m.logits().data(), y.data(), y.size(), m.output_size(),
                   &loss, nullptr);
  return loss;
}

} // namespace

BOOST_AUTO_TEST_SUITE(model_tests)

BOOST_AUTO_TEST_CASE(a_spec_builds_its_layers_and_named_parameters) {
  auto m = make("mlp:784-256-128-10");
  BOOST_TEST(m.spec() == "mlp:784-256-128-10");
  BOOST_TEST(m.layer_count() == 3u);
  BOOST_TEST(m.input_size() == 784u);
  BOOST_TEST(m.output_size() == 10u);
  auto params = m.parameters();
  auto grads = m.gradients();
  std::vector<std::string> names{"dense0.w", "dense0.b", "dense1.w",
                                 "dense1.b", "dense2.w", "dense2.b"};
  std::vector<size_t> sizes{784 * 256, 256, 256 * 128, 128, 128 * 10, 10};
  BOOST_REQUIRE_EQUAL(params.size(), names.size());
  BOOST_REQUIRE_EQUAL(grads.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    BOOST_TEST(params[i].name == names[i]);
    BOOST_TEST(params[i].size == sizes[i]);
    BOOST_TEST(grads[i].name == names[i]);
    BOOST_TEST(grads[i].size == sizes[i]);
    BOOST_TEST(params[i].data != grads[i].data);
  }
}

BOOST_AUTO_TEST_CASE(bad_specs_are_rejected_with_a_clear_message) {
  std::vector<std::pair<std::string, std::string>> cases{
      {"", "no model kind"},
      {"784-10", "no model kind"},
      {"cnn:784-10", "unknown model kind 'cnn'"},
      {"mlp:784", "at least two sizes"},
      {"mlp:", "size '' is not"},
      {"mlp:784--10", "size '' is not"},
      {"mlp:784-10-", "size '' is not"},
      {"mlp:0-10", "size '0' is not"},
      {"mlp:784-ten", "size 'ten' is not"},
      {"mlp:784-+10", "size '+10' is not"},
      {"mlp:99999999-10", "size '99999999' is not"},
      {"mlp:16777216-16777216", "more than 2^30 parameters"},
  };
  for (auto& [spec, reason] : cases) {
    std::string err;
    BOOST_TEST_CONTEXT("spec '" << spec << "'") {
      BOOST_TEST(!model::from_spec(spec, &err));
      BOOST_TEST(err.find("bad model spec '" + spec + "'") == 0u);
      BOOST_TEST(err.find(reason) != std::string::npos, err);
      BOOST_TEST(err.find("e.g. mlp:784-256-128-10") != std::string::npos);
      BOOST_TEST(err.find('\n') == std::string::npos);
    }
  }
  BOOST_TEST(!model::from_spec("mlp:1", nullptr)); // no error wanted
}

BOOST_AUTO_TEST_CASE(init_is_deterministic_and_zeroes_the_biases) {
  auto a = make("mlp:20-16-4"), b = make("mlp:20-16-4"),
       c = make("mlp:20-16-4");
  a.init_parameters(5);
  b.init_parameters(5);
  c.init_parameters(6);
  auto pa = a.parameters(), pb = b.parameters(), pc = c.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    std::vector<float> va(pa[i].data, pa[i].data + pa[i].size);
    std::vector<float> vb(pb[i].data, pb[i].data + pb[i].size);
    std::vector<float> vc(pc[i].data, pc[i].data + pc[i].size);
    BOOST_TEST(va == vb, boost::test_tools::per_element());
    bool is_bias = pa[i].name.back() == 'b';
    BOOST_TEST((va == vc) == is_bias);
    if (is_bias)
      BOOST_TEST(
          std::all_of(va.begin(), va.end(), [](float v) { return v == 0.0f; }));
  }
  // Layers get distinct seeds: dense0.w and dense1.w do not start alike.
  BOOST_TEST(pa[0].data[0] != pa[2].data[0]);
}

BOOST_AUTO_TEST_CASE(forward_matches_a_reference_mlp) {
  auto m = make("mlp:30-17-9-5");
  m.init_parameters(11);
  for (auto& p : m.parameters()) // non-zero biases, to test them too
    if (p.name.back() == 'b')
      std::fill(p.data, p.data + p.size, 0.05f);
  size_t batch = 6;
  auto x = random_values(batch * 30, 3);
  BOOST_REQUIRE(m.forward(x.data(), batch) == kernel_status::ok);
  BOOST_TEST(m.logits().shape() == (std::vector<size_t>{batch, 5}));
  auto want = reference_logits(m, x, batch);
  for (size_t i = 0; i < want.size(); ++i)
    BOOST_TEST(m.logits()[i] == want[i], boost::test_tools::tolerance(1e-4));
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences) {
  // Small net with two relus; central differences in float with h = 1e-2.
  auto m = make("mlp:6-5-4-3");
  m.init_parameters(14); // a seed whose relus all sit > 0.09 from 0
  auto x = random_values(4 * 6, 9);
  std::vector<uint8_t> y{0, 2, 1, 2};
  const float h = 1e-2f;
  // A step of h moves a pre-activation by at most ~h here; one closer than
  // that to a relu kink would make the difference quotient meaningless.
  double margin = 1.0;
  reference_logits(m, x, 4, &margin);
  BOOST_REQUIRE_MESSAGE(margin > 3 * h, "relu margin " << margin);
  float loss = 0.0f;
  BOOST_REQUIRE(m.compute_gradients(x.data(), y.data(), 4, &loss) ==
                kernel_status::ok);
  BOOST_TEST(loss == loss_of(m, x, y));
  auto params = m.parameters();
  auto grads = m.gradients();
  std::vector<std::vector<float>> analytic;
  for (auto& g : grads)
    analytic.emplace_back(g.data, g.data + g.size);
  double worst = 0.0;
  for (size_t a = 0; a < params.size(); ++a)
    for (size_t i = 0; i < params[a].size; ++i) {
      float saved = params[a].data[i];
      params[a].data[i] = saved + h;
      float up = loss_of(m, x, y);
      params[a].data[i] = saved - h;
      float down = loss_of(m, x, y);
      params[a].data[i] = saved;
      double numeric = (double(up) - double(down)) / (2.0 * h);
      double exact = analytic[a][i];
      double rel = std::abs(numeric - exact) /
                   std::max({std::abs(numeric), std::abs(exact), 1e-3});
      worst = std::max(worst, rel);
      BOOST_TEST(rel < 1e-2, params[a].name << "[" << i << "]: numeric "
                                            << numeric << ", backward "
                                            << exact);
    }
  BOOST_TEST_MESSAGE("worst relative gradient error " << worst);
}

BOOST_AUTO_TEST_CASE(row_blocks_compute_what_the_whole_layers_do) {
  auto whole = make("mlp:30-8-5");
  whole.init_parameters(3);
  auto blocked = make("mlp:30-8-5");
  blocked.set_row_blocks(100); // 240 weights -> 3 blocks of 10 rows; 40 stay
  blocked.init_parameters(3);  // same values as the whole matrix's
  std::vector<std::string> names;
  for (auto& p : blocked.parameters())
    names.push_back(p.name);
  BOOST_TEST(names == (std::vector<std::string>{"dense0.w.0", "dense0.w.1",
                                                "dense0.w.2", "dense0.b",
                                                "dense1.w", "dense1.b"}),
             tt::per_element());
  BOOST_TEST(blocked.is_row_block(1));
  BOOST_TEST(!blocked.is_row_block(3)); // a bias
  BOOST_TEST(!blocked.is_row_block(4)); // a layer of one block
  BOOST_TEST(!blocked.is_row_block(6)); // no such array
  // backward names each array once, in gradient_order(), as it finishes.
  auto x = random_values(4 * 30, 5);
  std::vector<uint8_t> y{0, 4, 1, 3};
  std::vector<size_t> heard;
  float loss_whole = 0, loss_blocked = 0;
  BOOST_REQUIRE(whole.compute_gradients(x.data(), y.data(), 4, &loss_whole) ==
                kernel_status::ok);
  BOOST_REQUIRE(blocked.compute_gradients(x.data(), y.data(), 4, &loss_blocked,
                                          [&heard](size_t i) {
                                            heard.push_back(i);
                                          }) == kernel_status::ok);
  BOOST_TEST(heard == (std::vector<size_t>{5, 4, 3, 0, 1, 2}),
             tt::per_element());
  BOOST_TEST(heard == blocked.gradient_order(), tt::per_element());
  BOOST_TEST(loss_blocked == loss_whole, tt::tolerance(1e-5f));
  // The blocks, end to end, are the whole layer's arrays.
  auto flat = [](std::vector<param_ref> refs) {
    std::vector<std::vector<float>> out(2);
    for (auto& r : refs) { // dense0.* first, then dense1.*
      auto& dst = out[r.name.rfind("dense1", 0) == 0];
      dst.insert(dst.end(), r.data, r.data + r.size);
    }
    return out;
  };
  for (auto which : {&model::parameters, &model::gradients}) {
    auto a = flat((whole.*which)()), b = flat((blocked.*which)());
    for (size_t l = 0; l < 2; ++l) {
      BOOST_REQUIRE_EQUAL(a[l].size(), b[l].size());
      for (size_t i = 0; i < a[l].size(); ++i) // float rounding apart
        BOOST_TEST(std::abs(b[l][i] - a[l][i]) <=
                       1e-5f * std::abs(a[l][i]) + 1e-7f,
                   b[l][i] << " vs " << a[l][i]);
    }
  }
  // Splitting keeps the values: back to one block, and into others.
  auto before = flat(blocked.parameters());
  blocked.set_row_blocks(0);
  BOOST_TEST(blocked.parameters().size() == 4u);
  blocked.set_row_blocks(64); // 4 blocks of 30 rows: 8, 7, 8, 7
  BOOST_TEST(blocked.parameters().size() == 7u);
  auto after = flat(blocked.parameters());
  BOOST_TEST(after[0] == before[0], tt::per_element());
  BOOST_TEST(after[1] == before[1], tt::per_element());
}

BOOST_AUTO_TEST_CASE(a_forward_in_parts_is_the_forward_bit_for_bit) {
  auto m = make("mlp:30-8-5");
  m.set_row_blocks(100); // the first layer in 3 row blocks
  m.init_parameters(4);
  auto x = random_values(6 * 30, 8);
  BOOST_REQUIRE(m.forward(x.data(), 6) == kernel_status::ok);
  auto whole = m.logits().values();
  for (size_t early = 0; early <= 3; ++early) {
    BOOST_TEST_CONTEXT(early << " blocks added before forward_end") {
      BOOST_REQUIRE(m.forward_begin(x.data(), 6) == kernel_status::ok);
      for (size_t k = 0; k < early; ++k)
        BOOST_REQUIRE(m.forward_next() == kernel_status::ok);
      BOOST_TEST(m.forward_blocks_added() == early);
      if (early == 3) // no block left
        BOOST_TEST((m.forward_next() == kernel_status::bad_input));
      BOOST_REQUIRE(m.forward_end() == kernel_status::ok);
      BOOST_TEST(m.logits().values() == whole, tt::per_element());
    }
  }
  // Nothing begun: nothing to add to or end.
  BOOST_TEST((m.forward_next() == kernel_status::bad_input));
  BOOST_TEST((m.forward_end() == kernel_status::bad_input));
  // finish_gradients after a forward begun is compute_gradients.
  std::vector<uint8_t> y{0, 1, 2, 3, 4, 0};
  float a = 0, b = 0;
  BOOST_REQUIRE(m.compute_gradients(x.data(), y.data(), 6, &a) ==
                kernel_status::ok);
  std::vector<std::vector<float>> want;
  for (auto& g : m.gradients())
    want.emplace_back(g.data, g.data + g.size);
  BOOST_REQUIRE(m.forward_begin(x.data(), 6) == kernel_status::ok);
  BOOST_REQUIRE(m.forward_next() == kernel_status::ok);
  BOOST_REQUIRE(m.finish_gradients(y.data(), &b) == kernel_status::ok);
  BOOST_TEST(a == b);
  auto gs = m.gradients();
  for (size_t i = 0; i < gs.size(); ++i)
    BOOST_TEST(std::vector<float>(gs[i].data, gs[i].data + gs[i].size) ==
                   want[i],
               tt::per_element());
}

BOOST_AUTO_TEST_CASE(misuse_is_reported_not_crashed_on) {
  auto m = make("mlp:4-3-2");
  std::vector<float> x(8, 0.5f), dlogits(4, 0.1f);
  BOOST_CHECK(m.backward(dlogits.data()) == kernel_status::bad_input);
  BOOST_CHECK(m.forward(nullptr, 2) == kernel_status::bad_input);
  BOOST_CHECK(m.forward(x.data(), 0) == kernel_status::bad_input);
  std::vector<uint8_t> bad_labels{0, 2}; // 2 classes: labels 0 and 1 only
  float loss = 0.0f;
  BOOST_CHECK(m.compute_gradients(x.data(), bad_labels.data(), 2, &loss) ==
              kernel_status::bad_input);
}

BOOST_AUTO_TEST_CASE(swapped_storage_becomes_the_parameters_and_gradients) {
  auto m = make("mlp:4-3-2");
  m.init_parameters(3);
  std::vector<float> x(8, 0.5f);
  std::vector<uint8_t> labels{0, 1};
  float loss = 0.0f;
  BOOST_REQUIRE(m.compute_gradients(x.data(), labels.data(), 2, &loss) ==
                kernel_status::ok);
  auto before = m.parameters()[0];
  std::vector<float> old(before.data, before.data + before.size);
  std::vector<float> w(12, 0.25f);
  auto* storage = w.data();
  BOOST_REQUIRE(m.swap_parameter(0, w));
  BOOST_CHECK(m.parameters()[0].data == storage); // no copy: the same memory
  BOOST_TEST(w == old, tt::per_element());        // the old values came back
  // Gradients: swapped in storage is overwritten by the next backward.
  auto g = m.gradients()[0];
  std::vector<float> grads(g.data, g.data + g.size), junk(12, 1e30f);
  BOOST_REQUIRE(m.swap_gradient(0, junk));
  BOOST_TEST(junk == grads, tt::per_element());
  std::vector<float> junk2(12, -7.0f);
  auto* slot = junk2.data();
  BOOST_REQUIRE(m.swap_gradient(0, junk2));
  BOOST_REQUIRE(m.compute_gradients(x.data(), labels.data(), 2, &loss) ==
                kernel_status::ok);
  BOOST_CHECK(m.gradients()[0].data == slot);
  BOOST_CHECK(
      std::none_of(slot, slot + 12, [](float v) { return v == -7.0f; }));
}

BOOST_AUTO_TEST_CASE(a_swap_of_the_wrong_size_or_index_changes_nothing) {
  auto m = make("mlp:4-3-2");
  m.init_parameters(3);
  auto p = m.parameters()[1]; // dense0.b: 3 floats
  std::vector<float> wrong(4, 9.0f);
  BOOST_CHECK(!m.swap_parameter(1, wrong));
  BOOST_CHECK(!m.swap_gradient(1, wrong));
  BOOST_CHECK(!m.swap_parameter(4, wrong)); // mlp:4-3-2 has arrays 0..3
  BOOST_CHECK(m.parameters()[1].data == p.data);
  BOOST_TEST(wrong == std::vector<float>(4, 9.0f), tt::per_element());
}

BOOST_AUTO_TEST_SUITE_END()
