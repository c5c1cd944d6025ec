// A model cut into stages and run under each schedule computes what the
// whole model computes: K steps of a pipeline (every schedule, P in
// {2, 3, 4}, M in {1, 4, 8}) give the weights of K ordinary steps on the
// same mini-batches, within 1e-5 relative. The stages run here in one
// thread, in the order a simulation of the schedule starts their work.
#define BOOST_TEST_MODULE pipeline_exactness_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/pipeline/schedule.hpp"
#include "kernels/blas.hpp"
#include "kernels/loss.hpp"
#include "kernels/optimizer.hpp"
#include "kernels/stage.hpp"
#include "kernels/stage_backend.hpp"
#include "messages/errors.hpp"
#include "tests/pipeline/pipeline_reference.hpp"

using namespace troupe;
using namespace troupe::test;

namespace {

/// Weights by name after `steps` steps of a `stages`-stage pipeline of
/// `micros` micro-batches under `s`.
weights pipelined(pipeline_schedule s, uint32_t stages, uint32_t micros,
                  uint32_t steps) {
  auto m = fresh_model();
  auto cut = cut_of(m, stages);
  std::vector<std::unique_ptr<stage_model>> st;
  for (uint32_t i = 0; i < stages; ++i)
    st.push_back(std::make_unique<stage_model>(m, cut[i], cut[i + 1]));
  size_t mb = batch / micros; // rows per micro-batch
  for (uint32_t k = 0; k < steps; ++k) {
    mini_batch b{k};
    for (auto& x : st)
      x->zero_gradients();
    // What goes from stage to stage, by (stage, micro-batch): as messages
    // would carry it, taken when it is made.
    std::map<std::pair<uint32_t, uint32_t>, std::vector<float>> outs, dxs;
    auto run = [&](uint32_t i, const stage_work& w) {
      auto& me = *st[i];
      kernel_status r = kernel_status::ok;
      switch (w.kind) {
      case stage_work::forward: {
        const float* in = i == 0 ? b.x.data() + w.micro * mb * 20
                                 : outs.at({i - 1, w.micro}).data();
        r = me.forward(w.micro, in, mb);
        auto& y = me.output(w.micro);
        outs[{i, w.micro}].assign(y.data(), y.data() + y.size());
        break;
      }
      case stage_work::backward:
      case stage_work::backward_input: {
        std::vector<float> dy;
        if (me.is_last()) { // the loss: its mean over the whole mini-batch
          dy.resize(mb * me.output_size());
          float loss = 0;
          r = softmax_xent_cpu(me.output(w.micro).data(),
                               b.labels.data() + w.micro * mb, mb,
                               me.output_size(), &loss, dy.data());
          for (auto& v : dy)
            v /= float(micros);
        } else {
          dy = dxs.at({i + 1, w.micro});
        }
        if (r == kernel_status::ok)
          r = me.backward_input(w.micro, dy.data(), i > 0);
        if (r == kernel_status::ok && i > 0) {
          auto& g = me.input_grad();
          dxs[{i, w.micro}].assign(g.data(), g.data() + g.size());
        }
        if (r == kernel_status::ok && w.kind == stage_work::backward)
          r = me.backward_weight(w.micro);
        break;
      }
      case stage_work::backward_weight:
        r = me.backward_weight(w.micro);
        break;
      }
      BOOST_REQUIRE_MESSAGE(r == kernel_status::ok,
                            "stage " << i << " " << to_string(w));
    };
    auto sim = simulate(s, stages, micros, {}, run);
    if (!sim)
      BOOST_FAIL(describe(sim.error()));
    for (auto& x : st) {
      BOOST_CHECK_EQUAL(x->held(), 0u);
      sgd_step(x->parameters(), x->gradients());
    }
  }
  std::map<std::string, std::vector<float>> out;
  for (auto& x : st)
    for (auto& p : x->parameters())
      out[p.name].assign(p.data, p.data + p.size);
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(pipeline_exactness_tests)

BOOST_AUTO_TEST_CASE(cuts_split_the_parameters_evenly_into_whole_layers) {
  BOOST_CHECK(
      (cut_layers({10, 10, 10, 10}, 2) == std::vector<size_t>{0, 2, 4}));
  BOOST_CHECK((cut_layers({100, 1, 1, 1}, 2) == std::vector<size_t>{0, 1, 4}));
  BOOST_CHECK((cut_layers({1, 1, 1, 100}, 2) == std::vector<size_t>{0, 3, 4}));
  BOOST_CHECK((cut_layers({5, 5, 5}, 3) == std::vector<size_t>{0, 1, 2, 3}));
  BOOST_CHECK((cut_layers({100, 1, 1}, 3) == std::vector<size_t>{0, 1, 2, 3}));
  BOOST_CHECK(cut_layers({5, 5}, 3).empty());
  BOOST_CHECK(cut_layers({5, 5}, 0).empty());
}

BOOST_AUTO_TEST_CASE(a_stage_refuses_work_out_of_order) {
  auto m = fresh_model();
  stage_model s{m, 0, 2};
  std::vector<float> x(4 * 20, 0.5f), dy(4 * s.output_size(), 0.1f);
  BOOST_CHECK(s.backward_input(0, dy.data(), false) ==
              kernel_status::bad_input);
  BOOST_CHECK(s.forward(0, x.data(), 4) == kernel_status::ok);
  BOOST_CHECK(s.forward(0, x.data(), 4) == kernel_status::bad_input);
  BOOST_CHECK(s.backward_weight(0) == kernel_status::bad_input);
  BOOST_CHECK(s.backward_input(0, dy.data(), false) == kernel_status::ok);
  BOOST_CHECK(s.backward_weight(0) == kernel_status::ok);
  BOOST_CHECK_EQUAL(s.held(), 0u);
}

BOOST_AUTO_TEST_CASE(the_cpu_stage_backend_is_the_stage_model_in_words) {
  auto m = fresh_model();
  stage_model want{m, 0, 2};
  auto got = make_cpu_stage(m, 0, 2);
  BOOST_CHECK_EQUAL(got->describe(), "cpu (" + blas_description() + ")");
  BOOST_CHECK_EQUAL(got->input_size(), want.input_size());
  BOOST_CHECK_EQUAL(got->output_size(), want.output_size());
  BOOST_CHECK_EQUAL(got->is_last(), want.is_last());
  std::vector<float> x(4 * 20, 0.5f), dy(4 * want.output_size(), 0.1f);
  // Out of order: said in words.
  BOOST_CHECK_EQUAL(got->backward_input(0, dy.data(), false).error,
                    "bad input: backward_input: bad_input");
  BOOST_CHECK(got->forward(0, x.data(), 4).ok());
  BOOST_CHECK(want.forward(0, x.data(), 4) == kernel_status::ok);
  BOOST_CHECK(got->output(0).values() == want.output(0).values());
  BOOST_CHECK(got->backward_input(0, dy.data(), true).ok());
  BOOST_CHECK(want.backward_input(0, dy.data(), true) == kernel_status::ok);
  BOOST_CHECK(got->input_grad().values() == want.input_grad().values());
  BOOST_CHECK(got->backward_weight(0).ok());
  BOOST_CHECK(want.backward_weight(0) == kernel_status::ok);
  BOOST_CHECK(got->download_gradients().ok());
  auto a = got->gradients(), b = want.gradients();
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_CHECK(std::vector<float>(a[i].data, a[i].data + a[i].size) ==
                std::vector<float>(b[i].data, b[i].data + b[i].size));
  BOOST_CHECK(got->zero_gradients().ok());
  BOOST_CHECK_EQUAL(got->gradients()[0].data[0], 0.0f);
}

BOOST_AUTO_TEST_CASE(k_pipeline_steps_give_the_weights_of_k_ordinary_steps) {
  constexpr uint32_t steps = 3;
  auto want = ordinary(steps);
  for (auto s : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b,
                 pipeline_schedule::zb_h1})
    for (uint32_t p : {2u, 3u, 4u})
      for (uint32_t m : {1u, 4u, 8u}) {
        auto got = pipelined(s, p, m, steps);
        auto rel = worst_relative(want, got);
        BOOST_CHECK_MESSAGE(rel <= 1e-5, to_string(s) << " P=" << p << " M="
                                                      << m << ": " << rel);
      }
}

BOOST_AUTO_TEST_SUITE_END()
