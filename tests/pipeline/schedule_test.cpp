// Pipeline schedules as plain functions (actors/pipeline/schedule.hpp):
// every plan runs each micro-batch once and in order, gpipe and 1f1b have
// the bubble of theory, 1f1b and zb-h1 hold at most P micro-batches, and
// zb-h1's bubble is at most half of 1f1b's.
#define BOOST_TEST_MODULE schedule_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "actors/pipeline/schedule.hpp"
#include "messages/errors.hpp"

using namespace troupe;

namespace {

const pipeline_schedule all[] = {pipeline_schedule::gpipe,
                                 pipeline_schedule::one_f_one_b,
                                 pipeline_schedule::zb_h1};

std::string plan_text(const std::vector<stage_work>& plan) {
  std::string out;
  for (auto& x : plan)
    out += to_string(x) + " ";
  return out;
}

pipeline_run run(pipeline_schedule s, uint32_t stages, uint32_t micros) {
  auto r = simulate(s, stages, micros);
  if (!r)
    BOOST_FAIL(to_string(s) << " P=" << stages << " M=" << micros << ": "
                            << describe(r.error()));
  return *r;
}

} // namespace

BOOST_AUTO_TEST_SUITE(schedule_tests)

BOOST_AUTO_TEST_CASE(names_parse_and_a_bad_one_names_the_choices) {
  for (auto s : all)
    BOOST_CHECK(*parse_schedule(to_string(s)) == s);
  auto bad = parse_schedule("1F1B");
  BOOST_REQUIRE(!bad);
  BOOST_CHECK(bad.error() == errc::invalid_config);
  BOOST_CHECK(describe(bad.error()).find("gpipe, 1f1b or zb-h1") !=
              std::string::npos);
}

BOOST_AUTO_TEST_CASE(plans_read_as_the_papers_draw_them) {
  // P = 4, M = 8: stage 1 of 1f1b warms up with 2 forwards.
  BOOST_CHECK_EQUAL(
      plan_text(stage_plan(pipeline_schedule::one_f_one_b, 1, 4, 8)),
      "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7 ");
  BOOST_CHECK_EQUAL(plan_text(stage_plan(pipeline_schedule::gpipe, 0, 2, 3)),
                    "F0 F1 F2 B0 B1 B2 ");
  // zb-h1's last stage of 2 runs each W one backward late.
  BOOST_CHECK_EQUAL(plan_text(stage_plan(pipeline_schedule::zb_h1, 1, 2, 3)),
                    "F0 b0 F1 b1 w0 F2 b2 w1 w2 ");
}

BOOST_AUTO_TEST_CASE(every_plan_runs_each_micro_batch_once_in_order) {
  for (auto s : all)
    for (uint32_t p = 1; p <= 6; ++p)
      for (uint32_t m = 1; m <= 16; ++m)
        for (uint32_t stage = 0; stage < p; ++stage) {
          auto plan = stage_plan(s, stage, p, m);
          auto err = check_plan(plan, m);
          BOOST_CHECK_MESSAGE(!err, to_string(s)
                                        << " P=" << p << " M=" << m << " stage "
                                        << stage << ": " << describe(err));
        }
}

BOOST_AUTO_TEST_CASE(a_broken_plan_is_named) {
  using w = stage_work;
  BOOST_CHECK(check_plan({{w::backward, 0}, {w::forward, 0}}, 1));
  BOOST_CHECK(check_plan({{w::forward, 0}}, 1));
  BOOST_CHECK(check_plan({{w::forward, 0}, {w::backward_weight, 0}}, 1));
  BOOST_CHECK(check_plan({{w::forward, 1}, {w::backward, 1}}, 1));
  BOOST_CHECK(!check_plan({{w::forward, 0}, {w::backward, 0}}, 1));
}

BOOST_AUTO_TEST_CASE(gpipe_and_1f1b_have_the_bubble_of_theory) {
  for (auto s : {pipeline_schedule::gpipe, pipeline_schedule::one_f_one_b})
    for (uint32_t p : {1u, 2u, 3u, 4u, 8u})
      for (uint32_t m : {1u, 2u, 4u, 8u, 16u}) {
        auto r = run(s, p, m);
        BOOST_CHECK_MESSAGE(std::abs(r.bubble - theory_bubble(p, m)) < 1e-9,
                            to_string(s)
                                << " P=" << p << " M=" << m << ": " << r.bubble
                                << " against " << theory_bubble(p, m));
      }
}

BOOST_AUTO_TEST_CASE(activations_held_stay_within_p_for_1f1b_and_zb_h1) {
  for (uint32_t p : {2u, 3u, 4u})
    for (uint32_t m : {1u, 4u, 8u, 16u, 64u}) {
      auto gpipe = run(pipeline_schedule::gpipe, p, m);
      auto f1b1 = run(pipeline_schedule::one_f_one_b, p, m);
      auto zb = run(pipeline_schedule::zb_h1, p, m);
      for (uint32_t s = 0; s < p; ++s) {
        BOOST_CHECK_EQUAL(gpipe.peak_held[s], m);
        BOOST_CHECK_EQUAL(f1b1.peak_held[s], std::min(p - s, m));
        BOOST_CHECK_LE(zb.peak_held[s], std::min(p, m));
      }
    }
}

BOOST_AUTO_TEST_CASE(zb_h1_has_at_most_half_the_bubble_of_1f1b) {
  // Where the W's have a bubble to fill: M >= P.
  for (uint32_t p : {2u, 3u, 4u, 8u})
    for (uint32_t m : {1u, 2u, 4u, 8u, 16u, 32u}) {
      if (m < p)
        continue;
      auto f1b1 = run(pipeline_schedule::one_f_one_b, p, m);
      auto zb = run(pipeline_schedule::zb_h1, p, m);
      BOOST_TEST_MESSAGE("P=" << p << " M=" << m << ": 1f1b " << f1b1.bubble
                              << ", zb-h1 " << zb.bubble);
      BOOST_CHECK_LE(zb.bubble, f1b1.bubble / 2 + 1e-12);
    }
}

BOOST_AUTO_TEST_SUITE_END()
