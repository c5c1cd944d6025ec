// The optimizer hooks of shard servers: averaging, per-slice state, checks.
#define BOOST_TEST_MODULE server_optimizer_tests
#include <boost/test/unit_test.hpp>

#include "actors/server/optimizer_settings.hpp"
#include "actors/server/server_optimizer.hpp"
#include "messages/errors.hpp"

using namespace troupe;

BOOST_AUTO_TEST_SUITE(server_optimizer_tests)

BOOST_AUTO_TEST_CASE(sum_adds_what_was_pushed) {
  auto fn = make_update_fn(optimizer_settings{});
  std::vector<float> w{1, 2};
  fn(slice_id{1, 0}, w, std::vector<float>{3, 4}.data(), 2);
  BOOST_CHECK(w == std::vector<float>({4, 6}));
}

BOOST_AUTO_TEST_CASE(sgd_steps_along_the_mean_gradient) {
  optimizer_settings s;
  s.name = "sgd";
  s.lr = 0.5f;
  auto fn = make_update_fn(s);
  std::vector<float> w{1, 1};
  fn(slice_id{1, 0}, w, std::vector<float>{2, 4}.data(), 2); // mean {1, 2}
  BOOST_CHECK_CLOSE(w[0], 0.5f, 1e-4);
  BOOST_CHECK_SMALL(w[1], 1e-6f);
}

BOOST_AUTO_TEST_CASE(momentum_keeps_state_per_slice) {
  optimizer_settings s;
  s.name = "momentum";
  s.lr = 1.0f;
  s.momentum = 0.5f;
  auto fn = make_update_fn(s);
  std::vector<float> a{0}, b{0};
  fn(slice_id{1, 0}, a, std::vector<float>{1}.data(), 1); // v = 1, a = -1
  fn(slice_id{1, 0}, a, std::vector<float>{1}.data(), 1); // v = 1.5, a = -2.5
  fn(slice_id{2, 0}, b, std::vector<float>{1}.data(),
     1); // its own v = 1, b = -1
  BOOST_CHECK_CLOSE(a[0], -2.5f, 1e-4);
  BOOST_CHECK_CLOSE(b[0], -1.0f, 1e-4);
}

BOOST_AUTO_TEST_CASE(each_copy_of_a_hook_owns_its_state) {
  optimizer_settings s;
  s.name = "momentum";
  s.lr = 1.0f;
  s.momentum = 0.5f;
  auto first = make_update_fn(s);
  auto second = first; // as two servers would hold it
  std::vector<float> a{0}, b{0};
  first(slice_id{1, 0}, a, std::vector<float>{1}.data(), 1);
  first(slice_id{1, 0}, a, std::vector<float>{1}.data(), 1);
  second(slice_id{1, 0}, b, std::vector<float>{1}.data(),
         1); // a fresh velocity, not first's
  BOOST_CHECK_CLOSE(a[0], -2.5f, 1e-4);
  BOOST_CHECK_CLOSE(b[0], -1.0f, 1e-4);
}

BOOST_AUTO_TEST_CASE(the_schedule_decays_the_learning_rate) {
  optimizer_settings s;
  s.name = "sgd";
  s.lr = 1.0f;
  s.lr_decay_steps = 2;
  s.lr_decay = 0.5f;
  auto fn = make_update_fn(s);
  std::vector<float> w{0};
  for (int i = 0; i < 4; ++i)
    fn(slice_id{1, 0}, w, std::vector<float>{1}.data(),
       1); // steps of 1, 1, 0.5, 0.5
  BOOST_CHECK_CLOSE(w[0], -3.0f, 1e-4);
}

BOOST_AUTO_TEST_CASE(with_the_optimizer_on_workers_servers_only_average) {
  optimizer_settings s;
  s.name = "momentum";
  s.on = "worker";
  auto fn = make_update_fn(s);
  std::vector<float> w{5, 5};
  fn(slice_id{1, 0}, w, std::vector<float>{2, 4}.data(), 2);
  BOOST_CHECK(w == std::vector<float>({1, 2})); // the round's mean
  fn(slice_id{1, 0}, w, std::vector<float>{6, 6}.data(), 3);
  BOOST_CHECK(w == std::vector<float>({2, 2})); // replaced, not added
}

