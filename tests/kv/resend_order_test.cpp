// The order of a kv client's resends: operations go again in the order
// they were asked for, whatever order they failed in, and one a live
// server failed (its pause over) waits behind one asked for before it.
#define BOOST_TEST_MODULE resend_order_tests
#include <boost/test/unit_test.hpp>

#include "tests/test_support.hpp"

#include <string>
#include <vector>

#include "actors/kv/kv_client.hpp"

using namespace troupe;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

/// Parked resends that record, when they run, their operation's seq.
struct parked_resends {
  clock_type::time_point now = clock_type::now();
  std::vector<uint64_t> ran;
  std::vector<kv_client_state::resend> xs;
  /// Parks operation `seq` in view `epoch`, with a pause over at
  /// `retry_at` if given (a live server failed it).
  void park(uint64_t seq, uint64_t epoch,
            std::optional<clock_type::time_point> retry_at = std::nullopt) {
    kv_client_state::resend r;
    r.after_epoch = epoch;
    r.deadline = now + 10s;
    r.run = [seq, this] { ran.push_back(seq); };
    r.fail = [](caf::error) {};
    r.retry_at = retry_at;
    r.seq = seq;
    xs.push_back(std::move(r));
  }
  /// Runs what take_due_resends takes, in its order; returns what ran.
  std::vector<uint64_t> run_due(uint64_t epoch, clock_type::time_point at,
                                bool all = false) {
    ran.clear();
    for (auto& r : take_due_resends(xs, epoch, at, all))
      r.run();
    return ran;
  }
  /// The operations still parked, in their order.
  std::vector<uint64_t> left() const {
    std::vector<uint64_t> out;
    for (auto& x : xs)
      out.push_back(x.seq);
    return out;
  }
};

using seqs = std::vector<uint64_t>;

} // namespace

BOOST_AUTO_TEST_SUITE(resend_order_tests)

BOOST_AUTO_TEST_CASE(a_view_runs_them_in_the_order_they_were_asked_for) {
  // Clock c + 1 failed (and was parked) before clock c's retry failed.
  parked_resends p;
  p.park(8, 4);
  p.park(7, 4);
  p.park(9, 5); // parked in the new view: waits
  BOOST_CHECK((p.run_due(5, p.now) == seqs{7, 8}));
  BOOST_CHECK((p.left() == seqs{9}));
  BOOST_CHECK((p.run_due(5, p.now, true) == seqs{9})); // `all`
  BOOST_CHECK(p.xs.empty());
}

BOOST_AUTO_TEST_CASE(a_retry_waits_behind_an_earlier_operation) {
  parked_resends p;
  // 3 waits for a view; 4 and 5 were failed by a live server, their
  // pauses over; 2, failed by a live server too, is not due yet.
  p.park(5, 4, p.now - 1ms);
  p.park(4, 4, p.now - 1ms);
  p.park(3, 4);
  auto got = p.run_due(4, p.now);
  BOOST_CHECK_MESSAGE(got.empty(), "ran " << got.size() << " ahead of 3");
  BOOST_CHECK((p.left() == seqs{3, 4, 5}));
  p.park(2, 4, p.now + 1s);
  p.park(1, 4, p.now - 1ms);
  BOOST_CHECK((p.run_due(4, p.now) == seqs{1})); // nothing before it
  BOOST_CHECK((p.left() == seqs{2, 3, 4, 5}));
  // The view comes: all go, in order; the pauses no longer matter.
  BOOST_CHECK((p.run_due(5, p.now) == seqs{2, 3, 4, 5}));
  BOOST_CHECK(p.xs.empty());
}

BOOST_AUTO_TEST_CASE(retries_alone_go_when_their_pauses_are_over) {
  parked_resends p;
  p.park(2, 4, p.now - 1ms);
  p.park(1, 4, p.now - 2ms);
  p.park(3, 4, p.now + 1s);
  BOOST_CHECK((p.run_due(4, p.now) == seqs{1, 2}));
  BOOST_CHECK((p.run_due(4, p.now + 2s) == seqs{3}));
}

BOOST_AUTO_TEST_SUITE_END()
