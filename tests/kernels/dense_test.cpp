// The dense layer against plain reference loops in double precision.
#define BOOST_TEST_MODULE dense_tests
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/dense.hpp"
#include "kernels/random.hpp"
#include "tests/kernels/one_blas_thread.hpp"
#include "tests/kernels/random_values.hpp"

using namespace troupe;
using troupe::test::random_values;

namespace {

constexpr float not_written = std::numeric_limits<float>::quiet_NaN();

/// The operands and reference results of one layer.
struct layer_case {
  size_t batch, in, out;
  std::vector<float> x, w, b, dy;
  layer_case(size_t batch, size_t in, size_t out)
      : batch(batch), in(in), out(out), x(random_values(batch * in, 1)),
        w(random_values(in * out, 2)), b(random_values(out, 3)),
        dy(random_values(batch * out, 4)) {
    // nop
  }
  double x_at(size_t i, size_t k) const { return x[i * in + k]; }
  double w_at(size_t k, size_t j) const { return w[k * out + j]; }
  double dy_at(size_t i, size_t j) const { return dy[i * out + j]; }
};

/// True if every value is within rel * (1 + |want|) of the reference.
void check_close(const std::vector<float>& got, const std::vector<double>& want,
                 double rel = 1e-4) {
  BOOST_REQUIRE_EQUAL(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    BOOST_REQUIRE_MESSAGE(std::abs(got[i] - want[i]) <=
                              rel * (1.0 + std::abs(want[i])),
                          "at " << i << ": " << got[i] << " vs " << want[i]);
}

std::vector<double> reference_forward(const layer_case& c) {
  std::vector<double> y(c.batch * c.out);
  for (size_t i = 0; i < c.batch; ++i)
    for (size_t j = 0; j < c.out; ++j) {
      double acc = c.b[j];
      for (size_t k = 0; k < c.in; ++k)
        acc += c.x_at(i, k) * c.w_at(k, j);
      y[i * c.out + j] = acc;
    }
  return y;
}

std::vector<double> reference_dx(const layer_case& c) {
  std::vector<double> dx(c.batch * c.in, 0.0);
  for (size_t i = 0; i < c.batch; ++i)
    for (size_t k = 0; k < c.in; ++k)
      for (size_t j = 0; j < c.out; ++j)
        dx[i * c.in + k] += c.dy_at(i, j) * c.w_at(k, j);
  return dx;
}

std::vector<double> reference_dw(const layer_case& c) {
  std::vector<double> dw(c.in * c.out, 0.0);
  for (size_t k = 0; k < c.in; ++k)
    for (size_t j = 0; j < c.out; ++j)
      for (size_t i = 0; i < c.batch; ++i)
        dw[k * c.out + j] += c.x_at(i, k) * c.dy_at(i, j);
  return dw;
}

std::vector<double> reference_db(const layer_case& c) {
  std::vector<double> db(c.out, 0.0);
  for (size_t i = 0; i < c.batch; ++i)
    for (size_t j = 0; j < c.out; ++j)
      db[j] += c.dy_at(i, j);
  return db;
}

} // namespace

BOOST_AUTO_TEST_SUITE(dense_tests)

BOOST_AUTO_TEST_CASE(forward_matches_a_reference_loop) {
  for (auto c :
       {layer_case{7, 13, 5}, layer_case{1, 1, 1}, layer_case{64, 784, 256}}) {
    std::vector<float> y(c.batch * c.out, not_written); // must be overwritten
    auto st = dense_forward_cpu(c.x.data(), c.w.data(), c.b.data(), y.data(),
                                c.batch, c.in, c.out);
    BOOST_REQUIRE(st == kernel_status::ok);
    check_close(y, reference_forward(c));
  }
}

BOOST_AUTO_TEST_CASE(backward_matches_reference_loops) {
  for (auto c : {layer_case{7, 13, 5}, layer_case{32, 100, 10}}) {
    std::vector<float> dx(c.batch * c.in, not_written),
        dw(c.in * c.out, not_written), db(c.out, not_written);
    auto st = dense_backward_cpu(c.x.data(), c.w.data(), c.dy.data(), dx.data(),
                                 dw.data(), db.data(), c.batch, c.in, c.out);
    BOOST_REQUIRE(st == kernel_status::ok);
    check_close(dx, reference_dx(c));
    check_close(dw, reference_dw(c));
    check_close(db, reference_db(c));
  }
}

BOOST_AUTO_TEST_CASE(backward_without_dx_still_gives_weight_and_bias_grads) {
  layer_case c{5, 4, 3};
  std::vector<float> dw(c.in * c.out, not_written), db(c.out, not_written);
  auto st = dense_backward_cpu(c.x.data(), c.w.data(), c.dy.data(), nullptr,
                               dw.data(), db.data(), c.batch, c.in, c.out);
  BOOST_REQUIRE(st == kernel_status::ok);
  check_close(dw, reference_dw(c));
  check_close(db, reference_db(c));
}

BOOST_AUTO_TEST_CASE(row_blocks_add_up_to_the_whole_layer) {
  // Rows 0-3, 4-8, 9-12 of W as three blocks, of sizes not multiples of 4.
  layer_case c{7, 13, 5};
  const std::vector<size_t> first{0, 4, 9, 13};
  std::vector<float> y(c.batch * c.out), dx(c.batch * c.in, not_written),
      dw(c.in * c.out, not_written), db(c.out, not_written);
  for (size_t i = 0; i < c.batch; ++i)
    std::copy(c.b.begin(), c.b.end(), y.begin() + i * c.out);
  for (size_t k = 0; k + 1 < first.size(); ++k) {
    auto r0 = first[k], rows = first[k + 1] - r0;
    const float* wk = c.w.data() + r0 * c.out;
    BOOST_REQUIRE(dense_forward_block_cpu(c.x.data() + r0, c.in, wk, y.data(),
                                          c.batch, rows,
                                          c.out) == kernel_status::ok);
    BOOST_REQUIRE(dense_backward_block_cpu(c.x.data() + r0, c.in, wk,
                                           c.dy.data(), dx.data() + r0,
                                           dw.data() + r0 * c.out, c.batch,
                                           rows, c.out) == kernel_status::ok);
  }
  BOOST_REQUIRE(dense_bias_grad_cpu(c.dy.data(), db.data(), c.batch, c.out) ==
                kernel_status::ok);
  check_close(y, reference_forward(c));
  check_close(dx, reference_dx(c));
  check_close(dw, reference_dw(c));
  check_close(db, reference_db(c));
}

BOOST_AUTO_TEST_CASE(input_and_weight_gradients_come_apart) {
  // A pipeline stage makes dx (B) first and dw (W) later: each alone
  // equals its part of the whole backward, and leaves the other unwritten.
  layer_case c{5, 6, 3};
  std::vector<float> dx(c.batch * c.in, not_written),
      dw(c.in * c.out, not_written);
  BOOST_REQUIRE(dense_backward_block_cpu(
                    c.x.data(), c.in, c.w.data(), c.dy.data(), dx.data(),
                    nullptr, c.batch, c.in, c.out) == kernel_status::ok);
  check_close(dx, reference_dx(c));
  BOOST_TEST(std::isnan(dw.front()));
  std::fill(dx.begin(), dx.end(), not_written);
  BOOST_REQUIRE(dense_backward_block_cpu(
                    c.x.data(), c.in, c.w.data(), c.dy.data(), nullptr,
                    dw.data(), c.batch, c.in, c.out) == kernel_status::ok);
  check_close(dw, reference_dw(c));
  BOOST_TEST(std::isnan(dx.front()));
}

BOOST_AUTO_TEST_CASE(row_block_forms_reject_bad_strides_and_nulls) {
  layer_case c{2, 4, 3};
  std::vector<float> y(c.batch * c.out), dw(c.in * c.out);
  // A stride shorter than the block's rows would read past each row.
  BOOST_TEST(
      (dense_forward_block_cpu(c.x.data(), 2, c.w.data(), y.data(), c.batch, 4,
                               c.out) == kernel_status::bad_input));
  BOOST_TEST((dense_backward_block_cpu(c.x.data(), 4, c.w.data(), c.dy.data(),
                                       nullptr, nullptr, c.batch, 4,
                                       c.out) == kernel_status::bad_input));
  BOOST_TEST((dense_bias_grad_cpu(nullptr, dw.data(), 1, 1) ==
              kernel_status::bad_input));
}

BOOST_AUTO_TEST_CASE(tensor_forms_match_the_pointer_forms_and_resize_outputs) {
  layer_case c{6, 8, 4};
  tensor x({c.batch, 2, 4}, c.x), w({c.in, c.out}, c.w), b({c.out}, c.b),
      dy({c.batch, c.out}, c.dy), y, dx, dw, db;
  BOOST_REQUIRE(dense_forward_cpu(x, w, b, y) == kernel_status::ok);
  BOOST_TEST(y.shape() == (std::vector<size_t>{c.batch, c.out}));
  check_close(y.values(), reference_forward(c));
  BOOST_REQUIRE(dense_backward_cpu(x, w, dy, &dx, dw, db) == kernel_status::ok);
  BOOST_TEST(dx.shape() == x.shape());
  check_close(dx.values(), reference_dx(c));
  check_close(dw.values(), reference_dw(c));
  check_close(db.values(), reference_db(c));
}

BOOST_AUTO_TEST_CASE(tensor_forms_reject_mismatched_shapes) {
  tensor x({4, 3}), w({3, 2}), b({2}), y, dw, db;
  BOOST_CHECK(dense_forward_cpu(x, tensor({4, 2}), b, y) ==
              kernel_status::shape_mismatch);
  BOOST_CHECK(dense_forward_cpu(x, w, tensor({3}), y) ==
              kernel_status::shape_mismatch);
  BOOST_CHECK(dense_forward_cpu(x, tensor({3, 2, 1}), b, y) ==
              kernel_status::shape_mismatch);
  BOOST_CHECK(dense_backward_cpu(x, w, tensor({4, 3}), nullptr, dw, db) ==
              kernel_status::shape_mismatch);
  BOOST_CHECK(dense_backward_cpu(x, w, tensor({5, 2}), nullptr, dw, db) ==
              kernel_status::shape_mismatch);
}

BOOST_AUTO_TEST_CASE(zero_sizes_and_null_pointers_are_bad_input) {
  float x[4] = {1, 2, 3, 4}, w[4] = {1, 0, 0, 1}, b[2] = {0, 0}, y[4];
  BOOST_CHECK(dense_forward_cpu(x, w, b, y, 0, 2, 2) ==
              kernel_status::bad_input);
  BOOST_CHECK(dense_forward_cpu(x, w, b, y, 2, 0, 2) ==
              kernel_status::bad_input);
  BOOST_CHECK(dense_forward_cpu(nullptr, w, b, y, 2, 2, 2) ==
              kernel_status::bad_input);
  BOOST_CHECK(dense_backward_cpu(x, w, y, nullptr, nullptr, b, 2, 2, 2) ==
              kernel_status::bad_input);
  BOOST_CHECK(dense_forward_cpu(x, w, b, y, 2, 2, 2) == kernel_status::ok);
  BOOST_TEST(y[3] == 4.0f); // identity weights
}

BOOST_AUTO_TEST_SUITE_END()