BOOST_AUTO_TEST_CASE(a_capture_puts_back_the_states_of_then) {
  // An undo image's optimizer half: capture(), updates (a slice seen
  // before, and one first seen after), restore(): both as at capture(),
  // and again after the same updates once more.
  optimizer_settings s;
  s.name = "momentum";
  s.lr = 1.0f;
  s.momentum = 0.5f;
  auto fn = make_update_fn(s);
  auto* opt = optimizer_of(fn);
  BOOST_REQUIRE(opt != nullptr);
  slice_id x{1, 0}, y{2, 0};
  std::vector<float> a{0}, b{0};
  fn(x, a, std::vector<float>{1}.data(), 1); // v = 1, a = -1
  opt->capture();
  for (int undo = 0; undo < 2; ++undo) {
    std::vector<float> a2 = a, b2 = b;
    fn(x, a2, std::vector<float>{1}.data(), 1); // v = 1.5, a = -2.5
    fn(x, a2, std::vector<float>{1}.data(), 1); // v = 1.75
    fn(y, b2, std::vector<float>{2}.data(), 1); // its v = 2
    BOOST_CHECK_EQUAL(a2[0], -4.25f);
    BOOST_CHECK_EQUAL(b2[0], -2.0f);
    opt->restore();
  }
  fn(x, a, std::vector<float>{1}.data(), 1); // from v = 1 again: v = 1.5
  fn(y, b, std::vector<float>{2}.data(), 1); // y's state is new again
  BOOST_CHECK_EQUAL(a[0], -2.5f);
  BOOST_CHECK_EQUAL(b[0], -2.0f);
}

BOOST_AUTO_TEST_CASE(bad_settings_name_the_flag) {
  optimizer_settings s;
  s.name = "rmsprop";
  BOOST_CHECK(validate(s) == errc::invalid_config);
  BOOST_CHECK(describe(validate(s)).find("--optimizer.name") !=
              std::string::npos);
  s = optimizer_settings{};
  s.lr = -1.0f;
  BOOST_CHECK(validate(s) == errc::invalid_config);
  s = optimizer_settings{};
  s.momentum = 1.0f;
  BOOST_CHECK(validate(s) == errc::invalid_config);
  s = optimizer_settings{};
  s.lr_decay = 0.0f;
  BOOST_CHECK(validate(s) == errc::invalid_config);
  BOOST_CHECK(!validate(optimizer_settings{}));
}

// What a node says of its optimizer when it joins: what the update reads,
// the same in every process for the same flags.
BOOST_AUTO_TEST_CASE(an_optimizer_says_what_its_update_reads) {
  optimizer_settings x;
  BOOST_CHECK_EQUAL(optimizer_fingerprint(x), "sum@server");
  x.name = "momentum";
  x.lr = 0.05f;
  x.lr_decay = 0.5f;
  x.lr_decay_steps = 1400;
  BOOST_CHECK_EQUAL(optimizer_fingerprint(x),
                    "momentum@server lr=0.05 weight-decay=0 decay=0.5/1400"
                    " momentum=0.9");
  x.lr_decay_steps = 0; // a decay that never acts is no difference
  x.on = "worker";
  BOOST_CHECK_EQUAL(optimizer_fingerprint(x),
                    "momentum@worker lr=0.05 weight-decay=0 momentum=0.9");
  BOOST_CHECK_EQUAL(optimizer_place(optimizer_fingerprint(x)), "worker");
  BOOST_CHECK_EQUAL(optimizer_place("sum@server"), "server");
  BOOST_CHECK_EQUAL(optimizer_place(""), "");
}

BOOST_AUTO_TEST_SUITE_END()
