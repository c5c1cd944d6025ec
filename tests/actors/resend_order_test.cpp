// The order of a kv client's resends: operations go again in the order
// they were asked for, whatever order they failed in, and one a live
// server failed (its pause over) waits behind one asked for before it.
#define BOOST_TEST_MODULE resend_order_tests
#include <boost/test/unit_test.hpp>

#include "tests/test_support.hpp"

#include <string>
#include <vector>

#include "actors/kv_client.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

/// A parked resend of operation `seq` that appends `seq` to `ran` when it
/// runs: parked in view `epoch`, with a pause over at `retry_at` if given.
kv_client_state::resend
parked(uint64_t seq, uint64_t epoch, std::vector<uint64_t>& ran,
       std::optional<clock_type::time_point> retry_at = std::nullopt) {
  kv_client_state::resend r;
  r.after_epoch = epoch;
  r.deadline = clock_type::now() + 10s;
  r.run = [seq, &ran] { ran.push_back(seq); };
  r.fail = [](caf::error) {};
  r.retry_at = retry_at;
  r.seq = seq;
  return r;
}

/// Runs what take_due_resends takes, in its order; returns what ran.
std::vector<uint64_t> run_due(std::vector<kv_client_state::resend>& xs,
                              uint64_t epoch, clock_type::time_point now,
                              bool all, std::vector<uint64_t>& ran) {
  ran.clear();
  for (auto& r : take_due_resends(xs, epoch, now, all))
    r.run();
  return ran;
}

std::vector<uint64_t> seqs(const std::vector<kv_client_state::resend>& xs) {
  std::vector<uint64_t> out;
  for (auto& x : xs)
    out.push_back(x.seq);
  return out;
}

} // namespace

BOOST_AUTO_TEST_SUITE(resend_order_tests)

BOOST_AUTO_TEST_CASE(a_view_runs_them_in_the_order_they_were_asked_for) {
  // Clock c + 1 failed (and was parked) before clock c's retry failed.
  std::vector<uint64_t> ran;
  std::vector<kv_client_state::resend> xs;
  xs.push_back(parked(8, 4, ran));
  xs.push_back(parked(7, 4, ran));
  xs.push_back(parked(9, 5, ran)); // parked in the new view: waits
  auto got = run_due(xs, 5, clock_type::now(), false, ran);
  BOOST_CHECK((got == std::vector<uint64_t>{7, 8}));
  BOOST_CHECK((seqs(xs) == std::vector<uint64_t>{9}));
  got = run_due(xs, 5, clock_type::now(), true, ran); // `all`
  BOOST_CHECK((got == std::vector<uint64_t>{9}));
  BOOST_CHECK(xs.empty());
}

BOOST_AUTO_TEST_CASE(a_retry_waits_behind_an_earlier_operation) {
  auto now = clock_type::now();
  std::vector<uint64_t> ran;
  std::vector<kv_client_state::resend> xs;
  // 3 waits for a view; 4 and 5 were failed by a live server, their
  // pauses over; 2, failed by a live server too, is not due yet.
  xs.push_back(parked(5, 4, ran, now - 1ms));
  xs.push_back(parked(4, 4, ran, now - 1ms));
  xs.push_back(parked(3, 4, ran));
  auto got = run_due(xs, 4, now, false, ran);
  BOOST_CHECK_MESSAGE(got.empty(), "ran " << got.size() << " ahead of 3");
  BOOST_CHECK((seqs(xs) == std::vector<uint64_t>{3, 4, 5}));
  xs.push_back(parked(2, 4, ran, now + 1s));
  xs.push_back(parked(1, 4, ran, now - 1ms));
  got = run_due(xs, 4, now, false, ran);
  BOOST_CHECK((got == std::vector<uint64_t>{1})); // nothing before it
  BOOST_CHECK((seqs(xs) == std::vector<uint64_t>{2, 3, 4, 5}));
  // The view comes: all go, in order; the pauses no longer matter.
  got = run_due(xs, 5, now, false, ran);
  BOOST_CHECK((got == std::vector<uint64_t>{2, 3, 4, 5}));
  BOOST_CHECK(xs.empty());
}

BOOST_AUTO_TEST_CASE(retries_alone_go_when_their_pauses_are_over) {
  auto now = clock_type::now();
  std::vector<uint64_t> ran;
  std::vector<kv_client_state::resend> xs;
  xs.push_back(parked(2, 4, ran, now - 1ms));
  xs.push_back(parked(1, 4, ran, now - 2ms));
  xs.push_back(parked(3, 4, ran, now + 1s));
  auto got = run_due(xs, 4, now, false, ran);
  BOOST_CHECK((got == std::vector<uint64_t>{1, 2}));
  got = run_due(xs, 4, now + 2s, false, ran);
  BOOST_CHECK((got == std::vector<uint64_t>{3}));
}

BOOST_AUTO_TEST_SUITE_END()
