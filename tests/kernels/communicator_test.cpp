// The communicator's CPU stand-in (kernels/comm/communicator.hpp): four
// "devices" on four threads sum and broadcast as one device would, round
// after round; a device that does not come, or ranks that disagree, fail
// the collective on every rank with a line naming it, and nothing hangs.
#define BOOST_TEST_MODULE communicator_test
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/comm/communicator.hpp"
#include "kernels/random.hpp"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

/// Runs `body(rank)` on a thread per rank; returns each rank's outcome.
std::vector<comm_status>
on_every_rank(int ranks, const std::function<comm_status(int)>& body) {
  std::vector<comm_status> out(static_cast<size_t>(ranks));
  std::vector<std::thread> ts;
  for (int r = 0; r < ranks; ++r)
    ts.emplace_back([&out, &body, r] { out[size_t(r)] = body(r); });
  for (auto& t : ts)
    t.join();
  return out;
}

} // namespace

BOOST_AUTO_TEST_CASE(four_devices_sum_and_broadcast_round_after_round) {
  const int ranks = 4;
  const size_t n = 10007;
  auto group = make_cpu_group(ranks, 10s);
  BOOST_REQUIRE_EQUAL(group.size(), size_t(ranks));
  const int rounds = 50;
  // data[round][rank]; the expected sum adds in rank order.
  std::vector<std::vector<std::vector<float>>> data(rounds);
  for (int k = 0; k < rounds; ++k)
    for (int r = 0; r < ranks; ++r)
      data[size_t(k)].push_back(random_floats(n, uint32_t(k * ranks + r)));
  std::vector<std::vector<float>> sums(rounds);
  for (int k = 0; k < rounds; ++k) {
    sums[size_t(k)] = data[size_t(k)][0];
    for (int r = 1; r < ranks; ++r)
      for (size_t i = 0; i < n; ++i)
        sums[size_t(k)][i] += data[size_t(k)][size_t(r)][i];
  }
  for (int r = 0; r < ranks; ++r) {
    BOOST_CHECK_EQUAL(group[size_t(r)]->rank(), r);
    BOOST_CHECK_EQUAL(group[size_t(r)]->size(), ranks);
  }
  auto got = data;
  // No Boost.Test check on the ranks' threads: it is not thread-safe.
  auto results = on_every_rank(ranks, [&](int r) {
    auto& c = *group[size_t(r)];
    for (int k = 0; k < rounds; ++k) {
      auto& mine = got[size_t(k)][size_t(r)];
      comm_status st = k % 2 == 0 ? c.all_reduce_sum(mine.data(), n)
                                  : c.broadcast(mine.data(), n, k % ranks);
      if (!st.ok())
        return st;
    }
    return comm_status{};
  });
  for (auto& st : results)
    BOOST_REQUIRE_MESSAGE(st.ok(), st.error);
  for (int k = 0; k < rounds; ++k)
    for (int r = 0; r < ranks; ++r) {
      auto& want =
          k % 2 == 0 ? sums[size_t(k)] : data[size_t(k)][size_t(k % ranks)];
      BOOST_CHECK_MESSAGE(got[size_t(k)][size_t(r)] == want,
                          "round " << k << ", rank " << r);
    }
}

BOOST_AUTO_TEST_CASE(a_device_that_does_not_come_fails_the_collective_for_all) {
  auto group = make_cpu_group(3, 200ms);
  std::vector<float> a(5, 1.0f), b(5, 2.0f);
  // Rank 2 never calls.
  auto results = on_every_rank(2, [&](int r) {
    return group[size_t(r)]->all_reduce_sum(r == 0 ? a.data() : b.data(), 5);
  });
  for (auto& st : results) {
    BOOST_CHECK(!st.ok());
    BOOST_CHECK_MESSAGE(
        st.error.find("rank(s) 2 did not join") != std::string::npos, st.error);
  }
  BOOST_CHECK(a == std::vector<float>(5, 1.0f)); // nothing half written
  // The group stays failed: a later call says so at once.
  auto later = group[0]->broadcast(a.data(), 5, 0);
  BOOST_CHECK(!later.ok() && later.error.find("failed") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(ranks_that_disagree_fail_on_every_rank) {
  auto group = make_cpu_group(2, 10s);
  std::vector<float> a(4), b(8);
  auto results = on_every_rank(2, [&](int r) {
    return r == 0 ? group[0]->all_reduce_sum(a.data(), a.size())
                  : group[1]->all_reduce_sum(b.data(), b.size());
  });
  for (auto& st : results)
    BOOST_CHECK_MESSAGE(
        !st.ok() && st.error.find("disagree") != std::string::npos, st.error);
  auto bad_root = make_cpu_group(2, 10s);
  results = on_every_rank(
      2, [&](int r) { return bad_root[size_t(r)]->broadcast(a.data(), 4, 5); });
  for (auto& st : results)
    BOOST_CHECK_MESSAGE(!st.ok() &&
                            st.error.find("no such rank") != std::string::npos,
                        st.error);
}

BOOST_AUTO_TEST_CASE(one_device_is_its_own_sum) {
  auto group = make_cpu_group(1, 1s);
  std::vector<float> a{1, 2, 3};
  BOOST_REQUIRE(group[0]->all_reduce_sum(a.data(), 3).ok());
  BOOST_CHECK(a == (std::vector<float>{1, 2, 3}));
  BOOST_CHECK(make_cpu_group(0, 1s).empty());
}
